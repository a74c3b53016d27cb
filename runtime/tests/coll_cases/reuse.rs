//! `all_to_allv_into` with one `out` kept across calls, as a time-step loop keeps its
//! receive buffers: the parts are right whatever `out` held before (more or fewer buffers
//! than ranks, stale bytes), and a buffer whose capacity holds its new part takes it in
//! place (its address unchanged: no allocation), on every path.

use ballast_runtime::Communicator;

use super::lens;
use crate::conformance::{fnv, payload};

/// The bytes rank `s` sends rank `d` in call `k` with unit `unit`: lengths that differ by
/// pair and by call (some 0), so that buffers shrink and grow between calls.
fn pair(s: usize, d: usize, k: usize, unit: usize) -> Vec<u8> {
    let len = match (s + 2 * d + k) % 3 {
        0 => 0,
        1 => unit,
        _ => unit / 2,
    };
    payload(
        len,
        (s as u64) << 40 | (d as u64) << 32 | (k as u64) << 24 | unit as u64,
    )
}

pub fn all_to_allv_into_reuses(comm: &mut Communicator) {
    let (n, me) = (comm.world_size(), comm.rank());
    // Stale content: more buffers than ranks, with bytes in them.
    let mut out: Vec<Vec<u8>> = (0..n + 3).map(|i| vec![0xee; i * 5]).collect();
    // Each unit once growing (the buffers are new or larger), then again shrinking.
    let units: Vec<usize> = lens()
        .chain(lens().collect::<Vec<_>>().into_iter().rev())
        .collect();
    for (k, &unit) in units.iter().enumerate() {
        let parts: Vec<Vec<u8>> = (0..n).map(|d| pair(me, d, k, unit)).collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        // Where each buffer is and what it can hold before the call.
        let before: Vec<(*const u8, usize)> = out.iter().map(|b| (b.as_ptr(), b.capacity())).collect();
        comm.all_to_allv_into(&refs, &mut out).unwrap();
        assert_eq!(out.len(), n, "rank {me}: all_to_allv_into call {k}: parts");
        for (s, p) in out.iter().enumerate() {
            let want = pair(s, me, k, unit);
            assert_eq!(
                (p.len(), fnv(p)),
                (want.len(), fnv(&want)),
                "rank {me}: all_to_allv_into call {k} (unit {unit}): part from rank {s}"
            );
            let (at, cap) = before[s];
            if cap >= want.len() && cap > 0 {
                assert_eq!(
                    p.as_ptr(),
                    at,
                    "rank {me}: call {k}: the part from rank {s} ({} bytes) was not received \
                     into its buffer of {cap} bytes",
                    want.len()
                );
            }
        }
    }
}
