"""CP decomposition by alternating least squares (CP-ALS)."""
import math
import sys
import time

import numpy as np
from sklearn.utils._param_validation import Integral, Interval, StrOptions

from ..backends.gram import hadamard_except as _hadamard_except
from ..backends.gram import inverse_gram as _inverse_gram
from ..kruskal import KruskalTensor
from ..tensor import SparseTensor
from ._base import BaseCP, _InitConstraint
from .._prepared import value_stats
from .._warnings import warn as _warn

__all__ = ["CPALS"]


#: Data whose largest magnitude lies outside [2^-200, 2^200] are scaled by a power of two
#: before the fit: sums of squares of larger values could overflow, of smaller ones underflow.
_SAFE_EXPONENT = 200


def _data_scale(vals):
    """A power of two ``s`` such that ``vals / s`` has its largest magnitude in [0.5, 1), when
    the data are too large or too small for the norms of the fit; else 1 (nothing changes).
    Dividing by a power of two is exact, and the fit (a relative measure) does not depend on
    the scale.  For magnitudes of 2^1023 and more (up to the largest float64) ``s`` is 2^1023,
    the largest power of two a float holds, and the largest magnitude lies in [1, 2)."""
    if vals is None or vals.size == 0:   # no values here (a tensor spread over processes)
        return 1.0
    amax = float(np.max(np.abs(vals)))
    if not (0.0 < amax < math.inf):
        return 1.0
    if 2.0 ** -_SAFE_EXPONENT <= amax <= 2.0 ** _SAFE_EXPONENT:
        return 1.0
    return math.ldexp(1.0, min(math.frexp(amax)[1], sys.float_info.max_exp - 1))


def _scaled(X, s):
    if hasattr(X, "scaled"):          # a tensor that scales itself (spread over processes)
        return X.scaled(s)
    vals = (X.vals.astype(np.float64) / s).astype(X.vals.dtype)
    return SparseTensor._from_canonical(X.subs, vals, X.shape)


def _max_abs(X):
    """The largest magnitude of the values: from the one compiled pass over them kept with the
    tensor (:func:`~sktensor_fast._prepared.value_stats`), so that a fit, a refit or a score
    reads no value again (and copies none)."""
    if hasattr(X, "max_abs"):         # a tensor that knows it (spread over processes)
        return X.max_abs()
    return float(value_stats(X)["max_abs"])


