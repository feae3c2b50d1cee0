"""Element-wise losses for Generalized CP (GCP).

GCP fits a Kruskal model ``M`` to a tensor ``X`` by minimising ``Σ_i f(x_i, m_i)`` over the
entries ``i`` of the tensor, where the loss ``f`` is the negative log-likelihood of a
distribution of ``x`` given its parameter ``m`` (Hong, Kolda & Duersch, *Generalized canonical
polyadic tensor decomposition*, SIAM Review 62(1), 2020).  This module holds the losses of that
paper and of the Tensor Toolbox / pyttb, with the same formulas and the same ``eps = 1e-10``
guard inside logarithms and denominators.

============================  =========================================  ===========  =========
name                          f(x, m)                                    data         lower
============================  =========================================  ===========  =========
``gaussian``                  (x − m)²                                   real         −inf
``poisson``                   m − x log(m + ε)                           counts ≥ 0   0
``poisson_log``               eᵐ − x m                                   counts ≥ 0   −inf
``bernoulli_odds``            log(m + 1) − x log(m + ε)                  {0, 1}       0
``bernoulli_logit``           log(1 + eᵐ) − x m                          {0, 1}       −inf
``gamma``                     x / (m + ε) + log(m + ε)                   ≥ 0          0
``rayleigh``                  2 log(m + ε) + (π/4) (x / (m + ε))²        ≥ 0          0
``negative_binomial`` (r)     (r + x) log(1 + m) − x log(m + ε)          counts ≥ 0   0
``huber`` (δ)                 (x − m)² if abs(x − m) < δ,                real         −inf
                              else 2δ abs(x − m) − δ²
``beta`` (β)                  (m + ε)^β / β − x (m + ε)^(β−1) / (β − 1)  ≥ 0          0
``zt_poisson``                m − x log(m + ε) + log(1 − e⁻ᵐ + ε)        counts ≥ 0   0
============================  =========================================  ===========  =========

``lower`` is the lower bound of the model values the loss accepts; GCP keeps every factor
entry ≥ ``lower`` (clipping after each stochastic step, bounds for L-BFGS-B), which for a bound
of 0 keeps the model non-negative.

Zeros: GCP sums the loss over every entry, so the zeros of a sparse tensor are data.  For
``gamma``, ``rayleigh``, ``zt_poisson`` (distributions of data > 0) and ``beta`` with β < 0,
``f(0, m)`` decreases without bound as ``m → 0`` (it reaches ``log ε ≈ −23`` per zero, or
``ε^β / β``), so zeros would be fitted by a model that vanishes there instead of by the data's
distribution: these losses have :attr:`~Loss.zero_in_domain` False, and GCP refuses them on
data with (observed) zeros unless a ``mask`` leaves the zeros out.  Every other built-in loss
is bounded below at ``x = 0``.

Every built-in loss has an integer :attr:`~Loss.code` so that the compiled kernels evaluate it
without calling back into Python; the codes are those of ``pyttb.gcp.handles.Objectives``.

User-defined losses
-------------------
Any object with these members can be passed as ``loss`` to :class:`~sktensor_fast.GCP`:

- ``value(x, m)``: the loss for arrays of data ``x`` and model values ``m`` (element-wise,
  same shape as the inputs);
- ``deriv(x, m)``: its derivative ∂f/∂m, element-wise;
- ``lower``: the lower bound of the model values (a float, ``-numpy.inf`` if none);
- optionally ``zero_in_domain``: False when 0 is not a possible data value (GCP then refuses
  data with observed zeros);
- optionally ``check_data(vals)``: raise ``ValueError`` if the nonzero values ``vals`` of a
  tensor are not valid data for the loss.

Such a loss is evaluated in NumPy on the sampled entries (the kernels then compute the model
values and the fused MTTKRP); built-in losses run entirely inside the kernels.

Examples
--------
>>> import numpy as np
>>> from sktensor_fast.decomposition.losses import get_loss
>>> loss = get_loss("huber", 0.5)
>>> loss.value(np.array([0.0, 0.0]), np.array([0.25, 2.0]))
array([0.0625, 1.75  ])
>>> loss.deriv(np.array([0.0]), np.array([2.0]))
array([1.])
"""
import math
import numbers
import warnings

import numpy as np

__all__ = ["Loss", "CustomLoss", "LOSSES", "EPS", "get_loss", "is_loss_object"]

