//! The registered buffer pool: `buffer_count` buffers of `buffer_size` bytes allocated and
//! registered once at start (one registration per chunk through [`Register::register`], which every fabric implements).
//! Its errors are the registrar's own ([`Register::Error`]; core names no transport), into
//! which a failed allocation converts ([`AllocError`]).
//! It never grows, except with `pool_growth` on, where it may add chunks (each as large
//! as the pool so far, doubling) up to `max_pool_bytes`, each registered once and kept.
//! Exhaustion is reported to the caller (back-pressure), never met by allocating more.

use crate::core::config::TransportConfig;
use crate::core::footprint::MemoryLock;
use crate::core::memory::{AlignedRegion, AllocError};

/// Registration of memory with a transport (the RDMA memory region of a pool chunk):
/// implemented by every fabric.
pub trait Register {
    /// The registrar's error (a fabric's own, e.g. a failed `ibv_reg_mr` or a memlock limit
    /// too low); the pool's allocation failures convert into it.
    type Error: From<AllocError>;

    /// Registers (and, if `lock`, locks) a pool chunk once; it stays registered until drop.
    fn register(&mut self, region: &[u8], lock: bool) -> Result<Registration, Self::Error>;
}

/// Outcome of registering a memory region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// Bytes registered.
    pub bytes: u64,
    /// Bytes actually locked/pinned in memory (0 when locking was refused or off).
    pub locked_bytes: u64,
    /// Why the region is not locked, if it is not, when no [`Registration::lock`] says it
    /// (e.g. a transport that never locks).
    pub note: Option<String>,
    /// The `mlock` request made for the region, if one was (`requests` 0 otherwise).
    pub lock: MemoryLock,
}

impl Registration {
    /// `bytes` registered, nothing asked to be locked.
    pub fn unlocked(bytes: u64) -> Registration {
        Registration {
            bytes,
            locked_bytes: 0,
            note: None,
            lock: MemoryLock::default(),
        }
    }
}

/// What a failed pool allocation names: the region and the settings that size it.
const POOL_WHAT: &str =
    "the buffer pool (buffer_count x buffer_size: BALLAST_BUFFER_COUNT, BALLAST_BUFFER_SIZE)";

/// Bytes of the pool's free list per buffer (one [`BufId`]), allocated at start.
pub const FREE_LIST_BYTES: u64 = std::mem::size_of::<BufId>() as u64;

/// What a failed growth of the pool names (`pool_growth` on: a chunk added when every
/// buffer is taken, within `max_pool_bytes`).
const GROWTH_WHAT: &str =
    "a growth of the buffer pool (pool_growth on: as many buffers again, of buffer_size, \
     within max_pool_bytes: BALLAST_POOL_GROWTH, BALLAST_MAX_POOL_BYTES)";

/// What a failed allocation of the pool's free list (4 B per buffer) names.
const FREE_LIST_WHAT: &str = "the buffer pool's free list (4 bytes per buffer: BALLAST_BUFFER_COUNT)";

/// Identifier of one pool buffer.
pub type BufId = u32;

struct Chunk {
    first: BufId,
    count: u32,
    mem: AlignedRegion,
}

/// Pool occupancy counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers in the pool.
    pub buffers: usize,
    /// Buffers currently free.
    pub free: usize,
    /// Most buffers ever in use at once.
    pub high_water: usize,
    /// Chunks registered (1 without growth).
    pub chunks: usize,
    /// Times a buffer was asked for while none was free and none could be added.
    pub exhausted: u64,
}

/// The fixed registered buffer pool of one rank.
pub struct BufferPool {
    chunks: Vec<Chunk>,
    free: Vec<BufId>,
    buffer_size: usize,
    growth: bool,
    max_bytes: u64,
    lock: bool,
    bytes: u64,
    registered_bytes: u64,
    locked_bytes: u64,
    lock_outcome: MemoryLock,
    high_water: usize,
    exhausted: u64,
    notes: Vec<String>,
}

impl BufferPool {
    /// Allocates and registers the initial pool of `cfg.buffer_count * cfg.buffer_size` bytes.
    /// Errors: `fabric`'s, or [`AllocError`] (converted into it) when the memory cannot be had.
    pub fn new<R: Register + ?Sized>(cfg: &TransportConfig, fabric: &mut R) -> Result<BufferPool, R::Error> {
        let mut pool = BufferPool {
            chunks: Vec::new(),
            free: Vec::new(),
            buffer_size: cfg.buffer_size,
            growth: cfg.pool_growth,
            max_bytes: cfg.max_pool_bytes,
            lock: cfg.lock_pool,
            bytes: 0,
            registered_bytes: 0,
            locked_bytes: 0,
            lock_outcome: MemoryLock::default(),
            high_water: 0,
            exhausted: 0,
            notes: Vec::new(),
        };
        pool.add_chunk(cfg.buffer_count, fabric, POOL_WHAT)?;
        Ok(pool)
    }

