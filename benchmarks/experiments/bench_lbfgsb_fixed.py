"""GCP with the Poisson loss by L-BFGS-B on a small dense tensor: sktensor_fast and pyttb.

The case of the fits section (``benchmarks/run.py``, synthetic-small: 40 x 30 x 20, 4,000
nonzeros, rank 10, the same start, scipy's L-BFGS-B with the same stopping rules in both).
Both libraries take the same steps (the losses agree to rounding), so the time per iteration
compares the cost of an iteration: ``(t(k) - t(1)) / (k - 1)`` from the same start (setup
cancels), the best of ``--repeat`` rounds, the libraries alternating within a round; the whole
fit of ``k`` iterations is reported too (its fixed costs included).

    python benchmarks/experiments/bench_lbfgsb_fixed.py --threads 1 2 --iters 20 --repeat 7
"""
import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import peers  # noqa: E402
from benchmarks.common import cpu_model  # noqa: E402
from benchmarks.synth import synthetic_tensor  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_limits
    warnings.simplefilter("ignore")
    X = synthetic_tensor((40, 30, 20), 4000, seed=0)
    rng = np.random.default_rng(0)
    init = [rng.random((s, args.rank)) for s in X.shape]
    k = args.iters
    libs = {"sktensor_fast": peers.gcp_lbfgsb_ours}
    ok, why = peers.available("pyttb")
    if ok:
        start = peers.gcp_start(init)
        libs["pyttb"] = peers.gcp_lbfgsb_pyttb
    else:
        start = [f.copy() for f in init]
    print(f"synthetic {X.shape}, {X.nnz} nonzeros, rank {args.rank}, {k} iterations; "
          f"{cpu_model()}, load average {os.getloadavg()[0]:.2f}")
    rows = []
    for th in args.threads:
        with threadpool_limits(limits=th):
            best = {name: [np.inf, np.inf, None] for name in libs}
            for name, fn in libs.items():
                fn(X, start, 1, th)                          # warm-up
            for _ in range(args.repeat):
                for name, fn in libs.items():
                    long = fn(X, start, k, th)
                    short = fn(X, start, 1, th)
                    b = best[name]
                    b[0] = min(b[0], (long["seconds"] - short["seconds"]) / (k - 1))
                    b[1] = min(b[1], long["seconds"])
                    b[2] = (long["iters"], long["own_measure"])
            for name, (per, whole, (iters, loss)) in best.items():
                rows.append({"library": name, "threads": th, "s_per_iter": per,
                             "whole_fit_s": whole, "iters": iters, "loss": loss})
    if not ok:
        rows.append({"library": "pyttb", "error": why})
    print("| library | threads | ms / iter | / pyttb | whole fit ms | iterations | loss |\n"
          "|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['library']} | | {r['error']} | | | | |")
            continue
        ref = [q["s_per_iter"] for q in rows if q["library"] == "pyttb"
               and q.get("threads") == r["threads"]]
        vs = f"{r['s_per_iter'] / ref[0]:.2f}" if ref else ""
        print(f"| {r['library']} | {r['threads']} | {1e3 * r['s_per_iter']:.3f} | {vs} | "
              f"{1e3 * r['whole_fit_s']:.1f} | {r['iters']} | {r['loss']:.6f} |")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
