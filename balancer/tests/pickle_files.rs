//! Allocation pickle files: the real neurodamus fixture, round trips through Python, Python
//! pickles of neurodamus' types at every protocol, and hostile / broken files.
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use ballast_balancer::pickle::{
    ranks_cycles_from_file_name, read_allocation_file, read_allocation_pickle, write_allocation_file,
    RanksCycles,
};
use ballast_balancer::{BalancerError, Bucket, PopulationAllocation};

const ND_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/nd-fixtures");

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The shared fixture directory, or `None` (skip) when absent outside CI.
fn fixtures() -> Option<PathBuf> {
    let dir = PathBuf::from(ND_FIXTURES);
    if dir.is_dir() {
        return Some(dir);
    }
    if ci() {
        panic!("CI=true but the shared fixtures are missing: {}", dir.display());
    }
    eprintln!(
        "SKIP: {} is absent (set up ../shared to run this test)",
        dir.display()
    );
    None
}

/// Whether python3 can be used; outside CI a missing python3 skips, in CI it fails.
fn have_python() -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        if ci() {
            panic!("CI=true but python3 is not available");
        }
        eprintln!("SKIP: python3 not found");
    }
    ok
}

fn python(script: &str, args: &[&Path]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// {population: {"rank,cycle": [gids]}} (order-preserving) → populations.
fn from_json(v: &serde_json::Value) -> Vec<PopulationAllocation> {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(name, buckets)| PopulationAllocation {
            name: name.clone(),
            buckets: buckets
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, gids)| {
                    let (r, c) = k.split_once(',').unwrap();
                    let b = Bucket {
                        rank: r.trim().parse().unwrap(),
                        cycle: c.trim().parse().unwrap(),
                    };
                    let gids = gids
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|g| g.as_u64().unwrap() as u32)
                        .collect();
                    (b, gids)
                })
                .collect(),
        })
        .collect()
}

fn names(p: &[PopulationAllocation]) -> Vec<&str> {
    p.iter().map(|p| p.name.as_str()).collect()
}

#[test]
fn reads_real_neurodamus_fixture() {
    let Some(dir) = fixtures() else { return };
    let got = read_allocation_file(&dir.join("allocation_r4_c2.pkl.gz")).unwrap();
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected_allocation.json")).unwrap())
            .unwrap();
    let expected = from_json(&expected["allocation"]);
    assert_eq!(names(&got), vec!["S1nonbarrel_neurons", "VPM"]);
    assert_eq!(names(&got), names(&expected));
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(g.buckets.len(), 8, "population {}", g.name);
        for (b, gids) in &e.buckets {
            assert_eq!(g.buckets.get(b), Some(gids), "population {} bucket {b:?}", g.name);
        }
    }
    assert_eq!(got, expected);
    // Spot-check real values, independent of the JSON.
    let s1 = &got[0].buckets[&Bucket { rank: 0, cycle: 0 }];
    assert_eq!(&s1[..6], &[5, 9, 22, 120, 128, 142]);
    assert_eq!(
        ranks_cycles_from_file_name(&dir.join("allocation_r4_c2.pkl.gz")),
        Some(RanksCycles { ranks: 4, cycles: 2 })
    );
}

fn sample() -> Vec<PopulationAllocation> {
    let mut zeta = BTreeMap::new();
    zeta.insert(Bucket { rank: 1, cycle: 0 }, vec![7, 3, 5]);
    zeta.insert(Bucket { rank: 0, cycle: 1 }, vec![u32::MAX, 0, 2_147_483_648]);
    zeta.insert(Bucket { rank: 0, cycle: 0 }, (100..1500).rev().collect());
    let mut alpha = BTreeMap::new();
    alpha.insert(Bucket { rank: 3, cycle: 2 }, vec![42]);
    alpha.insert(Bucket { rank: 2, cycle: 0 }, vec![]);
    // Deliberately not in sorted order: the file must keep it.
    vec![
        PopulationAllocation {
            name: "zeta".into(),
            buckets: zeta,
        },
        PopulationAllocation {
            name: "alpha".into(),
            buckets: alpha,
        },
    ]
}

