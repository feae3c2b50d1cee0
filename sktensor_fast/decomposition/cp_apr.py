"""CP decomposition of count data by alternating Poisson regression (CP-APR)."""
import time

import numpy as np
from sklearn.utils._param_validation import Integral, Interval, Real, StrOptions

from .._prepared import value_stats
from ._base import BaseCP, _InitConstraint
from .._warnings import warn as _warn

__all__ = ["CPAPR"]

#: ``transform`` runs at most this many times ``max_inner_iter`` inner iterations on mode 0.
_TRANSFORM_ITER_FACTOR = 50


def _guard(dtype):
    """Smallest guard of the divisions x / m for arrays of ``dtype``: 1e8 times its smallest
    normal number (2.2e-300 in float64, 1.2e-30 in float32), so that x / guard stays finite for
    counts up to 4e8."""
    return 1e8 * float(np.finfo(dtype).tiny)


def _model_at_nonzeros(subs, weights, factors, chunk=1 << 18):
    """Values of the Kruskal model (host ``weights``, host ``factors``) at ``subs`` (NumPy)."""
    out = np.empty(subs.shape[0])
    for s in range(0, subs.shape[0], chunk):
        sub = subs[s:s + chunk]
        P = np.broadcast_to(np.asarray(weights, dtype=np.float64), (sub.shape[0], len(weights)))
        P = P.copy()
        for n, f in enumerate(factors):
            P *= f[sub[:, n]]
        out[s:s + chunk] = P.sum(axis=1)
    return out


def _normalize_columns(backend, A):
    """Scale the columns of A to unit 1-norm in place (zero columns stay zero); return the
    norms (host vector), which become the component weights."""
    s = backend.column_norms(A, 1)
    inv = np.ones_like(s)
    np.divide(1.0, s, out=inv, where=s > 0)
    backend.scale_columns(A, inv)
    return s


