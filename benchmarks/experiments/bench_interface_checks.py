"""What the argument checks of the kernel interface cost per call, against the call itself.

    python benchmarks/experiments/bench_interface_checks.py [--rank 8] [--samples 2000] [--threads 1]

The GCP primitives (``backend.gcp``) and the CP-APR steps (``backend.apr``) check their
arguments once, in ``backends/base.py``, before the backend's implementation runs.  This
times, on the embedded flights tensor with the CPU backend, one stochastic GCP step
(``sampled_gradient`` + the optimiser's step, ``optimizer_update``) through the public methods
and through the implementations directly (``_sampled_gradient`` / ``_optimizer_update``: no
checks), and the
same steps as the estimator takes them, ``--steps`` at a time in one ``steps`` call (checked
once per call) against ``_steps``; best of several repeats, interleaved.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from sktensor_fast import num_threads  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402
from sktensor_fast.datasets import load_flights_routes  # noqa: E402
from sktensor_fast.decomposition.losses import get_loss  # noqa: E402
from sktensor_fast.decomposition.optimizers import make_optimizer  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--samples", type=int, default=2000,
                   help="samples of nonzeros and of zeros per step (default 2000 each)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    be = get_backend("cpu")
    X = load_flights_routes().tensor
    T = be.prepare(X, be.storage_format("auto", ("gcp",)))
    g = be.gcp
    state = g.setup(T, "stratified", (args.samples, args.samples), (100, 100), 0)
    rng = np.random.default_rng(0)
    U = [rng.random((s, args.rank)) for s in X.shape]
    w = np.ones(args.rank)
    loss = get_loss("poisson")
    G = [np.zeros_like(u) for u in U]
    opt = make_optimizer("adam", learning_rate=1e-6).start(be, U)
    act = (True,) * X.ndim

    def checked(i):
        g.sampled_gradient(T, state, w, U, loss, 1, i, out=G)
        opt.step(be, U, G, 0.0)

    def unchecked(i):
        g._sampled_gradient(T, state, w, U, loss, 1, i, G, act, False)
        opt.t += 1
        g._optimizer_update("adam", U, G, opt.moments, opt.coefficients(opt.t), 0.0, act)

    def loop_checked():
        g.steps(T, state, w, U, loss, 1, 0, args.steps, opt, 0.0, out=G)

    def loop_unchecked():
        g._steps(T, state, w, U, loss, 1, 0, args.steps, opt, 0.0, act, G, None, None)

    best = {k: np.inf for k in ("checked", "unchecked", "steps", "_steps")}
    with num_threads(args.threads):
        for _ in range(args.repeat):          # interleaved, so that all see the same load
            for name, step in (("checked", checked), ("unchecked", unchecked)):
                t0 = time.perf_counter()
                for i in range(args.steps):
                    step(i)
                best[name] = min(best[name], (time.perf_counter() - t0) / args.steps)
            for name, loop in (("steps", loop_checked), ("_steps", loop_unchecked)):
                t0 = time.perf_counter()
                loop()
                best[name] = min(best[name], (time.perf_counter() - t0) / args.steps)
    print(f"GCP step on {X.shape}, nnz {X.nnz}, rank {args.rank}, {2 * args.samples} samples, "
          f"{args.threads} thread(s), best of {args.repeat} x {args.steps} steps; "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"  public (checked): {best['checked'] * 1e6:8.1f} us/step")
    print(f"  implementations : {best['unchecked'] * 1e6:8.1f} us/step")
    print(f"  ratio           : {best['checked'] / best['unchecked']:.3f}")
    print(f"  steps() call    : {best['steps'] * 1e6:8.1f} us/step (the estimator's path)")
    print(f"  _steps() call   : {best['_steps'] * 1e6:8.1f} us/step")
    print(f"  ratio           : {best['steps'] / best['_steps']:.3f}")


if __name__ == "__main__":
    main()
