"""cProfile of a distributed CP-ALS fit on each process's device (where each host's time goes).

    mpiexec -n 2 python benchmarks/experiments/prof_distributed.py --device gpu --nnz 76879419
    python benchmarks/experiments/prof_distributed.py --device gpu --nnz 76879419   # one process

Process 0 generates a NELL-2-shaped tensor (``benchmarks/synth.py``) and scatters it (one
process: the plain fit of the whole tensor).  After a warm-up fit, every process prints the
seconds per iteration of the untimed fits (difference of ``--iters`` + 2 and 2 iterations,
best of 3), then process 0 prints the profile of one fit of ``2 * --iters + 2`` iterations:
the functions by own time, the package's functions by cumulative time, and the callers of
PyOpenCL's transfers.
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.synth import synthetic_tensor  # noqa: E402
from sktensor_fast import CPALS  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="gpu")
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    p.add_argument("--nnz", type=float, default=2e7)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--lines", type=int, default=32)
    args = p.parse_args(argv)
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0) if comm.rank == 0 else None
    if comm.size > 1:
        from sktensor_fast.distributed import scatter
        X = scatter(X)
    params = dict(rank=args.rank, random_state=0, tol=0, device=args.device)
    CPALS(max_iter=3, **params).fit(X)

    def fit(n):
        comm.Barrier()
        t = time.perf_counter()
        CPALS(max_iter=n, **params).fit(X)
        comm.Barrier()
        return time.perf_counter() - t

    short = min(fit(2) for _ in range(3))
    long = min(fit(args.iters + 2) for _ in range(3))
    print(f"process {comm.rank}: {(long - short) / args.iters * 1e3:.3f} ms per iteration",
          flush=True)
    prof = cProfile.Profile()
    prof.enable()
    fit(2 * args.iters + 2)
    prof.disable()
    if comm.rank == 0:
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        stats.sort_stats("tottime").print_stats(args.lines)
        stats.sort_stats("cumulative").print_stats("sktensor_fast", args.lines - 4)
        stats.print_callers("enqueue_copy|enqueue_fill")
        print(out.getvalue())


if __name__ == "__main__":
    main()