    fn add_chunk<R: Register + ?Sized>(
        &mut self,
        count: usize,
        fabric: &mut R,
        what: &str,
    ) -> Result<(), R::Error> {
        let first = self.chunks.iter().map(|c| c.count).sum::<u32>();
        let mem = AlignedRegion::new(count, self.buffer_size, what)?;
        crate::core::memory::try_reserve_for(&mut self.free, count, || FREE_LIST_WHAT.to_string())?;
        let reg = fabric.register(mem.as_slice(), self.lock)?;
        self.registered_bytes += reg.bytes;
        self.locked_bytes += reg.locked_bytes;
        self.lock_outcome.add(&reg.lock);
        if let Some(n) = reg.note {
            self.notes.push(n);
        }
        self.bytes += mem.len() as u64;
        // Hand out low ids first.
        self.free.extend((first..first + count as u32).rev());
        self.chunks.push(Chunk {
            first,
            count: count as u32,
            mem,
        });
        Ok(())
    }

    /// Takes a free buffer; with growth on, adds a chunk when none is free and the bound
    /// allows. `None` = exhausted (back-pressure).
    pub fn acquire<R: Register + ?Sized>(&mut self, fabric: &mut R) -> Result<Option<BufId>, R::Error> {
        if self.free.is_empty() && self.growth {
            let total = self.buffers();
            let room = (self.max_bytes.saturating_sub(self.bytes) / self.buffer_size as u64) as usize;
            // (buffer ids are u32)
            let add = total.min(room).min(u32::MAX as usize - total);
            if add > 0 {
                self.add_chunk(add, fabric, GROWTH_WHAT)?;
            }
        }
        match self.free.pop() {
            Some(id) => {
                self.high_water = self.high_water.max(self.buffers() - self.free.len());
                Ok(Some(id))
            }
            None => {
                self.exhausted += 1;
                Ok(None)
            }
        }
    }

    /// Takes a free buffer without growing (where no fabric is at hand: a datagram held
    /// while the fabric polls). `None` when none is free.
    pub fn take_free(&mut self) -> Option<BufId> {
        let id = self.free.pop()?;
        self.high_water = self.high_water.max(self.buffers() - self.free.len());
        Some(id)
    }

    /// True when a buffer could be taken without growing.
    pub fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    /// Buffers free now (without growing).
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// True when [`BufferPool::acquire`] could still add buffers (growth on and below its
    /// bound).
    pub fn can_grow(&self) -> bool {
        self.growth && self.max_bytes.saturating_sub(self.bytes) >= self.buffer_size as u64
    }

    /// Returns a buffer to the pool.
    pub fn release(&mut self, id: BufId) {
        debug_assert!(!self.free.contains(&id));
        self.free.push(id);
    }

    fn locate(&self, id: BufId) -> (usize, usize) {
        let ci = self
            .chunks
            .iter()
            .position(|c| id >= c.first && id < c.first + c.count)
            .expect("buffer id from this pool");
        (ci, (id - self.chunks[ci].first) as usize * self.buffer_size)
    }

    /// The bytes of buffer `id` (`buffer_size` long).
    pub fn buf(&self, id: BufId) -> &[u8] {
        let (ci, off) = self.locate(id);
        &self.chunks[ci].mem.as_slice()[off..off + self.buffer_size]
    }

    /// The bytes of buffer `id`, writable.
    pub fn buf_mut(&mut self, id: BufId) -> &mut [u8] {
        let (ci, off) = self.locate(id);
        let bs = self.buffer_size;
        &mut self.chunks[ci].mem.as_mut_slice()[off..off + bs]
    }

    /// Buffer size in bytes.
    pub fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    /// Buffers in the pool.
    pub fn buffers(&self) -> usize {
        self.chunks.iter().map(|c| c.count as usize).sum()
    }

    /// Pool bytes allocated.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Pool bytes registered.
    pub fn registered_bytes(&self) -> u64 {
        self.registered_bytes
    }

    /// Pool bytes locked in memory.
    pub fn locked_bytes(&self) -> u64 {
        self.locked_bytes
    }

    /// The `mlock` requests of the pool's chunks (see [`MemoryLock`]).
    pub fn memory_lock(&self) -> MemoryLock {
        self.lock_outcome
    }

    /// Notes of the registrations (e.g. a transport that never locks); a refused lock is
    /// in [`BufferPool::memory_lock`].
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Occupancy counters.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            buffers: self.buffers(),
            free: self.free.len(),
            high_water: self.high_water,
            chunks: self.chunks.len(),
            exhausted: self.exhausted,
        }
    }
}
