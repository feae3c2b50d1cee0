"""Where ``SparseTensor(subs, vals, shape)`` spends its time, next to NumPy's stable argsort.

NELL-2's shape, distinct nonzeros in random order (``e2e.nell2_arrays``), fp64.  Two
measurements, both against ``np.argsort(lin, kind="stable")`` of the linear index in the same
process:

- **first calls** (``--fresh``, default 3): a fresh Python process per round makes the arrays,
  runs the argsort, then one ``SparseTensor`` call (as ``python -m benchmarks --sections e2e``
  does: a user's first call, every page of the result new to the process);
- **phases**, repeated in one process: the compiled passes of
  :func:`sktensor_fast._native.canonical.canonical_from` one by one (``scan``: check and count;
  ``scatter``, ``buckets``, ``decode``: the three steps of ``sort_into``) at every thread count,
  wall and CPU seconds (CPU: every thread of the process), best and median.

::

    python benchmarks/experiments/bench_construct.py --nnz 5e6 --threads 1 2 --repeat 5 --fresh 3

The load average is printed with every line: the machine may be shared.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

FIRST_CALL = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from benchmarks.e2e import nell2_arrays
from sktensor_fast import SparseTensor, num_threads
subs, vals, shape = nell2_arrays(int(sys.argv[2]))
with num_threads(int(sys.argv[3])):
    lin = (subs[:, 0] * shape[1] + subs[:, 1]) * shape[2] + subs[:, 2]
    t = time.perf_counter(); np.argsort(lin, kind="stable"); ta = time.perf_counter() - t
    del lin
    t = time.perf_counter(); X = SparseTensor(subs, vals, shape); tc = time.perf_counter() - t
print(json.dumps({"argsort": ta, "construct": tc, "ratio": tc / ta,
                  "load": open("/proc/loadavg").read().split()[0]}))
"""


def load():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:      # pragma: no cover - not Linux
        return float("nan")


def phases(subs, vals, shape, nt):
    """Wall and CPU seconds of each compiled pass (the path of coordinates the caller keeps)."""
    from sktensor_fast._native import _construct, canonical
    bits, shifts, masks = canonical._layout(shape)
    n, N = subs.shape
    top = canonical._top_digit(n, sum(bits))
    low = sum(bits) - top
    w0, c0 = time.perf_counter(), time.process_time()
    hist = np.zeros((_construct.num_blocks(n, nt), 1 << top), dtype=np.int64)
    _construct.scan(subs, vals, list(shape), shifts, hist, low, None, nt)
    w1, c1 = time.perf_counter(), time.process_time()
    out_subs = canonical.fresh_array((n, N), np.int64)
    out_vals = canonical.fresh_array(n, vals.dtype)
    res = _construct.sort_into(subs, shifts, vals, hist, low, shifts, masks, out_subs,
                               out_vals, num_threads=nt)
    w2 = time.perf_counter()
    wall = {"scan": w1 - w0, "scatter": res["seconds"][0], "buckets": res["seconds"][1],
            "decode": res["seconds"][2], "total": w2 - w0}
    cpu = {"scan": c1 - c0, "scatter": res["cpu_seconds"][0],
           "buckets": res["cpu_seconds"][1], "decode": res["cpu_seconds"][2]}
    return wall, cpu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nnz", type=float, default=5e6)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=5, help="rounds of the in-process phases")
    ap.add_argument("--fresh", type=int, default=3, help="first calls in fresh processes")
    ap.add_argument("--out", help="JSON file for the results")
    args = ap.parse_args(argv)
    nnz = int(args.nnz)
    sys.path.insert(0, ROOT)
    from benchmarks.e2e import nell2_arrays
    from sktensor_fast import SparseTensor, num_threads

    result = {"nnz": nnz, "threads": args.threads, "first_calls": [], "phases": {}}
    for _ in range(args.fresh):
        for nt in args.threads:
            out = subprocess.run([sys.executable, "-c", FIRST_CALL, ROOT, str(nnz), str(nt)],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout)
            r["threads"] = nt
            result["first_calls"].append(r)
            print(f"first call, {nt} thread(s): SparseTensor {r['construct']:.3f} s, argsort "
                  f"{r['argsort']:.3f} s, ratio {r['ratio']:.3f} (load {r['load']})",
                  flush=True)
    subs, vals, shape = nell2_arrays(nnz)
    lin = (subs[:, 0] * shape[1] + subs[:, 1]) * shape[2] + subs[:, 2]
    rows = {}
    for _ in range(args.repeat):
        t = time.perf_counter()
        np.argsort(lin, kind="stable")
        rows.setdefault("argsort", []).append(time.perf_counter() - t)
        for nt in args.threads:
            with num_threads(nt):
                t = time.perf_counter()
                X = SparseTensor(subs, vals, shape)
                rows.setdefault(f"SparseTensor, {nt} thread(s)", []).append(
                    time.perf_counter() - t)
                del X
            wall, cpu = phases(subs, vals, shape, nt)
            for k, v in wall.items():
                rows.setdefault(f"  {k}, {nt} thread(s), wall", []).append(v)
            for k, v in cpu.items():
                rows.setdefault(f"  {k}, {nt} thread(s), cpu", []).append(v)
        rows.setdefault("load", []).append(load())
    best_sort = min(rows["argsort"])
    print(f"\nin one process, {args.repeat} rounds (best / median ms; best over the best "
          f"argsort), load {min(rows['load']):.2f}-{max(rows['load']):.2f}")
    for k, v in rows.items():
        if k == "load":
            continue
        result["phases"][k] = {"best": min(v), "median": float(np.median(v))}
        print(f"{k:36s} {min(v) * 1e3:8.1f} {np.median(v) * 1e3:8.1f}   "
              f"{min(v) / best_sort:.3f}")
    result["load"] = rows["load"]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
