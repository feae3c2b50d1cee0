"""Streamed vs resident tensor on one OpenCL device: CP-APR MU (and CP-ALS) outer iterations.

    python benchmarks/bench_streamed.py --device opencl --nnz 300000        # PoCL, seconds
    python benchmarks/bench_streamed.py --device gpu --nnz 76879419 \\
        --out benchmarks/results/streamed_nell2_h100.json                  # a GPU host

On a NELL-2-shaped synthetic tensor (``benchmarks/synth.py``, Zipf(1.2) coordinates,
``--nnz`` nonzeros) the same fits run twice on the same device from the same start: with the
tensor resident (``max_tensor_bytes`` unset) and streamed through the device in blocks with the
device memory the tensor may use capped at ``--cap-fraction`` (default a quarter) of what the
resident copies need (``sktensor_fast/backends/opencl/streamed.py``).  Each fit is run once
for one iteration first (it prepares the tensor and builds the kernels), then timed for
``--iters`` outer iterations, best of ``--repeat``.  Reported: seconds per outer iteration,
the ratio streamed / resident (the target is at most 2 for CP-APR MU), the blocks per mode,
the device bytes, and the relative difference of the final log-likelihood / fit (streamed
equals resident up to summation order).  JSON with ``--out``.
"""
import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.common import cpu_model, write_report  # noqa: E402
from benchmarks.synth import FROSTT, synthetic_tensor  # noqa: E402


def _fresh(X):
    from sktensor_fast import SparseTensor
    return SparseTensor(X.subs, X.vals, X.shape, dtype=X.dtype)


def _stacked(shape, nnz, parts, dtype):
    """One synthetic tensor of ``shape`` (``parts`` = 1), or ``parts`` of them (seeds 0, 1,
    ...) stacked along mode 0: the tensor that ``bench_distributed.py --weak --stacked`` spreads
    over ``parts`` processes."""
    if parts <= 1:
        return synthetic_tensor(shape, nnz, seed=0, dtype=dtype)
    from sktensor_fast import SparseTensor
    subs, vals = [], []
    for p in range(parts):
        part = synthetic_tensor(shape, nnz, seed=p, dtype=dtype)
        s = np.array(part.subs, dtype=np.int64)
        s[:, 0] += p * shape[0]
        subs.append(s)
        vals.append(part.vals)
    return SparseTensor(np.concatenate(subs), np.concatenate(vals),
                        (parts * shape[0],) + tuple(shape[1:]), dtype=dtype, copy=False)


