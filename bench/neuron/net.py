"""The network of bench/neuron_exchange.sh: NCELL ball-and-stick cells (hh soma, passive
dendrite; NEURON's own mechanisms, no nrnivmodl), gids dealt round robin (gid % nhost ==
rank). Each cell is driven by its own NetStim (regular, no noise: start gid % 37 ms,
interval 40 + gid % 60 ms; about 15 Hz per cell) and reaches FANOUT other cells chosen
with a generator seeded by its gid (the same on every rank), with delays of 1, 1.5, 2 and
3 ms and a subthreshold weight: the spikes cross ranks as in a real network, and the
firing does not depend on the rank count.

Writes one JSON line per run to OUT (rank 0): the wall time of pc.psolve, NEURON's
pc.wait_time() (the spike exchange, waiting included), pc.step_time() and pc.send_time(),
and VmHWM (kB, /proc/self/status after psolve), each per rank; the spike count and the
sha256 of the spikes sorted by (time, gid), to compare the runs.

Usage: python net.py OUT MODE [--ncell N] [--tstop MS] [--fanout K] [--label TEXT]
MODE: allgather | compressed | multisend1 (pc.spike_compress(0, 0, 1)).
Run under mpirun with NEURON_INIT_MPI=1.
"""

import argparse
import hashlib
import json
import random
import time

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("mode", choices=["allgather", "compressed", "multisend1"])
p.add_argument("--ncell", type=int, default=2000)
p.add_argument("--tstop", type=float, default=1000.0)
p.add_argument("--fanout", type=int, default=10)
p.add_argument("--label", default="")
args = p.parse_args()

from neuron import h  # noqa: E402

h.load_file("stdrun.hoc")
pc = h.ParallelContext()
rank, nhost = int(pc.id()), int(pc.nhost())
DELAYS = [1.0, 1.5, 2.0, 3.0]


class BallStick:
    def __init__(self, gid):
        self.soma = h.Section(name="soma", cell=self)
        self.dend = h.Section(name="dend", cell=self)
        self.dend.connect(self.soma(1))
        self.soma.L = self.soma.diam = 12.6157
        self.dend.L, self.dend.diam, self.dend.nseg = 200, 1, 3
        for s in (self.soma, self.dend):
            s.Ra, s.cm = 100, 1
        self.soma.insert("hh")
        self.dend.insert("pas")
        for seg in self.dend:
            seg.pas.g, seg.pas.e = 0.001, -65
        self.syn = h.ExpSyn(self.dend(0.5))
        self.syn.tau = 2
        nc = h.NetCon(self.soma(0.5)._ref_v, None, sec=self.soma)
        nc.threshold = 10
        pc.set_gid2node(gid, rank)
        pc.cell(gid, nc)
        self.stim = h.NetStim()
        self.stim.number, self.stim.start = 1e9, gid % 37
        self.stim.interval, self.stim.noise = 40 + gid % 60, 0
        self.stim_nc = h.NetCon(self.stim, self.syn)
        self.stim_nc.delay, self.stim_nc.weight[0] = 1, 0.05


def targets(gid):
    rng = random.Random(gid)
    out = set()
    while len(out) < min(args.fanout, args.ncell - 1):
        t = rng.randrange(args.ncell)
        if t != gid:
            out.add(t)
    return sorted(out)


cells = {gid: BallStick(gid) for gid in range(rank, args.ncell, nhost)}
ncs = []
for src in range(args.ncell):
    for k, tgt in enumerate(targets(src)):
        if tgt in cells:
            nc = pc.gid_connect(src, cells[tgt].syn)
            nc.delay, nc.weight[0] = DELAYS[(src + k) % 4], 0.0005
            ncs.append(nc)

if args.mode == "compressed":
    pc.spike_compress(4, 1)
elif args.mode == "multisend1":
    pc.spike_compress(0, 0, 1)

tvec, idvec = h.Vector(), h.Vector()
pc.spike_record(-1, tvec, idvec)
pc.set_maxstep(10)
h.dt = 0.025
h.cvode.cache_efficient(1)
h.finitialize(-65)
pc.barrier()
t0 = time.perf_counter()
pc.psolve(args.tstop)
wall = time.perf_counter() - t0


def vm_hwm_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


mine = {
    "psolve_s": wall,
    "wait_s": pc.wait_time(),
    "step_s": pc.step_time(),
    "send_s": pc.send_time(),
    "vm_hwm_kb": vm_hwm_kb(),
    "spikes": [(t, int(g)) for t, g in zip(tvec, idvec)],
}
every = pc.py_gather(mine, 0)
if rank == 0:
    spikes = sorted(s for part in every for s in part["spikes"])
    digest = hashlib.sha256("".join("%.17g %d\n" % s for s in spikes).encode()).hexdigest()
    row = {
        "label": args.label,
        "mode": args.mode,
        "ranks": nhost,
        "ncell": args.ncell,
        "tstop": args.tstop,
        "nspikes": len(spikes),
        "sha256": digest,
    }
    for k in ("psolve_s", "wait_s", "step_s", "send_s", "vm_hwm_kb"):
        row[k] = [part[k] for part in every]
    with open(args.out, "a") as f:
        f.write(json.dumps(row) + "\n")
pc.barrier()
pc.done()
h.quit()
