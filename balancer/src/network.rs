//! Cell-level connectivity of the placed cells (who sends spikes to whom), and the peer
//! sets it implies for an assignment of cells to ranks.
//!
//! Cells are numbered globally: population `p`'s gid `g` is cell `offsets[p] + g` (the
//! populations of the [`crate::DryRun`], in order). Connections are stored once per
//! (source cell, target cell) pair, however many synapses it has, as a CSR of sources per
//! target. Sources that are not placed on ranks (virtual populations) are not stored: they
//! add synapses to their targets but no peers.
//!
//! Peers: a rank talks to every rank that holds a source of one of its cells (it receives
//! that source's spikes) and every rank that holds a target of one of its cells (it sends
//! to it). With lazily opened endpoints both ends of such a pair open an endpoint, so peer
//! sets are symmetric.
use crate::error::{BalancerError, Result};

/// Largest `ranks × ranks` bitset [`Network::peers`] uses whatever the network's size
/// (1 MiB: 2,896 ranks).
pub const DENSE_BYTES: usize = 1 << 20;

/// Connectivity between placed cells, CSR by target.
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    /// Global index of each population's gid 0 (`len = populations + 1`; last = cell count).
    pub offsets: Vec<usize>,
    /// `sources[source_start[t]..source_start[t + 1]]`: distinct placed sources of cell `t`.
    pub source_start: Vec<u64>,
    pub sources: Vec<u32>,
    /// Soma position of every cell, µm, when the circuit has them (SONATA `x`, `y`, `z`;
    /// synthetic sheets use z = 0). Used for a spatial locality order.
    pub positions: Option<Vec<[f32; 3]>>,
}

impl Network {
    /// Number of placed cells.
    pub fn cell_count(&self) -> usize {
        *self.offsets.last().unwrap_or(&0)
    }

    /// Number of distinct (source, target) connections.
    pub fn connection_count(&self) -> usize {
        self.sources.len()
    }