#: Guard inside logarithms and denominators (Tensor Toolbox and pyttb use the same value).
EPS = 1e-10

#: Code of a user-defined loss: the kernels return model values and NumPy does the rest.
CUSTOM_CODE = -1


def _f(a):
    return np.asarray(a, dtype=np.float64)


class Loss:
    """A built-in GCP loss (see the module docstring for the formulas).

    Attributes
    ----------
    name : str
    code : int
        Identifier of the loss inside the compiled kernels.
    param : float
        The loss parameter (r, δ or β) or ``nan`` when the loss takes none.
    lower : float
        Lower bound of the model values and of the factor entries.
    zero_in_domain : bool
        Whether 0 is a possible data value (``f(0, m)`` bounded below).
    """

    #: set by subclasses
    name = ""
    code = CUSTOM_CODE
    lower = -np.inf
    zero_in_domain = True
    #: (description of the parameter, validator) for losses that take one, else None
    param_spec = None

    def __init__(self, param=None):
        if self.param_spec is None:
            if param is not None:
                raise ValueError(f"loss {self.name!r} takes no loss_param, got {param!r}")
            self.param = float("nan")
        else:
            what, valid = self.param_spec
            if param is None:
                raise ValueError(f"loss {self.name!r} needs loss_param: {what}")
            if (isinstance(param, bool) or not isinstance(param, numbers.Real)
                    or not math.isfinite(float(param)) or not valid(float(param))):
                raise ValueError(f"invalid loss_param {param!r} for loss {self.name!r}: "
                                 f"expected {what}")
            self.param = float(param)

    def value(self, x, m):
        """f(x, m), element-wise."""
        raise NotImplementedError

    def deriv(self, x, m):
        """∂f/∂m (x, m), element-wise."""
        raise NotImplementedError

    def check_data(self, vals):
        """Raise ``ValueError`` when the nonzero values ``vals`` are not data for this loss."""
        return None

    def __repr__(self):
        if self.param_spec is None:
            return f"Loss({self.name!r})"
        return f"Loss({self.name!r}, {self.param:g})"

    # ------------------------------------------------------------------ shared checks
    def _require_nonneg(self, vals, what="non-negative data"):
        vals = np.asarray(vals)
        if vals.size and _stats(vals)["negative"]:
            raise ValueError(f"loss {self.name!r} needs {what}; the tensor holds negative "
                             f"values (minimum {vals.min():g})")

    def _require_counts(self, vals):
        self._require_nonneg(vals, "non-negative counts")
        vals = np.asarray(vals)
        if vals.size and _stats(vals)["nonint"]:
            warnings.warn(f"loss {self.name!r}: the data hold non-integer values; the model "
                          f"assumes counts", UserWarning, stacklevel=4)


class Gaussian(Loss):
    name, code = "gaussian", 0

    def value(self, x, m):
        return (_f(x) - _f(m)) ** 2

    def deriv(self, x, m):
        return 2.0 * (_f(m) - _f(x))


class BernoulliOdds(Loss):
    name, code, lower = "bernoulli_odds", 1, 0.0

    def value(self, x, m):
        m = _f(m)
        return np.log1p(m) - _f(x) * np.log(m + EPS)

    def deriv(self, x, m):
        m = _f(m)
        return 1.0 / (m + 1.0) - _f(x) / (m + EPS)

    def check_data(self, vals):
        _require_binary(self.name, vals)


