"""Host time to enqueue a zero fill of a device buffer, and its device time, three ways:
``clEnqueueFillBuffer`` (``pyopencl.enqueue_fill_buffer``, what ``fill_zero`` does), a launch
of a kernel writing zero words through ``backend.launch``, and the same kernel object called
with its arguments set once.

    python benchmarks/experiments/bench_fill.py [DEVICE]     # gpu by default

For outputs of 24 x 16, 1717 x 16 and 28818 x 16 float64 entries (Uber's smallest and largest
modes, NELL-2's largest), 2000 enqueues each, then one queue finish; best of 3.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.experiments._profiling import device_seconds, install  # noqa: E402
events = []
recording = [False]
install(events, lambda: recording[0], transfers=True)
from sktensor_fast.backends import get_backend  # noqa: E402

be = get_backend(sys.argv[1] if len(sys.argv) > 1 else "gpu")
cl = be.cl
ZERO = """__kernel void zero_words(const long n, __global uint* a)
{ const long i = get_global_id(0); if (i < n) a[i] = 0; }"""
knl = cl.Program(be.ctx, ZERO).build().zero_words
print(be.device.name)
for rows in (24, 1717, 28818):
    a = be.zeros((rows, 16), np.float64)
    n = a.nbytes // 4
    g, l = be.geometry((n,))
    knl2 = cl.Program(be.ctx, ZERO).build().zero_words
    knl2.set_args(np.int64(n), a.data)
    ways = {
        "fill_buffer": lambda: cl.enqueue_fill_buffer(be.queue, a.data, np.zeros(1), 0, a.nbytes),
        "launch": lambda: be.launch(knl, (n,), np.int64(n), a.data),
        "args_set": lambda: cl.enqueue_nd_range_kernel(be.queue, knl2, g, l),
    }
    for name, fn in ways.items():
        best = 1e9
        for r in range(3):
            be.queue.finish()
            events.clear()
            recording[0] = r == 2
            t = time.perf_counter()
            for _ in range(2000):
                fn()
            host = (time.perf_counter() - t) / 2000
            be.queue.finish()
            recording[0] = False
            best = min(best, host)
        dev = [device_seconds(e) for _, e in events]
        dev = [d for d in dev if d is not None]
        print(f"{rows:6d} x 16  {name:12s} host {best * 1e6:6.1f} us/enqueue  "
              f"device {np.median(dev) * 1e6 if dev else float('nan'):6.1f} us")
