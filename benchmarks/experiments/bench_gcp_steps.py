"""GCP-Adam steps on an OpenCL device: time per step and kernel launches per step.

    python benchmarks/experiments/bench_gcp_steps.py                      # 1M nonzeros, R = 16
    python benchmarks/experiments/bench_gcp_steps.py --device opencl:0:0 --nnz 2e7 --steps 2000
    python benchmarks/experiments/bench_gcp_steps.py \\
        --tns ../shared/data/flights-routes/tensor.tns.gz
    python benchmarks/experiments/bench_gcp_steps.py --reduction atomic   # the opt-in atomic path

The tensor is synthetic (``benchmarks/synth.py``, Zipf-skewed coordinates, ``--shape``, default
NELL-2's shape) or read from a FROSTT ``.tns`` file (``--tns``).  The sample counts are GCP's
defaults for it (stratified: ``max(3 nnz / 1000, min(1000, max(100, nnz / 100)))`` nonzeros and
as many zeros per step), the loss Poisson, the solver Adam, rank ``--rank``.

Two ways of running ``--steps`` steps are timed, after ``--warmup`` steps of each (which build
the kernels), best of ``--repeat`` rounds in which the ways alternate, the device finished
before and after each run:

- ``steps``: one ``backend.gcp.steps`` call (the backend's own loop; on the OpenCL backend the
  steps enqueued without a host round trip);
- ``stepwise``: the generic loop of ``GcpKernels._stepwise`` (``sampled_gradient`` then
  ``optimizer.step``, with the host in between);
- ``steps_rank_arg``: ``steps`` with the rank passed to the kernels as an argument
  (``specialize = 0``), where the backend compiles it in by default (GPUs): the kernels'
  before and after in one process, on the same tensor.

Launches are counted by wrapping ``pyopencl.Kernel.__call__`` and
``pyopencl.enqueue_nd_range_kernel`` (kernels) and the fill / copy enqueues (``other``) during
one timed run.  The script only uses the public step interface, so it measures any version of
the package (run it with another checkout on ``PYTHONPATH`` for a before / after).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.synth import synthetic_tensor  # noqa: E402
from sktensor_fast import load_tns  # noqa: E402
from sktensor_fast.backends import get_backend, gcp_plan  # noqa: E402
from sktensor_fast.decomposition.losses import get_loss  # noqa: E402
from sktensor_fast.decomposition.optimizers import make_optimizer  # noqa: E402


class LaunchCounter:
    """Counts kernel launches and other enqueues (fills, copies) made through PyOpenCL."""

    def __init__(self):
        import pyopencl as cl
        self.cl = cl
        self.kernels = self.other = 0
        self.on = False
        self._saved = []

    def _wrap(self, owner, name, kind):
        orig = getattr(owner, name)
        counter = self

        def wrapped(*args, **kwargs):
            if counter.on:
                setattr(counter, kind, getattr(counter, kind) + 1)
            return orig(*args, **kwargs)
        setattr(owner, name, wrapped)
        self._saved.append((owner, name, orig))

    def __enter__(self):
        cl = self.cl
        self._wrap(cl.Kernel, "__call__", "kernels")
        self._wrap(cl, "enqueue_nd_range_kernel", "kernels")
        for name in ("enqueue_fill_buffer", "enqueue_copy"):
            self._wrap(cl, name, "other")
        return self

    def __exit__(self, *exc):
        for owner, name, orig in reversed(self._saved):
            setattr(owner, name, orig)


def run(be, T, state, U0, loss, n, way, counter=None, first=0):
    """``n`` Adam steps from factors ``U0``; returns the seconds (device finished)."""
    U = [be.asarray(u) for u in U0]
    opt = make_optimizer("adam", learning_rate=1e-3).start(be, U)
    ones = np.ones(U0[0].shape[1])
    be.queue.finish()
    if counter is not None:
        counter.kernels = counter.other = 0
        counter.on = True
    spec = getattr(be, "specialize", None)
    t = time.perf_counter()
    if way == "steps_rank_arg":
        be.specialize = 0
        try:
            be.gcp.steps(T, state, ones, U, loss, 7, first, n, opt, loss.lower)
        finally:
            be.specialize = spec
    elif way == "steps":
        be.gcp.steps(T, state, ones, U, loss, 7, first, n, opt, loss.lower)
    else:
        be.gcp._stepwise(T, state, ones, U, loss, 7, first, n, opt, loss.lower,
                         (True,) * T.ndim, None, None, None)
    be.queue.finish()
    elapsed = time.perf_counter() - t
    if counter is not None:
        counter.on = False
    return elapsed, [be.to_numpy(u) for u in U]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="opencl", help="an OpenCL device: opencl, gpu, "
                    "opencl:P:D (default: opencl)")
    ap.add_argument("--tns", default=None, help="a FROSTT .tns(.gz) file instead of the "
                    "synthetic tensor")
    ap.add_argument("--nnz", type=float, default=1e6)
    ap.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reduction", choices=("deterministic", "atomic"), default=None,
                    help="the gcp_reduction option (default: the backend's)")
    ap.add_argument("--ways", nargs="+", default=["steps", "stepwise"],
                    choices=("steps", "stepwise", "steps_rank_arg"))
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)

    if args.tns:
        X = load_tns(args.tns)
        name = os.path.basename(os.path.dirname(os.path.abspath(args.tns)))
    else:
        X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
        name = f"synthetic {'x'.join(map(str, args.shape))}"
    options = {"gcp_reduction": args.reduction} if args.reduction else None
    be = get_backend(args.device, options) if options else get_backend(args.device)
    n_zero = int(np.prod([int(s) for s in X.shape], dtype=object)) - X.nnz
    n_grad, n_loss = gcp_plan.default_counts("stratified", X.nnz, n_zero)
    T = be.prepare(X)
    state = be.gcp.setup(T, "stratified", n_grad, n_loss, 1)
    loss = get_loss("poisson")
    rng = np.random.default_rng(0)
    U0 = [rng.uniform(0.1, 1.0, (s, args.rank)) for s in X.shape]
    print(f"{name}: shape {X.shape}, {X.nnz} nonzeros, rank {args.rank}, "
          f"{sum(state.n_grad)} samples per step, device {be.device.name.strip()}, "
          f"reduction {getattr(be, 'gcp_reduction', 'n/a')}")
    results = {"tensor": name, "shape": list(X.shape), "nnz": int(X.nnz), "rank": args.rank,
               "samples": int(sum(state.n_grad)), "device": be.device.name.strip(),
               "reduction": getattr(be, "gcp_reduction", None), "steps": args.steps, "ways": {}}
    models = {}
    best = {}
    with LaunchCounter() as counter:
        for way in args.ways:
            run(be, T, state, U0, loss, args.warmup, way)
        for _ in range(args.repeat):    # the ways alternate: a loaded machine slows all alike
            for way in args.ways:
                t = run(be, T, state, U0, loss, args.steps, way)[0]
                best[way] = min(best.get(way, t), t)
        for way in args.ways:
            _, models[way] = run(be, T, state, U0, loss, args.steps, way, counter)
            per = best[way] / args.steps
            res = {"ms_per_step": 1e3 * per, "kernels_per_step": counter.kernels / args.steps,
                   "other_enqueues_per_step": counter.other / args.steps}
            results["ways"][way] = res
            print(f"  {way:9s} {1e3 * per:8.3f} ms/step  {res['kernels_per_step']:6.2f} "
                  f"kernel launches/step  {res['other_enqueues_per_step']:5.2f} other "
                  f"enqueues/step")
    first_way = args.ways[0]
    for way in args.ways[1:]:
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(models[first_way],
                                                                models[way]))
        results[f"max_abs_diff_{first_way}_vs_{way}"] = diff
        print(f"  largest difference of the factors, {first_way} vs {way}: {diff:.3g}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
