//! The test drop model of the `local` transport's datagrams (`datagram_drop_every` k,
//! `datagram_drop_seed`; test only, docs/CONFIG.md): which datagrams a rank posts are lost
//! on the way. Seed 0 is the fixed pattern, every k-th datagram the rank posts; another
//! seed drops each datagram with probability 1/k, decided by [`drop_hash`] of (seed,
//! sender, receiver, datagrams the sender posted to that receiver before), so that a
//! pattern that made a test fail is named by its seed and can be run again (the same
//! decisions for the same sequence of datagrams per receiver; thread timing can still
//! change that sequence).

/// The drop decisions of one rank.
#[derive(Debug, Default)]
pub(crate) struct DropModel {
    every: u64,
    seed: u64,
    rank: u64,
    /// Datagrams posted by the rank (seed 0).
    posted: u64,
    /// Datagrams posted to each receiver (another seed; grown to the highest receiver).
    to: Vec<u64>,
}

impl DropModel {
    /// The model of rank `rank`: every `every`-th datagram (0 = none) with seed 0, else
    /// seeded by `seed`.
    pub(crate) fn new(every: usize, seed: u64, rank: usize) -> DropModel {
        DropModel {
            every: every as u64,
            seed,
            rank: rank as u64,
            ..DropModel::default()
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
        if self.seed == 0 {
            self.posted += 1;
            return self.posted.is_multiple_of(self.every);
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
    fn seed_0_drops_every_kth_datagram_of_the_rank() {
        let mut m = DropModel::new(7, 0, 3);
        let got = pattern(&mut m, &[1; 21]);
        let want: Vec<bool> = (1..=21).map(|i| i % 7 == 0).collect();
        assert_eq!(got, want);
        assert!(!DropModel::new(0, 5, 0).drops(1), "k = 0 drops nothing");
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
