//! A small safe layer over libibverbs (the `rdma-sys` bindings, re-exported as [`sys`]):
//! the only place of Ballast's verbs transport with FFI to libibverbs, kept in a crate of its
//! own (as rust-ibverbs keeps its -sys crate apart) so that the runtime's verbs fabric and
//! the raw ping-pong of `ballast-bench` both build on it. It owns the device list and an
//! opened device ([`DeviceList`], [`Context`]), the protection domain ([`Pd`]), completion
//! queues ([`Cq`]), shared receive queues ([`Srq`], plain or XRC), XRC domains ([`Xrcd`]),
//! address handles ([`Ah`], for UD sends), memory regions ([`Mr`], and [`Slots`]: an owned,
//! registered area of fixed-size slots), and the typestate queue pair ([`Qp`], in `qp`)
//! whose transition attributes are built by the pure functions of [`attr`].
//!
//! **Lifetimes.** Every object holds a reference count on what it was made from (a QP on its
//! PD, CQs, SRQ or XRC domain; an SRQ on its PD and CQ; a PD on its context), so libibverbs
//! objects are destroyed children first whatever order their owners drop them in. The one
//! lifetime the types cannot see is that of memory registered from outside
//! ([`Mr::register`] is `unsafe` for it); [`Slots`] own their memory.
//!
//! **Posting.** Work requests name memory by address and key. A receive can only target a
//! [`Slots`] area (bounds-checked); a send names an `lkey`, and the device reads only memory
//! of the region with that key, which outlives its registration.
//!
//! Errors: every failing call is [`IbvError::Call`] naming the verb and its object; the
//! runtime adds the rank and peer when it wraps it. Every unsafe block says why it is sound.

pub mod attr;
mod error;
mod qp;

use std::ffi::CStr;
use std::fs::File;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::sync::Arc;

pub use rdma_sys as sys;
use rdma_sys::*;

pub use error::{IbvError, Result};
pub use qp::{Failed, Init, Qp, QpCaps, QpKind, Receiving, Reset, Rtr, Rts, SendWr, Sge};

/// `O_CREAT` of Linux (fcntl.h), for an XRC domain's file.
const O_CREAT: i32 = 0o100;

/// The devices libibverbs sees; freed on drop (contexts opened from it stay valid).
pub struct DeviceList {
    list: *mut *mut ibv_device,
    n: usize,
}

impl DeviceList {
    /// The list, or the error `ibv_get_device_list` gave (ENOSYS without kernel support).
    pub fn get() -> std::result::Result<DeviceList, std::io::Error> {
        let mut n: i32 = 0;
        // SAFETY: ibv_get_device_list writes the count into `n` and returns a NULL-terminated
        // array freed in Drop with ibv_free_device_list; NULL means failure.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(std::io::Error::last_os_error());
        }
        Ok(DeviceList {
            list,
            n: n.max(0) as usize,
        })
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when libibverbs sees no device.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn device(&self, i: usize) -> *mut ibv_device {
        assert!(i < self.n, "device {i} of {}", self.n);
        // SAFETY: `i < n` entries of the list are valid device pointers while the list lives.
        unsafe { *self.list.add(i) }
    }

    /// Name of device `i` (`rxe0`, `mlx5_0`). Panics if `i >= len()`.
    pub fn name(&self, i: usize) -> String {
        // SAFETY: the name is a NUL-terminated string owned by the device, copied here.
        unsafe { CStr::from_ptr(ibv_get_device_name(self.device(i))) }
            .to_string_lossy()
            .into_owned()
    }

    /// Opens device `i`. Panics if `i >= len()`.
    pub fn open(&self, i: usize) -> Result<Context> {
        let name = self.name(i);
        // SAFETY: the device belongs to the live list; the context is closed in Ctx::drop.
        let ctx = unsafe { ibv_open_device(self.device(i)) };
        if ctx.is_null() {
            return Err(IbvError::last("ibv_open_device", name));
        }
        Ok(Context(Arc::new(Ctx(ctx))))
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once.
        unsafe { ibv_free_device_list(self.list) };
    }
}

