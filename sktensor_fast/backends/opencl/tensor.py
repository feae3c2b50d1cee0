"""A sparse tensor on an OpenCL device (:class:`OpenCLTensor`), built from one upload.

The host narrows the coordinates to int32 (a compiled parallel copy) and uploads them with the
values.  The order of the nonzeros by every mode after the first is a stable radix sort of the
uploaded coordinates on the device (:mod:`.sort`) on GPUs, or a compiled stable counting sort
on the host (int32 positions, uploaded too) elsewhere (:attr:`OpenCLTensor.DEVICE_ORDERS`).
Everything else is built on the device from them by one gather kernel: the chunk-interleaved
copy of every mode that the MTTKRP / Φ kernels read (built in :meth:`OpenCLTensor.interleaved`,
at prepare time for the backend's layout), and the mode-sorted copies
(:attr:`OpenCLTensor.subs`, :attr:`OpenCLTensor.vals`) that the CP-APR row solvers and the
``lanes-sorted`` layout read, built at their first use.  Mode 0 needs no order: a
:class:`~sktensor_fast.SparseTensor` is sorted by it already.

Uploads from ordinary (pageable) host memory run at a fraction of the bus's speed on GPUs.  On
GPUs (:attr:`OpenCLTensor.PINNED`) the uploads go through two page-locked staging buffers kept
by the backend (:class:`Staging`, ``CL_MEM_ALLOC_HOST_PTR`` buffers mapped once): the narrowing
pass writes the coordinates of one chunk of nonzeros straight into one buffer (the values are
copied there by a parallel compiled copy) while the device copies the other, so the host's work
and the transfers overlap, and the sort runs on the device while the values are copied.
"""
import threading

import numpy as np

from ... import _threads
from ..._native import _construct, _hostcopy
from ..._prepared import value_stats
from ._cl import INSTALL_HINT, import_cl

__all__ = ["DeviceTensor", "OpenCLTensor", "Staging", "import_cl", "host_orders", "describe", "narrow_subs",
           "upload_queue", "staging"]

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


def upload_queue(backend):
    """The backend's second command queue, for uploads that overlap the kernels of its own
    queue (created at the first call, kept on the backend)."""
    q = backend.__dict__.get("_upload_queue")
    if q is None:
        q = backend.__dict__["_upload_queue"] = backend.cl.CommandQueue(backend.ctx)
    return q


