//! Rank dealing: buckets (heaviest first) dealt to the rank with the smallest total that
//! still has a free cycle.
use std::collections::BinaryHeap;

use crate::allocation::Bucket;
use crate::strategy::Lightest;

/// Deals buckets (heaviest first) to the rank with the smallest total that still has a free
/// cycle. Returns the (rank, cycle) label of every bucket.
pub(super) fn deal_to_ranks(loads: &[f64], ranks: u32, cycles: u32) -> Vec<Bucket> {
    let mut order: Vec<usize> = (0..loads.len()).collect();
    order.sort_by(|&a, &b| loads[b].total_cmp(&loads[a]).then(a.cmp(&b)));
    let mut heap: BinaryHeap<Lightest<usize>> = (0..ranks as usize)
        .map(|key| Lightest { load: 0.0, key })
        .collect();
    let mut used = vec![0u32; ranks as usize];
    let mut labels = vec![Bucket { rank: 0, cycle: 0 }; loads.len()];
    for b in order {
        let mut top = heap.pop().expect("a rank with a free cycle");
        labels[b] = Bucket {
            rank: top.key as u32,
            cycle: used[top.key],
        };
        used[top.key] += 1;
        top.load += loads[b];
        if used[top.key] < cycles {
            heap.push(top);
        }
    }
    labels
}