    /// Builds the CSR from `(source cell, target cell)` pairs (global indices, duplicates
    /// allowed and merged). `offsets` as in [`Network::offsets`]. Errors on an index out of
    /// range. O(n + m log(m / n)).
    pub fn from_pairs(offsets: Vec<usize>, pairs: &[(u32, u32)]) -> Result<Network> {
        let n = *offsets.last().unwrap_or(&0);
        let mut count = vec![0u64; n + 1];
        for &(s, t) in pairs {
            if s as usize >= n || t as usize >= n {
                return Err(BalancerError::InvalidParameter(format!(
                    "connection ({s} -> {t}) names a cell outside 0..{n}"
                )));
            }
            count[t as usize + 1] += 1;
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let mut fill = count.clone();
        let mut sources = vec![0u32; pairs.len()];
        for &(s, t) in pairs {
            let at = &mut fill[t as usize];
            sources[*at as usize] = s;
            *at += 1;
        }
        // Sort and dedup each target's sources, compacting in place.
        let mut start = vec![0u64; n + 1];
        let mut w = 0usize;
        for t in 0..n {
            let (a, b) = (count[t] as usize, count[t + 1] as usize);
            sources[a..b].sort_unstable();
            start[t] = w as u64;
            let mut last = None;
            for i in a..b {
                let s = sources[i];
                if last != Some(s) {
                    sources[w] = s;
                    w += 1;
                    last = Some(s);
                }
            }
        }
        start[n] = w as u64;
        sources.truncate(w);
        sources.shrink_to_fit();
        Ok(Network {
            offsets,
            source_start: start,
            sources,
            positions: None,
        })
    }

    /// Sources of cell `t`.
    pub fn sources_of(&self, t: usize) -> &[u32] {
        &self.sources[self.source_start[t] as usize..self.source_start[t + 1] as usize]
    }

    /// Peer sets of `ranks` ranks when cell `c` is on rank `rank_of[c]` (`rank_of` holds
    /// a rank below `ranks` for each of the [`Network::cell_count`] cells). Memory: the
    /// distinct (rank, peer) pairs (at most twice the connections, at most `ranks ×
    /// ranks`) and a few words per rank and cell; while a `ranks × ranks` bitset takes no
    /// more than the connections' sources (or [`DENSE_BYTES`]) the pairs are found with one
    /// (the faster way), never beyond. O(n + m + ranks²/64) or O(n + m + pairs × log).
    pub fn peers(&self, rank_of: &[u32], ranks: usize) -> PeerSets {
        let bitset = ranks.saturating_mul(ranks.div_ceil(64)).saturating_mul(8);
        if bitset <= DENSE_BYTES.max(self.sources.len().saturating_mul(4)) {
            self.peers_dense(rank_of, ranks)
        } else {
            self.peers_sparse(rank_of, ranks)
        }
    }

    /// [`Network::peers`] through a `ranks × ranks` bitset, cells in order.
    fn peers_dense(&self, rank_of: &[u32], ranks: usize) -> PeerSets {
        let words = ranks.div_ceil(64);
        let mut bits = vec![0u64; ranks * words];
        for t in 0..self.cell_count() {
            let rt = rank_of[t] as usize;
            for &s in self.sources_of(t) {
                let rs = rank_of[s as usize] as usize;
                if rs != rt {
                    bits[rt * words + rs / 64] |= 1 << (rs % 64);
                    bits[rs * words + rt / 64] |= 1 << (rt % 64);
                }
            }
        }
        let mut start = Vec::with_capacity(ranks + 1);
        start.push(0);
        let mut peers = Vec::new();
        for r in 0..ranks {
            for (w, &word) in bits[r * words..(r + 1) * words].iter().enumerate() {
                let mut b = word;
                while b != 0 {
                    peers.push((w * 64 + b.trailing_zeros() as usize) as u32);
                    b &= b - 1;
                }
            }
            start.push(peers.len());
        }
        PeerSets { ranks, start, peers }
    }

    /// [`Network::peers`] from the cells of each rank, in memory of the pairs.
    fn peers_sparse(&self, rank_of: &[u32], ranks: usize) -> PeerSets {
        let n = self.cell_count();
        // The cells of each rank (a counting sort of the cells by rank).
        let mut cell_start = vec![0usize; ranks + 1];
        for &r in &rank_of[..n] {
            cell_start[r as usize + 1] += 1;
        }
        for r in 0..ranks {
            cell_start[r + 1] += cell_start[r];
        }
        let mut fill = cell_start[..ranks].to_vec();
        let mut cells = vec![0u32; n];
        for (c, &r) in rank_of[..n].iter().enumerate() {
            cells[fill[r as usize]] = c as u32;
            fill[r as usize] += 1;
        }
        drop(fill);
        // For each rank, the ranks of its cells' sources, once each (`seen[q] == r` once
        // rank q is listed for rank r): the ranks it receives from.
        let mut seen = vec![u32::MAX; ranks];
        let mut start = Vec::with_capacity(ranks + 1);
        start.push(0);
        let mut from = Vec::new();
        for r in 0..ranks {
            for &c in &cells[cell_start[r]..cell_start[r + 1]] {
                for &s in self.sources_of(c as usize) {
                    let q = rank_of[s as usize];
                    if q as usize != r && seen[q as usize] != r as u32 {
                        seen[q as usize] = r as u32;
                        from.push(q);
                    }
                }
            }
            start.push(from.len());
        }
        PeerSets::symmetric(ranks, &start, from)
    }

    /// Peer sets counted by node (`ranks_per_node` consecutive ranks form a node): for each
    /// rank, the set of *other nodes* holding its peers (what `xrc` opens endpoints to).
    pub fn peer_nodes(&self, peers: &PeerSets, ranks_per_node: usize) -> Vec<usize> {
        let rpn = ranks_per_node.max(1);
        (0..peers.ranks)
            .map(|r| {
                let mut nodes: Vec<usize> =
                    peers.iter(r).map(|q| q / rpn).filter(|&n| n != r / rpn).collect();
                nodes.dedup();
                nodes.len()
            })
            .collect()
    }

    /// An order of the cells that keeps connected cells close: breadth-first from the
    /// lowest-degree cell of each component over the undirected connection graph, visiting
    /// neighbours by ascending degree (Cuthill–McKee, E. Cuthill and J. McKee, "Reducing
    /// the bandwidth of sparse symmetric matrices", ACM '69). Cutting this order into
    /// contiguous pieces puts connected cells on the same rank. O(n + m).
    pub fn locality_order(&self) -> Vec<u32> {
        let n = self.cell_count();
        // Undirected adjacency: sources plus targets of each cell.
        let mut degree = vec![0u32; n];
        for t in 0..n {
            for &s in self.sources_of(t) {
                if s as usize != t {
                    degree[t] += 1;
                    degree[s as usize] += 1;
                }
            }
        }
        let mut start = vec![0u64; n + 1];
        for i in 0..n {
            start[i + 1] = start[i] + degree[i] as u64;
        }
        let mut fill: Vec<u64> = start[..n].to_vec();
        let mut adj = vec![0u32; start[n] as usize];
        for t in 0..n {
            for &s in self.sources_of(t) {
                if s as usize != t {
                    adj[fill[t] as usize] = s;
                    fill[t] += 1;
                    adj[fill[s as usize] as usize] = t as u32;
                    fill[s as usize] += 1;
                }
            }
        }
        let mut seeds: Vec<u32> = (0..n as u32).collect();
        seeds.sort_by_key(|&c| (degree[c as usize], c));
        let mut seen = vec![false; n];
        let mut order = Vec::with_capacity(n);
        let mut next = Vec::new();
        for seed in seeds {
            if seen[seed as usize] {
                continue;
            }
            seen[seed as usize] = true;
            let mut head = order.len();
            order.push(seed);
            while head < order.len() {
                let c = order[head] as usize;
                head += 1;
                next.clear();
                next.extend(
                    adj[start[c] as usize..start[c + 1] as usize]
                        .iter()
                        .copied()
                        .filter(|&x| !seen[x as usize]),
                );
                next.sort_unstable_by_key(|&x| (degree[x as usize], x));
                next.dedup();
                for &x in &next {
                    seen[x as usize] = true;
                    order.push(x);
                }
            }
        }
        order
    }
}

/// An order of the cells in which every contiguous run is spatially compact: recursive
/// coordinate bisection (M. J. Berger and S. H. Bokhari, "A partitioning strategy for
/// nonuniform problems on multiprocessors", IEEE Trans. Computers C-36(5), 1987): split at
/// the median of the longest axis of the bounding box, recurse on both halves.
/// O(n log n) with `select_nth_unstable`.
pub fn spatial_order(positions: &[[f32; 3]]) -> Vec<u32> {
    fn bisect(cells: &mut [u32], positions: &[[f32; 3]]) {
        if cells.len() <= 2 {
            return;
        }
        let (mut lo, mut hi) = ([f32::INFINITY; 3], [f32::NEG_INFINITY; 3]);
        for &c in cells.iter() {
            for a in 0..3 {
                lo[a] = lo[a].min(positions[c as usize][a]);
                hi[a] = hi[a].max(positions[c as usize][a]);
            }
        }
        let axis = (0..3)
            .max_by(|&a, &b| (hi[a] - lo[a]).total_cmp(&(hi[b] - lo[b])))
            .unwrap_or(0);
        let mid = cells.len() / 2;
        cells.select_nth_unstable_by(mid, |&a, &b| {
            positions[a as usize][axis]
                .total_cmp(&positions[b as usize][axis])
                .then(a.cmp(&b))
        });
        let (left, right) = cells.split_at_mut(mid);
        bisect(left, positions);
        bisect(right, positions);
    }
    let mut cells: Vec<u32> = (0..positions.len() as u32).collect();
    bisect(&mut cells, positions);
    cells
}

/// For each rank, the set of other ranks it talks to: the peers of every rank, ascending,
/// one rank after the other in one array (as the network's sources), so that memory grows
/// with the (rank, peer) pairs and not with `ranks × ranks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSets {
    pub ranks: usize,
    /// `peers[start[r]..start[r + 1]]`: the peers of rank `r`, ascending.
    start: Vec<usize>,
    peers: Vec<u32>,
}

