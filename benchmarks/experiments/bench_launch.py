"""What one kernel launch costs the host through PyOpenCL, and what an MTTKRP call costs.

    python benchmarks/experiments/bench_launch.py --device gpu

An empty kernel of 15 arguments (8 buffers, 7 scalars) launched 2000 times: PyOpenCL's
``kernel(queue, global, local, *args)`` (every argument set at every launch), the arguments set
once and ``enqueue_nd_range_kernel`` alone, ``set_args`` then the enqueue, and the first and
last again with the scalars' types declared (``program.typed_kernel``, as the package's
kernels are);
then ``backend.mttkrp`` on a small tensor (Uber's shape, 200,000 nonzeros, R = 16, into a kept
output) with the queue finished after 500 calls.  Microseconds per launch / call: the host's
time to enqueue, and with the device's work finished.
"""
import argparse
import os
import sys
import time

import numpy as np
import pyopencl as cl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.synth import synthetic_tensor  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402


def _time(q, fn, n):
    fn()
    q.finish()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    q.finish()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="gpu")
    p.add_argument("--nnz", type=int, default=200_000)
    args = p.parse_args(argv)
    be = get_backend(args.device)
    q = be.queue
    src = ("__kernel void k(" + ", ".join(f"__global double* a{i}" for i in range(8))
           + ", const long n, const int r, const int m, const long c, const double e, "
           "const int f, const int g) { if (get_global_id(0) == 0 && n < 0) a0[0] = 1; }")
    knl = cl.Program(be.ctx, src).build().k
    bufs = [cl.Buffer(be.ctx, cl.mem_flags.READ_WRITE, 1024) for _ in range(8)]
    kargs = bufs + [np.int64(1), np.int32(2), np.int32(3), np.int64(4), np.float64(1.0),
                    np.int32(5), np.int32(6)]
    g, l = (4096,), (128,)
    print(f"{be.name}: µs per launch (enqueue / with the device finished)")
    rows = [("kernel(queue, g, l, *args)", lambda: knl(q, g, l, *kargs))]
    knl2 = cl.Program(be.ctx, src).build().k
    knl2.set_args(*kargs)
    rows.append(("args set once, enqueue_nd_range_kernel",
                 lambda: cl.enqueue_nd_range_kernel(q, knl2, g, l)))
    rows.append(("set_args, enqueue_nd_range_kernel",
                 lambda: (knl2.set_args(*kargs), cl.enqueue_nd_range_kernel(q, knl2, g, l))))
    from sktensor_fast.backends.opencl.program import ARG_INFO, typed_kernel
    knl3 = typed_kernel(cl.Program(be.ctx, src).build(options=[ARG_INFO]).k)
    rows.append(("scalar types declared, kernel(queue, ...)", lambda: knl3(q, g, l, *kargs)))
    rows.append(("scalar types declared, set_args, enqueue",
                 lambda: (knl3.set_args(*kargs), cl.enqueue_nd_range_kernel(q, knl3, g, l))))
    for name, fn in rows:
        e, t = _time(q, fn, 2000)
        print(f"  {name:42s} {e:7.1f} / {t:7.1f}")
    X = synthetic_tensor((183, 24, 1140, 1717), args.nnz, seed=0)
    T = be.prepare(X)
    rng = np.random.default_rng(0)
    F = [be.asarray(rng.random((s, 16))) for s in X.shape]
    out = be.zeros((X.shape[1], 16), X.dtype)
    e, t = _time(q, lambda: be.mttkrp(T, F, 1, out=out), 500)
    print(f"  {'backend.mttkrp, mode 1 (per call)':42s} {e:7.1f} / {t:7.1f}")


if __name__ == "__main__":
    main()
