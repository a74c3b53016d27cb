//! SONATA circuit reading (feature `sonata`) on the real circuits in `../shared/data/sonata`
//! and on small circuits written here to exercise bad input.
//!
//! Every expected number below was checked independently with h5py (not used by CI):
//! node counts `len(f['nodes'][pop]['node_type_id'])`, edge counts
//! `len(f['edges'][pop]['source_node_id'])`, populations
//! `f['edges'][pop]['source_node_id'].attrs['node_population']`, metype key counts
//! `collections.Counter(f"{m}-{e}" if m and e else model_name or model_template)` over the
//! nodes (attributes from `/nodes/<pop>/0/<attr>`, via `@library/<attr>` when present, else
//! the node-types CSV row of `node_type_id`), and afferent counts
//! `sum(np.bincount(f['edges'][e]['target_node_id'][()], minlength=n) for e in edge pops
//! targeting pop)` then `.sum(), .min(), .max(), .argmax(), .argmin(), c[i]`.
#![cfg(feature = "sonata")]

mod common;

use std::path::{Path, PathBuf};

use ballast_balancer::sonata::hdf5_metno as hdf5;
use ballast_balancer::sonata::{Circuit, NodePopulation};
use ballast_balancer::BalancerError;
use hdf5::types::VarLenUnicode;

fn open(rel: &str, config: &str) -> Option<Circuit> {
    let dir = common::shared_data(rel)?;
    Some(Circuit::open(&dir.join(config)).unwrap_or_else(|e| panic!("{rel}/{config}: {e}")))
}

/// `(metype key, node count)` in order of first appearance.
fn metype_counts(pop: &NodePopulation) -> Vec<(&str, u32)> {
    pop.metypes
        .iter()
        .map(String::as_str)
        .zip(pop.metype_counts())
        .collect()
}

/// `(name, source, target, edge count)` per edge population.
fn edges(c: &Circuit) -> Vec<(&str, &str, &str, usize)> {
    c.edge_populations
        .iter()
        .map(|e| (e.name.as_str(), e.source.as_str(), e.target.as_str(), e.len()))
        .collect()
}

/// `(sum, min, max)` of a population's afferent counts, and the counts themselves.
fn afferent(c: &Circuit, pop: &str) -> ((u64, u32, u32), Vec<u32>) {
    let a = c.afferent_counts(pop).unwrap();
    let sum = a.iter().map(|&x| u64::from(x)).sum();
    ((sum, *a.iter().min().unwrap(), *a.iter().max().unwrap()), a)
}

#[test]
fn allen_layer4_sample() {
    let Some(c) = open("sonata/allen-layer4_sample", "circuit_config.json") else {
        return;
    };
    assert_eq!(c.node_populations.len(), 1);
    let l4 = c.node_population("l4").unwrap();
    assert_eq!(l4.len(), 449);
    // Node types CSV: 5 biophysical types and 2 point_process (IntFire1) types; no
    // mtype/etype, so the key is model_name.
    assert_eq!(l4.model_type, "mixed");
    assert!(!l4.is_virtual);
    assert_eq!(
        metype_counts(l4),
        [
            ("Scnn1a", 37),
            ("Rorb", 33),
            ("Nr5a1", 15),
            ("PV1", 8),
            ("PV2", 7),
            ("LIF_exc", 297),
            ("LIF_inh", 52)
        ]
    );
    let point = (0..449)
        .filter(|&i| l4.model_type_of(i) == "point_process")
        .count();
    assert_eq!(point, 297 + 52);
    assert_eq!(l4.model_type_of(0), "biophysical");
    assert_eq!(edges(&c), [("l4_to_l4", "l4", "l4", 47020)]);
    let (stats, a) = afferent(&c, "l4");
    assert_eq!(stats, (47020, 11, 214));
    assert_eq!((a[0], a[1], a[69], a[134], a[448]), (180, 197, 214, 11, 91));
}