class Staging:
    """Two page-locked host buffers of ``nbytes`` each that uploads go through in chunks.

    Each buffer is an OpenCL buffer allocated with ``CL_MEM_ALLOC_HOST_PTR`` and mapped once;
    GPU drivers copy from its mapped memory by DMA at the bus's speed and without blocking the
    host.  :meth:`upload` fills one buffer (a callback writes the next chunk of rows there)
    while the device copies the other.  One backend keeps one :class:`Staging` (see
    :func:`staging`); its lock serialises the uploads of threads that share the backend.

    Parameters
    ----------
    backend : OpenCLBackend
        The context and queue the buffers belong to.
    nbytes : int
        Bytes of each buffer.

    Raises
    ------
    pyopencl.Error
        When the driver cannot allocate or map page-locked memory.
    """

    def __init__(self, backend, nbytes):
        cl = backend.cl
        self.cl = cl
        self.nbytes = int(nbytes)
        self.lock = threading.RLock()
        self.arrays = []
        self._bufs = []
        for _ in range(2):
            buf = cl.Buffer(backend.ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.ALLOC_HOST_PTR,
                            self.nbytes)
            arr, _ = cl.enqueue_map_buffer(backend.queue, buf, cl.map_flags.WRITE, 0,
                                           (self.nbytes,), np.uint8, is_blocking=True)
            self._bufs.append(buf)
            self.arrays.append(arr)
        self._events = [None, None]
        self._next = 0

    def upload(self, queue, dst, nrows, row_bytes, fill, offset=0):
        """Copy ``nrows`` rows of ``row_bytes`` bytes to device buffer ``dst`` (from byte
        ``offset``) in chunks: ``fill(lo, hi, out)`` writes rows ``lo:hi`` into the uint8
        array ``out`` (a staging buffer), then ``queue`` copies it without blocking.

        Returns
        -------
        pyopencl.Event or None
            The last copy's event (None when ``nrows`` is 0); ``queue`` is flushed.
        """
        cl = self.cl
        per = max(self.nbytes // int(row_bytes), 1)
        if per * row_bytes > self.nbytes:
            raise ValueError(f"a row of {row_bytes} bytes does not fit the staging buffers "
                             f"of {self.nbytes} bytes")
        ev = None
        with self.lock:
            for lo in range(0, int(nrows), per):
                hi = min(lo + per, int(nrows))
                s = self._next
                self._next ^= 1
                if self._events[s] is not None:      # its last copy must be done
                    self._events[s].wait()
                view = self.arrays[s][:(hi - lo) * row_bytes]
                fill(lo, hi, view)
                ev = self._events[s] = cl.enqueue_copy(
                    queue, dst, view, dst_offset=offset + lo * row_bytes, is_blocking=False)
                queue.flush()
        return ev

    def finish(self):
        """Wait until no copy reads the staging buffers."""
        with self.lock:
            for ev in self._events:
                if ev is not None:
                    ev.wait()


def staging(backend, nbytes):
    """The backend's :class:`Staging` (buffers of ``nbytes``, made at the first call and kept;
    made anew when ``nbytes`` changes), or None when the driver refuses page-locked memory (then
    never asked again for this backend)."""
    cl = backend.cl
    st = backend.__dict__.get("_staging")
    if st is False:
        return None
    if st is not None and st.nbytes == int(nbytes):
        return st
    if st is not None:
        st.finish()
    try:
        st = Staging(backend, nbytes)
    except (cl.Error, MemoryError):
        st = False
    backend.__dict__["_staging"] = st
    return st or None


def _copy_fill(src):
    """A :meth:`Staging.upload` callback copying rows of the contiguous array ``src``."""
    nt = _threads.get_num_threads()
    flat = src.reshape(src.shape[0], -1) if src.ndim > 1 else src

    def fill(lo, hi, out):
        _hostcopy.copy_bytes(flat[lo:hi].reshape(-1).view(np.uint8), out, nt)
    return fill


def _narrow_fill(subs64, ndim):
    """A :meth:`Staging.upload` callback narrowing rows of int64 coordinates into int32."""
    nt = _threads.get_num_threads()

    def fill(lo, hi, out):
        _construct.narrow(subs64[lo:hi], out.view(np.int32).reshape(hi - lo, ndim), nt)
    return fill


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


class DeviceTensor:
    """What the OpenCL backend's kernels run over: a tensor resident on the device
    (:class:`OpenCLTensor`) or one streamed through it in blocks
    (:class:`~.streamed.StreamedTensor`).

    The backend's MTTKRP / Φ, model values and Poisson data term call the methods below: a
    resident tensor runs the backend's kernels over all its nonzeros at once, a streamed one
    runs them block by block.  Kernels that read the nonzeros in other ways (CP-APR's row
    solvers, GCP) call :meth:`require_resident` first.  Set by :func:`describe`: ``backend``,
    ``shape``, ``ndim``, ``nnz``, ``dtype``, ``idx_dtype``, ``norm_sq``.
    """

    #: whether the nonzeros stay on the host and pass through the device in blocks
    streamed = False

    def require_resident(self, what):
        """Raise ``NotImplementedError`` naming ``what`` when it cannot run on this tensor
        (one streamed through the device); nothing on a resident tensor."""

    def accumulate(self, factors, mode, B, eps, out, before=None):
        """MTTKRP (``B`` None) or Φ of ``mode`` into ``out`` (None: a new array); ``factors``
        and ``B`` device arrays of the tensor's dtype, checked by the backend; ``before``
        called just before the kernels are enqueued (:meth:`~.accumulate.SparseKernels.
        mttkrp_after`)."""
        return self.backend._launch_accumulate(self, factors, mode, B, eps, out,
                                               before=before)

    def model_values(self, weights, factors):
        """The model's values at the nonzeros, in the order of ``subs[0]``."""
        return self.backend._launch_model_values(self, weights, factors)

    def poisson_data_term(self, weights, factors, eps=0.0):
        """Σ x log(max(m, eps)) over the nonzeros."""
        return self.backend._launch_poisson_data_term(self, weights, factors, eps)


class OpenCLTensor(DeviceTensor):
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

    #: where the orders by the modes after the first are computed: True on the device (a radix
    #: sort of the uploaded coordinates, :mod:`.sort`), False on the host (a compiled counting
    #: sort, then uploaded), None: on GPU devices whose local memory holds the sort's tiles
    DEVICE_ORDERS = None

    #: uploads through the backend's page-locked staging buffers (:class:`Staging`): True,
    #: False, or None: on GPU devices (a driver that refuses page-locked memory gets the plain
    #: uploads)
    PINNED = None

    #: bytes of each of the two staging buffers
    STAGE_BYTES = 32 << 20

    def __init__(self, backend, X, interleave=()):
        import pyopencl.array as cla
        from . import sort
        cl = import_cl()
        describe(self, backend, X)
        q = backend.queue
        n = self.nnz
        pinned = backend.is_gpu if self.PINNED is None else bool(self.PINNED)
        on_device = backend.is_gpu if self.DEVICE_ORDERS is None else bool(self.DEVICE_ORDERS)
        on_device = on_device and sort.usable(backend, self.shape)
        self._subs0 = cla.empty(q, (n, self.ndim), self.idx_dtype)
        self._vals0 = cla.empty(q, (n,), self.dtype)
        self.orders = [None] + [cla.empty(q, (n,), np.int32) for _ in range(1, self.ndim)]
        #: how the tensor was uploaded: {"pinned": bool, "device_orders": bool}
        self.upload_info = {"pinned": False, "device_orders": on_device}
        if n:
            st = staging(backend, self.STAGE_BYTES) if pinned else None
            self.upload_info["pinned"] = st is not None
            tq = upload_queue(backend)
            if st is not None:
                with st.lock:
                    ready = self._upload_staged(st, tq, X, on_device)
            else:
                ready = self._upload_plain(tq, X, on_device)
            self._end_sorts()
            # every later command of the backend's queue runs after the uploads
            cl.enqueue_barrier(q, wait_for=ready)
            q.flush()
        self._build_copies(interleave)
        if n:
            upload_queue(backend).finish()

    @classmethod
    def from_device(cls, backend, subs, vals, shape, norm_sq, interleave=()):
        """A tensor made of nonzeros already on the device: nothing crosses from the host.

        The orders by the modes after the first are sorted on the device (:mod:`.sort`)
        whatever :attr:`DEVICE_ORDERS` says (the host holds no coordinates to sort), then the
        copies for the kernels are gathered as for an uploaded tensor, so that the result
        equals ``OpenCLTensor(backend, X, interleave)`` of the host tensor ``X`` holding the
        same nonzeros.

        Parameters
        ----------
        backend : OpenCLBackend
            The device the arrays live on.
        subs : pyopencl.array.Array
            ``(nnz, len(shape))`` int32 coordinates in canonical order (sorted by mode 0
            first, no duplicates); kept, not copied.
        vals : pyopencl.array.Array
            The ``nnz`` values (float32 or float64); kept, not copied.
        shape : tuple of int
            The tensor's shape.
        norm_sq : float
            Σ x² of the values (the caller knows it without reading them again).
        interleave : sequence of (mode, chunk)
            The chunk-interleaved copies to build now (see :meth:`interleaved_copy`).

        Returns
        -------
        OpenCLTensor
        """
        import pyopencl.array as cla
        from . import sort
        shape = tuple(int(s) for s in shape)
        n = int(vals.shape[0])
        if subs.shape != (n, len(shape)) or subs.dtype != np.int32:
            raise ValueError(f"subs must be an ({n}, {len(shape)}) int32 device array, got "
                             f"{subs.shape} {subs.dtype}")
        if not sort.usable(backend, shape):
            raise ValueError(f"the device '{backend.device.name.strip()}' cannot sort the "
                             f"nonzeros of a tensor of shape {shape}; build it from the host")
        T = cls.__new__(cls)
        T.backend = backend
        T.shape = shape
        T.ndim = len(shape)
        T.nnz = n
        T.dtype = np.dtype(vals.dtype)
        T.idx_dtype = backend.index_dtype(shape)
        T.norm_sq = float(norm_sq)
        T._subs0, T._vals0 = subs, vals
        T.orders = [None] + [cla.empty(backend.queue, (n,), np.int32)
                             for _ in range(1, T.ndim)]
        T.upload_info = {"pinned": False, "device_orders": True, "from_device": True}
        if n:
            # the backend's queue is in order: the sorts run after whatever wrote subs
            T._device_orders(None)
            T._end_sorts()
        T._build_copies(interleave)
        return T

    def _build_copies(self, interleave):
        """The mode-0 copy (the nonzeros as they are), the accessors of the others and the
        chunk-interleaved copies ``interleave``; returns when they are built."""
        self._sorted = {0: (self._subs0, self._vals0)}
        #: chunk-interleaved copies for the MTTKRP / Φ kernels of the layouts "lanes" and
        #: "wide", {(mode, chunk): (subs, vals)}
        self.interleaved = {}
        #: the kernel objects of this tensor's MTTKRP / Φ launches with the arguments they were
        #: last given, and their boundary buffers (:class:`~.accumulate.Launcher`)
        self.launchers = {}
        #: {mode: whether every coordinate of the mode holds a nonzero} (:meth:`rows_complete`)
        self._complete = {}
        self.subs = _ModeCopies(self, 0)
        self.vals = _ModeCopies(self, 1)
        for mode, chunk in interleave:
            self.interleaved_copy(mode, chunk)
        self.backend.queue.finish()

    def _device_orders(self, wait_for):
        """Enqueue the device sorts of the modes after the first (after ``wait_for``); their
        scratch is kept in ``_sort_job`` until :meth:`_end_sorts`."""
        from . import sort
        be = self.backend
        self._sort_job = sort.enqueue_mode_orders(
            be, be.queue, self._subs0.data, self.nnz, self.shape,
            [None] + [o.data for o in self.orders[1:]], wait_for=wait_for)
        be.queue.flush()

    def _end_sorts(self):
        """Wait for the device sorts and release their scratch (before the copies for the
        kernels are allocated, so that the two never take device memory together)."""
        job = self.__dict__.pop("_sort_job", None)
        if job is not None and job[0] is not None:
            job[0].wait()

    def _upload_staged(self, st, tq, X, on_device):
        """Uploads through the staging buffers ``st`` on queue ``tq``; the events that the
        backend's queue must wait for."""
        n, N = self.nnz, self.ndim
        nt = _threads.get_num_threads()
        v = np.ascontiguousarray(X.vals)
        if on_device:
            subs64 = np.ascontiguousarray(X.subs, dtype=np.int64)
            ev = st.upload(tq, self._subs0.data, n, 4 * N, _narrow_fill(subs64, N))
            # the sorts run on the device while the host copies the values
            self._device_orders([ev])
            return [st.upload(tq, self._vals0.data, n, v.itemsize, _copy_fill(v))]
        subs32 = narrow_subs(X, nt)
        evs = [st.upload(tq, self._subs0.data, n, 4 * N, _copy_fill(subs32))]
        evs.append(st.upload(tq, self._vals0.data, n, v.itemsize, _copy_fill(v)))
        orders = host_orders(subs32, self.shape, nt)
        del subs32
        for o, d in zip(orders[1:], self.orders[1:]):
            evs.append(st.upload(tq, d.data, n, 4, _copy_fill(o)))
        return evs

    def _upload_plain(self, tq, X, on_device):
        """Uploads from the host arrays (PyOpenCL keeps them alive until they are copied)."""
        cl = self.backend.cl
        nt = _threads.get_num_threads()
        subs32 = narrow_subs(X, nt)
        v = np.ascontiguousarray(X.vals)
        ev = cl.enqueue_copy(tq, self._subs0.data, subs32, is_blocking=False)
        tq.flush()
        if on_device:
            self._device_orders([ev])
            evs = []
        else:
            evs = [ev]
        evs.append(cl.enqueue_copy(tq, self._vals0.data, v, is_blocking=False))
        tq.flush()
        if not on_device:
            orders = host_orders(subs32, self.shape, nt)
            for o, d in zip(orders[1:], self.orders[1:]):
                evs.append(cl.enqueue_copy(tq, d.data, o, is_blocking=False))
            tq.flush()
        return evs

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
            knl = be.dense_kernel(self.dtype, "gather_interleave")
            be.launch(knl, (self.nnz,), np.int64(self.nnz), np.int64(nchunks), np.int32(chunk),
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
            # the launchers hold the arguments of their last launch: the old copy with them
            self.launchers.clear()
            got = self.interleaved[key] = self._gather(mode, chunk)
        return got

    def rows_complete(self, mode):
        """Whether every coordinate of ``mode`` holds a nonzero, so that MTTKRP and Φ write
        every row of their output and need no zero fill first; counted on the device at the
        first call for the mode (one pass over the coordinates and one integer read back) and
        kept."""
        got = self._complete.get(mode)
        if got is None:
            I = int(self.shape[mode])
            got = False
            if 0 < I <= self.nnz:
                import pyopencl.array as cla
                be = self.backend
                seen = cla.zeros(be.queue, (I,), np.int32)
                count = cla.zeros(be.queue, (1,), np.int32)
                be.launch(be.dense_kernel(self.dtype, "count_rows"), (self.nnz,),
                          np.int64(self.nnz), np.int32(self.ndim), np.int32(mode),
                          self._subs0.data, seen.data, count.data)
                got = int(count.get()[0]) == I
            self._complete[mode] = got
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
