"""MTTKRP and one CP-ALS iteration versus threads and nonzeros (CPU backend).

    python benchmarks/bench_mttkrp.py                   # 1M, 5M, 20M nonzeros, R=16
    python benchmarks/bench_mttkrp.py --nnz 1e6 --rank 16 --threads 1 2 --out bench_out/mttkrp.json

Prints a table and writes JSON (machine, threads, versions, timings).
"""
import argparse
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sktensor_fast  # noqa: E402
from sktensor_fast import CPALS, num_threads  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402
from benchmarks.common import cpu_model, best_of, write_report  # noqa: E402
from benchmarks.synth import synthetic_tensor  # noqa: E402



def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nnz", type=float, nargs="+", default=[1e6, 5e6, 20e6])
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818],
                   help="tensor shape (default: NELL-2's)")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--threads", type=int, nargs="+", default=None)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default="bench_out/mttkrp.json")
    args = p.parse_args(argv)
    threads = args.threads or sorted({1, os.cpu_count() or 1})
    be = get_backend("cpu")
    rows = []
    for nnz in args.nnz:
        X = synthetic_tensor(tuple(args.shape), int(nnz), seed=0)
        t0 = time.perf_counter()
        T = be.prepare(X)
        t_format = time.perf_counter() - t0
        rng = np.random.default_rng(0)
        factors = [rng.random((s, args.rank)) for s in X.shape]
        for th in threads:
            with num_threads(th):
                per_mode = [best_of(lambda m=m: be.mttkrp(T, factors, m), args.repeat)
                            for m in range(X.ndim)]
                est = CPALS(rank=args.rank, max_iter=3, tol=0, random_state=0)
                t = time.perf_counter()
                est.fit(X)
                t_fit = (time.perf_counter() - t) / est.n_iter_
            rows.append({"nnz": X.nnz, "threads": th, "rank": args.rank, "format": T.name,
                         "mttkrp_s_per_mode": per_mode, "mttkrp_s_total": sum(per_mode),
                         "cpals_s_per_iter_incl_setup": t_fit, "format_s": t_format})
            print(f"nnz={X.nnz:>10,} {T.name} threads={th} R={args.rank}: MTTKRP "
                  + " ".join(f"{x * 1e3:8.1f}" for x in per_mode)
                  + f" ms/mode | CP-ALS {t_fit * 1e3:8.1f} ms/iter (3 iters, setup included)",
                  flush=True)
    report = {"benchmark": "mttkrp_cpals", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(),
              "shape": args.shape, "config": sktensor_fast.get_config(), "rows": rows}
    write_report(report, args.out)


if __name__ == "__main__":
    main()
