"""The CPU backend: Cython/OpenMP kernels, NumPy for the small dense steps."""
import contextlib
import sys

import numpy as np

from ..apr_kernels import AprKernels
from ..base import Backend
from ..gram import DIVERGED
from ..._threads import (MAX_THREADS_PER_CPU, get_num_threads, load_adapted,  # noqa: F401
                         max_threads,
                         num_threads, set_num_threads)
from . import parallel_costs
from .formats import build_format
from .formats.alto import MAX_BITS as ALTO_MAX_BITS  # noqa: F401 - reported by show_config
from .formats.coo import useful_threads

try:
    from . import _cpapr, _dense, _kernels
except ImportError as exc:  # pragma: no cover - only when the package was not built
    _kernels = _dense = _cpapr = None
    _IMPORT_ERROR = exc
else:
    _IMPORT_ERROR = None


def _require_kernels():
    if _kernels is None:
        raise ImportError(
            "the compiled CPU kernels of sktensor_fast are missing; install the package with "
            "`pip install .` (a C compiler is needed) — original error: " + str(_IMPORT_ERROR))
    return _kernels


def _dense_threads(flops):
    """Threads for a small dense step of ``flops`` multiply-adds: as many as the measured
    costs say its work is worth (:func:`.parallel_costs.threads_for_work`)."""
    n = get_num_threads()
    if n == 1:
        return 1
    return parallel_costs.threads_for_flops(flops, n)


def _threads_for(T, rank=8):
    """Threads for a kernel over ``T`` at ``rank``: a small tensor runs on fewer (every
    format's result is independent of the thread count, and a parallel region costs more
    than such a kernel)."""
    return useful_threads(T.nnz, get_num_threads(), rank)


# ---------------------------------------------------------------------- BLAS during fits
_BLAS = {"controller": None, "modules": -1, "failed": False}


def _blas_controller():
    """A cached threadpoolctl controller of the BLAS libraries loaded (rebuilt when modules
    were imported since, which may have loaded another BLAS); None without threadpoolctl."""
    if _BLAS["failed"]:
        return None
    if _BLAS["controller"] is None or _BLAS["modules"] != len(sys.modules):
        try:
            from threadpoolctl import ThreadpoolController
            ctl = ThreadpoolController().select(user_api="blas")
        except Exception:  # pragma: no cover - threadpoolctl missing or broken
            _BLAS["failed"] = True
            return None
        _BLAS["controller"], _BLAS["modules"] = ctl, len(sys.modules)
    return _BLAS["controller"]


@contextlib.contextmanager
def single_threaded_blas():
    """Inside the block, the BLAS libraries that NumPy and SciPy load run one thread.

    The CPU backend enters this for a whole fit, ``transform`` or ``score``: its small dense
    steps (Gram matrices, ``A @ M`` with R x R matrices, column norms) gain nothing from BLAS
    threads, while those threads, spinning after each call, take the cores from the OpenMP
    threads of the sparse kernels.  A user's own, lower limit holds (one is the least), and the
    limits of before are restored on exit.  threadpoolctl's rules apply to Python threads: a
    process-wide BLAS pool is limited by the thread that controls it (usually the main thread),
    other threads leave it as it is.  Without threadpoolctl it does nothing.
    """
    ctl = _blas_controller()
    if ctl is None or not any(lc.num_threads > 1 for lc in ctl.lib_controllers):
        yield
        return
    with ctl.limit(limits=1):
        yield


def _c(a, dtype):
    return np.ascontiguousarray(a, dtype=dtype)