struct Ctx(*mut ibv_context);

// SAFETY: an ibv_context is a handle into libibverbs, which is thread-safe.
unsafe impl Send for Ctx {}
// SAFETY: as above; the layer never mutates the context through a shared reference.
unsafe impl Sync for Ctx {}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: opened in DeviceList::open and closed once, after every object made from it
        // (each holds a reference count on this value).
        unsafe { ibv_close_device(self.0) };
    }
}

/// An opened device.
#[derive(Clone)]
pub struct Context(Arc<Ctx>);

impl Context {
    /// `ibv_query_device`: the device's limits.
    pub fn query_device(&self) -> Result<ibv_device_attr> {
        // SAFETY: ibv_device_attr is plain data; zeroed is a valid out-parameter.
        let mut da: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open; da is a valid out-pointer.
        let rc = unsafe { ibv_query_device(self.0 .0, &mut da) };
        if rc != 0 {
            return Err(IbvError::rc("ibv_query_device", "the device", rc));
        }
        Ok(da)
    }

    /// `ibv_query_port` of port `port` (from 1).
    pub fn query_port(&self, port: u8) -> Result<ibv_port_attr> {
        // SAFETY: ibv_port_attr is plain data; zeroed is a valid out-parameter.
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open; attr is a valid out-pointer of the right size.
        let rc = unsafe { ___ibv_query_port(self.0 .0, port, &mut attr) };
        if rc != 0 {
            return Err(IbvError::rc("ibv_query_port", format!("port {port}"), rc));
        }
        Ok(attr)
    }

    /// The GID at `index` of `port`, if the query succeeds.
    pub fn query_gid(&self, port: u8, index: i32) -> Option<[u8; 16]> {
        // SAFETY: ibv_gid is a plain union of bytes; zeroed is valid.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open; gid is a valid out-pointer.
        let rc = unsafe { ibv_query_gid(self.0 .0, port, index, &mut gid as *mut ibv_gid as *mut _) };
        // SAFETY: `raw` is the byte view of the union, always initialised.
        (rc == 0).then_some(unsafe { gid.raw })
    }

    /// A protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        // SAFETY: the context is open; the PD is released in PdInner::drop.
        let pd = unsafe { ibv_alloc_pd(self.0 .0) };
        if pd.is_null() {
            return Err(IbvError::last("ibv_alloc_pd", "the device"));
        }
        Ok(Pd(Arc::new(PdInner {
            pd,
            _ctx: self.clone(),
        })))
    }

    /// A completion queue of `entries` entries (no completion channel).
    pub fn create_cq(&self, entries: u32) -> Result<Cq> {
        let n = i32::try_from(entries).unwrap_or(i32::MAX);
        // SAFETY: the context is open; no channel, no context pointer; destroyed in CqInner::drop.
        let cq = unsafe { ibv_create_cq(self.0 .0, n, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if cq.is_null() {
            return Err(IbvError::last("ibv_create_cq", format!("{entries} entries")));
        }
        Ok(Cq(Arc::new(CqInner {
            cq,
            _ctx: self.clone(),
        })))
    }

    /// Opens (creating it if needed, `O_CREAT`) the XRC domain shared through `file`, which
    /// the domain keeps open.
    pub fn open_xrcd(&self, file: File, what: &str) -> Result<Xrcd> {
        let mut attr = ibv_xrcd_init_attr {
            comp_mask: (ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_FD.0
                | ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_OFLAGS.0),
            fd: file.as_raw_fd(),
            oflags: O_CREAT,
        };
        // SAFETY: the context is open; attr is initialised and lives across the call; the
        // file stays open as long as the domain (it is kept in the returned value).
        match unsafe { ibv_open_xrcd(self.0 .0, &mut attr) } {
            Some(p) if !p.is_null() => Ok(Xrcd(Arc::new(XrcdInner {
                xrcd: p,
                _file: file,
                _ctx: self.clone(),
            }))),
            _ => Err(IbvError::last("ibv_open_xrcd", what)),
        }
    }

    pub(crate) fn raw(&self) -> *mut ibv_context {
        self.0 .0
    }
}

struct PdInner {
    pd: *mut ibv_pd,
    _ctx: Context,
}

// SAFETY: a PD is a handle into thread-safe libibverbs.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: allocated in Context::alloc_pd and released once, after every MR, SRQ and
        // QP made in it (each holds a reference count on it).
        unsafe { ibv_dealloc_pd(self.pd) };
    }
}

