"""The checks of ci/neurodamus.sh on the three neurodamus runs, then the same checks on
corrupted copies of their inputs, each of which must fail (so that no check passes by
construction).

Runs in the venv (neurodamus' pickled allocation needs neurodamus.utils.compat importable;
the per-cell memory uses neurodamus' own SynapseMemoryUsage). Exit 0 when every check passes
and every corrupted check fails; 1 otherwise, naming the check.

The checks:
  loaded     neurodamus' log of the Ballast run says it loaded allocation_r{R}_c1.pkl.gz, the
             file in that run's directory is Ballast's byte for byte, and no allocation was
             generated on the fly.
  gids       each rank of the Ballast run instantiated exactly the gids Ballast's allocation
             gives it, per population (and the neurodamus run those of neurodamus'
             allocation); in every run each cell is on exactly one rank.
  spikes     the three runs' spikes (population, gid, time) are identical, with spikes in both
             populations (activity crossed ranks and populations); so are those of the runs
             with the spike exchange over Ballast (--shim-run, Ballast's allocation).
  traces     the runs' soma voltages are identical for every cell, sample by sample.
  memory     Ballast's largest rank (KB, from neurodamus' dry-run memory per metype and its
             KB per synapse) is at most neurodamus' largest; `ballast dry-run --json` reports
             the same largest rank.
  distinct   Ballast's allocation is not RoundRobin's (else the gids check proves little).
  reproduced `ballast dry-run --strategy neurodamus` wrote neurodamus' own allocation: the same
             gids in the same buckets, in the same order.
"""

import argparse
import filecmp
import gzip
import json
import pickle
import sys
from pathlib import Path


class CheckFailed(Exception):
    pass


def fail_if(cond, msg):
    if cond:
        raise CheckFailed(msg)


def load_allocation(path, keep_order=False):
    """{population: {rank: gids}} from neurodamus' allocation_r{R}_c1.pkl.gz, gids sorted
    unless keep_order (then in the file's order)."""
    with gzip.open(path, "rb") as f:
        data = pickle.load(f)  # a file this run wrote (neurodamus or ballast)
    out = {}
    for pop, buckets in data.items():
        out[pop] = {}
        for (rank, cycle), gids in buckets.items():
            fail_if(cycle != 0, f"{path}: bucket ({rank}, {cycle}): one cycle expected")
            gids = [int(g) for g in gids]
            out[pop][int(rank)] = gids if keep_order else sorted(gids)
    return out


def load_run(run_dir):
    run_dir = Path(run_dir)
    result = json.loads((run_dir / "result.json").read_text())
    result["dir"] = run_dir
    result["log"] = (run_dir / "run.log").read_text(errors="replace")
    return result


def all_cells(memory_usage):
    return {
        (pop, int(g)) for pop, metypes in memory_usage["pop_metype_gids"].items() for gids in metypes.values()
        for g in gids
    }


def check_loaded(run, ballast_alloc_path):
    name = Path(ballast_alloc_path).name
    fail_if(
        f"Loading allocation stats from {name}" not in run["log"],
        f"neurodamus' log ({run['dir']}/run.log) does not say it loaded {name}",
    )
    fail_if(
        "Allocation file not found" in run["log"],
        f"neurodamus generated an allocation on the fly in {run['dir']}",
    )
    used = run["dir"] / name
    fail_if(
        not used.exists() or not filecmp.cmp(used, ballast_alloc_path, shallow=False),
        f"{used} is not Ballast's {ballast_alloc_path}",
    )


def check_gids(run, alloc, cells, label):
    ranks = run["ranks"]
    per_rank = run["gids_per_rank"]
    fail_if(len(per_rank) != ranks, f"{label}: {len(per_rank)} ranks reported, {ranks} expected")
    for rank in range(ranks):
        pops = set(per_rank[rank]) | set(alloc)
        for pop in sorted(pops):
            got = sorted(per_rank[rank].get(pop, []))
            want = alloc.get(pop, {}).get(rank, [])
            fail_if(
                got != want,
                f"{label}: rank {rank} instantiated {len(got)} {pop} cells {got[:8]}..., "
                f"the allocation gives it {len(want)} {want[:8]}...",
            )
    check_partition(run, cells, label)


