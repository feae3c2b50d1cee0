"""The kernel interface: the few primitives every algorithm is written against.

An algorithm (CP-ALS, CP-APR, GCP) never asks which device it runs on.  It receives a
:class:`Backend`, asks it to ``prepare`` the tensor once (upload it, build the storage format),
keeps its factor matrices as backend arrays, and calls the primitives below.  Only R x R
matrices, length-R vectors and scalars come back to the host as NumPy objects.

Backend arrays are whatever the backend uses (NumPy arrays on the CPU, ``pyopencl.array.Array``
on an OpenCL device).  Factor matrices are C-contiguous (I_n x R).

The primitives of one algorithm are grouped: ``backend.apr`` (:class:`AprKernels`, CP-APR's
element-wise steps and row solvers) and ``backend.gcp`` (:class:`GcpKernels`, GCP's sampling,
gradients, losses and optimiser steps).  Arguments are checked once, here: the public methods
(``mttkrp``, ``phi``, ``model_values``, ``poisson_data_term`` and those of the groups) check
them and call the backend's ``_``-prefixed implementation, so every backend refuses the same
bad input with the same message.
"""
import contextlib
import math
from abc import ABC, abstractmethod

import numpy as np

__all__ = ["Backend", "AprKernels", "GcpKernels", "FORMATS"]

#: Values of the estimators' ``format`` parameter: every storage format that some device
#: accepts (a backend's ``formats`` names those it gives a meaning to).
FORMATS = ("auto", "coo", "alto")


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
    def prepare(self, X, format="auto"):
        """Lay out a validated :class:`SparseTensor` for the kernels (once per fit); ``format``
        as returned by :meth:`storage_format`."""

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

    @staticmethod
    def check_factors(T, factors, mode=None, B=None, out=None, weights=None):
        """Shapes of the kernels' dense arguments, checked before any compiled code runs.

        Every factor k must be (I_k x R) with one R; ``B`` and ``out`` (I_mode x R); ``weights``
        of length R.  Returns R.  Raises ValueError naming the argument otherwise.
        """
        if len(factors) != T.ndim:
            raise ValueError(f"{len(factors)} factor matrices given for a tensor with {T.ndim} "
                             f"modes")
        shapes = [tuple(getattr(f, "shape", np.shape(f))) for f in factors]
        if any(len(s) != 2 for s in shapes):
            raise ValueError(f"factor matrices must be 2-D, got shapes {shapes}")
        R = shapes[0][1]
        for k, s in enumerate(shapes):
            if s[1] != R:
                raise ValueError(f"factor {k} has {s[1]} columns, factor 0 has {R}")
            if s[0] != T.shape[k] and k != mode:
                raise ValueError(f"factor {k} has {s[0]} rows but mode {k} of the tensor has "
                                 f"length {T.shape[k]}")
        if mode is not None and not 0 <= mode < T.ndim:
            raise ValueError(f"mode {mode} is out of range for a tensor with {T.ndim} modes")
        for name, a in (("B", B), ("out", out)):
            if a is not None and tuple(a.shape) != (T.shape[mode], R):
                raise ValueError(f"{name} has shape {tuple(a.shape)}, expected "
                                 f"({T.shape[mode]}, {R})")
        if weights is not None and np.shape(weights) != (R,):
            raise ValueError(f"weights have shape {np.shape(weights)}, expected ({R},)")
        return R

    def tensor_norm_sq(self, T):
        return T.norm_sq

    def model_zero_count(self, T, weights, factors):
        """How many nonzeros of ``T`` the Kruskal model gives a value <= 0 (an int)."""
        self.check_factors(T, factors, weights=weights)
        return self._model_zero_count(T, weights, factors)

    def _model_zero_count(self, T, weights, factors):
        m = np.asarray(self.to_numpy(self._model_values(T, weights, factors)))
        return int(np.count_nonzero(m <= 0))

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


# ---------------------------------------------------------------------- CP-APR primitives
#: the row solvers of CP-APR's Newton variants
APR_METHODS = ("pdnr", "pqnr")


