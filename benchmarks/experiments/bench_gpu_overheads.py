"""Where the time of a call goes on an OpenCL device: the host's enqueueing, the device's
kernels and transfers, and the gaps between them.

    python benchmarks/experiments/bench_gpu_overheads.py --device gpu --shape 183 24 1140 1717 --nnz 3309490
    python benchmarks/experiments/bench_gpu_overheads.py --device gpu --nnz 76879419   # NELL-2

On a synthetic tensor (``benchmarks/synth.py``, Zipf-skewed coordinates), R = 16, fp64:

- MTTKRP and Φ of every mode, ``--repeat`` calls each into a kept output: the wall time of a
  call with the queue finished after it (best), the host's time to enqueue one call (a batch
  of calls enqueued, divided, before the finish), and from the profiling events of one call:
  its launches, the sum of their device times and the span from the first start to the last
  end;
- a CP-ALS fit of ``--als-iters`` iterations (``tol=0``) of the tensor prepared before (the
  estimator finds the prepared copy): its wall time, the device time of every launch and
  transfer in it, their count, and the ratio of the wall time to the kernels' time.

The queue is created with profiling enabled (``PROFILING_ENABLE``), for every number.
"""
import argparse
import collections
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.experiments._profiling import device_seconds, install  # noqa: E402

EVENTS = []
RECORD = [False]
install(EVENTS, lambda: RECORD[0], transfers=True)

from benchmarks.synth import synthetic_tensor  # noqa: E402
from sktensor_fast import CPALS  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402


def _device_times(events):
    """(launches, sum of durations, first start to last end, per-name sums) in seconds."""
    tot, span0, span1 = 0.0, None, None
    by = collections.defaultdict(float)
    n = 0
    for name, ev in events:
        if device_seconds(ev) is None:
            continue
        s, e = ev.profile.start, ev.profile.end
        n += 1
        tot += (e - s) * 1e-9
        by[name] += (e - s) * 1e-9
        span0 = s if span0 is None else min(span0, s)
        span1 = e if span1 is None else max(span1, e)
    span = 0.0 if span0 is None else (span1 - span0) * 1e-9
    return n, tot, span, dict(by)