def _time_fit(make, X, iters, repeat):
    """(best seconds per outer iteration, the first fit's seconds, the last model, best
    seconds per iteration by difference) of ``make(max_iter)`` on ``X``.  The first number
    divides a whole fit of ``iters`` iterations by its iterations; the last is the difference
    between a fit of ``1 + iters`` iterations and one of 1, divided by ``iters`` (the start
    and the end of a fit cancel out), as bench_distributed.py times its fits."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        make(1).fit(X)                     # prepares X (kept with it) and builds the kernels
        first = time.perf_counter() - t
        best, model = np.inf, None
        one = more = np.inf
        for _ in range(repeat):
            t = time.perf_counter()
            model = make(iters).fit(X)
            best = min(best, (time.perf_counter() - t) / model.n_iter_)
            t = time.perf_counter()
            make(1).fit(X)
            one = min(one, time.perf_counter() - t)
            t = time.perf_counter()
            make(1 + iters).fit(X)
            more = min(more, time.perf_counter() - t)
    return best, first, model, (more - one) / iters


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="opencl", help="'opencl', 'gpu' or 'opencl:P:D'")
    ap.add_argument("--shape", default="nell2", help="a FROSTT name of benchmarks/synth.py")
    ap.add_argument("--nnz", type=int, default=300_000)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--iters", type=int, default=3, help="outer iterations timed")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--cap-fraction", type=float, default=0.25)
    ap.add_argument("--algos", nargs="+", default=["cpapr"], choices=["cpapr", "cpals"])
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--parts", type=int, default=1,
                    help="the tensor of bench_distributed.py --weak --stacked for this many "
                         "processes: parts of --nnz nonzeros (seeds 0, 1, ...) stacked along "
                         "mode 0, on one device")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from sktensor_fast import CPALS, CPAPR
    from sktensor_fast.backends import get_backend
    from sktensor_fast.backends.opencl import streamed

    shape = FROSTT[args.shape][0]
    X = _stacked(shape, args.nnz, args.parts, np.dtype(args.dtype))
    shape = X.shape
    be = get_backend(args.device)
    need = streamed.resident_bytes(be, X)
    cap = int(need * args.cap_fraction)
    init = [np.random.default_rng(1).random((s, args.rank)) + 0.1 for s in X.shape]
    makers = {
        "cpapr": lambda it: CPAPR(rank=args.rank, init=init, max_iter=it, tol=0,
                                  device=args.device),
        "cpals": lambda it: CPALS(rank=args.rank, init=init, max_iter=it, tol=0,
                                  device=args.device),
    }
    old = be.max_tensor_bytes
    rows = []
    try:
        for algo in args.algos:
            res = {}
            for kind in ("resident", "streamed"):
                be.max_tensor_bytes = None if kind == "resident" else cap
                Xk = _fresh(X)
                sec, first, model, diff = _time_fit(makers[algo], Xk, args.iters, args.repeat)
                from sktensor_fast._prepared import prepared
                with prepared(be, Xk, "auto") as T:
                    info = {"streamed": bool(getattr(T, "streamed", False)),
                            "device_bytes": int(T.nbytes),
                            "blocks": getattr(T, "nblocks", None),
                            "block_nnz": getattr(T, "block_nnz", None),
                            "pinned": getattr(T, "pinned", None)}
                score = model.log_likelihood_ if algo == "cpapr" else model.fit_
                res[kind] = {"s_per_iter": sec, "s_per_iter_by_difference": diff,
                             "first_fit_s": first, "score": float(score),
                             "n_iter": int(model.n_iter_), **info}
            r, s = res["resident"], res["streamed"]
            row = {"algo": algo, "resident": r, "streamed": s,
                   "ratio": s["s_per_iter"] / r["s_per_iter"],
                   "score_rel_diff": abs(r["score"] - s["score"]) / abs(r["score"])}
            rows.append(row)
            print(f"{algo}: resident {r['s_per_iter'] * 1e3:.1f} ms/iter "
                  f"({r['device_bytes'] / 2**20:.1f} MiB), streamed {s['s_per_iter'] * 1e3:.1f} "
                  f"ms/iter ({s['device_bytes'] / 2**20:.1f} MiB, blocks {s['blocks']}), "
                  f"ratio {row['ratio']:.2f}, score rel. diff {row['score_rel_diff']:.1e}; "
                  f"by difference: resident {r['s_per_iter_by_difference'] * 1e3:.1f}, "
                  f"streamed {s['s_per_iter_by_difference'] * 1e3:.1f} ms/iter", flush=True)
    finally:
        be.max_tensor_bytes = old
    report = {"benchmark": "streamed", "device": be.info(), "cpu": cpu_model(),
              "loadavg": open("/proc/loadavg").read().split()[:3]
              if os.path.exists("/proc/loadavg") else None,
              "shape": list(shape), "nnz": int(X.nnz), "parts": args.parts,
              "rank": args.rank,
              "iters": args.iters, "repeat": args.repeat, "dtype": args.dtype,
              "resident_need_bytes": int(need), "cap_bytes": cap,
              "cap_fraction": args.cap_fraction, "rows": rows}
    if args.out:
        write_report(report, args.out)
    else:
        print(json.dumps(report, indent=1, default=str))
    return rows


if __name__ == "__main__":
    main()