impl PeerSets {
    /// The symmetric sets of `ranks` ranks from one direction: `list[start[r]..start[r +
    /// 1]]` holds, each once and in any order, ranks other than `r` that `r` talks to; the
    /// result adds `r` to each of theirs.
    fn symmetric(ranks: usize, start: &[usize], mut list: Vec<u32>) -> PeerSets {
        for r in 0..ranks {
            list[start[r]..start[r + 1]].sort_unstable();
        }
        // The transpose: for each rank q, the ranks listing q, ascending (filled by rank).
        let mut back_start = vec![0usize; ranks + 1];
        for &q in &list {
            back_start[q as usize + 1] += 1;
        }
        for q in 0..ranks {
            back_start[q + 1] += back_start[q];
        }
        let mut fill = back_start[..ranks].to_vec();
        let mut back = vec![0u32; list.len()];
        for r in 0..ranks {
            for &q in &list[start[r]..start[r + 1]] {
                back[fill[q as usize]] = r as u32;
                fill[q as usize] += 1;
            }
        }
        drop(fill);
        // Each rank's set: the union of its two sorted lists.
        let mut out_start = Vec::with_capacity(ranks + 1);
        out_start.push(0);
        let mut peers = Vec::with_capacity(list.len());
        for r in 0..ranks {
            let (mut a, mut b) = (
                &list[start[r]..start[r + 1]],
                &back[back_start[r]..back_start[r + 1]],
            );
            while let (Some(&x), Some(&y)) = (a.first(), b.first()) {
                peers.push(x.min(y));
                if x <= y {
                    a = &a[1..];
                }
                if y <= x {
                    b = &b[1..];
                }
            }
            peers.extend_from_slice(a);
            peers.extend_from_slice(b);
            out_start.push(peers.len());
        }
        peers.shrink_to_fit();
        PeerSets {
            ranks,
            start: out_start,
            peers,
        }
    }

