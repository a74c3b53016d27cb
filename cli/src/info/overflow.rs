//! What `endpoint_overflow` does for a configuration, for a rank with P peers: whether the
//! datagram path runs (`datagram::chunk_for`, the test the engine makes), falls back to
//! evict (and why) or does not apply, how many peers the model puts past the cap, and what
//! the cap costs or saves by the footprint model.
use ballast_runtime::datagram::chunk_for;
use ballast_runtime::model::datagram_mtu;
use ballast_runtime::{TransportConfig, TransportKind};

/// The lines of `ballast info` on `endpoint_overflow`, for a rank with `peers` peers in a
/// world of `world` ranks.
pub(super) fn overflow_lines(t: &TransportConfig, peers: usize, world: usize) -> Vec<String> {
    let (cap, overflow) = (t.max_endpoints, t.endpoint_overflow);
    if t.kind == TransportKind::Mpi && t.mpi_native {
        return vec![format!(
            "max_endpoints={cap} and endpoint_overflow={overflow} do not apply: the MPI native path has no \
             endpoints and no datagram path (MPI manages its connections)"
        )];
    }
    if cap == 0 {
        return vec![format!(
            "endpoint_overflow={overflow} has no effect: max_endpoints is 0 (no cap)"
        )];
    }
    let evict = format!("peers beyond max_endpoints={cap} evict the least recently used endpoint");
    match chunk_for(t, datagram_mtu(t.kind)) {
        Ok(Some(chunk)) => datagram_lines(t, chunk, peers, world),
        Ok(None) => vec![format!("endpoint_overflow={overflow}: {evict}")],
        Err(why) => vec![format!(
            "endpoint_overflow={overflow} falls back to evict: transport {} {why}; {evict}",
            t.kind
        )],
    }
}

/// With the datagram path (chunks of `chunk` bytes): what it is, how many peers go past
/// the cap, and what the cap costs or saves.
fn datagram_lines(t: &TransportConfig, chunk: usize, peers: usize, world: usize) -> Vec<String> {
    let (cap, overflow) = (t.max_endpoints, t.endpoint_overflow);
    let with_cap = t.predict(peers, world, t.ranks_per_node);
    let mut lines = vec![format!(
        "endpoint_overflow={overflow}: peers beyond max_endpoints={cap} go over the datagram path \
         (chunks of {chunk} B{}; recv_sharing={})",
        if t.kind == TransportKind::Verbs {
            " at the model's 4096 B MTU: the device's active MTU sets it, 972 B on soft-RoCE at a netdev MTU of 1500"
        } else {
            ""
        },
        t.recv_sharing
    )];
    let (c, past) = (with_cap.peers_connected, with_cap.datagram_peers);
    let from = if t.lazy_connect {
        "--peers"
    } else {
        "lazy_connect off: every other rank"
    };
    if past == 0 {
        lines.push(format!(
            "with {c} peers ({from}) no peer goes past the cap of {cap}: no datagram peer is predicted"
        ));
    } else {
        lines.push(format!(
            "of {c} peers ({from}), {} get endpoints and {past} go past the cap as datagram peers",
            with_cap.endpoints_live
        ));
    }
    lines.push(cost_line(t, c as usize, peers, world));
    lines
}

/// What a cap costs or saves on this transport for a rank with `connected` peers: the
/// model's costs for one peer among them (an endpoint, a datagram peer, and the fixed
/// bytes the datagram path adds, verbs: its UD QP and rings) and the totals with and
/// without the cap.
fn cost_line(t: &TransportConfig, connected: usize, peers: usize, world: usize) -> String {
    let n = connected.max(1);
    let w = world.max(n + 1);
    let total = |e: usize, dg: usize| t.predict_with(n, e, dg, w).total_bytes();
    // A datagram peer once the path exists (the second one), and what the first one adds
    // beyond that (verbs: the UD QP, made with the rank's first datagram peer).
    let endpoint = total(n, 0).saturating_sub(total(n - 1, 0));
    let dg_peer = total(n - 1, 2).saturating_sub(total(n - 1, 1));
    let fixed = total(n - 1, 1)
        .saturating_sub(total(n - 1, 0))
        .saturating_sub(dg_peer);
    let totals = totals(t, peers, world);
    if dg_peer >= endpoint {
        return format!(
            "a datagram peer costs {dg_peer} B, an endpoint {endpoint} B: the cap bounds endpoints but \
             does not save memory on {} with recv_sharing={} ({totals})",
            t.kind, t.recv_sharing
        );
    }
    let saved = endpoint - dg_peer;
    let each =
        format!("each peer past the cap saves {saved} B (endpoint {endpoint} B, datagram peer {dg_peer} B)");
    if fixed == 0 {
        format!("the datagram path has no fixed cost on {}; {each}: a cap saves memory as soon as a peer goes past it ({totals})", t.kind)
    } else {
        let what = if t.kind == TransportKind::Verbs {
            "the UD QP"
        } else {
            "the datagram path"
        };
        format!(
            "{what} costs {fixed} B per rank once a peer goes past the cap (made on first use); {each}: a cap saves memory once more than {} peers go past it ({totals})",
            fixed / saved
        )
    }
}

/// The predicted totals with the cap and without it, and what the cap does here.
fn totals(t: &TransportConfig, peers: usize, world: usize) -> String {
    let rpn = t.ranks_per_node;
    let uncapped = TransportConfig {
        max_endpoints: 0,
        ..*t
    };
    let (a, b) = (
        t.predict(peers, world, rpn).total_bytes(),
        uncapped.predict(peers, world, rpn).total_bytes(),
    );
    let here = match a.cmp(&b) {
        std::cmp::Ordering::Less => format!("saves {} B per rank", b - a),
        std::cmp::Ordering::Equal => "changes nothing".to_string(),
        std::cmp::Ordering::Greater => format!("costs {} B more per rank", a - b),
    };
    format!("predicted total {a} B with the cap, {b} B without: here the cap {here}")
}
