"""GCP's vocabulary and sampling plan: the one definition that every device and the estimator
read.

- the names: :data:`SAMPLERS` (the gradient samplers) and :data:`UPDATE_RULES` (the
  element-wise updates of the stochastic optimisers that the kernels implement);
- the sampler's limits: :data:`ZERO_LIST_DENSITY`, :data:`ZERO_LIST_MAX`,
  :data:`MAX_ATTEMPTS` (read at call time, so a test that patches them here changes every
  device);
- the plan of a draw (:func:`sampler_plan`, :func:`zero_list_mode`, :func:`bucket_layout`,
  :func:`default_counts`) and the linear index of coordinates (:func:`linear_index`, the
  samplers' look-up key, also what the data layer sorts by);
- :func:`check_loss` / :func:`loss_code`: what the kernels accept as a loss;
- :class:`GcpState`: what every backend's ``gcp.setup`` returns.

Pure Python and NumPy (no compiled kernels, no PyOpenCL): the CPU, OpenCL and distributed
backends, the data layer and the estimator import it.
"""
import math

import numpy as np

from .._loss_table import N_LOSSES

__all__ = ["SAMPLERS", "UPDATE_RULES", "ZERO_LIST_DENSITY", "ZERO_LIST_MAX", "MAX_ATTEMPTS",
           "UNIFORM_CAP", "linear_index", "sampler_plan", "zero_list_mode", "bucket_layout",
           "default_counts", "check_loss", "loss_code", "GcpState"]

#: the gradient samplers (``sampler=`` of GCP and of ``backend.gcp.setup``)
SAMPLERS = ("stratified", "semi-stratified", "uniform")

#: the element-wise updates of the stochastic optimisers that the kernels implement
#: (``backend.gcp.optimizer_update``): rule -> (names of the moments kept per factor, names
#: of the coefficients of a step).  The optimiser objects of decomposition/optimizers.py
#: compute the coefficients of each step.
UPDATE_RULES = {
    "sgd": ((), ("lr",)),
    "adagrad": (("s",), ("lr", "epsilon")),
    "adam": (("m", "v"), ("beta1", "beta2", "step", "guard")),
}

#: Above this density the stratified sampler draws zeros from the list of all zeros (in
#: linear-index order) instead of by rejection: the t-th zero is computed from the sorted linear
#: indices of the nonzeros, or, for tensors of at most ``ZERO_LIST_MAX`` entries, read from an
#: explicit list (the same entries; the OpenCL backend always computes them).
ZERO_LIST_DENSITY = 0.5
ZERO_LIST_MAX = 1 << 24
#: Rejections of a stratified zero sample in a row before that zero is computed from the linear
#: indices instead (exact either way; below the density threshold rejection fails this often
#: with probability at most 2^-256).
MAX_ATTEMPTS = 256
#: Cap of the default number of samples per step of the uniform sampler.
UNIFORM_CAP = 100_000
#: linear indices exist for tensors of fewer entries than this (they are int64)
_LINEAR_LIMIT = 2 ** 63


def linear_index(subs, shape):
    """The C-order linear index (mode 0 slowest) of every row of ``subs`` as int64, or None
    when the tensor has ``2**63`` entries or more (the index would not fit in int64)."""
    if math.prod(int(s) for s in shape) >= _LINEAR_LIMIT:
        return None
    lin = np.zeros(subs.shape[0], dtype=np.int64)
    for k, s in enumerate(shape):
        lin *= s
        lin += subs[:, k]
    return lin


def sampler_plan(kind, nnz, n_zero, p, q):
    """How a GCP sampler draws: ``(p, q, wp, wq, zmode, include_nz, correct)``.

    ``p`` samples of the ``nnz`` nonzeros and ``q`` of the other entries (``n_zero`` observed
    zeros) per draw; ``wp``/``wq`` the weights that make the sampled sum unbiased; ``zmode``
    where the q samples come from (2: zeros only, 0: all entries with the nonzeros' values
    looked up and corrected, 1: uniform over all entries).  Shared by every backend, so that
    all of them draw the same samples with the same weights.
    """
    n_obs = nnz + n_zero
    if nnz == 0:
        p = 0
    if kind == "stratified":
        if n_zero == 0:
            q = 0
        wp = nnz / p if p else 0.0
        wq = n_zero / q if q else 0.0
        zmode, include_nz, correct = 2, False, False
    elif kind == "semi-stratified":
        wp = nnz / p if p else 0.0
        wq = n_obs / q if q else 0.0
        zmode, include_nz, correct = 0, True, True
    else:  # uniform: every sample from all (observed) entries, values looked up
        q = p + q
        p = 0
        wp = 0.0
        wq = n_obs / q if q else 0.0
        zmode, include_nz, correct = 1, True, False
    return int(p), int(q), float(wp), float(wq), zmode, include_nz, correct