#[test]
fn allen_300_pointneurons() {
    let Some(c) = open("sonata/allen-300_pointneurons", "circuit_config.json") else {
        return;
    };
    let internal = c.node_population("internal").unwrap();
    assert_eq!(
        (internal.len(), internal.model_type.as_str(), internal.is_virtual),
        (300, "point_process", false)
    );
    assert_eq!(
        metype_counts(internal),
        [
            ("Scnn1a", 80),
            ("Rorb", 80),
            ("Nr5a1", 80),
            ("PV1", 30),
            ("PV2", 30)
        ]
    );
    let external = c.node_population("external").unwrap();
    assert_eq!(
        (external.len(), external.model_type.as_str(), external.is_virtual),
        (100, "virtual", true)
    );
    assert_eq!(metype_counts(external), [("virtual", 100)]);
    assert_eq!(
        edges(&c),
        [
            ("internal_to_internal", "internal", "internal", 27588),
            ("external_to_internal", "external", "internal", 20844)
        ]
    );
    let (stats, a) = afferent(&c, "internal");
    assert_eq!(stats, (27588 + 20844, 122, 242));
    assert_eq!((a[0], a[154], a[270], a[299]), (142, 122, 242, 227));
    assert_eq!(afferent(&c, "external").0, (0, 0, 0));
    // Ids are within their populations.
    let e = c.edge_population("external_to_internal").unwrap();
    assert!(e.source_ids.iter().all(|&s| s < 100) && e.target_ids.iter().all(|&t| t < 300));
}

#[test]
fn neurodamus_ringtest() {
    let Some(c) = open("sonata/nd-ringtest", "circuit_config.json") else {
        return;
    };
    let names: Vec<_> = c
        .node_populations
        .iter()
        .map(|p| (p.name.as_str(), p.len(), p.model_type.as_str()))
        .collect();
    assert_eq!(names, [("RingA", 3, "biophysical"), ("RingB", 2, "biophysical")]);
    assert_eq!(
        metype_counts(&c.node_populations[0]),
        [("MTYPE0-ETYPE0", 1), ("MTYPE1-ETYPE1", 1), ("MTYPE2-ETYPE2", 1)]
    );
    assert_eq!(
        metype_counts(&c.node_populations[1]),
        [("MTYPE0-ETYPE1", 1), ("MTYPE1-ETYPE1", 1)]
    );
    assert_eq!(
        edges(&c),
        [
            ("RingA__RingA__chemical", "RingA", "RingA", 3),
            ("RingB__RingB__chemical", "RingB", "RingB", 2),
            ("RingA__RingB__chemical", "RingA", "RingB", 1)
        ]
    );
    assert_eq!(afferent(&c, "RingA").1, [1, 1, 1]);
    assert_eq!(afferent(&c, "RingB").1, [2, 1]);
}

#[test]
fn neurodamus_usecase3_with_and_without_virtual_population() {
    for config in ["circuit_config.json", "circuit_config_virtualpop.json"] {
        let Some(c) = open("sonata/nd-usecase3", config) else {
            return;
        };
        let a = c.node_population("NodeA").unwrap();
        assert_eq!(
            metype_counts(a),
            [("L4_PC-dSTUT", 1), ("L4_MC-dSTUT", 1), ("L4_MC-dNAC", 1)]
        );
        let b = c.node_population("NodeB").unwrap();
        assert_eq!(metype_counts(b), [("L4_PC-dSTUT", 1), ("L5_PC-dSTUT", 1)]);
        assert!(!a.is_virtual && !b.is_virtual);
        // edges_AB.h5 holds two populations.
        assert_eq!(
            edges(&c),
            [
                ("NodeA__NodeA__chemical", "NodeA", "NodeA", 4),
                ("NodeB__NodeB__chemical", "NodeB", "NodeB", 4),
                ("NodeA__NodeB__chemical", "NodeA", "NodeB", 4),
                ("NodeB__NodeA__chemical", "NodeB", "NodeA", 4)
            ]
        );
        assert_eq!(afferent(&c, "NodeA").1, [6, 2, 0]);
        assert_eq!(afferent(&c, "NodeB").1, [4, 4]);
        match c.node_population("A_virtual_neurons") {
            None => assert_eq!((config, c.node_populations.len()), ("circuit_config.json", 2)),
            // No attributes at all: virtual from the config's `type`.
            Some(v) => assert_eq!(
                (v.len(), v.is_virtual, v.model_type.as_str()),
                (3, true, "virtual")
            ),
        }
    }
}

