"""The window of ``partial_fit`` built on the OpenCL device, where the model lives.

An update of ``partial_fit`` refits the model to the history (slices kept from the previous
update) and the batch together.  On the host this stacks the history's nonzeros and the
batch's and prepares (uploads) the whole window again.  Here the history never leaves the
device:

- the previous window's device nonzeros stay on the device between calls
  (:class:`DeviceHistory`: those arrays and which of their slices are kept);
- an update uploads the batch once (the tensor that ``transform`` of the batch prepares) and
  one kernel (``kernels/window.cl``) gathers the kept slices, renumbered, and appends the
  batch: canonical order without a sort, since the kept slices are listed by ascending row
  and the batch's rows follow them;
- the fit's device tensor is made from those arrays (:meth:`OpenCLTensor.from_device`: the
  orders by the other modes sorted on the device) and handed to the estimator with a host
  handle (:class:`DeviceWindow`) that knows the window's shape and value statistics without
  its nonzeros.  The statistics (Σ x, Σ x², max |x|, integrality) are combined from those of
  the kept slices, computed once per slice when the slice came in (:class:`SliceStats`).

Only the batch's nonzeros and a few numbers per kept slice cross to the device per update.
"""
import types

import numpy as np

from ... import _prepared
from ...tensor import SparseTensor
from .program import header, kernel_source
from .tensor import OpenCLTensor

__all__ = ["SliceStats", "DeviceHistory", "DeviceWindow", "stream_window"]

#: the counts of :func:`~sktensor_fast._prepared.value_stats`, in the column order of
#: :attr:`SliceStats.counts` and :attr:`SliceStats.first`
_COUNTS = ("nonint", "negative", "nonbinary")


class SliceStats:
    """The value statistics of every mode-0 slice of a tensor, from which those of any
    tensor made of whole slices are combined without reading a value again.

    Attributes
    ----------
    nnz : ndarray of int64, shape (n_slices,)
        Nonzeros of each slice.
    sums : ndarray of float64, shape (n_slices, 3)
        Σ x, Σ x² and max |x| of each slice.
    counts : ndarray of int64, shape (n_slices, 3)
        Values that are not integers, negative, and neither 0 nor 1, in each slice.
    first : ndarray of int64, shape (n_slices, 3)
        The position in its slice of the first value of each of those kinds, or -1.
    """

    def __init__(self, nnz, sums, counts, first):
        self.nnz = np.asarray(nnz, dtype=np.int64)
        self.sums = np.asarray(sums, dtype=np.float64).reshape(-1, 3)
        self.counts = np.asarray(counts, dtype=np.int64).reshape(-1, 3)
        self.first = np.asarray(first, dtype=np.int64).reshape(-1, 3)

    @classmethod
    def of(cls, X):
        """The statistics of the slices of the host tensor ``X`` (one pass over its values).

        Parameters
        ----------
        X : SparseTensor
            In canonical order (sorted by mode 0 first).

        Returns
        -------
        SliceStats
        """
        n = int(X.shape[0])
        rows = np.asarray(X.subs[:, 0]) if X.nnz else np.zeros(0, dtype=np.int64)
        v = np.asarray(X.vals, dtype=np.float64)
        nnz = np.bincount(rows, minlength=n).astype(np.int64)
        cuts = np.concatenate([[0], np.cumsum(nnz)])
        sums = np.zeros((n, 3))
        sums[:, 0] = np.bincount(rows, weights=v, minlength=n)
        sums[:, 1] = np.bincount(rows, weights=v * v, minlength=n)
        full = nnz > 0
        if np.any(full):
            sums[full, 2] = np.maximum.reduceat(np.abs(v), cuts[:-1][full])
        counts = np.zeros((n, 3), dtype=np.int64)
        first = np.full((n, 3), -1, dtype=np.int64)
        flags = (v != np.floor(v), v < 0, (v != 0) & (v != 1))
        for k, flag in enumerate(flags):
            at = np.flatnonzero(flag)
            if at.size:
                counts[:, k] = np.bincount(rows[at], minlength=n)
                r, i = np.unique(rows[at], return_index=True)
                first[r, k] = at[i] - cuts[r]
        return cls(nnz, sums, counts, first)

    def __len__(self):
        return int(self.nnz.shape[0])

    @property
    def offsets(self):
        """Where each slice starts among the nonzeros (length n_slices + 1)."""
        return np.concatenate([[0], np.cumsum(self.nnz)]).astype(np.int64)

    def take(self, rows):
        """The statistics of the slices ``rows`` (in that order)."""
        rows = np.asarray(rows, dtype=np.int64)
        return SliceStats(self.nnz[rows], self.sums[rows], self.counts[rows], self.first[rows])

    def concat(self, other):
        """The statistics of these slices followed by those of ``other``."""
        return SliceStats(np.concatenate([self.nnz, other.nnz]),
                          np.concatenate([self.sums, other.sums]),
                          np.concatenate([self.counts, other.counts]),
                          np.concatenate([self.first, other.first]))

    def combined(self):
        """The statistics of the tensor made of these slices, in order, as
        :func:`~sktensor_fast._prepared.value_stats` gives them (the sums may differ from
        that pass over the values in the last bits: they are added in another order)."""
        out = {"sum": float(np.sum(self.sums[:, 0])), "sum_sq": float(np.sum(self.sums[:, 1])),
               "max_abs": float(np.max(self.sums[:, 2])) if len(self) else 0.0}
        start = self.offsets[:-1]
        for k, name in enumerate(_COUNTS):
            out[name] = int(np.sum(self.counts[:, k]))
            hit = np.flatnonzero(self.first[:, k] >= 0)
            out["first_" + name] = int(start[hit[0]] + self.first[hit[0], k]) if hit.size \
                else -1
        return out