#[test]
fn round_trip_through_rust_and_python() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allocation_r4_c3.pkl.gz");
    let pops = sample();
    write_allocation_file(&path, &pops).unwrap();
    // Overwriting an existing file works too (atomic rename over it).
    write_allocation_file(&path, &pops).unwrap();
    let back = read_allocation_file(&path).unwrap();
    assert_eq!(back, pops);
    assert_eq!(names(&back), vec!["zeta", "alpha"]);
    // No temp file left behind.
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");

    if !have_python() {
        return;
    }
    let out = python(
        r#"import gzip,pickle,json,sys; d=pickle.load(gzip.open(sys.argv[1])); print(json.dumps({p:{f"{k[0]},{k[1]}":v for k,v in b.items()} for p,b in d.items()}))"#,
        &[&path],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let from_py = from_json(&v);
    assert_eq!(names(&from_py), vec!["zeta", "alpha"]);
    assert_eq!(from_py, pops);
    // Only plain Python types in the file.
    let types = python(
        r#"import gzip,pickle,sys; d=pickle.load(gzip.open(sys.argv[1])); print(type(d).__name__, {type(b).__name__ for b in d.values()}, {type(k).__name__ for b in d.values() for k in b}, {type(v).__name__ for b in d.values() for v in b.values()})"#,
        &[&path],
    );
    assert_eq!(types.trim(), "dict {'dict'} {'tuple'} {'list'}");
}

/// Writes neurodamus-style pickles (defaultdict of Vector via
/// DryRunStats.defaultdict_vector) at protocols 0..=5 plus their JSON into argv[1].
const GEN_NEURODAMUS_STYLE: &str = r#"
import sys, types, array, pickle, gzip, json, collections, os
out = sys.argv[1]
def mod(name):
    m = types.ModuleType(name); sys.modules[name] = m; return m
mod("neurodamus"); mod("neurodamus.utils")
compat = mod("neurodamus.utils.compat"); memory = mod("neurodamus.utils.memory")
class Vector(array.array):
    # like neurodamus' Vector: constructible without arguments (defaultdict factory)
    def __new__(cls, *args):
        return super().__new__(cls, *(args or ("I",)))
Vector.__module__ = "neurodamus.utils.compat"; Vector.__qualname__ = "Vector"; compat.Vector = Vector
class DryRunStats:
    @staticmethod
    def defaultdict_vector():
        return collections.defaultdict(Vector)
DryRunStats.__module__ = "neurodamus.utils.memory"; DryRunStats.__qualname__ = "DryRunStats"
DryRunStats.defaultdict_vector.__module__ = "neurodamus.utils.memory"
DryRunStats.defaultdict_vector.__qualname__ = "DryRunStats.defaultdict_vector"
memory.DryRunStats = DryRunStats
d = collections.defaultdict(DryRunStats.defaultdict_vector)
for r in range(3):
    for c in range(2):
        d["S1nonbarrel_neurons"][(r, c)].extend([1000 * r + 10 * c + i for i in (5, 1, 3, 2)])
d["VPM"][(2, 1)] = Vector("L", [4_000_000_000, 0, 17])
d["VPM"][(0, 0)] = Vector("H", [65535, 1])
d["VPM"][(1, 0)] = Vector("b", [5, 6])
d["Thal"] = {(0, 1): [9, 8, 7], (1, 1): array.array("I", [123456789])}
expected = {p: {f"{k[0]},{k[1]}": list(v) for k, v in b.items()} for p, b in d.items()}
json.dump(expected, open(os.path.join(out, "expected.json"), "w"))
for p in range(0, 6):
    with gzip.open(os.path.join(out, f"p{p}.pkl.gz"), "wb") as f:
        pickle.dump(d, f, protocol=p)
print("ok")
"#;

#[test]
fn reads_python_neurodamus_style_pickles_all_protocols() {
    if !have_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(python(GEN_NEURODAMUS_STYLE, &[dir.path()]).trim(), "ok");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("expected.json")).unwrap()).unwrap();
    let expected = from_json(&expected);
    assert_eq!(names(&expected), vec!["S1nonbarrel_neurons", "VPM", "Thal"]);
    assert_eq!(
        expected[1].buckets[&Bucket { rank: 2, cycle: 1 }],
        vec![4_000_000_000, 0, 17]
    );
    for p in 0..=5 {
        let got = read_allocation_file(&dir.path().join(format!("p{p}.pkl.gz")))
            .unwrap_or_else(|e| panic!("protocol {p}: {e}"));
        assert_eq!(got, expected, "protocol {p}");
        assert_eq!(
            got[0].buckets[&Bucket { rank: 1, cycle: 1 }],
            vec![1015, 1011, 1013, 1012]
        );
    }
}

