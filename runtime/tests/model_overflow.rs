//! The memory model in checked arithmetic (issue 33, finding 6): per-peer receive queues of
//! `recv_depth` 2^20 buffers of 1 GiB, 16,383 peers fit in 64 bits (18.4 EB), 16,384 do
//! not: `try_predict` refuses naming the term, `predict` saturates instead of wrapping.

use ballast_runtime::CommError;
use ballast_runtime::Error;
use ballast_runtime::{RecvSharing, TransportConfig};

fn per_peer() -> TransportConfig {
    TransportConfig {
        recv_sharing: RecvSharing::PerPeer,
        recv_depth: 1 << 20,
        buffer_size: 1 << 30,
        ..Default::default()
    }
}

#[test]
fn the_last_peer_count_that_fits_is_predicted_and_the_next_refused() {
    let t = per_peer();
    let fits = t.try_predict(16_383, 16_384, 1).unwrap();
    assert!(fits.total_bytes() > 18_400_000_000_000_000_000, "{fits:?}");
    assert_eq!(t.predict(16_383, 16_384, 1), fits);
    match t.try_predict(16_384, 16_385, 1) {
        Err(Error::Comm(CommError::ModelOverflow { term })) => {
            assert!(
                term.starts_with("endpoints (16384) x a receive queue's bytes ("),
                "{term}"
            )
        }
        other => panic!("expected the overflow, got {other:?}"),
    }
    // Wrapped, this was 343 GB; saturated, it is more than any other prediction.
    let p = t.predict(16_384, 16_385, 1);
    assert_eq!(p.total_bytes(), u64::MAX);
    assert!(p.total_bytes() > fits.total_bytes());
}

#[test]
fn every_term_that_overflows_is_named() {
    let big = TransportConfig {
        recv_sharing: RecvSharing::Shared,
        srq_depth: usize::MAX / 2,
        buffer_size: 1 << 30,
        ..Default::default()
    };
    let e = big.try_predict(1, 2, 1).unwrap_err().to_string();
    assert!(
        e.contains("srq_depth (9223372036854775807) x buffer_size + SRQ WQE bytes"),
        "{e}"
    );
    let pool = TransportConfig {
        buffer_count: usize::MAX,
        buffer_size: 2,
        ..Default::default()
    };
    let e = pool.try_predict(1, 2, 1).unwrap_err().to_string();
    assert_eq!(
        e,
        "the memory model overflows 64 bits at buffer_count (18446744073709551615) x buffer_size (2): \
         the configuration asks for more than 2^64 bytes"
    );
    // Ordinary configurations are unchanged.
    let t = TransportConfig::default();
    assert_eq!(t.try_predict(100, 1000, 1).unwrap(), t.predict(100, 1000, 1));
}
