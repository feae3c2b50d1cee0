"""Sparse tensors in coordinate (COO) form.

:class:`SparseTensor` is the data type every estimator and kernel of the package takes.  All
validation of user data happens here, at construction, so that the compiled kernels can trust
every index they see.
"""
import numbers
import warnings

import numpy as np

from ._prepared import register_selection

__all__ = ["SparseTensor", "as_sparse_tensor", "DENSE_SIZE_LIMIT"]

#: Largest number of entries :meth:`SparseTensor.to_dense` and friends materialise by default.
DENSE_SIZE_LIMIT = 200_000_000


def _check_dense_size(shape, limit, what="tensor"):
    size = 1
    for s in shape:
        size *= int(s)
    if limit is not None and size > limit:
        raise ValueError(
            f"a dense {what} of shape {tuple(int(s) for s in shape)} has {size} entries, more than "
            f"the limit of {limit}; pass a larger `limit` if you really want to materialise it")
    return size


class SparseTensor:
    """A sparse N-way tensor stored as coordinates and values (COO).

    Parameters
    ----------
    subs : array_like of int, shape (nnz, ndim)
        Zero-based coordinates of the nonzeros.
    vals : array_like, shape (nnz,)
        Values of the nonzeros.  Stored as float64 unless float32 is given.
    shape : tuple of int, optional
        Size of every mode.  Inferred as ``subs.max(axis=0) + 1`` when omitted.
    sum_duplicates : bool, default=True
        Add up the values of repeated coordinates (always done; ``False`` raises on duplicates).
    dtype : {None, np.float32, np.float64}
        Force a value dtype.

    Notes
    -----
    Construction validates everything: coordinates must be integers inside the shape, values
    finite.  Duplicate coordinates are summed and explicit zeros dropped, so ``nnz`` counts the
    distinct nonzero entries.  Coordinates are sorted lexicographically.

    Examples
    --------
    >>> import numpy as np
    >>> from sktensor_fast import SparseTensor
    >>> X = SparseTensor([[0, 1, 2], [1, 0, 0]], [3.0, 4.0], shape=(2, 2, 3))
    >>> X.shape, X.nnz, X.norm()
    ((2, 2, 3), 2, 5.0)
    """

    __array_priority__ = 10

    def __init__(self, subs, vals, shape=None, *, sum_duplicates=True, dtype=None, copy=True):
        subs = np.asarray(subs)
        vals = np.asarray(vals)
        if vals.ndim != 1:
            vals = vals.reshape(-1) if vals.ndim == 2 and 1 in vals.shape else vals
        if vals.ndim != 1:
            raise ValueError(f"vals must be one-dimensional, got an array of shape {vals.shape}")
        nnz = vals.shape[0]
        if subs.ndim == 1 and subs.size == 0:
            subs = subs.reshape(0, len(shape) if shape is not None else 0)
        if subs.ndim != 2:
            raise ValueError(f"subs must be a 2-D array (nnz x ndim), got {subs.ndim} dimension(s)")
        if subs.shape[0] != nnz:
            raise ValueError(f"subs has {subs.shape[0]} rows but vals has {nnz} entries; "
                             "they must describe the same nonzeros")
        # --- coordinates -------------------------------------------------------------
        if subs.dtype.kind == "b" or subs.dtype.kind not in "iuf":
            if subs.size or subs.dtype.kind not in "iufb":
                raise TypeError(f"subs must hold integer coordinates, got dtype {subs.dtype}")
        if subs.dtype.kind == "f":
            if not np.all(np.isfinite(subs)):
                raise ValueError("subs holds NaN or infinite coordinates")
            if np.any(subs != np.round(subs)):
                raise ValueError("subs holds non-integer coordinates")
        if subs.dtype.kind == "u" and subs.size and subs.max() > np.iinfo(np.int64).max:
            raise ValueError("subs holds coordinates too large for int64")
        subs = subs.astype(np.int64, copy=copy)
        ndim = subs.shape[1]
        if shape is None:
            if nnz == 0:
                raise ValueError("shape must be given for a tensor without nonzeros")
            shape = tuple(int(s) + 1 for s in subs.max(axis=0))
        shape = _check_shape(shape)
        if len(shape) != ndim:
            raise ValueError(f"subs has {ndim} columns but shape {shape} has {len(shape)} modes")
        if ndim < 1:
            raise ValueError("a tensor needs at least one mode")
        if nnz:
            lo = subs.min(axis=0)
            hi = subs.max(axis=0)
            for k in range(ndim):
                if lo[k] < 0:
                    raise ValueError(f"subs holds a negative coordinate ({lo[k]}) in mode {k}")
                if hi[k] >= shape[k]:
                    raise ValueError(f"subs holds coordinate {hi[k]} in mode {k}, outside the "
                                     f"shape {shape} (mode {k} has length {shape[k]})")
        # --- values --------------------------------------------------------------------
        if dtype is not None:
            dtype = np.dtype(dtype)
            if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
                raise TypeError(f"dtype must be float32 or float64, got {dtype}")
        if vals.dtype.kind == "c":
            raise ValueError("Complex data not supported: the values are complex")
        if vals.dtype.kind not in "iufb":
            try:
                vals = vals.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"vals must be numeric, got dtype {vals.dtype}") from exc
        if dtype is None:
            dtype = np.dtype(np.float32) if vals.dtype == np.float32 else np.dtype(np.float64)
        vals = vals.astype(dtype, copy=copy)
        if nnz and not np.all(np.isfinite(vals)):
            bad = int(np.flatnonzero(~np.isfinite(vals))[0])
            raise ValueError(f"vals holds NaN or infinite values (first at position {bad})")
        # --- canonical form: sorted, duplicates summed, zeros dropped ---------------------
        if nnz:
            order = _lexsort(subs, shape)
            subs = subs[order]
            vals = vals[order]
            if nnz > 1:
                dup = np.all(subs[1:] == subs[:-1], axis=1)
                if dup.any():
                    if not sum_duplicates:
                        raise ValueError("subs holds repeated coordinates")
                    start = np.concatenate(([True], ~dup))
                    idx = np.flatnonzero(start)
                    vals = np.add.reduceat(vals, idx).astype(dtype, copy=False)
                    subs = subs[idx]
            keep = vals != 0
            if not keep.all():
                subs = subs[keep]
                vals = vals[keep]
        self.subs = np.ascontiguousarray(subs)
        self.vals = np.ascontiguousarray(vals)
        self.shape = shape

    # ------------------------------------------------------------------ constructors
    @classmethod
    def _from_canonical(cls, subs, vals, shape):
        """Wrap arrays already validated, sorted and free of duplicates/zeros (internal)."""
        obj = cls.__new__(cls)
        obj.subs = np.ascontiguousarray(subs, dtype=np.int64)
        obj.vals = np.ascontiguousarray(vals)
        obj.shape = tuple(int(s) for s in shape)
        return obj

    @classmethod
    def from_dense(cls, array, dtype=None):
        """Build from a dense ndarray (any number of modes >= 1)."""
        array = np.asarray(array)
        if array.dtype.kind == "c":
            raise ValueError("Complex data not supported: the values are complex")
        if array.dtype.kind not in "iufb":
            try:
                array = array.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"array must be numeric, got dtype {array.dtype}") from exc
        if array.ndim < 1:
            raise ValueError("a tensor needs at least one mode; got a 0-d array")
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            raise ValueError("the array holds NaN or infinite values")
        subs = np.argwhere(array != 0)
        vals = array[tuple(subs.T)] if subs.size else np.zeros(0, array.dtype)
        if dtype is None and array.dtype == np.float32:
            dtype = np.float32
        return cls(subs.reshape(-1, array.ndim), vals, array.shape, dtype=dtype)

    @classmethod
    def from_scipy(cls, matrix, dtype=None):
        """Build a 2-way tensor from a ``scipy.sparse`` matrix or array."""
        coo = matrix.tocoo()
        subs = np.stack([np.asarray(coo.row), np.asarray(coo.col)], axis=1)
        vals = np.asarray(coo.data)
        if dtype is None and vals.dtype == np.float32:
            dtype = np.float32
        return cls(subs, vals, coo.shape, dtype=dtype)

    @classmethod
    def from_sparse(cls, array, dtype=None):
        """Build from a pydata ``sparse.COO`` array."""
        coords = np.asarray(array.coords)
        vals = np.asarray(array.data)
        if dtype is None and vals.dtype == np.float32:
            dtype = np.float32
        return cls(coords.T, vals, array.shape, dtype=dtype)

    @classmethod
    def from_pyttb(cls, sptensor, dtype=None):
        """Build from a pyttb ``sptensor``."""
        subs = np.asarray(sptensor.subs)
        vals = np.asarray(sptensor.vals).reshape(-1)
        return cls(subs.reshape(-1, len(sptensor.shape)), vals, tuple(sptensor.shape), dtype=dtype)

    def to_sparse(self):
        """Return a pydata ``sparse.COO`` array (requires the ``sparse`` package)."""
        import sparse
        return sparse.COO(self.subs.T.copy(), self.vals.copy(), shape=self.shape)

    def to_scipy(self, format="csr"):
        """Return a 2-way tensor as a ``scipy.sparse`` matrix."""
        import scipy.sparse as sp
        if self.ndim != 2:
            raise ValueError(f"only a 2-way tensor converts to a scipy.sparse matrix; this one has "
                             f"{self.ndim} modes")
        m = sp.coo_matrix((self.vals, (self.subs[:, 0], self.subs[:, 1])), shape=self.shape)
        return m.asformat(format)

    def to_pyttb(self):
        """Return a pyttb ``sptensor`` (requires pyttb)."""
        import pyttb
        return pyttb.sptensor(self.subs.copy(), self.vals.reshape(-1, 1).astype(np.float64),
                              self.shape)

    def to_dense(self, limit=DENSE_SIZE_LIMIT):
        """Return the tensor as a dense ndarray; refuses more than ``limit`` entries."""
        _check_dense_size(self.shape, limit)
        out = np.zeros(self.shape, dtype=self.dtype)
        if self.nnz:
            out[tuple(self.subs.T)] = self.vals
        return out

    # ------------------------------------------------------------------ properties
    @property
    def ndim(self):
        return len(self.shape)

    @property
    def nnz(self):
        return int(self.vals.shape[0])

    @property
    def dtype(self):
        return self.vals.dtype

    @property
    def size(self):
        """Number of entries of the dense tensor (as a Python int, no overflow)."""
        size = 1
        for s in self.shape:
            size *= s
        return size

    @property
    def density(self):
        return self.nnz / self.size if self.size else 0.0

    def norm(self):
        """Frobenius norm."""
        v = self.vals.astype(np.float64, copy=False)
        return float(np.sqrt(np.dot(v, v)))

    def sum(self):
        return float(self.vals.sum(dtype=np.float64))

    def astype(self, dtype):
        """Return a copy with values of another floating dtype."""
        return SparseTensor._from_canonical(self.subs.copy(), self.vals.astype(dtype), self.shape)

    def copy(self):
        return SparseTensor._from_canonical(self.subs.copy(), self.vals.copy(), self.shape)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return (f"SparseTensor(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype.name}, "
                f"density={self.density:.3g})")

    def __eq__(self, other):
        if not isinstance(other, SparseTensor):
            return NotImplemented
        return (self.shape == other.shape and np.array_equal(self.subs, other.subs)
                and np.array_equal(self.vals, other.vals))

    __hash__ = None

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, key):
        """Select mode-0 slices: ``X[idx]`` with an integer array, boolean mask, slice or int.

        ``X[idx, ...]`` is accepted too (what scikit-learn's cross-validation uses).  The result
        keeps all modes; an integer index returns a tensor whose mode 0 has length 1.
        """
        if isinstance(key, tuple):
            rest = key[1:]
            if len(key) == 0 or any(k is not Ellipsis and not (isinstance(k, slice)
                                                             and k == slice(None)) for k in rest):
                raise IndexError("SparseTensor supports indexing along mode 0 only, "
                                 "as X[idx] or X[idx, ...]")
            key = key[0]
        n0 = self.shape[0]
        if isinstance(key, slice):
            idx = np.arange(n0)[key]
        elif isinstance(key, numbers.Integral) and not isinstance(key, bool):
            if not -n0 <= key < n0:
                raise IndexError(f"index {key} is out of range for mode 0 of length {n0}")
            idx = np.array([key % n0])
        else:
            idx = np.asarray(key)
            if idx.dtype == bool:
                if idx.shape != (n0,):
                    raise IndexError(f"boolean index of shape {idx.shape} does not match mode 0 "
                                     f"of length {n0}")
                idx = np.flatnonzero(idx)
            elif idx.dtype.kind in "iu":
                idx = idx.reshape(-1).astype(np.int64)
                if idx.size and (idx.min() < -n0 or idx.max() >= n0):
                    raise IndexError(f"index out of range for mode 0 of length {n0}")
                idx = np.where(idx < 0, idx + n0, idx)
            elif idx.size == 0:
                idx = np.zeros(0, np.int64)
            else:
                raise IndexError(f"cannot index a SparseTensor with an array of dtype {idx.dtype}")
        # new position(s) of every old slice; a slice may be selected several times
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]
        rows = self.subs[:, 0]
        lo = np.searchsorted(sorted_idx, rows, side="left")
        hi = np.searchsorted(sorted_idx, rows, side="right")
        counts = hi - lo
        src = np.repeat(np.arange(self.nnz), counts)
        # positions within sorted_idx for every copy
        starts = np.repeat(lo, counts)
        offs = np.arange(src.size) - np.repeat(np.cumsum(counts) - counts, counts)
        newrow = order[starts + offs]
        subs = self.subs[src].copy()
        subs[:, 0] = newrow
        shape = (int(idx.size),) + self.shape[1:]
        vals = self.vals[src]
        perm = _lexsort(subs, shape)
        out = SparseTensor._from_canonical(subs[perm], vals[perm], shape)
        # what a backend prepares for these slices is kept with this tensor (cross-validation
        # selects the same slices again for every candidate)
        register_selection(out, self, idx)
        return out


