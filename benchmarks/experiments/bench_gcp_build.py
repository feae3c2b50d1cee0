"""What building the GCP programs costs on an OpenCL device, and a first fit that builds them.

    python benchmarks/experiments/bench_gcp_build.py --device gpu
    PYOPENCL_NO_CACHE=1 CUDA_CACHE_DISABLE=1 python benchmarks/experiments/bench_gcp_build.py \\
        --device gpu --first-fit

Without ``--first-fit``: builds the program of the step's kernels (``gcp.cl``) without a rank
and for ``--rank``, and the program of the kernels that take none (``gcp_setup.cl``), each
``--repeat`` times, with a comment that makes every source new (so no binary comes from a
cache); prints the seconds of each build.  The first build of a process also pays for the
device compiler's start.

With ``--first-fit``: two GCP fits (Poisson loss, one epoch, ``--nnz`` nonzeros of NELL-2's
shape, ``--rank``) in this process, the first building every program it needs; run it in a
fresh process with the binary caches off (PyOpenCL's ``PYOPENCL_NO_CACHE=1``, and on NVIDIA's
driver ``CUDA_CACHE_DISABLE=1``) for what a first fit on a new machine waits for.
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.synth import synthetic_tensor  # noqa: E402
from sktensor_fast import GCP  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402


def builds(device, rank, repeat, nmodes=3):
    """[(program, seconds)] of each build (a new source every time)."""
    from sktensor_fast.backends.opencl import gcp_ops
    from sktensor_fast.backends.opencl.program import build_program
    be = get_backend(device)
    parts = {"step, no rank": lambda: gcp_ops._program_parts(be, np.float64, nmodes),
             f"step, rank {rank}": lambda: gcp_ops._program_parts(be, np.float64, nmodes, rank),
             "set-up": lambda: gcp_ops._setup_program_parts(be, np.float64, nmodes)}
    out = []
    for i in range(repeat):
        for name, get in parts.items():
            _, source, opts = get()
            src = source() + f"\n/* build {i} {time.time()} */\n"
            t = time.perf_counter()
            build_program(be.ctx, src, list(opts), what=name)
            out.append((name, time.perf_counter() - t))
    return out


def first_fits(device, nnz, rank, shape=(12092, 9184, 28818)):
    """Seconds of two one-epoch GCP fits in this process (the first builds the programs)."""
    X = synthetic_tensor(tuple(shape), int(nnz), seed=0)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            t = time.perf_counter()
            GCP(rank, loss="poisson", max_iter=1, tol=0, random_state=0,
                device=device).fit(X)
            out.append(time.perf_counter() - t)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--first-fit", action="store_true")
    ap.add_argument("--nnz", type=float, default=1e6)
    ap.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    a = ap.parse_args(argv)
    if a.first_fit:
        t1, t2 = first_fits(a.device, a.nnz, a.rank, a.shape)
        print(f"first fit {t1:.2f} s, second {t2:.2f} s")
        return {"first_fit_s": t1, "second_fit_s": t2}
    res = builds(a.device, a.rank, a.repeat)
    for name, sec in res:
        print(f"  {name:16s} {sec:7.3f} s")
    return {"builds": res}


if __name__ == "__main__":
    main()
