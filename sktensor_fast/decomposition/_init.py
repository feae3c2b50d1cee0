"""Initial guesses for the CP algorithms."""
import contextlib

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh

from ..kruskal import KruskalTensor

__all__ = ["initialize_factors", "nvecs"]


def nvecs(X, mode, rank, rng):
    """Leading ``rank`` left singular vectors of the mode-``mode`` unfolding of ``X``.

    Computed as eigenvectors of X_(n) X_(n)ᵀ built sparse (the unfolding's columns are the
    distinct coordinate tuples of the other modes, so nothing of the size of the dense tensor
    is formed).  When ``rank`` >= the mode length the missing columns are random.
    """
    n_rows = X.shape[mode]
    other = [k for k in range(X.ndim) if k != mode]
    if other:
        _, cols = np.unique(X.subs[:, other], axis=0, return_inverse=True)
        cols = cols.reshape(-1)
        ncols = int(cols.max()) + 1 if cols.size else 1
    else:
        cols = np.zeros(X.nnz, dtype=np.int64)
        ncols = 1
    M = sp.csr_matrix((X.vals.astype(np.float64), (X.subs[:, mode], cols)),
                      shape=(n_rows, ncols))
    G = (M @ M.T).toarray() if n_rows <= 4000 else (M @ M.T)
    k = min(rank, n_rows)
    if sp.issparse(G) and k < n_rows - 1:
        w, V = eigsh(G, k=k, which="LA", v0=rng.uniform(size=n_rows))
    else:
        G = G.toarray() if sp.issparse(G) else G
        w, V = np.linalg.eigh(G)
    order = np.argsort(w)[::-1][:k]
    V = V[:, order]
    # sign convention: largest-magnitude entry of each column positive
    signs = np.sign(V[np.argmax(np.abs(V), axis=0), np.arange(V.shape[1])])
    signs[signs == 0] = 1
    V = V * signs
    if k < rank:
        V = np.hstack([V, rng.uniform(size=(n_rows, rank - k))])
    return np.ascontiguousarray(V)


def _uniform_matrices(rng, shapes):
    """``[rng.random_sample(size=s) for s in shapes]``: the numbers of ``uniform(0, 1)``
    (which computes 0 + 1 * x from them, an extra pass over each matrix).

    For a ``RandomState`` on MT19937 (what ``random_state=int`` gives), the same bits come from
    the compiled generator of ``sktf_mt19937.h`` in well under half of NumPy's time (NELL-2's
    factors: 1.8 against 4.4-4.8 ms on an H100's host), and the state of ``rng`` is advanced
    past them exactly as NumPy would.
    """
    if type(rng) is np.random.RandomState:
        # the generator's own lock (NumPy's draws take it): another thread drawing from the
        # same RandomState waits instead of drawing the same numbers
        lock = getattr(getattr(rng, "_bit_generator", None), "lock", None)
        with lock if lock is not None else contextlib.nullcontext():
            state = rng.get_state(legacy=False)
            if state.get("bit_generator") == "MT19937":
                from .._native import _numerics
                key = np.array(state["state"]["key"], dtype=np.uint32)
                pos = int(state["state"]["pos"])
                out = []
                for shape in shapes:
                    a = np.empty(shape, dtype=np.float64)
                    pos = _numerics.mt19937_random_sample(key, pos, a.reshape(-1))
                    out.append(a)
                state["state"] = {"key": key, "pos": pos}
                rng.set_state(state)
                return out
    draw = getattr(rng, "random_sample", None) or (lambda size: rng.uniform(size=size))
    return [draw(size=shape) for shape in shapes]


def _refuse_complex(arrays, what):
    """Complex factors would lose their imaginary parts in the conversion to float64."""
    for n, f in enumerate(arrays):
        try:
            a = np.asarray(f)
        except (TypeError, ValueError):
            continue  # reported by the conversion that follows
        if np.iscomplexobj(a) or (a.dtype == object and any(isinstance(v, complex)
                                                          for v in a.ravel().tolist())):
            label = what if what.endswith("weights") else f"{what} {n}"
            raise ValueError(f"{label} holds complex values; the factors of a CP model of "
                             f"real data must be real")


def initialize_factors(init, X, rank, rng, allowed=("random", "nvecs"), dtype=np.float64):
    """Factor matrices to start from, as a list of C-contiguous arrays.

    ``init`` is ``"random"`` (uniform on [0, 1), as the Tensor Toolbox does), ``"nvecs"``, a
    :class:`KruskalTensor` (its weights are absorbed into the first factor) or a list of factor
    matrices, which must match the tensor's shape and the rank.
    """
    if isinstance(init, str):
        if init not in allowed:
            raise ValueError(f"init must be one of {sorted(allowed)}, a KruskalTensor or a list "
                             f"of factor matrices; got {init!r}")
        if init == "random":
            return [np.ascontiguousarray(f, dtype=dtype)
                    for f in _uniform_matrices(rng, [(s, rank) for s in X.shape])]
        if init == "nvecs":
            return [np.ascontiguousarray(nvecs(X, n, rank, rng), dtype=dtype)
                    for n in range(X.ndim)]
        raise ValueError(f"unsupported init {init!r}")  # pragma: no cover
    if isinstance(init, KruskalTensor):
        _refuse_complex([init.weights], "init weights")
        _refuse_complex(init.factors, "init factor")
        factors = [np.array(f, dtype=np.float64) for f in init.factors]
        factors[0] = factors[0] * np.asarray(init.weights, dtype=np.float64)[None, :]
    elif isinstance(init, (list, tuple)):
        _refuse_complex(init, "init factor")
        try:
            factors = [np.array(f, dtype=np.float64) for f in init]
        except (TypeError, ValueError) as exc:
            raise TypeError(f"init factor matrices must be numeric arrays: {exc}") from exc
    else:
        raise TypeError(f"init must be a string, a KruskalTensor or a list of factor matrices, "
                        f"got {type(init).__name__}")
    if len(factors) != X.ndim:
        raise ValueError(f"init has {len(factors)} factor matrices but the tensor has "
                         f"{X.ndim} modes")
    for n, f in enumerate(factors):
        if f.shape != (X.shape[n], rank):
            raise ValueError(f"init factor {n} has shape {f.shape}, expected "
                             f"({X.shape[n]}, {rank}) for a tensor of shape {X.shape} and rank "
                             f"{rank}")
        if not np.all(np.isfinite(f)):
            raise ValueError(f"init factor {n} holds NaN or infinite values")
    return [np.ascontiguousarray(f, dtype=dtype) for f in factors]
