//! Helpers of the collectives' tests (`collectives_*.rs`): the worlds they run on, a
//! seeded generator, and a run of ranks on the `local` transport.
#![allow(dead_code)]

use ballast_runtime::{launch::threads, Communicator, Result, RuntimeConfig};

/// The world sizes every collective is checked on.
pub const WORLDS: [usize; 5] = [1, 2, 3, 4, 7];

/// The byte counts of the byte collectives: 0, 1, 1,000 and 1 MiB.
pub const COUNTS: [usize; 4] = [0, 1, 1000, 1 << 20];

/// The configuration of the runs (`local`, pool not locked).
pub fn cfg() -> RuntimeConfig {
    RuntimeConfig::builder().lock_pool(false).build().unwrap()
}

/// Runs `f` on `n` local ranks: each rank's result (each rank's `Result`, a failed run
/// panics).
pub fn run_all<R: Send>(n: usize, f: impl Fn(&mut Communicator) -> R + Sync) -> Vec<R> {
    threads::run_ranks(n, &cfg(), f).unwrap()
}

/// Runs `f` on `n` local ranks and unwraps every rank's result, naming the rank on error.
pub fn run<R: Send>(n: usize, f: impl Fn(&mut Communicator) -> Result<R> + Sync) -> Vec<R> {
    run_all(n, f)
        .into_iter()
        .enumerate()
        .map(|(r, x)| x.unwrap_or_else(|e| panic!("{n} ranks: rank {r}: {e}")))
        .collect()
}

/// SplitMix64 (Steele, Lea and Flood 2014): a small seeded generator, the same on every
/// rank for the same seed.
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` and the labels `of` (e.g. a rank and a destination).
    pub fn new(seed: u64, of: &[u64]) -> Rng {
        let mut g = Rng(seed);
        for &x in of {
            g.0 ^= x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            g.next();
        }
        g
    }

    /// The next 64 bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `len` bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(len);
        v
    }
}

/// `len` bytes seeded by `seed` and the labels `of`.
pub fn bytes(seed: u64, of: &[u64], len: usize) -> Vec<u8> {
    Rng::new(seed, of).bytes(len)
}