def _host_tensor(subs, vals, shape):
    """The host tensor a pickled :class:`DeviceHistory` becomes."""
    return SparseTensor._from_canonical(subs, vals, tuple(shape))


class DeviceHistory:
    """The history of a stream on the device: the slices ``rows`` of a window whose nonzeros
    (canonical order) are the device arrays ``subs`` and ``vals``.

    The window's arrays are kept as they are (no copy when the update ends); the next update
    gathers the kept slices from them.  ``shape`` and ``nnz`` are the history's.
    """

    def __init__(self, backend, subs, vals, shape, slices, rows):
        self.backend = backend
        self.subs, self.vals = subs, vals
        self.slices = slices
        self.rows = np.asarray(rows, dtype=np.int64)
        self.shape = (int(self.rows.size),) + tuple(int(s) for s in shape[1:])
        self.ndim = len(self.shape)
        self.dtype = np.dtype(vals.dtype)

    @property
    def nnz(self):
        return int(np.sum(self.slices.nnz[self.rows]))

    def kept(self):
        """``(statistics of the kept slices, where each starts in the source arrays)``."""
        return self.slices.take(self.rows), self.slices.offsets[self.rows]

    def to_host(self):
        """The history as a host :class:`~sktensor_fast.SparseTensor` (downloads the source
        window; for a later update that is not built on this device)."""
        subs = self.subs.get().astype(np.int64) if self.subs.size else \
            np.zeros((0, self.ndim), dtype=np.int64)
        vals = self.vals.get() if self.vals.size else np.zeros(0, dtype=self.dtype)
        where = np.full(len(self.slices), -1, dtype=np.int64)
        where[self.rows] = np.arange(self.rows.size)
        pick = where[subs[:, 0]]
        keep = pick >= 0
        subs = subs[keep]
        subs[:, 0] = pick[keep]
        return SparseTensor._from_canonical(subs, vals[keep], self.shape)

    def __reduce__(self):
        """Pickled (and deep-copied) as its host tensor: a stream's estimator saved with
        ``pickle`` or ``joblib`` goes on from the host history, wherever it is loaded."""
        H = self.to_host()
        return _host_tensor, (H.subs, H.vals, H.shape)

    def __repr__(self):
        return (f"DeviceHistory(shape={self.shape}, nnz={self.nnz}, "
                f"device='{self.backend.device.name.strip()}')")