class CPALS(BaseCP):
    """CP decomposition by alternating least squares.

    Fits ``X ≈ Σ_r λ_r a⁽⁰⁾_r ∘ a⁽¹⁾_r ∘ … ∘ a⁽ᴺ⁻¹⁾_r`` minimising the sum of squared errors over
    all entries (zeros included), with the sparse MTTKRP as the only pass over the data.  The
    fit ``1 − ‖X − M‖ / ‖X‖`` is computed without forming the dense tensor, from
    ``‖X‖² − 2⟨X, M⟩ + ‖M‖²``.

    Parameters
    ----------
    rank : int, default=5
        Number of components R.  The default serves a first look, the same in every estimator
        and on the command line: five components are enough for the main patterns of a data
        set to come apart (two usually merge them) and few enough to read in one screen of
        :func:`~sktensor_fast.describe_components`.  Choose the rank for real work by
        comparing ranks (see the user guide's "Choosing the rank").
    max_iter : int, default=100
        Maximum number of outer iterations (one update of every factor).
    tol : float, default=1e-4
        Stop when the change in fit between two iterations is below ``tol`` (Tensor Toolbox
        semantics).
    init : {"random", "nvecs"}, KruskalTensor or list of ndarray, default="random"
        Initial guess: uniform random factors, leading singular vectors of each unfolding, or a
        given model.
    random_state : int, RandomState instance or None
        Seed for the random initialisation.
    n_init : int, default=1
        Number of random starts; the model with the best fit is kept.
    device : str, default="cpu"
        ``"cpu"`` (Cython/OpenMP) or an OpenCL device (``"gpu"``, ``"opencl"``,
        ``"opencl:P:D"``).
    device_options : dict, OpenCLOptions or None, default=None
        Settings of the OpenCL kernels (see :class:`~sktensor_fast.OpenCLOptions`), over those
        of :func:`~sktensor_fast.config_context` and the ``SKTENSOR_FAST_OCL_*`` environment
        variables; results do not depend on them.  Only for OpenCL devices: setting one with
        ``device="cpu"`` is a ValueError.
    format : {"auto", "coo", "alto"}, default="auto"
        Storage format of the tensor for the kernels: COO with per-mode permutations, or ALTO
        (one bit-interleaved linear index per nonzero; needs Σ⌈log₂ I_n⌉ ≤ 128).  ``"auto"``
        picks ALTO for large tensors it fits (see :func:`sktensor_fast.backends.cpu.formats.build_format`).
    verbose : int, default=0
        Print progress (iteration, fit, change, time) to stderr.
    max_time : float or None, default=None
        Stop after the iteration during which this many seconds have passed (counted for each
        of the ``n_init`` starts).  A fit that stops at ``max_iter`` or ``max_time`` before the
        change in fit falls below ``tol`` warns (``sklearn.exceptions.ConvergenceWarning``).
    window : int or None, default=10
        :meth:`partial_fit` only: how many past mode-0 slices (the history of the stream) are
        kept and refitted with each new batch.  None keeps every slice (the memory then grows
        with the stream); 0 keeps none (each update sees its batch only).  :meth:`fit`
        ignores it.
    window_method : {"last", "reservoir"}, default="last"
        :meth:`partial_fit` only: which past slices the history keeps: the last ``window``
        ones, or a uniform sample of ``window`` slices of the whole stream (reservoir
        sampling, drawn from ``random_state``), which remembers old patterns longer.

    Attributes
    ----------
    weights_ : ndarray of shape (rank,)
        Component weights λ (columns of the factors have unit 2-norm), in decreasing order.
    factors_ : list of ndarray
        Factor matrices, ``factors_[n]`` of shape (I_n, rank).
    fit_ : float
        ``1 − ‖X − M‖ / ‖X‖`` at the end of the fit.  Data of magnitude above 2²⁰⁰ or below
        2⁻²⁰⁰ (where ‖X‖² would overflow or underflow) are fitted after an exact scaling by a
        power of two, and the weights scaled back (a ValueError if a weight then passes the
        largest float64, as a degenerate model of data near 1.8e308 may).
    n_iter_ : int
        Iterations run (by the kept start when ``n_init > 1``).
    converged_ : bool
        Whether the fit stopped by its own criterion, ``stop_reason_ == "tol"`` (False: it
        stopped at ``max_iter`` or ``max_time``, with a ConvergenceWarning).
    stop_reason_ : {"tol", "max_iter", "max_time"}
        Why the fit stopped: ``"tol"``, the fit ``1 − ‖X − M‖ / ‖X‖`` changed by less than
        ``tol`` between two iterations (converged); ``"max_iter"``, it ran ``max_iter``
        iterations first; ``"max_time"``, it ran out of time (``max_time`` seconds) first.
    loss_history_ : ndarray
        Fit after every iteration.
    n_features_in_ : int
        Number of entries of a mode-0 slice (I_1 ⋯ I_{N-1}).
    tensor_shape_ : tuple
        Shape of the fitted tensor.
    n_samples_seen_ : int
        :meth:`partial_fit` only: the mode-0 slices it was given so far (the first batch
        included, or the tensor of :meth:`fit` when the stream continues a fitted model).

    Examples
    --------
    >>> import numpy as np
    >>> from sktensor_fast import CPALS, KruskalTensor
    >>> rng = np.random.default_rng(0)
    >>> truth = KruskalTensor(None, [rng.random((10, 3)), rng.random((8, 3)), rng.random((6, 3))])
    >>> model = CPALS(rank=3, tol=1e-10, max_iter=500, random_state=0).fit(truth.full())
    >>> round(model.fit_, 4)
    1.0
    >>> model.transform(truth.full()[:2]).shape
    (2, 3)
    """

    _parameter_constraints = {
        **BaseCP._parameter_constraints,
        "init": [_InitConstraint({"random", "nvecs"})],
        "window": [Interval(Integral, 0, None, closed="left"), None],
        "window_method": [StrOptions({"last", "reservoir"})],
    }

    _objective_name = "fit"
    _tol_reached = "the fit changed by less than tol={tol:g} between two iterations"

    def __init__(self, rank=5, *, max_iter=100, tol=1e-4, init="random", random_state=None,
                 n_init=1, device="cpu", format="auto", verbose=0, max_time=None, device_options=None,
                 window=10, window_method="last"):
        self.rank = rank
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.random_state = random_state
        self.n_init = n_init
        self.device = device
        self.format = format
        self.verbose = verbose
        self.max_time = max_time
        self.device_options = device_options
        self.window = window
        self.window_method = window_method

    def _check_init_scale(self, factors):
        """CP-ALS does not depend on the scale of the initial columns (each update solves for
        a whole factor): columns of extreme magnitude, whose Gram matrices would overflow or
        underflow, are scaled by a power of two to entries below 1 (exact, and nothing changes
        for initial factors of ordinary scale)."""
        out = []
        for f in factors:
            # the largest magnitude of a column (its norm could itself over/underflow)
            top = np.max(np.abs(f), axis=0) if f.shape[0] else np.zeros(f.shape[1])
            bad = (top > 0) & ((top > 2.0 ** _SAFE_EXPONENT) | (top < 2.0 ** -_SAFE_EXPONENT))
            if np.any(bad):
                exps = np.where(bad, np.frexp(np.where(bad, top, 1.0))[1], 0)
                f = np.ascontiguousarray(np.ldexp(f, -exps[None, :]), dtype=f.dtype)
            out.append(f)
        for k, f in enumerate(out[1:], start=1):  # mode 0 is solved for first, whatever it is
            dead = np.flatnonzero(~np.any(f != 0, axis=0)) if f.shape[0] else []
            if len(dead):
                _warn(f"init: column(s) {list(map(int, dead))} of factor {k} are zero; "
                      f"CP-ALS keeps such components at zero", UserWarning)
        return out

    def _fit_impl(self, X, **fit_args):
        s = _data_scale(np.array([_max_abs(X)]))
        if s == 1.0:
            return super()._fit_impl(X, **fit_args)
        self._log(f"data scaled by 2^{-math.frexp(s)[1] + 1} for the fit (largest magnitude "
                  f"{_max_abs(X):.3g})")
        best = super()._fit_impl(_scaled(X, s), **fit_args)
        with np.errstate(over="ignore"):
            weights = self.weights_ * s
        if not np.all(np.isfinite(weights)):
            # the model of the scaled data has a weight past the float64 range once scaled back
            for key in ("weights_", "factors_"):
                self.__dict__.pop(key, None)
            raise ValueError(
                f"CPALS: the rank-{self.rank} model's weights exceed the largest float64 "
                f"({sys.float_info.max:.4g}) at the scale of the data (largest magnitude "
                f"{_max_abs(X):.4g}); fit the values divided by a power of two (e.g. 2**-16) "
                f"and multiply weights_ by it afterwards")
        self.weights_ = weights
        best["weights"] = self.weights_
        return best

    def _fit_model(self, backend, T, X, init, rng, warm=False):
        N = X.ndim
        U = [backend.asarray(f) for f in init]
        grams = [backend.gram(u) for u in U]
        norm_x2 = backend.tensor_norm_sq(T)
        norm_x = np.sqrt(norm_x2)
        fit = 0.0
        history = []
        weights = np.ones(self.rank)
        t0 = time.perf_counter()
        n_iter = 0
        stop = "max_iter"
        # Each factor's update is begun (als_start) and, where the backend's device works
        # while the host waits, finished (als_finish) only after the next MTTKRP has been
        # enqueued: that MTTKRP reads the new factor before its columns are scaled, and its
        # columns are scaled afterwards instead (``corr``, folded into the next update).
        ahead = None      # mode 0's MTTKRP of the next iteration, enqueued before the fit
        corr = None
        for it in range(self.max_iter):
            fit_old = fit
            pending = None
            for n in range(N):
                M = ahead if ahead is not None else backend.mttkrp(T, U, n)
                ahead = None
                if pending is not None:
                    weights, grams[n - 1], corr, _ = backend.als_finish(pending)
                U[n], pending = backend.als_start(M, grams, n, first=it == 0, col_scale=corr,
                                                  inner=n == N - 1)
                corr = None
            if not pending.ready and it + 1 < self.max_iter:
                ahead = backend.mttkrp(T, U, 0)
            weights, grams[N - 1], corr, ip = backend.als_finish(pending)
            if ahead is None:
                corr = None
            # ⟨X, M⟩ from the last MTTKRP; ‖M‖² from the Gram matrices
            iprod = float(np.dot(ip, weights))
            norm_m2 = float(weights @ _hadamard_except(grams, -1) @ weights)
            residual = np.sqrt(abs(norm_x2 + norm_m2 - 2.0 * iprod))
            fit = 1.0 - residual / norm_x
            history.append(fit)
            n_iter = it + 1
            if not np.isfinite(fit):
                raise FloatingPointError(
                    f"CPALS diverged at iteration {n_iter} (fit is {fit}); try a smaller rank or "
                    "init='nvecs'")
            change = abs(fit_old - fit)
            self._report_iteration(n_iter, fit, t0)
            if self.verbose and (self.verbose > 1 or it % 10 == 0):
                self._log(f"iter {n_iter:4d}  fit {fit:.8f}  change {change:.2e}  "
                          f"{time.perf_counter() - t0:.2f}s")
            if it > 0 and change < self.tol:
                stop = "tol"
                break
            if self.max_time is not None and backend.decide(time.perf_counter() - t0
                                                             > self.max_time):
                stop = "max_time"
                self._log(f"stopping: max_time={self.max_time:g}s reached")
                break
        self._log(f"done: {n_iter} iterations, fit {fit:.8f}, {time.perf_counter() - t0:.2f}s")
        # _arrange makes new matrices: the downloads may sit in the backend's kept buffer
        host = [np.asarray(u, dtype=np.float64) for u in backend.to_numpy_transient(U)]
        weights, host = _arrange(weights, host)
        return {"weights": weights, "factors": host, "n_iter": n_iter, "loss_history": history,
                "score": fit, "converged": stop == "tol", "stop": stop,
                "attributes": {"fit_": float(fit)}}

    def _solve_mode0(self, backend, T, X, factors):
        U = [backend.asarray(np.zeros((X.shape[0], self.rank_), dtype=X.dtype))]
        U += [backend.asarray(f, dtype=X.dtype) for f in factors[1:]]
        grams = [np.ones((self.rank_, self.rank_))] + [backend.gram(u) for u in U[1:]]
        M = backend.mttkrp(T, U, 0)
        W = backend.matmul_small(M, _inverse_gram(_hadamard_except(grams, 0)))
        return np.asarray(backend.to_numpy(W), dtype=np.float64)

    def _score_loadings(self, backend, T, X, W, factors):
        s = _data_scale(np.array([_max_abs(X)]))
        if s != 1.0:  # the score is scale-free: compute it on scaled data and loadings
            X = _scaled(X, s)
            T = backend.prepare(X, self._storage_format(backend))
            W = W / s
        R = W.shape[1]
        U = [backend.asarray(W, dtype=X.dtype)]
        U += [backend.asarray(f, dtype=X.dtype) for f in factors[1:]]
        grams = [backend.gram(u) for u in U]
        M = backend.mttkrp(T, U, 0)
        iprod = float(np.sum(backend.inner(U[0], M)))
        norm_m2 = float(np.ones(R) @ _hadamard_except(grams, -1) @ np.ones(R))
        norm_x2 = backend.tensor_norm_sq(T)
        residual = np.sqrt(abs(norm_x2 + norm_m2 - 2.0 * iprod))
        if norm_x2 == 0:
            return 1.0 if residual == 0 else -float(residual)
        return 1.0 - residual / np.sqrt(norm_x2)


def _arrange(weights, factors):
    """Unit 2-norm columns, weights absorbed and sorted in decreasing order, signs fixed:
    :meth:`KruskalTensor.normalize` with ``sort`` and ``signs``."""
    K = KruskalTensor._wrap(np.asarray(weights, dtype=np.float64),
                            [np.asarray(f) for f in factors])
    K = K.normalize(sort=True, signs=True)
    return K.weights, K.factors