#[test]
fn neurodamus_v5_sub_mini5_with_library_attributes_and_virtual_sources() {
    let Some(c) = open("sonata/nd-v5_sub_mini5", "circuit_config.json") else {
        return;
    };
    let d = c.node_population("default").unwrap();
    assert_eq!((d.len(), d.model_type.as_str()), (5, "biophysical"));
    assert_eq!(
        metype_counts(d),
        [
            ("L1_HAC-cNAC", 1),
            ("L1_DAC-bNAC", 1),
            ("L23_PC-cADpyr", 2),
            ("L23_NBC-cACint", 1)
        ]
    );
    // model_type and model_template through @library; the template is "" (absent).
    let ext = c.node_population("external_default").unwrap();
    assert_eq!(
        (ext.len(), ext.is_virtual, ext.model_type.as_str()),
        (332, true, "virtual")
    );
    assert_eq!(
        edges(&c),
        [
            ("default", "default", "default", 24),
            ("external_default", "external_default", "default", 2180)
        ]
    );
    let (stats, a) = afferent(&c, "default");
    assert_eq!(stats, (2204, 105, 1138));
    assert_eq!(a, [105, 159, 371, 1138, 431]);
}

#[test]
fn neurodamus_sscx_sub_l5_5cells() {
    let Some(c) = open("sonata/nd-sscx_sub_L5_5cells", "circuit_config.json") else {
        return;
    };
    let all = c.node_population("All").unwrap();
    assert_eq!((all.len(), all.model_type.as_str()), (5, "biophysical")); // model_type via @library
    assert_eq!(
        metype_counts(all),
        [
            ("L5_TPC:C-cADpyr", 1),
            ("L5_LBC-dSTUT", 1),
            ("L5_NBC-cSTUT", 1),
            ("L5_TPC:B-cADpyr", 1),
            ("L5_TPC:A-cADpyr", 1)
        ]
    );
    assert_eq!(edges(&c), [("default", "All", "All", 49)]);
    assert_eq!(afferent(&c, "All").1, [38, 0, 11, 0, 0]);
}

// ---- bad input ----

fn sonata_err(e: BalancerError) -> (PathBuf, String, String, String) {
    let text = e.to_string();
    eprintln!("error as reported: {text}");
    match e {
        BalancerError::Sonata {
            path,
            population,
            field,
            ..
        } => (path, population, field, text),
        other => panic!("expected a Sonata error, got {other:?}"),
    }
}

fn write_config(dir: &Path, json: &str) -> PathBuf {
    let p = dir.join("circuit_config.json");
    std::fs::write(&p, json).unwrap();
    p
}

#[test]
fn missing_nodes_file_is_named_with_the_config_field() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write_config(
        tmp.path(),
        r#"{"manifest": {"$NET": "${BASE_DIR}/net"}, "networks": {"nodes": [{"nodes_file": "$NET/nodes.h5"}], "edges": []}}"#,
    );
    let (path, _, _, text) = sonata_err(Circuit::open(&cfg).unwrap_err());
    assert_eq!(path, tmp.path().join("net/nodes.h5"));
    assert!(
        text.contains("no such file") && text.contains("networks.nodes[0].nodes_file"),
        "{text}"
    );
}

#[test]
fn edges_naming_a_population_absent_from_the_nodes_are_refused() {
    let Some(dir) = common::shared_data("sonata/nd-usecase3") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = dir.display();
    let cfg = write_config(
        tmp.path(),
        &format!(
            r#"{{"networks": {{"nodes": [{{"nodes_file": "{d}/nodes_A.h5", "populations": {{"NodeA": {{"type": "biophysical"}}}}}}],
               "edges": [{{"edges_file": "{d}/local_edges_A.h5"}}, {{"edges_file": "{d}/edges_AB.h5"}}]}}}}"#
        ),
    );
    let (path, population, field, text) = sonata_err(Circuit::open(&cfg).unwrap_err());
    assert_eq!(path, dir.join("edges_AB.h5"));
    assert_eq!(population, "NodeA__NodeB__chemical");
    assert_eq!(
        field,
        "/edges/NodeA__NodeB__chemical/target_node_id@node_population"
    );
    assert!(text.contains("`NodeB`") && text.contains("(NodeA)"), "{text}");
}

