"""STREAM (copy, scale, add, triad) on the CPU kernels and on OpenCL devices.

The CPU kernels are ``sktensor_fast.backends.cpu._stream`` (Cython, OpenMP ``prange``); the
OpenCL kernels are ``sktensor_fast/backends/opencl/kernels/stream.cl``, built in the OpenCL
backend's own context and run on its queue.  As in McCalpin's STREAM, the four operations run
in turn ``trials`` times on three arrays (``a = 1, b = 2, c = 0`` at the start, scalar
``q = 3``), the first round is dropped, the best time of each operation gives its bandwidth,
and the arrays are checked against the scalar recurrence at the end.  Bytes: copy and scale
read one array and write one, add and triad read two and write one (no write-allocate traffic).
:func:`section_stream` is the ``stream`` section of the suite (``benchmarks/run.py``).
"""
import time
from importlib import resources

import numpy as np

from .common import MB, fmt_num, last_level_cache_bytes, md_table

__all__ = ["OPS", "STREAM_ARRAYS", "cpu_stream", "opencl_stream", "expected_values",
           "section_stream"]

#: operations in the order they run
OPS = ("copy", "scale", "add", "triad")

#: arrays each operation reads or writes (bytes per element = arrays * itemsize)
STREAM_ARRAYS = {"copy": 2, "scale": 2, "add": 3, "triad": 3}

Q = 3.0


def expected_values(rounds, q=Q):
    """Values of (a, b, c) after ``rounds`` rounds of copy, scale, add, triad."""
    a, b, c = 1.0, 2.0, 0.0
    for _ in range(rounds):
        c = a
        b = q * c
        c = a + b
        a = b + q * c
    return a, b, c


def _summary(times, n, itemsize, check_err):
    out = {}
    for op in OPS:
        ts = times[op][1:] if len(times[op]) > 1 else times[op]
        nbytes = STREAM_ARRAYS[op] * itemsize * n
        best = min(ts)
        out[op] = {"GBs": nbytes / best / 1e9, "best_s": best, "avg_s": float(np.mean(ts)),
                   "bytes": nbytes}
    return {"ops": out, "max_rel_err": check_err}


def _check(arrays, rounds, q=Q):
    exp = expected_values(rounds, q)
    err = 0.0
    for arr, e in zip(arrays, exp):
        err = max(err, float(np.max(np.abs(arr - e))) / abs(e) if e else float(np.max(np.abs(arr))))
    return err


def cpu_stream(n, threads, trials=5):
    """STREAM on ``n`` float64 elements per array with ``threads`` OpenMP threads.

    Returns ``{"ops": {op: {"GBs", "best_s", "avg_s", "bytes"}}, "max_rel_err": float}``;
    ``trials`` rounds are run and the first is dropped (unless there is only one).
    """
    from sktensor_fast.backends.cpu import _stream
    n = int(n)
    a, b, c = np.empty(n), np.empty(n), np.empty(n)
    _stream.fill(a, 1.0, threads)
    _stream.fill(b, 2.0, threads)
    _stream.fill(c, 0.0, threads)
    times = {op: [] for op in OPS}
    clock = time.perf_counter
    for _ in range(max(1, int(trials))):
        t = clock()
        _stream.copy(c, a, threads)
        times["copy"].append(clock() - t)
        t = clock()
        _stream.scale(b, c, Q, threads)
        times["scale"].append(clock() - t)
        t = clock()
        _stream.add(c, a, b, threads)
        times["add"].append(clock() - t)
        t = clock()
        _stream.triad(a, b, c, Q, threads)
        times["triad"].append(clock() - t)
    return _summary(times, n, 8, _check((a, b, c), max(1, int(trials))))


def _opencl_source():
    return (resources.files("sktensor_fast.backends.opencl") / "kernels" / "stream.cl").read_text()


