"""Per-kernel device time of GCP steps (OpenCL profiling events)."""
import sys, collections, numpy as np
import pyopencl as cl
_CQ = cl.CommandQueue
class ProfQueue(_CQ):
    def __init__(self, ctx, device=None, properties=None):
        super().__init__(ctx, device, properties=cl.command_queue_properties.PROFILING_ENABLE)
cl.CommandQueue = ProfQueue
sys.argv = [sys.argv[0]] + sys.argv[1:]
from benchmarks.experiments import bench_gcp_steps as B
from benchmarks.synth import synthetic_tensor
from sktensor_fast.backends import get_backend, gcp_plan
from sktensor_fast.decomposition.losses import get_loss
events = []
orig_call = cl.Kernel.__call__
def call(self, *a, **k):
    ev = orig_call(self, *a, **k)
    events.append((self.function_name, ev))
    return ev
cl.Kernel.__call__ = call
orig_nd = cl.enqueue_nd_range_kernel
def nd(queue, kernel, *a, **k):
    ev = orig_nd(queue, kernel, *a, **k)
    events.append((kernel.function_name, ev))
    return ev
cl.enqueue_nd_range_kernel = nd
nnz = float(sys.argv[1]) if len(sys.argv) > 1 else 2e7
shape = (12092, 9184, 28818)
X = synthetic_tensor(shape, int(nnz), seed=0)
be = get_backend("gpu")
n_zero = int(np.prod(shape, dtype=object)) - X.nnz
ng, nl = gcp_plan.default_counts("stratified", X.nnz, n_zero)
T = be.prepare(X)
state = be.gcp.setup(T, "stratified", ng, nl, 1)
loss = get_loss("poisson")
rng = np.random.default_rng(0)
U0 = [rng.uniform(0.1, 1.0, (s, 16)) for s in shape]
B.run(be, T, state, U0, loss, 20, "steps")
events.clear()
t = B.run(be, T, state, U0, loss, 500, "steps")[0]
tot = collections.defaultdict(float); cnt = collections.Counter()
for name, ev in events:
    try:
        tot[name] += (ev.profile.end - ev.profile.start) * 1e-9; cnt[name] += 1
    except Exception as e:
        pass
print(f"wall {t / 500 * 1e3:.3f} ms/step; device time per step by kernel:")
for name, s in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"  {name:28s} {s / 500 * 1e3:8.3f} ms/step  {cnt[name] / 500:.2f} launches/step")
