"""cProfile of one fit of a prepared tensor on a device (where the host's time goes).

    python benchmarks/experiments/prof_fit.py --device gpu --nnz 2e7 --algo cpals --iters 10

``--algo gcp``: GCP with the Poisson loss and its default solver (Adam), ``--iters`` epochs.
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
    args = p.parse_args(argv)
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
    Est = {"cpals": CPALS, "cpapr": CPAPR,
           "gcp": functools.partial(GCP, loss="poisson")}[args.algo]
    Est(rank=16, max_iter=2, tol=0, random_state=0, device=args.device).fit(X)  # prepares
    for _ in range(2):
        t = time.perf_counter()
        Est(rank=16, max_iter=args.iters, tol=0, random_state=0, device=args.device).fit(X)
        print(f"fit {time.perf_counter() - t:.4f} s", flush=True)
    pr = cProfile.Profile()
    pr.enable()
    Est(rank=16, max_iter=args.iters, tol=0, random_state=0, device=args.device).fit(X)
    pr.disable()
    for key in ("tottime", "cumtime"):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(key).print_stats(args.lines)
        print(s.getvalue())


if __name__ == "__main__":
    main()