    /// These sets with `extra(r)`'s ranks added to the set of each rank `r`, and `r` to
    /// theirs (a rank naming itself is left out).
    pub fn with<I: IntoIterator<Item = usize>>(&self, extra: impl Fn(usize) -> I) -> PeerSets {
        let mut start = Vec::with_capacity(self.ranks + 1);
        start.push(0);
        let mut list = Vec::with_capacity(self.peers.len());
        for r in 0..self.ranks {
            let at = list.len();
            list.extend_from_slice(self.slice(r));
            list.extend(extra(r).into_iter().filter(|&q| q != r).map(|q| q as u32));
            list[at..].sort_unstable();
            let mut kept = at;
            for i in at..list.len() {
                if kept == at || list[kept - 1] != list[i] {
                    list[kept] = list[i];
                    kept += 1;
                }
            }
            list.truncate(kept);
            start.push(list.len());
        }
        PeerSets::symmetric(self.ranks, &start, list)
    }

    fn slice(&self, rank: usize) -> &[u32] {
        &self.peers[self.start[rank]..self.start[rank + 1]]
    }

    /// Whether `peer` is in the set of `rank`.
    pub fn contains(&self, rank: usize, peer: usize) -> bool {
        u32::try_from(peer).is_ok_and(|p| self.slice(rank).binary_search(&p).is_ok())
    }

    /// Number of peers of `rank`.
    pub fn count(&self, rank: usize) -> usize {
        self.start[rank + 1] - self.start[rank]
    }

    /// Number of (rank, peer) pairs of all ranks (each connection counted at both ends).
    pub fn pairs(&self) -> usize {
        self.peers.len()
    }

    /// Peers of `rank`, ascending.
    pub fn iter(&self, rank: usize) -> impl Iterator<Item = usize> + '_ {
        self.slice(rank).iter().map(|&q| q as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: usize) -> Network {
        // 0 -> 1 -> 2 -> ... -> n-1, plus a duplicate that must merge.
        let mut pairs: Vec<(u32, u32)> = (1..n as u32).map(|t| (t - 1, t)).collect();
        pairs.push((0, 1));
        Network::from_pairs(vec![0, n], &pairs).unwrap()
    }

    #[test]
    fn csr_merges_duplicates_and_checks_range() {
        let net = chain(5);
        assert_eq!(net.connection_count(), 4);
        assert_eq!(net.sources_of(1), &[0]);
        assert_eq!(net.sources_of(0), &[] as &[u32]);
        assert!(Network::from_pairs(vec![0, 3], &[(0, 3)]).is_err());
    }

    #[test]
    fn peers_are_symmetric_and_local_placement_has_fewer() {
        let net = chain(8);
        // Contiguous: ranks 0..4 hold 2 cells each: each rank talks to its neighbours.
        let contiguous: Vec<u32> = (0..8).map(|c| c / 2).collect();
        let p = net.peers(&contiguous, 4);
        assert_eq!((0..4).map(|r| p.count(r)).collect::<Vec<_>>(), vec![1, 2, 2, 1]);
        assert!(p.contains(1, 0) && p.contains(0, 1) && !p.contains(0, 2));
        // Round robin: every connection crosses ranks.
        let rr: Vec<u32> = (0..8).map(|c| c % 4).collect();
        let q = net.peers(&rr, 4);
        assert_eq!((0..4).map(|r| q.count(r)).collect::<Vec<_>>(), vec![2, 2, 2, 2]);
        assert_eq!(q.iter(0).collect::<Vec<_>>(), vec![1, 3]);
        // By node of 2 ranks: rank 0's peers (1, 3) sit on node 0 (itself) and node 1.
        assert_eq!(net.peer_nodes(&q, 2)[0], 1);
    }

