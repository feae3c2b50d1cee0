"""How many threads a kernel call is worth, from costs measured on this machine.

A kernel on ``t`` threads costs more than its work divided by ``t``: the threads must be
woken (with passive waiting, the package's default, by the kernel of the operating system),
their caches filled and their ends awaited.  A thread is worth its start when its share of the
work takes at least :data:`SHARE_OVER_START` times that extra cost.  Both sides are measured
once per process, at first use, and kept:

- the time of a unit of work on one thread: a nonzero of the COO MTTKRP (rank 8, 3 modes, in
  cache: :func:`nonzero_cost`) and a multiply-add of the small dense steps
  (:func:`flop_cost`);
- the extra cost of ``t`` threads (:func:`region_cost`): the same MTTKRP on ``t`` threads
  and on one, the time on ``t`` minus a ``t``-th of the time on one (low percentiles of
  several runs: what the runtime and the hardware need, not the time other programs of a
  busy machine take, which :func:`~sktensor_fast._threads.threads_for_load` deals with);
- for GCP's step loop, which runs its steps in one parallel region, the time of a sample on
  one thread and what a step on ``t`` threads costs beyond the shares
  (``gcp_step_costs`` of ``gcp_ops.py``, kept here with the others).

Results never depend on the thread count, only the time does.  See
``doc/guide/tuning.rst``, "Threads for small calls".
"""
import threading
import time

import numpy as np

#: A thread is started only when its share of the work takes this many times what starting
#: it costs (work below that runs on fewer threads).
SHARE_OVER_START = 2.0

#: runs timed for one cost, and the percentile kept
RUNS = 15
PERCENTILE = 20

#: nonzeros per partition of the calibration tensor (as many as COO's smallest partitions)
_PART = 2048

_COSTS = {}
_LOCK = threading.RLock()   # a calibration may ask for another cost


def _seconds(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _calibration_kernel(nparts):
    """A function running the COO MTTKRP (rank 8, mode 0, factors in cache) on a 3-way
    tensor of ``nparts`` partitions of :data:`_PART` nonzeros, on the threads it is given;
    and its number of nonzeros."""
    from . import _kernels
    rng = np.random.default_rng(0)
    nnz, R, shape = nparts * _PART, 8, (64, 64, 64)
    subs = np.unique(rng.integers(0, 64, size=(int(nnz * 1.1), 3)), axis=0)[:nnz]
    subs = np.ascontiguousarray(subs, dtype=np.int64)
    nnz = len(subs)
    vals = rng.random(nnz)
    factors = [rng.random((n, R)) for n in shape]
    out = np.empty((shape[0], R))
    ptr = np.append(np.arange(0, nnz, _PART), nnz).astype(np.int64)
    perm = np.zeros(0, dtype=np.int64)

    def run(t):
        _kernels.sorted_accumulate(subs, vals, perm, ptr, factors, 0, out, None, 0.0, t)
    return run, nnz


def nonzero_cost():
    """Seconds per nonzero of the COO MTTKRP on one thread (rank 8, a 3-way tensor of 16,384
    nonzeros whose factors stay in cache), measured at first use, then kept."""
    cost = _COSTS.get("nonzero")
    if cost is None:
        run, nnz = _calibration_kernel(8)
        run(1)
        times = [_seconds(lambda: run(1)) for _ in range(RUNS)]
        cost = _COSTS["nonzero"] = float(np.percentile(times, PERCENTILE)) / nnz
    return cost


def region_cost(t):
    """Seconds that a kernel on ``t`` threads takes beyond a ``t``-th of its one-thread time
    (measured at first use for this ``t``, then kept; 0 for one thread)."""
    t = int(t)
    if t <= 1:
        return 0.0
    key = ("region", t)
    cost = _COSTS.get(key)
    if cost is None:
        with _LOCK:
            run, _ = _calibration_kernel(max(8, 2 * t))
            run(1)
            run(t)
            one, many = [], []
            for _ in range(RUNS):           # in turn, so that both see the same machine
                one.append(_seconds(lambda: run(1)))
                many.append(_seconds(lambda: run(t)))
            one = float(np.percentile(one, PERCENTILE))
            many = float(np.percentile(many, PERCENTILE))
            cost = _COSTS[key] = max(0.0, many - one / t)
    return cost


def flop_cost():
    """Seconds per multiply-add of the small dense steps on one thread (the Gram matrix of a
    512 x 16 block), measured at first use, then kept."""
    cost = _COSTS.get("flop")
    if cost is None:
        from . import _dense
        A = np.random.default_rng(0).random((512, 16))
        _dense.gram(A, 1)
        times = [_seconds(lambda: _dense.gram(A, 1)) for _ in range(RUNS)]
        cost = _COSTS["flop"] = float(np.percentile(times, PERCENTILE)) / (512 * 16 * 16)
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


def threads_for_nonzeros(nnz, num_threads, rank=8):
    """:func:`threads_for_work` of an MTTKRP-like kernel over ``nnz`` nonzeros at ``rank``
    (the measured time of a nonzero, times ``rank / 8`` above rank 8).  Decisions are kept:
    a fit asks the same question for every kernel call."""
    key = ("nnz", nnz, num_threads, rank)
    try:
        return _COSTS["decisions"][key]
    except KeyError:
        pass
    work = nnz * nonzero_cost() * max(1.0, rank / 8)
    t = _COSTS.setdefault("decisions", {})[key] = threads_for_work(work, num_threads)
    return t


def threads_for_flops(flops, num_threads):
    """:func:`threads_for_work` of a small dense step of ``flops`` multiply-adds (decisions
    kept, as in :func:`threads_for_nonzeros`)."""
    key = ("flops", flops, num_threads)
    try:
        return _COSTS["decisions"][key]
    except KeyError:
        pass
    t = _COSTS.setdefault("decisions", {})[key] = threads_for_work(flops * flop_cost(),
                                                                   num_threads)
    return t


def measured():
    """The costs measured so far (seconds), by name: ``"nonzero"``, ``"flop"`` and
    ``("region", t)``."""
    return {k: v for k, v in _COSTS.items() if k != "decisions"}