def opencl_stream(backend, n, trials=5):
    """STREAM on an :class:`~sktensor_fast.backends.opencl.OpenCLBackend`'s device.

    float64 when the device has it, else float32 (the result says which).  Each kernel is
    timed from enqueue to ``queue.finish()``.
    """
    cl = backend.cl
    import pyopencl.array as cla
    dtype = np.dtype(np.float64 if backend.fp64 else np.float32)
    header = ("#define USE_FP64 1\n#define VAL_T double\n" if dtype == np.float64
              else "#define VAL_T float\n")
    from sktensor_fast.backends.opencl.backend import build_program
    prog = build_program(backend.ctx, header + _opencl_source(), what="the STREAM kernels")
    q = backend.queue
    n = int(n)
    a, b, c = (cla.empty(q, n, dtype) for _ in range(3))
    a.fill(1.0)
    b.fill(2.0)
    c.fill(0.0)
    q.finish()
    wg = 256 if backend.max_wg >= 256 else backend.max_wg
    gsize = (-(-n // wg) * wg,)
    ln = np.int64(n)
    qs = dtype.type(Q)
    knl = {op: cl.Kernel(prog, "stream_" + op) for op in OPS}
    knl["copy"].set_args(ln, c.data, a.data)
    knl["scale"].set_args(ln, b.data, c.data, qs)
    knl["add"].set_args(ln, c.data, a.data, b.data)
    knl["triad"].set_args(ln, a.data, b.data, c.data, qs)
    times = {op: [] for op in OPS}
    clock = time.perf_counter
    rounds = max(1, int(trials))
    for _ in range(rounds):
        for op in OPS:
            t = clock()
            cl.enqueue_nd_range_kernel(q, knl[op], gsize, (wg,))
            q.finish()
            times[op].append(clock() - t)
    res = _summary(times, n, dtype.itemsize, _check((a.get(), b.get(), c.get()), rounds))
    res["dtype"] = dtype.name
    return res


def section_stream(cfg, threads, devices):
    from sktensor_fast.backends import get_backend as _get_backend
    n = cfg["stream_n"]
    if n is None:
        llc = last_level_cache_bytes() or 32 * MB
        n = max(1 << (26 if cfg["mode"] == "full" else 24), 4 * llc // 8)
    rows = []
    for th in threads:
        r = cpu_stream(n, th, cfg["stream_trials"])
        for op, v in r["ops"].items():
            rows.append({"device": "cpu", "threads": th, "op": op, "n": n, "dtype": "float64",
                         "max_rel_err": r["max_rel_err"], **v})
    for d in devices:
        if d["device"] == "cpu" or not d.get("ok"):
            continue
        try:
            r = opencl_stream(_get_backend(d["device"]), n, cfg["stream_trials"])
        except Exception as exc:   # e.g. the arrays do not fit the device
            rows.append({"device": d["device"], "error": f"{type(exc).__name__}: {exc}"})
            continue
        for op, v in r["ops"].items():
            rows.append({"device": d["device"], "threads": None, "op": op, "n": n,
                         "dtype": r["dtype"], "max_rel_err": r["max_rel_err"], **v})
    ok = [r for r in rows if "GBs" in r]
    table = md_table(["device", "threads", "copy GB/s", "scale GB/s", "add GB/s", "triad GB/s",
                      "max rel err"],
                     [[dev, th if th is not None else "–"]
                      + [fmt_num(next(r["GBs"] for r in ok if r["device"] == dev
                                      and r["threads"] == th and r["op"] == op))
                         for op in OPS]
                      + [fmt_num(next(r["max_rel_err"] for r in ok if r["device"] == dev
                                      and r["threads"] == th))]
                      for dev, th in dict.fromkeys((r["device"], r["threads"]) for r in ok)])
    notes = []
    llc = last_level_cache_bytes()
    if llc and n * 8 < 4 * llc:
        notes.append(f"arrays of {n * 8 / MB:.1f} MiB are smaller than 4x the last-level cache "
                     f"({llc / MB:.0f} MiB): these are cache bandwidths, not memory bandwidths")
    return {"array_elements": n, "array_bytes": n * 8, "trials": cfg["stream_trials"],
            "notes": notes,
            "bytes_counted": {op: f"{k} arrays x element size"
                              for op, k in STREAM_ARRAYS.items()},
            "rows": rows}, table
