"""The OpenCL backend's small dense steps and element-wise reductions (kernels/dense.cl).

:class:`DenseSteps` is a part of :class:`~.backend.OpenCLBackend`: the Gram matrices, the
products with R x R matrices, column norms and inner products over factor matrices, and the
reductions of CP-APR's element-wise steps.  Each reduction runs in blocks on the device and
returns its few partial results to the host, which adds them in a fixed order.
"""
import collections

import numpy as np

__all__ = ["DenseSteps", "DENSE_CL"]

#: the kernel file of the element-wise steps and reductions
DENSE_CL = "dense.cl"


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
        nblocks = int(min(max(1, I // 64), 256))
        return nblocks, -(-I // nblocks)

    def _empty(self, shape, dtype):
        import pyopencl.array as cla
        return cla.empty(self.queue, shape, dtype=dtype, allocator=self.allocator)

    #: host-to-device transfers of small arrays kept in flight at most (their events; the
    #: oldest is waited for when more are enqueued)
    PENDING_UPLOADS = 32

    def _upload_async(self, host, dtype):
        """A device copy of the small host array ``host`` (copied first), enqueued without
        waiting.  PyOpenCL's event of such a transfer keeps the host array alive and, when it
        is freed, waits for the transfer: the events are kept (at most
        :attr:`PENDING_UPLOADS`) until a download has waited for the queue anyway."""
        h = np.array(host, dtype=dtype, order="C", copy=True)
        out = self._empty(h.shape, h.dtype)
        if h.nbytes:
            pending = self.__dict__.setdefault("_pending_uploads", collections.deque())
            pending.append(self.cl.enqueue_copy(self.queue, out.data, h, is_blocking=False))
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
        out = self._empty((K,), dtype)
        self.launch(self.dense_kernel(dtype, "finish_partial"), (K,), np.int32(nblocks),
                    np.int32(K), np.int32(op), partial.data, out.data)
        return out

    def _finish(self, partial, nblocks, K, op, dtype):
        return self._finish_dev(partial, nblocks, K, op, dtype).get().astype(np.float64)

    def _cross_dev(self, A, C):
        I, R = A.shape
        nblocks, rpb = self._blocks(I)
        # zeroed: a block past the last row (nblocks * rpb may exceed I) writes nothing
        partial = self.zeros((nblocks, R * R), A.dtype)
        if I:
            self.launch(self.dense_kernel(A.dtype, "cross_partial"), (R * R, nblocks), np.int64(I),
                        np.int32(R), np.int64(rpb), A.data, C.data, partial.data)
        return self._finish_dev(partial, nblocks, R * R, 0, A.dtype)

    def _cross(self, A, C):
        R = A.shape[1]
        return self._cross_dev(A, C).get().astype(np.float64).reshape(R, R)

    def gram(self, A):
        return self._cross(A, A)

    def _column_dev(self, A, C, op):
        I, R = A.shape
        nblocks, rpb = self._blocks(I)
        partial = self.zeros((nblocks, R), A.dtype)     # zeroed: see _cross_dev
        if I:
            self.launch(self.dense_kernel(A.dtype, "column_partial"), (R, nblocks), np.int64(I),
                        np.int32(R), np.int64(rpb), np.int32(op), A.data, C.data, partial.data)
        return self._finish_dev(partial, nblocks, R, op, A.dtype)

    def _column(self, A, C, op):
        return self._column_dev(A, C, op).get().astype(np.float64)

    def als_update(self, M, grams, mode, first=False):
        """CP-ALS's update of a factor (see :meth:`Backend.als_update`) with one wait for the
        device: the product with the inverse, the column norms and the Gram matrix of the
        product are enqueued together and come back in one download; the columns are then
        scaled on the device and the Gram matrix of the scaled factor is ``S G S`` (S the
        scales), formed on the host."""
        from ..gram import als_weights, hadamard_except, inverse_gram
        U = self.matmul_small(M, inverse_gram(hadamard_except(grams, mode)))
        stat, G = self.als_partials(U, first)
        weights, scale = als_weights(stat, first)
        self.scale_columns(U, scale)
        return U, weights, G * scale[:, None] * scale[None, :]

    def als_partials(self, U, first):
        """``(column sums of squares (first) or largest magnitudes, UᵀU)`` of the device
        matrix ``U``, float64 host arrays, computed together and brought back in one
        download."""
        R = int(U.shape[1])
        stat_d = self._column_dev(U, U, 0 if first else 1)
        gram_d = self._cross_dev(U, U)
        stat = np.empty(R, dtype=U.dtype)
        G = np.empty(R * R, dtype=U.dtype)
        # the first download's event kept until the second, blocking one has waited: one wait
        first = self.cl.enqueue_copy(self.queue, stat, stat_d.data, is_blocking=False)
        self.cl.enqueue_copy(self.queue, G, gram_d.data, is_blocking=True)
        del first
        self._uploads_done()
        return stat.astype(np.float64), G.astype(np.float64).reshape(R, R)

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
                        np.int32(R), np.int32(Q), A.data, Md.data, out.data)
        return out

    def scale_columns(self, A, s):
        I, R = A.shape
        if I:
            sd = self._upload_async(np.asarray(s), A.dtype)
            self.launch(self.dense_kernel(A.dtype, "scale_columns"), (R, I), np.int64(I),
                        np.int32(R), A.data, sd.data)
        return A

    # --- CP-APR primitives ------------------------------------------------------------
    def _vec_reduce(self, op, A, C, p, n):
        """Reduce ``n`` entries with kernel ``vec_partial`` (sum for ops 0/2, max for 1)."""
        # a whole number of work-groups (the kernel's stride is the global size)
        G = self.geometry((min(max(1, n), 16384 if self.is_gpu else 256),))[0][0]
        partial = self.zeros((G,), A.dtype)
        self.launch(self.dense_kernel(A.dtype, "vec_partial"), (G,), np.int64(n), np.int32(op),
                    A.data, C.data, A.dtype.type(p), partial.data)
        part = partial.get().astype(np.float64)
        return float(part.max() if op == 1 else part.sum())

