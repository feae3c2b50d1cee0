"""cProfile of one fit of a prepared tensor on a device (where the host's time goes).

    python benchmarks/experiments/prof_fit.py --device gpu --nnz 2e7 --algo cpals --iters 10
    # each process its share, one device each (process 0 generates and scatters the tensor):
    mpiexec -n 2 python benchmarks/experiments/prof_fit.py --mpi --device gpu --nnz 76879419

``--algo gcp``: GCP with the Poisson loss and its default solver (Adam), ``--iters`` epochs.
``--mpi``: under ``mpiexec``, a distributed fit; every process prints its seconds per
iteration (difference of a fit of ``--iters`` + 2 and one of 2, best of 3) and process 0 (or
``--profile-rank``) its profile, with the callers of PyOpenCL's transfers.
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
import functools  # noqa: E402

from sktensor_fast import CPALS, CPAPR, GCP  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="gpu")
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    p.add_argument("--nnz", type=float, default=2e7)
    p.add_argument("--algo", choices=("cpals", "cpapr", "gcp"), default="cpals")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--lines", type=int, default=35)
    p.add_argument("--mpi", action="store_true",
                   help="a distributed fit over the processes of mpiexec")
    p.add_argument("--profile-rank", type=int, default=0,
                   help="with --mpi: the process whose profile is printed")
    p.add_argument("--callees", default=None,
                   help="also print what the functions matching this pattern call")
    args = p.parse_args(argv)
    comm = None
    if args.mpi:
        from mpi4py import MPI
        from sktensor_fast.distributed import scatter
        comm = MPI.COMM_WORLD
    root = comm is None or comm.rank == 0
    shown = comm is None or comm.rank == args.profile_rank
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0) if root else None
    if comm is not None:
        X = scatter(X)
    Est = {"cpals": CPALS, "cpapr": CPAPR,
           "gcp": functools.partial(GCP, loss="poisson")}[args.algo]

    def fit(n):
        if comm is not None:
            comm.Barrier()
        t = time.perf_counter()
        Est(rank=16, max_iter=n, tol=0, random_state=0, device=args.device).fit(X)
        if comm is not None:
            comm.Barrier()
        return time.perf_counter() - t

    fit(2)  # prepares
    if comm is None:
        for _ in range(2):
            print(f"fit {fit(args.iters):.4f} s", flush=True)
    else:
        short = min(fit(2) for _ in range(3))
        long = min(fit(args.iters + 2) for _ in range(3))
        print(f"process {comm.rank}: {(long - short) / args.iters * 1e3:.3f} ms per iteration",
              flush=True)
    pr = cProfile.Profile()
    pr.enable()
    fit(args.iters)
    pr.disable()
    if not shown:
        return
    for key in ("tottime", "cumtime"):
        s = io.StringIO()
        stats = pstats.Stats(pr, stream=s).sort_stats(key)
        stats.print_stats(args.lines)
        if key == "cumtime" and comm is not None:
            stats.print_callers("enqueue_copy|enqueue_fill")
        if key == "cumtime" and args.callees:
            stats.print_callees(args.callees)
        print(s.getvalue())


if __name__ == "__main__":
    main()