/// A small circuit: population `P` of `mtypes.len()` nodes (mtype/etype strings in group 0)
/// and edge population `E` from `P` to `P`.
fn small_circuit(dir: &Path, mtypes: &[&str], sources: &[u64], targets: &[u64]) -> PathBuf {
    let s = |v: &[&str]| {
        v.iter()
            .map(|x| x.parse::<VarLenUnicode>().unwrap())
            .collect::<Vec<_>>()
    };
    let f = hdf5::File::create(dir.join("nodes.h5")).unwrap();
    let p = f.create_group("nodes").unwrap().create_group("P").unwrap();
    p.new_dataset_builder()
        .with_data(&vec![-1i64; mtypes.len()])
        .create("node_type_id")
        .unwrap();
    let g = p.create_group("0").unwrap();
    g.new_dataset_builder()
        .with_data(&s(mtypes))
        .create("mtype")
        .unwrap();
    g.new_dataset_builder()
        .with_data(&s(&vec!["cADpyr"; mtypes.len()]))
        .create("etype")
        .unwrap();
    let f = hdf5::File::create(dir.join("edges.h5")).unwrap();
    let e = f.create_group("edges").unwrap().create_group("E").unwrap();
    for (name, ids) in [("source_node_id", sources), ("target_node_id", targets)] {
        let ds = e.new_dataset_builder().with_data(ids).create(name).unwrap();
        ds.new_attr::<VarLenUnicode>()
            .create("node_population")
            .unwrap()
            .write_scalar(&"P".parse::<VarLenUnicode>().unwrap())
            .unwrap();
    }
    write_config(
        dir,
        r#"{"version": 2, "networks": {"nodes": [{"nodes_file": "nodes.h5", "populations": {"P": {"type": "biophysical"}}}],
            "edges": [{"edges_file": "./edges.h5"}]}}"#,
    )
}

#[test]
fn a_small_written_circuit_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_circuit(
        tmp.path(),
        &["L5_TPC:A", "L5_TPC:A", "L4_SS"],
        &[0, 1, 2, 2],
        &[1, 1, 0, 1],
    );
    let c = Circuit::open(&cfg).unwrap();
    assert_eq!(
        metype_counts(&c.node_populations[0]),
        [("L5_TPC:A-cADpyr", 2), ("L4_SS-cADpyr", 1)]
    );
    assert_eq!(c.afferent_counts("P").unwrap(), [1, 3, 0]);
    assert!(matches!(
        c.afferent_counts("Q"),
        Err(BalancerError::InvalidParameter(_))
    ));
}

#[test]
fn node_ids_out_of_range_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_circuit(tmp.path(), &["A", "B", "C"], &[0, 1, 2], &[1, 3, 0]);
    let (path, population, field, text) = sonata_err(Circuit::open(&cfg).unwrap_err());
    assert_eq!((path, population.as_str()), (tmp.path().join("edges.h5"), "E"));
    assert_eq!(field, "/edges/E/target_node_id");
    assert!(
        text.contains("value 3 at index 1") && text.contains("`P` (3 nodes)"),
        "{text}"
    );
}

#[test]
fn missing_dataset_and_missing_metype_key_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_circuit(tmp.path(), &["A", ""], &[], &[]);
    let (_, population, field, text) = sonata_err(Circuit::open(&cfg).unwrap_err());
    assert_eq!(
        (population.as_str(), field.as_str()),
        ("P", "mtype/etype/model_name/model_template")
    );
    assert!(text.contains("node 1 has no usable metype key"), "{text}");

    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_circuit(tmp.path(), &["A"], &[], &[]);
    let f = hdf5::File::open_rw(tmp.path().join("edges.h5")).unwrap();
    f.unlink("edges/E/source_node_id").unwrap();
    drop(f);
    let (path, population, field, text) = sonata_err(Circuit::open(&cfg).unwrap_err());
    assert_eq!(
        (path, population.as_str(), field.as_str()),
        (tmp.path().join("edges.h5"), "E", "/edges/E/source_node_id")
    );
    assert!(text.contains("missing dataset"), "{text}");
}

