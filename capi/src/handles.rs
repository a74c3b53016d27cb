//! Handle validity: every handle C holds (communicator, configuration, request, all-gather
//! result) is a slot index and a generation in a process-wide registry, never the address
//! of the object, so a stale handle is recognised without reading freed memory.
//!
//! A handle is the 64-bit value `generation << 32 | index` (the generation is odd, so a
//! handle is never NULL). Slot `index` holds the object's kind, its address and its
//! generation: odd while live, even while free. Freeing a handle increments the slot's
//! generation, so the old handle no longer matches, however the slot and the object's
//! memory are reused later. A slot whose generation reaches the top of its range is retired
//! (never reused), so two handles never alias: a stale handle is refused always, not
//! mostly.
//!
//! Slots live in segments of 2^16 slots that are never freed (made on first use; the
//! segment of slot `i` is `i >> 16`), so a lookup is two loads and a compare, without a
//! lock. Slots are taken and given back under a
//! mutex, except requests': each communicator keeps the free slots it took (in batches of
//! [`BATCH`]) and reuses them without the lock, as a communicator is used by one thread at a
//! time; they go back to the registry when it is freed. Threading follows the C contract: a
//! handle is not freed by one thread while another uses it.

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU8, Ordering};

use parking_lot::Mutex;

use crate::error::Fail;

#[cfg(not(target_pointer_width = "64"))]
compile_error!("libballast's handles are 64-bit values: a 64-bit target is needed");

/// The kind of object a slot holds (a handle of one kind given where another is expected
/// is refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Comm = 1,
    Config = 2,
    Request = 3,
    Gathered = 4,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Comm => "communicator",
            Kind::Config => "configuration",
            Kind::Request => "request",
            Kind::Gathered => "collective result",
        }
    }

    /// The article before [`Kind::name`] (every name starts with a consonant).
    pub(crate) fn article(self) -> &'static str {
        "a"
    }
}

/// One slot of the registry; all zeros is a valid free slot of generation 0 (segments are
/// made zeroed).
struct Slot {
    /// Odd while live (the generation of its handle), even while free.
    generation: AtomicU32,
    kind: AtomicU8,
    object: AtomicPtr<()>,
}

/// Slots per segment (log2).
const SEG_BITS: u32 = 16;
/// Slots per segment.
const SEG_SLOTS: usize = 1 << SEG_BITS;
/// Segments: enough for every `u32` index (the table is 512 KiB of zeros until used).
const SEGMENTS: usize = 1 << (32 - SEG_BITS);
/// The generation at which a freed slot is retired instead of reused.
const RETIRE: u32 = u32::MAX - 1;
/// Slots a communicator takes from the registry at a time for its requests.
pub(crate) const BATCH: usize = 64;

/// The segments; a null entry is a segment not made yet.
static SEGS: [AtomicPtr<Slot>; SEGMENTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SEGMENTS];

/// The free slots and the next slot never used.
struct Free {
    free: Vec<u32>,
    next: u32,
}

static FREE: Mutex<Free> = Mutex::new(Free {
    free: Vec::new(),
    next: 0,
});

/// Segment and offset of slot `index`.
#[inline(always)]
fn locate(index: u32) -> (usize, usize) {
    ((index >> SEG_BITS) as usize, index as usize & (SEG_SLOTS - 1))
}

/// Slot `index`, if its segment exists.
#[inline(always)]
fn slot(index: u32) -> Option<&'static Slot> {
    let (k, off) = locate(index);
    // `k < SEGMENTS` for every u32 index: no bounds check is needed, none is made.
    let seg = SEGS[k].load(Ordering::Acquire);
    if seg.is_null() {
        return None;
    }
    // SAFETY: a segment, once published, holds `SEG_SLOTS` slots and is never freed;
    // `off < SEG_SLOTS` by `locate`.
    Some(unsafe { &*seg.add(off) })
}

/// Makes segment `k` (under the [`FREE`] lock). None when memory cannot be had.
fn grow(k: usize) -> Option<()> {
    if !SEGS.get(k)?.load(Ordering::Acquire).is_null() {
        return Some(());
    }
    // Zeroed memory from the allocator (`calloc`): an all-zero `Slot` is a free slot of
    // generation 0, and the pages of a large zeroed block are the kernel's zero pages until
    // written, so a process that holds a few handles keeps a few KiB of the segment's
    // 1 MiB resident, not all of it (issue 36 measured the whole 1 MiB per rank).
    let layout = std::alloc::Layout::array::<Slot>(SEG_SLOTS).ok()?;
    // SAFETY: `layout` has a non-zero size (SEG_SLOTS > 0 slots of 16 bytes).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Slot>();
    if p.is_null() {
        return None;
    }
    SEGS[k].store(p, Ordering::Release);
    Some(())
}

