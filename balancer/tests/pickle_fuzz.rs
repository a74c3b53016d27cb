//! The pickle and gzip readers on hostile input: pickles of shared structure built by
//! doubling with DUP (a dict key, a BUILD state) are accepted or refused after work linear
//! in their size, and a bounded mutation fuzzer (proptest: bit flips, byte changes,
//! truncations, insertions, deletions, opcode swaps, copied ranges) over valid pickle and
//! gzip files: every outcome is `Ok` or `Err`, never a panic or an abort, and the work
//! ([`ReadStats::work`]: opcodes executed + values visited) stays within
//! `WORK_PER_BYTE × pickle bytes + WORK_SLACK`. Cost is measured by that counter, not by
//! time; a watchdog fails the binary only if something hangs.
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

use ballast_balancer::pickle::{
    read_allocation_gzip_with_stats, read_allocation_pickle_with_stats, write_allocation_file, ReadStats,
    MAX_GZIP_RATIO,
};
use ballast_balancer::{Bucket, PopulationAllocation};
use proptest::prelude::*;

/// Work allowed per pickle byte, and for any input. The reader's own bounds give about 14
/// per byte (opcodes, tuple items, dict key nodes up to 4 per byte, array elements up to 2
/// per byte, BUILD states, populations, buckets and gids) plus 5120.
const WORK_PER_BYTE: u64 = 16;
const WORK_SLACK: u64 = 8192;

/// Exits the test binary if the whole run takes longer than this: only a hang gets there.
const HANG_TIMEOUT: Duration = Duration::from_secs(300);

fn watchdog() {
    static START: Once = Once::new();
    START.call_once(|| {
        std::thread::spawn(|| {
            std::thread::sleep(HANG_TIMEOUT);
            eprintln!("pickle_fuzz: still running after {HANG_TIMEOUT:?}: a read hangs");
            std::process::exit(101);
        });
    });
}

fn linear(stats: &ReadStats) -> bool {
    stats.work() <= WORK_PER_BYTE * stats.pickle_bytes + WORK_SLACK
}

/// `{'P': {key: []}}` where the key is `1` paired with itself by DUP + TUPLE2 `n` times:
/// about 2n + 12 bytes, a tuple of 2^n leaves.
fn dict_key_doubling(n: usize) -> Vec<u8> {
    let mut p = b"\x80\x04}\x8c\x01P}K\x01".to_vec();
    for _ in 0..n {
        p.extend_from_slice(b"2\x86");
    }
    p.extend_from_slice(b"]ss.");
    p
}

/// `{'P': {(0, 0): []}}` where the list gets BUILD with the state `None` paired with itself
/// `n` times.
fn build_state_doubling(n: usize) -> Vec<u8> {
    let mut p = b"\x80\x04}\x8c\x01P}K\x00K\x00\x86]N".to_vec();
    for _ in 0..n {
        p.extend_from_slice(b"2\x86");
    }
    p.extend_from_slice(b"bss.");
    p
}

fn read(p: &[u8]) -> (Result<Vec<PopulationAllocation>, String>, ReadStats) {
    let (r, s) = read_allocation_pickle_with_stats(p, Path::new("doubled.pkl"));
    (r.map_err(|e| e.to_string()), s)
}

#[test]
fn doubled_dict_keys_are_refused_after_linear_work() {
    watchdog();
    // One doubling is a plain (1, 1) key: accepted.
    let (r, s) = read(&dict_key_doubling(1));
    assert_eq!(
        r.unwrap()[0].buckets,
        BTreeMap::from([(Bucket { rank: 1, cycle: 1 }, vec![])])
    );
    assert!(linear(&s), "{s:?}");
    for n in [24, 30, 60] {
        let p = dict_key_doubling(n);
        let (r, s) = read(&p);
        let e = r.expect_err("a key of 2^n nodes is refused");
        assert!(
            e.contains("dict keys are re-used far more than the pickle size allows"),
            "{n}: {e}"
        );
        assert!(linear(&s), "{n} doublings: {s:?} for {} bytes", p.len());
        // Each opcode ran once and each tuple item was visited once: no expansion.
        assert!(s.work() <= 4 * p.len() as u64, "{n} doublings: {s:?}");
    }
}

#[test]
fn doubled_build_states_are_refused_after_linear_work() {
    watchdog();
    // `(None, None)` is an empty state, as CPython writes for an object without attributes.
    let (r, s) = read(&build_state_doubling(1));
    assert_eq!(
        r.unwrap()[0].buckets,
        BTreeMap::from([(Bucket { rank: 0, cycle: 0 }, vec![])])
    );
    assert!(linear(&s), "{s:?}");
    for n in [2, 24, 30, 60] {
        let p = build_state_doubling(n);
        let (r, s) = read(&p);
        let e = r.expect_err("a nested state is not an empty state");
        assert!(e.contains("BUILD with a non-empty state (tuple)"), "{n}: {e}");
        assert!(
            s.work() <= 4 * p.len() as u64,
            "{n} doublings: {s:?} for {} bytes",
            p.len()
        );
    }
}

