"""A network of NEURON's own mechanisms (no nrnivmodl) for ci/neuron.sh: rings of
ball-and-stick cells with hh in the soma and pas in the dendrite, gids dealt round robin
over the ranks (gid % nhost == rank), each cell driving the next cell of its ring and a
cell of the next ring, with delays of 1.0, 1.75, 2.5 and 4.0 ms; a NetStim starts each
ring; the first cell of each ring also reaches every cell of the next ring with weight 0
(communication only: multisend's phase 2). Writes every spike, sorted by (time, gid), one "%.17g %d" line each, to OUT (from
rank 0); the connectivity (each gid's target gids) to OUT.conn.

Usage: python ring.py OUT MODE [--coreneuron] [--nthread N] [--busywait] [--mpi4py]
                      [--tstop MS] [--kill-at MS] [--status FILE]
MODE: allgather | compressed | multisend1 | multisend5 | multisend9 (multisend with
xchng_meth 1, 1|4 and 1|8).
Run under mpirun with NEURON_INIT_MPI=1 (or with --mpi4py, which imports mpi4py first:
MPI at MPI_THREAD_MULTIPLE), or alone for the serial reference.
"""

import argparse
import os
import signal

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("mode", choices=["allgather", "compressed", "multisend1", "multisend5", "multisend9"])
p.add_argument("--coreneuron", action="store_true")
p.add_argument("--nthread", type=int, default=1)
p.add_argument("--busywait", action="store_true")
p.add_argument("--mpi4py", action="store_true")
p.add_argument("--rings", type=int, default=4)
p.add_argument("--cells", type=int, default=10)
p.add_argument("--tstop", type=float, default=200.0)
p.add_argument("--kill-at", type=float, default=None, help="rank 1 kills itself (SIGKILL) at this time, ms")
p.add_argument("--status", default=None, help="rank 0 writes its VmRSS, VmHWM and VmPin lines of /proc/self/status (kB) at the end of psolve to this file")
args = p.parse_args()

if args.mpi4py:
    from mpi4py import MPI  # noqa: F401  (initialises MPI at MPI_THREAD_MULTIPLE first)

from neuron import h

h.load_file("stdrun.hoc")
pc = h.ParallelContext()
rank, nhost = int(pc.id()), int(pc.nhost())

DELAYS = [1.0, 1.75, 2.5, 4.0]
ncell = args.rings * args.cells


class BallStick:
    def __init__(self, gid):
        self.gid = gid
        self.soma = h.Section(name="soma", cell=self)
        self.dend = h.Section(name="dend", cell=self)
        self.dend.connect(self.soma(1))
        self.soma.L = self.soma.diam = 12.6157
        self.dend.L, self.dend.diam, self.dend.nseg = 200, 1, 5
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


def targets(gid):
    """The (target gid, delay, weight) of gid's connections. The first cell of a ring also
    reaches every cell of the next ring with weight 0 (no effect on the cells): a spike with
    targets on 4 or more other ranks, which multisend's phase 2 (xchng_meth | 8) relays."""
    ring, i = divmod(gid, args.cells)
    nxt = ring * args.cells + (i + 1) % args.cells
    other = ((ring + 1) % args.rings) * args.cells + (i * 3 + 1) % args.cells
    t = [(nxt, DELAYS[gid % 4], 0.012), (other, DELAYS[(gid + 1) % 4], 0.004 + 0.0005 * (gid % 3))]
    if i == 0:
        base = ((ring + 1) % args.rings) * args.cells
        t += [(base + k, DELAYS[k % 4], 0.0) for k in range(args.cells) if base + k != other]
    return t


cells = {gid: BallStick(gid) for gid in range(rank, ncell, nhost)}
ncs = []
for src in range(ncell):
    for tgt, delay, w in targets(src):
        if tgt in cells:
            nc = pc.gid_connect(src, cells[tgt].syn)
            nc.delay, nc.weight[0] = delay, w
            ncs.append(nc)
stims = []
for ring in range(args.rings):
    gid = ring * args.cells
    if gid in cells:
        ns = h.NetStim()
        ns.number, ns.start, ns.interval, ns.noise = 3, 1 + ring, 40, 0
        nc = h.NetCon(ns, cells[gid].syn)
        nc.delay, nc.weight[0] = 1, 0.05
        stims.append((ns, nc))

mode = args.mode
if mode == "compressed":
    pc.spike_compress(2, 1)  # fixed-size allgather of 2 spikes per rank, then the overflow
elif mode.startswith("multisend"):
    pc.spike_compress(0, 0, int(mode[len("multisend"):]))
if args.nthread > 1:
    pc.nthread(args.nthread)
if args.busywait:
    pc.thread_busywait(1)

tvec, idvec = h.Vector(), h.Vector()
pc.spike_record(-1, tvec, idvec)
pc.set_maxstep(10)
h.dt = 0.025
if args.coreneuron:
    from neuron import coreneuron

    h.cvode.cache_efficient(1)
    coreneuron.enable = True
    coreneuron.verbose = 0
if args.kill_at is not None and rank == 1:

    def kill_self():
        print("ring.py: rank 1 kills itself (SIGKILL) at t = %g ms" % h.t, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    fih = h.FInitializeHandler(lambda: h.cvode.event(args.kill_at, kill_self))
h.finitialize(-65)
pc.psolve(args.tstop)
if args.status is not None and rank == 0:
    with open("/proc/self/status") as f, open(args.status, "w") as out:
        out.writelines(line for line in f if line.split(":")[0] in ("VmRSS", "VmHWM", "VmPin"))

mine = [(t, int(g)) for t, g in zip(tvec, idvec)]
every = pc.py_gather(mine, 0)
if rank == 0:
    spikes = sorted(s for part in every for s in part)
    with open(args.out, "w") as f:
        for t, g in spikes:
            f.write("%.17g %d\n" % (t, g))
    with open(args.out + ".conn", "w") as f:
        for src in range(ncell):
            f.write("%d %s\n" % (src, " ".join(str(t) for t, _, _ in targets(src))))
    print("ring.py: %d spikes, %d cells, %d ranks, mode %s" % (len(spikes), ncell, nhost, mode))
pc.barrier()
pc.done()
h.quit()
