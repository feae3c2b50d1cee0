"""Whole CP-ALS fits of a prepared tensor in one process: their spread within the process.

    python benchmarks/experiments/bench_als_processes.py --device gpu --label new
    # two versions side by side: run it in turn with PYTHONPATH naming each source tree

The tensor is the synthetic NELL-2-shaped one of ``benchmarks/synth.py`` (Zipf(1.2)
coordinates); one fit of 2 iterations prepares it and builds the programs, then ``--fits``
fits of ``--iters`` iterations (``tol=0``, the same start) are timed.  Printed: the minimum,
median and maximum milliseconds.  Running the script several times, alternating versions,
shows the spread between processes, which on the GPU hosts measured was larger than the
spread within one process.
"""
import argparse
import os
import sys
import time

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))

from benchmarks.synth import synthetic_tensor  # noqa: E402
from sktensor_fast import CPALS  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="gpu")
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    p.add_argument("--nnz", type=float, default=76_879_419)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--fits", type=int, default=12)
    p.add_argument("--label", default="")
    args = p.parse_args(argv)
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
    kw = dict(rank=args.rank, tol=0, random_state=0, device=args.device)
    CPALS(max_iter=2, **kw).fit(X)
    ts = []
    for _ in range(args.fits):
        t = time.perf_counter()
        CPALS(max_iter=args.iters, **kw).fit(X)
        ts.append(time.perf_counter() - t)
    ts = np.array(ts) * 1e3
    print(f"{args.label} min {ts.min():.1f} median {np.median(ts):.1f} max {ts.max():.1f} ms",
          flush=True)
    return ts


if __name__ == "__main__":
    main()
