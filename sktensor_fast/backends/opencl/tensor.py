"""A sparse tensor on an OpenCL device (:class:`OpenCLTensor`), built from one upload.

The host narrows the coordinates to int32 once (a compiled parallel copy) and orders the
nonzeros by every mode after the first with a compiled stable counting sort over that narrow
copy (int32 positions).  Then one upload: the coordinates, the values and those orders.
Everything else is built on the device from them by one gather kernel: the chunk-interleaved
copy of every mode that the MTTKRP / Φ kernels read (built in :meth:`OpenCLTensor.interleaved`,
at prepare time for the backend's layout), and the mode-sorted copies
(:attr:`OpenCLTensor.subs`, :attr:`OpenCLTensor.vals`) that the CP-APR row solvers and the
``lanes-sorted`` layout read, built at their first use.  Mode 0 needs no order: a
:class:`~sktensor_fast.SparseTensor` is sorted by it already.
"""
import numpy as np

from ... import _threads
from ..._native import _construct
from ..._prepared import value_stats

__all__ = ["OpenCLTensor", "import_cl", "host_orders", "describe", "narrow_subs"]

INSTALL_HINT = (
    "Install a GPU driver with OpenCL support (NVIDIA, AMD ROCm, Intel compute runtime) or, to run "
    "on the CPU, PoCL: `pip install pocl-binary-distribution`. `sktensor_fast.list_devices()` "
    "shows what PyOpenCL sees.")


def import_cl():
    """PyOpenCL, or an ImportError that says how to get it."""
    try:
        import pyopencl as cl
        import pyopencl.array  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "device='gpu'/'opencl' needs PyOpenCL: `pip install 'sktensor_fast[gpu]'` "
            f"(or `pip install pyopencl`). {INSTALL_HINT}") from exc
    return cl


#: Counting sorts keep one count per key and block: at most this many counts in all.
_COUNTING_MAX = 1 << 25


