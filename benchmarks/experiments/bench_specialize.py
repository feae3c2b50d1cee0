"""The lanes MTTKRP / Φ kernels compiled for the output mode and the rank, against the kernel
that takes them as arguments (``OpenCLBackend.specialize``: 0 arguments, 1 the mode, 2 the
rank, 3 both).

    python benchmarks/experiments/bench_specialize.py --device gpu
    python benchmarks/experiments/bench_specialize.py --device gpu --shape 183 24 1140 1717 \\
        --nnz 3309490 --repeat 20

For a synthetic tensor of ``--shape`` and ``--nnz`` (``benchmarks/synth.py``), R = ``--rank``,
fp64: the first MTTKRP and Φ of mode 0 of every setting (their builds), then ``--rounds``
rounds over the settings in turn, each the best of ``--repeat`` calls per mode with the queue
finished (after one call), and whether every setting's results equal the arguments' bit for
bit.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.bench_opencl import timed  # noqa: E402
from benchmarks.experiments._args import add_tensor_args  # noqa: E402
from benchmarks.synth import synthetic_tensor  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402

SETTINGS = (0, 1, 2, 3)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tensor_args(p)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON file of the results")
    args = p.parse_args(argv)

    shape = tuple(args.shape)
    X = synthetic_tensor(shape, int(args.nnz), seed=0)
    be = get_backend(args.device)
    be.layout = "lanes"
    print(f"{be.info()['device']}: {shape}, {X.nnz:,} nonzeros, R = {args.rank}", flush=True)
    T = be.prepare(X)
    rng = np.random.default_rng(0)
    f = [be.asarray(rng.random((s, args.rank))) for s in shape]
    out = [be.zeros((s, args.rank), np.float64) for s in shape]
    fin = be.queue.finish
    fin()
    modes = range(len(shape))

    def best(fn):
        return timed(fn, fin, args.repeat) * 1e3

    res = {"device": be.info()["device"], "shape": shape, "nnz": int(X.nnz), "rank": args.rank,
           "argv": sys.argv[1:], "builds_s": {}, "rounds": []}
    for spec in SETTINGS:
        be.specialize = spec
        t0 = time.perf_counter()
        be.mttkrp(T, f, 0, out=out[0])
        be.phi(T, f, 0, f[0], 1e-10, out=out[0])
        fin()
        res["builds_s"][spec] = time.perf_counter() - t0
        print(f"first MTTKRP and Φ of mode 0, setting {spec}: "
              f"{res['builds_s'][spec]:.3f} s", flush=True)
    ref = None
    for rnd in range(args.rounds):
        for spec in SETTINGS:
            be.specialize = spec
            mt = [best(lambda: be.mttkrp(T, f, m, out=out[m])) for m in modes]
            ph = [best(lambda: be.phi(T, f, m, f[m], 1e-10, out=out[m])) for m in modes]
            got = [(be.to_numpy(be.mttkrp(T, f, m)), be.to_numpy(be.phi(T, f, m, f[m], 1e-10)))
                   for m in modes]
            if ref is None:
                ref = got
            same = all(np.array_equal(a, b) for g, h in zip(ref, got) for a, b in zip(g, h))
            print(f"round {rnd} setting {spec}: MTTKRP "
                  + " ".join(f"{x:.3f}" for x in mt) + " | Φ " + " ".join(f"{x:.3f}" for x in ph)
                  + f" ms | same bits as setting 0: {same}", flush=True)
            res["rounds"].append({"round": rnd, "setting": spec, "mttkrp_ms": mt, "phi_ms": ph,
                                  "same_bits": same})
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
