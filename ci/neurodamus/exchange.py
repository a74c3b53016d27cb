"""The whole loop's exchange checks, for ci/neurodamus.sh: the neurodamus runs whose spikes
went over Ballast (NRNHOME: the shim of integrations/neuron/) against their
BALLAST_REPORT_DIR reports and `ballast dry-run --transport-model ballast --exchange
allgather|multisend --transport mpi --json`; then the same checks on corrupted copies, each
of which must fail.

Usage: exchange.py --wheel-run DIR (--shim-run DIR --charge JSON --mpi-native true|false
                   [--exchange allgather|multisend])...
(--exchange: once per --shim-run, or never: all allgather.)

For each shim run (result.json, reports/neuron_rank{R}.json), the checks:
  same       its spikes and soma traces are those of the wheel's run (--wheel-run), whatever
             its allocation and exchange mode.
  reports    one report per rank, `simulator` neuron, `transport` mpi, `mpi_native` as the
             run was asked; allgather: the all-gather exchange ran on Ballast:
             `spike_exchanges` > 0 on every rank, no multisend message, the `spikes_sent`
             add up to the run's spikes and the `spikes_received` to (ranks - 1) times them
             (every rank receives every other rank's spikes); multisend: no all-gather
             exchange, `multisend_sent` adding up to `multisend_received`, > 0, and each
             rank's `spikes_sent`/`spikes_received` equal to its multisend messages.
  peers      each rank's `peers_connected` is the peers the dry run charged it
             (`rank_loads.peers`: the ring all-gather's partners; for multisend the ranks
             holding targets or sources, and the ring partners of its conserve step).
  footprint  the dry run's charge (`rank_loads.transport_kb` × 1024, bytes) beside the
             measured `footprint.total`, rank by rank: equal on the MPI native path; on the
             engine path (BALLAST_MPI_NATIVE=off) equal where it holds, else the charge is
             at least the measure (the model charges a staging buffer per pool buffer; the
             run holds the one it receives into), and the reason is printed.
Printed beside them: VmRSS and VmHWM per rank of each shim run (its reports, at terminate)
and of the wheel's own MPI run (--wheel-run, the same allocation; its result.json's
vm_per_rank, after the run). Printed only: the two are read at different moments and RSS is
noisy, so nothing is asserted on them.
Exit 0 when every check passes and every corruption fails; 1 otherwise.
"""

import argparse
import copy
import json
import sys
from pathlib import Path


class CheckFailed(Exception):
    pass


def fail_if(cond, msg):
    if cond:
        raise CheckFailed(msg)


def load_shim_run(run_dir, charge_path, mpi_native, exchange="allgather"):
    run_dir = Path(run_dir)
    result = json.loads((run_dir / "result.json").read_text())
    ranks = result["ranks"]
    reports = []
    for r in range(ranks):
        p = run_dir / "reports" / f"neuron_rank{r}.json"
        fail_if(not p.is_file(), f"{p} is missing: rank {r} wrote no report (was the shim loaded?)")
        reports.append(json.loads(p.read_text()))
    return {
        "dir": str(run_dir),
        "ranks": ranks,
        "spikes": len(result["spikes"]),
        "result": result,
        "reports": reports,
        "charge": json.loads(Path(charge_path).read_text()),
        "mpi_native": mpi_native,
        "exchange": exchange,
    }


def check_same(run, wheel):
    label = run["dir"]
    fail_if(not wheel["spikes"], "the wheel's run has no spike")
    fail_if(run["result"]["spikes"] != wheel["spikes"], f"{label}: spikes differ from the wheel's run")
    fail_if(run["result"]["traces"] != wheel["traces"], f"{label}: soma traces differ from the wheel's run")


