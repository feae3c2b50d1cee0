"""CP-APR MU on a count tensor with two tiny modes, against pyttb's ``cp_apr``.

The tensor is a **synthetic stand-in** for a real one that is not available here: the shape
24 x 21 x 2340 (two tiny modes and one of a few thousand rows), Poisson counts of a rank-5
nonnegative model (Gamma(1, 1) factors, mean 30) plus a uniform noise floor of mean 0.25, so
that nearly every entry is a nonzero: 1,176,133 of 1,179,360 with the default seed 0.

Timed, at every ``--threads`` count, in turn within each of ``--repeat`` rounds:

- CP-APR MU per outer iteration: ``CPAPR(rank=8, solver="mu", max_inner_iter=10, tol=0)``
  (10 inner iterations per mode, pyttb's ``maxinneriters`` default; ``tol=0`` so that every
  inner iteration runs), the difference between fits of ``1 + --iters`` and 1 outer
  iterations from the same start, divided by ``--iters`` (what a fit does once cancels);
- the Φ kernel alone (``backend.phi`` on the tensor as ``CPAPR`` prepares it, ``format=
  "auto"``), per mode, and its bandwidth floor: the bytes it must read (per nonzero its
  stored coordinates and value, plus every factor row once: the factors stay in cache), over
  the bandwidth of a NumPy copy of 2^24 float64 measured in the same run (one thread; bytes
  read + written);
- pyttb 1.8.6 ``cp_apr(algorithm="mu", maxinneriters=10, stoptol=0)`` from the same start,
  per outer iteration as the difference of fits of 2 and 1 outer iterations (it is slow:
  ``--pyttb-repeat`` rounds, default 1, after ours), and the relative difference of the
  log-likelihoods of the two 2-iteration models (one NumPy formula for both).

    python benchmarks/experiments/bench_apr_tiny.py                       # 1 and 2 threads
    python benchmarks/experiments/bench_apr_tiny.py --repeat 7 --json out.json
    python benchmarks/experiments/bench_apr_tiny.py --checkout ../main    # another checkout
    python benchmarks/experiments/bench_apr_tiny.py --ab ../main --repeat 15

``--ab CHECKOUT``: this checkout (A) against another (B), each in a process of its own that
builds the same tensor and start; the rounds alternate between the two (A B, then B A, ...),
so that a change of load on a shared machine falls on both alike.  Per round and thread
count: the fits of 1 and ``1 + --iters`` outer iterations and the Poisson data term (the
log-likelihood's kernel) alone, best of 3.  The table gives per outer iteration the
difference of the best fits of each length over the rounds (on a loaded machine the best of
the per-round differences favours rounds whose short fit was slowed down), the median of the
per-round differences, the ratio B / A, the best data term, and pyttb's time over each
(pyttb timed in this process, after them).

Prints the machine, the load average before and after, and a table; ``--json`` writes every
number.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

# benchmarks.common of this checkout (it imports no sktensor_fast: --checkout still chooses)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.common import cpu_model  # noqa: E402

SHAPE = (24, 21, 2340)


def make_tensor(seed=0, shape=SHAPE, true_rank=5, mean=30.0, noise=0.5):
    """The synthetic stand-in: dense Poisson counts, about 99.7% of them nonzero."""
    from sktensor_fast import SparseTensor
    rng = np.random.default_rng(seed)
    F = [rng.gamma(1.0, 1.0, (s, true_rank)) for s in shape]
    M = np.einsum("ir,jr,kr->ijk", *F)
    M *= mean / M.mean()
    M += noise * rng.random(M.shape)
    return SparseTensor.from_dense(rng.poisson(M).astype(np.float64))


def numpy_copy_gbs(n=1 << 24, repeat=5):
    """GB/s of ``np.copyto`` of n float64 (bytes read + written), best of ``repeat``."""
    a = np.ones(n)
    b = np.empty(n)
    np.copyto(b, a)
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * 8 * n / best / 1e9


def phi_bytes(T, X, mode, R):
    """Bytes the Φ of ``mode`` must read on the layout it runs on: per nonzero its stored
    coordinates and value (ALTO: 8 + 8; fibers: 4 + 8, plus 16 per fiber; COO: 8 N + 8 + 8
    of permutation), and each factor row (and B's) once."""
    rows = sum(X.shape) + X.shape[mode]
    fib = T.fibers() if hasattr(T, "fibers") else None
    if fib is not None:
        index = X.nnz * (4 + 8) + fib.n_fibers * 16
    elif getattr(T, "name", "") == "alto":
        index = X.nnz * (8 * T.words + 8)
    else:
        index = X.nnz * (8 * X.ndim + 8 + (8 if mode else 0))
    return index + rows * R * 8


def time_phi(be, T, A, mode, repeat):
    out = np.empty((A[mode].shape[0], A[mode].shape[1]))
    be.phi(T, A, mode, A[mode], 1e-300, out=out)
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        be.phi(T, A, mode, A[mode], 1e-300, out=out)
        best = min(best, time.perf_counter() - t)
    return best


def fit_ours(X, init, rank, iters):
    from sktensor_fast import CPAPR
    est = CPAPR(rank=rank, solver="mu", init=[f.copy() for f in init], max_iter=iters,
                max_inner_iter=10, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        est.fit(X)
        return time.perf_counter() - t, est


def fit_pyttb(X, init, rank, iters):
    import pyttb as ttb
    Xp = ttb.sptensor(X.subs, X.vals.astype(np.float64)[:, None], X.shape)
    K = ttb.ktensor([f.copy() for f in init])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        M, _, _ = ttb.cp_apr(Xp, rank, algorithm="mu", init=K, maxiters=iters,
                             maxinneriters=10, stoptol=0.0, printitn=0)
        return time.perf_counter() - t, M


def loglik(X, weights, factors):
    """Σ x log m − Σ m of a Kruskal model, in NumPy (the same formula for both)."""
    m = np.zeros(X.nnz)
    P = np.broadcast_to(np.asarray(weights, dtype=np.float64), (X.nnz, len(weights))).copy()
    for n, f in enumerate(factors):
        P *= f[X.subs[:, n]]
    m = P.sum(axis=1)
    total = np.asarray(weights, dtype=np.float64).copy()
    for f in factors:
        total = total * f.sum(axis=0)
    return float(np.sum(X.vals * np.log(m)) - total.sum())


def time_data_term(be, T, init, repeat=3):
    """Best of ``repeat`` calls of the Poisson data term Σ x log m of the start model."""
    w = np.ones(init[0].shape[1])
    be.poisson_data_term(T, w, init, 1e-10)
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        be.poisson_data_term(T, w, init, 1e-10)
        best = min(best, time.perf_counter() - t)
    return best


def worker(args):
    """``--worker``: build the tensor and start, then answer one line of JSON per request
    ``<threads>`` read from stdin (per-outer-iteration time and data term time); stdout
    carries nothing else."""
    from sktensor_fast import num_threads
    from sktensor_fast.backends import get_backend
    X = make_tensor(args.seed, tuple(args.shape))
    rng = np.random.default_rng(1)
    init = [rng.random((s, args.rank)) for s in X.shape]
    be = get_backend("cpu")
    T = be.prepare(X, "auto")
    fit_ours(X, init, args.rank, 1)                       # warm-up
    import sktensor_fast
    print(json.dumps({"module": sktensor_fast.__file__}), flush=True)
    for line in sys.stdin:
        t = int(line)
        with num_threads(t):
            t1, _ = fit_ours(X, init, args.rank, 1)
            tk, _ = fit_ours(X, init, args.rank, 1 + args.iters)
            dt = time_data_term(be, T, init)
        print(json.dumps({"fit_1_s": t1, "fit_k_s": tk, "per_outer_s": (tk - t1) / args.iters,
                          "data_term_s": dt}), flush=True)


def main_ab(args, here, other):
    """``--ab``: the rounds of two checkouts interleaved (see the module's docstring)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--rank", str(args.rank),
           "--iters", str(args.iters), "--seed", str(args.seed), "--shape",
           *map(str, args.shape)]
    sides = {"A": here, "B": other}
    procs = {k: subprocess.Popen(cmd + ["--checkout", str(v)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
             for k, v in sides.items()}
    load0 = os.getloadavg()
    res = {k: {t: {"fit_1_s": [], "fit_k_s": [], "per_outer_s": [], "data_term_s": []}
               for t in args.threads} for k in sides}
    try:
        for k, p in procs.items():
            module = Path(json.loads(p.stdout.readline())["module"]).resolve()
            if sides[k] not in module.parents:
                raise RuntimeError(f"the worker of {sides[k]} imported {module}")
        for r in range(args.repeat):
            for t in args.threads:
                for k in (("A", "B") if r % 2 == 0 else ("B", "A")):
                    procs[k].stdin.write(f"{t}\n")
                    procs[k].stdin.flush()
                    out = json.loads(procs[k].stdout.readline())
                    for key, v in out.items():
                        res[k][t][key].append(v)
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()
    load1 = os.getloadavg()
    pyttb = None
    if not args.no_pyttb:
        X = make_tensor(args.seed, tuple(args.shape))
        rng = np.random.default_rng(1)
        init = [rng.random((s, args.rank)) for s in X.shape]
        times = []
        for _ in range(args.pyttb_repeat):
            t1, _ = fit_pyttb(X, init, args.rank, 1)
            t2, _ = fit_pyttb(X, init, args.rank, 2)
            times.append(t2 - t1)
        pyttb = {"per_outer_s": times, "per_outer_best_s": min(times)}
    load2 = os.getloadavg()
    print(f"A: {here}\nB: {other}")
    print(f"CPU {cpu_model()}, {os.cpu_count()} logical CPUs; load average {load0[0]:.2f} "
          f"at the start, {load1[0]:.2f} after the rounds, {load2[0]:.2f} after pyttb")
    print(f"{args.repeat} rounds, alternating.  Per outer iteration: (best fit of "
          f"{1 + args.iters} - best fit of 1) / {args.iters} over the rounds, in brackets the "
          f"median of the rounds' differences; data term: best of the rounds\n")
    print("| threads | A per outer (s) | B per outer (s) | B / A | A data term (ms) | "
          "B data term (ms) |" + (" pyttb / A | pyttb / B |" if pyttb else ""))
    print("|---|---|---|---|---|---|" + ("---|---|" if pyttb else ""))
    report = {"A": str(here), "B": str(other), "rounds": args.repeat, "cpu": cpu_model(),
              "logical_cpus": os.cpu_count(), "load_average": [load0, load1, load2],
              "tensor": {"shape": list(args.shape), "seed": args.seed}, "rank": args.rank,
              "results": res, "pyttb": pyttb}
    for t in args.threads:
        a, b = res["A"][t], res["B"][t]
        # the difference of the best fits: the best of the per-round differences would favour
        # rounds whose short fit was slowed down
        pa, pb = ((min(r["fit_k_s"]) - min(r["fit_1_s"])) / args.iters for r in (a, b))
        report.setdefault("per_outer_best_fits_s", {})[t] = {"A": pa, "B": pb}
        line = (f"| {t} | {pa:.4f} ({np.median(a['per_outer_s']):.4f}) | {pb:.4f} "
                f"({np.median(b['per_outer_s']):.4f}) | {pb / pa:.2f} | "
                f"{min(a['data_term_s']) * 1e3:.2f} | {min(b['data_term_s']) * 1e3:.2f} |")
        if pyttb:
            line += (f" {pyttb['per_outer_best_s'] / pa:.1f} | "
                     f"{pyttb['per_outer_best_s'] / pb:.1f} |")
        print(line)
    if pyttb:
        print(f"\npyttb: {pyttb['per_outer_best_s']:.2f} s per outer iteration (best of "
              f"{len(pyttb['per_outer_s'])})")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, default=float)
        print(f"wrote {args.json}")
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--iters", type=int, default=3, help="outer iterations timed per fit")
    ap.add_argument("--pyttb-repeat", type=int, default=1)
    ap.add_argument("--no-pyttb", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shape", type=int, nargs=3, default=list(SHAPE),
                    help="another shape of the same kind (tests use a small one)")
    ap.add_argument("--checkout", default=None,
                    help="import sktensor_fast from this checkout (default: this one)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--ab", default=None, metavar="CHECKOUT",
                    help="this checkout against another, rounds interleaved (see above)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    root = Path(args.checkout).resolve() if args.checkout else Path(__file__).resolve().parents[2]
    if args.ab:
        return main_ab(args, root, Path(args.ab).resolve())
    sys.path.insert(0, str(root))
    if args.worker:
        return worker(args)
    import sktensor_fast
    from sktensor_fast import num_threads
    from sktensor_fast.backends import get_backend

    load0 = os.getloadavg()
    X = make_tensor(args.seed, tuple(args.shape))
    R = args.rank
    rng = np.random.default_rng(1)
    init = [rng.random((s, R)) for s in X.shape]
    be = get_backend("cpu")
    T = be.prepare(X, "auto")
    A = [np.ascontiguousarray(f) for f in init]
    copy_gbs = numpy_copy_gbs()
    fib = T.fibers() if hasattr(T, "fibers") else None
    layout = f"{type(T).__name__}" + (f" + fibers {fib.modes}" if fib is not None else "")
    print(f"sktensor_fast {sktensor_fast.__version__} from {root}")
    print(f"tensor {X.shape}, nnz {X.nnz:,} ({X.nnz / np.prod(X.shape):.2%} of the entries), "
          f"R = {R}, layout {layout}")
    print(f"CPU {cpu_model()}, {os.cpu_count()} logical CPUs, "
          f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; NumPy copy "
          f"{copy_gbs:.1f} GB/s")

    per_outer = {t: [] for t in args.threads}
    phi = {t: [[] for _ in range(X.ndim)] for t in args.threads}
    fit_ours(X, init, R, 1)                               # warm-up (thread costs, imports)
    for _ in range(args.repeat):
        for t in args.threads:
            with num_threads(t):
                t1, _ = fit_ours(X, init, R, 1)
                tk, _ = fit_ours(X, init, R, 1 + args.iters)
                per_outer[t].append((tk - t1) / args.iters)
                for m in range(X.ndim):
                    phi[t][m].append(time_phi(be, T, A, m, 3))
    floor = [phi_bytes(T, X, m, R) / (copy_gbs * 1e9) for m in range(X.ndim)]

    report = {"tensor": {"shape": X.shape, "nnz": X.nnz, "seed": args.seed,
                         "synthetic": "stand-in of a count tensor with two tiny modes"},
              "rank": R, "inner_iterations": 10, "layout": layout, "checkout": str(root),
              "version": sktensor_fast.__version__, "numpy_copy_GBs": copy_gbs,
              "cpu": cpu_model(), "logical_cpus": os.cpu_count(),
              "phi_floor_s": floor, "threads": {}}
    rows = []
    for t in args.threads:
        best = min(per_outer[t])
        ph = [min(v) for v in phi[t]]
        report["threads"][t] = {"per_outer_s": per_outer[t], "per_outer_best_s": best,
                                "phi_s": [list(v) for v in phi[t]], "phi_best_s": ph,
                                "phi_over_floor": [p / f for p, f in zip(ph, floor)]}
        rows.append((t, best, ph))

    pyttb = None
    if not args.no_pyttb:
        try:
            import pyttb as ttb  # noqa: F401
        except ImportError as exc:
            print(f"pyttb not available: {exc}")
        else:
            times, M2 = [], None
            for _ in range(args.pyttb_repeat):
                t1, _ = fit_pyttb(X, init, R, 1)
                t2, M2 = fit_pyttb(X, init, R, 2)
                times.append(t2 - t1)
            _, ours2 = fit_ours(X, init, R, 2)
            ll_p = loglik(X, M2.weights, [np.asarray(f) for f in M2.factor_matrices])
            ll_o = loglik(X, ours2.weights_, ours2.factors_)
            pyttb = {"per_outer_s": times, "per_outer_best_s": min(times),
                     "version": ttb.__version__,
                     "loglik_rel_diff_2_iterations": abs(ll_p - ll_o) / abs(ll_p)}
            report["pyttb"] = pyttb
    load1 = os.getloadavg()
    report["load_average_start"], report["load_average_end"] = load0, load1

    print()
    print("| threads | per outer iteration (s) | Φ per mode (ms) | Φ / floor per mode |"
          + (" pyttb / ours |" if pyttb else ""))
    print("|---|---|---|---|" + ("---|" if pyttb else ""))
    for t, best, ph in rows:
        line = (f"| {t} | {best:.4f} | {' / '.join(f'{p * 1e3:.2f}' for p in ph)} | "
                f"{' / '.join(f'{p / f:.1f}' for p, f in zip(ph, floor))} |")
        if pyttb:
            line += f" {pyttb['per_outer_best_s'] / best:.1f} |"
        print(line)
    print(f"\nΦ floor per mode (ms): {' / '.join(f'{f * 1e3:.2f}' for f in floor)} "
          f"(bytes read / NumPy copy bandwidth)")
    if pyttb:
        print(f"pyttb {pyttb['version']}: {pyttb['per_outer_best_s']:.2f} s per outer "
              f"iteration; log-likelihoods after 2 iterations differ by "
              f"{pyttb['loglik_rel_diff_2_iterations']:.1e} (relative)")
    print(f"load average at the end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, default=float)
        print(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    main()
