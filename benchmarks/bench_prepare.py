"""The phases of ``OpenCLBackend.prepare`` on a NELL-2-shaped tensor, each timed alone.

    python benchmarks/bench_prepare.py --device opencl --nnz 2000000          # PoCL, seconds
    python benchmarks/bench_prepare.py --device gpu --nnz 76879419 \\
        --out benchmarks/results/prepare_nell2_h100.json                    # a GPU host

The tensor: ``benchmarks/e2e.py``'s ``nell2_arrays`` (NELL-2's shape, ``--nnz`` distinct
Zipf-skewed coordinates, count values), built into a :class:`~sktensor_fast.SparseTensor`
(not timed); its value statistics are computed once first (the estimators' checks do it
before ``prepare``; reported as ``value_stats_first``).  Every phase is the best of
``--repeat`` runs, OpenCL queues finished around it (seconds):

- ``narrow_pageable``: int64 -> int32 coordinates into a new host array (compiled, all
  threads);
- ``host_copy_vals``: the values copied into a host array by the compiled parallel copy;
- ``stage_alloc_map[MiB]``: allocating and mapping the two page-locked staging buffers of
  ``--stage-mib`` MiB (``CL_MEM_ALLOC_HOST_PTR``), and ``pinned_alloc_map_full`` one
  page-locked buffer as large as the int32 coordinates (and ``pinned_first_fill_full``:
  narrowing into it the first time), for comparison;
- ``upload_subs_pageable`` / ``upload_vals_pageable``: ``enqueue_copy`` from ordinary host
  arrays (the coordinates already narrowed);
- ``upload_subs_staged[MiB]``: narrowing chunk by chunk into the staging buffers while the
  device copies the other one; ``upload_vals_staged[MiB]``: the same for the values (parallel
  copy); ``upload_orders_staged[MiB]``: the host orders' uploads;
- ``host_orders``: the compiled counting sorts of the modes after the first;
- ``device_orders[b]``: the radix sort on the device of every mode after the first, digits of
  at most ``b`` bits (``--radix-bits``), and per mode ``device_order_mode{m}[b]``; the orders
  are checked against the host's;
- ``gather_mode{m}``: the chunk-interleaved copy of mode ``m`` for the backend's layout;
- ``prepare[pinned=P,device_orders=D(,bits=b)]``: the whole ``backend.prepare`` with the
  switches ``OpenCLTensor.PINNED`` / ``DEVICE_ORDERS`` (and ``sort.RADIX_BITS``) set, the
  staging buffers already made (``prepare_cold[...]``: the first ``prepare`` of a fresh
  backend's staging, its allocation included).

JSON with ``--out`` (the machine, load average, thread count, device and all phases).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.common import cpu_model, write_report  # noqa: E402


def _best(fn, repeat, before=None, warm=False):
    """Shortest wall time of ``repeat`` calls of ``fn`` (``before()`` untimed before each;
    ``warm``: two untimed calls first)."""
    if warm:
        fn()
        fn()
    best = np.inf
    for _ in range(repeat):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="opencl", help="'opencl', 'gpu' or 'opencl:P:D'")
    ap.add_argument("--nnz", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--stage-mib", type=int, nargs="+", default=[32],
                    help="sizes of each staging buffer to time (MiB)")
    ap.add_argument("--radix-bits", type=int, nargs="+", default=[4, 5, 6, 8],
                    help="most bits of a digit of the device sort, each timed")
    ap.add_argument("--skip-full-pinned", action="store_true",
                    help="do not time a page-locked buffer as large as the coordinates")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from benchmarks.e2e import nell2_arrays
    from sktensor_fast import SparseTensor
    from sktensor_fast import _threads
    from sktensor_fast._native import _hostcopy
    from sktensor_fast._prepared import value_stats
    from sktensor_fast.backends import get_backend
    from sktensor_fast.backends.opencl import sort
    from sktensor_fast.backends.opencl import tensor as ocl_tensor
    from sktensor_fast.backends.opencl.tensor import (OpenCLTensor, Staging, host_orders,
                                                      narrow_subs, upload_queue)

    t = time.perf_counter()
    subs, vals, shape = nell2_arrays(args.nnz)
    X = SparseTensor(subs, vals, shape)
    del subs, vals
    print(f"tensor {X.shape}, {X.nnz:,} nonzeros built in {time.perf_counter() - t:.1f} s",
          flush=True)
    t = time.perf_counter()
    value_stats(X)
    phases = {"value_stats_first": time.perf_counter() - t}

    be = get_backend(args.device)
    cl = be.cl
    q = be.queue
    tq = upload_queue(be)
    nt = _threads.get_num_threads()
    n, N = X.nnz, X.ndim
    subs64 = np.ascontiguousarray(X.subs, dtype=np.int64)
    v = np.ascontiguousarray(X.vals)
    R = args.repeat

    def finish():
        q.finish()
        tq.finish()

    def put(name, sec):
        phases[name] = sec
        print(f"  {name:42s} {sec * 1e3:9.2f} ms", flush=True)

    print(f"device {be.device.name.strip()}, {nt} threads, load {os.getloadavg()[0]:.2f}")
    put("narrow_pageable", _best(lambda: narrow_subs(X, nt), R))
    subs32 = narrow_subs(X, nt)
    vcopy = np.empty_like(v)
    vcopy[:] = 0
    put("host_copy_vals", _best(
        lambda: _hostcopy.copy_bytes(v.view(np.uint8), vcopy.view(np.uint8), nt), R))
    del vcopy

    d_subs = cl.Buffer(be.ctx, cl.mem_flags.READ_WRITE, max(subs32.nbytes, 4))
    d_vals = cl.Buffer(be.ctx, cl.mem_flags.READ_WRITE, max(v.nbytes, 4))
    d_ord = [cl.Buffer(be.ctx, cl.mem_flags.READ_WRITE, max(4 * n, 4)) for _ in range(N)]

    def pageable(dst, src):
        cl.enqueue_copy(tq, dst, src, is_blocking=False)
        tq.finish()
    put("upload_subs_pageable", _best(lambda: pageable(d_subs, subs32), R))
    put("upload_vals_pageable", _best(lambda: pageable(d_vals, v), R))

    # page-locked memory: the staging pairs, and one buffer the size of the coordinates
    for mib in args.stage_mib:
        def alloc_stage():
            st = Staging(be, mib << 20)
            q.finish()
            return st
        put(f"stage_alloc_map[{mib}]", _best(alloc_stage, R))
    if not args.skip_full_pinned:
        holder = []

        def alloc_full():
            buf = cl.Buffer(be.ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.ALLOC_HOST_PTR,
                            max(subs32.nbytes, 4))
            arr, _ = cl.enqueue_map_buffer(q, buf, cl.map_flags.WRITE, 0, subs32.shape,
                                           np.int32, is_blocking=True)
            holder[:] = [buf, arr]

        def release():
            holder.clear()
            q.finish()
        put("pinned_alloc_map_full", _best(alloc_full, R, before=release))
        from sktensor_fast._native import _construct
        fill_s = up_s = np.inf
        for _ in range(R):
            alloc_full()
            t = time.perf_counter()
            _construct.narrow(subs64, holder[1], nt)
            fill_s = min(fill_s, time.perf_counter() - t)
            t = time.perf_counter()
            cl.enqueue_copy(tq, d_subs, holder[1], is_blocking=False)
            tq.finish()
            up_s = min(up_s, time.perf_counter() - t)
            release()
        put("pinned_first_fill_full", fill_s)
        put("upload_subs_from_full_pinned", up_s)

    for mib in args.stage_mib:
        st = Staging(be, mib << 20)

        def staged(dst, row_bytes, fill):
            st.upload(tq, dst, n, row_bytes, fill)
            tq.finish()
        # (warm: the host memory of a CPU device's "page-locked" buffers is touched the
        # first time here; a GPU driver's is resident from its allocation)
        put(f"upload_subs_staged[{mib}]",
            _best(lambda: staged(d_subs, 4 * N, ocl_tensor._narrow_fill(subs64, N)), R,
                  warm=True))
        put(f"upload_vals_staged[{mib}]",
            _best(lambda: staged(d_vals, v.itemsize, ocl_tensor._copy_fill(v)), R,
                  warm=True))
        del st

    t_host = np.inf
    for _ in range(R):
        t = time.perf_counter()
        orders = host_orders(subs32, X.shape, nt)
        t_host = min(t_host, time.perf_counter() - t)
    put("host_orders", t_host)
    for mib in args.stage_mib:
        st = Staging(be, mib << 20)

        def up_orders():
            for m in range(1, N):
                st.upload(tq, d_ord[m], n, 4, ocl_tensor._copy_fill(orders[m]))
            tq.finish()
        put(f"upload_orders_staged[{mib}]", _best(up_orders, R, warm=True))
        del st

    # the device sorts (coordinates uploaded above); checked against the host's orders
    cl.enqueue_copy(q, d_subs, subs32)
    q.finish()
    for bits in args.radix_bits:
        def dev_all():
            sort.enqueue_mode_orders(be, q, d_subs, n, X.shape, d_ord, max_bits=bits)
            q.finish()
        dev_all()                                   # builds the programs
        put(f"device_orders[{bits}]", _best(dev_all, R))
        for m in range(1, N):
            got = np.empty(n, dtype=np.int32)
            cl.enqueue_copy(q, got, d_ord[m])
            if not np.array_equal(got, orders[m]):
                raise AssertionError(f"device order of mode {m} ({bits}-bit digits) differs "
                                     f"from the host's")

        for m in range(1, N):
            def dev_one():
                sort.enqueue_mode_orders(be, q, d_subs, n, X.shape, d_ord, max_bits=bits,
                                         modes=[m])
                q.finish()
            put(f"device_order_mode{m}[{bits}]", _best(dev_one, R))
    del orders, d_subs, d_vals, d_ord

    # the whole prepare, each way
    saved = (OpenCLTensor.PINNED, OpenCLTensor.DEVICE_ORDERS, OpenCLTensor.STAGE_BYTES,
             sort.RADIX_BITS)
    try:
        T = be.prepare(X)
        for mode, chunk in sorted(T.interleaved):
            def gather():
                T._gather(mode, chunk)
                q.finish()
            put(f"gather_mode{mode}", _best(gather, R))
        del T
        OpenCLTensor.STAGE_BYTES = args.stage_mib[0] << 20
        combos = [(p, False, None) for p in (False, True)]
        combos += [(p, True, b) for p in (False, True) for b in args.radix_bits]
        for pinned, dev, bits in combos:
            OpenCLTensor.PINNED, OpenCLTensor.DEVICE_ORDERS = pinned, dev
            if bits is not None:
                sort.RADIX_BITS = bits
            name = (f"pinned={int(pinned)},device_orders={int(dev)}"
                    + (f",bits={bits}" if bits is not None else ""))
            if pinned:
                be.__dict__.pop("_staging", None)
                finish()
                t = time.perf_counter()
                T = be.prepare(X)
                put(f"prepare_cold[{name}]", time.perf_counter() - t)
                info = T.upload_info
                del T
            else:
                T = be.prepare(X)               # builds the kernels
                info = T.upload_info
                del T

            def prep():
                be.prepare(X)
            put(f"prepare[{name}]", _best(prep, R, before=finish))
            if info["pinned"] != pinned or info["device_orders"] != dev:
                print(f"  (asked pinned={pinned}, device_orders={dev}; got {info})")
                phases[f"prepare_info[{name}]"] = info
    finally:
        (OpenCLTensor.PINNED, OpenCLTensor.DEVICE_ORDERS, OpenCLTensor.STAGE_BYTES,
         sort.RADIX_BITS) = saved

    report = {"benchmark": "prepare", "device": be.device.name.strip(),
              "device_is_gpu": bool(be.is_gpu), "cpu": cpu_model(), "threads": nt,
              "loadavg": list(os.getloadavg()), "shape": list(X.shape), "nnz": int(n),
              "repeat": R, "stage_mib": args.stage_mib, "radix_bits": args.radix_bits,
              "layout": be.layout, "phases_s": phases}
    if args.out:
        write_report(report, args.out)
    else:
        print(json.dumps(report, indent=1, default=str))
    return report


if __name__ == "__main__":
    main()