/// One population dict referenced by many population names (BINGET): refused before its
/// buckets are converted once per name.
#[test]
fn a_population_dict_shared_by_many_names_is_refused() {
    watchdog();
    let mut p = b"\x80\x04}(\x8c\x01A}(".to_vec();
    for r in 0..200u8 {
        p.extend_from_slice(&[b'K', r, b'K', 0, 0x86, b']']);
    }
    p.extend_from_slice(b"u\x94");
    for i in 0..2000u16 {
        let name = format!("{i:04}");
        p.extend_from_slice(&[0x8c, 4]);
        p.extend_from_slice(name.as_bytes());
        p.extend_from_slice(b"h\x00");
    }
    p.extend_from_slice(b"u.");
    let (r, s) = read(&p);
    let e = r.expect_err("2000 × 200 buckets from a 10 KB file");
    assert!(e.contains("more buckets than the pickle has bytes"), "{e}");
    assert!(linear(&s), "{s:?} for {} bytes", p.len());
}

/// 64 MiB of zeros gzip to about 64 KB: refused once the output passes 256 × the file + 1 MiB
/// (about 17 MiB), before it is all inflated.
#[test]
fn a_gzip_bomb_is_refused_in_proportion_to_its_size() {
    watchdog();
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        e.write_all(&zeros).unwrap();
    }
    let bomb = e.finish().unwrap();
    assert!(bomb.len() < 100_000, "{}", bomb.len());
    let (r, s) = read_allocation_gzip_with_stats(&bomb, Path::new("bomb.pkl.gz"));
    let e = r.unwrap_err().to_string();
    let limit = MAX_GZIP_RATIO * bomb.len() as u64 + (1 << 20);
    assert!(
        e.contains(&format!(
            "decompressed pickle exceeds {limit} bytes (at most 256 times the file's {} bytes",
            bomb.len()
        )),
        "{e}"
    );
    assert_eq!(s.work(), 0, "no opcode ran");
}

// ---------------------------------------------------------------------------------------
// The mutation fuzzer.

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(b)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// Valid pickles to mutate: our writer's (protocol 3), hand-written protocol 0, 2 and 4
/// files with neurodamus' types, the doubling pickles, and neurodamus' own fixture when
/// `../shared` is there.
fn seeds() -> &'static [Vec<u8>] {
    static SEEDS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allocation_r3_c2.pkl.gz");
        let pops = vec![
            PopulationAllocation {
                name: "NodeA".into(),
                buckets: BTreeMap::from([
                    (Bucket { rank: 0, cycle: 0 }, vec![0, 5, 300]),
                    (Bucket { rank: 2, cycle: 1 }, vec![1, 70000]),
                ]),
            },
            PopulationAllocation { name: "B".into(), buckets: BTreeMap::from([(Bucket { rank: 1, cycle: 0 }, vec![2])]) },
        ];
        write_allocation_file(&path, &pops).unwrap();
        let mut seeds = vec![
            gunzip(&std::fs::read(&path).unwrap()),
            b"\x80\x02}q\x00(X\x01\x00\x00\x00Aq\x01}q\x02K\x01K\x02\x86q\x03]q\x04(K\x03M,\x01J\x70\x11\x01\x00esu.".to_vec(),
            b"(dp0\nS'A'\np1\n(dp2\n(I1\nI2\ntp3\n(lp4\nI3\naL4L\nassV\\u00e9\n(dsS'B\\x41'\n(ds.".to_vec(),
            // defaultdict(DryRunStats.defaultdict_vector) of Vector via _array_reconstructor.
            b"\x80\x04\x8c\x0bcollections\x8c\x0bdefaultdict\x93\x8c\x17neurodamus.utils.memory\x8c\x1eDryRunStats.defaultdict_vector\x93\x85R\x8c\x01P}K\x00K\x01\x86\x8c\x05array\x8c\x14_array_reconstructor\x93(\x8c\x17neurodamus.utils.compat\x8c\x06Vector\x93\x8c\x01IK\x08C\x08\x01\x00\x00\x00\x02\x00\x00\x00tR}bss.".to_vec(),
            dict_key_doubling(1),
            build_state_doubling(1),
        ];
        let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/nd-fixtures/allocation_r4_c2.pkl.gz");
        match std::fs::read(&fixture) {
            Ok(b) => seeds.push(gunzip(&b)),
            Err(e) if std::env::var("CI").as_deref() == Ok("true") => panic!("CI=true but {} is missing: {e}", fixture.display()),
            Err(e) => eprintln!("SKIP seed {}: {e}", fixture.display()),
        }
        for (i, s) in seeds.iter().enumerate() {
            let (r, st) = read_allocation_pickle_with_stats(s, Path::new("seed"));
            assert!(r.is_ok(), "seed {i} is not valid: {r:?}");
            assert!(linear(&st), "seed {i}: {st:?}");
        }
        seeds
    })
}