def zero_list_mode(size, nnz, has_lin):
    """Whether the stratified sampler of a tensor without a mask draws its zeros from the list
    of all zeros (True) rather than by rejection: when the density is above
    ``ZERO_LIST_DENSITY`` and the linear index exists."""
    return bool(has_lin) and nnz > ZERO_LIST_DENSITY * size


def bucket_layout(size, nnz):
    """``(shift, n_buckets)`` of the bucket table of the sorted linear indices (offsets by
    ``lin >> shift``, about one nonzero per bucket), or None below 64 nonzeros (a binary
    search of all of them then)."""
    if nnz < 64:
        return None
    top = size - 1
    nbits = max(1, min(26, (nnz - 1).bit_length()))
    shift = max(0, top.bit_length() - nbits)
    return shift, (top >> shift) + 1


def default_counts(sampler, n_nz, n_zero, n_grad=None, n_loss=None):
    """``((p, q) per gradient step, (p, q) of the loss sample)``: the given counts (an int n:
    n nonzeros and n others; for the uniform sampler's ``n_grad``: n entries) or pyttb's
    defaults (see :class:`~sktensor_fast.GCP`)."""
    n_obs = n_nz + n_zero
    ng = n_grad
    if sampler == "uniform":
        if ng is None:
            ng = min(n_obs, max(1000, math.ceil(10 * n_obs / 1000)), UNIFORM_CAP)
        grad = (0, int(ng))
    elif ng is None:
        g = max(math.ceil(3 * n_nz / 1000), min(1000, max(100, math.ceil(n_nz / 100))))
        grad = (min(g, n_nz), min(g, n_zero, n_nz if n_nz else g))
    else:
        grad = tuple(int(v) for v in ng) if isinstance(ng, tuple) else (int(ng), int(ng))
    nl = n_loss
    if nl is None:
        f = max(100_000, math.ceil(n_nz / 100))
        loss = (min(f, n_nz), min(f, n_zero, n_nz if n_nz else f))
    else:
        loss = tuple(int(v) for v in nl) if isinstance(nl, tuple) else (int(nl), int(nl))
    return grad, loss


def check_loss(loss, exact=False):
    """``loss`` if the kernels accept it: a loss object of decomposition/losses.py (integer
    ``code`` below ``N_LOSSES``, ``param``; code < 0 for a user-defined loss) or a user's
    object with methods ``value(x, m)`` and ``deriv(x, m)``, which ``exact`` (the dense exact
    loss) needs of every loss."""
    has_fns = callable(getattr(loss, "value", None)) and callable(getattr(loss, "deriv", None))
    code = getattr(loss, "code", None)
    if code is None and has_fns:
        return loss
    if isinstance(code, (bool, np.bool_)) or not isinstance(code, (int, np.integer)):
        raise TypeError(f"loss must be a loss object of decomposition.losses (with an integer "
                        f"code), got {type(loss).__name__}")
    if code >= N_LOSSES:
        raise ValueError(f"unknown loss code {int(code)}")
    if (code < 0 or exact) and not has_fns:
        raise TypeError("loss needs methods value(x, m) and deriv(x, m)")
    return loss


def loss_code(loss):
    """``(code, param)`` of a loss accepted by :func:`check_loss`, as the kernels take them:
    code < 0 for a user-defined loss (evaluated on the host)."""
    code = getattr(loss, "code", None)
    code = -1 if code is None else int(code)
    return code, float(getattr(loss, "param", float("nan")))


class GcpState:
    """What ``backend.gcp.setup`` returns: the stochastic GCP state of one tensor.

    The estimator reads the attributes below; each backend subclasses it and keeps there what
    its primitives need (its samplers, workspaces).

    Attributes
    ----------
    sampler : str
        The gradient sampler, one of :data:`SAMPLERS`.
    n_grad, n_loss : (int, int)
        Samples of nonzeros and of other entries per gradient step / in the loss sample.
    n_entries : int
        Entries the loss sums over (the tensor's size, or the observed entries).
    loss_sample
        The fixed stratified sample on which the loss is estimated (the backend's form).
    dtype : numpy.dtype
        The dtype of the factor matrices the primitives work on.
    """

    def __init__(self, sampler, n_grad, n_loss, n_entries, loss_sample, dtype):
        self.sampler = sampler
        self.n_grad = n_grad
        self.n_loss = n_loss
        self.n_entries = n_entries
        self.loss_sample = loss_sample
        self.dtype = np.dtype(dtype)

    def __repr__(self):
        return (f"{type(self).__name__}(sampler={self.sampler!r}, n_grad={self.n_grad}, "
                f"n_loss={self.n_loss}, n_entries={self.n_entries})")