/// A protection domain.
#[derive(Clone)]
pub struct Pd(Arc<PdInner>);

impl Pd {
    pub(crate) fn raw(&self) -> *mut ibv_pd {
        self.0.pd
    }
}

struct CqInner {
    cq: *mut ibv_cq,
    _ctx: Context,
}

// SAFETY: a CQ is a handle into thread-safe libibverbs.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: created in Context::create_cq and destroyed once, after every QP and SRQ
        // that reports to it (they hold a reference count on it).
        unsafe { ibv_destroy_cq(self.cq) };
    }
}

/// A completion queue.
#[derive(Clone)]
pub struct Cq(Arc<CqInner>);

impl Cq {
    /// One `ibv_poll_cq` of up to `wcs.len()` completions; returns those read (the first
    /// entries of `wcs`, which need not be initialised before).
    #[inline]
    pub fn poll<'w>(&self, wcs: &'w mut [MaybeUninit<ibv_wc>]) -> Result<&'w [ibv_wc]> {
        let n = i32::try_from(wcs.len()).unwrap_or(i32::MAX);
        // SAFETY: the CQ is live; wcs has room for `n` entries (MaybeUninit<ibv_wc> has
        // ibv_wc's layout).
        let got = unsafe { ibv_poll_cq(self.0.cq, n, wcs.as_mut_ptr().cast::<ibv_wc>()) };
        if got < 0 {
            return Err(IbvError::call(
                "ibv_poll_cq",
                "the completion queue",
                std::io::Error::other(format!("it returned {got}")),
            ));
        }
        // SAFETY: ibv_poll_cq initialised the first `got` (0..=n) entries.
        Ok(unsafe { std::slice::from_raw_parts(wcs.as_ptr().cast::<ibv_wc>(), got as usize) })
    }

    pub(crate) fn raw(&self) -> *mut ibv_cq {
        self.0.cq
    }
}

/// The immediate data of a completion (host order), if it carries any.
#[inline]
pub fn wc_imm(wc: &ibv_wc) -> Option<u32> {
    (wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0)
        // SAFETY: with IBV_WC_WITH_IMM set, the union holds the immediate data.
        .then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data }))
}

/// libibverbs' text for a completion status (`ibv_wc_status_str`).
pub fn status_text(s: ibv_wc_status::Type) -> String {
    // SAFETY: ibv_wc_status_str returns a static NUL-terminated string for any value.
    unsafe { CStr::from_ptr(ibv_wc_status_str(s)) }
        .to_string_lossy()
        .into_owned()
}

struct XrcdInner {
    xrcd: *mut ibv_xrcd,
    _file: File,
    _ctx: Context,
}

// SAFETY: an XRC domain is a handle into thread-safe libibverbs.
unsafe impl Send for XrcdInner {}
// SAFETY: as above.
unsafe impl Sync for XrcdInner {}

impl Drop for XrcdInner {
    fn drop(&mut self) {
        // SAFETY: opened in Context::open_xrcd and closed once, after every SRQ and QP made
        // in it (they hold a reference count on it).
        unsafe { ibv_close_xrcd(self.xrcd) };
    }
}

