"""Thread settings of the compiled passes (CPU kernels, tensor construction, I/O).

One setting serves every OpenMP pass of the package, so that one pool of threads runs at a
time.  It lives here, outside the backends, because the data layer (building tensors, reading
files) and the storage formats use it as much as the kernels do.
"""
import contextlib
import os
import threading

import numpy as np

from ._warnings import warn as _warn

__all__ = ["get_num_threads", "set_num_threads", "num_threads", "max_threads",
           "MAX_THREADS_PER_CPU", "threads_for_load", "load_adapted"]

_GLOBAL = {"n": None}


def _default_threads():
    """OpenMP's default thread count (all cores, ``OMP_NUM_THREADS``, a threadpoolctl limit)."""
    try:
        from ._native import _construct
    except ImportError:  # pragma: no cover - only when the package was not built
        return 1
    return max(1, int(_construct.max_threads()))


_local = threading.local()

#: Requests for more threads than this many per CPU of the machine are capped (with a
#: warning): the kernels gain nothing from oversubscribed cores, the OpenMP runtime cannot
#: create tens of thousands of threads, and some scratch memory is per thread.
MAX_THREADS_PER_CPU = 4

#: CPUs of the machine (``os.cpu_count()``, whatever the affinity), read once.
_CPUS = max(1, os.cpu_count() or 1)


def max_threads():
    """The largest thread count the CPU kernels run: ``MAX_THREADS_PER_CPU`` times the CPUs
    of the machine (``os.cpu_count()``, whatever the affinity of this process)."""
    return MAX_THREADS_PER_CPU * _CPUS


