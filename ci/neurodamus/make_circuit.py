"""Builds the 60-cell, two-population ring (RingA 36 cells, RingB 24) that ci/neurodamus.sh
runs through the real neurodamus, with neurodamus' own tests/simulations/utils.py.

Usage: make_circuit.py NEURODAMUS_TESTS_DIR OUT_DIR

NEURODAMUS_TESTS_DIR is ../shared/data/neurodamus-tests (its tests/simulations/utils.py
writes the SONATA files; its ringtest hoc template and morphologies are referred to by
absolute path, never copied). OUT_DIR gets nodes_*.h5, edges_*.h5, circuit_config.json,
node_sets.json and simulation_config.json (NEURON, 50 ms, a current pulse on six RingA
cells; the rings and the A->B edges carry the activity across ranks).
"""

import itertools as it
import json
import sys
from pathlib import Path

N_A = 36
N_B = 24
# Three mtypes x three etypes; the morphology follows the mtype (cell_big for one mtype per
# population), so that metypes differ in memory and the balancers' allocations differ.
MTYPES = ["MTYPE0", "MTYPE1", "MTYPE2"]
ETYPES = ["ETYPE0", "ETYPE1", "ETYPE2"]


def main():
    nd_tests = Path(sys.argv[1]).resolve()
    out = Path(sys.argv[2]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    sims = nd_tests / "tests" / "simulations"
    ringtest = sims / "ringtest"
    sys.path.insert(0, str(sims))
    from utils import Edges, make_edges, make_nodes  # neurodamus' helpers

    def nodes(name, count, morphs, x0):
        make_nodes(
            filename=str(out / f"nodes_{name}.h5"),
            name=name,
            count=count,
            wanted_attributes={
                "node_type_id": -1,
                "model_template": "hoc:TestCell",
                "model_type": "biophysical",
                "mtype": [MTYPES[i % 3] for i in range(count)],
                "etype": [ETYPES[(i // 3) % 3] for i in range(count)],
                "morphology": [morphs[i % 3] for i in range(count)],
                "x": it.count(x0),
                "y": it.count(x0 + 1),
                "z": it.count(x0 + 2),
            },
        )

    nodes("RingA", N_A, ["cell_big", "cell_small", "cell_small"], 0)
    nodes("RingB", N_B, ["cell_small", "cell_small", "cell_big"], 100)

    def syn_attrs(base, syn_type):
        return {
            "edge_type_id": -1,
            "conductance": base,
            "decay_time": base + 1.0,
            "delay": 3.0,
            "depression_time": base + 3.0,
            "facilitation_time": base + 4.0,
            "u_syn": 0.5,
            "afferent_section_id": 0,
            "afferent_section_pos": 0.5,
            "afferent_segment_id": 0,
            "afferent_segment_offset": 0,
            "n_rrp_vesicles": 4,
            "syn_type_id": syn_type,
        }

    ring_a = [(i, (i + 1) % N_A) for i in range(N_A)]
    ring_b = [(i, (i + 1) % N_B) for i in range(N_B)]
    a_to_b = [(i, i % N_B) for i in range(0, N_A, 2)]
    make_edges(str(out / "edges_A.h5"), Edges("RingA", "RingA", "chemical", ring_a), syn_attrs(800.0, 131))
    make_edges(str(out / "edges_B.h5"), Edges("RingB", "RingB", "chemical", ring_b), syn_attrs(600.0, 131))
    make_edges(str(out / "edges_AB.h5"), Edges("RingA", "RingB", "chemical", a_to_b), syn_attrs(800.0, 131))

    pop_props = {
        "type": "biophysical",
        "morphologies_dir": str(ringtest / "morphologies" / "asc"),
        "biophysical_neuron_models_dir": str(ringtest / "hoc"),
        "alternate_morphologies": {"neurolucida-asc": str(ringtest / "morphologies" / "asc")},
    }
    circuit = {
        "version": 2,
        "networks": {
            "nodes": [
                {"nodes_file": str(out / f"nodes_{p}.h5"), "populations": {p: dict(pop_props)}}
                for p in ("RingA", "RingB")
            ],
            "edges": [
                {"edges_file": str(out / f), "populations": {e: {"type": "chemical"}}}
                for f, e in (
                    ("edges_A.h5", "RingA__RingA__chemical"),
                    ("edges_B.h5", "RingB__RingB__chemical"),
                    ("edges_AB.h5", "RingA__RingB__chemical"),
                )
            ],
        },
    }
    node_sets = {
        "RingA": {"population": "RingA"},
        "RingB": {"population": "RingB"},
        "Mosaic": {"population": ["RingA", "RingB"]},
        "Kick": {"population": "RingA", "node_id": [0, 6, 12, 18, 24, 30]},
    }
    simulation = {
        "network": str(out / "circuit_config.json"),
        "node_sets_file": str(out / "node_sets.json"),
        "node_set": "Mosaic",
        "target_simulator": "NEURON",
        "run": {"tstop": 50.0, "dt": 0.025, "random_seed": 1122},
        "conditions": {"celsius": 35, "v_init": -65, "randomize_gaba_rise_time": True},
        "inputs": {
            "Kick": {
                "module": "pulse",
                "input_type": "current_clamp",
                "delay": 5,
                "duration": 40,
                "node_set": "Kick",
                "represents_physical_electrode": True,
                "amp_start": 10,
                "width": 1,
                "frequency": 50,
            }
        },
    }
    for name, obj in (
        ("circuit_config.json", circuit),
        ("node_sets.json", node_sets),
        ("simulation_config.json", simulation),
    ):
        (out / name).write_text(json.dumps(obj, indent=2) + "\n")
    print(f"make_circuit.py: {N_A + N_B} cells (RingA {N_A}, RingB {N_B}) in {out}")


if __name__ == "__main__":
    main()
