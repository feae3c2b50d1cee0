"""The solvers of :class:`~sktensor_fast.GCP` as objects: one class per solver, holding its
hyperparameters and its state.

A stochastic optimiser (:class:`SGD`, :class:`Adagrad`, :class:`Adam`) keeps its moments as
backend arrays shaped like the factors, its step counter (Adam's bias correction) and its
count of failed epochs (the learning rate decays with it).  It is written once against the
kernel interface: a step is one call of the backend's element-wise primitive
``backend.gcp.optimizer_update`` with the coefficients of that step (its update rule is a key
of :data:`~sktensor_fast.backends.gcp_plan.UPDATE_RULES`), and ``backend.gcp.steps`` runs an
epoch of steps from the object (the CPU backend in one compiled loop, from the object's
:meth:`~StochasticOptimizer.parameters`).  :class:`LBFGSB` holds the settings of the
quasi-Newton solver on the exact loss (``scipy.optimize.minimize``).

The estimator's fit loop uses an optimiser like this::

    opt = make_optimizer("adam", learning_rate=1e-3).start(backend, factors)
    for epoch in range(max_iter):
        saved = [backend.copy(u) for u in factors]
        opt.checkpoint(backend)
        backend.gcp.steps(T, state, weights, factors, loss, seed, draws, epoch_iters, opt,
                          loss.lower)
        if the estimated loss went up:
            factors = saved
            opt.failed_epoch()          # moments and step counter back, learning rate decayed

Examples
--------
>>> import numpy as np
>>> from sktensor_fast.backends import get_backend
>>> from sktensor_fast.decomposition.optimizers import make_optimizer
>>> be = get_backend("cpu")
>>> U = [np.ones((3, 2)), np.ones((4, 2))]
>>> opt = make_optimizer("sgd", learning_rate=0.5).start(be, U)
>>> _ = opt.step(be, U, [np.ones((3, 2)), np.zeros((4, 2))], lower=0.0)
>>> U[0][0], opt.t
(array([0.5, 0.5]), 1)
>>> make_optimizer("newton")
Traceback (most recent call last):
...
ValueError: unknown GCP solver 'newton'; use adam, sgd, adagrad (stochastic) or lbfgsb
"""
import inspect
import math

from scipy.optimize import minimize

from ..backends.checks import check_real
from ..backends.gcp_plan import UPDATE_RULES

__all__ = ["StochasticOptimizer", "SGD", "Adagrad", "Adam", "LBFGSB", "OPTIMIZERS",
           "make_optimizer"]


