"""The scikit-learn skin shared by every CP estimator.

Samples are mode-0 slices: a tensor of shape (I_0, I_1, ..., I_{N-1}) holds I_0 samples, each
an (I_1 x ... x I_{N-1}) array, exactly as a 2-D matrix holds rows.  ``fit`` learns the Kruskal
model; ``fit_transform`` returns the mode-0 loadings (factor times weights, n_samples x rank);
``transform(X_new)`` fits the mode-0 loadings of new slices with the other factors held fixed;
``score`` is the estimator's own goodness of fit on X after that refit (greater is better);
``inverse_transform(W)`` returns the Kruskal model with loadings ``W``.

Subclasses implement three methods:

- ``_fit_model(backend, T, X, init, rng)`` -> dict(weights, factors, n_iter, loss_history, ...)
- ``_solve_mode0(backend, T, X, factors)`` -> loadings (n_samples x rank), NumPy
- ``_score_loadings(backend, T, X, W, factors)`` -> float
"""
import sys
import time
from abc import abstractmethod

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import (Integral, Interval, InvalidParameterError, Options,
                                            Real, StrOptions)
from sklearn.utils.validation import check_is_fitted

from .._memory import check_model_memory
from .._prepared import prepared
from ..backends import FORMATS, get_backend, parse_device
from ..backends.options import OpenCLOptions, as_options
from ..kruskal import KruskalTensor
from ..tensor import SparseTensor, as_sparse_tensor
from ._init import initialize_factors
from . import _progress
from .._warnings import warn as _warn

__all__ = ["BaseCP"]


def _stack_slices(H, X):
    """The slices of ``H`` (or none) followed by those of ``X``, in one tensor (both in
    canonical order, so the result is too)."""
    if H is None or H.shape[0] == 0:
        return X
    subs = np.array(X.subs, dtype=np.int64)
    subs[:, 0] += H.shape[0]
    return SparseTensor._from_canonical(
        np.concatenate([H.subs, subs]), np.concatenate([H.vals, X.vals.astype(H.vals.dtype)]),
        (H.shape[0] + X.shape[0],) + tuple(X.shape[1:]))


class _DeviceConstraint(Options):
    """Parameter constraint for ``device`` strings (validated by ``parse_device``)."""

    def __init__(self):
        super().__init__(str, {"cpu", "gpu", "opencl"})

    def is_satisfied_by(self, val):
        try:
            parse_device(val)
        except (TypeError, ValueError):
            return False
        return True

    def __str__(self):
        return "a device string: 'cpu', 'gpu', 'opencl' or 'opencl:P:D'"


class _InitConstraint(Options):
    """``init``: one of the named methods, a KruskalTensor or a list of factor matrices."""

    def __init__(self, strings):
        super().__init__(str, set(strings))
        self.strings = set(strings)

    def is_satisfied_by(self, val):
        if isinstance(val, str):
            return val in self.strings
        return isinstance(val, (KruskalTensor, list, tuple))

    def __str__(self):
        return (f"a str among {sorted(self.strings)}, a KruskalTensor or a list of factor "
                f"matrices")


def _refuses_bool(constraints):
    """Whether a parameter with these constraints is numeric and must refuse True / False
    (scikit-learn's ``Interval(Integral, ...)`` accepts them, as bool is an int subclass)."""
    numeric = any(isinstance(c, Interval) or c == "random_state" for c in constraints)
    boolean = any(c in ("boolean", "verbose", bool) for c in constraints)
    return numeric and not boolean


def _describe(constraints):
    parts = []
    for c in constraints:
        if c is None:
            parts.append("None")
        elif c == "random_state":
            parts.append("an int in the range [0, 4294967295], a RandomState instance or None")
        elif isinstance(c, str):
            parts.append(f"{c!r}")
        else:
            parts.append(str(c))
    return " or ".join(dict.fromkeys(parts))


