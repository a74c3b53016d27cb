//! SONATA inputs that are not regular files (issue 33, finding 11 for `--circuit`): a
//! circuit config, a nodes or edges HDF5 file or a node-types CSV that is a FIFO is refused
//! at once, naming the file (and the config field that named it), instead of blocking in
//! `open` for a writer that never comes. The FIFOs are private, in a temporary directory.
#![cfg(feature = "sonata")]

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use ballast_balancer::sonata::hdf5_metno as hdf5;
use ballast_balancer::sonata::Circuit;
use hdf5::types::VarLenUnicode;

fn mkfifo(path: &Path) {
    let s = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(s.success(), "mkfifo {}", path.display());
}

/// `Circuit::open(config)`'s error text, on a thread given 30 s (a hang fails the test
/// instead of blocking it; the blocked thread is left behind).
fn open_err(config: &Path) -> String {
    let (tx, rx) = mpsc::channel();
    let config = config.to_owned();
    std::thread::spawn(move || {
        let _ = tx.send(Circuit::open(&config).map(|_| ()).map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Err(e)) => e,
        Ok(Ok(())) => panic!("opened"),
        Err(_) => panic!("Circuit::open hung (a FIFO was opened for reading)"),
    }
}

/// A valid `nodes.h5` in `dir`: population `P` of two nodes with mtype and etype.
fn nodes_h5(dir: &Path) {
    let f = hdf5::File::create(dir.join("nodes.h5")).unwrap();
    let p = f.create_group("nodes").unwrap().create_group("P").unwrap();
    p.new_dataset_builder()
        .with_data(&[-1i64, -1])
        .create("node_type_id")
        .unwrap();
    let g = p.create_group("0").unwrap();
    for (name, v) in [("mtype", "L4_SS"), ("etype", "cADpyr")] {
        let v: Vec<VarLenUnicode> = vec![v.parse().unwrap(); 2];
        g.new_dataset_builder().with_data(&v).create(name).unwrap();
    }
}

#[test]
fn sonata_inputs_that_are_fifos_are_refused_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let cfg = d.join("circuit_config.json");

    // The config itself.
    mkfifo(&cfg);
    let e = open_err(&cfg);
    assert!(
        e.starts_with(&format!("{}: ", cfg.display()))
            && e.contains("it is a FIFO (named pipe), not a regular file"),
        "{e}"
    );
    std::fs::remove_file(&cfg).unwrap();

    // The nodes file.
    mkfifo(&d.join("fifo.h5"));
    std::fs::write(
        &cfg,
        r#"{"networks": {"nodes": [{"nodes_file": "fifo.h5", "populations": {"P": {"type": "biophysical"}}}], "edges": []}}"#,
    )
    .unwrap();
    let e = open_err(&cfg);
    assert!(
        e.starts_with(&format!("{}: ", d.join("fifo.h5").display()))
            && e.contains(
                "it is a FIFO (named pipe), not a regular file (named by networks.nodes[0].nodes_file in"
            ),
        "{e}"
    );

    // The edges file, after valid nodes.
    nodes_h5(d);
    std::fs::write(
        &cfg,
        r#"{"networks": {"nodes": [{"nodes_file": "nodes.h5", "populations": {"P": {"type": "biophysical"}}}],
            "edges": [{"edges_file": "fifo.h5"}]}}"#,
    )
    .unwrap();
    let e = open_err(&cfg);
    assert!(
        e.starts_with(&format!("{}: ", d.join("fifo.h5").display()))
            && e.contains(
                "it is a FIFO (named pipe), not a regular file (named by networks.edges[0].edges_file in"
            ),
        "{e}"
    );

    // The node-types CSV.
    mkfifo(&d.join("types.csv"));
    std::fs::write(
        &cfg,
        r#"{"networks": {"nodes": [{"nodes_file": "nodes.h5", "node_types_file": "types.csv", "populations": {"P": {"type": "biophysical"}}}], "edges": []}}"#,
    )
    .unwrap();
    let e = open_err(&cfg);
    assert!(
        e.starts_with(&format!("{}: ", d.join("types.csv").display()))
            && e.contains("it is a FIFO (named pipe), not a regular file (named by networks.nodes[0].node_types_file in"),
        "{e}"
    );
}
