//! The in-process bootstrap ([`LocalBootstrap`]) for ranks that are threads of one process
//! (the `local` transport): an all-gather through shared memory.

use std::sync::{Arc, Barrier};

use parking_lot::Mutex;

use super::Bootstrap;
use crate::bootstrap::error::{BootstrapError, Result};

struct Board {
    slots: Mutex<Vec<Option<Vec<u8>>>>,
    barrier: Barrier,
}

/// One rank's handle; [`LocalBootstrap::group`] makes the handles of all ranks.
pub struct LocalBootstrap {
    rank: usize,
    board: Arc<Board>,
}

impl LocalBootstrap {
    /// Handles for `n` ranks, to be moved into `n` threads (rank = index).
    /// Errors: [`BootstrapError::InvalidRank`] when `n` is 0.
    pub fn group(n: usize) -> Result<Vec<LocalBootstrap>> {
        if n == 0 {
            return Err(BootstrapError::InvalidRank {
                rank: 0,
                world_size: 0,
            });
        }
        let board = Arc::new(Board {
            slots: Mutex::new(vec![None; n]),
            barrier: Barrier::new(n),
        });
        Ok((0..n)
            .map(|rank| LocalBootstrap {
                rank,
                board: board.clone(),
            })
            .collect())
    }
}

impl Bootstrap for LocalBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.board.slots.lock().len()
    }

    fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.board.slots.lock()[self.rank] = Some(data.to_vec());
        self.board.barrier.wait();
        let all: Vec<Vec<u8>> = self
            .board
            .slots
            .lock()
            .iter()
            .map(|s| s.clone().unwrap_or_default())
            .collect();
        // Nobody overwrites a slot before everybody has read it.
        self.board.barrier.wait();
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_gather_in_rank_order_twice() {
        let group = LocalBootstrap::group(5).unwrap();
        let got: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
            let hs: Vec<_> = group
                .into_iter()
                .map(|mut b| {
                    s.spawn(move || {
                        let r = b.rank() as u8;
                        let first = b.all_gather(&vec![r; r as usize]).unwrap();
                        let second = b.all_gather(&[r + 100]).unwrap();
                        assert_eq!(second, (0..5u8).map(|i| vec![i + 100]).collect::<Vec<_>>());
                        first
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for g in got {
            assert_eq!(g, (0..5u8).map(|i| vec![i; i as usize]).collect::<Vec<_>>());
        }
        assert!(LocalBootstrap::group(0).is_err());
    }
}
