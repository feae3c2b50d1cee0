"""Generalized CP decomposition (GCP) with stochastic or quasi-Newton solvers."""
import math
import time

import numpy as np
from scipy.optimize import Bounds
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Integral, Interval, Real, StrOptions

from ..backends.gcp_plan import SAMPLERS, default_counts, linear_index
from ..tensor import SparseTensor
from ._base import BaseCP, _InitConstraint
from .cp_als import _arrange, _inverse_gram
from .losses import LOSSES, get_loss
from .optimizers import LBFGSB, OPTIMIZERS, make_optimizer

__all__ = ["GCP", "GCP_DENSE_LIMIT", "GCP_MAX_SAMPLES"]

#: Largest number of entries (of the dense tensor) for which the exact loss and gradient are
#: computed: ``solver="lbfgsb"`` refuses larger tensors, and ``transform`` / ``score`` switch to
#: the stochastic solver and a sampled loss estimate above it.
GCP_DENSE_LIMIT = 10_000_000

#: Most samples one draw may hold (nonzeros and other entries together), for ``n_samples_grad``
#: per step and ``n_samples_loss``: the OpenCL kernels number the samples of a draw in 31 bits.
GCP_MAX_SAMPLES = 2 ** 31 - 1


_SOLVERS = tuple(OPTIMIZERS)


def _rows_in(a, b, shape):
    """Boolean vector: is row ``a[i]`` one of the rows of ``b``?"""
    if a.shape[0] == 0 or b.shape[0] == 0:
        return np.zeros(a.shape[0], dtype=bool)
    if math.prod(shape) < 2 ** 63:
        return np.isin(linear_index(a, shape), linear_index(b, shape))
    rows = set(map(tuple, b.tolist()))
    return np.fromiter((tuple(r) in rows for r in a.tolist()), dtype=bool, count=a.shape[0])


#: A mask that observes zeros only: the data say nothing but "zero", the best model is zero
#: and its components are undetermined (as for a tensor without nonzeros, which the
#: estimators refuse).
_NO_OBSERVED_NONZERO = (
    "GCP: the mask observes no nonzero entry of X (every observed entry is zero): the best "
    "model is zero and its components are undetermined; the mask must observe at least one "
    "nonzero entry")


class _Observed:
    """The entries of a tensor that a mask declares observed.

    Attributes: ``X`` (SparseTensor of the observed nonzeros), ``zero_subs`` (coordinates of
    the observed zeros, or None when every entry is observed), ``n_nz``, ``n_zero``,
    ``dense_mask`` (boolean array for the exact solver, built on demand).
    """

    def __init__(self, X, mask):
        self.shape = tuple(X.shape)
        self._mask = mask
        self._dense = None
        size = X.size
        if mask is None:
            self.X, self.zero_subs = X, None
            self.n_nz, self.n_zero = X.nnz, size - X.nnz
            return
        if isinstance(mask, SparseTensor):
            if tuple(mask.shape) != self.shape:
                raise ValueError(f"mask has shape {tuple(mask.shape)} but X has shape "
                                 f"{self.shape}; they must be equal")
            keep = _rows_in(X.subs, mask.subs, self.shape)
            zero = mask.subs[~_rows_in(mask.subs, X.subs, self.shape)]
        else:
            m = np.asarray(mask)
            if m.shape != self.shape:
                raise ValueError(f"mask has shape {m.shape} but X has shape {self.shape}; they "
                                 f"must be equal")
            if m.dtype != bool:
                if m.dtype.kind not in "iuf" or not np.all((m == 0) | (m == 1)):
                    raise ValueError("mask must be a boolean array (True = observed) or a "
                                     "SparseTensor of the observed entries")
                m = m.astype(bool)
            keep = m[tuple(X.subs.T)] if X.nnz else np.zeros(0, dtype=bool)
            nonzero = np.zeros(self.shape, dtype=bool)
            if X.nnz:
                nonzero[tuple(X.subs.T)] = True
            zero = np.argwhere(m & ~nonzero)
            self._dense = m
        self.X = SparseTensor._from_canonical(X.subs[keep], X.vals[keep], self.shape)
        self.zero_subs = np.ascontiguousarray(zero, dtype=np.int64).reshape(-1, len(self.shape))
        self.n_nz, self.n_zero = self.X.nnz, int(self.zero_subs.shape[0])
        if self.n_nz + self.n_zero == 0:
            raise ValueError("the mask observes no entry of X")
        if self.n_nz == 0:
            raise ValueError(_NO_OBSERVED_NONZERO)

    @property
    def dense_mask(self):
        if self._mask is None:
            return None
        if self._dense is None:
            d = np.zeros(self.shape, dtype=bool)
            if self._mask.nnz:
                d[tuple(self._mask.subs.T)] = True
            self._dense = d
        return self._dense

    @property
    def n_entries(self):
        return self.n_nz + self.n_zero


def _blank_unobserved(X, mask):
    """Zeros at the unobserved entries of a dense array (so that they may hold NaN)."""
    if mask is None or not isinstance(X, np.ndarray) or X.dtype.kind not in "fc":
        return X
    if isinstance(mask, SparseTensor):
        if tuple(mask.shape) != X.shape:
            return X  # reported by _Observed
        m = np.zeros(X.shape, dtype=bool)
        if mask.nnz:
            m[tuple(mask.subs.T)] = True
    else:
        m = np.asarray(mask)
        if m.shape != X.shape:
            return X
        m = m != 0
    return np.where(m, X, 0)


