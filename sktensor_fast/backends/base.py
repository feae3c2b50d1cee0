"""The kernel interface: the few primitives every algorithm is written against.

An algorithm (CP-ALS, CP-APR, GCP) never asks which device it runs on.  It receives a
:class:`Backend`, asks it to ``prepare`` the tensor once (upload it, build the storage format),
keeps its factor matrices as backend arrays, and calls the primitives below.  Only R x R
matrices, length-R vectors and scalars come back to the host as NumPy objects.

Backend arrays are whatever the backend uses (NumPy arrays on the CPU, ``pyopencl.array.Array``
on an OpenCL device).  Factor matrices are C-contiguous (I_n x R).

The primitives of one algorithm are grouped: ``backend.apr`` (:class:`AprKernels` of
:mod:`.apr_kernels`, CP-APR's element-wise steps and row solvers) and ``backend.gcp``
(:class:`GcpKernels` of :mod:`.gcp_kernels`, GCP's sampling, gradients, losses and optimiser
steps); this module declares the rest and names the groups.  Arguments are checked once, in
the interface (:mod:`.checks`): the public methods (``mttkrp``, ``phi``, ``model_values``,
``poisson_data_term`` and those of the groups) check them and call the backend's
``_``-prefixed implementation, so every backend refuses the same bad input with the same
message.
"""
import contextlib
import functools
from abc import ABC, abstractmethod

import numpy as np

from .apr_kernels import AprKernels
from .checks import check_factors
from .gcp_kernels import GcpKernels

__all__ = ["Backend", "AprKernels", "GcpKernels", "FORMATS"]

#: Values of the estimators' ``format`` parameter: every storage format that some device
#: accepts (a backend's ``formats`` names those it gives a meaning to).
FORMATS = ("auto", "coo", "alto")


class _ALSDone:
    """The result of an update of :meth:`Backend.als_start` that ran at once."""
    ready = True

    def __init__(self, weights, gram, inner):
        self.weights, self.gram, self.inner = weights, gram, inner


