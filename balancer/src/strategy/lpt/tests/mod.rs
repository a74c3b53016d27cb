//! LPT's unit tests: the greedy against a tournament tree, gathering, refinement against
//! the scan-only reference, dealing, and the whole strategy against a straightforward
//! reference implementation.
use super::deal::*;
use super::gather::*;
use super::greedy::*;
use super::refine::index::*;
use super::refine::*;
use super::*;

mod reference;
mod refine_reference;

fn order(kbs: &[f64]) -> Order<'static> {
    // One population, gid = position; `kbs` must be non-increasing.
    let segments = kbs
        .iter()
        .enumerate()
        .map(|(g, &kb)| Segment {
            start: g,
            kb,
            population: 0,
            gids: Cow::Owned(vec![g as u32]),
        })
        .collect();
    Order::finish(segments, kbs.len())
}

/// LPT list scheduling with a tournament tree, one update per cell (the reference the
/// queue-based [`super::greedy`] must match). Returns bucket loads and, per bucket, the positions of its cells in
/// ascending order (descending KB, the order they were placed in).
/// The references' bucket for a cell of 0 KB: fewest cells, then lightest, then lowest
/// index.
fn fewest_cells<T>(members: &[Vec<T>], loads: &[f64]) -> usize {
    (0..members.len())
        .min_by(|&a, &b| {
            (members[a].len(), loads[a])
                .partial_cmp(&(members[b].len(), loads[b]))
                .unwrap()
                .then(a.cmp(&b))
        })
        .unwrap()
}

fn greedy_tree(order: &Order, nbuckets: usize) -> (Vec<f64>, Vec<Vec<u32>>) {
    let mut loads = vec![0.0; nbuckets];
    let mut lightest = LightestTree::new(nbuckets);
    let mut members = vec![Vec::new(); nbuckets];
    for s in order.segments.iter().filter(|s| s.kb != 0.0) {
        for i in s.start..s.start + s.gids.len() {
            let b = lightest.top();
            loads[b] += s.kb;
            members[b].push(i as u32);
            lightest.update(&loads, b);
        }
    }
    // Cells of 0 KB: to the bucket of fewest cells, then lightest, then lowest index.
    for s in order.segments.iter().filter(|s| s.kb == 0.0) {
        for i in s.start..s.start + s.gids.len() {
            let b = fewest_cells(&members, &loads);
            members[b].push(i as u32);
        }
    }
    for m in &mut members {
        m.sort_unstable();
    }
    (loads, members)
}

/// The lightest bucket, ties to the lowest index (the order of a min-heap of
/// [`Lightest`] entries keyed by bucket index): a tournament tree over the loads, where a
/// change of one load replays only its path to the root (one comparison per level).
struct LightestTree {
    size: usize,
    /// Node `n` holds the lightest bucket below it (`u32::MAX`: none); leaves from `size`.
    win: Vec<u32>,
}

impl LightestTree {
    /// A tree over `n` buckets of load 0.
    fn new(n: usize) -> LightestTree {
        let size = n.next_power_of_two();
        let mut win = vec![u32::MAX; 2 * size];
        for b in 0..n {
            win[size + b] = b as u32;
        }
        // All loads are 0: the left child always wins.
        for node in (1..size).rev() {
            win[node] = if win[2 * node] != u32::MAX {
                win[2 * node]
            } else {
                win[2 * node + 1]
            };
        }
        LightestTree { size, win }
    }

    #[inline]
    fn top(&self) -> usize {
        self.win[1] as usize
    }

    /// Replays the path of bucket `b` after its load changed.
    #[inline]
    fn update(&mut self, loads: &[f64], b: usize) {
        let mut node = (self.size + b) / 2;
        while node >= 1 {
            let (l, r) = (self.win[2 * node], self.win[2 * node + 1]);
            self.win[node] = if r == u32::MAX || (l != u32::MAX && loads[l as usize] <= loads[r as usize]) {
                l
            } else {
                r
            };
            node /= 2;
        }
    }
}

/// An order of runs: `(kb, count)` each, one population, gid = position; KB must not
/// increase.
fn order_of_runs(runs: &[(f64, usize)]) -> Order<'static> {
    let mut start = 0;
    let segments = runs
        .iter()
        .map(|&(kb, n)| {
            let s = Segment {
                start,
                kb,
                population: 0,
                gids: Cow::Owned((start as u32..(start + n) as u32).collect()),
            };
            start += n;
            s
        })
        .collect();
    Order::finish(segments, start)
}

