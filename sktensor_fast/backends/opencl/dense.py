"""The OpenCL backend's small dense steps and element-wise reductions (kernels/dense.cl).

:class:`DenseSteps` is a part of :class:`~.backend.OpenCLBackend`: the Gram matrices, the
products with R x R matrices, column norms and inner products over factor matrices, and the
reductions of CP-APR's element-wise steps.  Each reduction runs in blocks on the device and
returns its few partial results to the host, which adds them in a fixed order.
"""
import collections

import numpy as np

from ..gram import als_inner, als_matrix, als_weights

__all__ = ["DenseSteps", "DENSE_CL"]

#: the kernel file of the element-wise steps and reductions
DENSE_CL = "dense.cl"


class _PendingALS:
    """An update of :meth:`DenseSteps.als_start` whose downloads are in flight."""
    ready = False

    def __init__(self, U, first, col_scale, handle):
        self.U, self.first, self.col_scale, self.handle = U, first, col_scale, handle


class DenseSteps:
    """Dense steps of the OpenCL backend (mixed into :class:`~.backend.OpenCLBackend`, whose
    ``queue``, ``allocator``, ``kernel`` and ``zeros`` they use)."""

    def dense_kernel(self, dtype, name):
        """Kernel ``name`` of dense.cl for ``dtype``, from the backend's program cache."""
        return self.kernel(("dense", np.dtype(dtype).str), name,
                           lambda: self._header(dtype) + self._source(DENSE_CL),
                           what=f"{DENSE_CL} (for {name})")

    def fill_zero(self, a):
        """a[...] = 0 for a backend array, enqueued without pyopencl.array's event bookkeeping
        (``Array.fill`` records an event per call and waits on old ones every few calls)."""
        if a.nbytes:
            self.cl.enqueue_fill_buffer(self.queue, a.data, np.zeros(1, dtype=a.dtype), 0,
                                        a.nbytes)
        return a

    def _blocks(self, I):
        """``(blocks, rows per block)`` of a blocked reduction over ``I`` rows: every block
        holds at least one row, so the kernel writes every partial (nothing to zero)."""
        if I <= 0:
            return 1, 1
        nblocks = int(min(max(1, I // 64), 256))
        rpb = -(-I // nblocks)
        return -(-I // rpb), rpb

    def _empty(self, shape, dtype):
        import pyopencl.array as cla
        return cla.empty(self.queue, shape, dtype=dtype, allocator=self.allocator)

    def _scratch(self, n, dtype):
        """A device buffer of ``n`` entries of ``dtype`` from the pool, for the partial results
        of a reduction: a raw buffer, not a ``pyopencl.array.Array`` (whose construction
        costs the host tens of µs, several times the launch it serves)."""
        return self.allocator(max(1, int(n)) * np.dtype(dtype).itemsize)

    def _download(self, buf, n, dtype):
        """The first ``n`` entries of the device buffer ``buf``, a float64 host array (one
        blocking transfer)."""
        h = np.empty(int(n), dtype=dtype)
        if n:
            self.cl.enqueue_copy(self.queue, h, buf, is_blocking=True)
        self._uploads_done()
        return h.astype(np.float64)

    #: host-to-device transfers of small arrays kept in flight at most (their events; the
    #: oldest is waited for when more are enqueued)
    PENDING_UPLOADS = 32

    def _upload_async(self, host, dtype):
        """A device copy of the small host array ``host`` (copied first; a raw buffer),
        enqueued without waiting.  PyOpenCL's event of such a transfer keeps the host array
        alive and, when it is freed, waits for the transfer: the events are kept (at most
        :attr:`PENDING_UPLOADS`) until a download has waited for the queue anyway."""
        h = np.array(host, dtype=dtype, order="C", copy=True)
        out = self._scratch(h.size, h.dtype)
        if h.nbytes:
            pending = self.__dict__.setdefault("_pending_uploads", collections.deque())
            pending.append(self.cl.enqueue_copy(self.queue, out, h, is_blocking=False))
            while len(pending) > self.PENDING_UPLOADS:
                pending.popleft()
        return out

    def _uploads_done(self):
        """Forget the pending uploads' events once the queue has finished them (after a
        blocking download of something enqueued after them)."""
        pending = self.__dict__.get("_pending_uploads")
        if pending:
            pending.clear()

    def _finish_dev(self, partial, nblocks, K, op, dtype):
        """The sums (ops 0, 2) or maxima (op 1) over the blocks of ``partial``."""
        out = self._scratch(K, dtype)
        self.launch(self.dense_kernel(dtype, "finish_partial"), (K,), np.int32(nblocks),
                    np.int32(K), np.int32(K if op == 1 else 0), partial, out)
        return out

    def _cross_dev(self, A, C):
        """``AᵀC`` (R x R, row-major) in a device buffer, not waited for."""
        I, R = A.shape
        nblocks, rpb = self._blocks(I)
        partial = self._scratch(nblocks * R * R, A.dtype)
        if I:
            self.launch(self.dense_kernel(A.dtype, "cross_partial"), (R * R, nblocks), np.int64(I),
                        np.int32(R), np.int64(rpb), A.data, C.data, partial)
        else:
            self.cl.enqueue_fill_buffer(self.queue, partial, np.zeros(1, A.dtype), 0,
                                        R * R * A.dtype.itemsize)
        return self._finish_dev(partial, nblocks, R * R, 0, A.dtype)

    def _cross(self, A, C):
        R = A.shape[1]
        return self._download(self._cross_dev(A, C), R * R, A.dtype).reshape(R, R)

    def gram(self, A):
        return self._cross(A, A)

    def _column_dev(self, A, C, op):
        """The column reduction ``op`` of ``A`` (and ``C``) in a device buffer of R entries,
        not waited for (ops as in dense.cl's column_partial)."""
        I, R = A.shape
        nblocks, rpb = self._blocks(I)
        partial = self._scratch(nblocks * R, A.dtype)
        if I:
            self.launch(self.dense_kernel(A.dtype, "column_partial"), (R, nblocks), np.int64(I),
                        np.int32(R), np.int64(rpb), np.int32(op), A.data, C.data, partial)
        else:
            self.cl.enqueue_fill_buffer(self.queue, partial, np.zeros(1, A.dtype), 0,
                                        R * A.dtype.itemsize)
        return self._finish_dev(partial, nblocks, R, op, A.dtype)

    def _column(self, A, C, op):
        return self._download(self._column_dev(A, C, op), A.shape[1], A.dtype)

    def als_update(self, M, grams, mode, first=False):
        """CP-ALS's update of a factor (see :meth:`Backend.als_update`) with one wait for the
        device: :meth:`als_start` and :meth:`als_finish` at once (the product with the
        inverse, the column statistics and the Gram matrix of the product enqueued together
        and brought back in one wait; the columns then scaled on the device, and the Gram
        matrix of the scaled factor ``S G S``, S the scales, formed on the host)."""
        U, pending = self.als_start(M, grams, mode, first)
        weights, G, _, _ = self.als_finish(pending)
        return U, weights, G

    def als_partials_begin(self, U, first, M=None):
        """Enqueue the column statistics of the device matrix ``U`` (sums of squares on the
        ``first`` iteration, else largest magnitudes), ``UᵀU`` and, with ``M``, the column
        inner products of ``U`` and ``M``, with their download, without waiting (two
        launches, dense.cl's ``als_partial`` and ``finish_partial``, and one transfer);
        :meth:`als_partials_end` waits for them and returns them."""
        I, R = (int(n) for n in U.shape)
        K = R + R * R + (R if M is not None else 0)
        nblocks, rpb = self._blocks(I)
        partial = self._scratch(nblocks * K, U.dtype)
        if I:
            self.launch(self.dense_kernel(U.dtype, "als_partial"), (K, nblocks), np.int64(I),
                        np.int32(R), np.int64(rpb), np.int32(0 if first else 1), np.int32(K),
                        U.data, (M if M is not None else U).data, partial)
        else:
            self.cl.enqueue_fill_buffer(self.queue, partial, np.zeros(1, U.dtype), 0,
                                        K * U.dtype.itemsize)
        out = self._scratch(K, U.dtype)
        self.launch(self.dense_kernel(U.dtype, "finish_partial"), (K,),
                    np.int32(nblocks), np.int32(K), np.int32(0 if first else R), partial, out)
        host = np.empty(K, dtype=U.dtype)
        event = self.cl.enqueue_copy(self.queue, host, out, is_blocking=False)
        return R, host, event, M is not None

    def als_partials_end(self, handle):
        """``(stat, G, inner or None)`` of :meth:`als_partials_begin`, float64 host arrays."""
        R, host, event, inner = handle
        event.wait()
        self._uploads_done()
        h = host.astype(np.float64)
        ip = h[R + R * R:] if inner else None
        return h[:R], h[R:R + R * R].reshape(R, R), ip

    def als_start(self, M, grams, mode, first=False, col_scale=None, inner=False):
        """:meth:`Backend.als_start` without waiting: the product with the inverse (and
        ``col_scale``, folded into the R x R matrix), then :meth:`als_partials_begin`;
        :meth:`als_finish` waits for those and scales the columns."""
        U = self.matmul_small(M, als_matrix(grams, mode, col_scale))
        return U, _PendingALS(U, first, col_scale,
                              self.als_partials_begin(U, first, M if inner else None))

    def als_finish(self, pending):
        p = pending
        stat, G, ip = self.als_partials_end(p.handle)
        weights, scale = als_weights(stat, p.first)
        self.scale_columns(p.U, scale)
        p.U = p.handle = None
        return weights, G * scale[:, None] * scale[None, :], scale, \
            als_inner(ip, scale, p.col_scale)

    def column_norms(self, A, ord=2):
        if ord == 2:
            return np.sqrt(self._column(A, A, 0))
        if ord == np.inf:
            return self._column(A, A, 1)
        if ord == 1:
            return self._column(A, A, 2)
        raise ValueError(f"unsupported norm order {ord!r} (1, 2 or inf)")

    def inner(self, A, B):
        return self._column(A, B, 0)

    def matmul_small(self, A, M):
        I, R = A.shape
        M = np.ascontiguousarray(M, dtype=A.dtype)
        Q = M.shape[1]
        out = self._empty((I, Q), A.dtype)
        if I:
            Md = self._upload_async(M, A.dtype)
            self.launch(self.dense_kernel(A.dtype, "matmul_small"), (Q, I), np.int64(I),
                        np.int32(R), np.int32(Q), A.data, Md, out.data)
        return out

    def scale_columns(self, A, s):
        self.scale_columns_of([A], s)
        return A

    def scale_columns_of(self, arrays, s):
        """:meth:`scale_columns` of each device matrix of ``arrays`` (of one dtype and
        number of columns) by the same ``s``, uploaded once."""
        sd = None
        for A in arrays:
            I, R = A.shape
            if I:
                if sd is None:
                    sd = self._upload_async(np.asarray(s), A.dtype)
                self.launch(self.dense_kernel(A.dtype, "scale_columns"), (R, I), np.int64(I),
                            np.int32(R), A.data, sd)
        return arrays

    # --- CP-APR primitives ------------------------------------------------------------
    def _vec_reduce(self, op, A, C, p, n):
        """Reduce ``n`` entries with kernel ``vec_partial`` (sum for ops 0/2, max for 1)."""
        # a whole number of work-groups (the kernel's stride is the global size)
        (G,), (L,) = self.geometry((min(max(1, n), 16384 if self.is_gpu else 256),))
        ngroups = G // L
        partial = self._scratch(ngroups, A.dtype)     # every work-group writes its partial
        self.launch(self.dense_kernel(A.dtype, "vec_partial"), (G,), np.int64(n), np.int32(op),
                    A.data, C.data, A.dtype.type(p), partial,
                    self.cl.LocalMemory(L * np.dtype(A.dtype).itemsize))
        part = self._download(partial, ngroups, A.dtype)
        return float(part.max() if op == 1 else part.sum())

