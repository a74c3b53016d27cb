//! The scan-only refinement as it was before the swap index (the reference
//! [`super::super::refine::refine_with`] must match at every step).
use super::super::refine::Extremes;
use super::super::Order;

/// The best transfer found from the heaviest bucket to the lightest.
enum Transfer {
    /// Move the cell at this position of the heavy bucket.
    Move(usize),
    /// Swap the cells at these positions (heavy, light).
    Swap(usize, usize),
}

/// Moves and swaps between the heaviest and the lightest bucket while that lowers the
/// heavier of the two. `members[b]` stays sorted (by descending KB).
#[inline(never)]
pub(super) fn refine(order: &Order, loads: &mut [f64], members: &mut [Vec<u32>]) {
    if loads.len() < 2 {
        return;
    }
    let kb = |i: &u32| order.kb(*i);
    let mut extremes = Extremes::new(loads);
    let mut light_kb: Vec<f64> = Vec::new();
    let max_steps = 4 * loads.len() + 1000;
    for _ in 0..max_steps {
        let (h, l) = (extremes.heaviest(), extremes.lightest());
        let gap = loads[h] - loads[l];
        // Tolerance so float noise cannot make two buckets trade the same cell forever.
        let eps = 1e-9 * loads[h].abs().max(1.0);
        if gap <= 2.0 * eps {
            break;
        }
        let half = gap / 2.0;
        let useful = |d: f64| d > eps && d < gap - eps;
        let mut best: Option<(f64, Transfer)> = None;
        let mut consider = |d: f64, t: Transfer| {
            if useful(d)
                && best
                    .as_ref()
                    .is_none_or(|(bd, _)| (d - half).abs() < (bd - half).abs())
            {
                best = Some((d, t));
            }
        };
        // Move: the cell of the heavy bucket closest to half the gap.
        let heavy = &members[h];
        let lighter_than_half = order.first_at_most(half);
        let pos = heavy.partition_point(|&c| c < lighter_than_half);
        for p in [pos.wrapping_sub(1), pos] {
            if let Some(c) = heavy.get(p) {
                consider(kb(c), Transfer::Move(p));
            }
        }
        // Swap: for each distinct KB `a` in the heavy bucket, the light cell `b` closest to
        // `a - half`, so the transfer `a - b` is closest to half the gap. The light cells'
        // KB are listed first (descending); `a` falls along the heavy bucket, so the first
        // light cell of KB <= `a - half` only moves forward.
        let light = &members[l];
        light_kb.clear();
        light_kb.extend(light.iter().map(|&c| order.kbs[order.segment_of(c)]));
        let (mut p, mut q) = (0, 0);
        while p < heavy.len() {
            let k = order.segment_of(heavy[p]);
            let a = order.kbs[k];
            let target = a - half;
            while q < light_kb.len() && light_kb[q] > target {
                q += 1;
            }
            for q in [q.wrapping_sub(1), q] {
                if let Some(&b) = light_kb.get(q) {
                    consider(a - b, Transfer::Swap(p, q));
                }
            }
            // Past the cells of KB `a` (contiguous positions).
            let end = order.kb_end[k] as u32;
            p += 1;
            while p < heavy.len() && heavy[p] < end {
                p += 1;
            }
        }
        let Some((d, transfer)) = best else { break };
        let insert_sorted = |v: &mut Vec<u32>, c: u32| {
            let at = v.partition_point(|&x| x < c);
            v.insert(at, c);
        };
        match transfer {
            Transfer::Move(p) => {
                let i = members[h].remove(p);
                insert_sorted(&mut members[l], i);
            }
            Transfer::Swap(p, q) => {
                let i = members[h].remove(p);
                let j = members[l].remove(q);
                insert_sorted(&mut members[l], i);
                insert_sorted(&mut members[h], j);
            }
        }
        loads[h] -= d;
        loads[l] += d;
        extremes.update(loads, h);
        extremes.update(loads, l);
    }
}