def _check_shape(shape):
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be a tuple of integers, got {shape!r}") from None
    out = []
    for s in shape:
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (numbers.Integral, np.integer)):
            if isinstance(s, (float, np.floating)) and float(s).is_integer():
                s = int(s)
            else:
                raise TypeError(f"shape must hold integers, got {shape!r}")
        if s < 1:
            raise ValueError(f"every mode must have length >= 1, got shape {shape!r}")
        out.append(int(s))
    return tuple(out)


def _lexsort(subs, shape):
    """Order of the rows of ``subs`` in lexicographic order (mode 0 slowest)."""
    nnz, ndim = subs.shape
    if nnz <= 1:
        return np.arange(nnz)
    # linearise when the product of the shape fits in int64, which is much faster than lexsort
    total = 1
    for s in shape:
        total *= s
    if total < 2 ** 62:
        lin = np.zeros(nnz, dtype=np.int64)
        for k in range(ndim):
            lin *= shape[k]
            lin += subs[:, k]
        if np.all(lin[1:] >= lin[:-1]):
            return np.arange(nnz)
        return np.argsort(lin, kind="stable")
    return np.lexsort(subs.T[::-1])


def as_sparse_tensor(X, *, allow_nd=True, dtype=None, name="X"):
    """Convert any supported input to a :class:`SparseTensor` with a clear error otherwise.

    Accepted: SparseTensor, numpy arrays (and array-likes such as nested lists) with at least
    two modes, ``scipy.sparse`` matrices/arrays, pydata ``sparse.COO`` (or any pydata sparse
    array), pyttb ``sptensor`` / ``tensor``.
    """
    if isinstance(X, SparseTensor):
        if dtype is not None and X.dtype != dtype:
            return X.astype(dtype)
        return X
    mod = type(X).__module__ or ""
    try:
        import scipy.sparse as sp
        if sp.issparse(X):
            if X.dtype.kind == "c":
                raise ValueError("Complex data not supported: the values are complex")
            return SparseTensor.from_scipy(X, dtype=dtype)
    except ImportError:  # pragma: no cover
        pass
    if mod.startswith("sparse"):
        if hasattr(X, "asformat"):
            X = X.asformat("coo")
        return SparseTensor.from_sparse(X, dtype=dtype)
    if mod.startswith("pyttb"):
        if type(X).__name__ == "sptensor":
            return SparseTensor.from_pyttb(X, dtype=dtype)
        if type(X).__name__ == "tensor":
            return SparseTensor.from_dense(np.asarray(X.data), dtype=dtype)
        raise TypeError(f"cannot convert a pyttb {type(X).__name__} to a SparseTensor")
    if hasattr(X, "iloc") or hasattr(X, "to_numpy"):
        X = X.to_numpy()
    if isinstance(X, (str, bytes)) or X is None:
        raise TypeError(f"{name} must be a tensor (ndarray, SparseTensor, sparse.COO, "
                        f"scipy.sparse), got {type(X).__name__}")
    try:
        arr = np.asarray(X)
    except Exception as exc:
        raise TypeError(f"{name} cannot be converted to an array: {exc}") from exc
    if arr.dtype.kind == "O":
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must hold numbers: {exc}") from exc
    if arr.dtype.kind in "USV":
        raise ValueError(f"{name} must hold numbers, got dtype {arr.dtype}")
    if arr.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {name} holds complex values")
    if arr.ndim < 2:
        raise ValueError(f"Expected a tensor with at least 2 modes (a 2D array or more), got a "
                         f"{arr.ndim}-d array of shape {arr.shape}. Reshape your data, e.g. "
                         f"array.reshape(-1, 1) if it is a single feature.")
    if arr.shape[0] == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape={arr.shape}) while a minimum of 1 "
                         f"is required: mode 0 of {name} is empty")
    if 0 in arr.shape:
        raise ValueError(f"Found array with 0 feature(s) (shape={arr.shape}) while a minimum of 1 "
                         f"is required: mode {arr.shape.index(0)} of {name} is empty")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinity")
    if dtype is None and arr.dtype != np.float32:
        dtype = np.float64
    return SparseTensor.from_dense(arr, dtype=dtype)


def _warn_nonint(vals, what):
    if vals.size and np.any(vals != np.round(vals)):
        warnings.warn(f"{what}: the data hold non-integer values; the model assumes counts",
                      UserWarning, stacklevel=3)
