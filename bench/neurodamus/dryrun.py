#!/usr/bin/env python3
"""neurodamus' own dry-run distribution, timed: read cell_memory_usage.json, balance, write
allocation_r{R}_c{C}.pkl.gz, with the functions of neurodamus/utils/memory.py.

Usage: dryrun.py MEMORY_PY JSON RANKS CYCLES OUTPUT_DIR

MEMORY_PY is neurodamus' own utils/memory.py (e.g. the copy in
../shared/data/neurodamus-tests/neurodamus). It is loaded as neurodamus.utils.memory with
the few neurodamus modules it imports stubbed (NEURON and MPI are not needed on one rank):
run_only_rank0 runs the function, MPI is one rank, Vector is neurodamus' compat Vector
(an array('I')). Needs numpy and psutil. Prints one line:
    read WALL CPU balance WALL CPU write WALL CPU maxrss KB
"""
import array
import enum
import importlib.util
import os
import resource
import sys
import time
import types


def stub_modules():
    nd = types.ModuleType("neurodamus")
    nd.__path__ = []
    core = types.ModuleType("neurodamus.core")

    class _PC:
        @staticmethod
        def allreduce(value, _op):
            return value

    class MPI:
        pc = _PC()
        size = 1
        rank = 0
        MIN, MAX, SUM = 0, 1, 2

    core.MPI = MPI
    core.NeuronWrapper = None
    core.run_only_rank0 = lambda f: f
    io = types.ModuleType("neurodamus.io")
    io.__path__ = []
    sonata_config = types.ModuleType("neurodamus.io.sonata_config")

    class ConnectionTypes(str, enum.Enum):
        Synaptic = "Synaptic"
        GapJunction = "GapJunction"

    sonata_config.ConnectionTypes = ConnectionTypes
    utils = types.ModuleType("neurodamus.utils")
    utils.__path__ = []
    compat = types.ModuleType("neurodamus.utils.compat")

    class Vector(array.array):
        """neurodamus' compat Vector: an array of unsigned ints that behaves like a HOC Vector."""

        __slots__ = ()

        def __new__(cls, type_="I", values=None):
            return super().__new__(cls, type_, values if values is not None else [])

        def size(self):
            return len(self)

    # Pickled by reference, as neurodamus' own class is.
    Vector.__module__, Vector.__qualname__ = compat.__name__, "Vector"
    compat.Vector = Vector
    for name, mod in [
        ("neurodamus", nd),
        ("neurodamus.core", core),
        ("neurodamus.io", io),
        ("neurodamus.io.sonata_config", sonata_config),
        ("neurodamus.utils", utils),
        ("neurodamus.utils.compat", compat),
    ]:
        sys.modules[name] = mod


def main():
    memory_py, path, ranks, cycles, out = sys.argv[1:6]
    ranks, cycles = int(ranks), int(cycles)
    path = os.path.abspath(path)
    stub_modules()
    spec = importlib.util.spec_from_file_location("neurodamus.utils.memory", memory_py)
    memory = importlib.util.module_from_spec(spec)
    sys.modules["neurodamus.utils.memory"] = memory
    spec.loader.exec_module(memory)
    os.chdir(out)

    clock = lambda: (time.perf_counter(), time.process_time())
    t0 = clock()
    stats = memory.DryRunStats()
    stats.cell_memory_usage = memory.CellMemoryUsage.from_json(path)
    t1 = clock()
    # distribute_cells_with_validation balances, then writes the file with
    # export_allocation_stats: time that call on its own.
    write = [0.0, 0.0]
    export = memory.export_allocation_stats

    def timed_export(*args, **kwargs):
        a = clock()
        export(*args, **kwargs)
        b = clock()
        write[0], write[1] = b[0] - a[0], b[1] - a[1]

    memory.export_allocation_stats = timed_export
    stats.distribute_cells_with_validation(ranks, cycles)
    t2 = clock()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        "read %.4f %.4f balance %.4f %.4f write %.4f %.4f maxrss %d"
        % (
            t1[0] - t0[0],
            t1[1] - t0[1],
            t2[0] - t1[0] - write[0],
            t2[1] - t1[1] - write[1],
            write[0],
            write[1],
            maxrss,
        )
    )


if __name__ == "__main__":
    main()
