"""GCP Adam steps and whole fits at 1 and at 2 (or more) threads, wall and CPU time.

    python benchmarks/bench_gcp_threads.py                         # 1.6M nonzeros, R = 16
    python benchmarks/bench_gcp_threads.py --threads 1 2 --nnz 1.6e6 --rank 16 --rounds 5 \\
        --out bench_out/gcp_threads.json

On the synthetic tensor of ``benchmarks/contention.py`` (2000 x 300 x 400), with GCP's default
sample counts for its nonzeros (pyttb's ``max(1000, 3 nnz / 1000)`` nonzeros and as many zeros
per step):

- ``steps``: ``--steps`` Adam steps in one ``backend.gcp.steps`` call (sampling, fused
  gradient, optimiser step), the same steps at every thread count;
- ``fit``: a whole ``GCP(loss="poisson", epoch_iters=20, max_iter=3, tol=0)`` fit (the fit of
  the contention benchmark: setup, loss estimates, 60 steps).

The thread counts alternate within each of ``--rounds`` rounds; the best wall time and the CPU
time (``time.process_time``, all threads) of that run are kept.  The speedup is the best wall
time at one thread over the best at each count; the CPU ratio (CPU time at the count over CPU
time at one thread) is the work that the multi-threaded path adds, which a loaded machine does
not hide: on a machine with free cores the speedup at ``T`` threads is at most ``T`` over it.
The models are compared bitwise.  Prints a Markdown table and writes JSON.
"""
import argparse
import os
import platform
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sktensor_fast as sk  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402
from sktensor_fast.decomposition.losses import get_loss  # noqa: E402
from benchmarks.common import cpu_model, write_report  # noqa: E402
try:                                     # optimiser objects (newer versions)
    from sktensor_fast.decomposition.optimizers import make_optimizer  # noqa: E402
except ImportError:
    make_optimizer = None
from benchmarks.synth import synthetic_tensor  # noqa: E402


def _optimizer(be, U):
    """Adam's state: an optimiser object, or the dict of moments of older versions."""
    if make_optimizer is not None:
        return make_optimizer("adam", learning_rate=1e-3).start(be, U)
    return (be.gcp.optimizer_state if hasattr(be, "gcp") else
            be.gcp_optimizer_state)("adam", U)


def _steps(be, T, state, lam, U, loss, opt, n):
    """``n`` Adam steps; step by step where the backend has no ``gcp.steps`` / ``gcp_steps``
    (older versions), so that the same command times them too."""
    if make_optimizer is not None:
        be.gcp.steps(T, state, lam, U, loss, 7, 0, n, opt, 0.0)
        return
    if hasattr(be, "gcp"):
        be.gcp.steps(T, state, lam, U, loss, 7, 0, n, "adam", opt, 1e-3, 1, 0.0, 0.9, 0.999,
                     1e-8)
        return
    if hasattr(type(be), "gcp_steps"):
        be.gcp_steps(T, state, lam, U, loss, 7, 0, n, "adam", opt, 1e-3, 1, 0.0, 0.9, 0.999,
                     1e-8)
        return
    G = None
    for s in range(n):
        G, _ = be.gcp_sampled_gradient(T, state, lam, U, loss, 7, s, out=G)
        be.gcp_optimizer_step("adam", U, G, opt, 1e-3, 1 + s, 0.0, 0.9, 0.999, 1e-8)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nnz", type=float, default=1.6e6)
    ap.add_argument("--shape", type=int, nargs="+", default=[2000, 300, 400])
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None, help="write the JSON report here")
    args = ap.parse_args(argv)
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
    R = args.rank
    be = get_backend("cpu")
    T = be.prepare(X, "coo")
    loss = get_loss("poisson")
    grad, _ = sk.GCP(R, loss="poisson")._sample_counts(X.nnz, X.size - X.nnz)
    state = (be.gcp.setup if hasattr(be, "gcp") else be.gcp_setup)(T, "stratified", grad,
                                                                    (1, 1), 0)
    rng = np.random.default_rng(0)
    U0 = [rng.uniform(0.1, 1.0, (s, R)) for s in X.shape]
    lam = np.ones(R)
    fit_kw = dict(loss="poisson", solver="adam", epoch_iters=20, max_iter=3, max_fails=3, tol=0.0,
                  random_state=0)
    runs = {(kind, t): [] for kind in ("steps", "fit") for t in args.threads}
    models = {}
    loads = [os.getloadavg()[0]]
    for rnd in range(args.rounds):
        for t in args.threads:
            with sk.num_threads(t):
                U = [u.copy() for u in U0]
                opt = _optimizer(be, U)
                w, c = time.perf_counter(), time.process_time()
                _steps(be, T, state, lam, U, loss, opt, args.steps)
                runs[("steps", t)].append((time.perf_counter() - w, time.process_time() - c))
                models[("steps", t)] = b"".join(u.tobytes() for u in U)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est = sk.GCP(R, **fit_kw)
                    w, c = time.perf_counter(), time.process_time()
                    est.fit(X)
                    runs[("fit", t)].append((time.perf_counter() - w, time.process_time() - c))
                models[("fit", t)] = b"".join(np.ascontiguousarray(f).tobytes()
                                              for f in est.factors_)
        loads.append(os.getloadavg()[0])
        print(f"  round {rnd + 1}/{args.rounds} done, load {loads[-1]:.2f}", file=sys.stderr,
              flush=True)
    rows = []
    for kind in ("steps", "fit"):
        base = min(runs[(kind, args.threads[0])])
        for t in args.threads:
            best = min(runs[(kind, t)])
            rows.append({"kind": kind, "threads": t, "wall_s": best[0], "cpu_s": best[1],
                         "speedup": base[0] / best[0], "cpu_ratio": best[1] / base[1],
                         "same_bits": models[(kind, t)] == models[(kind, args.threads[0])],
                         "all": runs[(kind, t)]})
    print(f"\nGCP Adam, {X.nnz} nonzeros {tuple(args.shape)}, R = {R}, {grad} samples per step, "
          f"{cpu_model()}, load average {min(loads):.2f}-{max(loads):.2f}\n")
    print("| what | threads | best wall s | its CPU s | speedup | CPU ratio | same bits |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        what = f"{args.steps} steps" if r["kind"] == "steps" else "whole fit (60 steps)"
        print(f"| {what} | {r['threads']} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | "
              f"{r['speedup']:.2f} | {r['cpu_ratio']:.2f} | {r['same_bits']} |")
    if args.out:
        write_report({"machine": {"cpu": cpu_model(), "platform": platform.platform(),
                                  "cores": len(os.sched_getaffinity(0)), "load_average": loads},
                      "nnz": int(X.nnz), "shape": args.shape, "rank": R, "samples": list(grad),
                      "steps": args.steps, "rounds": args.rounds, "rows": rows}, args.out)
    return rows


if __name__ == "__main__":
    main()