#[test]
fn queue_greedy_matches_the_tree_on_random_runs() {
    use rand::{Rng, SeedableRng};
    // Weights that make float addition round to ties (large loads, fractional and
    // tiny weights, zeros), runs longer and shorter than the bucket count.
    for seed in 0..300u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let nbuckets = [1, 2, 3, 7, 64, 100, 1024][seed as usize % 7];
        let scale = [1.0, 1e15, 1e16, 3e17][(seed / 7) as usize % 4];
        let mut kbs: Vec<f64> = (0..rng.random_range(1..40))
            .map(|_| match rng.random_range(0..6) {
                0 => 0.0,
                1 => rng.random_range(0..5) as f64 * 0.1,
                2 => rng.random::<f64>() * 3.0,
                3 => scale * rng.random::<f64>(),
                4 => rng.random_range(1..4) as f64,
                _ => 1.0 / 3.0 * rng.random_range(1..10) as f64,
            })
            .collect();
        kbs.sort_by(|a, b| b.total_cmp(a));
        let runs: Vec<(f64, usize)> = kbs
            .iter()
            .map(|&kb| (kb, rng.random_range(1..3 * nbuckets + 2)))
            .collect();
        let o = order_of_runs(&runs);
        assert_eq!(
            greedy(&o, nbuckets, &Progress::new()),
            greedy_tree(&o, nbuckets),
            "seed {seed}"
        );
    }
}

#[test]
fn progress_counts_every_cell_twice() {
    let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
        cells: 10_000,
        metypes: 30,
        populations: 2,
        seed: 4,
    })
    .unwrap();
    let config = BalancerConfig::builder().ranks(17).cycles(2).build().unwrap();
    let done = Progress::new();
    assert_eq!(balance(&d, &config, Some(&done)), balance(&d, &config, None));
    assert_eq!(done.get(), 20_000);
}

/// The lists built from the noted buckets, on one thread or several (from 2^16
/// positions a thread), are those the greedy appended to, position by position.
#[test]
fn members_of_gives_the_lists_of_appends() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    for (n, nbuckets) in [
        (0, 3),
        (1, 1),
        (5, 9),
        (300_001, 7),
        (200_000, 1000),
        (70_000, 70_000),
    ] {
        let assign: Vec<u32> = (0..n).map(|_| rng.random_range(0..nbuckets) as u32).collect();
        let mut expected = vec![Vec::new(); nbuckets];
        for (i, &b) in assign.iter().enumerate() {
            expected[b as usize].push(i as u32);
        }
        assert_eq!(
            members_of(&assign, nbuckets),
            expected,
            "{n} positions, {nbuckets} buckets"
        );
        let narrow: Vec<u16> = assign.iter().map(|&b| b as u16).collect();
        if nbuckets <= 1 << 16 {
            assert_eq!(members_of(&narrow, nbuckets), expected, "{n} positions, u16");
        }
    }
}

#[test]
fn gather_is_the_same_with_either_slot_width() {
    let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
        cells: 20_000,
        metypes: 40,
        populations: 3,
        seed: 9,
    })
    .unwrap();
    let order = Order::new(&d);
    let (mut narrow, mut wide) = (vec![0u16; order.len], vec![0u32; order.len]);
    greedy_noting(&order, 300, &Progress::new(), &mut narrow);
    greedy_noting(&order, 300, &Progress::new(), &mut wide);
    let narrow = gather(&order, &narrow, 300, 3);
    let wide = gather(&order, &wide, 300, 3);
    assert_eq!(narrow, wide);
    assert_eq!(narrow.iter().map(|(_, _, g)| g.len()).sum::<usize>(), 20_000);
    assert!(narrow.iter().all(|(b, p, g)| *b < 300 && *p < 3 && g.is_sorted()));
}

/// The moves made in the tables built beside the refinement (a position moved several
/// times included) give what gathering after the moves gives, and `assign` ends moved.
#[test]
fn moves_made_beside_the_tables_are_those_made_before() {
    use rand::{Rng, SeedableRng};
    let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
        cells: 20_000,
        metypes: 40,
        populations: 3,
        seed: 3,
    })
    .unwrap();
    let order = Order::new(&d);
    let mut assign = vec![0u16; order.len];
    greedy_noting(&order, 300, &Progress::new(), &mut assign);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let mut moves: Vec<(u32, usize)> = (0..3000)
        .map(|_| (rng.random_range(0..order.len as u32), rng.random_range(0..300)))
        .collect();
    let again: Vec<(u32, usize)> = moves[..500]
        .iter()
        .map(|&(i, _)| (i, rng.random_range(0..300)))
        .collect();
    moves.extend(again);
    let mut applied = assign.clone();
    for &(i, b) in &moves {
        applied[i as usize] = b as u16;
    }
    let expected = gather(&order, &applied, 300, 3);
    assert_ne!(
        expected,
        gather(&order, &assign, 300, 3),
        "the moves change buckets"
    );
    let beside = gather_beside(&order, &mut assign, 300, 3, || moves);
    assert_eq!(beside, expected);
    assert_eq!(assign, applied);
}

