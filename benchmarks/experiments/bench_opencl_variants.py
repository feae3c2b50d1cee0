"""Where the time of the OpenCL MTTKRP / Φ kernel goes: variants that leave one stage out.

    python benchmarks/experiments/bench_opencl_variants.py --device gpu --nnz 20e6

Times the lanes kernel of ``kernels/cp.cl`` (``accumulate``, mode 0, and Φ) as shipped and with its source edited:

- ``no_gather``: the factor entries are replaced by a value computed from the coordinate
  (the coordinates are still loaded, the factor rows are not);
- ``no_index``: neither coordinates of the other modes nor factor rows are loaded;
- for several work-group sizes (``--groups``) and columns per lane (``--vecs``).

The edited kernels compute wrong results on purpose; they only place the time.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from sktensor_fast.backends import get_backend  # noqa: E402
from benchmarks.synth import synthetic_tensor  # noqa: E402

GATHER = "pi *= ((__global const VEC_T*)(F[m] + (OFF_T)subs[j * NMODES + m] * R))[r];"
EDITS = {
    "shipped": None,
    "no_gather": (GATHER, "pi *= (VEC_T)(1 + (subs[j * NMODES + m] & 1));"),
    "no_index": (GATHER, "pi *= (VEC_T)(1 + ((j + m) & 1));"),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="gpu")
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    p.add_argument("--nnz", type=float, default=20e6)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--groups", type=int, nargs="+", default=[64, 128, 256, 512])
    p.add_argument("--vecs", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--level-chunks", type=int, nargs="+", default=[],
                   help="boundary-list entries per work-item to try (shipped kernel, vec 4)")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
    be = get_backend(args.device)
    if be.layout == "wide":
        be.layout = "lanes"      # the edits apply to the lanes kernel (accumulate)
    T = be.prepare(X)
    rng = np.random.default_rng(0)
    dfac = [be.asarray(rng.random((s, args.rank))) for s in X.shape]
    out = be.zeros((X.shape[0], args.rank), X.dtype)
    original = be._source

    def best_ms(fn):
        """Best of ``--repeat`` calls after a warm-up, in ms, the queue finished."""
        fn()
        be.queue.finish()
        best = np.inf
        for _ in range(args.repeat):
            t = time.perf_counter()
            fn()
            be.queue.finish()
            best = min(best, time.perf_counter() - t)
        return best * 1e3

    print(f"{be.info()}; tensor {X.shape}, nnz {X.nnz:,}, R={args.rank}; ms, best of "
          f"{args.repeat}")
    for name, edit in EDITS.items():
        def source(fn, edit=edit):
            src = original(fn)
            if edit is not None and fn == "cp.cl":
                assert edit[0] in src
                src = src.replace(*edit)
            return src
        be._source = source
        be.programs.clear()
        for g, vec in [(g, v) for v in args.vecs for g in args.groups]:
            be.group_size, be.vec = g, vec
            res = [best_ms(lambda: be.mttkrp(T, dfac, 0, out=out)),
                   best_ms(lambda: be.phi(T, dfac, 0, dfac[0], 1e-10, out=out))]
            print(f"{name:10s} vec {vec} group {g:4d}: MTTKRP {res[0]:7.3f}  Φ {res[1]:7.3f}",
                  flush=True)
    be._source = original
    be.programs.clear()


    be.group_size, be.vec = 256, 4
    for lc in args.level_chunks:
        be.LEVEL_CHUNK = lc
        print(f"level chunk {lc:4d}: MTTKRP "
              f"{best_ms(lambda: be.mttkrp(T, dfac, 0, out=out)):7.3f}  Φ "
              f"{best_ms(lambda: be.phi(T, dfac, 0, dfac[0], 1e-10, out=out)):7.3f}", flush=True)
    # the fixed cost of a call: a tensor of 1000 nonzeros
    small = synthetic_tensor(tuple(args.shape), 1000, seed=1)
    Ts = be.prepare(small)
    print(f"1000 nonzeros (the cost of a call): MTTKRP "
          f"{best_ms(lambda: be.mttkrp(Ts, dfac, 0, out=out)):7.3f}  Φ "
          f"{best_ms(lambda: be.phi(Ts, dfac, 0, dfac[0], 1e-10, out=out)):7.3f}", flush=True)


if __name__ == "__main__":
    main()