class BaseCP(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Base class of the CP estimators (not for direct use)."""

    _init_strings = {"random", "nvecs"}

    _parameter_constraints = {
        "rank": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "device": [_DeviceConstraint()],
        "format": [StrOptions(set(FORMATS))],
        "verbose": ["verbose"],
        "max_time": [Interval(Real, 0, None, closed="neither"), None],
        "device_options": [None, dict, OpenCLOptions],
    }

    #: what one unit of ``max_iter`` is called in messages
    _iteration_name = "iterations"

    def _validate_params(self):
        """scikit-learn's validation of the constructor parameters, and bools refused where a
        number is expected (``rank=True`` would otherwise pass as 1)."""
        super()._validate_params()
        for name, constraints in self._parameter_constraints.items():
            val = getattr(self, name, None)
            if isinstance(val, (bool, np.bool_)) and _refuses_bool(constraints):
                raise InvalidParameterError(
                    f"The {name!r} parameter of {type(self).__name__} must be "
                    f"{_describe(constraints)}; got {val!r} (a bool is not accepted as a "
                    f"number)")
        # the names and values of device_options, and that they fit the device
        try:
            opts = as_options(getattr(self, "device_options", None))
        except (TypeError, ValueError) as exc:
            raise InvalidParameterError(f"The 'device_options' parameter of "
                                        f"{type(self).__name__}: {exc}") from None
        if opts.set_options() and parse_device(self.device)[0] == "cpu":
            raise InvalidParameterError(
                f"The 'device_options' parameter of {type(self).__name__} sets "
                f"{opts.set_options()}: settings of the OpenCL kernels, which have no meaning "
                f"on device='cpu' (use device='gpu', 'opencl' or 'opencl:P:D', or leave "
                f"device_options=None)")

    # ------------------------------------------------------------------ hooks
    @abstractmethod
    def _fit_model(self, backend, T, X, init, rng):
        """Run the algorithm from ``init`` (a list of NumPy factors); return a result dict."""

    @abstractmethod
    def _solve_mode0(self, backend, T, X, factors):
        """Mode-0 loadings of the slices of ``X`` with ``factors[1:]`` fixed (NumPy array)."""

    @abstractmethod
    def _score_loadings(self, backend, T, X, W, factors):
        """Goodness of fit of ``X`` given loadings ``W`` and ``factors[1:]`` (greater is better)."""

    def _check_data(self, X):
        """Estimator-specific checks of validated data (e.g. counts for Poisson)."""
        return X

    def _result_key(self, result):
        """Larger is better: used to keep the best of ``n_init`` runs."""
        return result["score"]

    def _storage_format(self, backend):
        """The format ``backend`` is to build for ``format`` and the kernels this estimator
        uses (the backend decides what ``"auto"`` means and refuses formats it has no
        meaning for)."""
        return backend.storage_format(self.format, self._kernel_needs())

    def _kernel_needs(self):
        """Kernels beyond MTTKRP / Φ that this estimator calls (see
        ``Backend.storage_format``)."""
        return ()

    def _init_options(self):
        return self._init_strings

    #: a given initial model whose entries may exceed this is refused (its loss or its squares
    #: would overflow float64 in the first iteration)
    _INIT_MODEL_MAX = 1e150

    #: sets of factor matrices a fit holds on the host at least (the start and the model it
    #: returns), checked against the available memory before any is made
    _HOST_MODEL_ARRAYS = 2

    def _check_init_scale(self, factors):
        """Refuse given initial factors whose model overflows the computations (a bound of its
        entries: Σ_r Π_k max_i |A⁽ᵏ⁾[i, r]|).  Returns the factors to start from."""
        with np.errstate(divide="ignore"):
            logs = sum(np.log10(np.max(np.abs(f), axis=0)) for f in factors if f.shape[0])
        top = float(np.max(logs)) if np.size(logs) else -np.inf
        if top > np.log10(self._INIT_MODEL_MAX):
            raise ValueError(
                f"init: the initial model reaches values of about 1e{top:.0f} (products of the "
                f"largest factor entries of a component), beyond {self._INIT_MODEL_MAX:.0e}: "
                f"its loss would overflow float64. Scale the initial factors down")
        return factors

    # ------------------------------------------------------------------ input handling
    def _empty_message(self):
        """Why a tensor without nonzeros cannot be fitted."""
        return (f"{type(self).__name__} cannot fit an empty tensor (nnz = 0): every entry is "
                f"zero")

    def _validate_input(self, X, reset, check_data=True):
        name = type(self).__name__
        spread = getattr(X, "_sktf_validate", None)
        if spread is not None:
            # a tensor spread over processes (sktensor_fast.distributed) runs these checks on
            # every process's share and makes all processes agree on the outcome
            return spread(self, reset)
        X = as_sparse_tensor(X)
        if X.ndim < 2:
            raise ValueError(f"{name} needs a tensor with at least 2 modes, got {X.ndim}")
        if reset:
            if X.nnz == 0:
                raise ValueError(self._empty_message())
            self.tensor_shape_ = tuple(X.shape)
            self.n_features_in_ = int(np.prod(X.shape[1:], dtype=np.int64))
            # labels of the modes, when the tensor carries them (describe_components, save_model)
            self.labels_ = getattr(X, "labels", None)
            self.mode_names_ = getattr(X, "mode_names", None)
        else:
            if X.shape[0] == 0:
                raise ValueError(f"{name} needs at least one sample (mode-0 slice); X has shape "
                                 f"{tuple(X.shape)}")
            fitted = self.tensor_shape_
            if X.ndim != len(fitted) or tuple(X.shape[1:]) != tuple(fitted[1:]):
                if X.ndim == 2 and len(fitted) == 2:
                    raise ValueError(f"X has {X.shape[1]} features, but {name} is expecting "
                                     f"{fitted[1]} features as input.")
                raise ValueError(
                    f"X has shape {X.shape}; modes 1 and up must match the fitted tensor, "
                    f"which had shape {fitted} (so X must be (n_samples, "
                    f"{', '.join(str(s) for s in fitted[1:])})), but {name} got "
                    f"{X.shape[1:]} in those modes")
        return self._check_data(X) if check_data else X

    def _backend(self, X=None):
        place = getattr(X, "_sktf_backend", None)
        if place is not None:
            # a tensor spread over processes runs on the distributed backend, which wraps
            # each process's backend for ``device``
            return place(self)
        return get_backend(self.device, getattr(self, "device_options", None))

    def _log(self, msg):
        if self.verbose:
            print(f"[{type(self).__name__}] {msg}", file=sys.stderr, flush=True)

    def _report_iteration(self, iteration, objective, t0, objective_name=None):
        """Once per outer iteration of a fit: pass it to the :func:`fit_callback` of this
        context (``t0``: when the iterations began; the name defaults to the objective that
        ``_objective_name`` gives)."""
        _progress.report(self, iteration, objective, objective_name or self._objective_name,
                         time.perf_counter() - t0)

    #: what the objective passed to the fit callback is (see ``FitProgress``)
    _objective_name = "objective"

    # ------------------------------------------------------------------ public API
    def fit(self, X, y=None):
        """Fit the CP model to the tensor ``X``.

        Parameters
        ----------
        X : SparseTensor, ndarray (2 or more modes), sparse.COO, scipy.sparse matrix
            The data; samples are mode-0 slices.
        y : ignored

        Returns
        -------
        self
        """
        self._validate_params()
        X = self._validate_input(X, reset=True)
        self._fit_impl(X)
        self._warn_if_not_converged()
        return self

    # ------------------------------------------------------------------ streaming
    def partial_fit(self, X, y=None):
        """Update the model with a batch of new mode-0 slices (streaming).

        Samples are mode-0 slices, so a batch is the new slices of the tensor (for a stream
        in time: the new time steps, with the time mode first).  The first call fits the
        model to the batch, exactly as :meth:`fit` does.  Every later call

        1. solves the batch's mode-0 loadings with the other factors fixed, as
           :meth:`transform` does;
        2. refits the model to the batch together with the history, ``window`` slices seen
           before it and kept with their loadings (the last ones, or a uniform sample of the
           stream: ``window_method``), starting from the current model: one run of the
           estimator's solver with its settings (``max_iter``, ``tol``, ...), every factor
           free.

        Only the history's slices are kept between calls, so the memory stays bounded by
        ``window`` (and the batch), whatever the number of batches.  ``factors_[0]`` then
        holds the loadings of the slices of the last update (history and batch, in order),
        ``factors_[1:]`` the model so far; :meth:`transform` and :meth:`score` use them
        between calls.  A call of :meth:`fit` starts a new stream.

        Parameters
        ----------
        X : SparseTensor, ndarray (2 or more modes), sparse.COO, scipy.sparse matrix
            The new slices; modes 1 and up must match the model's (and their labels, where
            both carry them).
        y : ignored

        Returns
        -------
        self
        """
        self._validate_params()
        self._check_streaming()
        if getattr(X, "_sktf_validate", None) is not None:
            raise ValueError(f"{type(self).__name__}.partial_fit takes the batch as one "
                             f"tensor, not spread over processes")
        if "_stream" not in self.__dict__ and hasattr(self, "factors_"):
            # continue a model fitted by fit: no history yet
            self._stream = {"history": None, "rows": np.zeros(0, np.int64),
                            "seed": self._stream_seed(), "batches": 1,
                            "seen": int(self.tensor_shape_[0])}
        if not hasattr(self, "factors_"):
            X = self._validate_input(X, reset=True)
            best = self._fit_impl(X, **self._fit_kwargs(X))
            self._keep_result(best)
            self._stream = {"seed": self._stream_seed(), "batches": 1, "seen": 0}
            self._keep_history(self._where_kept(X), 0)
        else:
            fitted = int(np.shape(self.weights_)[0])
            if self.rank != fitted:
                raise ValueError(
                    f"{type(self).__name__}.partial_fit continues a model of rank {fitted}, "
                    f"but rank is now {self.rank}: set rank back to {fitted}, or call fit to "
                    f"start a new stream with rank {self.rank}")
            X = self._validate_batch(X)
            self._update(X)
        self.n_samples_seen_ = self._stream["seen"]
        self._warn_if_not_converged()
        return self

    def _stream_seed(self):
        """Seed of the updates of a stream (each update draws from it and its number)."""
        return int(check_random_state(self.random_state).randint(0, 2 ** 31 - 1))

    def _check_streaming(self):
        """Settings that ``partial_fit`` cannot honour (estimator-specific)."""

    def _fit_kwargs(self, X):
        """Arguments of ``_fit_model`` for a fit of ``X`` (estimator-specific)."""
        return {}

    def _keep_result(self, best):
        """Store what ``fit`` stores beyond ``_fit_impl``'s attributes (estimator-specific)."""

    def _history_rows(self, n_old, n_new):
        """Which slices of an update (``n_old`` of the history, then ``n_new`` of the batch)
        stay in the history: the last ``window`` ones, or (``window_method="reservoir"``)
        a uniform sample of ``window`` of every slice seen so far (reservoir sampling: the
        slice number ``k`` of the stream enters with probability ``window / (k + 1)`` in
        place of a random one), drawn from the stream's seed and the update's number."""
        total = n_old + n_new
        if self.window is None:
            return np.arange(total)
        if self.window_method == "last":
            return np.arange(max(0, total - self.window), total)
        st = self._stream
        rng = np.random.RandomState([st["seed"], st["batches"], 1])
        slots = list(range(n_old))
        for j in range(n_new):
            k = st["seen"] + j
            if len(slots) < self.window:
                slots.append(n_old + j)
            else:
                r = int(rng.randint(0, k + 1))
                if r < self.window:
                    slots[r] = n_old + j
        return np.array(sorted(slots), dtype=np.int64)

    def _where_kept(self, window):
        """``window`` (a host tensor just fitted) as the backend keeps the history of a
        stream: on a device that builds the windows where the model lives, its handle on the
        window's prepared device tensor (no copy, no upload: the fit prepared it); else
        ``window`` itself."""
        backend = self._backend(window)
        if not backend.stream_windows:
            return window
        fmt = self._storage_format(backend)
        with prepared(backend, window, fmt) as T:
            return backend.stream_window(None, window, T, fmt) or window

    def _keep_history(self, window, n_old):
        """Keep the history's slices of the update's tensor ``window`` (its first ``n_old``
        slices were the history) and which rows of ``factors_[0]`` are their loadings; count
        the batch's slices as seen.  A window built on a device keeps them there (its
        ``keep``); a host window is copied into a new tensor that holds nothing else of it."""
        st = self._stream
        rows = self._history_rows(n_old, window.shape[0] - n_old)
        st["seen"] += window.shape[0] - n_old
        st["rows"] = rows
        if rows.size == 0:
            st["history"] = None
            return
        if not isinstance(window, SparseTensor):
            st["history"] = window.keep(rows)
            return
        # whole slices of a tensor in canonical order: ranges of its nonzeros, found from
        # where each slice starts; one copy of the kept nonzeros, rows renumbered ascending
        # (the order stays canonical)
        cuts = np.searchsorted(window.subs[:, 0], np.arange(window.shape[0] + 1))
        lo, hi = cuts[rows], cuts[rows + 1]
        counts = hi - lo
        if rows[-1] - rows[0] + 1 == rows.size:     # one run of slices: one range
            take = slice(int(lo[0]), int(hi[-1]))
        else:
            starts = np.cumsum(counts) - counts
            take = np.repeat(lo - starts, counts) + np.arange(int(counts.sum()))
        subs = np.array(window.subs[take], dtype=np.int64)
        subs[:, 0] = np.repeat(np.arange(rows.size), counts)
        st["history"] = SparseTensor._from_canonical(subs, np.array(window.vals[take]),
                                                     (rows.size,) + tuple(window.shape[1:]))

    def _validate_batch(self, X):
        """A later batch of ``partial_fit``: modes 1 and up (and their labels) as the
        model's."""
        name = type(self).__name__
        X = as_sparse_tensor(X)
        ours = tuple(self.tensor_shape_[1:])
        matrices = X.ndim == 2 and len(ours) == 1   # scikit-learn's message, from below
        if X.ndim >= 2 and not matrices and (X.ndim != len(ours) + 1
                                             or tuple(X.shape[1:]) != ours):
            raise ValueError(
                f"{name}.partial_fit: the batch has shape {tuple(X.shape)}, but the model's "
                f"modes 1 and up have shape {ours}: a batch must be (n_slices, "
                f"{', '.join(str(n) for n in ours)}), new mode-0 slices of the same tensor")
        X = self._validate_input(X, reset=False)
        theirs, ours = getattr(X, "labels", None), getattr(self, "labels_", None)
        if theirs is not None and ours is not None:
            names = getattr(self, "mode_names_", None)
            for k in range(1, X.ndim):
                a, b = theirs[k], ours[k]
                if a is None or b is None or list(a) == list(b):
                    continue
                j = next(i for i, (u, v) in enumerate(zip(a, b)) if u != v)
                what = f"mode {k}" + (f" ({names[k]})" if names and names[k] else "")
                raise ValueError(
                    f"{name}.partial_fit: the labels of {what} of X differ from the model's: "
                    f"index {j} is {a[j]!r} in X but {b[j]!r} in the model; the batches of a "
                    f"stream must index modes 1 and up alike")
        return X

    def _update(self, X):
        """One update of ``partial_fit`` with the batch ``X`` (see there)."""
        st = self._stream
        H = st["history"]
        nh = 0 if H is None else H.shape[0]
        rows, n_prev = st["rows"], self.factors_[0].shape[0]
        W = np.asarray(self.factors_[0] * self.weights_[None, :], dtype=np.float64)[rows]
        backend = self._backend(X)
        fmt = self._storage_format(backend)
        with backend.compute_scope():
            with prepared(backend, X, fmt) as T:
                Wb = self._solve_mode0(backend, T, X, self.factors_)
                # where the backend keeps the history (a device): the window is built there
                # from the history and the batch just uploaded
                window = backend.stream_window(H, X, T, fmt)
        if window is None:
            if H is not None and not isinstance(H, SparseTensor):
                H = H.to_host()     # kept on a device that cannot build this window
            window = _stack_slices(H, X)
        start = [np.vstack([W, Wb])] + [np.array(f, dtype=np.float64)
                                         for f in self.factors_[1:]]
        rng = np.random.RandomState([st["seed"], st["batches"]])
        best = self._fit_impl(window, start=(start, rng), **self._fit_kwargs(window))
        self._keep_result(best)
        self.tensor_shape_ = tuple(window.shape)
        labels = getattr(self, "labels_", None)
        if labels is not None:
            # mode 0: the labels of the slices of the update, where every one has its label
            old, new = labels[0], (getattr(X, "labels", None) or [None])[0]
            lab0 = None
            if old is not None and new is not None and len(old) == n_prev:
                lab0 = [old[i] for i in rows] + list(new)
            self.labels_ = [lab0] + list(labels[1:])
        if isinstance(window, SparseTensor):
            window = self._where_kept(window)
        self._keep_history(window, nh)
        st["batches"] += 1

    #: what ``stop_reason_ == "tol"`` means for this estimator (formatted with its settings)
    _tol_reached = "the change between two iterations fell below tol={tol:g}"

    def _stop_words(self):
        """``stop_reason_`` in words, with the settings it refers to (for messages)."""
        reason = self.stop_reason_
        what = self._iteration_name
        if reason == "tol":
            return self._tol_reached.format(**self.get_params(deep=False))
        if reason == "max_iter":
            return (f"it ran max_iter={self.max_iter} {what} before reaching its tolerance "
                    f"(tol={self.tol:g})")
        if reason == "max_time":
            return (f"it ran out of time (max_time={self.max_time:g}s) after {self.n_iter_} "
                    f"{what}, before reaching its tolerance (tol={self.tol:g})")
        return reason

    def _warn_if_not_converged(self):
        """ConvergenceWarning when the kept fit stopped at max_iter or max_time; not when it
        ran the ``max_iter`` iterations that ``tol=0`` asks for (a tolerance no change can
        reach: a fixed number of iterations, on purpose)."""
        if self.converged_ or (self.stop_reason_ == "max_iter" and self.tol == 0):
            return
        name = type(self).__name__
        what = self._iteration_name
        if self.stop_reason_ == "max_time":
            msg = (f"{name} stopped at max_time={self.max_time:g}s after {self.n_iter_} {what}, "
                   f"before reaching its tolerance (tol={self.tol:g}); the model may be far "
                   f"from converged: increase max_time")
        else:
            msg = (f"{name} stopped at max_iter={self.max_iter} {what} before reaching its "
                   f"tolerance (tol={self.tol:g}); the model may be far from converged: "
                   f"increase max_iter (or loosen tol)")
        _warn(msg, ConvergenceWarning)

    def _fit_impl(self, X, start=None, **fit_args):
        """Run ``n_init`` fits; ``fit_args`` go to every ``_fit_model`` call (the state of
        this fit: nothing of it is stored on the estimator until the result).  ``start``:
        ``(factors, rng)`` of one fit from a given model (an update of ``partial_fit``)
        instead of the starts that ``init`` and ``n_init`` ask for."""
        backend = self._backend(X)
        with backend.compute_scope():
            return self._fit_in_scope(backend, X, start=start, **fit_args)

    def _fit_in_scope(self, backend, X, start=None, **fit_args):
        t0 = time.perf_counter()
        if start is None:
            # a fit from scratch ends the stream of partial_fit (its history goes)
            for key in ("_stream", "n_samples_seen_"):
                self.__dict__.pop(key, None)
        with prepared(backend, X, self._storage_format(backend)) as T:
            self._log(f"tensor {X.shape}, nnz={X.nnz}, prepared for {backend.name} "
                      f"({type(T).__name__}) in {time.perf_counter() - t0:.3f}s")
            if getattr(T, "note", None):
                self._log(f"note: {T.note}")
            check_model_memory(X.shape, self.rank, self._HOST_MODEL_ARRAYS,
                               f"{type(self).__name__}(rank={self.rank})")
            rng = check_random_state(self.random_state) if start is None else start[1]
            best = None
            init_param = self.init
            for trial in range(self.n_init if start is None else 1):
                if start is not None:
                    factors0 = start[0]
                    fit_args = {**fit_args, "warm": True}
                else:
                    factors0 = initialize_factors(init_param, X, self.rank, rng,
                                                  self._init_options(), dtype=X.dtype)
                if start is None and not isinstance(init_param, str):
                    factors0 = self._check_init_scale(factors0)
                t1 = time.perf_counter()
                with _progress.random_start(trial + 1, self.n_init):
                    result = self._fit_model(backend, T, X, factors0, rng, **fit_args)
                result["time"] = time.perf_counter() - t1
                if self.n_init > 1:
                    self._log(f"init {trial + 1}/{self.n_init}: score "
                              f"{self._result_key(result):.6g}")
                if best is None or self._result_key(result) > self._result_key(best):
                    best = result
                if start is not None or not isinstance(init_param, str):
                    break  # a given start gives the same result every time
        self.weights_ = np.asarray(best["weights"], dtype=np.float64)
        self.factors_ = [np.asarray(f) for f in best["factors"]]
        self.n_iter_ = int(best["n_iter"])
        self.converged_ = bool(best["converged"])
        self.stop_reason_ = str(best["stop"])
        self.loss_history_ = np.asarray(best["loss_history"], dtype=np.float64)
        for key, val in best.get("attributes", {}).items():
            setattr(self, key, val)
        return best

    @property
    def model_(self):
        """The fitted model as a :class:`KruskalTensor`."""
        check_is_fitted(self, "factors_")
        return KruskalTensor(self.weights_, self.factors_)

    def _sample_index(self, W, X):
        """``W`` as a pandas DataFrame indexed by the mode-0 labels of ``X`` (named by its
        mode-0 name) when ``set_output(transform="pandas")`` is in force and ``X`` carries
        such labels; otherwise ``W`` unchanged.  scikit-learn's output wrapper then keeps the
        index and names the columns by :meth:`get_feature_names_out`, as it keeps the index
        of a DataFrame given as ``X``."""
        labels = getattr(X, "labels", None)
        if not labels or labels[0] is None:
            return W
        from sklearn.utils._set_output import _get_output_config
        if _get_output_config("transform", self)["dense"] != "pandas":
            return W
        import pandas as pd
        if isinstance(W, pd.DataFrame):
            return W
        names = getattr(X, "mode_names", None)
        index = pd.Index(list(labels[0]), name=names[0] if names else None)
        return pd.DataFrame(np.asarray(W), index=index)

    def fit_transform(self, X, y=None):
        """Fit the model and return the mode-0 loadings (factor times weights).

        Returns
        -------
        W : ndarray of shape (n_samples, rank)
            With ``set_output(transform="pandas")``: a DataFrame whose columns are
            :meth:`get_feature_names_out` and whose index is the mode-0 labels of ``X``
            (``X.labels[0]``, named ``X.mode_names[0]``) when it carries them.
        """
        self.fit(X, y)
        return self._sample_index(np.asarray(self.factors_[0] * self.weights_[None, :]), X)

    def transform(self, X):
        """Mode-0 loadings of the slices of ``X`` with the other factors held fixed.

        Parameters
        ----------
        X : tensor of shape (n_samples, I_1, ..., I_{N-1})
            Modes 1 and up must match the fitted tensor.

        Returns
        -------
        W : ndarray of shape (n_samples, rank)
            With ``set_output(transform="pandas")``: a DataFrame whose columns are
            :meth:`get_feature_names_out` and whose index is the mode-0 labels of ``X``
            (``X.labels[0]``, named ``X.mode_names[0]``) when it carries them.
        """
        check_is_fitted(self, "factors_")
        given = X
        X = self._validate_input(X, reset=False)
        backend = self._backend(X)
        with backend.compute_scope(), prepared(backend, X, self._storage_format(backend)) as T:
            W = self._solve_mode0(backend, T, X, self.factors_)
        return self._sample_index(W, given)

    def score(self, X, y=None):
        """Goodness of fit of ``X`` after refitting its mode-0 loadings (greater is better)."""
        check_is_fitted(self, "factors_")
        X = self._validate_input(X, reset=False)
        backend = self._backend(X)
        with backend.compute_scope(), prepared(backend, X, self._storage_format(backend)) as T:
            W = self._solve_mode0(backend, T, X, self.factors_)
            return float(self._score_loadings(backend, T, X, W, self.factors_))

    def inverse_transform(self, W):
        """The Kruskal model whose mode-0 loadings are ``W`` (other factors fitted)."""
        check_is_fitted(self, "factors_")
        W = np.asarray(W, dtype=np.float64)
        if W.ndim != 2 or W.shape[1] != self.rank_:
            raise ValueError(f"W must have shape (n_samples, {self.rank_}), got {W.shape}")
        return KruskalTensor(np.ones(self.rank_), [W] + [f.copy() for f in self.factors_[1:]])

    @property
    def rank_(self):
        return self.factors_[0].shape[1]

    def get_feature_names_out(self, input_features=None):
        """Names of the columns of ``transform``'s output: the class name in lower case and
        the component's position, ``["cpapr0", "cpapr1", ...]`` (one per component).

        Parameters
        ----------
        input_features : ignored
            Accepted for scikit-learn's API (the inputs are tensor slices, not named
            columns).

        Returns
        -------
        ndarray of str, one name per component
        """
        return super().get_feature_names_out(input_features)

    def set_output(self, *, transform=None):
        """Choose the container ``transform`` and ``fit_transform`` return.

        With ``transform="pandas"`` they return a DataFrame whose columns are
        :meth:`get_feature_names_out` and whose index is the mode-0 labels of the tensor
        transformed (``X.labels[0]``, the index named ``X.mode_names[0]``), or a range
        without such labels; ``"polars"``: a polars DataFrame; ``"default"``: a NumPy array.
        :func:`~sktensor_fast.save_model` keeps the choice.

        Parameters
        ----------
        transform : {"default", "pandas", "polars"} or None, default=None
            None leaves the configuration as it is.

        Returns
        -------
        self
        """
        return super().set_output(transform=transform)

    @property
    def _n_features_out(self):
        """Number of output features (the rank), for ``get_feature_names_out``."""
        return self.rank_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.two_d_array = True
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags
