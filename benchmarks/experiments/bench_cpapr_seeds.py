"""CPAPR on the embedded flights-routes data: every solver, ranks and seeds, one thread.

    python benchmarks/experiments/bench_cpapr_seeds.py                       # mu/pdnr/pqnr x 2,5,10 x 0-4
    python benchmarks/experiments/bench_cpapr_seeds.py --max-iter 10 --eps-div-zero 1e-10

Prints, per solver and rank, the final log-likelihood / outer iterations / seconds of every
seed, and how many fits ended with the model exactly zero at a nonzero (log-likelihood −inf).
``--eps-div-zero 1e-10`` uses the Tensor Toolbox's guard instead of the default one.
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from sktensor_fast import CPAPR, num_threads  # noqa: E402
from sktensor_fast.datasets import load_flights_routes  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--solvers", nargs="+", default=["mu", "pdnr", "pqnr"])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 5, 10])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--max-iter", type=int, default=1000)
    ap.add_argument("--eps-div-zero", type=float, default=None)
    args = ap.parse_args(argv)
    X = load_flights_routes().tensor
    n_inf = 0
    print("| solver | rank | " + " | ".join(f"seed {s}" for s in args.seeds) + " |")
    print("|---|---|" + "---|" * len(args.seeds))
    with num_threads(1):
        for solver in args.solvers:
            for rank in args.ranks:
                cells = []
                for seed in args.seeds:
                    t = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        m = CPAPR(rank, solver=solver, random_state=seed,
                                  max_iter=args.max_iter,
                                  eps_div_zero=args.eps_div_zero).fit(X)
                    n_inf += not np.isfinite(m.log_likelihood_)
                    cells.append(f"{m.log_likelihood_:.6g} / {m.n_iter_} / "
                                 f"{time.perf_counter() - t:.1f}s")
                print(f"| {solver} | {rank} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n{n_inf} of {len(args.solvers) * len(args.ranks) * len(args.seeds)} fits end "
          f"with log-likelihood -inf")
    return n_inf


if __name__ == "__main__":
    main()