/// An XRC domain, opened through a file shared by the ranks of a node.
#[derive(Clone)]
pub struct Xrcd(Arc<XrcdInner>);

impl Xrcd {
    pub(crate) fn raw(&self) -> *mut ibv_xrcd {
        self.0.xrcd
    }
}

struct SrqInner {
    srq: *mut ibv_srq,
    _pd: Pd,
    _cq: Option<Cq>,
    _xrcd: Option<Xrcd>,
}

// SAFETY: an SRQ is a handle into thread-safe libibverbs.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: created in Srq::create / create_xrc and destroyed once, after every QP
        // attached to it (they hold a reference count on it).
        unsafe { ibv_destroy_srq(self.srq) };
    }
}

/// A shared receive queue (plain, or XRC: see [`XrcSrq`]).
#[derive(Clone)]
pub struct Srq(Arc<SrqInner>);

/// An XRC shared receive queue made by [`Srq::create_xrc`], with its SRQ number (which
/// the senders name in their work requests to reach it).
#[derive(Clone)]
pub struct XrcSrq {
    /// The queue.
    pub srq: Srq,
    /// Its SRQ number (`ibv_get_srq_num`).
    pub number: u32,
}

impl Srq {
    /// A plain SRQ of `depth` single-piece receives.
    pub fn create(pd: &Pd, depth: u32) -> Result<Srq> {
        // SAFETY: plain-data struct; zero is valid for the fields not set.
        let mut init: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        init.attr.max_wr = depth;
        init.attr.max_sge = 1;
        // SAFETY: the PD is live; init is initialised; the SRQ is destroyed in SrqInner::drop.
        let srq = unsafe { ibv_create_srq(pd.raw(), &mut init) };
        if srq.is_null() {
            return Err(IbvError::last("ibv_create_srq", format!("{depth} entries")));
        }
        Ok(Srq(Arc::new(SrqInner {
            srq,
            _pd: pd.clone(),
            _cq: None,
            _xrcd: None,
        })))
    }

    /// An XRC SRQ of `depth` receives in `xrcd`, its completions on `cq`, with its SRQ number.
    pub fn create_xrc(ctx: &Context, pd: &Pd, xrcd: &Xrcd, cq: &Cq, depth: u32) -> Result<XrcSrq> {
        // SAFETY: plain-data struct; zero is valid for the fields not set.
        let mut a: ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
        a.attr.max_wr = depth;
        a.attr.max_sge = 1;
        a.comp_mask = ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_TYPE.0
            | ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_PD.0
            | ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_XRCD.0
            | ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_CQ.0;
        a.srq_type = ibv_srq_type::IBV_SRQT_XRC;
        a.pd = pd.raw();
        a.xrcd = xrcd.raw();
        a.cq = cq.raw();
        // SAFETY: context, PD, domain and CQ are live; `a` is initialised for the fields in
        // comp_mask.
        let srq = match unsafe { ibv_create_srq_ex(ctx.raw(), &mut a) } {
            Some(s) if !s.is_null() => Srq(Arc::new(SrqInner {
                srq: s,
                _pd: pd.clone(),
                _cq: Some(cq.clone()),
                _xrcd: Some(xrcd.clone()),
            })),
            _ => {
                return Err(IbvError::last(
                    "ibv_create_srq_ex",
                    format!("XRC, {depth} entries"),
                ))
            }
        };
        let mut num = 0u32;
        // SAFETY: the SRQ is a live XRC SRQ; num is a valid out-pointer.
        let rc = unsafe { ibv_get_srq_num(srq.raw(), &mut num) };
        if rc != 0 {
            return Err(IbvError::rc("ibv_get_srq_num", "the XRC SRQ", rc));
        }
        Ok(XrcSrq { srq, number: num })
    }

    pub(crate) fn raw(&self) -> *mut ibv_srq {
        self.0.srq
    }