def check_reports(run):
    reps, n, label = run["reports"], run["ranks"], run["dir"]
    for r, rep in enumerate(reps):
        fail_if(rep.get("rank") != r, f"{label}: neuron_rank{r}.json says rank {rep.get('rank')}")
        fail_if(rep.get("simulator") != "neuron", f"{label}: rank {r}: simulator {rep.get('simulator')!r}")
        fail_if(rep.get("transport") != "mpi", f"{label}: rank {r}: transport {rep.get('transport')!r}, mpi expected")
        fail_if(
            rep.get("mpi_native") is not run["mpi_native"],
            f"{label}: rank {r}: mpi_native {rep.get('mpi_native')}, {run['mpi_native']} asked",
        )
        if run["exchange"] == "multisend":
            fail_if(rep["spike_exchanges"], f"{label}: rank {r}: all-gather exchanges in a multisend run")
            fail_if(
                rep["spikes_sent"] != rep["multisend_sent"] or rep["spikes_received"] != rep["multisend_received"],
                f"{label}: rank {r}: spikes sent/received {rep['spikes_sent']}/{rep['spikes_received']}, "
                f"multisend messages {rep['multisend_sent']}/{rep['multisend_received']}",
            )
            continue
        fail_if(rep["spike_exchanges"] <= 0, f"{label}: rank {r}: no spike exchange ran on Ballast")
        fail_if(
            rep["multisend_sent"] or rep["multisend_received"],
            f"{label}: rank {r}: multisend messages in an all-gather run",
        )
    if run["exchange"] == "multisend":
        sent = sum(rep["multisend_sent"] for rep in reps)
        received = sum(rep["multisend_received"] for rep in reps)
        fail_if(sent <= 0 or sent != received, f"{label}: multisend_sent add up to {sent}, multisend_received to {received}")
        return
    sent = sum(rep["spikes_sent"] for rep in reps)
    received = sum(rep["spikes_received"] for rep in reps)
    fail_if(sent != run["spikes"], f"{label}: the spikes_sent add up to {sent}, the run has {run['spikes']} spikes")
    fail_if(
        received != (n - 1) * run["spikes"],
        f"{label}: the spikes_received add up to {received}, want (ranks - 1) × {run['spikes']}",
    )


def charged(run):
    loads = run["charge"].get("rank_loads")
    fail_if(loads is None, f"{run['dir']}: the dry run charged no transport (no rank_loads)")
    fail_if(len(loads["transport_kb"]) != run["ranks"], f"{run['dir']}: the dry run has another rank count")
    return [round(kb * 1024) for kb in loads["transport_kb"]], loads["peers"]


def check_peers(run):
    _, peers = charged(run)
    for r, rep in enumerate(run["reports"]):
        fail_if(
            rep["peers_connected"] != peers[r],
            f"{run['dir']}: rank {r} connected {rep['peers_connected']} peers, the dry run charged {peers[r]}",
        )


def check_footprint(run, verbose=False):
    charge, _ = charged(run)
    equal = True
    for r, rep in enumerate(run["reports"]):
        got = rep["footprint"]["total"]
        if verbose:
            print(f"exchange.py:   rank {r}: charged {charge[r]} B, measured footprint.total {got} B")
        if charge[r] != got:
            equal = False
            fail_if(
                run["mpi_native"],
                f"{run['dir']}: rank {r}: charged {charge[r]} B, measured {got} B (the native path must be equal)",
            )
            fail_if(
                charge[r] < got,
                f"{run['dir']}: rank {r}: charged {charge[r]} B, below the measured {got} B",
            )
    if verbose and not equal:
        print(
            "exchange.py:   (engine path: the model is an upper bound: it charges a staging buffer per "
            "pool buffer, buffer_count × (buffer_size + MPI_STAGING_EXTRA_BYTES); the run holds the one it "
            "receives into)"
        )