#[test]
fn groups_library_and_node_types_csv_combine() {
    // Two groups: group 0 holds mtype/etype as @library indices, group 1 only a
    // model_template string; node types give model_name and model_type. Nodes alternate.
    let tmp = tempfile::tempdir().unwrap();
    let s = |v: &[&str]| {
        v.iter()
            .map(|x| x.parse::<VarLenUnicode>().unwrap())
            .collect::<Vec<_>>()
    };
    let f = hdf5::File::create(tmp.path().join("nodes.h5")).unwrap();
    let p = f.create_group("nodes").unwrap().create_group("P").unwrap();
    p.new_dataset_builder()
        .with_data(&[7i64, 8, 7, 9])
        .create("node_type_id")
        .unwrap();
    p.new_dataset_builder()
        .with_data(&[0u32, 1, 0, 1])
        .create("node_group_id")
        .unwrap();
    p.new_dataset_builder()
        .with_data(&[1u64, 0, 0, 1])
        .create("node_group_index")
        .unwrap();
    let g0 = p.create_group("0").unwrap();
    let lib = g0.create_group("@library").unwrap();
    lib.new_dataset_builder()
        .with_data(&s(&["L2_IPC", "L6_BP"]))
        .create("mtype")
        .unwrap();
    lib.new_dataset_builder()
        .with_data(&s(&["bNAC"]))
        .create("etype")
        .unwrap();
    g0.new_dataset_builder()
        .with_data(&[1u32, 0])
        .create("mtype")
        .unwrap();
    g0.new_dataset_builder()
        .with_data(&[0u32, 0])
        .create("etype")
        .unwrap();
    let g1 = p.create_group("1").unwrap();
    g1.new_dataset_builder()
        .with_data(&s(&["hoc:One", "hoc:Two"]))
        .create("model_template")
        .unwrap();
    drop(f);
    std::fs::write(
        tmp.path().join("node_types.csv"),
        "node_type_id model_type model_name\n7 biophysical NULL\n8 biophysical NULL\n9 point_process \"IF cell\"\n",
    )
    .unwrap();
    let cfg = write_config(
        tmp.path(),
        r#"{"manifest": {"$D": "."}, "networks": {"nodes": [{"nodes_file": "$D/nodes.h5", "node_types_file": "${D}/node_types.csv"}]}}"#,
    );
    let c = Circuit::open(&cfg).unwrap();
    let p = &c.node_populations[0];
    let keys: Vec<_> = (0..4).map(|i| p.metype_of(i)).collect();
    // node 0: group 0 row 1 -> L2_IPC; node 2: group 0 row 0 -> L6_BP; node 1: group 1 row 0,
    // no model_name -> template; node 3: model_name from the CSV (quoted, with a space).
    assert_eq!(keys, ["L2_IPC-bNAC", "hoc:One", "L6_BP-bNAC", "IF cell"]);
    assert_eq!(p.model_type, "mixed");
    assert_eq!(p.model_type_of(3), "point_process");
    assert!(c.edge_populations.is_empty());

    // A node_type_id missing from the CSV.
    std::fs::write(
        tmp.path().join("node_types.csv"),
        "node_type_id model_type\n7 biophysical\n",
    )
    .unwrap();
    let (_, population, field, text) = sonata_err(Circuit::open(&cfg).unwrap_err());
    assert_eq!(
        (population.as_str(), field.as_str()),
        ("P", "/nodes/P/node_type_id")
    );
    assert!(text.contains("node 1 has node_type_id 8"), "{text}");
}

#[test]
fn explicit_node_ids_other_than_positions_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_circuit(tmp.path(), &["A", "B", "C"], &[0], &[2]);
    let f = hdf5::File::open_rw(tmp.path().join("nodes.h5")).unwrap();
    let p = f.group("nodes/P").unwrap();
    p.new_dataset_builder()
        .with_data(&[0u64, 1, 2])
        .create("node_id")
        .unwrap();
    drop((p, f));
    assert!(Circuit::open(&cfg).is_ok());
    let f = hdf5::File::open_rw(tmp.path().join("nodes.h5")).unwrap();
    f.unlink("nodes/P/node_id").unwrap();
    let p = f.group("nodes/P").unwrap();
    p.new_dataset_builder()
        .with_data(&[0u64, 5, 2])
        .create("node_id")
        .unwrap();
    drop((p, f));
    let (_, population, field, text) = sonata_err(Circuit::open(&cfg).unwrap_err());
    assert_eq!((population.as_str(), field.as_str()), ("P", "/nodes/P/node_id"));
    assert!(text.contains("first difference at index 1"), "{text}");
}

#[test]
fn a_simulation_config_is_followed_to_its_circuit_config() {
    let Some(dir) = common::shared_data("sonata/allen-layer4_sample") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let sim = tmp.path().join("simulation_config.json");
    let json = format!(
        r#"{{"manifest": {{"$CIRCUIT": "{}"}}, "network": "$CIRCUIT/circuit_config.json", "run": {{"tstop": 10}}}}"#,
        dir.display()
    );
    std::fs::write(&sim, json).unwrap();
    let c = Circuit::open(&sim).unwrap();
    assert_eq!(c.config, dir.join("circuit_config.json"));
    assert_eq!(c.node_populations[0].len(), 449);
}