class DeviceWindow:
    """The host's handle on a window whose nonzeros are on the device: what the estimators
    read of a tensor (``shape``, ``ndim``, ``nnz``, ``dtype``, ``size``; its value statistics
    and its prepared device tensor through :mod:`sktensor_fast._prepared`).

    ``subs`` and ``vals`` download the nonzeros at the first use (rare paths: CP-APR reviving
    a model that vanished at a nonzero, CP-ALS rescaling data of extreme magnitude);
    ``downloads`` counts those downloads.
    """

    #: the handle names fixed nonzeros: its prepared tensor and statistics are kept with it
    _immutable = True

    def __init__(self, T, slices, fmt, stats=None):
        self._T = T
        self.slices = slices
        self.shape = tuple(T.shape)
        self.ndim = len(self.shape)
        self.nnz = int(T.nnz)
        self.dtype = np.dtype(T.dtype)
        self.downloads = 0
        self._host = None
        _prepared.attach(self, T.backend, fmt, T, stats or slices.combined(),
                         nbytes=self.nnz * (4 * self.ndim + self.dtype.itemsize))

    @property
    def size(self):
        """Number of entries of the dense tensor (a Python int)."""
        size = 1
        for s in self.shape:
            size *= s
        return size

    def _download(self):
        if self._host is None:
            self.downloads += 1
            T = self._T
            subs = T._subs0.get().astype(np.int64) if self.nnz else \
                np.zeros((0, self.ndim), dtype=np.int64)
            vals = T._vals0.get() if self.nnz else np.zeros(0, dtype=self.dtype)
            self._host = (subs, vals)
        return self._host

    @property
    def subs(self):
        """The coordinates (int64, canonical order), downloaded at the first use."""
        return self._download()[0]

    @property
    def vals(self):
        """The values, downloaded at the first use."""
        return self._download()[1]

    def keep(self, rows):
        """The :class:`DeviceHistory` of the slices ``rows`` (ascending) of this window, or
        None when there are none."""
        if len(rows) == 0:
            return None
        return DeviceHistory(self._T.backend, self._T._subs0, self._T._vals0, self.shape,
                             self.slices, rows)

    def __repr__(self):
        return f"DeviceWindow(shape={self.shape}, nnz={self.nnz})"


def _sizes(nnz, ndim, dtype):
    """What :func:`.streamed.plan_streaming` reads of a tensor, for one that is not on the
    host."""
    return types.SimpleNamespace(nnz=int(nnz), ndim=int(ndim), vals=np.empty(0, dtype=dtype))


def _gather_kernel(backend, dtype):
    return backend.kernel(("window", np.dtype(dtype).str), "window_gather",
                          lambda: header(dtype) + kernel_source("window.cl"),
                          what="the window of partial_fit (window.cl)")


def stream_window(backend, history, X, T, fmt):
    """The window of an update of ``partial_fit`` built on the device (see the module).

    Parameters
    ----------
    backend : OpenCLBackend
    history : DeviceHistory, SparseTensor or None
        The history kept by the previous update.
    X : SparseTensor
        The batch (validated).
    T : DeviceTensor
        The batch prepared on ``backend`` (the tensor its mode-0 loadings were solved on).
    fmt : str
        The storage format the estimator prepares (``"coo"``).

    Returns
    -------
    DeviceWindow or None
        None when the window is to be built on the host: the batch or the window is streamed
        through the device, the history is on the host or on another device, its dtype is not
        the batch's, or the device cannot sort the window's nonzeros.
    """
    from . import sort, streamed
    if not isinstance(T, OpenCLTensor):
        return None
    if history is not None and not (isinstance(history, DeviceHistory)
                                    and history.backend is backend
                                    and history.dtype == T.dtype):
        return None
    batch = SliceStats.of(X)
    if history is None:
        # the window is the batch: its device tensor serves as it is
        return DeviceWindow(T, batch, fmt)
    kept, src = history.kept()
    nkept = len(kept)
    shape = (nkept + int(X.shape[0]),) + tuple(int(s) for s in X.shape[1:])
    dst = kept.offsets
    n_keep = int(dst[-1])
    n = n_keep + int(T.nnz)
    N = len(shape)
    if (streamed.plan_streaming(backend, _sizes(n, N, T.dtype)) is not None
            or not sort.usable(backend, shape)):
        return None
    import pyopencl.array as cla
    q = backend.queue
    subs = cla.empty(q, (n, N), np.int32)
    vals = cla.empty(q, (n,), T.dtype)
    if n:
        d_dst = cla.to_device(q, np.ascontiguousarray(dst, dtype=np.int64),
                              allocator=backend.allocator)
        d_src = cla.to_device(q, np.ascontiguousarray(np.append(src, 0), dtype=np.int64),
                              allocator=backend.allocator)
        backend.launch(_gather_kernel(backend, T.dtype), (n,), np.int64(n), np.int64(n_keep),
                       np.int32(N), np.int32(nkept), d_dst.data, d_src.data,
                       history.subs.data if n_keep else T._subs0.data,
                       history.vals.data if n_keep else T._vals0.data,
                       T._subs0.data if T.nnz else subs.data,
                       T._vals0.data if T.nnz else vals.data, subs.data, vals.data)
    slices = kept.concat(batch)
    stats = slices.combined()
    W = OpenCLTensor.from_device(backend, subs, vals, shape, stats["sum_sq"],
                                 interleave=backend._interleave_plan(N, int(subs.shape[0])))
    if backend.layout == "lanes-sorted":
        for m in range(1, N):
            W.sorted_copy(m)
    return DeviceWindow(W, slices, fmt, stats)