def _checked(n, what):
    """``n`` validated as a thread count, capped at :func:`max_threads` with a warning."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of threads must be a positive integer{what}, got {n!r}")
    n = int(n)
    cap = max_threads()
    if n > cap:
        _warn(f"{n} threads requested; the CPU kernels use at most {cap} "
              f"({MAX_THREADS_PER_CPU} per CPU, {cap // MAX_THREADS_PER_CPU} CPUs): "
              f"capped at {cap}", RuntimeWarning)
        n = cap
    return n


_WARNED_OMP = set()


def get_num_threads():
    """Threads the CPU kernels use: the value set by :func:`set_num_threads` / :func:`num_threads`,
    else OpenMP's default (all cores, ``OMP_NUM_THREADS``, or a threadpoolctl limit).

    The result is at most :func:`max_threads`.  With the default count (none set by the user),
    a fit runs on no more threads than the CPUs that other programs leave free when it starts
    (:func:`load_adapted`).  A kernel call may use fewer: no more than its work is worth (each
    thread's share must take twice what starting the thread costs, both measured on this
    machine: ``backends/cpu/parallel_costs.py``), and no more threads than it has partitions.
    Results do not depend on the thread count.

    Returns
    -------
    int
        At least 1.

    Examples
    --------
    >>> import sktensor_fast
    >>> with sktensor_fast.num_threads(1):
    ...     sktensor_fast.get_num_threads()
    1
    """
    n = getattr(_local, "n", None)
    if n is None:
        n = _GLOBAL["n"]
    if n is None:
        n = getattr(_local, "adapted", None)    # inside a fit: see load_adapted
    if n is None:
        n = _default_threads()
        cap = max_threads()
        if n > cap:
            if n not in _WARNED_OMP:
                _WARNED_OMP.add(n)
                _warn(f"OpenMP asks for {n} threads (OMP_NUM_THREADS or a threadpoolctl "
                      f"limit); the CPU kernels use at most {cap} "
                      f"({MAX_THREADS_PER_CPU} per CPU): capped at {cap}",
                      RuntimeWarning)
            n = cap
    return max(1, int(n))
def set_num_threads(n):
    """Set the number of threads for the CPU kernels (``None`` restores the default).

    Values above :func:`max_threads` are capped with a ``RuntimeWarning``.  The setting takes
    precedence over ``OMP_NUM_THREADS`` and threadpoolctl limits of the OpenMP runtime.

    Parameters
    ----------
    n : int or None
        A positive number of threads, or None for OpenMP's default.

    Examples
    --------
    >>> import sktensor_fast
    >>> sktensor_fast.set_num_threads(1)
    >>> sktensor_fast.get_num_threads()
    1
    >>> sktensor_fast.set_num_threads(None)      # back to the default
    """
    if n is not None:
        n = _checked(n, " or None")
    _GLOBAL["n"] = n


@contextlib.contextmanager
def num_threads(n):
    """Context manager: run the CPU kernels with ``n`` threads inside the block (this thread).

    Values above :func:`max_threads` are capped with a ``RuntimeWarning``.

    Parameters
    ----------
    n : int
        A positive number of threads.

    Examples
    --------
    >>> import sktensor_fast
    >>> from sktensor_fast import CPALS
    >>> from sktensor_fast.datasets import load_flights_routes
    >>> X = load_flights_routes().tensor
    >>> with sktensor_fast.num_threads(1):
    ...     model = CPALS(rank=2, random_state=0).fit(X)
    >>> model.factors_[0].shape
    (3, 2)
    """
    n = _checked(n, "")
    old = getattr(_local, "n", None)
    _local.n = n
    try:
        yield
    finally:
        _local.n = old


#: Whether the kernels' OpenMP threads sleep as soon as they wait (set by ``_config`` at import:
#: the package's default, or ``OMP_WAIT_POLICY=passive`` from the user).
WAITS_PASSIVELY = {"value": False}


def _chosen_by_user():
    """Whether the thread count in force was chosen by the user: :func:`set_num_threads`,
    :func:`num_threads`, ``OMP_NUM_THREADS``, or a threadpoolctl limit (an OpenMP default
    below the CPUs this process may run on)."""
    if getattr(_local, "n", None) is not None or _GLOBAL["n"] is not None:
        return True
    if "OMP_NUM_THREADS" in os.environ:
        return True
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - no affinity call on this platform
        cpus = _CPUS
    return _default_threads() < cpus


def _running_threads():
    """Threads of the whole machine that are running or ready to run at this instant (the
    fourth field of ``/proc/loadavg``, the caller included), or None where it cannot be read."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def threads_for_load(n):
    """``n`` threads, or fewer on a machine whose CPUs other programs keep busy.

    A parallel region ends when its slowest thread does.  When the operating system has given
    the CPU of one of the threads to another program, the region waits a scheduler time slice
    (milliseconds) for it, which is longer than most kernel calls of a fit; with all CPUs busy,
    a fit on many threads then takes longer than on one.  So when the thread count is the
    default (not chosen by the user, see :func:`get_num_threads`), the kernels' threads wait
    passively (the package's default) and ``/proc/loadavg`` says how many threads of the
    machine are running, the result is at most one thread per CPU that the other running
    threads leave free (the caller's own counts as free), and at least one.  Otherwise ``n``.
    """
    n = max(1, int(n))
    if n == 1 or _chosen_by_user():
        return n
    if not WAITS_PASSIVELY["value"]:
        return n
    running = _running_threads()
    if running is None:
        return n
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover
        cpus = _CPUS
    free = cpus - (running - 1)     # the caller is running; its sleeping threads are not
    return max(1, min(n, free))


def cpu_left_free():
    """Whether a CPU of this process is free right now: ``/proc/loadavg`` counts fewer threads
    of the machine running or ready to run (the caller's included) than the CPUs this process
    may run on.  True where it cannot be read.  Unlike :func:`threads_for_load` it does not
    depend on who chose the thread count: it decides extra work that no thread count asked
    for (GCP's thread drawing the samples of steps ahead)."""
    running = _running_threads()
    if running is None:
        return True
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover
        cpus = _CPUS
    return running < cpus


@contextlib.contextmanager
def load_adapted():
    """Context of a fit, transform or score (the CPU backend's ``compute_scope``): inside it,
    with the default thread count, :func:`get_num_threads` gives :func:`threads_for_load` of
    the default, decided once on entry.  A count set by the user is used as given.

    Results do not depend on the thread count, so a fit on a busy machine gives the model it
    gives on a quiet one; see ``doc/guide/tuning.rst``, "Threads on a busy
    machine".
    """
    old = getattr(_local, "adapted", None)
    if not _chosen_by_user() and getattr(_local, "adapted", None) is None:
        _local.adapted = threads_for_load(_default_threads())
    try:
        yield
    finally:
        _local.adapted = old
