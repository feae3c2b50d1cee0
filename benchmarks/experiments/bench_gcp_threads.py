"""GCP Adam steps and whole fits at 1 and at 2 (or more) threads, wall and CPU time.

    python benchmarks/experiments/bench_gcp_threads.py                         # 1.6M nonzeros, R = 16
    python benchmarks/experiments/bench_gcp_threads.py --threads 1 2 --nnz 1.6e6 --rank 16 --rounds 5 \\
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

``--phases`` also times the phases of every fit (wall and CPU time, the least over the rounds
of each): the data check (``check``: the loss's test of the values), the sampler's set-up with
the draw of the fixed loss sample (``setup``), the loss estimates (``loss``: one before the
first epoch and one after each), the epochs' steps (``steps``) and the rest (``other``:
validation, initial guess, Python between epochs, the result).  From the CPU times of one
thread and of ``T`` threads it estimates the speedup on ``T`` free cores (``est. speedup``):
the CPU time of the fit at one thread over the rest's CPU time at ``T`` threads (taken as
serial) plus each phase's CPU time at ``T`` threads over ``T``: what a quiet machine would
give if the threads of every phase were perfectly balanced and never waited.
"""
import argparse
import os
import platform
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

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
    ap.add_argument("--phases", action="store_true",
                    help="also time the phases of every fit (see the module docstring)")
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
    phase_runs = {t: [] for t in args.threads}
    timer = _PhaseTimer(be) if args.phases else None
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
                    if timer is not None:
                        timer.reset()
                    w, c = time.perf_counter(), time.process_time()
                    est.fit(X)
                    runs[("fit", t)].append((time.perf_counter() - w, time.process_time() - c))
                    if timer is not None:
                        phase_runs[t].append(timer.phases(runs[("fit", t)][-1]))
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
    phase_rows = _phase_table(phase_runs, args.threads) if timer is not None else []
    if timer is not None:
        timer.restore()
    if args.out:
        write_report({"machine": {"cpu": cpu_model(), "platform": platform.platform(),
                                  "cores": len(os.sched_getaffinity(0)), "load_average": loads},
                      "nnz": int(X.nnz), "shape": args.shape, "rank": R, "samples": list(grad),
                      "steps": args.steps, "rounds": args.rounds, "rows": rows,
                      "phases": phase_rows}, args.out)
    return rows


#: the phases of a fit that --phases times (the rest is "other")
PHASES = ("check", "setup", "loss", "steps")


class _PhaseTimer:
    """Wall and CPU time spent in the GCP primitives of the CPU backend ``be`` (its cached
    ``gcp`` object, which the estimator's fits use) and in the loss's data check."""

    def __init__(self, be):
        from sktensor_fast.decomposition import losses
        self.acc = {}
        self._undo = []
        self._wrap(be.gcp, "setup", "setup")
        self._wrap(be.gcp, "loss_estimate", "loss")
        self._wrap(be.gcp, "steps", "steps")
        self._wrap(losses, "_stats", "check")

    def _wrap(self, obj, name, phase):
        fn = getattr(obj, name)
        had = name in vars(obj)

        def timed(*a, **k):
            w, c = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **k)
            finally:
                acc = self.acc.setdefault(phase, [0.0, 0.0])
                acc[0] += time.perf_counter() - w
                acc[1] += time.process_time() - c

        setattr(obj, name, timed)
        self._undo.append((obj, name, fn if had else None))

    def restore(self):
        for obj, name, fn in reversed(self._undo):
            if fn is None:
                delattr(obj, name)
            else:
                setattr(obj, name, fn)

    def reset(self):
        self.acc = {}

    def phases(self, total):
        out = {p: tuple(self.acc.get(p, (0.0, 0.0))) for p in PHASES}
        out["other"] = (total[0] - sum(v[0] for v in out.values()),
                        total[1] - sum(v[1] for v in out.values()))
        out["fit"] = tuple(total)
        return out


def _phase_table(phase_runs, threads):
    """Least wall and CPU time of each phase over the rounds, per thread count, and the fit
    estimated on free cores (see the module docstring); prints a Markdown table."""
    names = PHASES + ("other", "fit")
    best = {t: {p: (min(r[p][0] for r in phase_runs[t]), min(r[p][1] for r in phase_runs[t]))
                for p in names} for t in threads}
    base = best[threads[0]]
    print("\nPhases of the whole fit, least over the rounds (wall / CPU ms):\n")
    print("| threads | " + " | ".join(names) + " | CPU ratio | est. speedup |")
    print("|---|" + "---|" * (len(names) + 2))
    rows = []
    for t in threads:
        b = best[t]
        est = b["other"][1] + sum(b[p][1] for p in PHASES) / t
        one = base["fit"][1]
        row = {"threads": t, "phases": {p: {"wall_s": b[p][0], "cpu_s": b[p][1]} for p in names},
               "cpu_ratio": b["fit"][1] / base["fit"][1], "estimated_speedup": one / est}
        rows.append(row)
        print(f"| {t} | " + " | ".join(f"{1e3 * b[p][0]:.1f} / {1e3 * b[p][1]:.1f}"
                                        for p in names)
              + f" | {row['cpu_ratio']:.2f} | {row['estimated_speedup']:.2f} |")
    return rows


if __name__ == "__main__":
    main()
