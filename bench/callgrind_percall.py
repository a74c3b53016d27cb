#!/usr/bin/env python3
"""Per-call instruction counts of functions in callgrind outputs (docs/BENCHMARKS.md,
"Instructions per call of the ping-pongs' hot paths"):

    python3 bench/callgrind_percall.py REGEX callgrind.out.PID...

For every function whose name matches REGEX: the calls made to it (summed over the files,
e.g. the two ranks of an mpirun), the inclusive instructions (Ir) per call, and the same
without the MPI library and libc below it ("own"): callgrind keeps no call context, so
the share of a callee's cost that is MPI's is taken as that callee's average. Built from
the call edges (`calls=` lines), so an inlined function has no row."""
import collections
import re
import sys

MPI = re.compile(r"libmpi|libopen-pal|libopen-rte|openmpi|mca_|libc\.so")


def load(paths):
    calls, incl, selfc = collections.Counter(), collections.Counter(), collections.Counter()
    edges, objs = collections.defaultdict(collections.Counter), {}
    for path in paths:
        names, onames = {}, {}

        def name(s, tbl):
            m = re.match(r"\((\d+)\)(?:\s+(.*))?", s)
            if not m:
                return s
            if m.group(2):
                tbl[m.group(1)] = m.group(2)
            return tbl.get(m.group(1), s)

        fn = cfn = ob = cob = pending = None
        with open(path) as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("ob="):
                    ob = name(line[3:], onames)
                elif line.startswith("cob="):
                    cob = name(line[4:], onames)
                elif line.startswith("fn="):
                    fn, cob = name(line[3:], names), None
                    objs[fn] = ob
                elif line.startswith("cfn="):
                    cfn = name(line[4:], names)
                elif line.startswith("calls="):
                    pending = int(line[6:].split()[0])
                elif line and (line[0].isdigit() or line[0] in "+-*"):
                    parts = line.split()
                    if len(parts) < 2:
                        continue
                    if pending is None:
                        selfc[fn] += int(parts[1])
                        continue
                    if cfn != fn:
                        calls[cfn] += pending
                        incl[cfn] += int(parts[1])
                        edges[fn][cfn] += int(parts[1])
                        if cob:
                            objs.setdefault(cfn, cob)
                    pending, cob = None, None
    return calls, incl, selfc, edges, objs


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: callgrind_percall.py REGEX CALLGRIND_OUT...")
    pat = re.compile(sys.argv[1])
    calls, incl, selfc, edges, objs = load(sys.argv[2:])
    memo = {}

    def own(f, depth=0):
        if f in memo:
            return memo[f]
        if MPI.search(objs.get(f) or "") or f.startswith(("PMPI_", "MPI_", "ompi_", "opal_")):
            memo[f] = 0
            return 0
        memo[f] = incl[f]  # a recursive call counts whole
        if depth > 60:
            return incl[f]
        tot = selfc[f] + sum(v * own(c, depth + 1) / incl[c] for c, v in edges[f].items() if incl[c])
        memo[f] = tot
        return tot

    print(f"{'calls':>9} {'Ir/call':>9} {'own/call':>9}  function")
    for k in sorted(calls, key=lambda k: -incl[k]):
        if pat.search(k) and calls[k]:
            print(f"{calls[k]:>9} {incl[k] / calls[k]:>9.1f} {own(k) / calls[k]:>9.1f}  {k}")


if __name__ == "__main__":
    main()