#[test]
fn refinement_fixes_what_greedy_leaves() {
    // LPT on {3,3,2,2,2} into 2 buckets gives 7 / 5; the optimum is 6 / 6.
    let o = order(&[3.0, 3.0, 2.0, 2.0, 2.0]);
    let (mut loads, mut members) = greedy(&o, 2, &Progress::new());
    let mut sorted = loads.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(sorted, vec![5.0, 7.0]);
    refine(&o, &mut loads, &mut members);
    assert_eq!(loads, vec![6.0, 6.0]);
    for (b, m) in members.iter().enumerate() {
        assert_eq!(m.iter().map(|&c| o.kb(c)).sum::<f64>(), loads[b]);
    }
}

#[test]
fn extremes_are_the_first_heaviest_and_lightest() {
    let mut loads = vec![3.0, 5.0, 1.0, 5.0, 1.0, 2.0];
    let mut e = Extremes::new(&loads);
    assert_eq!((e.heaviest(), e.lightest()), (1, 2));
    loads[1] = 0.5;
    e.update(&loads, 1);
    assert_eq!((e.heaviest(), e.lightest()), (3, 1));
    loads[0] = 9.0;
    e.update(&loads, 0);
    assert_eq!(e.heaviest(), 0);
}

#[test]
fn dealing_evens_rank_totals() {
    // Buckets 10, 9, 2, 1 into 2 ranks × 2 cycles: {10, 1} and {9, 2}.
    let labels = deal_to_ranks(&[10.0, 9.0, 2.0, 1.0], 2, 2);
    assert_eq!(labels[0].rank, labels[3].rank);
    assert_eq!(labels[1].rank, labels[2].rank);
    assert_ne!(labels[0].rank, labels[1].rank);
    assert_ne!(labels[0].cycle, labels[3].cycle);
}

/// A random order for the refinement tests: runs of equal KB (several runs of one KB
/// make a class of several segments), or nearly every cell its own KB; KB on a 0.1
/// grid (as dry runs report), small integers (many equal differences), or tiny, huge
/// and zero weights.
fn random_order(rng: &mut rand_chacha::ChaCha8Rng) -> Order<'static> {
    use rand::Rng;
    let kind = rng.random_range(0..5);
    let nruns = rng.random_range(1..300);
    let mut kbs: Vec<f64> = (0..nruns)
        .map(|_| match kind {
            0 => (rng.random_range(10_000..400_000) as f64) / 10.0,
            1 => rng.random_range(0..12) as f64,
            2 => match rng.random_range(0..5) {
                0 => 0.0,
                1 => 1e-300 * rng.random::<f64>(),
                2 => 3e17 * rng.random::<f64>(),
                3 => 1.0 / 3.0 * rng.random_range(1..10) as f64,
                _ => rng.random::<f64>(),
            },
            _ => 1000.0 + 9000.0 * rng.random::<f64>(),
        })
        .collect();
    kbs.sort_by(|a, b| b.total_cmp(a));
    let per_cell = kind == 4;
    let runs: Vec<(f64, usize)> = kbs
        .iter()
        .map(|&kb| {
            let n = if per_cell {
                1
            } else {
                let most = [3, 40, 400][rng.random_range(0..3)];
                rng.random_range(1..most)
            };
            (kb, n)
        })
        .collect();
    order_of_runs(&runs)
}

