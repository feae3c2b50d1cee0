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
    """The same tensor as a new object (prepared anew), sharing X's read-only arrays."""
    from sktensor_fast import SparseTensor
    return SparseTensor(X.subs, X.vals, X.shape, dtype=X.dtype, copy=False)


def _stacked(shape, nnz, parts, dtype):
    """One synthetic tensor of ``shape`` (``parts`` = 1), or ``parts`` of them (seeds 0, 1,
    ...) stacked along mode 0: the tensor that ``bench_distributed.py --weak --stacked`` spreads
    over ``parts`` processes.  The parts are written into one preallocated array each (a
    tensor of a billion nonzeros is not copied again)."""
    if parts <= 1:
        return synthetic_tensor(shape, nnz, seed=0, dtype=dtype)
    from sktensor_fast import SparseTensor
    subs = vals = None
    at = 0
    for p in range(parts):
        part = synthetic_tensor(shape, nnz, seed=p, dtype=dtype)
        n = part.nnz
        if subs is None:
            subs = np.empty((parts * n, len(shape)), dtype=np.int64)
            vals = np.empty(parts * n, dtype=part.vals.dtype)
        subs[at:at + n] = part.subs
        subs[at:at + n, 0] += p * shape[0]
        vals[at:at + n] = part.vals
        at += n
        del part
    return SparseTensor(subs[:at], vals[:at], (parts * shape[0],) + tuple(shape[1:]),
                        dtype=dtype, copy=False)


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
    ap.add_argument("--cap-fraction", type=float, default=0.25,
                    help="the streamed fit's device memory cap, as a fraction of what the "
                         "resident copies need; 0: no cap (the backend streams a tensor "
                         "whose resident copies do not fit the device, under half of its "
                         "memory)")
    ap.add_argument("--kinds", nargs="+", default=["resident", "streamed"],
                    choices=["resident", "streamed"],
                    help="the fits to run (a tensor larger than the device: streamed only)")
    ap.add_argument("--start", default="given", choices=["given", "random"],
                    help="'given': the same fixed start for every fit; 'random': init='random' "
                         "with random_state=0 (the start of bench_distributed.py's fits)")
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
    t_gen = time.perf_counter()
    X = _stacked(shape, args.nnz, args.parts, np.dtype(args.dtype))
    t_gen = time.perf_counter() - t_gen
    shape = X.shape
    be = get_backend(args.device)
    need = streamed.resident_bytes(be, X)
    cap = int(need * args.cap_fraction) if args.cap_fraction > 0 else None
    device_bytes = int(be.device.global_mem_size)
    print(f"{X.nnz:,} nonzeros of shape {X.shape}: the resident copies need "
          f"{need / 2**30:.1f} GiB, the device has {device_bytes / 2**30:.1f} GiB; "
          f"generated in {t_gen:.1f} s", flush=True)
    if args.start == "given":
        start = {"init": [np.random.default_rng(1).random((s, args.rank)) + 0.1
                          for s in X.shape]}
    else:
        start = {"init": "random", "random_state": 0}
    makers = {
        "cpapr": lambda it: CPAPR(rank=args.rank, max_iter=it, tol=0, max_inner_iter=10,
                                  device=args.device, **start),
        "cpals": lambda it: CPALS(rank=args.rank, max_iter=it, tol=0, device=args.device,
                                  **start),
    }
    old = be.max_tensor_bytes
    rows = []
    try:
        for algo in args.algos:
            res = {}
            for kind in args.kinds:
                # no --cap-fraction: the backend's own setting (None: its device's plan)
                be.max_tensor_bytes = (None if kind == "resident"
                                       else old if cap is None else cap)
                Xk = _fresh(X)
                sec, first, model, diff = _time_fit(makers[algo], Xk, args.iters, args.repeat)
                from sktensor_fast._prepared import prepared
                with prepared(be, Xk, "auto") as T:
                    info = {"streamed": bool(getattr(T, "streamed", False)),
                            "device_bytes": int(T.nbytes),
                            "blocks": getattr(T, "nblocks", None),
                            "block_nnz": getattr(T, "block_nnz", None),
                            "pinned": getattr(T, "pinned", None),
                            "staged": getattr(T, "staged", None)}
                del Xk, T
                score = model.log_likelihood_ if algo == "cpapr" else model.fit_
                res[kind] = {"s_per_iter": sec, "s_per_iter_by_difference": diff,
                             "first_fit_s": first, "score": float(score),
                             "last_loss": float(model.loss_history_[-1]),
                             "n_iter": int(model.n_iter_), **info}
                print(f"{algo} {kind}: {sec * 1e3:.1f} ms/iter, by difference "
                      f"{diff * 1e3:.1f} ms/iter, first fit (prepare included) {first:.1f} s, "
                      f"{'streamed' if info['streamed'] else 'resident'}, device "
                      f"{info['device_bytes'] / 2**20:.1f} MiB, blocks {info['blocks']}, "
                      f"pinned {info['pinned']}, staged {info['staged']}, "
                      f"score {score:.10g}, last loss {model.loss_history_[-1]:.10g}", flush=True)
            row = {"algo": algo, **res}
            if len(res) == 2:
                r, s = res["resident"], res["streamed"]
                row.update({"ratio": s["s_per_iter"] / r["s_per_iter"],
                            "score_rel_diff": abs(r["score"] - s["score"]) / abs(r["score"])})
                print(f"{algo}: streamed / resident {row['ratio']:.2f}, score rel. diff "
                      f"{row['score_rel_diff']:.1e}", flush=True)
            rows.append(row)
    finally:
        be.max_tensor_bytes = old
    report = {"benchmark": "streamed", "device": be.info(), "cpu": cpu_model(),
              "loadavg": open("/proc/loadavg").read().split()[:3]
              if os.path.exists("/proc/loadavg") else None,
              "shape": list(shape), "nnz": int(X.nnz), "parts": args.parts,
              "rank": args.rank,
              "iters": args.iters, "repeat": args.repeat, "dtype": args.dtype,
              "resident_need_bytes": int(need), "cap_bytes": cap,
              "device_global_mem_bytes": device_bytes, "generate_s": t_gen,
              "start": args.start, "kinds": args.kinds,
              "cap_fraction": args.cap_fraction, "rows": rows}
    if args.out:
        write_report(report, args.out)
    else:
        print(json.dumps(report, indent=1, default=str))
    return rows


if __name__ == "__main__":
    main()
