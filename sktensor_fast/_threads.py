"""Thread settings of the compiled passes (CPU kernels, tensor construction, I/O).

One setting serves every OpenMP pass of the package, so that one pool of threads runs at a
time.  It lives here, outside the backends, because the data layer (building tensors, reading
files) and the storage formats use it as much as the kernels do.
"""
import contextlib
import threading

import numpy as np

__all__ = ["get_num_threads", "set_num_threads", "num_threads"]

_local = threading.local()
_GLOBAL = {"n": None}


def _default_threads():
    try:
        from ._native import _construct
    except ImportError:  # pragma: no cover - only when the package was not built
        return 1
    return _construct.max_threads()


def get_num_threads():
    """Threads the compiled passes use: the value set by :func:`set_num_threads` /
    :func:`num_threads`, else OpenMP's default (all cores, ``OMP_NUM_THREADS``, or a
    threadpoolctl limit)."""
    n = getattr(_local, "n", None)
    if n is None:
        n = _GLOBAL["n"]
    if n is None:
        n = _default_threads()
    return max(1, int(n))


def set_num_threads(n):
    """Set the number of threads for the compiled passes (``None`` restores the default)."""
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"the number of threads must be a positive integer or None, got {n!r}")
        n = int(n)
    _GLOBAL["n"] = n


@contextlib.contextmanager
def num_threads(n):
    """Context manager: run the compiled passes with ``n`` threads inside the block (this
    thread)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of threads must be a positive integer, got {n!r}")
    old = getattr(_local, "n", None)
    _local.n = int(n)
    try:
        yield
    finally:
        _local.n = old