class CPAPR(BaseCP):
    """Poisson CP decomposition of count tensors by alternating Poisson regression (CP-APR).

    Fits a nonnegative Kruskal model ``M = Σ_r λ_r a⁽⁰⁾_r ∘ … ∘ a⁽ᴺ⁻¹⁾_r`` maximising the Poisson
    log-likelihood ``Σ_nz x log m − Σ_all m`` (zeros included), as the Tensor Toolbox's
    ``cp_apr`` does.  Each outer iteration updates the modes in turn; with the other factors
    fixed, the mode-n problem is convex and is solved by one of three inner solvers:

    - ``"mu"``: multiplicative updates ``B ← B ∘ Φ`` with ``Φ = (X_(n) ⊘ max(BΠ, ε)) Πᵀ``
      (Chi & Kolda 2012), computed by the backend's Φ kernel without storing Π.  After the
      first outer iteration, "inadmissible zeros" (entries below ``kappa_tol`` whose gradient
      asks them to grow, Φ > 1) are shifted by ``kappa``.
    - ``"pdnr"``: projected damped Newton on each row of the factor independently (Hansen,
      Plantenga & Kolda 2015), with a two-metric active set and a projected line search.
    - ``"pqnr"``: as ``"pdnr"`` with an L-BFGS approximation of the row Hessian.

    Samples are mode-0 slices.  ``transform(X_new)`` fits the mode-0 loadings of new slices by
    Poisson regression with the other factors fixed, using the same inner solver (``mu``: up to
    ``50 * max_inner_iter`` multiplicative updates, each slice stopping when its KKT violation
    falls below ``tol``; ``pdnr``/``pqnr``: the row solver with ``50 * max_inner_iter`` inner
    iterations per row), starting from each slice's total count spread over the components in
    proportion to ``weights_``.  Every slice is solved independently of the others; slices
    without nonzeros get zero loadings.  ``score(X)`` is the mean Poisson log-likelihood per
    mode-0 slice after that refit, ``(Σ_nz x log m − Σ m) / n_samples`` (without the constant
    ``−Σ log x!``; model values are floored at the guard ``eps_div_zero`` so an entry the model
    deems impossible costs a large but finite amount); greater is better.

    Parameters
    ----------
    rank : int, default=5
        Number of components R.  The default serves a first look, the same in every estimator
        and on the command line: five components are enough for the main patterns of a data
        set to come apart (two usually merge them) and few enough to read in one screen of
        :func:`~sktensor_fast.describe_components`.  Choose the rank for real work by
        comparing ranks (see the user guide's "Choosing the rank").
    solver : {"mu", "pdnr", "pqnr"}, default="mu"
        Inner solver: multiplicative updates, row-wise projected damped Newton, or row-wise
        projected quasi-Newton (L-BFGS).  The command line uses the same default.
    max_iter : int, default=1000
        Maximum number of outer iterations.
    max_inner_iter : int, default=10
        Maximum inner iterations per mode (``mu``) or per row subproblem (``pdnr``, ``pqnr``).
    tol : float, default=1e-4
        Tolerance on the KKT violation ``max |min(B, 1 − Φ)|``; the fit stops when no mode
        (``mu``) or row (``pdnr``, ``pqnr``) needs an update.
    kappa : float, default=0.01
        Offset added to inadmissible zeros (``mu``), and to the entries of the factor rows of
        a nonzero where the model vanished (every solver; see Notes).
    kappa_tol : float, default=1e-10
        Entries below this value are candidates for the ``kappa`` shift; 0 turns both shifts
        off.
    eps_div_zero : float or None, default=None
        Guard of the divisions by the model value: Φ and the row solvers' derivatives use
        ``x / max(m, eps_div_zero)``.  It must lie below every model value that occurs at a
        nonzero, because where it is above one the floored derivative asks the factor rows to
        shrink although the likelihood asks them to grow, and those rows collapse to exactly
        zero.  Model values far below the Tensor Toolbox's 1e-10 are ordinary: where two
        coordinates that occur in a single nonzero meet, the model is about
        ``x² / λ_r`` times the other modes' loadings there (1e-8 to 1e-12 on the embedded
        flights-routes data).  None (the default) uses ``1e8`` times the smallest normal number
        of the data's precision (2.2e-300 in float64, 1.2e-30 in float32), the least for which
        ``x / eps`` stays finite; a given value is raised to it when smaller.
    eps_active : float, default=1e-8
        ``pdnr``, ``pqnr``: Bertsekas tolerance for the active set.
    mu0 : float, default=1e-5
        ``pdnr``: initial damping parameter of the Hessian.
    lbfgs_mem : int, default=3
        ``pqnr``: number of (step, gradient change) pairs kept by L-BFGS.
    inexact : bool, default=True
        ``pdnr``: solve the row subproblems inexactly, with a tolerance tightened from the
        previous outer iteration's KKT violation (``max(tol, kkt / 100)``) and 2 inner
        iterations in the first outer iteration.
    init : "random", KruskalTensor or list of ndarray, default="random"
        Initial guess: uniform random factors on [0, 1), or a given nonnegative model.
    random_state : int, RandomState instance or None
        Seed for the random initialisation.
    n_init : int, default=1
        Number of random starts; the model with the largest log-likelihood is kept.
    device : str, default="cpu"
        ``"cpu"`` (Cython/OpenMP) or an OpenCL device (``"gpu"``, ``"opencl"``,
        ``"opencl:P:D"``).
    device_options : dict, OpenCLOptions or None, default=None
        Settings of the OpenCL kernels (see :class:`~sktensor_fast.OpenCLOptions`), over those
        of :func:`~sktensor_fast.config_context` and the ``SKTENSOR_FAST_OCL_*`` environment
        variables; results do not depend on them.  Only for OpenCL devices: setting one with
        ``device="cpu"`` is a ValueError.
    format : {"auto", "coo"}, default="auto"
        Storage format of the tensor for the kernels.
    verbose : int, default=0
        Print progress (iteration, log-likelihood, KKT violation, time) to stderr: every 10
        outer iterations, or every iteration when ``verbose > 1``.
    max_time : float or None, default=None
        Stop after the outer iteration during which this many seconds have passed (counted
        for each of the ``n_init`` starts).  A fit that stops at ``max_iter`` or ``max_time``
        before reaching ``tol`` warns (``sklearn.exceptions.ConvergenceWarning``).
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
        Component weights λ, in decreasing order.
    factors_ : list of ndarray
        Nonnegative factor matrices, ``factors_[n]`` of shape (I_n, rank); every column sums
        to 1 (or is zero).
    log_likelihood_ : float
        Poisson log-likelihood ``Σ_nz x log m − Σ m`` of the final model (the Tensor Toolbox
        definition, without ``−Σ log x!``).
    kkt_violation_ : float
        Largest KKT violation of the last outer iteration.
    n_iter_ : int
        Outer iterations run (by the kept start when ``n_init > 1``).
    converged_ : bool
        Whether the fit stopped by its own criterion, ``stop_reason_ == "tol"`` (False: it
        stopped at ``max_iter`` or ``max_time``, with a ConvergenceWarning).
    stop_reason_ : {"tol", "max_iter", "max_time"}
        Why the fit stopped: ``"tol"``, every KKT violation (how far each factor is from
        the optimum of its subproblem) fell below ``tol`` (converged); ``"max_iter"``, it ran
        ``max_iter`` outer iterations first; ``"max_time"``, it ran out of time
        (``max_time`` seconds) first.
    n_inner_iter_ : int
        Inner iterations run in total (``mu``: Φ evaluations; ``pdnr``/``pqnr``: summed over
        rows).
    loss_history_ : ndarray
        Log-likelihood after every outer iteration.
    n_features_in_ : int
        Number of entries of a mode-0 slice (I_1 ⋯ I_{N-1}).
    tensor_shape_ : tuple
        Shape of the fitted tensor.
    n_samples_seen_ : int
        :meth:`partial_fit` only: the mode-0 slices it was given so far (the first batch
        included, or the tensor of :meth:`fit` when the stream continues a fitted model).

    Notes
    -----
    Safeguards against a model that is zero where a count was observed (log-likelihood
    −∞).  In exact arithmetic every update keeps the model positive at the nonzeros (the
    row problems' objective is infinite there), so such zeros come from a guard that floors
    legitimate model values (see ``eps_div_zero``), from a start that is zero there, or from
    underflow.  Whenever an outer iteration ends with the model zero at some nonzero, the
    entries below ``kappa_tol`` of the factor rows of those nonzeros, in every mode, are
    shifted by ``kappa``, the extension of Chi & Kolda's inadmissible-zero shift to entries
    whose Φ is 0 / 0; a given ``init`` with such zeros is treated so before the first update.

    Differences from pyttb 1.8.6's ``cp_apr``, where that code departs from the Tensor
    Toolbox it translates: the ``kappa`` shift applies where Φ > 1 (pyttb tests Φ > 0); the
    L-BFGS two-loop recursion of ``pqnr`` uses the ``lbfgs_mem`` newest pairs (pyttb keeps a
    single pair and passes a scalar search direction); the active-set threshold uses the
    projected-gradient norm ``‖min(b, ∇f)‖``; ``eps_div_zero`` defaults to a guard against
    division by zero only (pyttb's 1e-10 floors model values, see above).

    References
    ----------
    E. C. Chi and T. G. Kolda, "On tensors, sparsity, and nonnegative factorizations", SIAM J.
    Matrix Anal. Appl. 33(4), 2012.  S. Hansen, T. Plantenga and T. G. Kolda, "Newton-based
    optimization for Kullback-Leibler nonnegative tensor factorizations", Optim. Methods Softw.
    30(5), 2015.

    Examples
    --------
    >>> import numpy as np
    >>> from sktensor_fast import CPAPR, SparseTensor
    >>> rng = np.random.default_rng(0)
    >>> rates = np.einsum("ir,jr,kr->ijk", rng.random((8, 2)), rng.random((6, 2)),
    ...                   rng.random((5, 2))) * 20
    >>> X = SparseTensor.from_dense(rng.poisson(rates).astype(float))
    >>> model = CPAPR(rank=2, random_state=0).fit(X)
    >>> [f.sum(axis=0).round(6).tolist() for f in model.factors_][0]
    [1.0, 1.0]
    >>> bool(model.loss_history_[-1] >= model.loss_history_[0])
    True
    >>> model.transform(X).shape
    (8, 2)
    """

    _init_strings = {"random"}

    _parameter_constraints = {
        **BaseCP._parameter_constraints,
        "solver": [StrOptions({"mu", "pdnr", "pqnr"})],
        "max_inner_iter": [Interval(Integral, 1, None, closed="left")],
        "kappa": [Interval(Real, 0, None, closed="left")],
        "kappa_tol": [Interval(Real, 0, None, closed="left")],
        "eps_div_zero": [Interval(Real, 0, None, closed="neither"), None],
        "eps_active": [Interval(Real, 0, None, closed="left")],
        "mu0": [Interval(Real, 0, None, closed="neither")],
        "lbfgs_mem": [Interval(Integral, 1, None, closed="left")],
        "inexact": ["boolean"],
        "init": [_InitConstraint({"random"})],
        "window": [Interval(Integral, 0, None, closed="left"), None],
        "window_method": [StrOptions({"last", "reservoir"})],
    }

    _objective_name = "log-likelihood"
    _tol_reached = ("every KKT violation (the distance of a factor from the optimum of its "
                    "subproblem) fell below tol={tol:g}")

    def __init__(self, rank=5, *, solver="mu", max_iter=1000, max_inner_iter=10, tol=1e-4,
                 kappa=0.01, kappa_tol=1e-10, eps_div_zero=None, eps_active=1e-8, mu0=1e-5,
                 lbfgs_mem=3, inexact=True, init="random", random_state=None, n_init=1,
                 device="cpu", format="auto", verbose=0, max_time=None, device_options=None,
                 window=10, window_method="last"):
        self.rank = rank
        self.solver = solver
        self.max_iter = max_iter
        self.max_inner_iter = max_inner_iter
        self.tol = tol
        self.kappa = kappa
        self.kappa_tol = kappa_tol
        self.eps_div_zero = eps_div_zero
        self.eps_active = eps_active
        self.mu0 = mu0
        self.lbfgs_mem = lbfgs_mem
        self.inexact = inexact
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

    # ------------------------------------------------------------------ data checks
    def _kernel_needs(self):
        # the row solvers of pdnr/pqnr; MU needs only Φ
        return ("apr_rows",) if self.solver in ("pdnr", "pqnr") else ()

    def _check_data(self, X):
        if X.nnz:
            # one compiled pass over the values, kept with the tensor
            st = value_stats(X)
            if st["negative"]:
                raise ValueError(
                    f"Negative values in data passed to {type(self).__name__}: it fits a "
                    f"Poisson model and needs nonnegative counts, but X holds "
                    f"{st['negative']} negative value(s), the smallest being "
                    f"{float(X.vals.min()):g}")
            if st["nonint"]:
                _warn(f"{type(self).__name__}: the data hold non-integer values; the "
                      f"model assumes counts", UserWarning)
        return X

    def _result_key(self, result):
        return result["log_likelihood"]

    # ------------------------------------------------------------------ helpers
    def _log_likelihood(self, backend, T, weights, factors, eps=0.0):
        """Σ_nz x log m − Σ m for the model (weights, factors) (host floats only)."""
        data = backend.poisson_data_term(T, weights, factors, eps)
        total = np.asarray(weights, dtype=np.float64).copy()
        for f in factors:
            total *= backend.column_norms(f, 1)
        return data - float(total.sum())

    def _eps(self, dtype):
        """The guard of x / m used for data of ``dtype`` (see ``eps_div_zero``)."""
        eps = 0.0 if self.eps_div_zero is None else float(self.eps_div_zero)
        return max(eps, _guard(dtype))

    def _row_params(self, tol, max_inner, eps):
        return {"tol": tol, "max_inner": max_inner, "eps_div_zero": eps,
                "eps_active": self.eps_active, "mu0": self.mu0, "lbfgs_mem": self.lbfgs_mem}

    def _report(self, it, loglik, kkt, n_inner, t0):
        self._report_iteration(it + 1, loglik, t0)
        if self.verbose and (self.verbose > 1 or it % 10 == 0):
            self._log(f"iter {it + 1:4d}  log-likelihood {loglik:.10g}  kkt {kkt:.3e}  "
                      f"inner {n_inner:6d}  {time.perf_counter() - t0:.2f}s")

    # ------------------------------------------------------------------ fit
    def _fit_model(self, backend, T, X, init, rng, warm=False):
        for n, f in enumerate(init):
            if np.any(f < 0):
                raise ValueError(f"init factor {n} holds negative values; CPAPR needs a "
                                 f"nonnegative initial model")
        if self.solver != "mu":
            # a zero row would make the row objective log(0): start it slightly off zero
            init = [f.copy() for f in init]
            for f in init:
                f[f.sum(axis=1) == 0, 0] = 1e-8
        A = [backend.asarray(f) for f in init]
        R = A[0].shape[1]
        # start from the initial guess with unit 1-norm columns, weights holding the norms
        weights = np.ones(R)
        for f in A:
            weights = weights * _normalize_columns(backend, f)
        eps = self._eps(X.dtype)
        if (warm or not isinstance(self.init, str)) and \
                self._log_likelihood(backend, T, weights, A) == -np.inf:
            # a given start that is zero at some nonzero: revive it before the first update
            weights, _ = self._revive(backend, X, A, weights)
        t0 = time.perf_counter()
        if self.solver == "mu":
            state = self._iterate_mu(backend, T, X, A, weights, t0, eps)
        else:
            state = self._iterate_rows(backend, T, X, A, weights, t0, eps)
        weights, n_iter, n_inner, kkt, history, stop = state
        # final model: every mode normalised again, components by decreasing weight
        for f in A:
            weights = weights * _normalize_columns(backend, f)
        order = np.argsort(-weights, kind="stable")
        weights = weights[order]
        # [:, order] makes new matrices: the downloads may sit in the backend's kept buffer
        host = [np.ascontiguousarray(np.asarray(f)[:, order])
                for f in backend.to_numpy_transient(A)]
        final = [backend.asarray(h) for h in host]
        loglik = self._log_likelihood(backend, T, weights, final)
        if np.isnan(loglik):
            raise FloatingPointError("CPAPR produced a NaN log-likelihood; the iteration "
                                     "diverged")
        n_zero = 0
        if loglik == -np.inf:
            n_zero = backend.model_zero_count(T, weights, final)
        self._log(f"done: {n_iter} outer / {n_inner} inner iterations, log-likelihood "
                  f"{loglik:.10g}, kkt {kkt:.3e}, {time.perf_counter() - t0:.2f}s")
        return {"weights": weights, "factors": [h.astype(np.float64, copy=False) for h in host],
                "n_iter": n_iter, "loss_history": history, "score": loglik,
                "converged": stop == "tol", "stop": stop,
                "log_likelihood": loglik, "n_model_zero": n_zero,
                "attributes": {"log_likelihood_": float(loglik), "kkt_violation_": float(kkt),
                               "n_inner_iter_": int(n_inner)}}

    def _fit_impl(self, X, **fit_args):
        best = super()._fit_impl(X, **fit_args)
        if best["n_model_zero"]:
            _warn(
                f"{type(self).__name__}: the fitted model is zero at {best['n_model_zero']} "
                f"nonzero(s) of X, so its log-likelihood is -inf: every component vanished "
                f"there. The shift that revives such entries is off when kappa_tol=0 "
                f"(kappa_tol={self.kappa_tol:g}), and a guard eps_div_zero above the model "
                f"values drives them to zero (eps_div_zero={self.eps_div_zero!r}; None is the "
                f"safe default).",
                UserWarning)
        return best

    def _finish_outer(self, backend, T, A, weights, it, kkt, n_inner, t0, history):
        """Record the log-likelihood of outer iteration ``it``; True when out of time."""
        loglik = self._log_likelihood(backend, T, weights, A)
        if np.isnan(loglik):
            raise FloatingPointError(f"CPAPR diverged at outer iteration {it + 1} (NaN "
                                     f"log-likelihood)")
        history.append(loglik)
        self._report(it, loglik, kkt, n_inner, t0)
        return backend.decide(self.max_time is not None
                              and time.perf_counter() - t0 > self.max_time)

    def _revive(self, backend, X, A, weights):
        """Shift the inadmissible zeros of the nonzeros where the model vanished.

        Where the model is exactly zero at a nonzero of X, the log-likelihood is -inf and
        raising the entries of that nonzero's factor rows raises it, so every entry below
        ``kappa_tol`` of those rows, in every mode at once, is an inadmissible zero in the sense
        of Chi & Kolda; Φ, 0 / 0 there, cannot show it, so they are found from the model
        values.  The entries get ``kappa`` added (in every mode before the next update, so that
        two rows which vanished together, such as the rows of two coordinates that share their
        only nonzero, both come back) and the modes are normalised again.  Returns the new
        weights and the number of such nonzeros (rare: the model values are computed on the
        host, only when the log-likelihood is -inf).
        """
        host = [np.asarray(backend.to_numpy(a), dtype=np.float64) for a in A]
        m = _model_at_nonzeros(X.subs, weights, host)
        dead = np.flatnonzero(~(m > 0) & (X.vals > 0))
        if dead.size == 0 or self.kappa_tol <= 0:
            return weights, 0
        for n, a in enumerate(A):
            mark = np.zeros(host[n].shape, dtype=np.dtype(a.dtype))
            mark[np.unique(X.subs[dead, n])] = 2.0
            backend.apr.shift_inadmissible(a, backend.asarray(mark, dtype=a.dtype),
                                           self.kappa_tol, self.kappa)
            weights = weights * _normalize_columns(backend, a)
        self._log(f"the model was zero at {dead.size} nonzero(s); their factor entries below "
                  f"kappa_tol={self.kappa_tol:g} were shifted by kappa={self.kappa:g}")
        return weights, int(dead.size)

    def _iterate_mu(self, backend, T, X, A, weights, t0, eps):
        N = len(A)
        Phi = [None] * N
        kkt_mode = np.zeros(N)
        history = []
        n_inner = 0
        kkt = 0.0
        it = -1
        converged = out_of_time = False
        for it in range(self.max_iter):
            converged = True
            for n in range(N):
                if it > 0:
                    backend.apr.shift_inadmissible(A[n], Phi[n], self.kappa_tol, self.kappa)
                # B = (A + S) Λ: fold the weights into mode n
                backend.scale_columns(A[n], weights)
                B = A[n]
                plan = None
                for _ in range(self.max_inner_iter):
                    n_inner += 1
                    if plan is None:
                        Phi[n] = backend.phi(T, A, n, B, eps, out=Phi[n])
                        # the next inner iterations: the same arrays, updated in place
                        plan = backend.phi_plan(T, A, n, B, eps, Phi[n])
                    else:
                        Phi[n] = plan()
                    # the KKT violation, and B *= Φ unless it is below tol
                    kkt_mode[n] = backend.apr.mu_step_(B, Phi[n], self.tol)
                    if kkt_mode[n] < self.tol:
                        break
                    converged = False
                weights = _normalize_columns(backend, B)
            kkt = float(kkt_mode.max())
            out_of_time = self._finish_outer(backend, T, A, weights, it, kkt, n_inner, t0,
                                             history)
            if history[-1] == -np.inf:
                weights, n_dead = self._revive(backend, X, A, weights)
                converged = converged and not n_dead
            if converged:
                self._log(f"converged: every mode reached KKT violation < {self.tol:g}")
                break
            if out_of_time:
                self._log(f"stopping: max_time={self.max_time:g}s reached")
                break
        stop = "tol" if converged else ("max_time" if out_of_time else "max_iter")
        return weights, it + 1, n_inner, kkt, history, stop

    def _iterate_rows(self, backend, T, X, A, weights, t0, eps):
        N = len(A)
        pdnr = self.solver == "pdnr"
        row_tol = self.tol
        history = []
        n_inner = 0
        kkt = 0.0
        it = -1
        converged = out_of_time = False
        for it in range(self.max_iter):
            converged = True
            kkt_mode = np.zeros(N)
            for n in range(N):
                backend.scale_columns(A[n], weights)
                max_inner = 2 if (pdnr and self.inexact and it == 0) else self.max_inner_iter
                res = backend.apr.row_solve(T, A, n, A[n], self.solver,
                                            self._row_params(row_tol, max_inner, eps))
                kkt_mode[n] = res["kkt"]
                n_inner += res["n_inner"]
                if res["n_changed"]:
                    converged = False
                weights = _normalize_columns(backend, A[n])
            kkt = float(kkt_mode.max())
            if pdnr and self.inexact:
                row_tol = max(self.tol, kkt / 100.0)
            out_of_time = self._finish_outer(backend, T, A, weights, it, kkt, n_inner, t0,
                                             history)
            if history[-1] == -np.inf:
                weights, n_dead = self._revive(backend, X, A, weights)
                converged = converged and not n_dead
            converged = converged and (not (pdnr and self.inexact) or row_tol <= self.tol)
            if converged:
                self._log(f"converged: every row subproblem reached KKT violation < "
                          f"{self.tol:g}")
                break
            if out_of_time:
                self._log(f"stopping: max_time={self.max_time:g}s reached")
                break
        stop = "tol" if converged else ("max_time" if out_of_time else "max_iter")
        return weights, it + 1, n_inner, kkt, history, stop

    # ------------------------------------------------------------------ sklearn hooks
    def _solve_mode0(self, backend, T, X, factors):
        R = self.rank_
        dtype = X.dtype
        others = [backend.asarray(f, dtype=dtype) for f in factors[1:]]
        # each slice's total count, spread over the components in proportion to the weights
        ones = [backend.asarray(np.ones((s, 1)), dtype=dtype) for s in X.shape[1:]]
        totals = backend.mttkrp(T, [backend.zeros((X.shape[0], 1), dtype)] + ones, 0)
        totals = np.asarray(backend.to_numpy(totals), dtype=np.float64).reshape(-1)
        w = np.asarray(self.weights_, dtype=np.float64)
        share = w / w.sum() if w.sum() > 0 else np.full(R, 1.0 / R)
        W = backend.asarray(np.outer(totals, share), dtype=dtype)
        U = [W] + others
        cap = _TRANSFORM_ITER_FACTOR * self.max_inner_iter
        if self.solver == "mu":
            Phi = None
            for _ in range(cap):
                Phi = backend.phi(T, U, 0, W, self._eps(dtype), out=Phi)
                if backend.apr.mu_rows_(W, Phi, self.tol) == 0:
                    break
        else:
            backend.apr.row_solve(T, U, 0, W, self.solver,
                                  self._row_params(self.tol, cap, self._eps(dtype)))
        return np.asarray(backend.to_numpy(W), dtype=np.float64)

    def _score_loadings(self, backend, T, X, W, factors):
        R = W.shape[1]
        U = [backend.asarray(W, dtype=X.dtype)]
        U += [backend.asarray(f, dtype=X.dtype) for f in factors[1:]]
        loglik = self._log_likelihood(backend, T, np.ones(R), U, eps=self._eps(X.dtype))
        return loglik / max(1, X.shape[0])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        return tags
