"""Sparse tensors in coordinate (COO) form.

:class:`SparseTensor` is the data type every estimator and kernel of the package takes.  All
validation of user data happens here, at construction, so that the compiled kernels can trust
every index they see.
"""
import numbers

import numpy as np

from ._prepared import register_selection
from .backends.gcp_plan import linear_index
from ._warnings import warn as _warn

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
        Force a value dtype.  Values that only round to 0 in float32 are dropped with a
        warning; values too large for it raise ValueError.  Repeated coordinates are summed
        in float64 and the sum rounded once to the dtype.
    copy : bool, default=True
        With ``False`` the tensor may keep (read-only views of) the given arrays when they
        already have the right dtype and order; the caller must then not modify them.

    Notes
    -----
    Construction validates everything: coordinates must be integers inside the shape, values
    finite.  Duplicate coordinates are summed (a sum beyond the dtype's range is an error) and
    explicit zeros dropped, so ``nnz`` counts the distinct nonzero entries.  Coordinates are
    sorted lexicographically.

    ``subs``, ``vals`` and ``shape`` are read-only: the compiled kernels trust them, so they
    cannot be changed after validation (writing into the arrays raises ``ValueError``,
    assigning the attributes ``AttributeError``).  Build a new tensor instead.

    Examples
    --------
    >>> import numpy as np
    >>> from sktensor_fast import SparseTensor
    >>> X = SparseTensor([[0, 1, 2], [1, 0, 0]], [3.0, 4.0], shape=(2, 2, 3))
    >>> X.shape, X.nnz, X.norm()
    ((2, 2, 3), 2, 5.0)
    """

    __array_priority__ = 10
    #: names of the indices of every mode (one list, or None, per mode), set by
    #: :meth:`from_dataframe`, ``load_tns`` with label maps and the data sets; None otherwise
    labels = None
    #: names of the modes (one str per mode), or None
    mode_names = None
    #: coordinates, values and shape cannot change once built: what a backend prepares from
    #: the tensor may be kept with it (``_prepared.prepared``)
    _immutable = True

    def __init__(self, subs, vals, shape=None, *, sum_duplicates=True, dtype=None, copy=True):
        from .backends.checks import check_bool
        sum_duplicates, copy = check_bool(sum_duplicates, "sum_duplicates"), check_bool(copy,
                                                                                         "copy")
        if shape is not None:
            shape = _check_shape(shape)
        subs = np.asarray(subs)
        given_subs = subs
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
            frac = subs != np.round(subs)
            if np.any(frac):
                r, k = np.argwhere(frac)[0]
                raise ValueError(f"subs holds non-integer coordinates ({float(subs[r, k])!r} "
                                 f"in mode {k}, row {r})")
        if subs.dtype.kind in "uf" and subs.size:
            # a cast to int64 would wrap these around silently
            lo = subs.min(axis=0).tolist()
            hi = subs.max(axis=0).tolist()
            for k in range(subs.shape[1]):
                if lo[k] < 0:
                    raise ValueError(f"subs holds a negative coordinate ({lo[k]!r}) in mode {k}")
                if hi[k] >= 2 ** 63:
                    raise ValueError(f"subs holds coordinate {hi[k]!r} in mode {k}, too large "
                                     f"for int64")
        if subs.dtype.kind != "i" or subs.dtype.itemsize > 8:
            subs = subs.astype(np.int64)
        ndim = subs.shape[1]
        if shape is None:
            if nnz == 0:
                raise ValueError("shape must be given for a tensor without nonzeros")
            shape = tuple(int(s) + 1 for s in subs.max(axis=0))
            if min(shape) < 1:
                k = int(np.argmin(shape))
                raise ValueError(f"subs holds a negative coordinate ({shape[k] - 1}) in mode {k}")
        shape = _check_shape(shape)
        if len(shape) != ndim:
            raise ValueError(f"subs has {ndim} columns but shape {shape} has {len(shape)} modes")
        if ndim < 1:
            raise ValueError("a tensor needs at least one mode")
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
            except OverflowError as exc:
                raise ValueError(f"vals holds a number too large for float64: {exc}") from None
            except (TypeError, ValueError) as exc:
                raise TypeError(f"vals must be numeric, got dtype {vals.dtype}") from exc
        if dtype is None:
            dtype = np.dtype(np.float32) if vals.dtype == np.float32 else np.dtype(np.float64)
        given = vals
        with np.errstate(over="ignore", under="ignore"):
            vals = vals.astype(dtype, copy=False)
        if nnz and given.dtype.kind == "f" and given.dtype.itemsize > dtype.itemsize:
            lost = int(np.count_nonzero((vals == 0) & (given != 0)))
            if lost:
                _warn(f"{lost} value(s) too small for {dtype.name} round to 0 and are "
                      f"dropped", UserWarning)
        # --- canonical form: sorted, duplicates summed, zeros dropped ---------------------
        # the compiled passes check every coordinate and value, sort (unless sorted already),
        # sum repeats and drop zeros; arrays already canonical come back as they are
        from ._native.canonical import CanonicalError, canonical_from
        arrays = [subs, vals]
        del subs, vals
        try:
            res = canonical_from(arrays, shape, sum_duplicates=sum_duplicates) if nnz else None
        except CanonicalError as exc:
            if exc.kind == "value":
                bad = exc.row
                if given.dtype.kind == "f" and np.isfinite(given[bad]):
                    raise ValueError(f"vals holds {float(given[bad])!r} (at position {bad}), "
                                     f"too large for {dtype.name}") from None
                raise ValueError(str(exc)) from None
            if exc.kind == "overflow":
                raise _SumOverflowError(exc.coord, dtype) from None
            if exc.kind == "repeated":
                raise ValueError("subs holds repeated coordinates (sum_duplicates=False)") \
                    from None
            raise ValueError(str(exc)) from None
        if res is not None:
            subs, vals, _ = res
            # arrays already canonical come back as they are: the tensor keeps its own copy of
            # what the caller may still write (with copy=False, read-only arrays are shared)
            if np.may_share_memory(subs, given_subs) and (copy or given_subs.flags.writeable):
                subs = subs.copy()
            if np.may_share_memory(vals, given) and (copy or given.flags.writeable):
                vals = vals.copy()
            self._set(subs, vals, shape)
            return
        # no nonzeros, or a shape too wide for the compiled sort: NumPy's lexsort
        subs, vals = arrays
        if nnz:
            _check_fallback(subs, vals, given, shape, dtype)
        del given, given_subs
        if nnz:
            order = _lexsort(subs, shape)
            subs = subs[order]
            vals = vals[order]
            if nnz > 1:
                dup = np.all(subs[1:] == subs[:-1], axis=1)
                if dup.any():
                    if not sum_duplicates:
                        first = tuple(int(c) for c in subs[np.flatnonzero(dup)[0]])
                        raise ValueError(f"subs holds repeated coordinates, e.g. {first}")
                    start = np.concatenate(([True], ~dup))
                    idx = np.flatnonzero(start)
                    # summed in float64 and rounded once, as the compiled passes do
                    with np.errstate(over="ignore"):
                        vals = np.add.reduceat(vals, idx, dtype=np.float64).astype(dtype)
                    subs = subs[idx]
                    over = ~np.isfinite(vals)
                    if over.any():
                        raise _SumOverflowError(subs[np.flatnonzero(over)[0]], dtype)
            keep = vals != 0
            if not keep.all():
                subs = subs[keep]
                vals = vals[keep]
        self._set(subs, vals, shape)

    def _set(self, subs, vals, shape):
        # the kernels trust these arrays: they are only ever exposed as read-only views
        self._subs = _read_only(np.ascontiguousarray(subs, dtype=np.int64))
        self._vals = _read_only(np.ascontiguousarray(vals))
        self._shape = tuple(int(s) for s in shape)

    # ------------------------------------------------------------------ read-only data
    @property
    def subs(self):
        """Coordinates of the nonzeros: int64 array of shape ``(nnz, ndim)``, read-only."""
        return self._subs

    @subs.setter
    def subs(self, value):
        _refuse_assignment("subs")

    @property
    def vals(self):
        """Values of the nonzeros: array of shape ``(nnz,)``, read-only."""
        return self._vals

    @vals.setter
    def vals(self, value):
        _refuse_assignment("vals")

    @property
    def shape(self):
        """Length of every mode: a tuple of int."""
        return self._shape

    @shape.setter
    def shape(self, value):
        _refuse_assignment("shape")

    def __getstate__(self):
        state = dict(self.__dict__)
        for key in ("subs", "vals", "shape"):
            state[key] = state.pop("_" + key)
        return state

    def __setstate__(self, state):
        # an unpickled tensor is outside data like any other: validate it again (repeated
        # coordinates are an error here, not summed)
        state = dict(state)
        subs, vals, shape = (state.pop(key) for key in ("subs", "vals", "shape"))
        self.__dict__.update(state)
        self.__init__(subs, vals, shape, sum_duplicates=False, copy=False)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def _from_canonical(cls, subs, vals, shape):
        """Wrap arrays already validated, sorted and free of duplicates/zeros (internal)."""
        obj = cls.__new__(cls)
        obj._set(subs, vals, shape)
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
        import scipy.sparse as sp
        if not sp.issparse(matrix):
            raise TypeError(f"from_scipy takes a scipy.sparse matrix or array, got "
                            f"{type(matrix).__name__}")
        coo = matrix.tocoo()
        subs = np.stack([np.asarray(coo.row), np.asarray(coo.col)], axis=1)
        vals = np.asarray(coo.data)
        if dtype is None and vals.dtype == np.float32:
            dtype = np.float32
        return cls(subs, vals, coo.shape, dtype=dtype)

    @classmethod
    def from_sparse(cls, array, dtype=None):
        """Build from a pydata ``sparse.COO`` array.

        The implicit entries of a SparseTensor are 0, so an array with another ``fill_value``
        (or NaN) is refused rather than silently changed.
        """
        if not all(hasattr(array, a) for a in ("coords", "data", "shape")):
            raise TypeError(f"from_sparse takes a pydata sparse.COO array, got "
                            f"{type(array).__name__}")
        fill = getattr(array, "fill_value", 0)
        if np.ndim(fill) != 0 or np.isnan(fill) or fill != 0:
            raise ValueError(f"the sparse array has fill_value={np.asarray(fill).item()!r}; "
                             f"a SparseTensor's implicit entries are 0, so only fill_value=0 "
                             f"converts exactly (densify it, or subtract the fill value first)")
        coords = np.asarray(array.coords)
        vals = np.asarray(array.data)
        if dtype is None and vals.dtype == np.float32:
            dtype = np.float32
        return cls(coords.T, vals, array.shape, dtype=dtype)

    @classmethod
    def from_pyttb(cls, sptensor, dtype=None):
        """Build from a pyttb ``sptensor``."""
        if not all(hasattr(sptensor, a) for a in ("subs", "vals", "shape")):
            raise TypeError(f"from_pyttb takes a pyttb sptensor, got {type(sptensor).__name__}")
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
        """Return a copy with values of another floating dtype (float32 or float64), checked
        as the constructor checks them: a value too large for the dtype is an error, values
        that round to 0 are dropped with a warning."""
        out = SparseTensor(self.subs, self.vals, self.shape, dtype=dtype)
        out.labels, out.mode_names = getattr(self, "labels", None), getattr(self, "mode_names",
                                                                            None)
        return out

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

    # ------------------------------------------------------------------ mode order, labels
    def transpose(self, axes=None):
        """The tensor with its modes permuted, as :func:`numpy.transpose`.

        ``X.transpose((1, 0, 2))`` makes mode 1 the first mode, so that its slices become the
        samples of an estimator; ``X.T`` reverses the modes.  Labels and mode names, where the
        tensor carries them, are permuted with the modes.

        Parameters
        ----------
        axes : sequence of int, optional
            A permutation of ``range(ndim)``: mode ``k`` of the result is mode ``axes[k]`` of
            this tensor.  Default: the modes reversed.

        Returns
        -------
        SparseTensor

        Examples
        --------
        >>> from sktensor_fast import SparseTensor
        >>> X = SparseTensor([[0, 1, 2], [1, 0, 0]], [3.0, 4.0], shape=(2, 2, 3))
        >>> X.transpose((2, 0, 1)).shape, X.T.shape
        ((3, 2, 2), (3, 2, 2))
        >>> X.transpose((2, 0, 1)).subs.tolist()
        [[0, 1, 0], [2, 0, 1]]
        """
        if axes is None:
            axes = tuple(range(self.ndim))[::-1]
        try:
            axes = tuple(operator_index(a) for a in axes)
        except TypeError:
            raise TypeError(f"axes must be a sequence of integers, got {axes!r}") from None
        axes = tuple(a + self.ndim if a < 0 else a for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"axes {axes} is not a permutation of the {self.ndim} modes "
                             f"(0 to {self.ndim - 1})")
        out = SparseTensor(self.subs[:, list(axes)], self.vals,
                           tuple(self.shape[a] for a in axes), dtype=self.dtype)
        labels, names = self.labels, self.mode_names
        return _attach_labels(out, None if labels is None else [labels[a] for a in axes],
                              None if names is None else [names[a] for a in axes])

    @property
    def T(self):
        """The tensor with its modes reversed (see :meth:`transpose`)."""
        return self.transpose()

    # ------------------------------------------------------------------ tables of events
    @classmethod
    def from_dataframe(cls, df, columns, values=None, dtype=None):
        """Count tensor of a table of events (a pandas DataFrame): one mode per column.

        Every row of ``df`` is one event at the coordinates given by its values in ``columns``;
        entry ``(i_0, …, i_{N-1})`` of the result counts the rows with those values (or, with
        ``values``, sums that column over them).  The indices of each mode follow the natural
        order of the column's values: the category order of a categorical column (so an ordered
        ``Monday … Sunday`` stays so), otherwise sorted (numbers numerically, dates
        chronologically, strings alphabetically).  Needs pandas (``pip install
        sktensor_fast[pandas]``).

        Parameters
        ----------
        df : pandas.DataFrame
            The events, one a row.
        columns : sequence of str
            The columns that give the modes, in mode order.  Rows with a missing value in one of
            them are dropped with a warning.
        values : str, optional
            A numeric column to sum instead of counting rows.
        dtype : {None, np.float32, np.float64}
            Value dtype of the tensor (float64 by default).

        Returns
        -------
        X : SparseTensor
            With ``X.labels`` (one list per mode: index ``j`` of mode ``k`` is ``labels[k][j]``)
            and ``X.mode_names`` (the column names) set.
        labels : list of list
            ``X.labels``.

        Examples
        --------
        >>> import pandas as pd
        >>> from sktensor_fast import SparseTensor
        >>> df = pd.DataFrame({"user": ["ann", "bob", "ann", "ann"],
        ...                    "item": ["tea", "tea", "tea", "jam"],
        ...                    "day": [2, 1, 2, 1]})
        >>> X, labels = SparseTensor.from_dataframe(df, ["user", "item", "day"])
        >>> X.shape, labels
        ((2, 2, 2), [['ann', 'bob'], ['jam', 'tea'], [1, 2]])
        >>> X.to_dense()[0, 1].tolist()          # ann bought tea twice on day 2
        [0.0, 2.0]
        """
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - pandas is an optional dependency
            raise ImportError("SparseTensor.from_dataframe needs pandas: pip install "
                              "'sktensor_fast[pandas]'") from exc
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"df must be a pandas DataFrame, got {type(df).__name__}")
        if isinstance(columns, str):
            columns = [columns]
        columns = list(columns)
        if not columns:
            raise ValueError("columns must name at least one column")
        missing = [c for c in columns + ([values] if values is not None else []) if c not in df]
        if missing:
            raise ValueError(f"df has no column(s) {missing}; its columns are {list(df.columns)}")
        if len(set(columns)) != len(columns):
            raise ValueError(f"columns {columns} names a column twice")
        if values is not None and values in columns:
            raise ValueError(f"values={values!r} is also one of the mode columns")
        for c in columns + ([values] if values is not None else []):
            if not isinstance(df.columns.get_loc(c), (int, np.integer)):
                n = int(np.sum(df.columns.get_indexer_for([c]) >= 0))
                raise ValueError(f"df has {n} columns named {c!r}; a mode or values column must "
                                 f"be one column (rename the others)")
        keep = df[columns].notna().all(axis=1).to_numpy()
        if not keep.any():
            raise ValueError("from_dataframe: df has no rows" if len(df) == 0 else
                             f"from_dataframe: every one of the {len(df)} row(s) of df has a "
                             f"missing value in {columns}: no event to count")
        if not keep.all():
            _warn(f"from_dataframe: {int((~keep).sum())} row(s) with a missing value in "
                  f"{columns} were dropped", UserWarning)
        subs, labels = [], []
        for c in columns:
            col = df[c][keep]
            if isinstance(col.dtype, pd.CategoricalDtype):
                cats = list(col.cat.categories)
                codes = col.cat.codes.to_numpy()
            else:
                try:
                    codes, uniques = pd.factorize(col, sort=True)
                except TypeError as exc:
                    raise TypeError(f"from_dataframe: column {c!r} holds values that cannot be "
                                    f"labels of a mode (hashable values of one kind, such as "
                                    f"strings or numbers): {exc}") from None
                cats = list(uniques)
            cats = [v.item() if isinstance(v, np.generic) else v for v in cats]
            subs.append(np.asarray(codes, dtype=np.int64))
            labels.append(cats)
        subs = np.stack(subs, axis=1) if subs else np.zeros((0, 0), np.int64)
        if values is None:
            vals = np.ones(subs.shape[0])
        else:
            v = df[values][keep]
            if pd.api.types.is_complex_dtype(v):
                raise ValueError(f"Complex data not supported: values column {values!r} holds "
                                 f"complex values")
            if not pd.api.types.is_numeric_dtype(v):
                raise ValueError(f"values column {values!r} must be numeric, got dtype {v.dtype}")
            vals = v.to_numpy(dtype=np.float64, na_value=np.nan)
            if not np.all(np.isfinite(vals)):
                raise ValueError(f"values column {values!r} holds missing, NaN or infinite values")
        shape = tuple(max(1, len(lab)) for lab in labels)
        X = cls(subs, vals, shape, dtype=dtype)
        _attach_labels(X, labels, columns)
        return X, X.labels


_INT64_MAX = int(np.iinfo(np.int64).max)


def _check_fallback(subs, vals, given, shape, dtype):
    """The checks of the compiled passes, for the tensors they do not take (NumPy)."""
    lo = subs.min(axis=0)
    hi = subs.max(axis=0)
    for k in range(subs.shape[1]):
        if lo[k] < 0:
            raise ValueError(f"subs holds a negative coordinate ({lo[k]}) in mode {k}")
        if hi[k] >= shape[k]:
            raise ValueError(f"subs holds coordinate {hi[k]} in mode {k}, outside the "
                             f"shape {shape} (mode {k} has length {shape[k]})")
    if not np.all(np.isfinite(vals)):
        bad = int(np.flatnonzero(~np.isfinite(vals))[0])
        if given.dtype.kind == "f" and np.isfinite(given[bad]):
            raise ValueError(f"vals holds {float(given[bad])!r} (at position {bad}), too "
                             f"large for {dtype.name}")
        raise ValueError(f"vals holds NaN or infinite values (first at position {bad})")


class _SumOverflowError(ValueError):
    """Repeated coordinates whose values add up beyond the largest float of the dtype."""

    def __init__(self, coord, dtype, index_base=0, where=""):
        self.coord = tuple(int(c) for c in coord)
        self.dtype = np.dtype(dtype)
        shown = tuple(c + index_base for c in self.coord)
        base = "zero-based" if index_base == 0 else f"{index_base}-based"
        super().__init__(f"{where}the values repeated at coordinate {shown} ({base}) add up to "
                         f"more than the largest {self.dtype.name}; they cannot be summed")


def _refuse_assignment(name):
    raise AttributeError(
        f"SparseTensor.{name} is read-only: a tensor is validated once, when it is built; "
        f"build a new one instead, e.g. SparseTensor(subs, vals, shape)")


def _read_only(a):
    """A read-only view of ``a``; ``a`` itself (perhaps the caller's array) is left as it is."""
    view = a.view()
    view.flags.writeable = False
    return view


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
        if s > _INT64_MAX:
            raise ValueError(f"mode {len(out)} of shape {shape!r} is longer than 2**63 - 1, the "
                             f"largest length int64 coordinates can index")
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
        lin = linear_index(subs, shape)
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
        _warn(f"{what}: the data hold non-integer values; the model assumes counts",
              UserWarning)


# ---------------------------------------------------------------------------------------------
# Labels and mode names, checked against the tensor's shape: set through here by
# SparseTensor.transpose and .from_dataframe, the readers and the data sets.
def check_labels(labels, shape, what="the tensor"):
    """``labels`` as a list of one list of names (or None) per mode of ``shape``; TypeError
    for a string where lists are expected, ValueError for a count that does not match."""
    if isinstance(labels, (str, bytes)):
        raise TypeError(f"labels must be a list with one list of names (or None) per mode, "
                        f"got a string {labels!r}")
    labels = list(labels)
    if len(labels) != len(shape):
        raise ValueError(f"labels has {len(labels)} entries but {what} has {len(shape)} "
                         f"modes; give one list (or None) per mode")
    for k, lab in enumerate(labels):
        if isinstance(lab, (str, bytes)):
            raise TypeError(f"labels[{k}] must be a list of names (or None), got a string "
                            f"{lab!r}")
    labels = [None if lab is None else list(lab) for lab in labels]
    for k, lab in enumerate(labels):
        if lab is not None and len(lab) != shape[k]:
            raise ValueError(f"labels[{k}] has {len(lab)} names but mode {k} has length "
                             f"{shape[k]}")
    return labels


def _attach_labels(X, labels, mode_names):
    """Set the optional ``labels`` / ``mode_names`` of ``X`` (checked against its shape)."""
    if labels is not None:
        labels = check_labels(labels, X.shape)
    if mode_names is not None:
        mode_names = [str(m) for m in mode_names]
        if len(mode_names) != X.ndim:
            raise ValueError(f"mode_names has {len(mode_names)} entries but the tensor has "
                             f"{X.ndim} modes")
    X.labels = labels
    X.mode_names = mode_names
    return X


def operator_index(a):
    import operator
    if isinstance(a, (bool, np.bool_)):
        raise TypeError("a mode index must be an integer, got a bool")
    return operator.index(a)

