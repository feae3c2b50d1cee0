"""The table of GCP's built-in losses: the one description of their names, codes and domains.

Every other place that knows the losses reads this table or is checked against it:

- :mod:`sktensor_fast.decomposition.losses` builds its loss classes from it;
- the formulas (value and derivative of each loss) are written once, in C, in
  ``sktensor_fast/include/sktf_losses.h``, which the CPU kernels include and the OpenCL
  programs get pasted in; its ``SKTF_LOSS_<NAME>`` codes and ``SKTF_N_LOSSES`` are checked
  against this table by the test suite (``tests/estimators/test_loss_table.py``);
- the backends take the number of codes from :data:`N_LOSSES`.

Columns of :data:`LOSS_TABLE` (one row per loss, in code order):

``name``
    The name GCP accepts (``loss="..."``); the header's constant is ``SKTF_LOSS_`` + its upper
    case.
``code``
    The integer the kernels dispatch on (the codes of ``pyttb.gcp.handles.Objectives``).
``lower``
    Lower bound of the model values (and of the factor entries): ``0.0`` or ``-inf``.
``data``
    What the data must be: ``"real"`` (anything), ``"nonneg"`` (>= 0), ``"counts"`` (>= 0,
    a warning for non-integers) or ``"binary"`` (0 or 1).
``zero_in_domain``
    Whether 0 is a possible data value (``f(0, m)`` bounded below): True, False, or
    ``"param > 0"`` when it depends on the loss parameter.  Losses without it need a mask that
    leaves the zeros of the data out.
``param``
    None for a loss without a parameter, else ``(description, rule)`` with ``rule`` one of
    ``"positive"`` (> 0) and ``"not 0 or 1"``.

This module imports nothing, so that every layer of the package may read it.
"""

__all__ = ["LOSS_TABLE", "N_LOSSES", "EPS", "PARAM_RULES"]

#: Guard inside logarithms and denominators (``SKTF_LOSS_EPS`` of the header; the Tensor
#: Toolbox and pyttb use the same value).
EPS = 1e-10

_INF = float("inf")

#: (name, code, lower, data, zero_in_domain, param), in code order.
LOSS_TABLE = (
    ("gaussian", 0, -_INF, "real", True, None),
    ("bernoulli_odds", 1, 0.0, "binary", True, None),
    ("bernoulli_logit", 2, -_INF, "binary", True, None),
    ("poisson", 3, 0.0, "counts", True, None),
    ("poisson_log", 4, -_INF, "counts", True, None),
    ("rayleigh", 5, 0.0, "nonneg", False, None),
    ("gamma", 6, 0.0, "nonneg", False, None),
    ("huber", 7, -_INF, "real", True, ("the threshold δ, a real number > 0", "positive")),
    ("negative_binomial", 8, 0.0, "counts", True,
     ("the number of trials r, a real number > 0", "positive")),
    ("beta", 9, 0.0, "nonneg", "param > 0",
     ("the exponent β of the β-divergence, a real number other than 0 and 1", "not 0 or 1")),
    ("zt_poisson", 10, 0.0, "counts", False, None),
)

#: Number of loss codes (codes are 0 .. N_LOSSES - 1).
N_LOSSES = len(LOSS_TABLE)

#: The parameter rules of the table's ``param`` column.
PARAM_RULES = {
    "positive": lambda p: p > 0,
    "not 0 or 1": lambda p: p != 0 and p != 1,
}
