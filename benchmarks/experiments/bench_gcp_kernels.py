"""Device time of each kernel of GCP's fused steps on an OpenCL device (profiling events).

    python benchmarks/experiments/bench_gcp_kernels.py [NNZ] [DEVICE] [AHEAD]   # 2e7, gpu, 8
    python benchmarks/experiments/bench_gcp_kernels.py 76879419 gpu --rank-arg
    python benchmarks/experiments/bench_gcp_kernels.py 76879419 gpu --no-pipe --segment 64

The same synthetic NELL-2-shaped tensor (Zipf-skewed coordinates), rank 16, Poisson loss and
default sample counts as ``bench_gcp_steps.py``; 20 steps to warm up, then 500 steps of
``backend.gcp.steps`` with every launch's start and end read from its event.  Prints the wall
time per step and, per kernel, its device time and launches per step.  ``--rank-arg``: the
kernels take the rank as an argument (``specialize = 0``) where the backend would compile it
in (GPUs); ``--no-pipe``: ``gcp_run_sums`` reads its positions in blocks of AHEAD, not as a
pipeline (``gcp_ops.PIPELINE_SUMS``); ``--segment N``: positions per work-item of the row
sums (``gcp_ops.RUN_SEGMENT``); ``--maxrreg N``: NVIDIA's register limit for the GCP program;
``--no-draw-lanes``: ``gcp_draw_terms`` with one work-item per sample for the model values
(``gcp_ops.DRAW_LANES``); ``--sort-bits N``: most bits of a row per pass of the row sort
(``gcp_ops.GCP_SORT_BITS``; fewer bits, more passes with smaller digit tables);
``--sort-wg N`` / ``--sort-per N``: work-items of a group of the row sort and samples per
work-item (``gcp_ops._SORT_WG`` / ``_SORT_PER``); ``--define NAME``: a macro for the build
of the GCP program.
"""
import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.experiments._profiling import device_seconds, install  # noqa: E402
events = []
install(events)
from benchmarks.experiments import bench_gcp_steps as B  # noqa: E402
from benchmarks.synth import synthetic_tensor  # noqa: E402
from sktensor_fast.backends import get_backend, gcp_plan  # noqa: E402
from sktensor_fast.decomposition.losses import get_loss  # noqa: E402
def _flag(name, value=False):
    """Remove ``name`` (and its value) from sys.argv; its value, True, or None if absent."""
    if name not in sys.argv:
        return None
    i = sys.argv.index(name)
    got = sys.argv[i + 1] if value else True
    del sys.argv[i:i + 1 + bool(value)]
    return got


rank_arg = _flag("--rank-arg")
no_pipe = _flag("--no-pipe")
segment = _flag("--segment", True)
maxrreg = _flag("--maxrreg", True)
no_draw_lanes = _flag("--no-draw-lanes")
sort_wg = _flag("--sort-wg", True)
sort_per = _flag("--sort-per", True)
sort_bits = _flag("--sort-bits", True)
define = _flag("--define", True)
argv = list(sys.argv)
nnz = float(argv[1]) if len(argv) > 1 else 2e7
shape = (12092, 9184, 28818)
X = synthetic_tensor(shape, int(nnz), seed=0)
be = get_backend(argv[2] if len(argv) > 2 else "gpu")
if rank_arg:
    be.specialize = 0
from sktensor_fast.backends.opencl import gcp_ops  # noqa: E402
if len(argv) > 3:   # positions read ahead by gcp_run_sums (its programs built with it)
    gcp_ops.RUN_AHEAD = int(argv[3])
if no_pipe:
    gcp_ops.PIPELINE_SUMS = False
if segment:
    gcp_ops.RUN_SEGMENT = int(segment)
if no_draw_lanes:
    gcp_ops.DRAW_LANES = False
if sort_wg:
    gcp_ops._SORT_WG = int(sort_wg)
if sort_per:
    gcp_ops._SORT_PER = int(sort_per)
if sort_bits:
    gcp_ops.GCP_SORT_BITS = int(sort_bits)
if maxrreg:
    gcp_ops.EXTRA_BUILD_OPTIONS = (f"-cl-nv-maxrregcount={int(maxrreg)}",)
if define:
    gcp_ops.EXTRA_BUILD_OPTIONS += (f"-D{define}",)
print("settings:", {"rank_arg": bool(rank_arg), "pipe": gcp_ops.PIPELINE_SUMS,
                    "segment": gcp_ops.RUN_SEGMENT, "maxrreg": maxrreg,
                    "draw_lanes": gcp_ops.DRAW_LANES, "sort_wg": gcp_ops._SORT_WG,
                    "sort_per": gcp_ops._SORT_PER, "sort_bits": gcp_ops.GCP_SORT_BITS})
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
    sec = device_seconds(ev)
    if sec is not None:
        tot[name] += sec
        cnt[name] += 1
print(f"wall {t / 500 * 1e3:.3f} ms/step; device time per step by kernel "
      f"(total {sum(tot.values()) / 500 * 1e3:.3f} ms):")
for name, s in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"  {name:28s} {s / 500 * 1e3:8.3f} ms/step  {cnt[name] / 500:.2f} launches/step")
