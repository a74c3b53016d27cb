"""Checks one run of ci/neuron/ring.py over the Ballast shims (ci/neuron.sh), on NEURON or
(--simulator coreneuron) CoreNEURON:
- its spikes (sorted by time, gid) are byte-identical to the wheel's own MPI run of the same
  mode and rank count, and to the serial run when the wheel's own run is;
- its reports (BALLAST_REPORT_DIR, one neuron_rank{R}.json per rank) show the spikes went
  over Ballast on the path asked for (SIMULATOR_rank{R}.json): the transport asked for (--transport, default
  "mpi"), and over mpi mpi_native as asked; in the allgather
  modes (allgather, compressed) spike_exchanges > 0 and the same on every rank, the spikes sent add up to
  the serial run's, and the spikes received to (ranks - 1) times that; in the multisend modes
  the messages sent add up to those received, > 0; each rank received what the serial spikes
  and the connectivity give (each spike once on every other rank that holds a target of its
  gid, gid % ranks), and, without phase 2 (xchng_meth 1 and 1|4), sent what they give (each
  spike to each such rank); with phase 2 on 5 or more ranks, the ranks' sends must differ
  from phase 1's (the relays ran).
With one rank there is no exchange to check: only the spikes and the report's presence.
Exits 1 with the failed checks printed. `--self-test` runs the checks on corrupted copies
and fails unless every corruption is caught.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

ALLGATHER = ("allgather", "compressed")


SIMULATOR = "neuron"


def load_reports(d, ranks):
    reps = []
    for r in range(ranks):
        p = os.path.join(d, "%s_rank%d.json" % (SIMULATOR, r))
        if not os.path.isfile(p):
            return None, "no report %s" % p
        with open(p) as f:
            reps.append(json.load(f))
    return reps, None


def expected_multisend(serial, ranks):
    """Per rank, the spike messages multisend's phase 1 sends (a spike to each other rank that
    holds a target of its gid) and receives (each such rank receives the spike once, in
    phase 2 too); and the number of spikes."""
    with open(serial + ".conn") as f:
        conn = {int(l.split()[0]): [int(x) for x in l.split()[1:]] for l in f}
    with open(serial) as f:
        gids = [int(l.split()[1]) for l in f]
    sent, recv = [0] * ranks, [0] * ranks
    for g in gids:
        hosts = {t % ranks for t in conn[g]} - {g % ranks}
        sent[g % ranks] += len(hosts)
        for h in hosts:
            recv[h] += 1
    return sent, recv, len(gids)


def check(run, wheel, serial, reports, mode, ranks, native, transport="mpi"):
    errs = []
    with open(run, "rb") as f:
        mine = f.read()
    with open(wheel, "rb") as f:
        theirs = f.read()
    with open(serial, "rb") as f:
        ref = f.read()
    if not mine:
        errs.append("%s is empty" % run)
    if mine != theirs:
        errs.append("spikes differ from the wheel's own MPI run (%s vs %s)" % (run, wheel))
    if theirs == ref and mine != ref:
        errs.append("spikes differ from the serial run (%s vs %s)" % (run, serial))
    reps, why = load_reports(reports, ranks)
    if reps is None:
        return errs + [why]
    for r, rep in enumerate(reps):
        if rep.get("simulator") != SIMULATOR or rep.get("rank") != r:
            errs.append("rank %d: simulator/rank fields %r %r" % (r, rep.get("simulator"), rep.get("rank")))
        if rep.get("transport") != transport:
            errs.append("rank %d: transport %r, want %s" % (r, rep.get("transport"), transport))
        if transport == "mpi" and rep.get("mpi_native") is not native:
            errs.append("rank %d: mpi_native %r, want %r" % (r, rep.get("mpi_native"), native))
        for k in ("footprint", "peers_connected", "vm_rss_kb", "vm_hwm_kb", "vm_pin_kb", "bytes_sent", "bytes_received"):
            if k not in rep:
                errs.append("rank %d: no %s" % (r, k))
    if ranks < 2:
        return errs
    want_sent, want_recv, nspikes = expected_multisend(serial, ranks)
    total = lambda k: sum(rep[k] for rep in reps)
    if mode in ALLGATHER:
        for r, rep in enumerate(reps):
            if rep["spike_exchanges"] <= 0:
                errs.append("rank %d: spike_exchanges %d in mode %s" % (r, rep["spike_exchanges"], mode))
        if len({rep["spike_exchanges"] for rep in reps}) != 1:
            errs.append("the ranks made different numbers of exchanges (a collective): %r" % [rep["spike_exchanges"] for rep in reps])
        if total("spikes_sent") != nspikes:
            errs.append("spikes_sent add up to %d, the serial run has %d spikes" % (total("spikes_sent"), nspikes))
        if total("spikes_received") != (ranks - 1) * nspikes:
            errs.append("spikes_received add up to %d, want (ranks - 1) * %d" % (total("spikes_received"), nspikes))
        if total("multisend_sent") != 0:
            errs.append("multisend messages in mode %s" % mode)
    else:
        sent, recv = total("multisend_sent"), total("multisend_received")
        if sent != recv or sent <= 0:
            errs.append("multisend_sent add up to %d, multisend_received to %d" % (sent, recv))
        got_sent = [rep["multisend_sent"] for rep in reps]
        got_recv = [rep["multisend_received"] for rep in reps]
        if got_recv != want_recv:
            errs.append("multisend_received per rank %r, the spikes and connectivity give %r" % (got_recv, want_recv))
        if mode != "multisend9" and got_sent != want_sent:
            errs.append("multisend_sent per rank %r, the spikes and connectivity give %r" % (got_sent, want_sent))
        if mode == "multisend9" and ranks >= 5 and got_sent == want_sent:
            errs.append("multisend_sent per rank %r is phase 1's: phase 2 relayed nothing" % got_sent)
        if total("spikes_received") != recv:
            errs.append("spikes_received %d != multisend_received %d" % (total("spikes_received"), recv))
    return errs


def self_test(args):
    """Every corruption of a passing run must be caught."""
    base = check(args.run, args.wheel, args.serial, args.reports, args.mode, args.ranks, args.native, args.transport)
    if base:
        return ["the self-test needs a passing run: " + "; ".join(base)]
    failures = []
    tmp = tempfile.mkdtemp()
    try:
        def corrupt_spikes():
            p = os.path.join(tmp, "spikes")
            lines = open(args.run).read().splitlines(True)
            lines[len(lines) // 2] = lines[len(lines) // 2].replace(" ", "1 ", 1)
            open(p, "w").writelines(lines)
            return check(p, args.wheel, args.serial, args.reports, args.mode, args.ranks, args.native, args.transport)

        def corrupt_report(key, f):
            d = os.path.join(tmp, "rep-" + key)
            shutil.copytree(args.reports, d)
            p = os.path.join(d, "%s_rank0.json" % SIMULATOR)
            rep = json.load(open(p))
            rep[key] = f(rep[key])
            json.dump(rep, open(p, "w"))
            return check(args.run, args.wheel, args.serial, d, args.mode, args.ranks, args.native, args.transport)

        cases = {"a changed spike": corrupt_spikes, "mpi_native flipped": lambda: corrupt_report("mpi_native", lambda v: not v)}
        if args.ranks >= 2:
            key = "spike_exchanges" if args.mode in ALLGATHER else "multisend_received"
            cases["%s off by one" % key] = lambda: corrupt_report(key, lambda v: v + 1)
            cases["spikes_received off by one"] = lambda: corrupt_report("spikes_received", lambda v: v - 1)
        for name, f in cases.items():
            if not f():
                failures.append("the check missed " + name)
    finally:
        shutil.rmtree(tmp)
    return failures


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--run", required=True)
    p.add_argument("--wheel", required=True)
    p.add_argument("--serial", required=True)
    p.add_argument("--reports", required=True)
    p.add_argument("--mode", required=True)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--native", choices=["on", "off"], required=True)
    p.add_argument("--simulator", choices=["neuron", "coreneuron"], default="neuron")
    p.add_argument("--transport", choices=["mpi", "shm"], default="mpi")
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args()
    global SIMULATOR
    SIMULATOR = args.simulator
    args.native = args.native == "on"
    errs = self_test(args) if args.self_test else check(
        args.run, args.wheel, args.serial, args.reports, args.mode, args.ranks, args.native, args.transport
    )
    for e in errs:
        print("ci/neuron/check.py: %s %s -n %d native=%s: %s" % (SIMULATOR, args.mode, args.ranks, args.native, e), file=sys.stderr)
    sys.exit(1 if errs else 0)


if __name__ == "__main__":
    main()
