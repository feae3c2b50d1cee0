"""MTTKRP and Phi per mode with the lanes kernel's ROW_REUSE switch off and on, two rounds,
best of 20 calls (the queue finished around each), and whether the results are the same bits.

    python benchmarks/experiments/bench_row_reuse.py                      # NELL-2 shape
    python benchmarks/experiments/bench_row_reuse.py 183 24 1140 1717 3309490   # Uber shape
"""
import os
import time, sys, numpy as np
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.synth import synthetic_tensor
from sktensor_fast.backends import get_backend
from sktensor_fast.backends.opencl.accumulate import SparseKernels
shape = tuple(int(x) for x in sys.argv[1:-1]) if len(sys.argv) > 2 else (12092, 9184, 28818)
nnz = int(float(sys.argv[-1])) if len(sys.argv) > 2 else 76879419
X = synthetic_tensor(shape, nnz, seed=0)
be = get_backend("gpu")
T = be.prepare(X)
R = 16
rng = np.random.default_rng(0)
U = [be.asarray(rng.random((n, R))) for n in shape]
B = [be.asarray(rng.random((n, R))) for n in shape]
def timed(fn, reps=20):
    fn(); be.queue.finish()
    best = 1e9
    for _ in range(reps):
        t = time.perf_counter(); fn(); be.queue.finish(); best = min(best, time.perf_counter() - t)
    return best * 1e3
res = {}
for rnd in range(2):
    for reuse in (False, True):
        SparseKernels.row_reuse = reuse
        m = [timed(lambda: be.mttkrp(T, U, n)) for n in range(len(shape))]
        p = [timed(lambda: be.phi(T, U, n, B[n], 1e-10)) for n in range(len(shape))]
        res[reuse] = ([be.to_numpy(be.mttkrp(T, U, n)) for n in range(len(shape))],
                      [be.to_numpy(be.phi(T, U, n, B[n], 1e-10)) for n in range(len(shape))])
        print(f"round {rnd} reuse {reuse}: MTTKRP " + " ".join(f"{x:.3f}" for x in m)
              + "  Phi " + " ".join(f"{x:.3f}" for x in p) + " ms", flush=True)
same = all(np.array_equal(a, b) for a, b in zip(res[False][0] + res[False][1], res[True][0] + res[True][1]))
print("bitwise equal:", same)
