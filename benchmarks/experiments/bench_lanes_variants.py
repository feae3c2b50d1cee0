"""Variants of the lanes MTTKRP / Φ kernels, set by the backend's experimental attributes:
``batch`` (the coordinates and values loaded in batches, each lane of a chunk loading
``batch`` different nonzeros of the next batch, shared in local memory, instead of the next
step's one step ahead in every lane), ``group_bnd_global`` (the work-group's boundary rows in
global scratch instead of local memory), ``pad_local`` (bytes of local memory a group holds
unused), ``split_rows`` (a lane's columns in both halves of a row), ``group_size``, ``vec``,
``row_mask`` (wrong results: the factor rows read at the coordinates' low bits, a working
set of ``row_mask + 1`` rows), ``coord_mask`` (wrong results: the nonzeros read at the
positions' low bits, a window of ``coord_mask + 1`` nonzeros), ``batch_shfl`` (NVIDIA: batches of coordinates
passed between the lanes by warp shuffles), ``pad_coords`` (3 modes: the coordinates
padded to four ints, one int4 load), ``blocked`` (the chunks interleaved by blocks of
that many entries), ``no_rows`` (wrong results: no factor row read, a constant
product).

    python benchmarks/experiments/bench_lanes_variants.py --device gpu --variants batch=0 batch=1 batch=2
    python benchmarks/experiments/bench_lanes_variants.py --device gpu --variants pad_local=0 \\
        pad_local=8192 group_bnd_global=1 --shape 183 24 1140 1717 --nnz 3309490 --repeat 20

For a synthetic tensor of ``--shape`` and ``--nnz`` (``benchmarks/synth.py``), R = ``--rank``,
fp64: ``--rounds`` rounds over the variants in turn (each a comma-separated list of
``attribute=integer``, the others at their defaults), each the best of ``--repeat`` calls per
mode with the queue finished (after one call), and whether every variant's results equal the
first one's bit for bit.  ``--verbose-build`` prints the NVIDIA compiler's register counts of
each setting's kernels.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.bench_opencl import timed  # noqa: E402
from benchmarks.experiments._args import add_tensor_args  # noqa: E402
from benchmarks.synth import synthetic_tensor  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402


ATTRS = ("batch", "group_bnd_global", "pad_local", "group_size", "split_rows", "vec",
         "row_mask", "coord_mask", "batch_shfl",
         "pad_coords", "blocked", "no_rows")


def _use(be, variant, defaults):
    """Set the backend's attributes of ``variant``, the others to ``defaults``."""
    for k in ATTRS:
        setattr(be, k, variant.get(k, defaults[k]))


def _verbose_builds():
    """Print the register use of every build of cp.cl (NVIDIA's ``-cl-nv-verbose``)."""
    import sktensor_fast.backends.opencl.program as P
    orig = P.build_program

    def build(ctx, src, options=(), what="kernels"):
        prog = orig(ctx, src, list(options) + ["-cl-nv-verbose"], what)
        if "cp.cl" in what:
            import pyopencl as cl
            log = prog.get_build_info(ctx.devices[0], cl.program_build_info.LOG)
            tags = [ln for ln in src.splitlines() if ln.startswith("#define")
                    and any(k in ln for k in ("PHI", "PREFETCH", "BATCH_PF", "GROUP_BND",
                                                   "PAD_LOCAL", "SPLIT_ROWS", "ROW_MASK",
                                                   "COORD_MASK", "BATCH_SHFL",
                                                   "PAD4", "BLOCKED", "NO_ROWS"))]
            print(f"build {what} {tags}: "
                  + "; ".join(ln.strip() for ln in log.splitlines()
                              if "registers" in ln or "spill" in ln), flush=True)
        return prog
    P.build_program = build


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tensor_args(p)
    p.add_argument("--variants", nargs="+", default=["batch=0", "batch=1"])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--layout", default="lanes", choices=["lanes", "lanes-sorted"])
    p.add_argument("--verbose-build", action="store_true")
    p.add_argument("--out", default=None, help="JSON file of the results")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.rounds < 1:
        p.error("--repeat and --rounds must be at least 1")
    variants = {}
    for v in args.variants:
        try:
            variants[v] = {k: int(x) for k, x in (item.split("=") for item in v.split(","))}
        except ValueError:
            p.error(f"--variants: {v!r} is not a list of attribute=integer")
        for k in variants[v]:
            if k not in ATTRS:
                p.error(f"--variants: {k!r} is not one of {', '.join(ATTRS)}")
    if args.verbose_build:
        _verbose_builds()

    shape = tuple(args.shape)
    X = synthetic_tensor(shape, int(args.nnz), seed=0)
    be = get_backend(args.device)
    be.layout = args.layout
    print(f"{be.info()['device']}: {shape}, {X.nnz:,} nonzeros, R = {args.rank}, "
          f"layout {args.layout}", flush=True)
    T = be.prepare(X)
    rng = np.random.default_rng(0)
    f = [be.asarray(rng.random((s, args.rank))) for s in shape]
    out = [be.zeros((s, args.rank), np.float64) for s in shape]
    fin = be.queue.finish
    modes = range(len(shape))
    defaults = {k: getattr(be, k) for k in ATTRS}
    for v in variants.values():        # the builds, outside the timing
        _use(be, v, defaults)
        for m in modes:
            be.mttkrp(T, f, m, out=out[m])
            be.phi(T, f, m, f[m], 1e-10, out=out[m])
    fin()

    def best(fn):
        return timed(fn, fin, args.repeat) * 1e3

    res = {"device": be.info()["device"], "shape": shape, "nnz": int(X.nnz), "rank": args.rank,
           "layout": args.layout, "argv": sys.argv[1:], "rounds": []}
    ref = None
    for rnd in range(args.rounds):
        for name, v in variants.items():
            _use(be, v, defaults)
            mt = [best(lambda: be.mttkrp(T, f, m, out=out[m])) for m in modes]
            ph = [best(lambda: be.phi(T, f, m, f[m], 1e-10, out=out[m])) for m in modes]
            got = [(be.to_numpy(be.mttkrp(T, f, m)), be.to_numpy(be.phi(T, f, m, f[m], 1e-10)))
                   for m in modes]
            if ref is None:
                ref = got
            same = all(np.array_equal(a, c) for g, h in zip(ref, got) for a, c in zip(g, h))
            print(f"round {rnd} {name}: MTTKRP "
                  + " ".join(f"{x:.3f}" for x in mt) + " | Φ " + " ".join(f"{x:.3f}" for x in ph)
                  + f" ms | same bits as {args.variants[0]}: {same}", flush=True)
            res["rounds"].append({"round": rnd, "variant": name, "mttkrp_ms": mt, "phi_ms": ph,
                                  "same_bits": same})
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
