"""A CP-APR MU fit on a device and the parts of its outer iteration, each timed alone.

    python benchmarks/experiments/bench_cpapr_parts.py --device gpu --out parts.json
    # two versions taking turns (the package first on the path is the one timed):
    PYTHONPATH=old_tree python benchmarks/experiments/bench_cpapr_parts.py --label old ...

For a synthetic tensor of ``--shape`` / ``--nnz`` (NELL-2's by default, ``benchmarks/synth.py``),
R = 16, fp64: seconds of ``--fits`` fits of ``--outer`` outer iterations (``tol=0``) after a
fit of one that prepares the tensor and builds the kernels, and their log-likelihood; then in
milliseconds, the best of several calls with the queue finished: the Poisson data term (the
log-likelihood's pass over the nonzeros), the KKT violation of one inner iteration (a
reduction brought back to the host) and Φ of every mode.
"""
import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.append(here)      # appended: a tree named first by PYTHONPATH stays the one timed

from benchmarks.bench_opencl import timed  # noqa: E402
from benchmarks.experiments._args import add_tensor_args  # noqa: E402
from benchmarks.synth import synthetic_tensor  # noqa: E402
import sktensor_fast  # noqa: E402
from sktensor_fast import CPAPR  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tensor_args(p)
    p.add_argument("--outer", type=int, default=5)
    p.add_argument("--fits", type=int, default=3)
    p.add_argument("--label", default="")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")

    shape = tuple(args.shape)
    X = synthetic_tensor(shape, int(args.nnz), seed=0)
    be = get_backend(args.device)
    fin = be.queue.finish if hasattr(be, "queue") else (lambda: None)

    def best(fn, k=7):
        return timed(fn, fin, k) * 1e3

    R = args.rank
    CPAPR(rank=R, max_iter=1, tol=0, random_state=0, device=args.device).fit(X)
    fits = []
    for _ in range(args.fits):
        t0 = time.perf_counter()
        model = CPAPR(rank=R, max_iter=args.outer, tol=0, random_state=0,
                      device=args.device).fit(X)
        fits.append(time.perf_counter() - t0)
    T = be.prepare(X)
    rng = np.random.default_rng(0)
    A = [be.asarray(rng.random((s, R)) + 0.1) for s in shape]
    w = rng.random(R) + 0.5
    B = be.asarray(be.to_numpy(A[1]))
    Phi = be.phi(T, A, 1, B, 1e-10)
    res = {"label": args.label, "package": os.path.dirname(sktensor_fast.__file__),
           "device": be.info().get("device", args.device), "shape": shape,
           "nnz": int(X.nnz), "rank": R, "outer": args.outer, "fit_s": fits,
           "log_likelihood": float(model.log_likelihood_),
           "data_term_ms": best(lambda: be.poisson_data_term(T, w, A, 1e-10)),
           "data_term": float(be.poisson_data_term(T, w, A, 1e-10)),
           "kkt_ms": best(lambda: be.apr.kkt_violation(B, Phi), 20),
           "phi_ms": [best(lambda: be.phi(T, A, n, A[n], 1e-10)) for n in range(len(shape))]}
    print(json.dumps(res), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