/// Every opcode the reader knows, and a few it refuses.
const OPCODES: &[u8] = b"(.012FIJKLMNPQRSTUVabcd}eghijl]opqrst)uGB\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95\x96\x97\x98";

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Set(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Opcode(usize, usize),
    /// Copies `len` bytes from one place to another (repeats structure).
    Copy(usize, usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let pos = any::<usize>();
    prop_oneof![
        (pos, 0u8..8).prop_map(|(p, b)| Mutation::Flip(p, b)),
        (pos, any::<u8>()).prop_map(|(p, b)| Mutation::Set(p, b)),
        pos.prop_map(Mutation::Truncate),
        (pos, prop::collection::vec(any::<u8>(), 1..9)).prop_map(|(p, b)| Mutation::Insert(p, b)),
        (pos, 1usize..9).prop_map(|(p, n)| Mutation::Delete(p, n)),
        (pos, 0..OPCODES.len()).prop_map(|(p, o)| Mutation::Opcode(p, o)),
        (pos, 1usize..33, pos).prop_map(|(p, n, to)| Mutation::Copy(p, n, to)),
    ]
}

fn apply(data: &mut Vec<u8>, m: &Mutation) {
    let len = data.len();
    if len == 0 {
        if let Mutation::Insert(_, b) = m {
            data.extend_from_slice(b);
        }
        return;
    }
    match m {
        Mutation::Flip(p, b) => data[p % len] ^= 1 << b,
        Mutation::Set(p, b) => data[p % len] = *b,
        Mutation::Truncate(p) => data.truncate(p % len),
        Mutation::Insert(p, b) => {
            let at = p % (len + 1);
            data.splice(at..at, b.iter().copied());
        }
        Mutation::Delete(p, n) => {
            let at = p % len;
            data.drain(at..(at + n).min(len));
        }
        Mutation::Opcode(p, o) => data[p % len] = OPCODES[*o],
        Mutation::Copy(p, n, to) => {
            let from = p % len;
            let piece: Vec<u8> = data[from..(from + n).min(len)].to_vec();
            let at = to % (len + 1);
            data.splice(at..at, piece);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_pickles_are_accepted_or_refused_in_linear_work(
        seed in any::<prop::sample::Index>(), mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        watchdog();
        let seeds = seeds();
        let mut data = seeds[seed.index(seeds.len())].clone();
        for m in &mutations {
            apply(&mut data, m);
        }
        let (result, stats) = read_allocation_pickle_with_stats(&data, Path::new("fuzz.pkl"));
        prop_assert_eq!(stats.pickle_bytes, data.len() as u64);
        prop_assert!(linear(&stats), "{:?} for {} bytes", stats, data.len());
        if let Ok(pops) = result {
            let gids: usize = pops.iter().flat_map(|p| p.buckets.values()).map(Vec::len).sum();
            prop_assert!(gids <= data.len(), "{} gids from {} bytes", gids, data.len());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Mutations of the gzip file itself (header, deflate stream, CRC, length), and valid
    /// gzip of a mutated pickle.
    #[test]
    fn mutated_gzip_files_are_accepted_or_refused_in_linear_work(
        seed in any::<prop::sample::Index>(), mutations in prop::collection::vec(mutation(), 1..4), inner in any::<bool>(),
    ) {
        watchdog();
        let seeds = seeds();
        let pickle = seeds[seed.index(seeds.len())].clone();
        let file = if inner {
            let mut p = pickle;
            for m in &mutations {
                apply(&mut p, m);
            }
            gzip(&p)
        } else {
            let mut z = gzip(&pickle);
            for m in &mutations {
                apply(&mut z, m);
            }
            z
        };
        let (_, stats) = read_allocation_gzip_with_stats(&file, Path::new("fuzz.pkl.gz"));
        prop_assert_eq!(stats.compressed_bytes, file.len() as u64);
        // At most MAX_GZIP_RATIO times the file plus 1 MiB is gunzipped.
        prop_assert!(stats.pickle_bytes <= MAX_GZIP_RATIO * stats.compressed_bytes + (1 << 20), "{:?}", stats);
        prop_assert!(linear(&stats), "{:?}", stats);
    }
}