def host_orders(subs32, shape, num_threads=None):
    """int32 stable orders of the nonzeros by every mode after the first (None for mode 0)."""
    nt = _threads.get_num_threads() if num_threads is None else int(num_threads)
    n = subs32.shape[0]
    orders = [None]
    for mode in range(1, len(shape)):
        out = np.empty(n, dtype=np.int32)
        length = int(shape[mode])
        if length <= max(4 * n, 1 << 16) and length <= _COUNTING_MAX:
            _construct.mode_order(subs32, mode, length, out,
                                  max(1, min(nt, _COUNTING_MAX // max(length, 1))))
        else:
            out[:] = np.argsort(subs32[:, mode], kind="stable")
        orders.append(out)
    return orders


def describe(T, backend, X):
    """Set what a device tensor ``T`` knows of ``X``: ``backend``, ``shape``, ``ndim``,
    ``nnz``, ``dtype``, ``idx_dtype`` (the backend's coordinate type) and ``norm_sq``."""
    T.backend = backend
    T.shape = tuple(int(s) for s in X.shape)
    T.ndim = len(T.shape)
    T.nnz = int(X.nnz)
    T.dtype = np.dtype(X.dtype)
    T.idx_dtype = backend.index_dtype(T.shape)
    # the pass over the values that the estimators' checks make too, kept with X
    T.norm_sq = float(value_stats(X)["sum_sq"])


def narrow_subs(X, num_threads):
    """The coordinates of ``X`` as an (nnz x N) int32 array (a compiled parallel copy)."""
    subs32 = np.empty((int(X.nnz), len(X.shape)), dtype=np.int32)
    if X.nnz:
        _construct.narrow(np.ascontiguousarray(X.subs, dtype=np.int64), subs32, num_threads)
    return subs32


class _ModeCopies:
    """``copies[mode]``: the device array of one kind (coordinates or values) of the copy of
    the nonzeros sorted by ``mode``, built at its first use."""

    def __init__(self, T, which):
        self._T = T
        self._which = which

    def __getitem__(self, mode):
        return self._T.sorted_copy(mode)[self._which]

    def __len__(self):
        return self._T.ndim


class OpenCLTensor:
    """A sparse tensor uploaded to an OpenCL device.

    Attributes
    ----------
    shape, ndim, nnz, dtype, norm_sq, idx_dtype
        As for the CPU formats; coordinates are ``idx_dtype`` (int32) on the device.
    subs, vals : sequence of device arrays
        ``subs[m]`` / ``vals[m]``: the nonzeros sorted by mode ``m`` (``m = 0``: the uploaded
        arrays, in the tensor's order); modes after the first are built at their first use.
    orders : list
        Device int32 order of the nonzeros by every mode after the first (None for mode 0).
    """

    def __init__(self, backend, X, interleave=()):
        cl = import_cl()
        import pyopencl.array as cla
        describe(self, backend, X)
        nt = _threads.get_num_threads()
        v = np.ascontiguousarray(X.vals)
        q = backend.queue
        subs32 = narrow_subs(X, nt)
        # the uploads run while the host sorts; PyOpenCL keeps the host arrays alive until
        # they are copied
        self._subs0 = cla.empty(q, subs32.shape, self.idx_dtype)
        self._vals0 = cla.empty(q, (self.nnz,), self.dtype)
        if self.nnz:
            cl.enqueue_copy(q, self._subs0.data, subs32, is_blocking=False)
            cl.enqueue_copy(q, self._vals0.data, v, is_blocking=False)
        orders = host_orders(subs32, self.shape, nt) if self.nnz else [None] * self.ndim
        self.orders = [None]
        for o in orders[1:]:
            d = cla.empty(q, (self.nnz,), np.int32)
            if self.nnz:
                cl.enqueue_copy(q, d.data, o, is_blocking=False)
            self.orders.append(d)
        self._sorted = {0: (self._subs0, self._vals0)}
        #: chunk-interleaved copies for the MTTKRP / Φ kernels of the layouts "lanes" and
        #: "wide", {(mode, chunk): (subs, vals)}
        self.interleaved = {}
        self.subs = _ModeCopies(self, 0)
        self.vals = _ModeCopies(self, 1)
        for mode, chunk in interleave:
            self.interleaved_copy(mode, chunk)
        q.finish()

    # ------------------------------------------------------------------ device copies
    def _gather(self, mode, chunk):
        import pyopencl.array as cla
        be = self.backend
        q = be.queue
        nchunks = -(-self.nnz // chunk) if chunk else 0
        size = nchunks * chunk if chunk else self.nnz
        try:
            subs = cla.empty(q, (size, self.ndim), self.idx_dtype)
            vals = cla.empty(q, (size,), self.dtype)
        except be.cl.Error as exc:
            need = size * (self.ndim * np.dtype(self.idx_dtype).itemsize + self.dtype.itemsize)
            what = (f"the chunk-interleaved copy of mode {mode}" if chunk else
                    f"the copy sorted by mode {mode}")
            raise MemoryError(
                f"out of device memory for {what} ({need / 2**30:.2f} GiB) on "
                f"'{be.device.name}': {exc}. SKTENSOR_FAST_OCL_LAYOUT=lanes-sorted needs no "
                f"chunk-interleaved copies") from exc
        if self.nnz:
            order = self.orders[mode]
            knl = be._kernel(self.dtype, None, False, "gather_interleave")
            knl(q, (self.nnz,), None, np.int64(self.nnz), np.int64(nchunks), np.int32(chunk),
                np.int32(self.ndim), np.int32(order is not None),
                (order if order is not None else self._subs0).data, self._subs0.data,
                self._vals0.data, subs.data, vals.data)
        return subs, vals

    def sorted_copy(self, mode):
        """``(subs, vals)`` on the device sorted by ``mode`` (built at the first call)."""
        got = self._sorted.get(mode)
        if got is None:
            got = self._sorted[mode] = self._gather(mode, 0)
        return got

    def interleaved_copy(self, mode, chunk):
        """The copy sorted by ``mode`` in chunk-interleaved order (entry k of chunk c at
        k * nchunks + c), built at the first call and kept (one chunk size per mode)."""
        key = (mode, chunk)
        got = self.interleaved.get(key)
        if got is None:
            for old in [k for k in self.interleaved if k[0] == mode]:
                del self.interleaved[old]
            got = self.interleaved[key] = self._gather(mode, chunk)
        return got

    @property
    def nbytes(self):
        n = sum(s.nbytes + v.nbytes for s, v in self._sorted.values())
        n += sum(o.nbytes for o in self.orders if o is not None)
        n += sum(s.nbytes + v.nbytes for s, v in self.interleaved.values())
        return n

    def __repr__(self):
        return (f"OpenCLTensor(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype.name}, "
                f"device='{self.backend.device.name.strip()}')")
