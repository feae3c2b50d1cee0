"""Every estimator with its default settings on the embedded flights-routes data, one thread.

    python benchmarks/experiments/bench_defaults.py                    # seeds 0-2, best of 1 run each
    python benchmarks/experiments/bench_defaults.py --seeds 0 1 2 3 4 --threads 1 --out bench_out/defaults.json

What a new user meets first: ``CPAPR(solver=...)`` for every solver, ``GCP(loss="poisson")``
and ``GCP()`` (Gaussian), ``CPALS()``, each at rank ``--rank`` with nothing else set, on the
15,188-nonzero flights-routes tensor (3 x 105 x 16 x 20 x 7).  For each fit: wall time and
CPU time of ``fit`` (tensor already loaded; with one thread the CPU time is what the fit costs,
less disturbed by other work on the machine), iterations (epochs for the stochastic GCP solvers), whether
it converged, and the quality of the model by one exact formula for every estimator: the
Poisson log-likelihood ``Σ_nz x log(m + 1e-10) − Σ m`` of the full model (Poisson models;
the ε of GCP's Poisson loss, so this is minus that loss, finite where a GCP model is zero at a
nonzero) and the fit
``1 − ‖X − M‖ / ‖X‖`` (least-squares models), both computed on the dense tensor (705,600
entries).  The table gives the median over the seeds and the ratio of each median time to
``CPAPR(solver="pdnr")``'s, measured in the same run (CPU times).  The ``0.1.0 defaults``
rows run GCP with the defaults of version 0.1.0 (``learning_rate=1e-3``, 1000 samples per
step) for comparison.

Prints a Markdown table and writes JSON (machine, load average, versions, every fit).
"""
import argparse
import os
import platform
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import sktensor_fast  # noqa: E402
from sktensor_fast import CPALS, CPAPR, GCP, num_threads  # noqa: E402
from sktensor_fast.datasets import load_flights_routes  # noqa: E402
from benchmarks.common import cpu_model, write_report  # noqa: E402

#: name -> (factory taking rank and seed, quality measure)
CASES = {
    'CPAPR(solver="mu")': (lambda r, s: CPAPR(r, solver="mu", random_state=s), "loglik"),
    'CPAPR(solver="pdnr")': (lambda r, s: CPAPR(r, solver="pdnr", random_state=s), "loglik"),
    'CPAPR(solver="pqnr")': (lambda r, s: CPAPR(r, solver="pqnr", random_state=s), "loglik"),
    'GCP(loss="poisson")': (lambda r, s: GCP(r, loss="poisson", random_state=s), "loglik"),
    # the defaults before the small-tensor sample rule and learning_rate=2e-3
    'GCP(loss="poisson"), 0.1.0 defaults': (
        lambda r, s: GCP(r, loss="poisson", random_state=s, learning_rate=1e-3,
                         n_samples_grad=1000), "loglik"),
    "GCP()": (lambda r, s: GCP(r, random_state=s), "fit"),
    "GCP(), 0.1.0 defaults": (
        lambda r, s: GCP(r, random_state=s, learning_rate=1e-3, n_samples_grad=1000), "fit"),
    "CPALS()": (lambda r, s: CPALS(r, random_state=s), "fit"),
}


def quality(est, dense, kind):
    """Poisson log-likelihood or least-squares fit of the fitted model on the dense data."""
    M = est.model_.full()
    if kind == "loglik":
        pos = dense > 0
        with np.errstate(divide="ignore"):
            return float(np.sum(dense[pos] * np.log(M[pos] + 1e-10)) - M.sum())
    return float(1.0 - np.linalg.norm(dense - M) / np.linalg.norm(dense))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rank", type=int, default=5)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", nargs="+", default=list(CASES),
                    help="subset of: " + ", ".join(CASES))
    ap.add_argument("--out", default=None, help="write the JSON report here")
    args = ap.parse_args(argv)
    X = load_flights_routes().tensor
    dense = X.to_dense()
    rows = []
    with num_threads(args.threads):
        CPAPR(2, max_iter=2, random_state=0).fit(X)            # load the kernels once
        for name in args.cases:
            make, kind = CASES[name]
            for seed in args.seeds:
                est = make(args.rank, seed)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t = time.perf_counter()
                    c = time.process_time()
                    est.fit(X)
                    cpu = time.process_time() - c
                    elapsed = time.perf_counter() - t
                rows.append({"case": name, "seed": seed, "time_s": elapsed, "cpu_s": cpu,
                             "n_iter": int(est.n_iter_),
                             "converged": bool(getattr(est, "converged_", True)),
                             "measure": kind, "quality": quality(est, dense, kind)})
                print(f"  {name:36s} seed {seed}: {elapsed:7.3f}s ({cpu:.3f}s CPU) "
                      f"{est.n_iter_:5d} it  "
                      f"{kind} {rows[-1]['quality']:.6g}", file=sys.stderr, flush=True)
    med = {}
    for name in args.cases:
        rs = [r for r in rows if r["case"] == name]
        med[name] = {k: float(np.median([r[k] for r in rs]))
                     for k in ("time_s", "cpu_s", "n_iter", "quality")}
        med[name]["measure"] = rs[0]["measure"]
        med[name]["converged"] = sum(r["converged"] for r in rs)
    ref = med.get('CPAPR(solver="pdnr")', {}).get("cpu_s")
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"\nflights-routes (15,188 nonzeros), rank {args.rank}, {args.threads} thread(s), "
          f"seeds {args.seeds}, {cpu_model()}, load average {load}\n")
    print("| estimator (defaults) | median wall (s) | median CPU (s) | CPU × pdnr | iterations "
          "| converged | quality (median) |")
    print("|---|---|---|---|---|---|---|")
    for name, m in med.items():
        ratio = f"{m['cpu_s'] / ref:.1f}" if ref else "–"
        q = (f"log-likelihood {m['quality']:.6g}" if m["measure"] == "loglik"
             else f"fit {m['quality']:.4f}")
        print(f"| `{name}` | {m['time_s']:.3f} | {m['cpu_s']:.3f} | {ratio} | {m['n_iter']:.0f} | "
              f"{m['converged']}/{len(args.seeds)} | {q} |")
    if args.out:
        write_report({"machine": {"cpu": cpu_model(), "platform": platform.platform(),
                                  "load_average": load},
                      "versions": {"sktensor_fast": sktensor_fast.__version__,
                                   "numpy": np.__version__},
                      "rank": args.rank, "threads": args.threads, "seeds": args.seeds,
                      "fits": rows, "median": med}, args.out)
    return med


if __name__ == "__main__":
    main()
