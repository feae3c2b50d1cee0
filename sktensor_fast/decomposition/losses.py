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
The names, codes, bounds and data domains come from one table, ``sktensor_fast._loss_table``;
the formulas are written once, in the C header ``sktensor_fast/include/sktf_losses.h``, which
the CPU and OpenCL kernels compile and which :meth:`Loss.value` and :meth:`Loss.deriv` call
too (so every device and NumPy evaluate the same expressions).  The derivative of
``negative_binomial`` is the exact ``(r + x)/(1 + m) − x/(m + ε)`` (as in the Tensor Toolbox;
pyttb 1.8 writes ``(r + 1)`` for ``(r + x)`` in its gradient handle).

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

import numpy as np

from .._loss_table import EPS, LOSS_TABLE, PARAM_RULES
from .._warnings import warn as _warn

__all__ = ["Loss", "CustomLoss", "LOSSES", "EPS", "get_loss", "is_loss_object"]

#: Code of a user-defined loss: the kernels return model values and NumPy does the rest.
CUSTOM_CODE = -1


def _f(a):
    return np.asarray(a, dtype=np.float64)


def _evaluate(code, param, x, m, deriv):
    """The header's loss (``sktf_losses.h``) on broadcast float64 arrays."""
    from .._native import _numerics
    from .._threads import get_num_threads
    x, m = np.broadcast_arrays(_f(x), _f(m))
    shape = m.shape
    xf = np.ascontiguousarray(x).reshape(-1)
    mf = np.ascontiguousarray(m).reshape(-1)
    out = np.empty(mf.shape[0])
    _numerics.loss_eval(code, param, xf, mf, out, deriv, get_num_threads())
    out = out.reshape(shape)
    return out[()] if out.ndim == 0 else out


class Loss:
    """A built-in GCP loss (see the module docstring for the formulas).

    The built-in losses are the rows of ``sktensor_fast._loss_table.LOSS_TABLE``; their
    values and derivatives are computed by the compiled functions of
    ``sktensor_fast/include/sktf_losses.h``, the same that the kernels of every device use.

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

    #: set by the subclasses (one per row of the loss table)
    name = ""
    code = CUSTOM_CODE
    lower = -np.inf
    #: what the data must be: "real", "nonneg", "counts" or "binary"
    data = "real"
    #: True, False or "param > 0"
    _zero_in_domain = True
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

    @property
    def zero_in_domain(self):
        """Whether 0 is a possible data value (``f(0, m)`` bounded below)."""
        if self._zero_in_domain == "param > 0":
            # beta: f(0, m) = (m + ε)^β / β, bounded below for β > 0, down to ε^β / β for β < 0
            return self.param > 0
        return bool(self._zero_in_domain)

    def value(self, x, m):
        """f(x, m), element-wise."""
        return _evaluate(self.code, self.param, x, m, False)

    def deriv(self, x, m):
        """∂f/∂m (x, m), element-wise."""
        return _evaluate(self.code, self.param, x, m, True)

    def check_data(self, vals):
        """Raise ``ValueError`` when the nonzero values ``vals`` are not data for this loss."""
        if self.data == "binary":
            _require_binary(self.name, vals)
        elif self.data == "counts":
            self._require_counts(vals)
        elif self.data == "nonneg":
            self._require_nonneg(vals)

    def __repr__(self):
        if self.param_spec is None:
            return f"Loss({self.name!r})"
        return f"Loss({self.name!r}, {self.param:g})"

    # ------------------------------------------------------------------ shared checks
    def _require_nonneg(self, vals, what="non-negative data", stats=None):
        vals = np.asarray(vals)
        if vals.size and (stats or _stats(vals))["negative"]:
            raise ValueError(f"loss {self.name!r} needs {what}; the tensor holds negative "
                             f"values (minimum {vals.min():g})")

    def _require_counts(self, vals):
        vals = np.asarray(vals)
        stats = _stats(vals) if vals.size else None   # one pass for both checks
        self._require_nonneg(vals, "non-negative counts", stats)
        if vals.size and stats["nonint"]:
            _warn(f"loss {self.name!r}: the data hold non-integer values; the model "
                  f"assumes counts", UserWarning)


def _loss_class(name, code, lower, data, zero_in_domain, param):
    """The :class:`Loss` subclass of one row of the loss table."""
    spec = None if param is None else (param[0], PARAM_RULES[param[1]])
    cls_name = "".join(w.capitalize() for w in name.split("_"))
    return type(cls_name, (Loss,), {
        "name": name, "code": code, "lower": lower, "data": data,
        "_zero_in_domain": zero_in_domain, "param_spec": spec,
        "__doc__": f"The {name!r} loss (code {code}; see the module docstring).",
        "__module__": __name__})


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


#: Built-in losses by name (the rows of the loss table).
LOSSES = {row[0]: _loss_class(*row) for row in LOSS_TABLE}


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