    /// The sets as `BTreeSet`s, built the obvious way from every connection.
    fn reference(net: &Network, rank_of: &[u32], ranks: usize) -> Vec<std::collections::BTreeSet<usize>> {
        let mut sets = vec![std::collections::BTreeSet::new(); ranks];
        for t in 0..net.cell_count() {
            for &s in net.sources_of(t) {
                let (rt, rs) = (rank_of[t] as usize, rank_of[s as usize] as usize);
                if rt != rs {
                    sets[rt].insert(rs);
                    sets[rs].insert(rt);
                }
            }
        }
        sets
    }

    #[test]
    fn peers_match_the_connections_on_random_networks() {
        // A small xorshift: 40 networks of 1..60 cells on 1..20 ranks, with and without
        // ring partners added.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % m) as usize
        };
        for _ in 0..40 {
            let n = 1 + next(60);
            let ranks = 1 + next(20);
            let pairs: Vec<(u32, u32)> = (0..next(200))
                .map(|_| (next(n as u64) as u32, next(n as u64) as u32))
                .collect();
            let net = Network::from_pairs(vec![0, n], &pairs).unwrap();
            let rank_of: Vec<u32> = (0..n).map(|_| next(ranks as u64) as u32).collect();
            let expected = reference(&net, &rank_of, ranks);
            let p = net.peers(&rank_of, ranks);
            assert_eq!(net.peers_dense(&rank_of, ranks), p);
            assert_eq!(net.peers_sparse(&rank_of, ranks), p);
            for (r, e) in expected.iter().enumerate() {
                assert_eq!(
                    p.iter(r).collect::<Vec<_>>(),
                    e.iter().copied().collect::<Vec<_>>()
                );
                assert_eq!(p.count(r), e.len());
                for q in 0..ranks {
                    assert_eq!(p.contains(r, q), e.contains(&q));
                }
            }
            assert_eq!(p.pairs(), expected.iter().map(|s| s.len()).sum::<usize>());
            let ring = p.with(|r| [(r + 1) % ranks, (r + ranks - 1) % ranks]);
            for (r, e) in expected.iter().enumerate() {
                let mut e = e.clone();
                e.extend([(r + 1) % ranks, (r + ranks - 1) % ranks]);
                e.remove(&r);
                assert_eq!(
                    ring.iter(r).collect::<Vec<_>>(),
                    e.into_iter().collect::<Vec<_>>()
                );
            }
        }
    }

    /// Many ranks and few cells (the node search tries such counts): the sets take memory
    /// for the pairs, not a `ranks × ranks` table (3 × 10^6 ranks: 1.1 TB of bits).
    #[test]
    fn peers_of_many_ranks_take_memory_for_the_pairs_only() {
        let ranks = 3_000_000;
        let net = Network::from_pairs(vec![0, 3], &[(0, 1), (1, 2)]).unwrap();
        let p = net.peers(&[0, 1_500_000, 2_999_999], ranks);
        assert_eq!(p.pairs(), 4);
        assert_eq!(p.iter(1_500_000).collect::<Vec<_>>(), vec![0, 2_999_999]);
        assert_eq!((p.count(0), p.count(1), p.count(2_999_999)), (1, 0, 1));
        let ring = p.with(|r| [(r + 1) % ranks]);
        assert_eq!(ring.pairs(), 4 + 2 * ranks);
        assert_eq!(ring.iter(0).collect::<Vec<_>>(), vec![1, 1_500_000, 2_999_999]);
    }

    #[test]
    fn spatial_order_keeps_halves_apart() {
        // 8 cells on a line, shuffled: the order's first half is the left half.
        let xs = [5.0, 1.0, 7.0, 3.0, 0.0, 6.0, 2.0, 4.0];
        let pos: Vec<[f32; 3]> = xs.iter().map(|&x| [x, 0.0, 0.0]).collect();
        let order = spatial_order(&pos);
        let mut left: Vec<f32> = order[..4].iter().map(|&c| xs[c as usize]).collect();
        left.sort_by(f32::total_cmp);
        assert_eq!(left, vec![0.0, 1.0, 2.0, 3.0]);
        let mut all = order.clone();
        all.sort_unstable();
        assert_eq!(all, (0..8).collect::<Vec<u32>>());
    }

    #[test]
    fn locality_order_visits_every_cell_once_and_keeps_chains_together() {
        let net = chain(6);
        let order = net.locality_order();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..6).collect::<Vec<u32>>());
        // A chain starts at an end (degree 1) and walks it.
        assert!(
            order == vec![0, 1, 2, 3, 4, 5] || order == vec![5, 4, 3, 2, 1, 0],
            "{order:?}"
        );
    }
}