def _call(be, fn, repeat):
    fn()
    be.queue.finish()
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        be.queue.finish()
        best = min(best, time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    enq = (time.perf_counter() - t) / repeat
    be.queue.finish()
    EVENTS.clear()
    RECORD[0] = True
    fn()
    be.queue.finish()
    RECORD[0] = False
    n, dev, span, by = _device_times(EVENTS)
    return {"wall_ms": best * 1e3, "enqueue_ms": enq * 1e3, "launches": n,
            "device_ms": dev * 1e3, "span_ms": span * 1e3,
            "by_kernel_ms": {k: v * 1e3 for k, v in by.items()}}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="gpu")
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    p.add_argument("--nnz", type=float, default=76_879_419)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--als-iters", type=int, default=10)
    p.add_argument("--chunks", type=int, nargs="*", default=[],
                   help="also the device time of MTTKRP with these nonzeros per chunk")
    p.add_argument("--level-chunks", type=int, nargs="*", default=[],
                   help="also MTTKRP with these boundary-list entries per work-item at the "
                        "levels of the boundary reduction (SparseKernels.LEVEL_CHUNK)")
    p.add_argument("--tail-rounds", type=int, nargs="*", default=[],
                   help="also MTTKRP with the boundary reduction's last levels in one launch "
                        "from this many rounds of its work-group (SparseKernels.TAIL_ROUNDS; "
                        "0: a launch per level)")
    p.add_argument("--fp32-factors", action="store_true",
                   help="also the fp64 MTTKRP reading float copies of the factors "
                        "(SparseKernels.fp32_factors), against the fp64 reads")
    p.add_argument("--out", default=None, help="JSON file for the results")
    args = p.parse_args(argv)
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
    be = get_backend(args.device)
    T = be.prepare(X)
    be.queue.finish()
    rng = np.random.default_rng(0)
    F = [be.asarray(rng.random((s, args.rank))) for s in X.shape]
    out = [be.zeros((s, args.rank), X.dtype) for s in X.shape]
    res = {"device": be.info(), "shape": list(X.shape), "nnz": X.nnz, "rank": args.rank,
           "kernels": {}}
    print(f"{be.name}: tensor {X.shape}, {X.nnz:,} nonzeros, R = {args.rank}")
    print("| kernel | mode | wall (ms) | enqueue (ms) | launches | device (ms) | span (ms) |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("mttkrp", "phi"):
        rows = []
        for m in range(X.ndim):
            if kind == "mttkrp":
                def fn(m=m):
                    be.mttkrp(T, F, m, out=out[m])
            else:
                def fn(m=m):
                    be.phi(T, F, m, F[m], 1e-10, out=out[m])
            r = _call(be, fn, args.repeat)
            rows.append(r)
            print(f"| {kind} | {m} | {r['wall_ms']:.3f} | {r['enqueue_ms']:.3f} | "
                  f"{r['launches']} | {r['device_ms']:.3f} | {r['span_ms']:.3f} |", flush=True)
        res["kernels"][kind] = rows
    default_chunk = be.chunk
    for chunk in args.chunks:
        be.chunk = chunk
        r = [_call(be, lambda m=m: be.mttkrp(T, F, m, out=out[m]), 3) for m in range(X.ndim)]
        res["kernels"][f"mttkrp_chunk{chunk}"] = r
        print(f"chunk {chunk}: MTTKRP device ms per mode " + " ".join(
            f"{x['device_ms']:.3f}" for x in r) + ", accumulate alone " + " ".join(
            f"{x['by_kernel_ms'].get('accumulate', 0):.3f}" for x in r), flush=True)
    be.chunk = default_chunk
    default_level, default_tail = be.LEVEL_CHUNK, be.TAIL_ROUNDS
    settings = [("level", lc) for lc in args.level_chunks]
    settings += [("tail", t) for t in args.tail_rounds]
    for what, v in settings:
        be.LEVEL_CHUNK, be.TAIL_ROUNDS = default_level, default_tail
        setattr(be, "LEVEL_CHUNK" if what == "level" else "TAIL_ROUNDS", v)
        T.launchers.clear()      # the levels' buffers are sized for the level chunk
        r = [_call(be, lambda m=m: be.mttkrp(T, F, m, out=out[m]), args.repeat)
             for m in range(X.ndim)]
        res["kernels"][f"mttkrp_{what}{v}"] = r
        print(f"{what} {v}: MTTKRP wall ms per mode " + " ".join(
            f"{x['wall_ms']:.3f}" for x in r) + ", enqueue " + " ".join(
            f"{x['enqueue_ms']:.3f}" for x in r) + ", device " + " ".join(
            f"{x['device_ms']:.3f}" for x in r) + ", launches " + " ".join(
            str(x['launches']) for x in r), flush=True)
    be.LEVEL_CHUNK, be.TAIL_ROUNDS = default_level, default_tail
    T.launchers.clear()
    if args.fp32_factors:
        for flag in (False, True, False, True):
            be.fp32_factors = flag
            r = [_call(be, lambda m=m: be.mttkrp(T, F, m, out=out[m]), args.repeat)
                 for m in range(X.ndim)]
            res["kernels"].setdefault(f"mttkrp_fp32_factors_{flag}", []).append(r)
            print(f"fp32 factors {flag}: MTTKRP wall ms per mode " + " ".join(
                f"{x['wall_ms']:.3f}" for x in r) + ", accumulate alone " + " ".join(
                f"{x['by_kernel_ms'].get('accumulate', 0):.3f}" for x in r) + ", device " +
                " ".join(f"{x['device_ms']:.3f}" for x in r), flush=True)
        be.fp32_factors = False
    # a whole CP-ALS fit of the prepared tensor (the estimator finds the prepared copy)
    est = CPALS(rank=args.rank, max_iter=2, tol=0, random_state=0, device=args.device)
    est.fit(X)
    fits = []
    for _ in range(3):
        be.queue.finish()
        EVENTS.clear()
        RECORD[0] = True
        t = time.perf_counter()
        CPALS(rank=args.rank, max_iter=args.als_iters, tol=0, random_state=0,
              device=args.device).fit(X)
        wall = time.perf_counter() - t
        RECORD[0] = False
        n, dev, span, by = _device_times(EVENTS)
        kern = sum(v for k, v in by.items() if k not in ("copy", "fill"))
        fits.append({"wall_s": wall, "launches": n, "device_s": dev, "kernels_s": kern,
                     "span_s": span, "by_kernel_s": by})
    best = min(fits, key=lambda f: f["wall_s"])
    res["cpals_fit"] = fits
    print(f"\nCP-ALS {args.als_iters} iterations of the prepared tensor (best of 3): wall "
          f"{best['wall_s'] * 1e3:.1f} ms, kernels {best['kernels_s'] * 1e3:.1f} ms "
          f"(wall / kernels {best['wall_s'] / best['kernels_s']:.2f}), transfers and fills "
          f"{(best['device_s'] - best['kernels_s']) * 1e3:.1f} ms, {best['launches']} "
          f"launches and transfers")
    for k, v in sorted(best["by_kernel_s"].items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {k:28s} {v * 1e3:8.2f} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
