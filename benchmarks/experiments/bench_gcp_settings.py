"""The default Poisson GCP fit on the embedded flights-routes data against other settings.

    python benchmarks/experiments/bench_gcp_settings.py --seeds $(seq 0 19) \
        --out benchmarks/results/gcp_settings_flights.json

For each setting (keyword arguments added to ``GCP(rank, loss="poisson", random_state=seed)``)
and seed: the epochs run, why the fit stopped and the Poisson log-likelihood
``Σ_nz x log(m + 1e-10) − Σ m`` of the model on the dense tensor (as ``bench_defaults.py``).
Epochs and models do not depend on the machine's load or the thread count (one thread here),
so the table compares how far each setting gets for its number of steps.  Prints a Markdown
table (median and mean over all seeds, the median over seeds 0-4, the epochs summed over the
seeds) and writes JSON.
"""
import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from sktensor_fast import GCP, num_threads  # noqa: E402
from sktensor_fast.datasets import load_flights_routes  # noqa: E402
from benchmarks.common import cpu_model, write_report  # noqa: E402

SETTINGS = [{}, {"tol": 1e-3}, {"tol": 5e-4}, {"decay": 0.3}, {"decay": 0.5},
            {"epoch_iters": 500}, {"learning_rate": 3e-3}, {"n_samples_grad": 76}]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rank", type=int, default=5)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(5)))
    ap.add_argument("--settings", default=None,
                    help="JSON list of keyword dicts (default: %s)" % json.dumps(SETTINGS))
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    settings = json.loads(args.settings) if args.settings else SETTINGS
    X = load_flights_routes().tensor
    dense = X.to_dense()
    pos = dense > 0
    rows = []
    with num_threads(1):
        for kw in settings:
            for seed in args.seeds:
                est = GCP(args.rank, loss="poisson", random_state=seed, **kw)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t = time.perf_counter()
                    est.fit(X)
                    elapsed = time.perf_counter() - t
                M = est.model_.full()
                q = float(np.sum(dense[pos] * np.log(M[pos] + 1e-10)) - M.sum())
                rows.append({"settings": kw, "seed": seed, "n_iter": int(est.n_iter_),
                             "stop": est.stop_reason_, "loglik": q, "time_s": elapsed})
                print(f"  {json.dumps(kw):28s} seed {seed:2d}: {est.n_iter_:4d} epochs "
                      f"({est.stop_reason_}) loglik {q:.6g}", file=sys.stderr, flush=True)
    print(f"\nflights-routes, rank {args.rank}, seeds {args.seeds}, one thread\n")
    print("| setting | median | mean | median of seeds 0-4 | epochs (sum) |")
    print("|---|---|---|---|---|")
    for kw in settings:
        rs = [r for r in rows if r["settings"] == kw]
        q = [r["loglik"] for r in rs]
        q5 = [r["loglik"] for r in rs if r["seed"] in range(5)]
        name = ", ".join(f"`{k}={v}`" for k, v in kw.items()) or "defaults"
        print(f"| {name} | {np.median(q):.0f} | {np.mean(q):.0f} | "
              f"{np.median(q5):.0f} | {sum(r['n_iter'] for r in rs)} |")
    if args.out:
        load = os.getloadavg() if hasattr(os, "getloadavg") else None
        write_report({"machine": {"cpu": cpu_model(), "load_average": load},
                      "rank": args.rank, "seeds": args.seeds, "fits": rows}, args.out)


if __name__ == "__main__":
    main()
