"""A hook called once per outer iteration of every fit: :func:`fit_callback`.

The estimators call :meth:`BaseCP._report_iteration` after each outer iteration (CPALS: an
ALS sweep; CPAPR: an outer iteration; GCP: an epoch of the stochastic solvers or an L-BFGS-B
iteration); it passes a :class:`FitProgress` to the callable installed with
:func:`fit_callback` in the current context, if any.  Nothing is stored on the estimators, so
their parameters, pickles and saved models do not change.
"""
import contextlib
import contextvars

__all__ = ["FitProgress", "fit_callback"]

_CALLBACK = contextvars.ContextVar("sktensor_fast_fit_callback", default=None)
# (start, n_init) of the random start running in this context, set by BaseCP's fit loop
_START = contextvars.ContextVar("sktensor_fast_fit_start", default=(1, 1))


class FitProgress:
    """Where a fit stands after one outer iteration (passed to a :func:`fit_callback`).

    Attributes
    ----------
    estimator : str
        The estimator's class name (``"CPALS"``, ``"CPAPR"``, ``"GCP"``).
    iteration : int
        Outer iterations (GCP's stochastic solvers: epochs) done in this random start, from 1.
    objective : float
        The estimator's objective after that iteration: CPALS's fit (1 - relative error,
        greater is better), CPAPR's log-likelihood (greater is better), GCP's loss (exact for
        L-BFGS-B, estimated on the fixed loss sample for the stochastic solvers; smaller is
        better).
    objective_name : str
        ``"fit"``, ``"log-likelihood"``, ``"loss"`` or ``"estimated loss"``.
    elapsed : float
        Seconds since the iterations of this random start began.
    start : int
        The random start running, from 1.
    n_init : int
        Random starts of the fit.

    Examples
    --------
    >>> from sktensor_fast.decomposition import FitProgress
    >>> p = FitProgress("CPALS", 3, 0.5172, "fit", 0.04)
    >>> f"{p.estimator} iteration {p.iteration}: {p.objective_name} {p.objective:.3f}"
    'CPALS iteration 3: fit 0.517'
    """

    __hash__ = None
    _FIELDS = ("estimator", "iteration", "objective", "objective_name", "elapsed", "start",
               "n_init")

    def __init__(self, estimator, iteration, objective, objective_name, elapsed, start=1,
                 n_init=1):
        self.estimator = str(estimator)
        self.iteration = int(iteration)
        self.objective = float(objective)
        self.objective_name = str(objective_name)
        self.elapsed = float(elapsed)
        self.start = int(start)
        self.n_init = int(n_init)

    def __repr__(self):
        return "FitProgress(" + ", ".join(f"{k}={getattr(self, k)!r}"
                                          for k in self._FIELDS) + ")"

    def __eq__(self, other):
        if not isinstance(other, FitProgress):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self._FIELDS)


@contextlib.contextmanager
def fit_callback(callback):
    """Call ``callback(progress)`` once per outer iteration of the fits run inside the block.

    Parameters
    ----------
    callback : callable or None
        Called with a :class:`FitProgress` after every outer iteration of every
        :class:`~sktensor_fast.CPALS`, :class:`~sktensor_fast.CPAPR` or
        :class:`~sktensor_fast.GCP` fit in this thread (or asyncio task) until the block ends;
        ``transform`` and ``score`` do not call it.  It runs inside the fit: keep it short, and
        an exception it raises stops the fit.  None: no callback inside the block.

    Examples
    --------
    >>> import warnings
    >>> from sktensor_fast import CPALS
    >>> from sktensor_fast.decomposition import fit_callback
    >>> from sktensor_fast.datasets import load_flights_routes
    >>> X = load_flights_routes().tensor
    >>> seen = []
    >>> with fit_callback(seen.append), warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")      # max_iter is reached
    ...     model = CPALS(2, max_iter=3, tol=0, random_state=0).fit(X)
    >>> [p.iteration for p in seen], seen[-1].objective_name
    ([1, 2, 3], 'fit')
    >>> bool(seen[-1].objective == model.fit_)
    True
    """
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable or None, got {type(callback).__name__}")
    token = _CALLBACK.set(callback)
    try:
        yield callback
    finally:
        _CALLBACK.reset(token)


def report(estimator, iteration, objective, objective_name, elapsed):
    """Pass one iteration to the callback of this context (if any)."""
    callback = _CALLBACK.get()
    if callback is None:
        return
    start, n_init = _START.get()
    callback(FitProgress(type(estimator).__name__, iteration, objective, objective_name,
                         elapsed, start, n_init))


@contextlib.contextmanager
def random_start(start, n_init):
    """The random start that the fits reported inside the block belong to."""
    token = _START.set((int(start), int(n_init)))
    try:
        yield
    finally:
        _START.reset(token)
