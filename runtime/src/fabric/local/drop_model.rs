//! The test drop model of the `local` transport's datagrams (`datagram_drop_every` k,
//! `datagram_drop_seed`; test only, docs/CONFIG.md): which datagrams a rank posts are lost
//! on the way. Each datagram is lost with probability 1/k, decided by [`drop_hash`] of
//! (seed, sender, receiver, datagrams the sender posted to that receiver before), so that a
//! pattern that made a test fail is named by its seed and can be run again (the same
//! decisions for the same sequence of datagrams per receiver; thread timing can still
//! change that sequence).
//!
//! The losses must be fair (a datagram sent again and again gets through), as a real
//! fabric's are. The model first dropped exactly every k-th datagram a rank posted, which
//! is not: a rank whose only traffic repeats every k posts (its retransmission rounds,
//! a window of k datagrams re-sent in order, or rounds of several peers adding up to a
//! multiple of k) loses the same datagram in every round, for ever, and the run hangs
//! (issue 33: `datagram_all_to_all` under load, the receiver spinning in its `try_recv`
//! loop for a message whose chunk never came, the sender waiting in its retransmission
//! timeout; see docs/TESTING.md, "The datagram hang").

/// The seed a pattern of seed 0 (the default) is drawn with: any fixed value.
const DEFAULT_SEED: u64 = 0x5eed_da7a_9a3e_0033;

/// The drop decisions of one rank.
#[derive(Debug, Default)]
pub(crate) struct DropModel {
    every: u64,
    seed: u64,
    rank: u64,
    /// Datagrams posted to each receiver (grown to the highest receiver).
    to: Vec<u64>,
}

impl DropModel {
    /// The model of rank `rank`: 1 in `every` datagrams lost (0 = none), the pattern of
    /// `seed` (0 = [`DEFAULT_SEED`]'s).
    pub(crate) fn new(every: usize, seed: u64, rank: usize) -> DropModel {
        DropModel {
            every: every as u64,
            seed: if seed == 0 { DEFAULT_SEED } else { seed },
            rank: rank as u64,
            to: Vec::new(),
        }
    }

    /// True when datagrams can be dropped at all.
    pub(crate) fn active(&self) -> bool {
        self.every > 0
    }

    /// True when the datagram the rank posts now to `dest` is lost.
    pub(crate) fn drops(&mut self, dest: usize) -> bool {
        if self.every == 0 {
            return false;
        }
        if self.to.len() <= dest {
            self.to.resize(dest + 1, 0);
        }
        let n = self.to[dest];
        self.to[dest] += 1;
        drop_hash(self.seed, self.rank, dest as u64, n).is_multiple_of(self.every)
    }
}

/// The seeded model's hash of (seed, sender, receiver, count): splitmix64's finaliser
/// (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014)
/// applied after folding in each value with its increment.
pub(crate) fn drop_hash(seed: u64, src: u64, dest: u64, n: u64) -> u64 {
    const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut z = seed;
    for v in [src, dest, n] {
        z = (z ^ v).wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
    }
    z
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(m: &mut DropModel, dests: &[usize]) -> Vec<bool> {
        dests.iter().map(|&d| m.drops(d)).collect()
    }

    #[test]
    fn none_without_k_and_seed_0_is_a_fixed_pattern() {
        assert!(!pattern(&mut DropModel::new(0, 5, 0), &[1; 100]).contains(&true));
        let dests = [1usize; 700];
        let zero = pattern(&mut DropModel::new(7, 0, 3), &dests);
        assert_eq!(zero, pattern(&mut DropModel::new(7, DEFAULT_SEED, 3), &dests));
        let every_7th: Vec<bool> = (1..=700).map(|i| i % 7 == 0).collect();
        assert_ne!(zero, every_7th, "not the periodic pattern");
    }

    #[test]
    fn a_seed_names_its_pattern_per_receiver() {
        let dests: Vec<usize> = (0..20_000).map(|i| i % 5).collect();
        let a = pattern(&mut DropModel::new(7, 42, 1), &dests);
        assert_eq!(a, pattern(&mut DropModel::new(7, 42, 1), &dests), "replayable");
        assert_ne!(a, pattern(&mut DropModel::new(7, 43, 1), &dests), "another seed");
        assert_ne!(
            a,
            pattern(&mut DropModel::new(7, 42, 2), &dests),
            "another sender"
        );
        // Per receiver: the decisions for receiver 2 do not depend on what went elsewhere.
        let only2 = pattern(&mut DropModel::new(7, 42, 1), &[2; 4_000]);
        let of2: Vec<bool> = a
            .iter()
            .zip(&dests)
            .filter(|(_, &d)| d == 2)
            .map(|(&x, _)| x)
            .collect();
        assert_eq!(only2, of2);
        // About 1 in 7 (20,000 draws: 2,857 expected, standard deviation 49).
        let n = a.iter().filter(|&&x| x).count();
        assert!((2_600..3_100).contains(&n), "{n} of 20000 dropped");
    }
}
