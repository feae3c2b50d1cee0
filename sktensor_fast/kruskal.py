"""Kruskal (CP) tensors: weighted sums of rank-one tensors.

A :class:`KruskalTensor` with weights ``w`` (length ``R``) and factor matrices ``A_1 ... A_N``
(``A_n`` of shape ``I_n x R``) represents the tensor

    X[i_1, ..., i_N] = sum_r w[r] * A_1[i_1, r] * ... * A_N[i_N, r].

Everything here is plain NumPy and avoids forming the dense tensor unless asked to.
"""
import numpy as np

from .tensor import DENSE_SIZE_LIMIT, SparseTensor, _check_dense_size

__all__ = ["KruskalTensor"]

# entries of the (nnz x rank) work array of values_at, per chunk
_CHUNK_ENTRIES = 1 << 22


class KruskalTensor:
    """A tensor in Kruskal (CP) form: ``sum_r weights[r] * outer(A_1[:, r], ..., A_N[:, r])``.

    Parameters
    ----------
    weights : array_like of shape (R,) or None
        Component weights; None means all ones.
    factors : sequence of array_like
        One factor matrix per mode, of shape ``(I_n, R)``.

    Attributes
    ----------
    weights : ndarray of shape (R,)
    factors : list of ndarray
        Arrays are float64, unless every input is float32 (then float32).

    Examples
    --------
    >>> import numpy as np
    >>> from sktensor_fast.kruskal import KruskalTensor
    >>> K = KruskalTensor([2.0], [np.array([[1.0], [0.0]]), np.array([[1.0], [1.0], [0.0]])])
    >>> K.shape, K.rank
    ((2, 3), 1)
    >>> K.full()
    array([[2., 2., 0.],
           [0., 0., 0.]])
    """

    def __init__(self, weights, factors):
        if isinstance(factors, np.ndarray) or not hasattr(factors, "__len__"):
            raise TypeError("factors must be a list of 2-D factor matrices, one per mode")
        factors = list(factors)
        if len(factors) == 0:
            raise ValueError("a KruskalTensor needs at least one factor matrix")
        arrays = []
        for n, f in enumerate(factors):
            f = np.asarray(f)
            if f.dtype.kind not in "iuf":
                raise TypeError(f"factor matrix {n} must be real numbers, got dtype {f.dtype}")
            if f.ndim != 2:
                raise ValueError(f"factor matrix {n} must be 2-D (I_n x rank), got "
                                 f"{f.ndim} dimension(s)")
            arrays.append(f)
        rank = arrays[0].shape[1]
        if rank < 1:
            raise ValueError("a KruskalTensor needs rank >= 1 (factor matrices with at least "
                             "one column)")
        for n, f in enumerate(arrays):
            if f.shape[1] != rank:
                raise ValueError(f"factor matrix {n} has {f.shape[1]} columns but factor "
                                 f"matrix 0 has {rank}; all must have one column per component")
            if f.shape[0] < 1:
                raise ValueError(f"factor matrix {n} has no rows; every mode needs length >= 1")
        if weights is None:
            w = None
        else:
            w = np.asarray(weights)
            if w.dtype.kind not in "iuf":
                raise TypeError(f"weights must be real numbers, got dtype {w.dtype}")
            if w.ndim != 1 or w.shape[0] != rank:
                raise ValueError(f"weights must have shape ({rank},) to match the factor "
                                 f"matrices, got {w.shape}")
        single = all(f.dtype == np.float32 for f in arrays) and (w is None
                                                                 or w.dtype == np.float32)
        dtype = np.float32 if single else np.float64
        self.factors = [np.array(f, dtype=dtype, order="C") for f in arrays]
        self.weights = np.ones(rank, dtype) if w is None else np.array(w, dtype=dtype)
        for n, f in enumerate(self.factors):
            if not np.all(np.isfinite(f)):
                raise ValueError(f"factor matrix {n} holds NaN or infinite values")
        if not np.all(np.isfinite(self.weights)):
            raise ValueError("weights hold NaN or infinite values")

    @classmethod
    def _wrap(cls, weights, factors):
        obj = cls.__new__(cls)
        obj.weights = weights
        obj.factors = factors
        return obj

    # ------------------------------------------------------------------ properties
    @property
    def shape(self):
        """Mode lengths, as a tuple of int."""
        return tuple(int(f.shape[0]) for f in self.factors)

    @property
    def ndim(self):
        """Number of modes."""
        return len(self.factors)

    @property
    def rank(self):
        """Number of components ``R``."""
        return int(self.weights.shape[0])

    @property
    def dtype(self):
        """Floating dtype of the weights and factors."""
        return self.weights.dtype

    def copy(self):
        """Return a deep copy."""
        return KruskalTensor._wrap(self.weights.copy(), [f.copy() for f in self.factors])

    def __repr__(self):
        return (f"KruskalTensor(shape={self.shape}, rank={self.rank}, "
                f"dtype={self.dtype.name})")

    # ------------------------------------------------------------------ normal forms
    def normalize(self, ord=2, sort=False, signs=False):
        """Absorb the column norms of every factor matrix into the weights.

        The one normal form of the package: the estimators return their models through it.

        Parameters
        ----------
        ord : {1, 2, np.inf}, default=2
            Vector norm of the columns (as in :func:`numpy.linalg.norm`).
        sort : bool, default=False
            Also order the components by decreasing weight.
        signs : bool, default=False
            Also fix the signs of the columns: in every mode but the last, the entry of
            largest magnitude of each column is made positive, the last mode taking the signs
            (so that equal models give equal factors).

        Returns
        -------
        KruskalTensor
            A new tensor, equal to this one, whose factor columns have unit norm (columns that
            are zero stay zero, with weight 0) and whose weights are nonnegative: a negative
            weight is made positive by flipping the sign of the column in the first factor.

        Examples
        --------
        >>> import numpy as np
        >>> from sktensor_fast.kruskal import KruskalTensor
        >>> K = KruskalTensor([-2.0], [np.array([[3.0], [4.0]]), np.array([[0.5]])])
        >>> N = K.normalize()
        >>> N.weights, N.factors[0].ravel(), N.factors[1].ravel()
        (array([5.]), array([-0.6, -0.8]), array([1.]))
        >>> S = K.normalize(signs=True)
        >>> S.weights, S.factors[0].ravel(), S.factors[1].ravel()
        (array([5.]), array([0.6, 0.8]), array([-1.]))
        """
        from .backends.checks import check_bool
        sort, signs = check_bool(sort, "sort"), check_bool(signs, "signs")
        weights = self.weights.copy()
        scales = []
        for f in self.factors:
            norms = _column_norms(f, ord)
            scales.append(np.where(norms > 0, norms, 1).astype(f.dtype))
            weights = weights * norms.astype(weights.dtype)
        neg = weights < 0
        if neg.any():
            weights[neg] = -weights[neg]
        # the components in their final order from the start: each factor is taken in that
        # order once and then changed in place (the same bits as scaling, flipping and then
        # permuting; one new matrix per factor)
        order = np.argsort(-weights, kind="stable") if sort else None
        if order is not None:
            weights, neg = weights[order], neg[order]
        factors = []
        peaks = []    # per factor: the rows of its columns' largest magnitudes, if known
        for k, (f, scale) in enumerate(zip(self.factors, scales)):
            if order is None:
                out, idx = f / scale, None
                if k == 0 and neg.any():
                    out[:, neg] = -out[:, neg]
            else:
                out, idx = _arranged(f, order, scale[order], neg if k == 0 else None)
            factors.append(out)
            peaks.append(idx)
        if signs:
            # every mode but the last: the entry of largest magnitude positive (exact flips)
            last = None   # the product of the other modes' signs (exact: every one is ±1)
            for f, idx in zip(factors[:-1], peaks):
                if f.shape[0] == 0:
                    continue
                if idx is None:
                    idx = _column_argmax_abs(f)
                s = np.sign(f[idx, np.arange(f.shape[1])])
                s[s == 0] = 1
                if not np.all(s == 1):   # multiplying by 1 changes no bit
                    f *= s[None, :]
                    last = s if last is None else last * s
            if last is not None:
                factors[-1] *= last[None, :]
        return KruskalTensor._wrap(weights, factors)

    def _permuted(self, order):
        # np.take makes the C-ordered result directly (f[:, order] then a contiguous copy
        # took 15x the time on 30,000 x 16)
        return KruskalTensor._wrap(self.weights[order].copy(),
                                   [np.take(f, order, axis=1) for f in self.factors])

    def arrange(self, order=None, normalize=True):
        """Reorder the components.

        Parameters
        ----------
        order : array_like of int, optional
            A permutation of ``range(rank)``: component ``r`` of the result is component
            ``order[r]`` of this tensor.  By default components are sorted by decreasing
            weight.
        normalize : bool, default=True
            Normalise first (see :meth:`normalize`), so that weights measure the size of the
            components.

        Returns
        -------
        KruskalTensor
            A new tensor equal to this one.

        Examples
        --------
        >>> import numpy as np
        >>> from sktensor_fast.kruskal import KruskalTensor
        >>> K = KruskalTensor([1.0, 5.0], [np.eye(2), np.eye(2)])
        >>> K.arrange().weights
        array([5., 1.])
        >>> K.arrange([1, 0], normalize=False).factors[0]
        array([[0., 1.],
               [1., 0.]])
        """
        K = self.normalize() if normalize else self
        if order is None:
            order = np.argsort(-K.weights, kind="stable")
        else:
            order = np.asarray(order)
            if order.dtype.kind not in "iu" or order.ndim != 1 or not np.array_equal(
                    np.sort(order), np.arange(self.rank)):
                raise ValueError(f"order must be a permutation of range({self.rank}), got "
                                 f"{order!r}")
        return K._permuted(order)

    # ------------------------------------------------------------------ values
    def values_at(self, subs):
        """Values of the tensor at the given coordinates, without forming the tensor.

        Parameters
        ----------
        subs : array_like of int, shape (n, ndim)
            Zero-based coordinates, one row per entry.

        Returns
        -------
        ndarray of shape (n,)

        Examples
        --------
        >>> import numpy as np
        >>> from sktensor_fast.kruskal import KruskalTensor
        >>> K = KruskalTensor([2.0], [np.array([[1.0], [3.0]]), np.array([[1.0], [0.5]])])
        >>> K.values_at([[1, 1], [0, 0]])
        array([3., 2.])
        """
        subs = np.asarray(subs)
        if subs.ndim == 1 and subs.size == 0:
            subs = subs.reshape(0, self.ndim)
        if subs.ndim != 2 or subs.shape[1] != self.ndim:
            raise ValueError(f"subs must have shape (n, {self.ndim}), got {subs.shape}")
        if subs.dtype.kind not in "iu":
            if subs.size and (subs.dtype.kind != "f" or np.any(subs != np.round(subs))):
                raise TypeError(f"subs must hold integer coordinates, got dtype {subs.dtype}")
            subs = subs.astype(np.int64)
        n = subs.shape[0]
        if n:
            lo = subs.min(axis=0)
            hi = subs.max(axis=0)
            for k, length in enumerate(self.shape):
                if lo[k] < 0 or hi[k] >= length:
                    bad = lo[k] if lo[k] < 0 else hi[k]
                    raise ValueError(f"coordinate {bad} in mode {k} is outside the shape "
                                     f"{self.shape}")
        out = np.empty(n, dtype=self.dtype)
        step = max(1, _CHUNK_ENTRIES // max(self.rank, 1))
        for lo in range(0, n, step):
            hi = min(lo + step, n)
            prod = self.factors[0][subs[lo:hi, 0]]
            for k in range(1, self.ndim):
                prod *= self.factors[k][subs[lo:hi, k]]
            out[lo:hi] = prod @ self.weights
        return out

    def full(self, limit=DENSE_SIZE_LIMIT):
        """Return the tensor as a dense ndarray; refuses more than ``limit`` entries.

        Examples
        --------
        >>> import numpy as np
        >>> from sktensor_fast.kruskal import KruskalTensor
        >>> KruskalTensor([1.0], [np.ones((2, 1)), np.ones((3, 1))]).full(limit=10)
        array([[1., 1., 1.],
               [1., 1., 1.]])
        """
        shape = self.shape
        _check_dense_size(shape, limit, what="tensor")
        R = self.rank
        if self.ndim == 1:
            return self.factors[0] @ self.weights
        # split the modes into two groups of small Khatri-Rao products, then one matmul
        sizes = [int(np.prod(shape[:i])) + int(np.prod(shape[i:])) for i in range(1, self.ndim)]
        split = 1 + int(np.argmin(sizes))
        left = _khatri_rao(self.factors[:split], R) * self.weights
        right = _khatri_rao(self.factors[split:], R)
        return (left @ right.T).reshape(shape)

    to_dense = full

    def norm(self):
        """Frobenius norm, from the Gram matrices of the factors (no dense tensor).

        Examples
        --------
        >>> import numpy as np
        >>> from sktensor_fast.kruskal import KruskalTensor
        >>> float(KruskalTensor([3.0], [np.ones((4, 1)), np.ones((1, 1))]).norm())
        6.0
        """
        gram = np.ones((self.rank, self.rank))
        for f in self.factors:
            f64 = f.astype(np.float64, copy=False)
            gram *= f64.T @ f64
        w = self.weights.astype(np.float64)
        return float(np.sqrt(abs(w @ gram @ w)))

    def innerprod(self, other):
        """Inner product (sum of entrywise products) with another tensor of the same shape.

        Parameters
        ----------
        other : SparseTensor, KruskalTensor or ndarray

        Returns
        -------
        float

        Examples
        --------
        >>> import numpy as np
        >>> from sktensor_fast.kruskal import KruskalTensor
        >>> from sktensor_fast.tensor import SparseTensor
        >>> K = KruskalTensor([2.0], [np.ones((2, 1)), np.ones((2, 1))])
        >>> K.innerprod(SparseTensor([[0, 1]], [5.0], shape=(2, 2)))
        10.0
        >>> K.innerprod(K)
        16.0
        """
        if isinstance(other, KruskalTensor):
            self._check_same_shape(other.shape)
            gram = np.ones((self.rank, other.rank))
            for a, b in zip(self.factors, other.factors):
                gram *= a.astype(np.float64, copy=False).T @ b.astype(np.float64, copy=False)
            return float(self.weights.astype(np.float64) @ gram
                         @ other.weights.astype(np.float64))
        if isinstance(other, SparseTensor):
            self._check_same_shape(other.shape)
            if other.nnz == 0:
                return 0.0
            vals = self.values_at(other.subs).astype(np.float64, copy=False)
            return float(np.dot(other.vals.astype(np.float64, copy=False), vals))
        arr = np.asarray(other)
        if arr.dtype.kind not in "iuf":
            raise TypeError(f"cannot take the inner product with {type(other).__name__}")
        self._check_same_shape(arr.shape)
        # contract one mode at a time: T has shape (R, remaining modes...)
        T = np.tensordot(self.factors[0].astype(np.float64, copy=False).T,
                         arr.astype(np.float64, copy=False), axes=(1, 0))
        for f in self.factors[1:]:
            T = np.einsum("ri...,ir->r...", T, f.astype(np.float64, copy=False))
        return float(T @ self.weights.astype(np.float64))

    def _check_same_shape(self, shape):
        if tuple(shape) != self.shape:
            raise ValueError(f"shapes differ: {self.shape} and {tuple(shape)}")

    # ------------------------------------------------------------------ comparison
    def score(self, other, weight_penalty=True):
        """Factor match score (FMS) against another Kruskal tensor of the same shape.

        Both tensors are normalised (unit 2-norm columns, weights absorbing the norms).  The
        similarity of component ``r`` of this tensor and component ``s`` of ``other`` is the
        product over modes of ``|a_r^T b_s|`` times, with ``weight_penalty``, the weight
        penalty ``1 - |w_r - v_s| / max(w_r, v_s)`` (1 when both weights are 0).  Components
        are matched one to one so as to maximise the mean similarity, exactly (Hungarian
        algorithm); the score is that mean over the components of this tensor.

        Parameters
        ----------
        other : KruskalTensor
            Reference tensor, with at least as many components as this one.
        weight_penalty : bool, default=True
            Multiply the similarities by the weight penalty.

        Returns
        -------
        fms : float
            In ``[0, 1]``; 1 when this tensor's components all appear in ``other``.
        perm : ndarray of int, shape (rank,)
            ``perm[r]`` is the component of ``other`` matched with component ``r``.

        Notes
        -----
        This is the score of the Tensor Toolbox's ``ktensor/score`` with the roles of the two
        tensors exchanged (there the first tensor has at least as many components), except
        that the matching is optimal rather than greedy.

        Examples
        --------
        >>> import numpy as np
        >>> from sktensor_fast.kruskal import KruskalTensor
        >>> rng = np.random.default_rng(0)
        >>> K = KruskalTensor([1.0, 2.0], [rng.random((4, 2)), rng.random((3, 2))])
        >>> swapped = K.arrange([1, 0], normalize=False)
        >>> fms, perm = K.score(swapped)
        >>> round(fms, 12), perm
        (1.0, array([1, 0]))
        """
        from scipy.optimize import linear_sum_assignment

        if not isinstance(other, KruskalTensor):
            raise TypeError(f"other must be a KruskalTensor, got {type(other).__name__}")
        self._check_same_shape(other.shape)
        if self.rank > other.rank:
            raise ValueError(f"this tensor has {self.rank} components but other has only "
                             f"{other.rank}; call other.score(self) instead")
        A = self.normalize()
        B = other.normalize()
        sim = np.ones((A.rank, B.rank))
        for a, b in zip(A.factors, B.factors):
            sim *= np.abs(a.astype(np.float64).T @ b.astype(np.float64))
        if weight_penalty:
            wa = A.weights.astype(np.float64)[:, None]
            wb = B.weights.astype(np.float64)[None, :]
            top = np.maximum(wa, wb)
            with np.errstate(invalid="ignore", divide="ignore"):
                penalty = np.where(top > 0, 1 - np.abs(wa - wb) / np.where(top > 0, top, 1), 1.0)
            sim *= penalty
        rows, cols = linear_sum_assignment(sim, maximize=True)
        perm = np.empty(A.rank, dtype=np.int64)
        perm[rows] = cols
        return float(sim[rows, cols].mean()), perm

    # ------------------------------------------------------------------ pyttb
    def to_pyttb(self):
        """Return a pyttb ``ktensor`` (requires pyttb)."""
        import pyttb
        return pyttb.ktensor([f.astype(np.float64) for f in self.factors],
                             self.weights.astype(np.float64), copy=True)

    @classmethod
    def from_pyttb(cls, kt):
        """Build from a pyttb ``ktensor``."""
        return cls(np.asarray(kt.weights).reshape(-1), [np.asarray(f) for f in kt.factor_matrices])


def _khatri_rao(mats, R):
    """Column-wise Kronecker product, first matrix varying slowest (C order)."""
    out = mats[0]
    for m in mats[1:]:
        out = (out[:, None, :] * m[None, :, :]).reshape(-1, R)
    return out


def _compiled_columns(f):
    """Whether the compiled column passes of ``_native._hostcopy`` take ``f``."""
    return f.ndim == 2 and f.dtype in (np.float32, np.float64) and f.flags.c_contiguous


def _column_norms(f, ord):
    """``np.linalg.norm(f, ord=ord, axis=0)``; for the 2-norm of a C-ordered float matrix, the
    same bits from one compiled pass without NumPy's temporary matrix of squares."""
    if ord == 2 and _compiled_columns(f):
        from ._native._hostcopy import column_sumsq
        out = np.empty(f.shape[1], dtype=f.dtype)
        column_sumsq(f, out)
        return np.sqrt(out)
    return np.linalg.norm(f, ord=ord, axis=0)


def _arranged(f, order, scale, neg):
    """``f[:, order] / scale``, with the columns where ``neg`` negated, and the first rows of
    the result's largest magnitudes per column (None where not computed): one compiled
    threaded pass for a C-ordered float matrix, NumPy's ``take`` and division otherwise."""
    if _compiled_columns(f):
        from ._native._hostcopy import arrange_columns
        from ._threads import get_num_threads, threads_for_load
        R = len(order)
        out = np.empty((f.shape[0], R), dtype=f.dtype)
        idx = np.empty(R, dtype=np.int64)
        negate = np.zeros(R, np.uint8) if neg is None else neg.astype(np.uint8)
        arrange_columns(f, np.asarray(order, dtype=np.int64), np.ascontiguousarray(scale),
                        negate, out, idx, threads_for_load(get_num_threads()))
        return out, idx.astype(np.intp, copy=False)
    out = np.take(f, order, axis=1)
    np.divide(out, scale, out=out)
    if neg is not None and neg.any():
        out[:, neg] = -out[:, neg]
    return out, None


def _column_argmax_abs(f):
    """``np.argmax(np.abs(f), axis=0)`` (first rows of the largest magnitudes, the first NaN
    if any), in one pass over the rows (NumPy copies a C-ordered matrix transposed first)."""
    if _compiled_columns(f):
        from ._native._hostcopy import column_argmax_abs
        idx = np.empty(f.shape[1], dtype=np.int64)
        column_argmax_abs(f, idx)
        return idx.astype(np.intp, copy=False)
    return np.argmax(np.abs(f), axis=0)
