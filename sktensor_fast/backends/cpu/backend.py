"""The CPU backend: Cython/OpenMP kernels, NumPy for the small dense steps."""
import contextlib
import threading

import numpy as np

from ..base import Backend
from ...formats import CooFormat

try:
    from . import _kernels
except ImportError as exc:  # pragma: no cover - only when the package was not built
    _kernels = None
    _IMPORT_ERROR = exc
else:
    _IMPORT_ERROR = None

_local = threading.local()


def _require_kernels():
    if _kernels is None:
        raise ImportError(
            "the compiled CPU kernels of sktensor_fast are missing; install the package with "
            "`pip install .` (a C compiler is needed) — original error: " + str(_IMPORT_ERROR))
    return _kernels


def get_num_threads():
    """Threads the CPU kernels use: the value set by :func:`set_num_threads` / :func:`num_threads`,
    else OpenMP's default (all cores, ``OMP_NUM_THREADS``, or a threadpoolctl limit)."""
    n = getattr(_local, "n", None)
    if n is None:
        n = _GLOBAL["n"]
    if n is None:
        n = _require_kernels().max_threads()
    return max(1, int(n))


_GLOBAL = {"n": None}


def set_num_threads(n):
    """Set the number of threads for the CPU kernels (``None`` restores the default)."""
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"the number of threads must be a positive integer or None, got {n!r}")
        n = int(n)
    _GLOBAL["n"] = n


@contextlib.contextmanager
def num_threads(n):
    """Context manager: run the CPU kernels with ``n`` threads inside the block (this thread)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of threads must be a positive integer, got {n!r}")
    old = getattr(_local, "n", None)
    _local.n = int(n)
    try:
        yield
    finally:
        _local.n = old


def _c(a, dtype):
    return np.ascontiguousarray(a, dtype=dtype)


class CpuBackend(Backend):
    """Kernels compiled with Cython and OpenMP, arrays are NumPy arrays."""

    name = "cpu"

    def __init__(self):
        _require_kernels()

    # ------------------------------------------------------------------ data placement
    def prepare(self, X, format="auto"):
        from ...formats import build_format
        return build_format(X, format)

    def asarray(self, a, dtype=None):
        return np.ascontiguousarray(a, dtype=dtype)

    def to_numpy(self, a):
        return np.asarray(a)

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype=dtype)

    # ------------------------------------------------------------------ sparse kernels
    def _factors(self, T, factors):
        return [_c(f, T.dtype) for f in factors]

    def mttkrp(self, T, factors, mode, out=None):
        facs = self._factors(T, factors)
        R = facs[0].shape[1]
        if out is None:
            out = np.empty((T.shape[mode], R), dtype=T.dtype)
        return T.accumulate(facs, mode, out, None, 0.0, get_num_threads())

    def phi(self, T, factors, mode, B, eps, out=None):
        facs = self._factors(T, factors)
        R = facs[0].shape[1]
        if out is None:
            out = np.empty((T.shape[mode], R), dtype=T.dtype)
        return T.accumulate(facs, mode, out, _c(B, T.dtype), float(eps), get_num_threads())

    def model_values(self, T, weights, factors):
        facs = self._factors(T, factors)
        out = np.empty(T.nnz, dtype=T.dtype)
        _kernels.kruskal_values(T.subs, _c(weights, T.dtype), facs, out, get_num_threads())
        return out

    # ------------------------------------------------------------------ small dense steps
    def gram(self, A):
        return np.asarray(A.T @ A, dtype=np.float64)

    def matmul_small(self, A, M):
        return np.ascontiguousarray(A @ np.asarray(M, dtype=A.dtype))

    def column_norms(self, A, ord=2):
        if A.shape[0] == 0:
            return np.zeros(A.shape[1])
        return np.linalg.norm(A, ord=ord, axis=0).astype(np.float64)

    def scale_columns(self, A, s):
        A *= np.asarray(s, dtype=A.dtype)[None, :]
        return A

    def inner(self, A, B):
        return np.einsum("ir,ir->r", A, B).astype(np.float64)

    def info(self):
        return {"name": self.name, "openmp": bool(_kernels.HAVE_OPENMP),
                "threads": get_num_threads()}
