"""Summarises bench/neuron_exchange.sh's runs (the JSON lines of bench/neuron/net.py) as one
markdown table: per rank count, mode and path (label), over the runs: the medians of the
wall time of pc.psolve (the slowest rank of each run), of pc.wait_time() and of
pc.step_time() (the mean over the ranks of each run), and each rank's median VmHWM (MB);
beside each Ballast figure its ratio to the wheel's MPI (label "mpi") in the same rank
count and mode; and the psolve ratio paired by round (the k-th Ballast run over the k-th MPI
run of the same rank count and mode, run minutes apart): median (min-max), which a load
that changes between rounds moves less. Fails (exit 1) when a Ballast run's spikes differ from the MPI runs' (sha256)
or a group has fewer than MIN runs.

Usage: python table.py RUNS.jsonl [--min-runs N]
"""

import argparse
import json
import statistics
import sys
from collections import defaultdict

p = argparse.ArgumentParser()
p.add_argument("runs")
p.add_argument("--min-runs", type=int, default=1)
args = p.parse_args()

groups = defaultdict(list)
with open(args.runs) as f:
    for line in f:
        if line.strip():
            r = json.loads(line)
            groups[(r["ranks"], r["mode"], r["label"])].append(r)

errors = []
digests = defaultdict(set)
for (n, mode, label), runs in groups.items():
    for r in runs:
        digests[(n, mode)].add(r["sha256"])
    if len(runs) < args.min_runs:
        errors.append("%s, %d ranks, %s: %d runs, want %d" % (label, n, mode, len(runs), args.min_runs))
for (n, mode), d in digests.items():
    if len(d) != 1:
        errors.append("%d ranks, %s: the runs' spikes differ (%d different sha256)" % (n, mode, len(d)))


def med(runs, key, how):
    return statistics.median(how(r[key]) for r in runs)


def mean(v):
    return sum(v) / len(v)


def figures(runs):
    return {
        "psolve": med(runs, "psolve_s", max),
        "wait": med(runs, "wait_s", mean),
        "step": med(runs, "step_s", mean),
        "hwm": [statistics.median(r["vm_hwm_kb"][k] for r in runs) / 1024 for k in range(runs[0]["ranks"])],
    }


order = {"mpi": 0}
print(
    "| ranks | mode | path | runs | psolve s | ×MPI | psolve ×MPI paired by round | wait_time s | ×MPI "
    "| step_time s | ×MPI | VmHWM per rank, MB |"
)
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for n, mode, label in sorted(groups, key=lambda k: (k[0], k[1], order.get(k[2], 1), k[2])):
    runs = groups[(n, mode, label)]
    f = figures(runs)
    ref = figures(groups[(n, mode, "mpi")]) if (n, mode, "mpi") in groups else None

    paired = ""
    if label != "mpi" and (n, mode, "mpi") in groups:
        pr = [max(a["psolve_s"]) / max(b["psolve_s"]) for a, b in zip(runs, groups[(n, mode, "mpi")])]
        paired = "%.3f (%.2f-%.2f)" % (statistics.median(pr), min(pr), max(pr))

    def ratio(key):
        if ref is None or label == "mpi" or ref[key] == 0:
            return ""
        return "%.3f" % (f[key] / ref[key])

    print(
        "| %d | %s | %s | %d | %.3f | %s | %s | %.3f | %s | %.3f | %s | %s |"
        % (n, mode, label, len(runs), f["psolve"], ratio("psolve"), paired, f["wait"], ratio("wait"), f["step"],
           ratio("step"), " ".join("%.1f" % x for x in f["hwm"]))
    )
any_run = next(iter(groups.values()))[0]
print()
print("(%d cells, tstop %g ms, %d spikes; medians over the runs)" % (any_run["ncell"], any_run["tstop"], any_run["nspikes"]))
for e in errors:
    print("bench/neuron/table.py: %s" % e, file=sys.stderr)
sys.exit(1 if errors else 0)