/// Takes up to `want` free slots (at least one, or none when the registry is out of
/// slots or memory) into `into`.
pub(crate) fn take(into: &mut Vec<u32>, want: usize) -> bool {
    let mut f = FREE.lock();
    if into.try_reserve(want).is_err() {
        return false;
    }
    let before = into.len();
    while into.len() - before < want {
        if let Some(i) = f.free.pop() {
            into.push(i);
            continue;
        }
        let i = f.next;
        if i == u32::MAX || grow(locate(i).0).is_none() {
            break;
        }
        f.next += 1;
        into.push(i);
    }
    into.len() > before
}

/// Gives free slots back to the registry.
pub(crate) fn give_back(slots: &mut Vec<u32>) {
    if slots.is_empty() {
        return;
    }
    let mut f = FREE.lock();
    // Never fails for want of memory: a slot that cannot be listed is left unused.
    if f.free.try_reserve(slots.len()).is_ok() {
        f.free.append(slots);
    }
    slots.clear();
}

/// The handle of live slot `index` with generation `gen`.
#[inline(always)]
fn handle_of(index: u32, gen: u32) -> usize {
    ((gen as usize) << 32) | index as usize
}

/// Makes free slot `index` live with `object` of `kind`; returns its handle.
#[inline(always)]
pub(crate) fn open_slot(index: u32, kind: Kind, object: *mut ()) -> usize {
    let s = slot(index).expect("a slot taken from the registry exists");
    s.kind.store(kind as u8, Ordering::Relaxed);
    s.object.store(object, Ordering::Relaxed);
    let gen = s.generation.load(Ordering::Relaxed) + 1;
    s.generation.store(gen, Ordering::Release);
    handle_of(index, gen)
}

/// Ends live slot `index` (its handle is refused from now on); returns whether the slot
/// may be reused (false once it is retired).
#[inline(always)]
pub(crate) fn close_slot(index: u32) -> bool {
    let s = slot(index).expect("a live slot exists");
    let gen = s.generation.load(Ordering::Relaxed) + 1;
    s.generation.store(gen, Ordering::Release);
    s.object.store(std::ptr::null_mut(), Ordering::Relaxed);
    gen < RETIRE
}

/// Why a handle was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The handle is not of a live object: never issued, or freed (stale).
    Stale,
    /// A live handle of another kind.
    Kind(Kind),
}

/// The object of live handle `h` of kind `kind`, and its slot index.
#[inline(always)]
pub(crate) fn resolve(h: usize, kind: Kind) -> Result<(*mut (), u32), Refused> {
    let (index, gen) = (h as u32, (h >> 32) as u32);
    let s = slot(index).ok_or(Refused::Stale)?;
    if gen & 1 == 0 || s.generation.load(Ordering::Acquire) != gen {
        return Err(Refused::Stale);
    }
    let k = s.kind.load(Ordering::Relaxed);
    if k != kind as u8 {
        return Err(Refused::Kind(kind_of(k)));
    }
    Ok((s.object.load(Ordering::Relaxed), index))
}

#[cold]
fn kind_of(k: u8) -> Kind {
    match k {
        1 => Kind::Comm,
        2 => Kind::Config,
        3 => Kind::Request,
        _ => Kind::Gathered,
    }
}

/// Registers `object` of `kind` (a slot of the registry's own); returns its handle, or
/// None when no slot can be had (out of memory).
pub(crate) fn register(kind: Kind, object: *mut ()) -> Option<usize> {
    let mut one = Vec::new();
    if !take(&mut one, 1) {
        return None;
    }
    Some(open_slot(one[0], kind, object))
}

/// Ends handle `h` of `kind` and returns its object (the caller frees it).
pub(crate) fn unregister(h: usize, kind: Kind) -> Result<*mut (), Refused> {
    let (object, index) = resolve(h, kind)?;
    if close_slot(index) {
        give_back(&mut vec![index]);
    }
    Ok(object)
}

/// The object of handle `h` of `kind`, given to `func` as argument `what`: NULL, a stale
/// handle and one of another kind are `BALLAST_EINVAL`.
#[inline(always)]
pub(crate) fn object<T>(func: &str, what: &str, h: *const T, kind: Kind) -> Result<*mut T, Fail> {
    if h.is_null() {
        return Err(Fail::null(func, what));
    }
    match resolve(h as usize, kind) {
        Ok((p, _)) => Ok(p.cast()),
        Err(r) => Err(refused(func, what, kind, r)),
    }
}