def check_partition(run, cells, label):
    seen = [(pop, g) for ranks in run["gids_per_rank"] for pop, gids in ranks.items() for g in gids]
    fail_if(len(seen) != len(set(seen)), f"{label}: a cell was instantiated on more than one rank")
    fail_if(
        set(seen) != cells,
        f"{label}: instantiated {len(set(seen))} cells, the circuit has {len(cells)}",
    )


def check_spikes(runs):
    ref = runs[0]
    pops = {s[0] for s in ref["spikes"]}
    fail_if(len(pops) < 2, f"{ref['lb_mode']}: spikes in {sorted(pops)} only: the activity did not spread")
    for other in runs[1:]:
        fail_if(
            ref["spikes"] != other["spikes"],
            f"spikes differ: {ref['dir'].name} has {len(ref['spikes'])}, {other['dir'].name} "
            f"{len(other['spikes'])}; first difference "
            f"{next(((a, b) for a, b in zip(ref['spikes'], other['spikes']) if a != b), None)}",
        )


def check_traces(runs, cells):
    ref = runs[0]
    want_keys = {f"{pop}:{g}" for pop, g in cells}
    for run in runs:
        fail_if(set(run["traces"]) != want_keys, f"{run['dir'].name}: traces of {len(run['traces'])} cells")
    for other in runs[1:]:
        for key in sorted(want_keys):
            a, b = ref["traces"][key], other["traces"][key]
            if a != b:
                diff = max((abs(x - y) for x, y in zip(a, b)), default=float("inf"))
                raise CheckFailed(
                    f"soma trace of {key} differs between {ref['dir'].name} and {other['dir'].name} "
                    f"({len(a)} vs {len(b)} samples, max |dV| {diff:g} mV)"
                )


def rank_kb(alloc, memory_usage, ranks):
    from neurodamus.utils.memory import SynapseMemoryUsage

    metype_of = {
        (pop, int(g)): metype
        for pop, metypes in memory_usage["pop_metype_gids"].items()
        for metype, gids in metypes.items()
        for g in gids
    }
    per_cell = {
        metype: kb + SynapseMemoryUsage.get_memory_usage(memory_usage["metype_cell_syn_average"][metype])
        for metype, kb in memory_usage["metype_memory"].items()
    }
    loads = [0.0] * ranks
    for pop, buckets in alloc.items():
        for rank, gids in buckets.items():
            loads[rank] += sum(per_cell[metype_of[(pop, g)]] for g in gids)
    return loads


def check_memory(ballast_alloc, nd_alloc, memory_usage, ranks, ballast_dry_run):
    b = rank_kb(ballast_alloc, memory_usage, ranks)
    n = rank_kb(nd_alloc, memory_usage, ranks)
    fail_if(
        max(b) > max(n) + 1e-6,
        f"Ballast's largest rank {max(b):.1f} KB is above neurodamus' {max(n):.1f} KB",
    )
    reported = ballast_dry_run["max_rank_kb"]
    fail_if(
        abs(reported - max(b)) > 1e-6 * max(b) + 1e-3,
        f"ballast dry-run reports a largest rank of {reported:.3f} KB, the allocation gives {max(b):.3f} KB",
    )
    return b, n


def check_distinct(ballast_alloc, rr_run):
    rr = {}
    for rank, pops in enumerate(rr_run["gids_per_rank"]):
        for pop, gids in pops.items():
            rr.setdefault(pop, {})[rank] = sorted(gids)
    fail_if(ballast_alloc == rr, "Ballast's allocation is RoundRobin's: the gids check would prove little")