/// argv[1]: pickle with `__reduce__` → os.system(argv[2]); argv[3]: builtins.eval;
/// then loads a *different* os.system pickle in Python to prove the payload is live.
const GEN_HOSTILE: &str = r#"
import sys, os, pickle, gzip
class Sys:
    def __init__(self, cmd): self.cmd = cmd
    def __reduce__(self): return (os.system, (self.cmd,))
class Eval:
    def __reduce__(self): return (eval, ("__import__('os').system('true')",))
with gzip.open(sys.argv[1], "wb") as f: pickle.dump({"VPM": Sys(sys.argv[2])}, f, protocol=4)
with gzip.open(sys.argv[3], "wb") as f: pickle.dump(Eval(), f, protocol=2)
pickle.loads(pickle.dumps(Sys(sys.argv[4])))
"#;

#[test]
fn refuses_hostile_globals_without_running_them() {
    if !have_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sys_pkl = dir.path().join("system.pkl.gz");
    let eval_pkl = dir.path().join("eval.pkl.gz");
    let marker = dir.path().join("pwned");
    let control = dir.path().join("control");
    let cmd = format!("touch {}", marker.display());
    let control_cmd = format!("touch {}", control.display());
    python(
        GEN_HOSTILE,
        &[&sys_pkl, Path::new(&cmd), &eval_pkl, Path::new(&control_cmd)],
    );
    assert!(control.exists(), "the payload must be live when Python loads it");

    match read_allocation_file(&sys_pkl) {
        // os.system pickles as posix.system on Linux (nt.system on Windows).
        Err(BalancerError::DisallowedGlobal {
            module,
            name,
            offset,
            path,
        }) => {
            assert!(module == "posix" || module == "nt" || module == "os", "{module}");
            assert_eq!(name, "system");
            assert!(offset > 0);
            assert_eq!(path, sys_pkl);
        }
        other => panic!("expected DisallowedGlobal, got {other:?}"),
    }
    assert!(!marker.exists(), "the command was run!");

    match read_allocation_file(&eval_pkl) {
        Err(e @ BalancerError::DisallowedGlobal { .. }) => {
            let BalancerError::DisallowedGlobal {
                ref module, ref name, ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!((module.as_str(), name.as_str()), ("__builtin__", "eval"));
            assert!(
                e.to_string().contains("refused pickle global `__builtin__.eval`"),
                "{e}"
            );
        }
        other => panic!("expected DisallowedGlobal, got {other:?}"),
    }
}

#[test]
fn refuses_os_system_and_builtins_eval_by_name() {
    // Hand-written: GLOBAL 'os system' and STACK_GLOBAL 'builtins' 'eval', then REDUCE.
    let p = Path::new("hostile.pkl");
    let os_system = b"\x80\x02cos\nsystem\nX\x0a\x00\x00\x00echo pwned\x85R.";
    match read_allocation_pickle(os_system, p) {
        Err(BalancerError::DisallowedGlobal {
            module, name, offset, ..
        }) => {
            assert_eq!((module.as_str(), name.as_str(), offset), ("os", "system", 2));
        }
        other => panic!("{other:?}"),
    }
    let eval = b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93\x8c\x031+1\x85R.";
    match read_allocation_pickle(eval, p) {
        Err(BalancerError::DisallowedGlobal {
            module, name, offset, ..
        }) => {
            assert_eq!((module.as_str(), name.as_str(), offset), ("builtins", "eval", 18));
        }
        other => panic!("{other:?}"),
    }
    let popen = b"\x80\x04\x8c\x0asubprocess\x8c\x05Popen\x93.";
    assert!(matches!(
        read_allocation_pickle(popen, p),
        Err(BalancerError::DisallowedGlobal { ref module, ref name, .. }) if module == "subprocess" && name == "Popen"
    ));
    // A neurodamus name outside the allow-list is refused too.
    let nd = b"\x80\x04\x8c\x0eneurodamus.foo\x8c\x03Bar\x93.";
    assert!(matches!(
        read_allocation_pickle(nd, p),
        Err(BalancerError::DisallowedGlobal { ref module, ref name, .. }) if module == "neurodamus.foo" && name == "Bar"
    ));
}

fn expect_pickle_err(r: ballast_balancer::Result<Vec<PopulationAllocation>>, needles: &[&str]) {
    match r {
        Err(e @ BalancerError::Pickle { .. }) => {
            let msg = e.to_string();
            for n in needles {
                assert!(msg.contains(n), "{msg:?} lacks {n:?}");
            }
        }
        other => panic!("expected a Pickle error containing {needles:?}, got {other:?}"),
    }
}

#[test]
fn truncated_and_garbage_files_are_errors() {
    let Some(fx) = fixtures() else { return };
    let gz = std::fs::read(fx.join("allocation_r4_c2.pkl.gz")).unwrap();
    let raw = gunzip(&gz);
    let dir = tempfile::tempdir().unwrap();

    let half = dir.path().join("half.pkl.gz");
    std::fs::write(&half, &gz[..gz.len() / 2]).unwrap();
    expect_pickle_err(read_allocation_file(&half), &["truncated", "half.pkl.gz"]);

    expect_pickle_err(
        read_allocation_pickle(&raw[..raw.len() / 2], Path::new("x.pkl")),
        &["truncated"],
    );
    // Cut just before STOP.
    expect_pickle_err(
        read_allocation_pickle(&raw[..raw.len() - 1], Path::new("x.pkl")),
        &["truncated", "STOP"],
    );
    let short = dir.path().join("short_pickle.pkl.gz");
    std::fs::write(&short, gzip(&raw[..raw.len() - 3])).unwrap();
    expect_pickle_err(read_allocation_file(&short), &["truncated"]);

    let mut trailing = raw.clone();
    trailing.extend_from_slice(b"garbage");
    expect_pickle_err(
        read_allocation_pickle(&trailing, Path::new("x.pkl")),
        &["trailing garbage", "7 bytes"],
    );

    let not_gz = dir.path().join("raw.pkl.gz");
    std::fs::write(&not_gz, &raw).unwrap();
    expect_pickle_err(
        read_allocation_file(&not_gz),
        &["not a gzip file", "uncompressed pickle"],
    );

    match read_allocation_file(&dir.path().join("missing.pkl.gz")) {
        Err(BalancerError::Io { error: source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn wrong_shapes_are_named() {
    if !have_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import sys, pickle, gzip, os
cases = {
  "list_for_dict": {"VPM": [1, 2, 3]},
  "str_for_list": {"VPM": {(3, 1): "abc"}},
  "negative_gid": {"VPM": {(0, 0): [1, -5]}},
  "huge_gid": {"VPM": {(0, 0): [2**32]}},
  "bad_key": {"VPM": {(0, -1): [1]}},
  "top_list": [1, 2],
}
for name, obj in cases.items():
    with gzip.open(os.path.join(sys.argv[1], name + ".pkl.gz"), "wb") as f:
        pickle.dump(obj, f, protocol=4)
"#;
    python(script, &[dir.path()]);
    let f = |n: &str| read_allocation_file(&dir.path().join(format!("{n}.pkl.gz")));
    expect_pickle_err(
        f("list_for_dict"),
        &["population `VPM`: expected a dict", "found list"],
    );
    expect_pickle_err(
        f("str_for_list"),
        &["population `VPM`, key (3, 1): expected a list of gids, found str"],
    );
    expect_pickle_err(
        f("negative_gid"),
        &["population `VPM`, key (0, 0), item 1: gid -5 is negative"],
    );
    expect_pickle_err(f("huge_gid"), &["item 0", "does not fit a u32 gid"]);
    expect_pickle_err(
        f("bad_key"),
        &["population `VPM`, key (0, ..): cycle must be a non-negative int"],
    );
    expect_pickle_err(f("top_list"), &["top level: expected a dict", "found list"]);
}

#[test]
fn file_names() {
    assert_eq!(
        ranks_cycles_from_file_name(Path::new("/a/b/allocation_r4_c2.pkl.gz")),
        Some(RanksCycles { ranks: 4, cycles: 2 })
    );
    assert_eq!(
        ranks_cycles_from_file_name(Path::new("allocation_r1024_c10.pkl.gz")),
        Some(RanksCycles {
            ranks: 1024,
            cycles: 10
        })
    );
    for bad in [
        "allocation_r4_c2.pkl",
        "allocation_r_c2.pkl.gz",
        "allocation_r+4_c2.pkl.gz",
        "allocation_r4_c-2.pkl.gz",
        "allocation_r4.pkl.gz",
        "allocation_r99999999999_c1.pkl.gz",
        "xallocation_r4_c2.pkl.gz",
    ] {
        assert_eq!(ranks_cycles_from_file_name(Path::new(bad)), None, "{bad}");
    }
}