class CpuBackend(Backend):
    """Kernels compiled with Cython and OpenMP, arrays are NumPy arrays."""

    name = "cpu"

    def __init__(self):
        _require_kernels()

    @contextlib.contextmanager
    def compute_scope(self):
        """Context of a fit / transform / score: BLAS limited to one thread (see
        :func:`single_threaded_blas`) and, with the default thread count, the kernels on the
        CPUs other programs leave free (:func:`~sktensor_fast._threads.load_adapted`)."""
        with single_threaded_blas(), load_adapted():
            yield

    # ------------------------------------------------------------------ data placement
    #: COO with per-mode orders, or ALTO (see :func:`.formats.build_format`)
    formats = ("auto", "coo", "alto")

    def storage_format(self, format="auto", needs=()):
        """``"auto"`` is narrowed to ``"coo"`` for kernels that read only COO: CP-APR's row
        solvers (they walk the rows of a mode) and GCP's samplers (coordinates and the linear
        index); otherwise ``build_format`` picks COO or ALTO by the tensor."""
        format = super().storage_format(format, needs)
        if format == "auto" and ({"apr_rows", "gcp"} & set(needs)):
            return "coo"
        return format

    def prepare(self, X, format="auto", modes=None):
        modes = self.kernel_modes(X.ndim, modes)
        return build_format(X, format, modes)

    def asarray(self, a, dtype=None):
        return np.ascontiguousarray(a, dtype=dtype)

    def to_numpy(self, a):
        return np.asarray(a)

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype=dtype)

    # ------------------------------------------------------------------ sparse kernels
    def _factors(self, T, factors):
        return [_c(f, T.dtype) for f in factors]

    def _mttkrp(self, T, factors, mode, out):
        R = np.shape(factors[0])[1]
        facs = self._factors(T, factors)
        if out is None:
            out = np.empty((T.shape[mode], R), dtype=T.dtype)
        return T.accumulate(facs, mode, out, None, 0.0, _threads_for(T, R))

    def _phi(self, T, factors, mode, B, eps, out):
        R = np.shape(factors[0])[1]
        facs = self._factors(T, factors)
        if out is None:
            out = np.empty((T.shape[mode], R), dtype=T.dtype)
        return T.accumulate(facs, mode, out, _c(B, T.dtype), float(eps), _threads_for(T, R))

    def _phi_plan(self, T, factors, mode, B, eps, out):
        # over fibers: a compiled plan with every array bound (no Python work per call);
        # only where the kernel would read the caller's arrays themselves (no conversion)
        R = out.shape[1]
        facs = self._factors(T, factors)
        plan_of = getattr(T, "accumulate_plan", None)
        if (plan_of is not None and all(f is g for f, g in zip(facs, factors))
                and _c(B, T.dtype) is B and isinstance(out, np.ndarray)
                and out.dtype == T.dtype and out.flags.c_contiguous and out.flags.writeable):
            plan = plan_of(facs, mode, out, B, float(eps), _threads_for(T, R))
            if plan is not None:
                return plan
        return super()._phi_plan(T, factors, mode, B, eps, out)

    def _model_values(self, T, weights, factors):
        facs = self._factors(T, factors)
        out = np.empty(T.nnz, dtype=T.dtype)
        _kernels.kruskal_values(T.subs, _c(weights, T.dtype), facs, out,
                                useful_threads(T.nnz, get_num_threads(), len(weights)))
        return out

    # ------------------------------------------------------------------ small dense steps
    # the small dense steps run on the kernels' OpenMP threads (_dense.pyx), not on a second,
    # multithreaded BLAS pool, and on one thread unless they are large
    def gram(self, A):
        A = np.ascontiguousarray(A)
        if A.dtype not in (np.float32, np.float64):
            A = A.astype(np.float64)
        return _dense.gram(A, _dense_threads(A.shape[0] * A.shape[1] * A.shape[1]))

    def matmul_small(self, A, M):
        A = np.ascontiguousarray(A)
        if A.dtype not in (np.float32, np.float64):
            A = A.astype(np.float64)
        M = np.ascontiguousarray(M, dtype=A.dtype)
        out = np.empty((A.shape[0], M.shape[1]), dtype=A.dtype)
        return _dense.matmul_small(A, M, out, _dense_threads(A.shape[0] * A.shape[1]
                                                             * M.shape[1]))

    def als_update(self, M, grams, mode, first=False):
        """:meth:`.base.Backend.als_update` in one compiled call (``_dense.als_update``):
        the R x R product and its inverse (a Cholesky factorisation when the product is
        certainly well conditioned, Jacobi rotations otherwise), ``M Y⁺``, the column
        weights and the new Gram matrix, without a NumPy call between them.  Ranks above 128
        take the NumPy steps of the base class, as does a Gram product whose eigenvalues the
        rotations do not find."""
        M = np.ascontiguousarray(M)
        if M.dtype not in (np.float32, np.float64):
            M = M.astype(np.float64)
        I, R = M.shape
        if R > _dense.MAX_RANK or R == 0:
            return super().als_update(M, grams, mode, first)
        U = np.empty_like(M)
        G = np.empty((R, R))
        weights = np.empty(R)
        nt = _dense_threads(I * R * R)
        try:
            status = _dense.als_update(M, grams, mode, first, U, G, weights, nt)
        except (ValueError, TypeError):   # Gram matrices not C-contiguous float64 arrays
            grams = [np.ascontiguousarray(g, dtype=np.float64) for g in grams]
            status = _dense.als_update(M, grams, int(mode), bool(first), U, G, weights, nt)
        if status == 1:
            raise FloatingPointError(DIVERGED)
        if status != 0:
            return super().als_update(M, grams, mode, first)
        return U, weights, G

    def column_norms(self, A, ord=2):
        if A.shape[0] == 0:
            return np.zeros(A.shape[1])
        return np.linalg.norm(A, ord=ord, axis=0).astype(np.float64)

    def scale_columns(self, A, s):
        A *= np.asarray(s, dtype=A.dtype)[None, :]
        return A

    def inner(self, A, B):
        return np.einsum("ir,ir->r", A, B).astype(np.float64)

    def _poisson_data_term(self, T, weights, factors, eps):
        return float(T.poisson_data_term(_c(weights, T.dtype), self._factors(T, factors),
                                         float(eps), _threads_for(T, len(weights))))

    # --- CP-APR primitives: backend.apr (CpuAprKernels below) ---------------------------
    def _make_apr_kernels(self):
        return CpuAprKernels(self)

    # --- GCP primitives: backend.gcp (gcp_ops.py; the kernels are in _gcp.pyx) ---------
    def _make_gcp_kernels(self):
        from .gcp_ops import CpuGcpKernels
        return CpuGcpKernels(self)

    def info(self):
        return {"name": self.name, "openmp": bool(_kernels.HAVE_OPENMP),
                "threads": get_num_threads()}


