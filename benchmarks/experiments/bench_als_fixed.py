"""CP-ALS time per iteration on a small real tensor: sktensor_fast (every CPU format) and pygenten.

On flights-routes (15,188 nonzeros) an iteration is a few milliseconds and the fixed costs
(Python calls, the R x R algebra, thread start-up) weigh as much as the kernels.  Time per
iteration is ``(t(k) - t(1)) / (k - 1)`` from the same start (setup cancels), the best of
``--repeat`` rounds; pygenten runs in a subprocess with ``OMP_NUM_THREADS`` set (as in the fits
section of ``benchmarks/run.py``).

    python benchmarks/experiments/bench_als_fixed.py --threads 1 2 --iters 50 --repeat 3
"""
import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import peers  # noqa: E402
from benchmarks.common import cpu_model  # noqa: E402
from sktensor_fast.backends import FORMATS  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "flights-routes" / "tensor.tns.gz"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_limits
    from sktensor_fast import load_tns
    from sktensor_fast.datasets import load_flights_routes
    X = load_tns(DATA) if DATA.exists() else load_flights_routes(return_X_labels=True)[0]
    rng = np.random.default_rng(0)
    init = [rng.random((s, args.rank)) for s in X.shape]
    k = args.iters
    rows = []
    print(f"flights-routes {X.shape}, {X.nnz} nonzeros, rank {args.rank}, {k} iterations; "
          f"{cpu_model()}, load average {os.getloadavg()[0]:.2f}")
    for th in args.threads:
        with threadpool_limits(limits=th):
            for fmt in [f for f in FORMATS if f != "auto"]:
                peers.als_ours(X, init, 1, th, fmt=fmt)          # warm-up
                best = np.inf
                for _ in range(args.repeat):
                    long = peers.als_ours(X, init, k, th, fmt=fmt)["seconds"]
                    short = peers.als_ours(X, init, 1, th, fmt=fmt)["seconds"]
                    best = min(best, (long - short) / (k - 1))
                rows.append({"library": "sktensor_fast", "variant": fmt, "threads": th,
                             "s_per_iter": best})
            ok, why = peers.available("pygenten")
            if ok:
                best = np.inf
                for _ in range(args.repeat):
                    res = peers.genten("cp_als", X, init, [1, k, 1], th)
                    if isinstance(res, dict):
                        rows.append({"library": "pygenten", "threads": th, "error": res["error"]})
                        break
                    best = min(best, (res[1]["seconds"] - res[2]["seconds"]) / (k - 1))
                else:
                    rows.append({"library": "pygenten", "variant": "cp_als", "threads": th,
                                 "s_per_iter": best})
            else:
                rows.append({"library": "pygenten", "threads": th, "error": why})
    for th in args.threads:
        ref = [r["s_per_iter"] for r in rows if r["library"] == "pygenten" and r["threads"] == th
               and "s_per_iter" in r]
        for r in rows:
            if r["threads"] == th and "s_per_iter" in r:
                r["vs_pygenten"] = r["s_per_iter"] / ref[0] if ref else None
    print("| library | variant | threads | ms / iter | / pygenten |\n|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['library']} | – | {r['threads']} | {r['error']} | |")
        else:
            vs = r.get("vs_pygenten")
            print(f"| {r['library']} | {r['variant']} | {r['threads']} | "
                  f"{1e3 * r['s_per_iter']:.3f} | {'' if vs is None else f'{vs:.2f}'} |")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