def print_vm(runs, wheel):
    def row(vm):
        return ", ".join(f"{v['vm_rss_kb']}/{v['vm_hwm_kb']}" for v in vm) if vm else "(not recorded)"

    print(
        "exchange.py: VmRSS/VmHWM KB per rank (the wheel's run after psolve, nd_run.py; over Ballast at "
        f"terminate, the reports): wheel's own MPI {row(wheel.get('vm_per_rank'))}"
    )
    for run in runs:
        print(f"exchange.py:   over Ballast (mpi_native {str(run['mpi_native']).lower()}) {row(run['reports'])}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wheel-run", required=True)
    p.add_argument("--shim-run", action="append", required=True)
    p.add_argument("--charge", action="append", required=True)
    p.add_argument("--mpi-native", action="append", required=True, choices=["true", "false"])
    p.add_argument("--exchange", action="append", choices=["allgather", "multisend"])
    a = p.parse_args()
    exchanges = a.exchange or ["allgather"] * len(a.shim_run)
    if not len(a.shim_run) == len(a.charge) == len(a.mpi_native) == len(exchanges):
        p.error("give --charge and --mpi-native (and --exchange, or never) once per --shim-run")
    runs = [load_shim_run(*args) for args in zip(a.shim_run, a.charge, [m == "true" for m in a.mpi_native], exchanges)]
    wheel = json.loads((Path(a.wheel_run) / "result.json").read_text())

    failed = []
    for run in runs:
        checks = (
            ("same", lambda run: check_same(run, wheel)),
            ("reports", check_reports),
            ("peers", check_peers),
            ("footprint", check_footprint),
        )
        for name, f in checks:
            try:
                if name == "footprint":
                    print(f"exchange.py: {run['dir']} ({run['exchange']}, mpi_native {str(run['mpi_native']).lower()}):")
                    f(run, verbose=True)
                else:
                    f(run)
                print(f"exchange.py: {name}: ok")
            except CheckFailed as e:
                print(f"exchange.py: {name}: FAILED: {e}", file=sys.stderr)
                failed.append(name)
    print_vm(runs, wheel)

    def tweaked(run, what):
        bad = copy.deepcopy(run)
        if what == "no-exchange":
            bad["reports"][-1]["spike_exchanges" if run["exchange"] == "allgather" else "multisend_sent"] = 0
        elif what == "wheel-mpi":
            bad["reports"][0]["transport"] = "local"
        elif what == "lost-spike":
            bad["reports"][0]["spikes_received"] -= 1
        elif what == "other-path":
            bad["mpi_native"] = not run["mpi_native"]
        elif what == "extra-peer":
            bad["reports"][0]["peers_connected"] += 1
        elif what == "other-spike":
            bad["result"]["spikes"] = bad["result"]["spikes"][:-1]
        elif what == "over-charge":
            bad["reports"][0]["footprint"]["total"] = charged(run)[0][0] + 1
        return bad

    negatives = []
    for run in runs:
        negatives += [
            ("same: one spike missing", lambda run=run: check_same(tweaked(run, "other-spike"), wheel)),
            ("reports: a rank without an exchange", lambda run=run: check_reports(tweaked(run, "no-exchange"))),
            ("reports: another transport", lambda run=run: check_reports(tweaked(run, "wheel-mpi"))),
            ("reports: one spike not received", lambda run=run: check_reports(tweaked(run, "lost-spike"))),
            ("reports: the other path", lambda run=run: check_reports(tweaked(run, "other-path"))),
            ("peers: one more peer", lambda run=run: check_peers(tweaked(run, "extra-peer"))),
            ("footprint: measured above the charge", lambda run=run: check_footprint(tweaked(run, "over-charge"))),
        ]
    accepted = []
    for name, f in negatives:
        try:
            f()
            accepted.append(name)
            print(f"exchange.py: corrupted input ACCEPTED: {name}", file=sys.stderr)
        except CheckFailed:
            pass
    print(f"exchange.py: {len(negatives) - len(accepted)} of {len(negatives)} corrupted inputs rejected")
    if failed or accepted:
        print(f"exchange.py: FAILED: {', '.join(failed + accepted)}", file=sys.stderr)
        sys.exit(1)
    print(f"exchange.py: {4 * len(runs)} checks passed on {len(runs)} runs over Ballast")


if __name__ == "__main__":
    main()