#[test]
fn indexed_refinement_matches_the_scan_on_random_orders() {
    use rand::{Rng, SeedableRng};
    let budgets: [fn(usize) -> usize; 3] = [search_budget, |n| n % 5, |_| usize::MAX];
    for seed in 0..400u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let o = random_order(&mut rng);
        let nbuckets = match rng.random_range(0..4) {
            0 => rng.random_range(1..8),
            1 => rng.random_range(8..100),
            2 => rng.random_range(100..2001),
            _ => (o.len / rng.random_range(2..50)).clamp(1, 2000),
        };
        // Greedy's buckets (few, small steps), or cells dealt at random (many).
        let (loads, members) = if rng.random_bool(0.5) {
            greedy(&o, nbuckets, &Progress::new())
        } else {
            let mut members = vec![Vec::new(); nbuckets];
            for i in 0..o.len as u32 {
                members[rng.random_range(0..nbuckets)].push(i);
            }
            let loads = members.iter().map(|m| m.iter().map(|&c| o.kb(c)).sum()).collect();
            (loads, members)
        };
        let (mut want_loads, mut want_members) = (loads.clone(), members.clone());
        refine_reference::refine(&o, &mut want_loads, &mut want_members);
        let budget = budgets[seed as usize % budgets.len()];
        let (mut got_loads, mut got_members) = (loads, members);
        refine_with(
            &o,
            &mut got_loads,
            &mut got_members,
            true,
            budget,
            &mut Vec::new(),
        );
        assert_eq!(got_members, want_members, "seed {seed}");
        assert_eq!(
            got_loads.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            want_loads.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "seed {seed}"
        );
    }
}

#[test]
fn partition_near_is_partition_point() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for _ in 0..2000 {
        let total = rng.random_range(1..5000u32);
        // Even, clustered, or empty: the guess may be far off.
        let n = rng.random_range(0..200);
        let (lo, hi) = match rng.random_range(0..3) {
            0 => (0, total),
            1 => (0, total.div_ceil(7)),
            _ => (total - total.div_ceil(5), total),
        };
        let mut v: Vec<u32> = (0..n).map(|_| rng.random_range(lo..hi)).collect();
        v.sort_unstable();
        v.dedup();
        for x in 0..=total {
            assert_eq!(
                partition_near(&v, x, total as usize),
                v.partition_point(|&y| y < x),
                "{v:?} {x} {total}"
            );
        }
    }
}

#[test]
fn swap_index_refuses_too_many_classes() {
    let kbs: Vec<f64> = (0..MAX_CLASSES + 1).rev().map(|k| k as f64).collect();
    assert!(SwapIndex::new(&order(&kbs), 10.0).is_none());
    assert!(SwapIndex::new(&order(&kbs[1..]), 10.0).is_some());
    // Pairs closer than the limit (9/16 of the gap, here 9) are listed.
    let index = SwapIndex::new(&order(&kbs[1..]), 16.0).unwrap();
    assert_eq!(index.pairs.len(), 8 * MAX_CLASSES - 36);
}

#[test]
fn matches_the_reference_implementation_on_random_dry_runs() {
    use crate::synthetic::{generate, generate_circuit, CircuitSpec, SyntheticSpec};
    for seed in 0..24u64 {
        let spec = SyntheticSpec {
            cells: 300 + 1733 * seed as usize,
            metypes: 2 + 11 * seed as usize,
            populations: 1 + seed as usize % 4,
            seed,
        };
        let mut dry_run = if seed % 4 == 3 {
            generate_circuit(&CircuitSpec {
                dry_run: spec,
                synapses: 50_000,
                ..CircuitSpec::default()
            })
            .unwrap()
            .dry_run
        } else {
            generate(&spec).unwrap()
        };
        if seed % 4 == 1 {
            // Equal KB across metypes (runs merged across metypes), and gids out of
            // order within a metype.
            let n = dry_run.metypes.len();
            for (i, m) in dry_run.metypes.iter_mut().enumerate() {
                m.memory_kb = (i % 3) as f64 * 100.0;
                m.synapses_per_cell = if i == n - 1 { 0.5 } else { 0.0 };
            }
            for p in &mut dry_run.populations {
                for e in &mut p.metype_gids {
                    e.gids.reverse();
                }
            }
        }
        if seed % 4 == 2 {
            // Sparse gids in the first population (gathered by sorting), dense in the
            // others (gathered through the gid table).
            for e in &mut dry_run.populations[0].metype_gids {
                for x in e.gids.iter_mut() {
                    *x = *x * 1013 + 7;
                }
            }
        }
        for (ranks, cycles) in [(1, 1), (3, 1), (16, 4), (97, 1), (256, 2), (4000, 1)] {
            let config = BalancerConfig::builder()
                .ranks(ranks)
                .cycles(cycles)
                .build()
                .unwrap();
            assert_eq!(
                balance(&dry_run, &config, None),
                reference::balance(&dry_run, &config),
                "seed {seed}, {ranks} × {cycles}"
            );
        }
    }
}