/// The error for a refused handle (out of line: every call's hot path stays short).
#[cold]
#[inline(never)]
pub(crate) fn refused(func: &str, what: &str, kind: Kind, r: Refused) -> Fail {
    match r {
        Refused::Stale => Fail::inval(format!(
            "{func}: {what} is not a live {} handle (freed already, never made, or{})",
            kind.name(),
            match kind {
                Kind::Comm => " of a ballast_local_run that returned",
                Kind::Request => " of a communicator that was freed",
                _ => " overwritten",
            }
        )),
        Refused::Kind(k) => Fail::inval(format!(
            "{func}: {what} is {} {} handle, not {} {} handle",
            k.article(),
            k.name(),
            kind.article(),
            kind.name()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_the_indices_without_gaps() {
        let mut want = (0usize, 0usize);
        for i in 0..300_000u32 {
            let got = locate(i);
            if got.0 != want.0 {
                assert_eq!(want.1, SEG_SLOTS, "segment {} is full before the next", want.0);
                want = (got.0, 0);
            }
            assert_eq!(got, want, "index {i}");
            want.1 += 1;
        }
        assert_eq!(locate(u32::MAX), (SEGMENTS - 1, SEG_SLOTS - 1));
    }

    #[test]
    fn a_freed_handle_is_stale_even_when_its_slot_is_reused() {
        let mut x = 5u8;
        let p: *mut () = (&mut x as *mut u8).cast();
        let a = register(Kind::Config, p).unwrap();
        assert_eq!(resolve(a, Kind::Config).unwrap().0, p);
        assert_eq!(resolve(a, Kind::Comm), Err(Refused::Kind(Kind::Config)));
        assert_eq!(unregister(a, Kind::Config).unwrap(), p);
        assert_eq!(resolve(a, Kind::Config), Err(Refused::Stale));
        assert_eq!(unregister(a, Kind::Config), Err(Refused::Stale));
        // Reuse slots until `a`'s comes back: the new handle differs, the old stays refused.
        let mut seen = Vec::new();
        let reused = loop {
            let b = register(Kind::Config, p).unwrap();
            if b as u32 == a as u32 {
                break b;
            }
            seen.push(b);
        };
        assert_ne!(reused, a);
        assert_eq!(resolve(a, Kind::Config), Err(Refused::Stale));
        assert!(resolve(reused, Kind::Config).is_ok());
        for h in seen.into_iter().chain([reused]) {
            unregister(h, Kind::Config).unwrap();
        }
        assert_eq!(resolve(0, Kind::Config), Err(Refused::Stale), "never issued");
        assert_eq!(
            resolve(usize::MAX, Kind::Config),
            Err(Refused::Stale),
            "never issued"
        );
    }

    #[test]
    fn a_slot_at_the_top_generation_is_retired() {
        let a = register(Kind::Gathered, std::ptr::null_mut()).unwrap();
        let index = a as u32;
        slot(index)
            .unwrap()
            .generation
            .store(RETIRE - 1, Ordering::Relaxed);
        assert!(!close_slot(index), "retired, not reused");
    }

    /// The first segment is 1 MiB of address space, but only the pages of the slots handed
    /// out are resident: a process holding a few handles does not pay the whole segment
    /// (issue 36: it was 1 MiB of every rank's 2.1 MB on a 64-process node).
    #[test]
    fn a_segment_is_resident_only_where_slots_were_used() {
        let a = register(Kind::Config, std::ptr::null_mut()).unwrap();
        let seg = SEGS[0].load(Ordering::Acquire) as usize;
        let page = 4096usize;
        let (start, end) = (seg & !(page - 1), seg + SEG_SLOTS * std::mem::size_of::<Slot>());
        let pages = (end - start).div_ceil(page);
        let mut vec = vec![0u8; pages];
        // SAFETY: `start..end` lies within the mapping that holds segment 0 (allocated,
        // never freed); `vec` has one byte per page of it.
        let rc = unsafe { libc::mincore(start as *mut libc::c_void, end - start, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        let resident = vec.iter().filter(|b| **b & 1 == 1).count();
        // Read after `mincore`: slots other tests took meanwhile are counted too.
        let used = FREE.lock().next as usize;
        let touched = (used * std::mem::size_of::<Slot>()).div_ceil(page) + 2;
        assert!(
            resident <= touched,
            "{resident} of {pages} pages resident for {used} slots handed out (at most {touched})"
        );
        unregister(a, Kind::Config).unwrap();
    }
}