class BernoulliLogit(Loss):
    name, code = "bernoulli_logit", 2

    def value(self, x, m):
        m = _f(m)
        # log(1 + e^m) without overflow
        return np.logaddexp(0.0, m) - _f(x) * m

    def deriv(self, x, m):
        m = _f(m)
        # the logistic function e^m / (1 + e^m), stable for large |m|
        e = np.exp(-np.abs(m))
        sig = np.where(m >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        return sig - _f(x)

    def check_data(self, vals):
        _require_binary(self.name, vals)


class Poisson(Loss):
    name, code, lower = "poisson", 3, 0.0

    def value(self, x, m):
        m = _f(m)
        return m - _f(x) * np.log(m + EPS)

    def deriv(self, x, m):
        return 1.0 - _f(x) / (_f(m) + EPS)

    def check_data(self, vals):
        self._require_counts(vals)


class PoissonLog(Loss):
    name, code = "poisson_log", 4

    def value(self, x, m):
        m = _f(m)
        return np.exp(m) - _f(x) * m

    def deriv(self, x, m):
        return np.exp(_f(m)) - _f(x)

    def check_data(self, vals):
        self._require_counts(vals)


class Rayleigh(Loss):
    name, code, lower = "rayleigh", 5, 0.0
    zero_in_domain = False

    def value(self, x, m):
        me = _f(m) + EPS
        return 2.0 * np.log(me) + (np.pi / 4.0) * (_f(x) / me) ** 2

    def deriv(self, x, m):
        me = _f(m) + EPS
        return 2.0 / me - (np.pi / 2.0) * _f(x) ** 2 / me ** 3

    def check_data(self, vals):
        self._require_nonneg(vals)


class Gamma(Loss):
    name, code, lower = "gamma", 6, 0.0
    zero_in_domain = False

    def value(self, x, m):
        me = _f(m) + EPS
        return _f(x) / me + np.log(me)

    def deriv(self, x, m):
        me = _f(m) + EPS
        return 1.0 / me - _f(x) / me ** 2

    def check_data(self, vals):
        self._require_nonneg(vals)


class Huber(Loss):
    name, code = "huber", 7
    param_spec = ("the threshold δ, a real number > 0", lambda p: p > 0)

    def value(self, x, m):
        d = np.abs(_f(x) - _f(m))
        t = self.param
        return np.where(d < t, d ** 2, 2.0 * t * d - t ** 2)

    def deriv(self, x, m):
        r = _f(x) - _f(m)
        t = self.param
        return np.where(np.abs(r) < t, -2.0 * r, -2.0 * t * np.sign(r))


class NegativeBinomial(Loss):
    """Negative binomial with ``r`` failures (odds link).

    The derivative is ``(r + x)/(1 + m) − x/(m + ε)``, the exact derivative of the loss (as in the
    Tensor Toolbox); pyttb 1.8 writes ``(r + 1)`` for ``(r + x)`` in its gradient handle.
    """

    name, code, lower = "negative_binomial", 8, 0.0
    param_spec = ("the number of trials r, a real number > 0", lambda p: p > 0)

    def value(self, x, m):
        x, m = _f(x), _f(m)
        return (self.param + x) * np.log1p(m) - x * np.log(m + EPS)

    def deriv(self, x, m):
        x, m = _f(x), _f(m)
        return (self.param + x) / (1.0 + m) - x / (m + EPS)

    def check_data(self, vals):
        self._require_counts(vals)


class Beta(Loss):
    name, code, lower = "beta", 9, 0.0
    param_spec = ("the exponent β of the β-divergence, a real number other than 0 and 1",
                  lambda p: p != 0 and p != 1)

    @property
    def zero_in_domain(self):
        # f(0, m) = (m + ε)^β / β: bounded below for β > 0, down to ε^β / β for β < 0
        return self.param > 0

    def value(self, x, m):
        b = self.param
        me = _f(m) + EPS
        return me ** b / b - _f(x) * me ** (b - 1.0) / (b - 1.0)

    def deriv(self, x, m):
        b = self.param
        me = _f(m) + EPS
        return me ** (b - 1.0) - _f(x) * me ** (b - 2.0)

    def check_data(self, vals):
        self._require_nonneg(vals)


class ZTPoisson(Loss):
    name, code, lower = "zt_poisson", 10, 0.0
    zero_in_domain = False

    def value(self, x, m):
        m = _f(m)
        return m - _f(x) * np.log(m + EPS) + np.log(-np.expm1(-m) + EPS)

    def deriv(self, x, m):
        m = _f(m)
        return 1.0 - _f(x) / (m + EPS) + 1.0 / (np.expm1(m) + EPS)

    def check_data(self, vals):
        self._require_counts(vals)


def _stats(vals):
    """One compiled pass over finite values: negatives, non-integers, entries not 0 or 1."""
    from .._native import _construct
    from .._threads import get_num_threads
    if vals.dtype not in (np.float32, np.float64):
        vals = vals.astype(np.float64)
    return _construct.value_stats(np.ascontiguousarray(vals).reshape(-1), get_num_threads())


def _require_binary(name, vals):
    vals = np.asarray(vals)
    if not vals.size:
        return
    st = _stats(vals)
    if st["nonbinary"]:
        raise ValueError(f"loss {name!r} needs binary data (every entry 0 or 1); the tensor "
                         f"holds {float(vals.reshape(-1)[st['first_nonbinary']]):g}")


#: Built-in losses by name.
LOSSES = {cls.name: cls for cls in (Gaussian, Poisson, PoissonLog, BernoulliOdds,
                                    BernoulliLogit, Gamma, Rayleigh, NegativeBinomial, Huber,
                                    Beta, ZTPoisson)}


def is_loss_object(obj):
    """Whether ``obj`` follows the loss protocol (``value``, ``deriv``, ``lower``)."""
    return (callable(getattr(obj, "value", None)) and callable(getattr(obj, "deriv", None))
            and hasattr(obj, "lower"))


class CustomLoss:
    """Adapter giving a user-defined loss object the interface of :class:`Loss`."""

    code = CUSTOM_CODE
    param = float("nan")

    def __init__(self, obj):
        missing = [a for a in ("value", "deriv") if not callable(getattr(obj, a, None))]
        if not hasattr(obj, "lower"):
            missing.append("lower")
        if missing:
            raise ValueError(f"a loss object needs callable value(x, m), deriv(x, m) and a "
                             f"lower bound attribute `lower`; {type(obj).__name__} lacks "
                             f"{', '.join(missing)}")
        try:
            lower = float(obj.lower)
        except (TypeError, ValueError):
            raise ValueError(f"the loss object's `lower` must be a float (-inf for none), got "
                             f"{obj.lower!r}") from None
        if math.isnan(lower) or lower == math.inf:
            raise ValueError(f"the loss object's `lower` must be a float < inf, got {lower}")
        self.obj = obj
        self.lower = lower
        self.name = getattr(obj, "name", type(obj).__name__)
        self.zero_in_domain = bool(getattr(obj, "zero_in_domain", True))

    def value(self, x, m):
        return self._call("value", x, m)

    def deriv(self, x, m):
        return self._call("deriv", x, m)

    def _call(self, what, x, m):
        x, m = _f(x), _f(m)
        out = np.asarray(getattr(self.obj, what)(x, m), dtype=np.float64)
        if out.shape != m.shape:
            try:
                out = np.broadcast_to(out, m.shape)
            except ValueError:
                raise ValueError(f"the loss object's {what}(x, m) returned shape {out.shape} "
                                 f"for inputs of shape {m.shape}") from None
        return out

    def check_data(self, vals):
        check = getattr(self.obj, "check_data", None)
        if callable(check):
            check(vals)

    def __repr__(self):
        return f"CustomLoss({self.obj!r})"


def get_loss(loss, param=None):
    """The loss object for a name (with its parameter), a :class:`Loss`, or a user object.

    This is what :class:`~sktensor_fast.GCP` does with its ``loss`` and ``loss_param``.

    Parameters
    ----------
    loss : str or object
        A name of the table above (case and ``-``/``_`` do not matter), a loss object of this
        module, or an object with ``value(x, m)``, ``deriv(x, m)`` and ``lower``.
    param : float, optional
        The loss's parameter (``negative_binomial``, ``huber``, ``beta``); None for the others.

    Returns
    -------
    loss
        An object with ``value``, ``deriv``, ``lower`` and ``check_data``.

    Raises
    ------
    ValueError
        For an unknown name, a missing or invalid parameter, or a parameter given with a loss
        object.

    Examples
    --------
    >>> import numpy as np
    >>> from sktensor_fast.decomposition.losses import get_loss
    >>> poisson = get_loss("poisson")
    >>> poisson.lower
    0.0
    >>> poisson.deriv(np.array([2.0]), np.array([1.0]))      # 1 - x / (m + eps)
    array([-1.])
    >>> get_loss("negative_binomial", 3.0).name
    'negative_binomial'
    """
    if isinstance(loss, (Loss, CustomLoss)):
        if param is not None:
            raise ValueError("loss_param must be None when loss is a loss object")
        return loss
    if isinstance(loss, str):
        key = loss.strip().lower().replace("-", "_")
        if key not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)} or pass "
                             f"an object with value(x, m), deriv(x, m) and lower")
        return LOSSES[key](param)
    if param is not None:
        raise ValueError("loss_param must be None when loss is a loss object")
    return CustomLoss(loss)