class Backend(ABC):
    """Abstract kernel backend."""

    #: short name used in ``show_config`` and error messages
    name = "abstract"

    # ------------------------------------------------------------------ data placement
    #: the values of ``format`` this backend gives a meaning to (``"auto"`` always)
    formats = ("auto",)

    def storage_format(self, format="auto", needs=()):
        """The format that :meth:`prepare` is to build for ``format`` when the algorithm uses
        the kernels named in ``needs`` (``"apr_rows"``: CP-APR's row solvers, ``"gcp"``: the
        GCP sampling kernels).  A format this backend has no meaning for is a ValueError
        naming the ones it has.  The default: ``format`` itself."""
        if format not in self.formats:
            raise ValueError(f"format={format!r} has no meaning on the {self.name!r} backend; "
                             f"use one of {', '.join(repr(f) for f in self.formats)}")
        return format

    @abstractmethod
    def prepare(self, X, format="auto", modes=None):
        """Lay out a validated :class:`SparseTensor` for the kernels (once per fit); ``format``
        as returned by :meth:`storage_format`.  ``modes``: the modes whose MTTKRP / Φ the
        caller will ask for (None: every mode); a backend may lay out only those now (the
        OpenCL backend builds one device copy per mode asked for, the CPU's COO format the
        permutations of those modes; another mode's is built when first asked for)."""

    @staticmethod
    def kernel_modes(ndim, modes):
        """``modes`` of :meth:`prepare` as a sorted tuple of valid modes (all when None)."""
        if modes is None:
            return tuple(range(ndim))
        out = tuple(sorted({int(m) for m in modes}))
        if not out or out[0] < 0 or out[-1] >= ndim:
            raise ValueError(f"modes must name modes of a {ndim}-way tensor, got {modes!r}")
        return out

    @abstractmethod
    def asarray(self, a, dtype=None):
        """Host array -> backend array (a copy when it must cross to a device)."""

    @abstractmethod
    def to_numpy(self, a):
        """Backend array -> NumPy array on the host."""

    @abstractmethod
    def zeros(self, shape, dtype):
        """A zero-filled backend array."""

    def copy(self, a):
        return a.copy()

    def to_numpy_transient(self, arrays):
        """Host copies of several backend arrays, which the caller reads (or copies) before
        it calls this method again in the same thread, and never hands out: a backend may
        put them in memory it keeps for the next call (the OpenCL backend does, because its
        driver copies into new memory at a fraction of the speed, see there)."""
        return [self.to_numpy(a) for a in arrays]

    def compute_scope(self):
        """Context manager entered around a whole fit, ``transform`` or ``score`` (settings
        that hold for the computation, e.g. the CPU backend's single-threaded BLAS)."""
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ sparse kernels
    # The public methods check the shapes once (check_factors) and call the backend's
    # ``_``-prefixed implementation.
    def mttkrp(self, T, factors, mode, out=None):
        """Matricised tensor times Khatri-Rao product for ``mode``: (I_mode x R)."""
        self.check_factors(T, factors, mode, out=out)
        return self._mttkrp(T, factors, mode, out)

    def phi(self, T, factors, mode, B, eps, out=None):
        """CP-APR's Φ = (X_(n) ⊘ max(B Π, eps)) Πᵀ, computed without storing Π."""
        self.check_factors(T, factors, mode, B=B, out=out)
        return self._phi(T, factors, mode, B, eps, out)

    def phi_plan(self, T, factors, mode, B, eps, out):
        """A callable that computes ``phi(T, factors, mode, B, eps, out=out)`` each time it is
        called, from the arrays' contents at that time, and returns the result: for a loop of
        Φ over arrays updated in place (CP-APR MU's inner iterations update ``B``).  The
        arguments are checked here, once; the factor matrices, ``B`` and ``out`` must stay
        the same arrays (updated in place, not replaced) while the plan is used."""
        if out is None:
            raise ValueError("phi_plan needs the output array out")
        self.check_factors(T, factors, mode, B=B, out=out)
        return self._phi_plan(T, list(factors), mode, B, eps, out)

    def _phi_plan(self, T, factors, mode, B, eps, out):
        """:meth:`phi_plan` with checked arguments (default: :meth:`_phi` on every call)."""
        return functools.partial(self._phi, T, factors, mode, B, eps, out)

    def model_values(self, T, weights, factors):
        """Values of the Kruskal model at the nonzeros of ``T`` (length nnz, backend array)."""
        self.check_factors(T, factors, weights=weights)
        return self._model_values(T, weights, factors)

    @abstractmethod
    def _mttkrp(self, T, factors, mode, out):
        """:meth:`mttkrp` with checked arguments."""

    @abstractmethod
    def _phi(self, T, factors, mode, B, eps, out):
        """:meth:`phi` with checked arguments."""

    @abstractmethod
    def _model_values(self, T, weights, factors):
        """:meth:`model_values` with checked arguments."""

    # ------------------------------------------------------------------ small dense steps
    @abstractmethod
    def gram(self, A):
        """AᵀA as a NumPy (R x R) array."""

    @abstractmethod
    def matmul_small(self, A, M):
        """A @ M for a backend (I x R) A and a host (R x R) M; returns a backend array."""

    @abstractmethod
    def column_norms(self, A, ord=2):
        """Per-column norms (``ord`` 1, 2 or ``inf``) as a NumPy vector."""

    @abstractmethod
    def scale_columns(self, A, s):
        """A[:, r] *= s[r] in place (``s`` a host vector); returns A."""

    @abstractmethod
    def inner(self, A, B):
        """sum(A * B) over all entries, per column: a NumPy vector of length R."""

    def als_update(self, M, grams, mode, first=False):
        """CP-ALS's update of factor ``mode`` from its MTTKRP ``M`` (I_mode x R).

        The new factor is ``M Y⁺``, ``Y`` the element-wise product of the Gram matrices of
        the other modes (in mode order) and ``Y⁺`` its inverse, or pseudo-inverse when Y is
        singular (:func:`.gram.inverse_gram`); its columns are divided by their weights:
        their 2-norms on the ``first`` iteration, else their largest magnitudes but at least 1
        (columns of weight 0 are kept as they are).

        Parameters
        ----------
        M : backend array of shape (I_mode, R)
            The MTTKRP of ``mode``.
        grams : list of ndarray of shape (R, R)
            The Gram matrices of every factor (host, float64); ``grams[mode]`` is not read.
        mode : int
            The factor updated.
        first : bool, default=False
            Whether this is the first iteration (2-norms as weights).

        Returns
        -------
        U : backend array of shape (I_mode, R)
            The new factor (a new array: ``M`` is not changed).
        weights : ndarray of shape (R,)
            The column weights, float64.
        gram : ndarray of shape (R, R)
            ``UᵀU``, float64.

        Raises
        ------
        FloatingPointError
            When ``Y`` holds NaN or infinite values (the iteration diverged).
        """
        from .gram import hadamard_except, inverse_gram
        U = self.matmul_small(M, inverse_gram(hadamard_except(grams, mode)))
        if first:
            weights = self.column_norms(U, 2)
        else:
            weights = np.maximum(self.column_norms(U, np.inf), 1.0)
        scale = np.where(weights > 0, 1.0 / np.where(weights > 0, weights, 1), 1.0)
        self.scale_columns(U, scale)
        return U, weights, self.gram(U)

    def als_start(self, M, grams, mode, first=False, col_scale=None, inner=False):
        """Begin CP-ALS's update of factor ``mode`` (:meth:`als_update`); :meth:`als_finish`
        ends it.  Between the two, an algorithm may enqueue the next MTTKRP, which then reads
        the new factor before its columns are scaled: a backend whose device works while the
        host waits (OpenCL) scales them only in :meth:`als_finish`, so that the device never
        waits for the host's small R x R steps.

        Parameters
        ----------
        M, grams, mode, first
            As for :meth:`als_update`.
        col_scale : ndarray of shape (R,) or None, default=None
            ``M``'s columns are to be multiplied by these first: the scales that
            :meth:`als_finish` returned as deferred for a factor that ``M``'s MTTKRP read
            before they were applied (the MTTKRP is linear in each factor's columns).
        inner : bool, default=False
            Whether :meth:`als_finish` is also to return ``inner(U, M)`` of the finished
            factor and the (scaled) MTTKRP: the ``⟨X, M⟩`` of the fit.

        Returns
        -------
        U : backend array of shape (I_mode, R)
            The new factor; its columns may be scaled only by :meth:`als_finish`.
        pending : object
            Handed to :meth:`als_finish`; ``pending.ready`` tells whether the host has
            anything left to wait for (False: enqueueing device work before
            :meth:`als_finish` overlaps it with the wait).

        The default runs the whole update at once (:meth:`als_update`): nothing is deferred.
        """
        if col_scale is not None:
            M = self.scale_columns(M, np.asarray(col_scale, dtype=np.float64))
        U, weights, gram = self.als_update(M, grams, mode, first)
        ip = np.asarray(self.inner(U, M), dtype=np.float64) if inner else None
        return U, _ALSDone(weights, gram, ip)

    def als_finish(self, pending):
        """End the update begun by :meth:`als_start`: ``(weights, gram, deferred, inner)``,
        the column weights and ``UᵀU`` of the finished factor as :meth:`als_update` returns
        them, ``deferred`` None or the scales applied to the factor's columns only now (a
        MTTKRP enqueued since :meth:`als_start` read the factor without them: its columns
        are to be multiplied by these), and ``inner`` the per-column ``inner(U, M)`` asked
        for by ``als_start(..., inner=True)`` (else None)."""
        return pending.weights, pending.gram, None, pending.inner

    #: shapes of the kernels' dense arguments, checked before any compiled code runs
    check_factors = staticmethod(check_factors)

    def tensor_norm_sq(self, T):
        return T.norm_sq

    def model_zero_count(self, T, weights, factors):
        """How many nonzeros of ``T`` the Kruskal model gives a value <= 0 (an int)."""
        self.check_factors(T, factors, weights=weights)
        return self._model_zero_count(T, weights, factors)

    def _model_zero_count(self, T, weights, factors):
        m = np.asarray(self.to_numpy(self._model_values(T, weights, factors)))
        return int(np.count_nonzero(m <= 0))

    #: whether :meth:`stream_window` builds the windows of ``partial_fit`` (the history kept
    #: where the data are); False: the host builds them
    stream_windows = False

    def stream_window(self, history, X, T, format="auto"):
        """The tensor of an update of ``partial_fit`` (the history's slices, then those of the
        batch ``X``), built where this backend keeps the data, or None: the host builds it
        (the default) from a host history.

        Parameters
        ----------
        history : object or None
            What the previous update kept: a host :class:`~sktensor_fast.SparseTensor`, or
            what a window of this method returned kept (its ``keep(rows)``).
        X : SparseTensor
            The batch.
        T : object
            ``X`` prepared by this backend in ``format``.
        format : str
            The storage format the estimator prepares.

        Returns
        -------
        object or None
            A tensor the estimators fit as a host tensor (its prepared form kept for
            ``format``), with ``keep(rows)``: the history of its slices ``rows``.
        """
        return None

    def decide(self, flag):
        """A host decision that every participant of the fit must take alike (e.g. a time
        limit read from a clock): returned as it is on one device; the distributed backend
        takes process 0's."""
        return bool(flag)

    def poisson_data_term(self, T, weights, factors, eps=0.0):
        """Σ over the nonzeros of x log(max(m, eps)) as a float, ``m`` the values of the
        Kruskal model (``weights``, ``factors``) there; terms with x = 0 are 0.  Backends form
        m on the fly (no array of nnz model values)."""
        self.check_factors(T, factors, weights=weights)
        return self._poisson_data_term(T, weights, factors, eps)

    def _poisson_data_term(self, T, weights, factors, eps):
        raise NotImplementedError(f"the {self.name!r} backend does not implement "
                                  f"poisson_data_term")

    # --- CP-APR primitives --------------------------------------------------------------
    @property
    def apr(self):
        """The CP-APR primitives of this backend (an :class:`AprKernels`), made at first use."""
        kernels = self.__dict__.get("_apr_kernels")
        if kernels is None:
            kernels = self.__dict__["_apr_kernels"] = self._make_apr_kernels()
        return kernels

    def _make_apr_kernels(self):
        """The :class:`AprKernels` subclass instance of this backend (default: only the host
        fallback of ``mu_rows_``; the other primitives raise NotImplementedError)."""
        return AprKernels(self)

    # --- GCP primitives ----------------------------------------------------------------
    @property
    def gcp(self):
        """The GCP primitives of this backend (a :class:`GcpKernels`), made at first use."""
        kernels = self.__dict__.get("_gcp_kernels")
        if kernels is None:
            kernels = self.__dict__["_gcp_kernels"] = self._make_gcp_kernels()
        return kernels

    def _make_gcp_kernels(self):
        """The :class:`GcpKernels` subclass instance of this backend (default: none, every
        primitive raises NotImplementedError)."""
        return GcpKernels(self)

    def info(self):
        """A dict describing this backend for ``show_config``."""
        return {"name": self.name}