class CpuAprKernels(AprKernels):
    """``backend.apr`` of the CPU backend: NumPy element-wise steps and the compiled row
    solvers of _cpapr.pyx (arguments checked by AprKernels)."""

    def _shift_inadmissible(self, A, Phi, kappa_tol, kappa):
        V = (Phi > 1) & (A < kappa_tol)
        n = int(np.count_nonzero(V))
        if n:
            A[V] += kappa
        return n

    @staticmethod
    def _kkt_terms(B, Phi):
        t = np.subtract(1, Phi)          # one temporary: |min(B, 1 - Phi)|
        np.minimum(B, t, out=t)
        return np.abs(t, out=t)

    def _kkt_violation(self, B, Phi):
        if B.size == 0:
            return 0.0
        return float(self._kkt_terms(B, Phi).max())

    def _multiply_(self, B, Phi):
        np.multiply(B, Phi, out=B)
        return B

    def mu_step_(self, B, Phi, tol):
        # the fits' arrays (C-contiguous NumPy arrays of one floating type and shape, tol a
        # float) go straight to one compiled call that checks them itself: between two Φ
        # kernels, which leave the caches cold, the checks of the public method and the five
        # NumPy calls of the two steps took 40-60 µs on a 24 x 8 factor, this 10-20 µs
        k = _cpapr.mu_step_arrays(B, Phi, tol)
        return super().mu_step_(B, Phi, tol) if k is None else k

    def _mu_rows_(self, B, Phi, tol):
        if B.size == 0:
            return 0
        rows = np.flatnonzero(self._kkt_terms(B, Phi).max(axis=1) >= tol)
        if rows.size:
            B[rows] *= Phi[rows]
        return int(rows.size)

    _METHODS = {"pdnr": 0, "pqnr": 1}

    def _row_solve(self, T, factors, mode, B, method, params):
        from . import _cpapr
        row_ptr = getattr(T, "row_ptr", None)
        if row_ptr is None:
            raise TypeError(f"the CP-APR row solvers need a format with per-mode row pointers "
                            f"(coo); got {type(T).__name__}")
        # the row kernel works in float64; float32 data and factors are converted
        facs = [np.ascontiguousarray(f, dtype=np.float64) for f in factors]
        work = B if (B.dtype == np.float64 and B.flags.c_contiguous) else \
            np.ascontiguousarray(B, dtype=np.float64)
        facs[mode] = work
        vals = np.ascontiguousarray(T.vals, dtype=np.float64)
        I = T.shape[mode]
        kkt = np.zeros(I)
        inner = np.zeros(I, dtype=np.int64)
        changed = np.zeros(I, dtype=np.int8)
        _cpapr.row_solve(T.subs, vals, T.perms[mode], row_ptr(mode), facs, int(mode), work,
                         self._METHODS[method], float(params["tol"]),
                         int(params["max_inner"]), float(params["eps_div_zero"]),
                         float(params["eps_active"]), float(params["mu0"]),
                         int(params["lbfgs_mem"]), kkt, inner, changed,
                         max(1, min(get_num_threads(), I)))
        if work is not B:
            B[...] = work
        return {"kkt": float(kkt.max()) if I else 0.0, "n_inner": int(inner.sum()),
                "n_changed": int(np.count_nonzero(changed))}