def check_reproduced(reproduced, nd_alloc_ordered):
    fail_if(
        reproduced != nd_alloc_ordered,
        "`ballast dry-run --strategy neurodamus` differs from neurodamus' allocation: "
        + "; ".join(
            f"{pop} rank {r}: {reproduced.get(pop, {}).get(r)} vs {nd_alloc_ordered.get(pop, {}).get(r)}"
            for pop in sorted(set(reproduced) | set(nd_alloc_ordered))
            for r in range(max(len(reproduced.get(pop, {})), len(nd_alloc_ordered.get(pop, {}))))
            if reproduced.get(pop, {}).get(r) != nd_alloc_ordered.get(pop, {}).get(r)
        )[:600],
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ballast-allocation", required=True)
    p.add_argument("--neurodamus-allocation", required=True)
    p.add_argument(
        "--reproduced-allocation", required=True, help="`ballast dry-run --strategy neurodamus`'s allocation"
    )
    p.add_argument("--memory-usage", required=True)
    p.add_argument("--ballast-dry-run", required=True, help="`ballast dry-run --json` output")
    p.add_argument("--ballast-run", required=True)
    p.add_argument("--neurodamus-run", required=True)
    p.add_argument("--roundrobin-run", required=True)
    p.add_argument(
        "--shim-run", action="append", default=[],
        help="a run with Ballast's allocation and the spike exchange over Ballast (repeatable)",
    )
    a = p.parse_args()

    b_alloc = load_allocation(a.ballast_allocation)
    n_alloc = load_allocation(a.neurodamus_allocation)
    n_ordered = load_allocation(a.neurodamus_allocation, keep_order=True)
    reproduced = load_allocation(a.reproduced_allocation, keep_order=True)
    mem = json.loads(Path(a.memory_usage).read_text())
    dry = json.loads(Path(a.ballast_dry_run).read_text())
    b_run, n_run, r_run = (load_run(d) for d in (a.ballast_run, a.neurodamus_run, a.roundrobin_run))
    shim_runs = [load_run(d) for d in a.shim_run]
    runs = [b_run, n_run, r_run, *shim_runs]
    cells = all_cells(mem)
    ranks = b_run["ranks"]
    loads = {}

    def memory():
        loads["b"], loads["n"] = check_memory(b_alloc, n_alloc, mem, ranks, dry)

    checks = [
        ("loaded", lambda: check_loaded(b_run, a.ballast_allocation)),
        ("gids", lambda: (
            check_gids(b_run, b_alloc, cells, "Ballast run"),
            check_gids(n_run, n_alloc, cells, "neurodamus run"),
            check_partition(r_run, cells, "RoundRobin run"),
            *(check_gids(s, b_alloc, cells, f"run over Ballast {s['dir']}") for s in shim_runs),
        )),
        ("spikes", lambda: check_spikes(runs)),
        ("traces", lambda: check_traces(runs, cells)),
        ("memory", memory),
        ("distinct", lambda: check_distinct(b_alloc, r_run)),
        ("reproduced", lambda: check_reproduced(reproduced, n_ordered)),
    ]
    failed = []
    for name, f in checks:
        try:
            f()
            print(f"check.py: {name}: ok")
        except CheckFailed as e:
            print(f"check.py: {name}: FAILED: {e}", file=sys.stderr)
            failed.append(name)
    if not failed:
        print(
            f"check.py: {len(cells)} cells on {ranks} ranks; {len(b_run['spikes'])} spikes and "
            f"{len(b_run['traces'])} soma traces of {len(next(iter(b_run['traces'].values())))} samples "
            f"identical in the Ballast, neurodamus and RoundRobin runs"
            + (f" and the {len(shim_runs)} with the exchange over Ballast" if shim_runs else "")
        )
        print(
            "check.py: largest rank (KB, cells + synapses): Ballast "
            f"{max(loads['b']):.1f}, neurodamus {max(loads['n']):.1f} "
            f"(per rank: Ballast {[round(x, 1) for x in loads['b']]}, neurodamus {[round(x, 1) for x in loads['n']]})"
        )

    # The same checks on corrupted input must fail.
    def moved_gid(alloc, dst=None):
        """A copy of alloc with one cell moved from one rank to another (to dst if given)."""
        bad = {p: {r: list(g) for r, g in b.items()} for p, b in alloc.items()}
        for pop in sorted(bad):
            srcs = [r for r, g in sorted(bad[pop].items()) if g and r != dst]
            if srcs:
                src = srcs[0]
                to = (src + 1) % ranks if dst is None else dst
                bad[pop].setdefault(to, []).append(bad[pop][src].pop(0))
                bad[pop][to].sort()
                return bad
        raise AssertionError("no cell to move")

    def reversed_bucket(alloc):
        bad = {p: {r: list(g) for r, g in b.items()} for p, b in alloc.items()}
        pop = sorted(bad)[0]
        rank = max(bad[pop], key=lambda r: len(bad[pop][r]))
        bad[pop][rank].reverse()
        return bad

    def tweaked(run, what):
        bad = dict(run)
        if what == "spike-time":
            bad["spikes"] = [list(s) for s in run["spikes"]]
            bad["spikes"][-1][2] += 1e-9
        elif what == "spike-dropped":
            bad["spikes"] = run["spikes"][:-1]
        elif what == "trace":
            key = sorted(run["traces"])[-1]
            bad["traces"] = dict(run["traces"])
            bad["traces"][key] = list(run["traces"][key])
            bad["traces"][key][len(bad["traces"][key]) // 2] += 1e-12
        elif what == "one-population":
            pop = run["spikes"][0][0]
            bad["spikes"] = [s for s in run["spikes"] if s[0] == pop]
        elif what == "log":
            bad["log"] = run["log"].replace("Loading allocation stats", "Loading stats")
        elif what == "everything-everywhere":
            bad["gids_per_rank"] = [run["gids_per_rank"][0]] * run["ranks"]
        return bad

    b_loads = rank_kb(b_alloc, mem, ranks)
    if max(rank_kb(n_alloc, mem, ranks)) > max(b_loads) + 1e-6:
        swapped = (n_alloc, b_alloc)
    else:  # equal largest ranks: Ballast's with one more cell on its largest rank
        swapped = (moved_gid(b_alloc, dst=b_loads.index(max(b_loads))), b_alloc)
    rr_alloc = {}
    for rank, pops in enumerate(r_run["gids_per_rank"]):
        for pop, gids in pops.items():
            rr_alloc.setdefault(pop, {})[rank] = sorted(gids)
    negatives = [
        ("loaded: log without the message", lambda: check_loaded(tweaked(b_run, "log"), a.ballast_allocation)),
        ("loaded: another file than Ballast's", lambda: check_loaded(b_run, a.neurodamus_allocation)),
        ("gids: one gid moved to another rank", lambda: check_gids(b_run, moved_gid(b_alloc), cells, "x")),
        ("gids: neurodamus' allocation for the Ballast run", lambda: check_gids(b_run, n_alloc, cells, "x")),
        ("gids: every rank ran the whole model", lambda: check_gids(
            tweaked(b_run, "everything-everywhere"), b_alloc, cells, "x")),
        ("spikes: one time off by 1e-9 ms", lambda: check_spikes([b_run, tweaked(n_run, "spike-time"), r_run])),
        ("spikes: one spike dropped", lambda: check_spikes([b_run, n_run, tweaked(r_run, "spike-dropped")])),
        ("spikes: one population silent", lambda: check_spikes([tweaked(b_run, "one-population")] * 3)),
        ("traces: one sample off by 1e-12 mV", lambda: check_traces([b_run, n_run, tweaked(r_run, "trace")], cells)),
        ("memory: the heavier allocation as Ballast's", lambda: check_memory(*swapped, mem, ranks, dry)),
        ("distinct: RoundRobin's allocation as Ballast's", lambda: check_distinct(rr_alloc, r_run)),
        ("reproduced: Ballast's lpt allocation", lambda: check_reproduced(
            load_allocation(a.ballast_allocation, keep_order=True), n_ordered)),
        ("reproduced: one bucket in another order", lambda: check_reproduced(reversed_bucket(n_ordered), n_ordered)),
    ]
    for s_run in shim_runs:
        negatives.append((
            f"spikes: {s_run['dir'].name} with one spike dropped",
            lambda s_run=s_run: check_spikes([b_run, n_run, r_run, tweaked(s_run, "spike-dropped")]),
        ))
    if n_alloc == b_alloc:  # (then these two are no corruption)
        negatives = [
            n for n in negatives if n[0] not in ("gids: neurodamus' allocation for the Ballast run",
                                                 "reproduced: Ballast's lpt allocation")
        ]
    accepted = []
    for name, f in negatives:
        try:
            f()
            accepted.append(name)
            print(f"check.py: corrupted input ACCEPTED: {name}", file=sys.stderr)
        except CheckFailed:
            pass
    print(f"check.py: {len(negatives) - len(accepted)} of {len(negatives)} corrupted inputs rejected")
    if failed or accepted:
        print(f"check.py: FAILED: {', '.join(failed + accepted)}", file=sys.stderr)
        sys.exit(1)
    print(f"check.py: {len(checks)} checks passed")


if __name__ == "__main__":
    main()