class StochasticOptimizer:
    """Base class of the stochastic optimisers: the learning rate, its decay after failed
    epochs, the moments and the step counter.

    Parameters
    ----------
    learning_rate : float, default=2e-3
        Step size (> 0) before any failed epoch.
    decay : float, default=0.1
        Factor (in (0, 1]) applied to the learning rate after each failed epoch.

    Attributes
    ----------
    moments : tuple of lists of backend arrays, or None
        ``moments[j][k]``: moment ``moment_names[j]`` of factor ``k`` (None before
        :meth:`start`).
    t : int
        Steps taken (the next step is step ``t + 1``).
    n_fails : int
        Failed epochs so far.

    Notes
    -----
    A subclass defines its update ``rule`` and the ``coefficients`` of each step.  The CPU
    backend's compiled epoch loop computes the coefficients of the built-in rules itself, from
    :meth:`parameters` (the same numbers as :meth:`coefficients`); a subclass with another
    schedule for a built-in rule must be run step by step (:meth:`step`).
    """

    #: the key of UPDATE_RULES: the element-wise update the kernels apply
    rule = None
    stochastic = True
    #: what the fit loop counts in ``n_iter_``
    iteration_name = "epochs"

    def __init__(self, learning_rate=2e-3, decay=0.1):
        # kept as given (checked), so that the rate is computed from the user's numbers
        check_real(learning_rate, "learning_rate", 0.0, strict=True)
        if not 0 < check_real(decay, "decay") <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay!r}")
        self.learning_rate = learning_rate
        self.decay = decay
        self.moments = None
        self.t = 0
        self.n_fails = 0
        self._saved = None

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in self._hyperparameters().items())
        return f"{type(self).__name__}({params})"

    def _hyperparameters(self):
        return {"learning_rate": self.learning_rate, "decay": self.decay}

    @property
    def moment_names(self):
        """The names of the moments this optimiser keeps per factor."""
        return UPDATE_RULES[self.rule][0]

    @property
    def rate(self):
        """The learning rate now: ``learning_rate * decay ** n_fails`` (a float)."""
        return float(self.learning_rate * self.decay ** self.n_fails)

    def parameters(self):
        """The scalars of the update rule before the per-step correction, by the names the
        compiled epoch loop takes (``lr`` and, as the rule needs them, ``beta1``, ``beta2``,
        ``epsilon``)."""
        return {"lr": self.rate}

    def coefficients(self, t):
        """The coefficients of step ``t`` (from 1) for ``backend.gcp.optimizer_update``, in
        the order of ``UPDATE_RULES[rule][1]``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the fit loop
    def start(self, backend, factors):
        """Zero moments shaped like ``factors`` (backend arrays), no step taken, no failed
        epoch; returns self."""
        self.moments = tuple([backend.zeros(tuple(f.shape), f.dtype) for f in factors]
                             for _ in self.moment_names)
        self.t = 0
        self.n_fails = 0
        self._saved = None
        return self

    def step(self, backend, factors, grads, lower, active=None):
        """Step ``t + 1`` in place on ``factors`` (those with ``active[k]``) from ``grads``,
        every entry clipped to ``lower``; returns ``factors``."""
        self.t += 1
        backend.gcp.optimizer_update(self.rule, factors, grads, self.moments,
                                     self.coefficients(self.t), lower, active)
        return factors

    def advance(self, n_steps):
        """Count ``n_steps`` steps that a backend took on the moments in one call (the CPU's
        compiled epoch loop)."""
        self.t += int(n_steps)

    def checkpoint(self, backend):
        """Keep a copy of the moments and the step counter (the start of an epoch)."""
        self._saved = (tuple([backend.copy(a) for a in arrs] for arrs in self.moments),
                       self.t)

    def failed_epoch(self):
        """Back to the last :meth:`checkpoint` and one more failed epoch (the learning rate
        is multiplied by ``decay``)."""
        if self._saved is None:
            raise RuntimeError("failed_epoch() without a checkpoint() before it")
        self.moments, self.t = self._saved
        self._saved = None
        self.n_fails += 1


class SGD(StochasticOptimizer):
    """Stochastic gradient descent: ``U ← max(U − rate · G, lower)``.

    Parameters
    ----------
    learning_rate, decay : float
        See :class:`StochasticOptimizer`.
    """

    rule = "sgd"

    def coefficients(self, t):
        return (self.rate,)


class Adagrad(StochasticOptimizer):
    """AdaGrad: ``S ← S + G²``, ``U ← max(U − rate · G / (√S + epsilon), lower)``.

    Parameters
    ----------
    learning_rate, decay : float
        See :class:`StochasticOptimizer`.
    epsilon : float, default=1e-8
        Guard of the denominator (> 0).
    """

    rule = "adagrad"

    def __init__(self, learning_rate=2e-3, decay=0.1, epsilon=1e-8):
        super().__init__(learning_rate, decay)
        self.epsilon = check_real(epsilon, "epsilon", 0.0, strict=True)

    def _hyperparameters(self):
        return dict(super()._hyperparameters(), epsilon=self.epsilon)

    def parameters(self):
        return {"lr": self.rate, "epsilon": self.epsilon}

    def coefficients(self, t):
        return (self.rate, self.epsilon)


class Adam(StochasticOptimizer):
    """Adam: ``M ← β₁M + (1 − β₁)G``, ``V ← β₂V + (1 − β₂)G²``,
    ``U ← max(U − a M / (√V + e), lower)`` with the bias corrections folded into the step
    ``a = rate √(1 − β₂ᵗ) / (1 − β₁ᵗ)`` and the guard ``e = epsilon √(1 − β₂ᵗ)`` (the same
    quantity as ``rate M̂ / (√V̂ + epsilon)``, with one division and one square root per entry).

    Parameters
    ----------
    learning_rate, decay : float
        See :class:`StochasticOptimizer`.
    beta1, beta2 : float, default=0.9, 0.999
        Decay rates (in [0, 1)) of the first and second moments.
    epsilon : float, default=1e-8
        Guard of the denominator (> 0).
    """

    rule = "adam"

    def __init__(self, learning_rate=2e-3, decay=0.1, beta1=0.9, beta2=0.999, epsilon=1e-8):
        super().__init__(learning_rate, decay)
        self.beta1 = check_real(beta1, "beta1", 0.0)
        self.beta2 = check_real(beta2, "beta2", 0.0)
        for name, b in (("beta1", self.beta1), ("beta2", self.beta2)):
            if b >= 1:
                raise ValueError(f"{name} must be < 1, got {b!r}")
        self.epsilon = check_real(epsilon, "epsilon", 0.0, strict=True)

    def _hyperparameters(self):
        return dict(super()._hyperparameters(), beta1=self.beta1, beta2=self.beta2,
                    epsilon=self.epsilon)

    def parameters(self):
        return {"lr": self.rate, "beta1": self.beta1, "beta2": self.beta2,
                "epsilon": self.epsilon}

    def coefficients(self, t):
        bc1 = 1.0 - self.beta1 ** t
        bc2 = 1.0 - self.beta2 ** t
        return (self.beta1, self.beta2, self.rate * math.sqrt(bc2) / bc1,
                self.epsilon * math.sqrt(bc2))


class LBFGSB:
    """L-BFGS-B (``scipy.optimize.minimize``) on the exact loss and gradient.

    Parameters
    ----------
    max_iter : int, default=1000
        Most iterations of a fit (``maxiter``; ``maxfun`` is ``20 max_iter + 20``).
    tol : float, default=1e-4
        scipy's ``ftol`` is ``tol * 1e-4``: stop when the relative decrease of the loss over
        an iteration is below it.
    """

    stochastic = False
    iteration_name = "iterations"

    def __init__(self, max_iter=1000, tol=1e-4):
        self.max_iter = int(max_iter)
        self.tol = check_real(tol, "tol", 0.0)

    def __repr__(self):
        return f"LBFGSB(max_iter={self.max_iter!r}, tol={self.tol!r})"

    def options(self, tight=False, maxiter=None):
        """scipy's options: the fit's tolerance and at most ``maxiter`` iterations (default
        ``max_iter``), or, with ``tight``, until the loss stops decreasing in floating point
        (the convex problems of ``transform``, whose answer then depends on which slices are
        solved together only in its last digits)."""
        if tight:
            n = max(self.max_iter, 1000)
            return {"maxiter": n, "ftol": 1e-15, "gtol": 1e-12, "maxfun": 20 * n}
        maxiter = self.max_iter if maxiter is None else maxiter
        return {"maxiter": maxiter, "ftol": self.tol * 1e-4, "maxfun": 20 * maxiter + 20}

    def minimize(self, fg, x0, bounds=None, callback=None, tight=False, maxiter=None):
        """Minimise ``fg`` (returning the loss and its gradient) from ``x0``; scipy's
        result."""
        return minimize(fg, x0, jac=True, method="L-BFGS-B", bounds=bounds, callback=callback,
                        options=self.options(tight, maxiter))

    @staticmethod
    def stop_reason(result, timed_out=False):
        """Why scipy stopped: ``"max_time"`` (the callback's time limit), ``"max_iter"``
        (``maxiter`` or ``maxfun``), ``"tol"`` or ``"linesearch"`` (no further decrease)."""
        if timed_out:
            return "max_time"
        if result.status == 1:
            return "max_iter"
        if result.status == 0:
            return "tol"
        return "linesearch"


#: the solvers by the names of GCP's ``solver`` parameter
OPTIMIZERS = {"adam": Adam, "sgd": SGD, "adagrad": Adagrad, "lbfgsb": LBFGSB}


def make_optimizer(name, **params):
    """The optimiser called ``name`` (a key of :data:`OPTIMIZERS`), given the keywords of
    ``params`` that its class takes (the others are left out, so that an estimator may pass
    all of its settings).

    Raises
    ------
    ValueError
        For an unknown name (naming the known ones).
    """
    cls = OPTIMIZERS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown GCP solver {name!r}; use adam, sgd, adagrad (stochastic) or "
                         f"lbfgsb")
    accepted = inspect.signature(cls).parameters
    return cls(**{k: v for k, v in params.items() if k in accepted})
