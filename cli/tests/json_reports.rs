//! `ballast info --json` and `ballast demo --json`: one JSON object on stdout, with the same
//! figures as the text form of the same command.
mod common;

use common::ballast;
use serde_json::Value;

fn stdout_of(args: &[&str], dir: &std::path::Path) -> String {
    let o = ballast().current_dir(dir).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The whitespace-separated cells of the text line starting (after its indent) with `name`.
fn row<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} in {text}"));
    line.split_whitespace().skip(1).collect()
}

#[test]
fn info_json_has_the_figures_of_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["info", "--peers", "20", "--max-endpoints", "8"];
    let text = stdout_of(&args, dir.path());
    let json: Value =
        serde_json::from_str(&stdout_of(&[&args[..], &["--json"]].concat(), dir.path())).unwrap();
    let f = &json["footprint"];
    assert_eq!(
        (f["peers"].as_u64(), f["world_size"].as_u64()),
        (Some(20), Some(21))
    );
    let columns = f["columns"].as_array().unwrap();
    let modes: Vec<&str> = columns.iter().map(|c| c["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["per-peer", "shared", "xrc"]);
    for field in ["pool_bytes", "endpoint_bytes", "datagram_peers", "total_bytes"] {
        let from_json: Vec<String> = columns
            .iter()
            .map(|c| c[field].as_u64().unwrap().to_string())
            .collect();
        assert_eq!(from_json, row(&text, field), "{field}");
    }
    assert_eq!(row(&text, "datagram_peers"), ["12", "12", "0"]);
    // The settings and the endpoint_overflow lines are the text's, in order.
    for s in json["settings"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap();
        assert_eq!(
            row(&text, name),
            [
                s["value"].as_str().unwrap(),
                s["from"].as_str().unwrap(),
                s["variable"].as_str().unwrap()
            ],
        );
    }
    assert_eq!(json["settings"][6]["name"], "max_endpoints");
    assert_eq!(json["settings"][6]["value"], "8");
    let lines = json["endpoint_overflow"].as_array().unwrap();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for l in lines {
        assert!(
            text.contains(&format!("\n  {}\n", l.as_str().unwrap())),
            "{l} in {text}"
        );
    }
    let compiled = json["transports_compiled_in"].as_array().unwrap();
    assert_eq!(compiled[0], "local");
    assert!(text.starts_with(&format!(
        "transports compiled in: {}\n",
        compiled
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect::<Vec<_>>()
            .join(", ")
    )));
}

#[test]
fn demo_json_has_the_figures_of_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "demo",
        "--cells",
        "2000",
        "--ranks",
        "4",
        "--tstop",
        "20",
        "--max-endpoints",
        "2",
    ];
    let text = stdout_of(&args, dir.path());
    let json: Value =
        serde_json::from_str(&stdout_of(&[&args[..], &["--json"]].concat(), dir.path())).unwrap();
    assert!(text.starts_with(&format!("circuit: {}\n", json["circuit"].as_str().unwrap())));
    let written: Vec<&str> = json["written"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        written,
        [
            "ballast-demo/allocation_r4_c1.pkl.gz",
            "ballast-demo/allocation_r4_c1.json"
        ]
    );
    assert!(text.contains(json["settings"].as_str().unwrap()));
    // Every row of the table, with both figures, as in the text.
    let table = json["table"].as_array().unwrap();
    assert_eq!(table.len(), 15, "{table:?}");
    for r in table {
        let line = match r["label"].as_str() {
            None => r["heading"].as_str().unwrap().to_string(),
            Some(label) => format!(
                "{:<60} {:>14} {:>14}",
                label,
                r["round_robin"].as_str().unwrap(),
                r["memory"].as_str().unwrap()
            ),
        };
        assert!(text.lines().any(|l| l == line), "{line:?} in {text}");
    }
    let spikes = &json["spikes"];
    assert_eq!(spikes["round_robin"], spikes["memory"]);
    assert!(spikes["memory"].as_u64().unwrap() > 0);
    assert_eq!(
        (json["identical_spikes"].as_bool(), json["checks_ok"].as_bool()),
        (Some(true), Some(true))
    );
    assert!(text.contains(&format!(
        "check: identical spikes in the RoundRobin and Memory runs ({} spikes): ok\n",
        spikes["memory"]
    )));
}
