"""How many threads a kernel call is worth, from costs measured on this machine.

A parallel region of ``t`` threads costs the start of ``t - 1`` threads (with passive waiting,
the package's default, each one is woken by the kernel of the operating system) and the
kernel's work is shared among them.  A thread is worth its start when its share of the work
takes at least :data:`SHARE_OVER_START` times what the region costs over a one-thread region.
Both sides are measured once per process, at first use, and kept:

- the cost of a region of ``t`` threads (:func:`region_cost`): empty regions of the kernels'
  OpenMP runtime, a low percentile of many (the time the runtime needs, not the time other
  programs of a busy machine take: :func:`~sktensor_fast._threads.threads_for_load` deals
  with those);
- the time of a unit of work on one thread: a nonzero of the COO MTTKRP (rank 8, 3 modes,
  :func:`nonzero_cost`) and a multiply-add of the small dense steps (:func:`flop_cost`).

Results never depend on the thread count, only the time does.
"""
import threading
import time

import numpy as np

#: A thread is started only when its share of the work takes this many times what starting
#: it costs (work below that runs on fewer threads).
SHARE_OVER_START = 2.0

#: empty regions timed for one cost, and the percentile kept
REGIONS = 48
PERCENTILE = 20

_COSTS = {}
_LOCK = threading.Lock()


def _percentile_seconds(fn, reps):
    times = np.empty(reps)
    for i in range(reps):
        t = time.perf_counter()
        fn()
        times[i] = time.perf_counter() - t
    return float(np.percentile(times, PERCENTILE))


def region_cost(t):
    """Seconds that a parallel region of ``t`` threads costs more than one of one thread
    (measured at first use for this ``t``, then kept)."""
    t = int(t)
    if t <= 1:
        return 0.0
    key = ("region", t)
    cost = _COSTS.get(key)
    if cost is None:
        from . import _kernels
        with _LOCK:
            one = _COSTS.get(("region", 1))
            if one is None:
                one = _COSTS[("region", 1)] = _percentile_seconds(
                    lambda: _kernels.parallel_region(1), REGIONS)
            cost = max(0.0, _percentile_seconds(lambda: _kernels.parallel_region(t), REGIONS)
                       - one)
            _COSTS[key] = cost
    return cost


def nonzero_cost():
    """Seconds per nonzero of the COO MTTKRP on one thread (rank 8, a 3-way tensor of 16,384
    nonzeros whose factors stay in cache), measured at first use, then kept."""
    cost = _COSTS.get("nonzero")
    if cost is None:
        from . import _kernels
        rng = np.random.default_rng(0)
        nnz, R, shape = 1 << 14, 8, (64, 64, 64)
        subs = np.unique(rng.integers(0, 64, size=(nnz, 3)), axis=0).astype(np.int64)
        vals = rng.random(len(subs))
        factors = [rng.random((n, R)) for n in shape]
        out = np.empty((shape[0], R))
        ptr = np.append(np.arange(0, len(subs), 2048), len(subs)).astype(np.int64)
        perm = np.zeros(0, dtype=np.int64)

        def run():
            _kernels.sorted_accumulate(subs, vals, perm, ptr, factors, 0, out, None, 0.0, 1)
        run()
        cost = _COSTS["nonzero"] = min(_percentile_seconds(run, 5) for _ in range(3)) / len(subs)
    return cost


def flop_cost():
    """Seconds per multiply-add of the small dense steps on one thread (the Gram matrix of a
    512 x 16 block), measured at first use, then kept."""
    cost = _COSTS.get("flop")
    if cost is None:
        from . import _dense
        A = np.random.default_rng(0).random((512, 16))
        _dense.gram(A, 1)
        cost = _COSTS["flop"] = min(_percentile_seconds(lambda: _dense.gram(A, 1), 5)
                                    for _ in range(3)) / (512 * 16 * 16)
    return cost


def threads_for_work(seconds, num_threads):
    """The most threads, up to ``num_threads``, whose shares of ``seconds`` of one-thread work
    each take at least :data:`SHARE_OVER_START` times the cost of their region (at least 1).

    Region costs are measured for ``num_threads`` and the powers of two below it only.
    """
    n = int(num_threads)
    if n <= 1:
        return 1
    candidates = sorted({n} | {1 << k for k in range(1, n.bit_length()) if (1 << k) < n},
                        reverse=True)
    for t in candidates:
        if seconds / t >= SHARE_OVER_START * region_cost(t):
            return t
    return 1


def measured():
    """The costs measured so far (seconds), by name: ``"nonzero"``, ``"flop"`` and
    ``("region", t)``."""
    return dict(_COSTS)