class _FitContext:
    """What one call of ``fit`` passes down to ``_fit_model`` (kept out of the estimator, so
    that fits running at the same time in several threads do not share it): the observed
    entries, and the tensor and sampler state that the random starts share."""

    def __init__(self, obs):
        self.obs = obs
        self.To = None
        self.state = None


class GCP(BaseCP):
    """Generalized CP decomposition: a CP model fitted under any element-wise loss.

    Minimises ``F(M) = Σ_i f(x_i, m_i)`` over every (observed) entry ``i`` of the tensor,
    zeros included, where ``M = ⟦A⁽⁰⁾, …, A⁽ᴺ⁻¹⁾⟧`` and ``f`` is the loss of a statistical model
    of the data (Hong, Kolda & Duersch, SIAM Review 2020): squared error for Gaussian data,
    Poisson or negative binomial likelihoods for counts, Bernoulli for binary data, Gamma or
    Rayleigh for positive data, the Huber loss, β-divergences, or a user-defined loss.  The
    gradient ``∂F/∂A⁽ᵏ⁾`` is the MTTKRP of the (dense) tensor ``Y = ∂f/∂m(X, M)``.

    **Stochastic solvers** (``adam``, ``sgd``, ``adagrad``; Kolda & Hong, *Stochastic gradients
    for large-scale tensor decomposition*, SIMODS 2020) never form ``Y``.  Each step draws a
    fresh sample of entries, computes the model values there from the factor rows, the
    weighted loss derivatives and the gradient of every mode in one fused kernel, and takes a
    step; factors are clipped to the loss's lower bound.  On the CPU the steps of an epoch run
    in one compiled loop, with no Python work between them; steps too small to share between
    threads (a few hundred samples) run on one, and when a second CPU is free a second thread
    draws the samples of the next steps meanwhile (the same samples and the same model;
    12-17 % less time for the default Poisson fit of the embedded flights-routes data on two
    cores).  The loss is estimated on a fixed
    stratified sample drawn once per fit.  The steps are grouped in epochs of ``epoch_iters``;
    an epoch whose estimated loss went up is undone (model and optimiser state restored) and
    the learning rate multiplied by ``decay``.  The fit stops after ``max_iter`` epochs, when
    the relative change of the estimated loss over an epoch is below ``tol``, or at the
    ``max_fails + 1``-th failed epoch (``max_fails`` failures are tolerated, as in pyttb and
    GenTen).

    Samplers of the gradient (``n_nz`` nonzeros, ``n_zero`` zeros, ``N = n_nz + n_zero``):

    - ``"stratified"``: ``p`` nonzeros (weight ``n_nz / p``) and ``q`` zeros (weight
      ``n_zero / q``), zeros drawn uniformly: by rejection of the draws that hit a nonzero
      when at most half of the entries are nonzeros, else (and whenever 256 rejections in a
      row fail) as the zero of a uniform rank, computed from the sorted nonzeros;
    - ``"semi-stratified"``: ``p`` nonzeros and ``q`` entries drawn uniformly from all entries
      and treated as zeros (weight ``N / q``); each nonzero sample contributes
      ``f(x, m) − f(0, m)`` (its derivative likewise), which makes the estimate unbiased
      without searching for nonzeros;
    - ``"uniform"``: ``s`` entries drawn uniformly (weight ``N / s``), values looked up.

    **L-BFGS-B** (``solver="lbfgsb"``, ``scipy.optimize.minimize``) uses the exact loss and
    gradient of the dense tensor, for tensors of at most :data:`GCP_DENSE_LIMIT` (10⁷)
    entries; factor entries are bounded below by the loss's lower bound.

    Parameters
    ----------
    rank : int, default=5
        Number of components R.  The default serves a first look, the same in every estimator
        and on the command line: five components are enough for the main patterns of a data
        set to come apart (two usually merge them) and few enough to read in one screen of
        :func:`~sktensor_fast.describe_components`.  Choose the rank for real work by
        comparing ranks (see the user guide's "Choosing the rank").
    loss : str or object, default="gaussian"
        ``"gaussian"``, ``"poisson"``, ``"poisson_log"``, ``"bernoulli_odds"``,
        ``"bernoulli_logit"``, ``"gamma"``, ``"rayleigh"``, ``"negative_binomial"``,
        ``"huber"``, ``"beta"``, ``"zt_poisson"`` (formulas in
        :mod:`sktensor_fast.decomposition.losses`), or an object with methods ``value(x, m)``
        and ``deriv(x, m)`` (element-wise loss and ∂f/∂m) and an attribute ``lower`` (lower
        bound of the model values, ``-inf`` for none); optionally ``check_data(vals)``.
    loss_param : float, optional
        The loss's parameter: r (number of trials, > 0) for ``negative_binomial``, the
        threshold δ > 0 for ``huber``, the exponent β ∉ {0, 1} for ``beta``.  Must be None for
        the other losses.
    solver : {"adam", "sgd", "adagrad", "lbfgsb"}, default="adam"
    sampler : {"stratified", "semi-stratified", "uniform"}, default="stratified"
        Gradient sampler of the stochastic solvers.
    n_samples_grad : int or (int, int), optional
        Samples per gradient step: for the stratified samplers an int n means n nonzeros and
        n other entries, a pair gives them separately; for ``uniform`` an int.  At most
        :data:`GCP_MAX_SAMPLES` (2³¹ − 1) samples per step in all.  Default:
        ``p = min(n_nz, g)``, ``q = min(n_nz, n_zero, g)`` with
        ``g = max(⌈3 n_nz / 1000⌉, min(1000, max(100, ⌈n_nz / 100⌉)))``: pyttb's
        ``max(1000, ⌈3 n_nz / 1000⌉)`` from 100 000 nonzeros on, 1 % of the nonzeros (at
        least 100) below, where 1000 would be a large share of the data in every step and
        make small fits slow; uniform: ``min(N, max(1000, ⌈10 N / 1000⌉), 100 000)`` (pyttb's
        formula, capped).
    n_samples_loss : int or (int, int), optional
        Size of the stratified sample of the loss estimate (an int n means n nonzeros and n
        zeros; at most :data:`GCP_MAX_SAMPLES` in all).  Default (as pyttb): ``min(n_nz, f)``
        nonzeros and ``min(n_nz, n_zero, f)`` zeros with ``f = max(100 000, ⌈n_nz / 100⌉)``.
    learning_rate : float, default=2e-3
        Step size of the stochastic solvers (Adam's α).  Twice pyttb's 1e-3: on the embedded
        flights-routes data the default fit then takes half the time with the same median
        loss (``doc/guide/tuning.rst``, "GCP's learning rate").
    decay : float, default=0.1
        Factor applied to the learning rate after a failed epoch.
    max_fails : int, default=1
        Failed epochs tolerated.
    epoch_iters : int, default=1000
        Steps per epoch (at most 2⁶³ − 1).
    max_iter : int, default=1000
        Maximum number of epochs (stochastic solvers) or of L-BFGS-B iterations.
    tol : float, default=1e-4
        Stochastic solvers: stop when the relative change of the estimated loss over an epoch
        is below ``tol``.  L-BFGS-B: scipy's ``ftol`` is ``tol * 1e-4`` (stop when the relative
        decrease of the loss over an iteration is below it; 1e-8 by default).
    mask : array-like of bool or SparseTensor, optional
        Observed entries for data with missing values: a boolean array of the tensor's shape
        (True = observed) or a SparseTensor whose nonzeros are the observed coordinates.
        Unobserved entries contribute nothing to the loss or the gradient: L-BFGS-B multiplies
        the loss and derivative tensors by the mask; the stochastic samplers draw only
        observed entries (nonzeros from the observed nonzeros, zeros from the list of observed
        zeros).  The values of unobserved entries are ignored (and not validated; in a dense
        array they may be NaN).  The mask applies to ``fit`` only, so it cannot be combined
        with cross-validation.  It must observe at least one nonzero entry: with observed
        zeros only the best model is zero and its components are undetermined (a
        ValueError, as for a tensor without nonzeros).
    init : "random", KruskalTensor or list of ndarray, default="random"
        Initial guess: uniform random factors scaled so that the model's norm equals the
        data's (as pyttb), or a given model (used as is).
    random_state : int, RandomState instance or None
        Seed of the initial guess and of the samplers.  The same seed gives the same model,
        whatever the number of threads.
    n_init : int, default=1
        Random starts; the model with the lowest (estimated) loss is kept.
    device : str, default="cpu"
        ``"cpu"`` (Cython/OpenMP) or an OpenCL device (``"gpu"``, ``"opencl"``,
        ``"opencl:P:D"``).  The device draws the CPU's samples for the same
        ``random_state`` and adds the gradient in the CPU's order, so both give the same model
        up to the last bits of ``exp`` / ``log``.  L-BFGS-B evaluates the exact loss on the
        host in both cases.
    device_options : dict, OpenCLOptions or None, default=None
        Settings of the OpenCL kernels (see :class:`~sktensor_fast.OpenCLOptions`), over those
        of :func:`~sktensor_fast.config_context` and the ``SKTENSOR_FAST_OCL_*`` environment
        variables; results do not depend on them.  Only for OpenCL devices: setting one with
        ``device="cpu"`` is a ValueError.
    format : {"auto", "coo", "alto"}, default="auto"
        Storage format of the tensor (see :class:`CPALS`); the samplers and the results do not
        depend on it.
    verbose : int, default=0
        Print the sample counts and the loss after every epoch / iteration to stderr.
    beta1, beta2, epsilon : float, default=0.9, 0.999, 1e-8
        Adam's moment decay rates and the guard of its (and AdaGrad's) denominator.
    max_time : float or None, default=None
        Stop once this many seconds have passed (counted for each of the ``n_init`` starts;
        checked after every step of the stochastic solvers and every L-BFGS-B iteration).  A
        fit that stops at ``max_iter`` or ``max_time`` before its own criterion warns
        (``sklearn.exceptions.ConvergenceWarning``).
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
        Component weights (factor columns have unit 2-norm), in decreasing order.
    factors_ : list of ndarray
    loss_ : float
        Final loss Σ f(x, m) over the (observed) entries: exact for L-BFGS-B, estimated on the
        fixed sample for the stochastic solvers.
    loss_history_ : ndarray
        Loss at the start and after every epoch / iteration.
    n_iter_ : int
        Epochs (stochastic, failed ones included) or L-BFGS-B iterations run by the kept
        start.
    converged_ : bool
        Whether the fit stopped by its own criterion: ``stop_reason_`` is ``"tol"``,
        ``"fails"`` or ``"linesearch"``.  False when it stopped at ``max_iter`` or
        ``max_time`` (with a ConvergenceWarning).
    stop_reason_ : {"tol", "fails", "linesearch", "max_iter", "max_time"}
        Why the fit stopped:

        - ``"tol"``: the loss stopped changing: the relative change of the estimated loss
          over an epoch fell below ``tol`` (stochastic solvers), or scipy's test on the
          relative decrease of the loss (``ftol = tol * 1e-4``) or on the projected gradient
          passed (L-BFGS-B).  Converged.
        - ``"fails"`` (stochastic solvers): the loss stopped improving: ``max_fails + 1``
          epochs failed to lower the estimated loss (each was undone and the learning rate
          lowered by ``decay``).  This is how GCP's stochastic fits normally end (as in pyttb
          and GenTen): converged, up to the noise of the estimate.
        - ``"linesearch"`` (L-BFGS-B): the line search found no point with a lower loss, the
          usual end at the limit of floating-point precision.  Converged.
        - ``"max_iter"``: it ran ``max_iter`` epochs (L-BFGS-B: iterations) first.
        - ``"max_time"``: it ran out of time (``max_time`` seconds) first.
    n_features_in_ : int
    tensor_shape_ : tuple
    n_samples_seen_ : int
        :meth:`partial_fit` only: the mode-0 slices it was given so far (the first batch
        included, or the tensor of :meth:`fit` when the stream continues a fitted model).

    Notes
    -----
    ``transform`` fits the mode-0 loadings of new slices under the same loss with the other
    factors fixed.  For the squared error (``"gaussian"``) these are the least-squares
    loadings, computed exactly at any size (one MTTKRP, as :class:`CPALS` does).  For the other
    losses: by L-BFGS-B on those loadings (until the loss's floating-point value stops
    decreasing, so that the answer depends on which slices are transformed together only in
    the last digits: a few times 1e-8, relative, in the tests) when the new tensor has at most
    :data:`GCP_DENSE_LIMIT` entries, else by the estimator's stochastic solver (Adam, with the
    estimator's ``learning_rate``, ``beta1``, … when ``solver="lbfgsb"``).  ``score`` is
    ``−F / (number of entries)`` after that refit (exact or estimated likewise).

    ``fit_transform(X)`` is ``fit(X).transform(X)`` (without a ``mask``), so the two agree;
    ``fit`` runs its solver once and keeps the loadings where the solver stopped (no second
    solve of the mode-0 problem, which only ``transform`` / ``fit_transform`` / ``score`` pay
    for).  With a ``mask``, ``fit_transform`` returns the fitted loadings, since
    ``transform`` reads every entry.

    Examples
    --------
    >>> import numpy as np
    >>> from sktensor_fast import GCP, KruskalTensor
    >>> rng = np.random.default_rng(0)
    >>> truth = KruskalTensor(None, [rng.random((10, 2)), rng.random((8, 2)), rng.random((6, 2))])
    >>> X = rng.poisson(5 * truth.full())
    >>> model = GCP(rank=2, loss="poisson", solver="lbfgsb", random_state=0).fit(X)
    >>> model.factors_[0].shape, bool(model.loss_ < GCP(rank=1, loss="poisson",
    ...     solver="lbfgsb", random_state=0).fit(X).loss_)
    ((10, 2), True)
    """

    _init_strings = {"random"}

    _parameter_constraints = {
        **BaseCP._parameter_constraints,
        "init": [_InitConstraint({"random"})],
        "loss": [StrOptions(set(LOSSES)), HasMethods(["value", "deriv"])],
        "loss_param": [Real, None],
        "solver": [StrOptions(set(_SOLVERS))],
        "sampler": [StrOptions(set(SAMPLERS))],
        "n_samples_grad": [Interval(Integral, 1, None, closed="left"), tuple, None],
        "n_samples_loss": [Interval(Integral, 1, None, closed="left"), tuple, None],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "decay": [Interval(Real, 0, 1, closed="right")],
        "max_fails": [Interval(Integral, 0, None, closed="left")],
        # the kernels count the steps of an epoch in int64
        "epoch_iters": [Interval(Integral, 1, 2 ** 63 - 1, closed="both")],
        "mask": ["array-like", SparseTensor, None],
        "beta1": [Interval(Real, 0, 1, closed="left")],
        "beta2": [Interval(Real, 0, 1, closed="left")],
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "window": [Interval(Integral, 0, None, closed="left"), None],
        "window_method": [StrOptions({"last", "reservoir"})],
    }

    def __init__(self, rank=5, *, loss="gaussian", loss_param=None, solver="adam",
                 sampler="stratified", n_samples_grad=None, n_samples_loss=None,
                 learning_rate=2e-3, decay=0.1, max_fails=1, epoch_iters=1000, max_iter=1000,
                 tol=1e-4, mask=None, init="random", random_state=None, n_init=1,
                 device="cpu", format="auto", verbose=0, beta1=0.9, beta2=0.999,
                 epsilon=1e-8, max_time=None, device_options=None, window=10, window_method="last"):
        self.rank = rank
        self.loss = loss
        self.loss_param = loss_param
        self.solver = solver
        self.sampler = sampler
        self.n_samples_grad = n_samples_grad
        self.n_samples_loss = n_samples_loss
        self.learning_rate = learning_rate
        self.decay = decay
        self.max_fails = max_fails
        self.epoch_iters = epoch_iters
        self.max_iter = max_iter
        self.tol = tol
        self.mask = mask
        self.init = init
        self.random_state = random_state
        self.n_init = n_init
        self.device = device
        self.format = format
        self.verbose = verbose
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.max_time = max_time
        self.device_options = device_options
        self.window = window
        self.window_method = window_method

    @property
    def _iteration_name(self):
        return getattr(OPTIMIZERS.get(self.solver), "iteration_name", "epochs")

    def _stop_words(self):
        stochastic = getattr(OPTIMIZERS.get(self.solver), "stochastic", True)
        reason = self.stop_reason_
        if reason == "tol":
            if stochastic:
                return (f"the loss stopped changing: the estimated loss changed by less than "
                        f"tol={self.tol:g} (relative) over an epoch")
            return (f"the loss stopped changing: L-BFGS-B's convergence test passed "
                    f"(relative decrease below tol * 1e-4 = {self.tol * 1e-4:g}, or a "
                    f"projected gradient near zero)")
        if reason == "fails":
            return (f"the loss stopped improving: {self.max_fails + 1} epoch(s) failed to "
                    f"lower the estimated loss (max_fails={self.max_fails}; each was undone "
                    f"and the learning rate lowered)")
        if reason == "linesearch":
            return ("the loss stopped improving: L-BFGS-B's line search found no lower loss "
                    "(the limit of floating-point precision)")
        return super()._stop_words()

    # ------------------------------------------------------------------ validation
    def _make_loss(self):
        return get_loss(self.loss, self.loss_param)

    def _empty_message(self):
        if self.mask is not None:   # a dense X is blanked outside the mask before this check
            return _NO_OBSERVED_NONZERO
        return super()._empty_message()

    def _stochastic_optimizer(self):
        """The optimiser object of ``solver`` with this estimator's settings: Adam for
        ``solver="lbfgsb"`` (the stochastic ``transform`` of a tensor too large for the exact
        loss)."""
        name = self.solver if OPTIMIZERS[self.solver].stochastic else "adam"
        return make_optimizer(name, learning_rate=self.learning_rate, decay=self.decay,
                              beta1=self.beta1, beta2=self.beta2, epsilon=self.epsilon)

    def _kernel_needs(self):
        return ("gcp",)

    def _check_data(self, X):
        loss = self._make_loss()
        loss.check_data(X.vals)
        _check_zero_domain(loss, X.size - X.nnz, masked=False)
        return X

    def _check_counts(self):
        """Validate the sample-count parameters (their form; the defaults need the data)."""
        for name in ("n_samples_grad", "n_samples_loss"):
            val = getattr(self, name)
            if isinstance(val, tuple):
                if name == "n_samples_grad" and self.sampler == "uniform":
                    raise ValueError("with sampler='uniform', n_samples_grad must be an int "
                                     "(the number of entries drawn per step)")
                if (len(val) != 2 or any(isinstance(v, (bool, np.bool_))
                                         or not isinstance(v, Integral) for v in val)
                        or min(val) < 1):
                    raise ValueError(f"{name} must be an int >= 1 or a pair (nonzeros, zeros) "
                                     f"of ints >= 1, got {val!r}")
                total = int(val[0]) + int(val[1])
            elif val is None:
                continue
            else:
                total = int(val) if name == "n_samples_grad" and self.sampler == "uniform" \
                    else 2 * int(val)
            if total > GCP_MAX_SAMPLES:
                raise ValueError(
                    f"{name}={val!r} asks for {total} samples per "
                    f"{'step' if name == 'n_samples_grad' else 'loss estimate'} (nonzeros and "
                    f"other entries together); at most GCP_MAX_SAMPLES = 2**31 - 1 = "
                    f"{GCP_MAX_SAMPLES} are allowed")

    def _sample_counts(self, n_nz, n_zero):
        """(p, q) per gradient step and for the loss sample; pyttb's defaults."""
        return default_counts(self.sampler, n_nz, n_zero, self.n_samples_grad,
                              self.n_samples_loss)

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None):
        """Fit the GCP model to the tensor ``X``.

        Parameters
        ----------
        X : SparseTensor, ndarray (2 or more modes), sparse.COO, scipy.sparse matrix
        y : ignored

        Returns
        -------
        self
        """
        self._validate_params()
        loss = self._make_loss()
        self._check_counts()
        masked = self.mask is not None
        X = _blank_unobserved(X, self.mask)
        # with a mask only the observed entries are data: they are checked below
        X = self._validate_input(X, reset=True, check_data=not masked)
        obs = _Observed(X, self.mask)
        if masked:
            loss.check_data(obs.X.vals)
            _check_zero_domain(loss, obs.n_zero, masked=True)
        if not OPTIMIZERS[self.solver].stochastic and X.size > GCP_DENSE_LIMIT:
            raise ValueError(
                f"solver='lbfgsb' evaluates the loss on every entry of the dense tensor; X "
                f"has {X.size} entries, more than GCP_DENSE_LIMIT = {GCP_DENSE_LIMIT}. Use "
                f"a stochastic solver: solver='adam', 'sgd' or 'adagrad'")
        best = self._fit_impl(X, ctx=_FitContext(obs))
        self.loss_ = float(best["loss"])
        self._warn_if_not_converged()
        return self

    def _result_key(self, result):
        return -result["loss"]

    # ------------------------------------------------------------------ streaming hooks
    def _check_streaming(self):
        if self.mask is not None:
            raise ValueError("GCP.partial_fit cannot use a mask (it gives the observed entries "
                             "of one tensor, not of a stream of batches); set mask=None")
        self._make_loss()
        self._check_counts()

    def _fit_kwargs(self, X):
        if not OPTIMIZERS[self.solver].stochastic and X.size > GCP_DENSE_LIMIT:
            raise ValueError(
                f"solver='lbfgsb' evaluates the loss on every entry of the dense tensor; the "
                f"batch and its history have {X.size} entries, more than GCP_DENSE_LIMIT = "
                f"{GCP_DENSE_LIMIT}. Use a stochastic solver or a smaller window")
        return {"ctx": _FitContext(_Observed(X, None))}

    def _keep_result(self, best):
        self.loss_ = float(best["loss"])

    def _fit_model(self, backend, T, X, init, rng, ctx=None, warm=False):
        if ctx is None:
            ctx = _FitContext(_Observed(X, None))
        obs = ctx.obs
        loss = self._make_loss()
        R = self.rank
        U = [np.array(f, dtype=np.float64) for f in init]
        if isinstance(self.init, str) and not warm:
            U = _scale_to_norm(U, obs.X.norm())
        if loss.lower > -np.inf:
            U = [np.maximum(u, loss.lower) for u in U]
        seed = int(rng.randint(0, 2 ** 62))
        t0 = time.perf_counter()
        if not OPTIMIZERS[self.solver].stochastic:
            U, F, n_iter, history, stop = self._lbfgsb(backend, T, U, loss, mask=obs.dense_mask,
                                                       t0=t0, report=True)
        else:
            if ctx.state is None:
                To = T if self.mask is None else backend.prepare(obs.X, self._storage_format(backend))
                n_grad, n_loss = self._sample_counts(obs.n_nz, obs.n_zero)
                ctx.To = To
                ctx.state = backend.gcp.setup(To, self.sampler, n_grad, n_loss,
                                              int(rng.randint(0, 2 ** 62)), obs.zero_subs)
                self._log(f"{self.sampler} sampling: {ctx.state.n_grad} samples per step "
                          f"(nonzeros, others), loss sample {ctx.state.n_loss}")
            U, F, n_iter, history, stop = self._stochastic(backend, ctx.To, ctx.state, U, loss,
                                                           seed, t0=t0, report=True)
        # _arrange makes new matrices: the downloads may sit in the backend's kept buffer
        weights, factors = _arrange(np.ones(R), [np.asarray(u, np.float64)
                                                 for u in backend.to_numpy_transient(U)])
        return {"weights": weights, "factors": factors, "n_iter": n_iter,
                "loss_history": history, "loss": float(F), "converged": stop not in ("max_iter", "max_time"),
                "stop": stop}

    def fit_transform(self, X, y=None):
        """Fit the model and return the mode-0 loadings of ``X``'s slices.

        Without a ``mask`` these are ``transform(X)``'s loadings (the other factors fixed,
        the mode-0 problem solved as ``transform`` solves it), so that ``fit_transform(X)``
        equals ``fit(X).transform(X)``; the fit itself stops where its solver stops and
        ``factors_[0]`` keeps the solver's loadings.  With a ``mask``: the fitted loadings
        ``factors_[0] * weights_`` (``transform`` reads every entry, the fit only the observed
        ones).

        Returns
        -------
        W : ndarray of shape (n_samples, rank)
        """
        self.fit(X, y)
        if self.mask is not None:
            return self._sample_index(np.asarray(self.factors_[0] * self.weights_[None, :]), X)
        return self.transform(X)

    # ------------------------------------------------------------------ solvers
    def _stochastic(self, backend, T, state, U, loss, seed, active=None, t0=None,
                    report=False):
        """Epochs of Adam / SGD / AdaGrad on the factors (only those with ``active[k]``).

        Returns the factors, the estimated loss, the epochs run, the loss history and why it
        stopped: ``"tol"``, ``"fails"`` (more than ``max_fails`` failed epochs), ``"max_iter"``
        or ``"max_time"`` (checked after every step, measured from ``t0``; None: no limit).
        ``report``: pass every epoch to the fit callback (the fit's own solver).
        """
        R = U[0].shape[1]
        ones = np.ones(R)
        U = [backend.asarray(u, dtype=state.dtype) for u in U]
        opt = self._stochastic_optimizer().start(backend, U)
        f = float(backend.gcp.loss_estimate(T, state, ones, U, loss))
        if not np.isfinite(f):
            raise ValueError(f"the estimated loss of the initial guess is {f}; check the "
                                     f"data against the loss {loss.name!r} or give an init")
        history = [f]
        draws = n_epochs = 0
        G = None
        limit = None if (t0 is None or self.max_time is None) else t0 + self.max_time
        t0 = time.perf_counter() if t0 is None else t0
        stop = "max_iter"
        for epoch in range(self.max_iter):
            saved = [backend.copy(u) for u in U]
            opt.checkpoint(backend)
            lr = opt.rate
            # the epoch's steps in one call (one compiled loop on the CPU backend)
            G, done, timed_out = backend.gcp.steps(
                T, state, ones, U, loss, seed, draws, self.epoch_iters, opt, loss.lower,
                active, out=G, deadline=limit, clock=time.perf_counter)
            draws += done
            if timed_out:
                stop = "max_time"
            f_new = float(backend.gcp.loss_estimate(T, state, ones, U, loss))
            n_epochs += 1
            failed = not f_new <= f  # NaN counts as a failure
            change = np.inf
            if failed:
                U = saved
                opt.failed_epoch()      # moments and step counter back, learning rate decayed
            else:
                change = abs(f - f_new) / max(abs(f), np.finfo(float).tiny)
                f = f_new
            history.append(f)
            if report:
                self._report_iteration(n_epochs, f, t0, "estimated loss")
            if self.verbose:
                self._log(f"epoch {n_epochs:4d}  f-est {f_new:.6e}  lr {lr:.2e}"
                          + (f"  failed ({opt.n_fails}), restored" if failed else
                             f"  change {change:.2e}")
                          + f"  {time.perf_counter() - t0:.2f}s")
            if stop == "max_time":
                self._log(f"stopping: max_time={self.max_time:g}s reached")
                break
            if opt.n_fails > self.max_fails:
                stop = "fails"
                break
            if not failed and change < self.tol:
                stop = "tol"
                break
        return U, f, n_epochs, history, stop

    def _lbfgsb(self, backend, T, U, loss, mask=None, active=None, tight=False, maxiter=None,
                t0=None, report=False):
        """L-BFGS-B on the exact loss; only the factors with ``active[k]`` move.

        ``tight``: solve until the loss stops decreasing in floating point, for the convex
        problems of ``transform`` (the answer then depends on which slices are solved
        together only in its last digits).
        Otherwise the fit's tolerance (scipy's ``ftol = tol * 1e-4``) and at most ``maxiter``
        iterations (default ``max_iter``).
        ``t0``: start of the fit, from which ``max_time`` is counted (None: no limit).
        ``report``: pass every iteration to the fit callback (the fit's own solver).
        Returns the factors, the loss, the iterations, the loss history and why it stopped
        (``"tol"``, ``"max_iter"``, ``"max_time"`` or ``"linesearch"``).
        """
        N = len(U)
        R = U[0].shape[1]
        ones = np.ones(R)
        modes = [k for k in range(N) if active is None or active[k]]
        U = [np.array(backend.to_numpy(u), dtype=np.float64) for u in U]
        bounds_at = np.cumsum([0] + [U[k].size for k in modes])
        dev = [backend.asarray(u) for u in U]

        def unpack(x):
            for i, k in enumerate(modes):
                U[k] = x[bounds_at[i]:bounds_at[i + 1]].reshape(U[k].shape)
                dev[k] = backend.asarray(U[k])

        def fg(x):
            unpack(x)
            F, G = backend.gcp.full_loss_grad(T, ones, dev, loss, mask=mask, modes=modes)
            g = np.concatenate([np.asarray(backend.to_numpy(G[k])).ravel() for k in modes])
            if not np.isfinite(F) or not np.all(np.isfinite(g)):
                return np.inf, np.zeros_like(g)
            return F, g

        x0 = np.concatenate([U[k].ravel() for k in modes])
        bounds = None
        if loss.lower > -np.inf:
            x0 = np.maximum(x0, loss.lower)
            bounds = Bounds(np.full(x0.size, loss.lower), np.full(x0.size, np.inf))
        history = [fg(x0)[0]]
        if not np.isfinite(history[0]):
            raise ValueError(f"the loss of the initial guess is not finite; check the "
                                     f"data against the loss {loss.name!r} or give an init")
        limit = None if (t0 is None or self.max_time is None) else t0 + self.max_time
        t0 = time.perf_counter() if t0 is None else t0
        timed_out = []

        def callback(intermediate_result):
            history.append(float(intermediate_result.fun))
            if report:
                self._report_iteration(len(history) - 1, history[-1], t0, "loss")
            if self.verbose:
                self._log(f"iter {len(history) - 1:4d}  loss {history[-1]:.8e}  "
                          f"{time.perf_counter() - t0:.2f}s")
            if limit is not None and backend.decide(time.perf_counter() > limit):
                timed_out.append(True)
                raise StopIteration

        solver = LBFGSB(max_iter=self.max_iter, tol=self.tol)
        res = solver.minimize(fg, x0, bounds=bounds, callback=callback, tight=tight,
                              maxiter=maxiter)
        unpack(res.x)
        self._log(f"L-BFGS-B: {res.nit} iterations, loss {res.fun:.8e} ({res.message})")
        return dev, float(res.fun), int(res.nit), history, solver.stop_reason(res, timed_out)

    # ------------------------------------------------------------------ sklearn hooks
    def _solve_mode0(self, backend, T, X, factors):
        loss = self._make_loss()
        N = X.ndim
        W0 = np.mean(self.factors_[0] * self.weights_[None, :], axis=0)
        W0 = np.tile(np.maximum(W0, loss.lower), (X.shape[0], 1))
        U = [W0] + [np.array(f, dtype=np.float64) for f in factors[1:]]
        active = [True] + [False] * (N - 1)
        if _least_squares(loss):
            return _least_squares_loadings(backend, T, [None] + U[1:], X.dtype)
        if X.size <= GCP_DENSE_LIMIT:
            U, *_ = self._lbfgsb(backend, T, U, loss, active=active, tight=True)
        else:
            rng = check_random_state(self.random_state)
            n_grad, n_loss = self._sample_counts(T.nnz, X.size - T.nnz)
            state = backend.gcp.setup(T, self.sampler, n_grad, n_loss,
                                      int(rng.randint(0, 2 ** 62)))
            U, *_ = self._stochastic(backend, T, state, U, loss, int(rng.randint(0, 2 ** 62)),
                                     active=active)
        return np.asarray(backend.to_numpy(U[0]), dtype=np.float64)

    def _score_loadings(self, backend, T, X, W, factors):
        loss = self._make_loss()
        U = [backend.asarray(W, dtype=np.float64)]
        U += [backend.asarray(f, dtype=np.float64) for f in factors[1:]]
        ones = np.ones(W.shape[1])
        if X.size <= GCP_DENSE_LIMIT:
            F, _ = backend.gcp.full_loss_grad(T, ones, U, loss, need_grad=False)
        else:
            rng = check_random_state(self.random_state)
            _, n_loss = self._sample_counts(T.nnz, X.size - T.nnz)
            state = backend.gcp.setup(T, "stratified", (1, 1), n_loss,
                                      int(rng.randint(0, 2 ** 62)))
            F = backend.gcp.loss_estimate(T, state, ones, U, loss)
        return -float(F) / X.size


