"""
CPU and OpenCL timings
======================

The same estimator runs on the compiled CPU kernels (``device="cpu"``) or on an OpenCL device
(``device="opencl"``, ``"gpu"`` or ``"opencl:P:D"``), with the same Python code and the same
answer.  This example times whole CP-ALS and CP-APR fits on synthetic sparse tensors of
growing size on the CPU and, when :func:`~sktensor_fast.list_devices` reports a usable OpenCL
device, on that device too.  Without one, only the CPU curves are drawn.

The timings are those of the machine that built this page (a few cores, possibly shared with
other jobs, where threads that wait for each other can make the CPU fits much slower than on a
quiet machine), so read them as an example of the measurement, not as a benchmark: see
:doc:`/benchmarks` for measured numbers.
"""

# %%
# Devices
# -------
import time

import matplotlib.pyplot as plt
import numpy as np

import sktensor_fast
from sktensor_fast import CPALS, CPAPR, SparseTensor

devices = [d for d in sktensor_fast.list_devices() if d["usable"]]
for d in sktensor_fast.list_devices():
    print(
        f"{d['device']}: {d['name'].strip()} ({d['type']}), "
        + (
            "usable"
            if d["usable"]
            else f"unusable: {d['error'].splitlines()[0]}"
        )
    )
print("CPU threads:", sktensor_fast.get_num_threads())
targets = ["cpu"] + [d["device"] for d in devices[:1]]
names = {"cpu": f"CPU, {sktensor_fast.get_num_threads()} threads"}
if devices:
    names[devices[0]["device"]] = f"OpenCL: {devices[0]['name'].strip()}"

# %%
# Synthetic count tensors
# -----------------------
# Coordinates drawn with a skew (a few heavy rows, as in real data), counts ≥ 1.


def synthetic(shape, nnz, seed=0):
    rng = np.random.default_rng(seed)
    subs = np.stack(
        [np.minimum(rng.zipf(1.3, nnz) - 1, n - 1) for n in shape], axis=1
    )
    subs = (subs + rng.integers(0, 7, size=subs.shape)) % np.array(shape)
    return SparseTensor(subs, rng.poisson(1.0, nnz) + 1.0, shape)


sizes = [10_000, 30_000, 100_000]
tensors = [synthetic((2000, 1500, 1000), n) for n in sizes]
print("nonzeros:", [X.nnz for X in tensors])

# %%
# Timings
# -------
# Fixed work per fit (``tol=0``): 10 CP-ALS iterations, 3 CP-APR outer iterations, the best
# of 2 runs.  A first small fit on each device compiles its kernels, so that the timings do not
# include it.
fits = {
    "CP-ALS, 10 iterations": lambda dev: CPALS(
        rank=16, max_iter=10, tol=0, random_state=0, device=dev
    ),
    "CP-APR (mu), 3 outer iterations": lambda dev: CPAPR(
        rank=16, max_iter=3, tol=0, random_state=0, device=dev
    ),
}
for dev in targets:
    for make in fits.values():
        make(dev).fit(tensors[0])  # warm-up: kernel builds

times = {(fit, dev): [] for fit in fits for dev in targets}
for X in tensors:
    for fit, make in fits.items():
        for dev in targets:
            best = np.inf
            for _ in range(2):  # best of 2
                t0 = time.perf_counter()
                make(dev).fit(X)
                best = min(best, time.perf_counter() - t0)
            times[fit, dev].append(best)
for (fit, dev), t in times.items():
    print(f"{fit:32s} {dev:11s} " + "  ".join(f"{s:.3f}s" for s in t))

# %%
# The figure
# ----------
fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), layout="constrained")
for ax, fit in zip(axes, fits):
    for dev in targets:
        ax.loglog(sizes, times[fit, dev], marker="o", label=names[dev])
    ax.set(title=fit, xlabel="nonzeros", ylabel="seconds per fit")
    ax.legend()
if not devices:
    fig.suptitle("no usable OpenCL device on this machine: CPU only")
plt.show()
