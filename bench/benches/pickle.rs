//! Allocation-file reader benchmarks: the restricted unpickler on a 1M-gid pickle as our
//! writer's protocol lays it out (dicts, tuples, lists of BININT with APPENDS) and as
//! neurodamus writes it (a `defaultdict` of `Vector`s through `_array_reconstructor`,
//! protocol 4), plus gunzip + unpickle of the shared neurodamus fixture when it is present.
//! Run: `cargo bench -p ballast-bench --bench pickle`.
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ballast_balancer::pickle::{read_allocation_gzip_with_stats, read_allocation_pickle};
use criterion::{criterion_group, criterion_main, Criterion};

/// Populations, ranks, cycles and gids per bucket: 2 × 256 × 2 × 1024 ≈ 1M gids.
const POPULATIONS: u32 = 2;
const RANKS: u32 = 256;
const CYCLES: u32 = 2;
const GIDS_PER_BUCKET: u32 = 1024;

fn short_unicode(p: &mut Vec<u8>, s: &str) {
    p.push(0x8c);
    p.push(s.len() as u8);
    p.extend_from_slice(s.as_bytes());
}

fn bucket_key(p: &mut Vec<u8>, rank: u32, cycle: u32) {
    for v in [rank, cycle] {
        p.push(b'J');
        p.extend_from_slice(&(v as i32).to_le_bytes());
    }
    p.push(0x86); // TUPLE2
}

/// `{pop: {(rank, cycle): [gids]}}` with plain types, lists filled by APPENDS of 1000 items
/// (as CPython batches them), protocol 3.
fn plain_pickle() -> Vec<u8> {
    let mut p = b"\x80\x03}(".to_vec();
    let mut gid = 0u32;
    for pop in 0..POPULATIONS {
        p.push(b'X');
        let name = format!("pop{pop}");
        p.extend_from_slice(&(name.len() as u32).to_le_bytes());
        p.extend_from_slice(name.as_bytes());
        p.extend_from_slice(b"}(");
        for rank in 0..RANKS {
            for cycle in 0..CYCLES {
                bucket_key(&mut p, rank, cycle);
                p.push(b']');
                for chunk in (0..GIDS_PER_BUCKET).collect::<Vec<_>>().chunks(1000) {
                    p.push(b'(');
                    for _ in chunk {
                        p.push(b'J');
                        p.extend_from_slice(&(gid as i32).to_le_bytes());
                        gid += 1;
                    }
                    p.push(b'e');
                }
            }
        }
        p.push(b'u');
    }
    p.extend_from_slice(b"u.");
    p
}

/// neurodamus' shape: `defaultdict(DryRunStats.defaultdict_vector)` per population, each
/// bucket a `Vector` from `_array_reconstructor(Vector, 'I', 6 (uint32 LE), bytes)` followed
/// by `BUILD {}`; globals memoized and fetched with BINGET as CPython does; protocol 4.
fn neurodamus_pickle() -> Vec<u8> {
    let mut p = b"\x80\x04}(".to_vec();
    // memo 0: collections.defaultdict, 1: the factory, 2: _array_reconstructor, 3: Vector
    let mut globals = Vec::new();
    short_unicode(&mut globals, "collections");
    short_unicode(&mut globals, "defaultdict");
    globals.extend_from_slice(b"\x93\x94");
    short_unicode(&mut globals, "neurodamus.utils.memory");
    short_unicode(&mut globals, "DryRunStats.defaultdict_vector");
    globals.extend_from_slice(b"\x93\x94");
    short_unicode(&mut globals, "array");
    short_unicode(&mut globals, "_array_reconstructor");
    globals.extend_from_slice(b"\x93\x94");
    short_unicode(&mut globals, "neurodamus.utils.compat");
    short_unicode(&mut globals, "Vector");
    globals.extend_from_slice(b"\x93\x94");
    let mut first = true;
    let mut gid = 0u32;
    for pop in 0..POPULATIONS {
        short_unicode(&mut p, &format!("pop{pop}"));
        if first {
            p.extend_from_slice(&globals);
            // the stack now holds the four globals: keep defaultdict and its factory only
            p.extend_from_slice(b"00");
            first = false;
        } else {
            p.extend_from_slice(b"h\x00h\x01");
        }
        p.extend_from_slice(b"\x85R(");
        for rank in 0..RANKS {
            for cycle in 0..CYCLES {
                bucket_key(&mut p, rank, cycle);
                p.extend_from_slice(b"h\x02(h\x03");
                short_unicode(&mut p, "I");
                p.extend_from_slice(b"K\x06B");
                p.extend_from_slice(&(GIDS_PER_BUCKET * 4).to_le_bytes());
                for _ in 0..GIDS_PER_BUCKET {
                    p.extend_from_slice(&gid.to_le_bytes());
                    gid += 1;
                }
                p.extend_from_slice(b"tR}b");
            }
        }
        p.push(b'u');
    }
    p.extend_from_slice(b"u.");
    p
}

fn pickle(c: &mut Criterion) {
    let path = Path::new("bench.pkl");
    let mut group = c.benchmark_group("pickle_read_1M_gids");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    for (name, bytes) in [("plain", plain_pickle()), ("neurodamus", neurodamus_pickle())] {
        let got = read_allocation_pickle(&bytes, path).expect("the benchmark pickle reads");
        let gids: usize = got.iter().flat_map(|p| p.buckets.values()).map(Vec::len).sum();
        assert_eq!(
            gids,
            (POPULATIONS * RANKS * CYCLES * GIDS_PER_BUCKET) as usize,
            "{name}"
        );
        println!("{name}: {} pickle bytes, {gids} gids", bytes.len());
        group.bench_function(name, |b| {
            b.iter(|| read_allocation_pickle(black_box(&bytes), path))
        });
    }
    group.finish();

    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/nd-fixtures/allocation_r4_c2.pkl.gz");
    match std::fs::read(&fixture) {
        Ok(gz) => {
            let mut group = c.benchmark_group("pickle_read_fixture");
            group.sample_size(50).measurement_time(Duration::from_secs(3));
            group.bench_function("allocation_r4_c2", |b| {
                b.iter(|| read_allocation_gzip_with_stats(black_box(&gz), &fixture))
            });
            group.finish();
        }
        Err(e) => println!("SKIP pickle_read_fixture: {}: {e}", fixture.display()),
    }
}

criterion_group!(benches, pickle);
criterion_main!(benches);