    /// Posts a receive of `len` bytes at `offset` of `slots`, completing as `wr_id`.
    /// Errors: the range outside `slots` (nothing posted), or `ibv_post_srq_recv`'s.
    #[inline]
    pub fn post_recv(&self, slots: &Slots, offset: usize, len: usize, wr_id: u64) -> Result<()> {
        let (mut sge, mut wr) = recv_wr(slots, offset, len, wr_id)?;
        wr.sg_list = &mut sge;
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: wr and sge live across the call; the range lies in `slots`' registered
        // memory, which stays registered while it is allocated (Slots' field order).
        let rc = unsafe { ibv_post_srq_recv(self.0.srq, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(IbvError::rc("ibv_post_srq_recv", "the shared receive queue", rc));
        }
        Ok(())
    }
}

/// A receive work request for `len` bytes at `offset` of `slots` (its `sg_list` is set by
/// the caller, which owns the SGE). Errors: the range outside `slots`.
#[inline]
fn recv_wr(slots: &Slots, offset: usize, len: usize, wr_id: u64) -> Result<(ibv_sge, ibv_recv_wr)> {
    if offset.checked_add(len).is_none_or(|end| end > slots.mem.len()) || len > u32::MAX as usize {
        return Err(IbvError::RecvRange {
            len,
            offset,
            area: slots.mem.len(),
        });
    }
    let sge = ibv_sge {
        addr: slots.base() + offset as u64,
        length: len as u32,
        lkey: slots.mr.lkey,
    };
    let wr = ibv_recv_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: std::ptr::null_mut(),
        num_sge: 1,
    };
    Ok((sge, wr))
}

/// An address handle: where a UD send goes (the remote port's LID or GID and our port);
/// destroyed on drop, after which its PD may go.
pub struct Ah {
    ah: *mut ibv_ah,
    _pd: Pd,
}

// SAFETY: an address handle is a handle into thread-safe libibverbs, used by its owner's
// thread.
unsafe impl Send for Ah {}

impl Ah {
    /// `ibv_create_ah` in `pd` for `av` ([`attr::ud_address`]).
    pub fn create(pd: &Pd, av: &attr::AddressVector) -> Result<Ah> {
        let mut a = av.raw_ah();
        // SAFETY: the PD is live; `a` is initialised and lives across the call; the handle is
        // destroyed in Drop; NULL on failure.
        let ah = unsafe { ibv_create_ah(pd.raw(), &mut a) };
        if ah.is_null() {
            return Err(IbvError::last(
                "ibv_create_ah",
                format!("LID {}, port {}, GRH {}", av.dlid, av.port, av.grh.is_some()),
            ));
        }
        Ok(Ah { ah, _pd: pd.clone() })
    }

    pub(crate) fn raw(&self) -> *mut ibv_ah {
        self.ah
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created in Ah::create and destroyed once; its owner drops it only after
        // the UD QP whose sends named it (see Qp::post_ud).
        unsafe { ibv_destroy_ah(self.ah) };
    }
}

/// A memory region registered for local access (`IBV_ACCESS_LOCAL_WRITE`); deregistered on
/// drop.
pub struct Mr {
    mr: *mut ibv_mr,
    addr: usize,
    len: usize,
    lkey: u32,
    _pd: Pd,
}

// SAFETY: an MR is a handle into thread-safe libibverbs; the memory it covers is not
// accessed through it.
unsafe impl Send for Mr {}

impl Mr {
    /// Registers `mem` in `pd`.
    ///
    /// # Safety
    /// `mem` must stay allocated and in place until the returned value is dropped: the
    /// device writes receives into it and reads sends from it by address.
    pub unsafe fn register(pd: &Pd, mem: &[u8]) -> Result<Mr> {
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32;
        // SAFETY: the PD is live; the caller keeps `mem` alive and in place until this Mr drops.
        let mr = unsafe { ibv_reg_mr(pd.raw(), mem.as_ptr() as *mut _, mem.len(), access) };
        if mr.is_null() {
            return Err(IbvError::last("ibv_reg_mr", format!("{} bytes", mem.len())));
        }
        // SAFETY: mr is a valid registration.
        let lkey = unsafe { (*mr).lkey };
        Ok(Mr {
            mr,
            addr: mem.as_ptr() as usize,
            len: mem.len(),
            lkey,
            _pd: pd.clone(),
        })
    }