def _least_squares(loss):
    """Whether ``loss`` is the built-in squared error (its mode-0 problem is least squares)."""
    return isinstance(loss, LOSSES["gaussian"])


def _least_squares_loadings(backend, T, factors, dtype):
    """Mode-0 loadings minimising Σ (x − m)² over every entry with ``factors[1:]`` fixed:
    ``MTTKRP(X) (⊛_{k>0} A⁽ᵏ⁾ᵀA⁽ᵏ⁾)⁻¹`` (pseudo-inverse when singular), as CPALS solves them."""
    others = [np.asarray(backend.to_numpy(f), dtype=np.float64) for f in factors[1:]]
    R = others[0].shape[1]
    gram = np.ones((R, R))
    for f in others:
        gram *= f.T @ f
    U = [backend.asarray(np.zeros((T.shape[0], R)), dtype=dtype)]
    U += [backend.asarray(f, dtype=dtype) for f in others]
    M = backend.mttkrp(T, U, 0)
    W = backend.matmul_small(M, _inverse_gram(gram))
    return np.asarray(backend.to_numpy(W), dtype=np.float64)


def _check_zero_domain(loss, n_zero, masked):
    """Refuse a loss whose f(0, m) is unbounded below on data with (observed) zeros.

    For such a loss (zero-truncated Poisson, Gamma, Rayleigh, β-divergence with β < 0) a zero
    is not a possible observation: the loss of a zero entry decreases without bound as its
    model value goes to 0, and a fit to the zeros of a sparse tensor ends in a degenerate model
    rather than failing."""
    if n_zero == 0 or getattr(loss, "zero_in_domain", True):
        return
    where = ("the mask observes" if masked else
             "X holds (the implicit zeros of a sparse tensor count, as every entry of X is "
             "observed without a mask)")
    raise ValueError(
        f"loss {loss.name!r} is defined for data > 0 only (f(0, m) decreases without bound "
        f"as m goes to 0), but {where} {n_zero} zero entries. Give a mask naming the observed "
        f"entries (those that are not observed zeros; the zeros of a sparse tensor are then "
        f"missing values), or use a loss for data that may be 0 (e.g. 'poisson', 'gaussian')")


def _scale_to_norm(U, target):
    """Scale the factors (equally in every mode) so that ‖⟦U⟧‖ = target (no-op if 0)."""
    R = U[0].shape[1]
    gram = np.ones((R, R))
    for u in U:
        gram *= u.T @ u
    norm = float(np.sqrt(max(np.sum(gram), 0.0)))
    if target <= 0 or norm <= 0 or not np.isfinite(norm):
        return U
    s = (target / norm) ** (1.0 / len(U))
    return [u * s for u in U]
