"""The R x R steps of CP-ALS on the host: products of Gram matrices and their inverse.

Every backend's :meth:`~.base.Backend.als_update` falls back on these (the CPU backend runs
the same steps compiled, in one call per factor update).
"""
import numpy as np

__all__ = ["hadamard_except", "inverse_gram", "als_weights"]


def hadamard_except(grams, skip):
    """The element-wise product of the R x R matrices ``grams`` other than ``grams[skip]``,
    taken in order (a matrix of ones when there is none; ``skip=-1`` takes them all)."""
    R = grams[0].shape[0]
    Y = np.ones((R, R))
    for k, G in enumerate(grams):
        if k != skip:
            Y = Y * G
    return Y


def inverse_gram(Y):
    """Y⁻¹ for the symmetric positive semidefinite R x R matrix Y (pseudo-inverse if singular).

    One symmetric eigendecomposition gives both the condition number and the inverse (a solve
    followed by an SVD for the condition number cost twice as much per mode and iteration,
    which shows on small tensors).  Eigenvalues below ``R eps`` times the largest are cut when
    the smallest is below ``1e-12`` times the largest, as NumPy's ``pinv`` cuts them.

    Raises
    ------
    FloatingPointError
        When Y holds NaN or infinite values (the iteration diverged).
    """
    if not np.all(np.isfinite(Y)):
        raise FloatingPointError(DIVERGED)
    try:
        w, V = np.linalg.eigh(Y)
    except np.linalg.LinAlgError:
        return np.linalg.pinv(Y, hermitian=True)
    top = w[-1] if w.size else 0.0
    if top > 0 and w[0] > top * 1e-12:
        return (V / w) @ V.T
    # singular or nearly so: the pseudo-inverse, small eigenvalues cut as pinv does
    keep = w > max(top, 0.0) * Y.shape[0] * np.finfo(Y.dtype).eps
    inv_w = np.where(keep, 1.0 / np.where(keep, w, 1.0), 0.0)
    return (V * inv_w) @ V.T


#: the message of the FloatingPointError of a Gram matrix with NaN or infinite values
DIVERGED = "the Gram matrix holds NaN or infinite values; the iteration diverged"


def als_weights(stat, first):
    """CP-ALS's column weights and the scales that divide the columns by them, from the
    column statistics of the new factor: sums of squares on the ``first`` iteration (the
    weights are the 2-norms), else the largest magnitudes (the weights are those but at least
    1).  Columns of weight 0 keep scale 1."""
    stat = np.asarray(stat, dtype=np.float64)
    weights = np.sqrt(stat) if first else np.maximum(stat, 1.0)
    scale = np.where(weights > 0, 1.0 / np.where(weights > 0, weights, 1), 1.0)
    return weights, scale


def als_matrix(grams, mode, col_scale=None):
    """The R x R matrix that CP-ALS multiplies the MTTKRP of ``mode`` by: the inverse of the
    element-wise product of the other Gram matrices, its rows multiplied by ``col_scale``
    first where given (the MTTKRP read a factor whose columns were scaled only after it:
    see :meth:`~.base.Backend.als_start`)."""
    Yinv = inverse_gram(hadamard_except(grams, mode))
    if col_scale is not None:
        Yinv = np.asarray(col_scale, dtype=np.float64)[:, None] * Yinv
    return Yinv


def als_inner(ip, scale, col_scale=None):
    """``inner(U S, M C)`` per column from ``inner(U, M)`` (None stays None): the factor's
    columns scaled by ``scale`` after the product, the MTTKRP's by ``col_scale``."""
    if ip is None:
        return None
    ip = np.asarray(ip, dtype=np.float64) * scale
    return ip if col_scale is None else ip * np.asarray(col_scale, dtype=np.float64)
