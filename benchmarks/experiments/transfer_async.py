"""Whether a transfer enqueued behind a running kernel returns at once (asynchronous) or waits
for the kernel: the host time of each enqueue call next to the kernel's time, with the
transfer's event kept until the queue is done and, for transfers between host and device
memory, with the event dropped at once (PyOpenCL then waits for the transfer).

    python benchmarks/experiments/transfer_async.py --nnz 2e7

Enqueues a MTTKRP of a synthetic tensor (several ms on a GPU), then one transfer of a factor
matrix's worth of rows, and reports the milliseconds the enqueue call took, the time until
the transfer was done and the MTTKRP alone, for: download into page-locked memory
(``host_buffer``) and into plain memory, upload from each, copies between the device array
and the page-locked memory's own buffer object, a small upload, a device-to-device copy, a kernel
launch (``scale_columns``) and an allocation from the pool.  Median of ``--repeat``.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.synth import synthetic_tensor  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="gpu")
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    p.add_argument("--nnz", type=float, default=2e7)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    be = get_backend(args.device)
    cl = be.cl
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
    T = be.prepare(X)
    R = args.rank
    rng = np.random.default_rng(0)
    facs = [be.asarray(rng.random((s, R))) for s in X.shape]
    out = be.zeros((X.shape[0], R), np.float64)
    n = X.shape[2]
    dev = be.asarray(rng.random((n, R)))
    dev2 = be.empty((n, R), np.float64)
    pinned = be.host_buffer((n, R), np.float64)
    plain = np.empty((n, R))
    plain[...] = 1.0
    pinned[...] = 1.0
    q = be.queue

    def kernel():
        be.mttkrp(T, facs, 0, out=out)

    def d2h_pinned():
        return cl.enqueue_copy(q, pinned, dev.data, is_blocking=False)

    def d2h_plain():
        return cl.enqueue_copy(q, plain, dev.data, is_blocking=False)

    def h2d_pinned():
        return cl.enqueue_copy(q, dev2.data, pinned, is_blocking=False)

    def h2d_plain():
        return cl.enqueue_copy(q, dev2.data, plain, is_blocking=False)

    def d2d():
        return cl.enqueue_copy(q, dev2.data, dev.data)

    # the page-locked memory's own buffer object (host_buffer maps it): copies between
    # buffers, the host reading / writing through the mapping
    hbuf = getattr(pinned, "buffer", None)     # None: the device gives no page-locked memory

    def d2buf():
        return cl.enqueue_copy(q, hbuf, dev.data, byte_count=dev.nbytes)

    def buf2d():
        return cl.enqueue_copy(q, dev2.data, hbuf, byte_count=dev2.nbytes)

    small = np.ones(R)
    # a page-locked buffer object not kept mapped: mapped for each transfer, without waiting
    # (the mapping made in the queue's order), and released after
    staging = cl.Buffer(be.ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR,
                        dev.nbytes) if be.is_gpu else None
    maps = []

    def d2staging_map():
        cl.enqueue_copy(q, staging, dev.data, byte_count=dev.nbytes)
        maps.append(cl.enqueue_map_buffer(q, staging, cl.map_flags.READ, 0, (n, R),
                                          np.float64, is_blocking=False))

    K = R + R * R + R             # CP-ALS's reductions of a factor update
    few = be.asarray(rng.random(K))
    few_host = np.empty(K)

    def small_down():
        return cl.enqueue_copy(q, few_host, few.data, is_blocking=False)

    def small_map():
        maps.append(cl.enqueue_map_buffer(q, few.data, cl.map_flags.READ, 0, (K,),
                                          np.float64, is_blocking=False))

    def map_device():
        maps.append(cl.enqueue_map_buffer(q, dev.data, cl.map_flags.READ, 0, (n, R),
                                          np.float64, is_blocking=False))

    def small_up():
        return be._upload_async(small, np.float64)

    def launch():
        be.scale_columns(dev2, np.ones(R))

    def alloc():
        be.empty((n, R), np.float64)

    want_dev, want_few = dev.get(), few.get()
    for _ in range(3):
        kernel()
    q.finish()
    t = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        kernel()
        q.finish()
        t.append(time.perf_counter() - t0)
    print(f"{be.info()['device']}: MTTKRP of mode 0 alone {1e3 * np.median(t):.3f} ms "
          f"(nnz {X.nnz}, R {R}); transfers of {n} x {R} float64 ({n * R * 8 / 1e6:.2f} MB)")
    print("| behind the MTTKRP | enqueue call, ms (its event kept) | until done, ms | "
          "enqueue call and the event dropped at once, ms |")
    print("|---|---|---|---|")
    cases = [("download into page-locked memory", d2h_pinned),
             ("download into plain memory", d2h_plain),
             ("upload from page-locked memory", h2d_pinned),
             ("upload from plain memory", h2d_plain),
             ("copy on the device", d2d),
             ("download into the page-locked buffer object", d2buf),
             ("upload from the page-locked buffer object", buf2d),
             (f"upload of {R} values from plain memory (_upload_async)", small_up),
             ("copy into a page-locked buffer object, then its mapping", d2staging_map),
             ("mapping of the device array", map_device),
             (f"download of {K} values into plain memory", small_down),
             (f"mapping of {K} values of a device array", small_map),
             ("kernel launch (scale_columns)", launch),
             ("allocation from the pool", alloc)]
    # a transfer between host and device memory returns a PyOpenCL event that keeps the host
    # array alive and, when it is freed before the transfer is done, waits for the transfer:
    # with the event dropped at once the call takes until the queue has reached it
    returns_event = (d2h_pinned, d2h_plain, h2d_pinned, h2d_plain, small_down)

    def measure(fn, keep):
        calls, dones, wrong = [], [], False
        for _ in range(args.repeat):
            q.finish()
            t0 = time.perf_counter()
            kernel()
            t1 = time.perf_counter()
            got = fn()
            if not keep:
                got = None
            t2 = time.perf_counter()
            q.finish()
            t3 = time.perf_counter()
            got = None
            calls.append(t2 - t1)
            dones.append(t3 - t0)
            while maps:        # the mapped data are the device's; then released
                arr, _ = maps.pop()
                wrong |= not np.array_equal(arr, want_dev if arr.ndim == 2 else want_few)
                arr.base.release(queue=q).wait()
        return 1e3 * np.median(calls), 1e3 * np.median(dones), wrong

    for name, fn in cases:
        if hbuf is None and fn in (d2buf, buf2d, d2staging_map):
            continue
        call, done, wrong = measure(fn, True)
        dropped = f"{measure(fn, False)[0]:.3f}" if fn in returns_event else ""
        if wrong:
            name += " (WRONG DATA)"
        print(f"| {name} | {call:.3f} | {done:.3f} | {dropped} |")
    if hbuf is None:
        return
    # what the host sees through the mapping after a copy between buffers
    want = rng.random((n, R))
    src = be.asarray(want)
    pinned[...] = 0.0
    cl.enqueue_copy(q, hbuf, src.data, byte_count=src.nbytes).wait()
    print(f"page-locked mapping after a device-to-buffer copy holds the data: "
          f"{bool(np.array_equal(np.asarray(pinned), want))}")
    pinned[...] = want[::-1]
    cl.enqueue_copy(q, dev2.data, hbuf, byte_count=dev2.nbytes).wait()
    print(f"a buffer-to-device copy after writing through the mapping moves the data: "
          f"{bool(np.array_equal(dev2.get(), want[::-1]))}")


if __name__ == "__main__":
    main()
