//! Page-aligned memory regions for registration: a region never shares a page with
//! another allocation, so locking (mlock) or registering it pins exactly its own pages,
//! and unlocking it never unlocks a neighbour's.

/// A zeroed, page-aligned region of `len` bytes (over-allocated by one page minus one
/// byte to find the aligned start; the slack is never touched by the runtime).
pub struct AlignedRegion {
    mem: Box<[u8]>,
    off: usize,
    len: usize,
}

/// The system page size in bytes.
pub fn page_size() -> usize {
    region::page::size()
}

impl AlignedRegion {
    /// Allocates `len` zeroed bytes starting on a page boundary.
    pub fn new(len: usize) -> AlignedRegion {
        let page = page_size();
        let mem = vec![0u8; len + page - 1].into_boxed_slice();
        let off = mem.as_ptr().align_offset(page).min(page - 1);
        AlignedRegion { mem, off, len }
    }

    /// The region's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.mem[self.off..self.off + self.len]
    }

    /// The region's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.mem[self.off..self.off + self.len]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_start_on_a_page_and_have_their_length() {
        for len in [1usize, 4096, 10_000, 1 << 20] {
            let mut r = AlignedRegion::new(len);
            assert_eq!(r.as_slice().as_ptr() as usize % page_size(), 0);
            assert_eq!(r.as_slice().len(), len);
            r.as_mut_slice()[len - 1] = 7;
            assert_eq!(r.as_slice()[len - 1], 7);
        }
    }
}
