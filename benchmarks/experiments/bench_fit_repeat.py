"""First and repeated calls in one process: ``prepare`` and whole fits on a device.

A user's first call in a fresh process pays for building the OpenCL programs (PyOpenCL keeps
the binaries in its cache, so a second process pays less) and for the backend's staging
buffers; later calls do not.  This script times, in one process: the backend's creation, the
first ``prepare`` of a NELL-2-shaped tensor (``e2e.nell2_arrays``) and of a second tensor of
the same size, then ``--repeat`` whole fits of ``--algo`` on the first tensor (the first fit
reuses its prepared copy and builds the fit's own programs).  Run it twice to see the program
cache at work.

    python benchmarks/experiments/bench_fit_repeat.py --device gpu --nnz 76879419 --repeat 4
    python benchmarks/experiments/bench_fit_repeat.py --device gpu --nnz 2000000 --repeat 0   # prepare only
"""
import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.e2e import nell2_arrays  # noqa: E402
from benchmarks.synth import FROSTT  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="gpu")
    p.add_argument("--nnz", type=float, default=2e6)
    p.add_argument("--algo", choices=("cpapr", "cpals"), default="cpapr")
    p.add_argument("--repeat", type=int, default=4)
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    from sktensor_fast import CPALS, CPAPR, SparseTensor
    from sktensor_fast.backends import get_backend
    shape = FROSTT["nell2"][0]
    tensors = []
    for seed in (0, 1):
        subs, vals = nell2_arrays(int(args.nnz), seed=seed)[:2]
        X = SparseTensor(subs, vals.astype(np.float64), shape)
        X.norm()                       # the value statistics, kept with X, outside the timing
        tensors.append(X)
        del subs, vals
    t = time.perf_counter()
    be = get_backend(args.device)
    t_be = time.perf_counter() - t
    sync = getattr(be, "queue", None)
    preps = []
    for X in tensors:
        t = time.perf_counter()
        be.prepare(X)
        if sync is not None:
            sync.finish()
        preps.append(time.perf_counter() - t)
    print(f"{args.device}, {int(args.nnz):,} nonzeros: backend {t_be:.3f} s; first prepare "
          f"{preps[0]:.3f} s, a second tensor's {preps[1]:.3f} s", flush=True)
    del tensors[1]
    Est = CPAPR if args.algo == "cpapr" else CPALS
    kw = dict(max_iter=5) if args.algo == "cpapr" else dict(max_iter=10)
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        Est(rank=16, tol=0, device=args.device, random_state=0, **kw).fit(tensors[0])
        if sync is not None:
            sync.finish()
        times.append(time.perf_counter() - t)
    if times:
        print(f"{args.algo} fits ({kw['max_iter']} iterations, rank 16), first then later: "
              + " / ".join(f"{x:.3f}" for x in times) + f" s; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
