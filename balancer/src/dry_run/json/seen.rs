//! The duplicate-gid check of a population read from a dry-run file: the gids seen so far,
//! and the first gid listed twice, in file order.
use std::collections::HashSet;

/// The gids of one population seen so far, to find the first gid listed twice (in file
/// order). A bitmap while the gids are compact (below about one byte per gid, plus 8 KiB:
/// allocated at that size, only the pages it uses are touched); once a gid is beyond it,
/// the population is sparse: it is checked once by sorting a copy, and only when it does
/// repeat a gid is it walked with a hash set. Each way finds the same first repeat.
pub(crate) enum Seen {
    Bitmap(Vec<u64>),
    /// No gid repeats in the population.
    Distinct,
    Set(HashSet<u32>),
}

/// A gid beyond a [`Seen::Bitmap`]: the population is sparse.
#[derive(Debug)]
pub(crate) struct Sparse;

impl Seen {
    /// For a population of `count` gids; `None` when the bitmap cannot be had (`try_reserve`).
    pub(crate) fn new(count: usize) -> Option<Seen> {
        let words = count.saturating_mul(8).saturating_add(65536).div_ceil(64);
        let mut bits = Vec::new();
        bits.try_reserve_exact(words).ok()?;
        bits.resize(words, 0);
        Some(Seen::Bitmap(bits))
    }

    /// The way of a sparse population of the gid arrays `all`, whose `checked` arrays (the
    /// first ones) were found without a repeat (marked seen again when a hash set walks
    /// it); `None` when the memory for its copy or its set cannot be had.
    pub(crate) fn sparse<'a>(
        all: impl Iterator<Item = &'a [u32]> + Clone,
        checked: impl Iterator<Item = &'a [u32]>,
    ) -> Option<Seen> {
        let count: usize = all.clone().map(<[u32]>::len).sum();
        let mut sorted: Vec<u32> = Vec::new();
        sorted.try_reserve_exact(count).ok()?;
        for a in all {
            sorted.extend_from_slice(a);
        }
        sorted.sort_unstable();
        if sorted.windows(2).all(|w| w[0] != w[1]) {
            return Some(Seen::Distinct);
        }
        drop(sorted);
        let mut set = HashSet::new();
        set.try_reserve(count).ok()?;
        for a in checked {
            set.extend(a.iter().copied());
        }
        Some(Seen::Set(set))
    }

    /// Marks `gids` seen, in order; the index of the first one already seen, if any, or
    /// [`Sparse`] at a gid beyond the bitmap (those before it marked).
    pub(crate) fn first_repeat(&mut self, gids: &[u32]) -> Result<Option<usize>, Sparse> {
        match self {
            Seen::Bitmap(bits) => {
                for (i, &g) in gids.iter().enumerate() {
                    let (w, b) = (g as usize / 64, 1u64 << (g % 64));
                    let word = bits.get_mut(w).ok_or(Sparse)?;
                    if *word & b != 0 {
                        return Ok(Some(i));
                    }
                    *word |= b;
                }
                Ok(None)
            }
            Seen::Distinct => Ok(None),
            Seen::Set(set) => Ok(gids.iter().position(|&g| !set.insert(g))),
        }
    }
}