def _same_shape(A, Phi, a="A", b="Phi"):
    for name, x in ((a, A), (b, Phi)):
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            raise TypeError(f"{name} must be a NumPy or device array, got {type(x).__name__}")
    if tuple(Phi.shape) != tuple(A.shape):
        raise ValueError(f"{b} has shape {tuple(Phi.shape)}, {a} has {tuple(A.shape)}")


def _real(value, name, lo=None, strict=False):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)) \
            or math.isnan(float(value)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if lo is not None and (value <= lo if strict else value < lo):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {lo:g}, got {value!r}")
    return value


def _row_params(params):
    """CP-APR's row-solver parameters, checked, with the defaults of mu0 and lbfgs_mem."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    missing = [k for k in ("tol", "max_inner", "eps_div_zero", "eps_active") if k not in params]
    if missing:
        raise ValueError(f"CP-APR row solver parameters lack {', '.join(missing)}")
    out = {}
    for key, default, lo, strict in (("tol", None, None, False),
                                     ("eps_div_zero", None, 0.0, True),
                                     ("eps_active", None, 0.0, False),
                                     ("mu0", 1e-5, 0.0, True)):
        out[key] = _real(params.get(key, default), f"CP-APR row solver parameter {key}", lo,
                         strict)
    for key, default, lo in (("max_inner", None, 0), ("lbfgs_mem", 3, 1)):
        v = params.get(key, default)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"CP-APR row solver parameter {key} must be an integer, got {v!r}")
        v = int(v)
        if not lo <= v <= 2 ** 31 - 1:
            raise ValueError(f"CP-APR row solver parameter {key} must be in "
                             f"[{lo}, {2 ** 31 - 1}], got {v}")
        out[key] = v
    return out


class AprKernels:
    """The element-wise steps of CP-APR on (I x R) backend arrays and the row subproblem
    solver of its Newton variants, on one backend: ``backend.apr``.

    The public methods check their arguments here, once for every backend, and call the
    backend's ``_``-prefixed implementation.  This base class implements only ``mu_rows_``
    (through the host); the others raise NotImplementedError.
    """

    def __init__(self, backend):
        self.backend = backend

    def _missing(self, what):
        raise NotImplementedError(f"the {self.backend.name!r} backend does not implement the "
                                  f"CP-APR primitive {what}")

    # ------------------------------------------------------------------ public, checked
    def shift_inadmissible(self, A, Phi, kappa_tol, kappa):
        """A[(Phi > 1) & (A < kappa_tol)] += kappa in place (the "inadmissible zeros" of
        CP-APR MU: entries stuck at zero although the gradient asks them to grow); returns the
        number of shifted entries."""
        _same_shape(A, Phi)
        return self._shift_inadmissible(A, Phi, _real(kappa_tol, "kappa_tol"),
                                        _real(kappa, "kappa"))

    def kkt_violation(self, B, Phi):
        """max |min(B, 1 - Phi)| over all entries, as a float (0.0 for an empty B)."""
        _same_shape(B, Phi, "B")
        return self._kkt_violation(B, Phi)

    def multiply_(self, B, Phi):
        """B *= Phi element-wise in place; returns B."""
        _same_shape(B, Phi, "B")
        return self._multiply_(B, Phi)

    def mu_rows_(self, B, Phi, tol):
        """B[i] *= Phi[i] in place for the rows whose KKT violation max_r |min(B, 1 - Phi)|
        is at least ``tol``; returns how many rows were updated (row-wise MU steps, so that a
        row's result does not depend on the other rows)."""
        _same_shape(B, Phi, "B")
        if len(B.shape) != 2:
            raise ValueError(f"B must be 2-D, got shape {tuple(B.shape)}")
        return self._mu_rows_(B, Phi, _real(tol, "tol"))

    def row_solve(self, T, factors, mode, B, method, params):
        """Solve CP-APR's row subproblems of ``mode`` in place in ``B``.

        ``factors[k]`` for k != mode are held fixed, ``B`` (I_mode x R) holds the starting
        point with the weights folded in.  ``method`` is ``"pdnr"`` (projected damped Newton)
        or ``"pqnr"`` (projected L-BFGS); ``params`` holds ``tol``, ``max_inner``,
        ``eps_div_zero``, ``eps_active`` and optionally ``mu0`` (1e-5) and ``lbfgs_mem`` (3).
        Returns a dict with ``kkt`` (largest KKT violation of a row at its first inner
        iteration), ``n_inner`` (inner iterations summed over rows) and ``n_changed`` (rows
        that were not converged on entry).
        """
        if method not in APR_METHODS:
            raise ValueError(f"unknown CP-APR row solver {method!r}; use 'pdnr' or 'pqnr'")
        if isinstance(mode, (bool, np.bool_)) or not isinstance(mode, (int, np.integer)):
            raise TypeError(f"mode must be an integer, got {mode!r}")
        if not (hasattr(B, "shape") and hasattr(B, "dtype")):
            raise TypeError(f"B must be a NumPy or device array (updated in place), got "
                            f"{type(B).__name__}")
        factors = list(factors)
        self.backend.check_factors(T, factors, int(mode), B=B)
        return self._row_solve(T, factors, int(mode), B, method, _row_params(params))

    # ------------------------------------------------------------------ implementations
    def _shift_inadmissible(self, A, Phi, kappa_tol, kappa):
        self._missing("shift_inadmissible")

    def _kkt_violation(self, B, Phi):
        self._missing("kkt_violation")

    def _multiply_(self, B, Phi):
        self._missing("multiply_")

    def _mu_rows_(self, B, Phi, tol):
        """Through the host: backends should override it."""
        be = self.backend
        Bh = np.array(be.to_numpy(B))
        Ph = np.asarray(be.to_numpy(Phi))
        if Bh.size == 0:
            return 0
        rows = np.flatnonzero(np.max(np.abs(np.minimum(Bh, 1 - Ph)), axis=1) >= tol)
        if rows.size:
            Bh[rows] *= Ph[rows]
            if hasattr(B, "set"):        # device arrays (pyopencl.array.Array)
                B.set(np.ascontiguousarray(Bh))
            else:
                B[...] = Bh
        return int(rows.size)

    def _row_solve(self, T, factors, mode, B, method, params):
        self._missing("row_solve")


# ---------------------------------------------------------------------- GCP primitives
#: the samplers of the GCP primitives
GCP_SAMPLERS = ("stratified", "semi-stratified", "uniform")
#: the element-wise updates of the stochastic optimisers that the kernels implement
#: (:meth:`GcpKernels.optimizer_update`): rule -> (names of the moments kept per factor,
#: names of the coefficients of a step).  The optimiser objects of
#: decomposition/optimizers.py compute the coefficients of each step.
GCP_UPDATE_RULES = {
    "sgd": ((), ("lr",)),
    "adagrad": (("s",), ("lr", "epsilon")),
    "adam": (("m", "v"), ("beta1", "beta2", "step", "guard")),
}


def _int(value, name, lo=0, hi=None):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or isinstance(value, np.bool_):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < lo or (hi is not None and value >= hi):
        rng = f"[{lo}, {hi})" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be in {rng}, got {value}")
    return value


def _float(value, name):
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if value != value:
        raise ValueError(f"{name} must not be NaN")
    return value


def _pair(value, name):
    try:
        vals = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a pair (nonzeros, others), got {value!r}") from None
    if len(vals) != 2:
        raise ValueError(f"{name} must be a pair (nonzeros, others), got {value!r}")
    return tuple(_int(v, name) for v in vals)


def _active(active, N):
    if active is None:
        return (True,) * N
    act = tuple(bool(a) for a in active)
    if len(act) != N:
        raise ValueError(f"active has {len(act)} entries for {N} modes")
    return act


def _check_loss(loss, exact=False):
    """A loss object of decomposition/losses.py (integer ``code``, ``param``) or a user's
    object with ``value(x, m)`` and ``deriv(x, m)``."""
    has_fns = callable(getattr(loss, "value", None)) and callable(getattr(loss, "deriv", None))
    code = getattr(loss, "code", None)
    if code is None and has_fns:
        return loss
    if isinstance(code, (bool, np.bool_)) or not isinstance(code, (int, np.integer)):
        raise TypeError(f"loss must be a loss object of decomposition.losses (with an integer "
                        f"code), got {type(loss).__name__}")
    if (code < 0 or exact) and not has_fns:
        raise TypeError("loss needs methods value(x, m) and deriv(x, m)")
    return loss


def _check_zero_subs(zero_subs, shape):
    """``zero_subs`` as an int64 (n, N) array of coordinates inside ``shape``."""
    N = len(shape)
    z = np.asarray(zero_subs)
    if z.size == 0:
        return np.zeros((0, N), dtype=np.int64)
    if z.dtype.kind not in "iu":
        if z.dtype.kind == "f" and np.all(np.isfinite(z)) and np.all(z == np.round(z)):
            z = z.astype(np.int64)
        else:
            raise TypeError(f"zero_subs must hold integer coordinates, got dtype {z.dtype}")
    if z.ndim != 2 or z.shape[1] != N:
        raise ValueError(f"zero_subs must be an (n, {N}) array of coordinates, got shape "
                         f"{z.shape}")
    z = np.ascontiguousarray(z, dtype=np.int64)
    bad = (z < 0) | (z >= np.asarray(shape, dtype=np.int64)[None, :])
    if bad.any():
        row = int(np.argwhere(bad)[0, 0])
        raise ValueError(f"zero_subs row {row} {tuple(z[row])} is outside the tensor's shape "
                         f"{tuple(shape)}")
    return z


def _shape(a):
    shape = getattr(a, "shape", None)
    if type(shape) is tuple:
        return shape
    return tuple(shape) if shape is not None else np.shape(a)


def _matrices(arrays, name, N=None):
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"{name} must be a list of (I_k x R) matrices")
    if N is not None and len(arrays) != N:
        raise ValueError(f"{name} has {len(arrays)} arrays for {N} modes")
    shapes = [_shape(a) for a in arrays]
    if any(len(sh) != 2 for sh in shapes):
        raise ValueError(f"{name} must be 2-D matrices, got shapes {shapes}")
    return shapes


def _sample_factors(sample, weights, factors):
    """Checks of an explicit sample (subs, x, w, corr) against the factors; returns R."""
    shapes = _matrices(factors, "factors")
    R = shapes[0][1] if shapes else 0
    if any(sh[1] != R for sh in shapes):
        raise ValueError(f"the factors have different numbers of columns: {shapes}")
    if np.shape(weights) != (R,):
        raise ValueError(f"weights have shape {np.shape(weights)}, expected ({R},)")
    try:
        subs, x, w, corr = sample
    except (TypeError, ValueError):
        raise TypeError("sample must be a tuple (subs, x, w, corr)") from None
    n = np.shape(x)[0] if np.ndim(x) == 1 else -1
    if np.shape(subs) != (n, len(factors)) or np.shape(w) != (n,) or np.shape(corr) != (n,):
        raise ValueError(f"sample: subs must be (n, {len(factors)}) and x, w, corr of length "
                         f"n; got shapes {np.shape(subs)}, {np.shape(x)}, {np.shape(w)}, "
                         f"{np.shape(corr)}")
    return R


def _moments(rule, moments, shapes, active, name="moments"):
    """Checks of the moments of update ``rule`` against the factors' shapes (the active
    modes); returns them as a tuple of lists."""
    names = GCP_UPDATE_RULES[rule][0]
    if not isinstance(moments, (list, tuple)) or len(moments) != len(names):
        raise ValueError(f"{name} must hold the {len(names)} moment(s) of the {rule!r} update "
                         f"({', '.join(names) or 'none'}), one list of arrays per moment")
    N = len(shapes)
    for j, arrs in enumerate(moments):
        if not isinstance(arrs, (list, tuple)) or len(arrs) != N:
            raise ValueError(f"{name}: moment {names[j]!r} must hold {N} arrays, one per "
                             f"factor")
        for k in range(N):
            if active[k] and _shape(arrs[k]) != shapes[k]:
                raise ValueError(f"mode {k}: moment {names[j]!r} has shape "
                                 f"{_shape(arrs[k])}, the factor {shapes[k]}")
    return tuple(moments)


class GcpKernels:
    """The primitives of generalized CP (decomposition/gcp.py) on one backend:
    ``backend.gcp``.

    The public methods check their arguments here, once for every backend, and call the
    backend's ``_``-prefixed implementation with them checked (active modes as a tuple of
    bools, counts as ints, coordinates as int64).  ``loss`` is a loss object of
    decomposition/losses.py: built-in losses carry an integer ``code`` (and ``param``) for
    the kernels, a user-defined loss has code < 0 (or none) and is evaluated on the host.
    This base class implements none of them: a backend without GCP raises
    NotImplementedError.
    """

    def __init__(self, backend):
        self.backend = backend

    def _missing(self, what):
        raise NotImplementedError(f"the {self.backend.name!r} backend does not implement the "
                                  f"GCP primitive {what}")

    # ------------------------------------------------------------------ public, checked
    def setup(self, T, sampler, n_grad, n_loss, loss_seed, zero_subs=None):
        """Prepare stochastic GCP on the prepared tensor ``T`` (once per fit); returns a state.

        ``sampler`` is ``"stratified"``, ``"semi-stratified"`` or ``"uniform"``; ``n_grad`` is
        (samples of nonzeros, samples of other entries) per gradient step (uniform: their sum
        is drawn from all entries); ``n_loss`` the same for the fixed stratified sample of the
        loss estimate, drawn here from ``loss_seed``.  ``zero_subs`` (host int array) lists the
        observed zero entries when only some entries are observed (a mask); by default every
        entry outside the nonzeros of ``T`` is an observed zero.  The state exposes ``n_grad``,
        ``n_loss`` (counts actually used), ``n_entries`` (entries the loss sums over) and
        ``dtype`` (of the factor matrices the stochastic primitives work on).
        """
        if sampler not in GCP_SAMPLERS:
            raise ValueError(f"unknown sampler {sampler!r}; use one of {sorted(GCP_SAMPLERS)}")
        n_grad = _pair(n_grad, "n_grad")
        n_loss = _pair(n_loss, "n_loss")
        loss_seed = _int(loss_seed, "loss_seed", 0, 2 ** 64)
        if zero_subs is not None:
            zero_subs = _check_zero_subs(zero_subs, T.shape)
        return self._setup(T, sampler, n_grad, n_loss, loss_seed, zero_subs)

    def sampled_gradient(self, T, state, weights, factors, loss, seed, step, out=None,
                         active=None, with_loss=False):
        """Stochastic gradient of Σ f(x, m) w.r.t. every factor, from one fresh sample.

        The sample is a function of (``seed``, ``step``) only, so runs are reproducible and
        independent of the thread count.  Returns ``(grads, f)``: backend arrays shaped like
        ``factors`` (``out`` is reused when given; modes with ``active[k]`` false are left
        untouched) and the sampled loss estimate when ``with_loss`` (else None).
        """
        _matrices(factors, "factors")
        self.backend.check_factors(T, factors, weights=weights)
        loss = _check_loss(loss)
        seed = _int(seed, "seed", 0, 2 ** 64)
        step = _int(step, "step", 0, 2 ** 64 - 1)
        act = _active(active, T.ndim)
        if out is not None and len(out) != T.ndim:
            raise ValueError(f"out has {len(out)} arrays for {T.ndim} modes")
        return self._sampled_gradient(T, state, weights, factors, loss, seed, step, out, act,
                                      bool(with_loss))

    def loss_estimate(self, T, state, weights, factors, loss):
        """Estimate of Σ f(x, m) over all (observed) entries from the state's fixed sample."""
        _matrices(factors, "factors")
        self.backend.check_factors(T, factors, weights=weights)
        return self._loss_estimate(T, state, weights, factors, _check_loss(loss))

    def full_loss_grad(self, T, weights, factors, loss, mask=None, modes=None,
                       need_grad=True):
        """Exact Σ f(x, m) over all entries (``mask``: boolean array, True = observed) and the
        exact gradient of the modes in ``modes`` (all by default), the MTTKRP of the dense
        derivative tensor.  Returns ``(float, grads)``; only for tensors small enough to be
        dense (the estimator checks the size first)."""
        _matrices(factors, "factors")
        self.backend.check_factors(T, factors, weights=weights)
        loss = _check_loss(loss, exact=True)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != tuple(T.shape):
                raise ValueError(f"mask has shape {mask.shape}, expected {tuple(T.shape)}")
            mask = mask.astype(bool)
        if modes is not None:
            modes = [_int(k, "mode", 0, T.ndim) for k in modes]
        return self._full_loss_grad(T, weights, factors, loss, mask, modes, bool(need_grad))

    def sample_gradient(self, sample, weights, factors, loss, out=None, active=None,
                        with_loss=False):
        """As :meth:`sampled_gradient`, over an explicit sample instead of a drawn one.

        ``sample`` is ``(subs, x, w, corr)``: host arrays of coordinates (n x N, int64),
        values, weights and semi-stratified correction flags (int8), in the order in which
        the contributions are to be added.  The distributed backend uses it: each process
        holds the part of a draw whose data it owns."""
        _sample_factors(sample, weights, factors)
        act = _active(active, len(factors))
        if out is not None and len(out) != len(factors):
            raise ValueError(f"out has {len(out)} arrays for {len(factors)} modes")
        return self._sample_gradient(sample, weights, factors, _check_loss(loss), out, act,
                                     bool(with_loss))

    def sample_loss(self, sample, weights, factors, loss):
        """Σ_j w_j (f(x_j, m_j) − corr_j f(0, m_j)) over an explicit ``sample`` (see
        :meth:`sample_gradient`)."""
        _sample_factors(sample, weights, factors)
        return self._sample_loss(sample, weights, factors, _check_loss(loss))

    def optimizer_update(self, rule, factors, grads, moments, coefficients, lower,
                         active=None):
        """One step of a stochastic optimiser in place on ``factors`` and ``moments``, every
        factor entry clipped to ``lower`` (modes with ``active[k]`` false untouched).

        ``rule`` is a key of :data:`GCP_UPDATE_RULES`; ``moments[j][k]`` is moment j of
        factor k (shaped like it), ``coefficients`` the scalars of this step:

        - ``"sgd"``, ``(lr,)``: ``U ← max(U − lr G, lower)``;
        - ``"adagrad"``, ``(lr, epsilon)``, moments ``(S,)``: ``S ← S + G²``,
          ``U ← max(U − lr G / (√S + epsilon), lower)``;
        - ``"adam"``, ``(beta1, beta2, step, guard)``, moments ``(M, V)``:
          ``M ← beta1 M + (1 − beta1) G``, ``V ← beta2 V + (1 − beta2) G²``,
          ``U ← max(U − step M / (√V + guard), lower)``.

        The optimiser objects (decomposition/optimizers.py) compute the coefficients of each
        step (Adam's bias corrections are folded into ``step`` and ``guard``)."""
        if not isinstance(rule, str) or rule not in GCP_UPDATE_RULES:
            raise ValueError(f"unknown update rule {rule!r}; use one of "
                             f"{', '.join(GCP_UPDATE_RULES)}")
        coef_names = GCP_UPDATE_RULES[rule][1]
        shapes = _matrices(factors, "factors")
        N = len(factors)
        if not isinstance(grads, (list, tuple)) or len(grads) != N:
            raise ValueError(f"{len(grads) if isinstance(grads, (list, tuple)) else grads!r} "
                             f"gradients for {N} factors")
        act = _active(active, N)
        moments = _moments(rule, moments, shapes, act)
        for k in range(N):
            if act[k] and _shape(grads[k]) != shapes[k]:
                raise ValueError(f"mode {k}: the gradient has shape {_shape(grads[k])}, the "
                                 f"factor {shapes[k]}")
        try:
            coefs = tuple(coefficients)
        except TypeError:
            coefs = None
        if coefs is None or len(coefs) != len(coef_names):
            raise ValueError(f"the {rule!r} update takes the coefficients "
                             f"({', '.join(coef_names)}), got {coefficients!r}")
        coefs = tuple(_float(c, name) for c, name in zip(coefs, coef_names))
        return self._optimizer_update(rule, factors, grads, moments, coefs,
                                      _float(lower, "lower"), act)

    def steps(self, T, state, weights, factors, loss, seed, first_draw, n_steps, optimizer,
              lower, active=None, out=None, deadline=None, clock=None):
        """``n_steps`` steps of a stochastic optimiser: for ``s = 0, 1, …`` the gradient of
        draw ``first_draw + s`` (:meth:`sampled_gradient`), then ``optimizer.step`` (its
        next step, through :meth:`optimizer_update`), every factor entry clipped to
        ``lower``.  ``optimizer`` is an optimiser object of decomposition/optimizers.py
        after its ``start``.  With ``deadline``, stops after the first step at which
        ``clock()`` exceeds it (a ``backend.decide``, so that the processes of a distributed
        fit stop together).  Returns ``(grads, steps_done, timed_out)``.  By default the
        steps run one by one; a backend may run them in one call (the same results, the
        optimiser's step counter advanced by the steps done)."""
        shapes = _matrices(factors, "factors")
        self.backend.check_factors(T, factors, weights=weights)
        loss = _check_loss(loss)
        seed = _int(seed, "seed", 0, 2 ** 64)
        first_draw = _int(first_draw, "first_draw", 0, 2 ** 64 - 1)
        n_steps = _int(n_steps, "n_steps", 0)
        rule = getattr(optimizer, "rule", None)
        if not (isinstance(rule, str) and rule in GCP_UPDATE_RULES
                and callable(getattr(optimizer, "step", None))):
            raise TypeError(f"optimizer must be a stochastic optimiser of "
                            f"decomposition.optimizers (e.g. make_optimizer('adam')), got "
                            f"{type(optimizer).__name__}")
        act = _active(active, T.ndim)
        if getattr(optimizer, "moments", None) is None:
            raise ValueError("the optimiser has no moments: call optimizer.start(backend, "
                             "factors) first")
        _moments(rule, optimizer.moments, shapes, act, "the optimiser's moments")
        if out is not None:
            if len(out) != T.ndim:
                raise ValueError(f"out has {len(out)} arrays for {T.ndim} modes")
            for k, g in enumerate(out):
                if _shape(g) != shapes[k]:
                    raise ValueError(f"out[{k}] has shape {_shape(g)}, the factor {shapes[k]}")
        if deadline is not None and not callable(clock):
            raise TypeError("a deadline needs a clock (a callable returning the time)")
        return self._steps(T, state, weights, factors, loss, seed, first_draw, n_steps,
                           optimizer, _float(lower, "lower"), act, out, deadline, clock)

    # ------------------------------------------------------------------ implementations
    def _steps(self, T, state, weights, factors, loss, seed, first_draw, n_steps, optimizer,
               lower, active, out, deadline, clock):
        return self._stepwise(T, state, weights, factors, loss, seed, first_draw, n_steps,
                              optimizer, lower, active, out, deadline, clock)

    def _stepwise(self, T, state, weights, factors, loss, seed, first_draw, n_steps, optimizer,
                  lower, active, out, deadline, clock):
        """The steps one by one: the backend's gradient, then the optimiser's step."""
        for s in range(n_steps):
            out, _ = self._sampled_gradient(T, state, weights, factors, loss, seed,
                                            first_draw + s, out, active, False)
            optimizer.step(self.backend, factors, out, lower, active)
            if deadline is not None and self.backend.decide(clock() > deadline):
                return out, s + 1, True
        return out, n_steps, False

    def _setup(self, T, sampler, n_grad, n_loss, loss_seed, zero_subs):
        self._missing("setup")

    def _sampled_gradient(self, T, state, weights, factors, loss, seed, step, out, active,
                          with_loss):
        self._missing("sampled_gradient")

    def _loss_estimate(self, T, state, weights, factors, loss):
        self._missing("loss_estimate")

    def _full_loss_grad(self, T, weights, factors, loss, mask, modes, need_grad):
        self._missing("full_loss_grad")

    def _sample_gradient(self, sample, weights, factors, loss, out, active, with_loss):
        self._missing("sample_gradient")

    def _sample_loss(self, sample, weights, factors, loss):
        self._missing("sample_loss")

    def _optimizer_update(self, rule, factors, grads, moments, coefficients, lower, active):
        self._missing("optimizer_update")