    /// The local key.
    #[inline]
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// True if `[p, p + len)` lies in the region.
    #[inline]
    pub fn contains(&self, p: usize, len: usize) -> bool {
        p >= self.addr && p + len <= self.addr + self.len
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered in Mr::register and deregistered once; a work request still
        // posted on it then fails with a protection error instead of touching the memory.
        unsafe { ibv_dereg_mr(self.mr) };
    }
}

/// A zeroed, page-aligned region of `count x slot` bytes: an anonymous private mapping, so
/// its pages are touched only when used and an allocation the kernel refuses is an error
/// instead of an abort (as the runtime's `AlignedRegion`).
struct Region {
    map: memmap2::MmapMut,
    len: usize,
}

impl Region {
    /// Errors: [`IbvError::Alloc`] when `count x slot` overflows or the kernel refuses the
    /// mapping.
    fn new(count: usize, slot: usize, what: &str) -> Result<Region> {
        let alloc_error = |bytes: u64, error| IbvError::Alloc {
            what: what.to_string(),
            bytes,
            error,
        };
        let len = count.checked_mul(slot).ok_or_else(|| {
            alloc_error(
                u64::MAX,
                std::io::Error::other(format!("{count} x {slot} bytes overflows")),
            )
        })?;
        let map = memmap2::MmapMut::map_anon(len.max(1)).map_err(|error| alloc_error(len as u64, error))?;
        Ok(Region { map, len })
    }

    #[inline]
    fn as_slice(&self) -> &[u8] {
        &self.map[..self.len]
    }

    #[inline]
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.map[..self.len]
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }
}

/// A registered area of `count` slots of `slot` bytes that owns its memory (receive
/// buffers, send headers, the raw ping-pong's buffers).
pub struct Slots {
    mr: Mr, // before `mem`: deregistered before the memory is freed
    mem: Region,
    slot: usize,
    count: usize,
}

impl Slots {
    /// Allocates (page-aligned, zeroed) and registers `count x slot` bytes in `pd`; `what`
    /// names the area in allocation errors.
    pub fn new(pd: &Pd, count: usize, slot: usize, what: &str) -> Result<Slots> {
        let mem = Region::new(count, slot, what)?;
        // SAFETY: the memory is owned by the returned value, in place (a mapping does not
        // move with its owner), and freed only after `mr` drops (field order).
        let mr = unsafe { Mr::register(pd, mem.as_slice()) }?;
        Ok(Slots { mr, mem, slot, count })
    }

    #[inline]
    fn base(&self) -> u64 {
        self.mem.as_slice().as_ptr() as u64
    }

    /// Address of slot `i`.
    #[inline]
    pub fn addr(&self, i: usize) -> u64 {
        self.base() + (i * self.slot) as u64
    }

    /// The first `len` bytes of slot `i`.
    #[inline]
    pub fn get(&self, i: usize, len: usize) -> &[u8] {
        &self.mem.as_slice()[i * self.slot..i * self.slot + len]
    }

    /// The whole area.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        self.mem.as_slice()
    }

    /// The whole area, writable.
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.mem.as_mut_slice()
    }

    /// The local key of the area.
    #[inline]
    pub fn lkey(&self) -> u32 {
        self.mr.lkey
    }

    /// Bytes per slot.
    #[inline]
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Number of slots.
    #[inline]
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes allocated (and registered).
    #[inline]
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// True when the area has no bytes (`count` or `slot` zero).
    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }
}
