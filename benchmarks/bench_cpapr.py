"""CP-APR (multiplicative updates) on the CPU backend versus pyttb's ``cp_apr``.

    python benchmarks/bench_cpapr.py                     # NELL-2-shaped, 1M nonzeros, R=16
    python benchmarks/bench_cpapr.py --nnz 1e6 --rank 16 --inner 2 --formats coo --no-pyttb

Both run from the same initial model with the same settings (``max_inner_iter`` inner
iterations per mode, ``tol=0`` so that every inner iteration is done); ours for each storage
format given (default COO and ALTO).  Reported:

- time per outer iteration: ours the best of ``--repeat`` single outer iterations on a tensor
  already laid out (the estimator's own loop: Φ, KKT check, update and normalisation of each
  mode, then the log-likelihood), pyttb's from a whole 1-iteration fit (it has no separate
  setup), the best of ``--pyttb-repeat`` runs;
- the time of a whole 1-iteration fit for both (setup and final log-likelihood included), and
  the relative difference of the two final log-likelihoods (must be ~1e-12);
- memory of a 1-iteration fit against the bytes of the tensor (coordinates + values) plus
  the factor matrices, two ways: the peak of what NumPy and Python allocate during the fit
  (tracemalloc), and the growth of the peak resident set (VmHWM, reset through
  /proc/self/clear_refs) over the resident set before the fit, measured in a fresh process
  that loads the tensor from .npy files (this one also sees the kernels' C allocations, such
  as ALTO's sort buffers).  "total / (tensor + factors)" is (tensor + factors + that
  growth) / (tensor + factors).

Prints a table and writes JSON (machine, threads, versions, numbers).
"""
import argparse
import os
import platform
import resource
import sys
import time
import tracemalloc
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sktensor_fast  # noqa: E402
from sktensor_fast import CPAPR, num_threads  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402
from sktensor_fast.decomposition.cp_apr import _normalize_columns  # noqa: E402
from benchmarks.common import cpu_model, write_report  # noqa: E402
from benchmarks.synth import synthetic_tensor  # noqa: E402



def ours(X, init, rank, inner, iters, fmt):
    est = CPAPR(rank, init=[f.copy() for f in init], max_iter=iters, max_inner_iter=inner,
                tol=0.0, format=fmt)
    t = time.perf_counter()
    est.fit(X)
    return time.perf_counter() - t, est


def one_outer_iteration(X, init, rank, inner, fmt, repeat):
    """Best time of one MU outer iteration of CPAPR on a prepared tensor."""
    be = get_backend("cpu")
    T = be.prepare(X, fmt)
    est = CPAPR(rank, max_iter=1, max_inner_iter=inner, tol=0.0)
    best = np.inf
    for _ in range(repeat):
        A = [be.asarray(f.copy()) for f in init]
        w = np.ones(rank)
        for f in A:
            w = w * _normalize_columns(be, f)
        t = time.perf_counter()
        est._iterate_mu(be, T, A, w, t)
        best = min(best, time.perf_counter() - t)
    return best


def pyttb_fit(X, init, rank, inner, iters):
    import pyttb as ttb
    Xp = ttb.sptensor(X.subs, X.vals.astype(np.float64)[:, None], X.shape)
    K = ttb.ktensor([f.copy() for f in init])
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, _, out = ttb.cp_apr(Xp, rank, algorithm="mu", init=K, maxiters=iters,
                               maxinneriters=inner, stoptol=0.0, printitn=0)
    return time.perf_counter() - t, out


def peak_bytes(fn):
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def rss_child(path, fmt, rank, inner, threads):
    """In a fresh process: growth of the peak RSS during a 1-iteration fit (bytes)."""
    from sktensor_fast import SparseTensor
    X = SparseTensor(np.load(path + ".subs.npy"), np.load(path + ".vals.npy"),
                     shape=tuple(np.load(path + ".shape.npy")))
    init = [np.load(path + f".init{k}.npy") for k in range(X.ndim)]
    with num_threads(threads):
        # load the code paths on a small tensor: a warm-up on X itself would leave freed heap
        # behind that the measured fit reuses without growing the resident set
        small = SparseTensor(X.subs[:2000], X.vals[:2000], shape=X.shape)
        ours(small, init, rank, inner, 1, fmt)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")                                  # VmHWM := VmRSS
        before = _status_kb("VmRSS")
        ours(X, init, rank, inner, 1, fmt)
        peak = _status_kb("VmHWM")
    print((peak - before) * 1024)


