"""The exact GCP loss and gradient of small tensors, in NumPy, on the host (for L-BFGS-B and
the exact ``score``): the dense model, the MTTKRP of a dense tensor and the loss over every
entry.

Every backend uses them (the OpenCL and distributed backends on host copies); pure NumPy (no
compiled kernels, no PyOpenCL).
"""
import math

import numpy as np

__all__ = ["dense_model", "dense_mttkrp", "full_loss_grad"]


# ------------------------------------------------------------------ exact loss and gradient
def _khatri_rao(mats, R):
    out = np.ones((1, R))
    for m in mats:  # first matrix varies slowest (C order)
        out = (out[:, None, :] * m[None, :, :]).reshape(-1, R)
    return out


def dense_model(weights, factors):
    """The full Kruskal tensor Σ_r w_r a_r ∘ b_r ∘ … as a dense float64 array.

    The modes are split into two groups of similar size; the Khatri-Rao products of the two
    groups (about √size x R each) are multiplied, so nothing of size (size x R) is formed.
    """
    facs = [np.asarray(f, dtype=np.float64) for f in factors]
    shape = tuple(f.shape[0] for f in facs)
    R = len(weights)
    if len(facs) == 1:
        return facs[0] @ np.asarray(weights, dtype=np.float64)
    sizes = [math.prod(shape[:i]) + math.prod(shape[i:]) for i in range(1, len(shape))]
    split = 1 + int(np.argmin(sizes))
    left = _khatri_rao(facs[:split], R) * np.asarray(weights, dtype=np.float64)[None, :]
    right = _khatri_rao(facs[split:], R)
    return (left @ right.T).reshape(shape)


def dense_mttkrp(Y, factors, mode, max_elems=1 << 24):
    """MTTKRP of a dense tensor: out[i, r] = Σ Y[..i..] Π_{k≠mode} factors[k][i_k, r].

    The largest other mode is contracted first with a matrix product; the others one at a time
    along the rank; ranks are processed in blocks so that intermediates stay below
    ``max_elems`` entries.
    """
    N = Y.ndim
    R = factors[0].shape[1]
    others = [k for k in range(N) if k != mode]
    out = np.empty((Y.shape[mode], R))
    if not others:
        out[:] = Y.reshape(-1, 1)
        return out
    first = max(others, key=lambda k: Y.shape[k])
    rest = [k for k in others if k != first]
    inter = Y.size // Y.shape[first]
    rb = max(1, min(R, max_elems // max(1, inter)))
    for r0 in range(0, R, rb):
        r1 = min(R, r0 + rb)
        Z = np.tensordot(Y, factors[first][:, r0:r1], axes=([first], [0]))
        subs = [k for k in range(N) if k != first] + [N]
        for k in rest:
            keep = [s for s in subs if s != k]
            Z = np.einsum(Z, subs, factors[k][:, r0:r1], [k, N], keep)
            subs = keep
        out[:, r0:r1] = Z
    return out


def _dense_data(T):
    cache = T.__dict__.setdefault("_gcp_dense", {})
    if "X" not in cache:
        X = np.zeros(T.shape)
        if T.nnz:
            X[tuple(np.asarray(T.subs).T)] = T.vals
        cache["X"] = X
    return cache["X"]


def full_loss_grad(T, weights, factors, loss, mask=None, modes=None, need_grad=True):
    X = _dense_data(T)
    facs = [np.asarray(f, dtype=np.float64) for f in factors]
    M = dense_model(weights, facs)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        F = loss.value(X, M)
        if mask is not None:
            F = np.where(mask, F, 0.0)
        total = float(np.sum(F))
        if not need_grad:
            return total, None
        Y = loss.deriv(X, M)
        if mask is not None:
            Y = np.where(mask, Y, 0.0)
    lam = np.asarray(weights, dtype=np.float64)
    modes = range(len(facs)) if modes is None else modes
    grads = [None] * len(facs)
    for k in modes:
        grads[k] = dense_mttkrp(Y, facs, k) * lam[None, :]
    return total, grads
