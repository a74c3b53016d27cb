"""Runs the real neurodamus under mpirun and finalises MPI, for ci/neurodamus.sh.

Usage:
  nd_run.py cli CONFIG [NEURODAMUS OPTIONS...]
      neurodamus' own entry point (as `neurodamus CONFIG OPTIONS...`), then MPI_Finalize.
  nd_run.py simulate CONFIG LB_MODE RESULT.json [SPIKE_COMPRESS]
      Builds and runs the simulation through neurodamus' Python API (as its tests/unit-mpi
      tests do) with --lb-mode=LB_MODE, and writes on rank 0 RESULT.json: the ranks, the gids
      each rank instantiated per population (raw, as in the allocation file), every spike
      (population, gid, time in ms), every cell's soma voltage (mV, every dt) and each
      rank's VmRSS and VmHWM (KB) at the end of the run.
      SPIKE_COMPRESS ("NSPIKE,GID_COMPRESS,XCHNG_METH", e.g. "0,0,1" for multisend): the
      pc.spike_compress arguments, given to neurodamus' own _finalize_model(spike_compress=...)
      (the option sim_init passes on), which applies them between setup_transfer and stdinit.
      The constructor calls it without options, so it is wrapped here; and neurodamus 4.2.9
      replaces any such option by plain all-gather under --lb-mode=Memory (node.py,
      _finalize_model), so for that one call its load-balance mode is shown as unset.

Why a script and not the `neurodamus` command: the command never calls MPI_Finalize, so
mpirun reports its ranks as failed and exits 1; and without libsonatareport neurodamus
writes no out.h5, so spikes are read from its spike vectors here. ci/neurodamus.sh sets
NEURON_INIT_MPI=1: neurodamus sets it itself before importing NEURON, but NEURON imported
first without it has no MPI, and every rank silently runs the whole model.
"""

import json
import os
import sys


def finalize(code):
    """MPI_Finalize (NEURON initialised MPI; mpi4py finalises the same library), then exit."""
    from mpi4py import MPI

    sys.stdout.flush()
    sys.stderr.flush()
    if MPI.Is_initialized() and not MPI.Is_finalized():
        MPI.COMM_WORLD.Barrier()
        MPI.Finalize()
    os._exit(code)


def cli(argv):
    from neurodamus.commands import neurodamus

    sys.argv = ["neurodamus", *argv]
    return neurodamus(argv)


def vm_status():
    """This process's VmRSS and VmHWM (KB, /proc/self/status) after the run."""
    vm = {}
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                vm[{"VmRSS": "vm_rss_kb", "VmHWM": "vm_hwm_kb"}[key]] = int(value.split()[0])
    return vm


def force_spike_compress(spike_compress):
    """Makes neurodamus' _finalize_model (called by the Neurodamus constructor) apply
    pc.spike_compress(*spike_compress), past its Memory-mode override."""
    from neurodamus.core.configuration import SimConfig
    from neurodamus.node import Node

    original = Node._finalize_model

    def finalize_model(self, spike_compress_default=3):
        saved = SimConfig.loadbal_mode
        SimConfig.loadbal_mode = None
        try:
            return original(self, spike_compress=spike_compress)
        finally:
            SimConfig.loadbal_mode = saved

    Node._finalize_model = finalize_model


def simulate(config, lb_mode, result_path, spike_compress=None):
    from mpi4py import MPI

    from neurodamus import Neurodamus
    from neurodamus.core import NeuronWrapper as Nd

    comm = MPI.COMM_WORLD
    if spike_compress is not None:
        force_spike_compress(spike_compress)
    out_dir = os.path.join(os.path.dirname(os.path.abspath(result_path)), "output")
    nd = Neurodamus(config, lb_mode=lb_mode, output_path=out_dir)
    local = {}
    traces = {}
    for manager in nd.circuits.all_node_managers():
        pop = manager.population_name
        if pop is None:
            continue
        raw = [int(g) for g in manager.local_nodes.gids(raw_gids=True)]
        final = [int(g) for g in manager.get_final_gids()]
        local[pop] = sorted(raw)
        for raw_gid, gid in zip(raw, final, strict=True):
            vec = Nd.Vector()
            vec.record(manager.get_cell(gid)._cellref.soma[0](0.5)._ref_v)
            traces[f"{pop}:{raw_gid}"] = vec
    Nd.finitialize()
    nd.run(cleanup=False)

    spikes = []
    for (pop, offset), (times, ids) in zip(nd._spike_populations, nd._spike_vecs, strict=True):
        for t, gid in zip(times, ids, strict=True):
            spikes.append([pop or "All", int(gid) - int(offset or 0), float(t)])
    mine = {
        "rank": comm.Get_rank(),
        "vm": vm_status(),
        "gids": local,
        "spikes": spikes,
        "traces": {k: list(v) for k, v in traces.items()},
    }
    everything = comm.gather(mine, root=0)
    if comm.Get_rank() == 0:
        everything.sort(key=lambda r: r["rank"])
        result = {
            "lb_mode": lb_mode,
            "ranks": comm.Get_size(),
            "gids_per_rank": [r["gids"] for r in everything],
            "spikes": sorted(s for r in everything for s in r["spikes"]),
            "traces": {k: v for r in everything for k, v in r["traces"].items()},
            "vm_per_rank": [r["vm"] for r in everything],
        }
        tmp = result_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f)
        os.replace(tmp, result_path)
    return 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "cli":
        code = cli(sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "simulate":
        code = simulate(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 6 and sys.argv[1] == "simulate":
        code = simulate(sys.argv[2], sys.argv[3], sys.argv[4], tuple(int(x) for x in sys.argv[5].split(",")))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    finalize(code or 0)


if __name__ == "__main__":
    main()