def rss_growth(X, init, fmt, rank, inner, threads):
    import subprocess
    import tempfile
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t")
        np.save(path + ".subs.npy", X.subs)
        np.save(path + ".vals.npy", X.vals)
        np.save(path + ".shape.npy", np.asarray(X.shape))
        for k, f in enumerate(init):
            np.save(path + f".init{k}.npy", f)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--rss-child", path,
                              fmt, str(rank), str(inner), str(threads)],
                             capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nnz", type=float, default=1e6)
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818],
                   help="tensor shape (default: NELL-2's)")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--inner", type=int, default=2, help="inner iterations per mode")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    p.add_argument("--formats", nargs="+", default=["coo", "alto"],
                   help="storage formats to time (default: coo alto)")
    p.add_argument("--repeat", type=int, default=3, help="best of this many runs (ours)")
    p.add_argument("--pyttb-repeat", type=int, default=2, help="best of this many (pyttb)")
    p.add_argument("--no-pyttb", action="store_true", help="skip pyttb")
    p.add_argument("--out", default="bench_out/cpapr.json")
    p.add_argument("--rss-child", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rss_child:
        path, fmt, rank, inner, threads = args.rss_child
        return rss_child(path, fmt, int(rank), int(inner), int(threads))
    threads = args.threads or os.cpu_count() or 1
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
    R = args.rank
    rng = np.random.RandomState(0)
    init = [rng.uniform(size=(s, R)) for s in X.shape]
    data_bytes = X.subs.nbytes + X.vals.nbytes
    factor_bytes = sum(f.nbytes for f in init)

    print(f"machine: {platform.node()} | {cpu_model()} | {os.cpu_count()} CPUs | "
          f"threads={threads} | load average before: {os.getloadavg()[0]:.2f}")
    print(f"tensor {X.shape}, nnz={X.nnz:,}, R={R}, {args.inner} inner iterations per mode, "
          f"tol=0")
    print(f"{'':30s}{'s / outer iter':>16s}{'1-iter fit s':>14s}{'peak MB':>10s}"
          f"{'RSS +MB':>10s}{'log-likelihood':>22s}", flush=True)
    rows = []
    for fmt in args.formats:
        with num_threads(threads):
            ours(X, init, R, args.inner, 1, fmt)              # warm-up (imports, page faults)
            t1 = min(ours(X, init, R, args.inner, 1, fmt)[0] for _ in range(args.repeat))
            per_iter = one_outer_iteration(X, init, R, args.inner, fmt, args.repeat)
            _, est1 = ours(X, init, R, args.inner, 1, fmt)
            peak = peak_bytes(lambda: ours(X, init, R, args.inner, 1, fmt))
        rss = rss_growth(X, init, fmt, R, args.inner, threads)
        rows.append({"who": "sktensor_fast", "format": fmt, "nnz": X.nnz, "shape": list(X.shape),
                     "rank": R, "inner": args.inner, "threads": threads,
                     "s_per_outer_iter": per_iter, "fit1_s": t1,
                     "loglik_1iter": est1.log_likelihood_, "peak_bytes": peak,
                     "tensor_bytes": data_bytes, "factor_bytes": factor_bytes,
                     "peak_over_tensor_plus_factors": peak / (data_bytes + factor_bytes),
                     "rss_growth_bytes": rss,
                     "total_over_tensor_plus_factors": (None if rss is None else
                                                        1 + rss / (data_bytes + factor_bytes))})
        print(f"{'sktensor_fast CPAPR mu, ' + fmt:30s}{per_iter:16.3f}{t1:14.3f}"
              f"{peak / 2**20:10.1f}{(rss or 0) / 2**20:10.1f}{est1.log_likelihood_:22.12e}",
              flush=True)
    if not args.no_pyttb:
        runs = [pyttb_fit(X, init, R, args.inner, 1) for _ in range(args.pyttb_repeat)]
        tp, out = min(runs, key=lambda r: r[0])
        peak_p = peak_bytes(lambda: pyttb_fit(X, init, R, args.inner, 1))
        print(f"{'pyttb cp_apr mu':30s}{tp:16.3f}{tp:14.3f}{peak_p / 2**20:10.1f}"
              f"{'':>10s}{out['obj']:22.12e}")
        for r in rows:
            r["loglik_rel_diff_vs_pyttb"] = (abs(out["obj"] - r["loglik_1iter"])
                                             / abs(out["obj"]))
            r["speedup_per_outer_iter_vs_pyttb"] = tp / r["s_per_outer_iter"]
            print(f"{r['format']}: {r['speedup_per_outer_iter_vs_pyttb']:.1f}x faster per outer "
                  f"iteration than pyttb; log-likelihood relative difference "
                  f"{r['loglik_rel_diff_vs_pyttb']:.2e}")
        rows.append({"who": "pyttb", "version": __import__("pyttb").__version__,
                     "s_per_outer_iter": tp, "fit1_s": tp, "loglik_1iter": float(out["obj"]),
                     "peak_bytes": peak_p,
                     "peak_over_tensor_plus_factors": peak_p / (data_bytes + factor_bytes)})
    print(f"tensor (subs + vals) {data_bytes / 2**20:.1f} MB + factors "
          f"{factor_bytes / 2**20:.1f} MB; peak during a fit / that: "
          + ", ".join(f"{r.get('format', r['who'])} {r['peak_over_tensor_plus_factors']:.2f}x"
                      for r in rows)
          + "; total with the RSS growth / that: "
          + ", ".join(f"{r['format']} {r['total_over_tensor_plus_factors']:.2f}x"
                      for r in rows if r.get("total_over_tensor_plus_factors"))
          + f" (max RSS of the process "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")
    report = {"benchmark": "cpapr_mu", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(),
              "load_average_after": os.getloadavg(), "config": sktensor_fast.get_config(),
              "rows": rows}
    write_report(report, args.out)


if __name__ == "__main__":
    main()
