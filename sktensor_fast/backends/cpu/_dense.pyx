# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""The small dense steps of the CPU backend on the package's own OpenMP threads.

``A @ M`` (I x R times R x R) and ``AᵀA`` are tiny multiplications around every MTTKRP.  Handed
to a multithreaded BLAS they start a second pool of threads next to the OpenMP one of the
kernels; on a busy machine the two spin against each other and such a product takes 20x longer
than on one thread.  Here they run on the kernels' threads instead, over blocks of rows of a
fixed size: the Gram matrix is the sum of the blocks' partial products taken in block order, so
it is the same for any number of threads.
"""
cimport cython
from cython.parallel cimport prange
from libc.stdlib cimport calloc, free
from libc.string cimport memset

import numpy as np
cimport numpy as cnp

cnp.import_array()

ctypedef fused floating:
    float
    double

#: rows per block (a fixed size: results do not depend on the thread count)
DEF ROWS = 512


#: widest M handled with a row accumulator on the stack (wider: NumPy)
DEF MAXQ = 128


cdef void _matmul_rows(const floating* A, const floating* M, floating* out, Py_ssize_t lo,
                       Py_ssize_t hi, Py_ssize_t R, Py_ssize_t Q) noexcept nogil:
    cdef Py_ssize_t i, r, q
    cdef floating a
    cdef floating acc[MAXQ]
    cdef const floating* m
    for i in range(lo, hi):
        for q in range(Q):
            acc[q] = 0
        for r in range(R):
            a = A[i * R + r]
            m = M + r * Q
            for q in range(Q):
                acc[q] += a * m[q]
        for q in range(Q):
            out[i * Q + q] = acc[q]


def matmul_small(const floating[:, ::1] A, const floating[:, ::1] M, floating[:, ::1] out,
                 int num_threads=1):
    """``out[...] = A @ M`` for an (I x R) ``A`` and a small (R x Q) ``M``."""
    cdef Py_ssize_t I = A.shape[0], R = A.shape[1], Q = M.shape[1]
    cdef Py_ssize_t nblk = (I + ROWS - 1) // ROWS
    cdef Py_ssize_t b
    cdef int nt = max(1, min(num_threads, nblk))
    if M.shape[0] != R or out.shape[0] != I or out.shape[1] != Q:
        raise ValueError("matmul_small: shapes do not match")
    if Q > MAXQ:
        np.matmul(np.asarray(A), np.asarray(M), out=np.asarray(out))
        return np.asarray(out)
    if I == 0 or Q == 0:
        return np.asarray(out)
    if R == 0:
        np.asarray(out)[...] = 0
        return np.asarray(out)
    cdef const floating* pa = &A[0, 0]
    cdef const floating* pm = &M[0, 0]
    cdef floating* po = &out[0, 0]
    for b in prange(nblk, nogil=True, schedule="static", num_threads=nt):
        _matmul_rows(pa, pm, po, b * ROWS, min((b + 1) * ROWS, I), R, Q)
    return np.asarray(out)


cdef void _gram_rows(const floating* A, double* G, Py_ssize_t lo, Py_ssize_t hi,
                     Py_ssize_t R) noexcept nogil:
    """The block's AᵀA into G (R x R, zeroed by the caller): for every r, the column r of the
    block times the block, row by row into a local accumulator."""
    cdef Py_ssize_t i, r, q
    cdef double a
    cdef double acc[MAXQ]
    cdef const floating* row
    for r in range(R):
        for q in range(R):
            acc[q] = 0
        for i in range(lo, hi):
            row = A + i * R
            a = row[r]
            for q in range(R):
                acc[q] += a * row[q]
        for q in range(R):
            G[r * R + q] = acc[q]


def gram(const floating[:, ::1] A, int num_threads=1):
    """``AᵀA`` in float64 (R x R), blocks of rows added in block order."""
    cdef Py_ssize_t I = A.shape[0], R = A.shape[1]
    cdef Py_ssize_t nblk = (I + ROWS - 1) // ROWS
    cdef Py_ssize_t b, r, q
    cdef int nt = max(1, min(num_threads, nblk))
    out = np.zeros((R, R), dtype=np.float64)
    cdef double[:, ::1] G = out
    cdef double* part
    if I == 0 or R == 0:
        return out
    if R > MAXQ:
        a = np.asarray(A, dtype=np.float64)
        return a.T @ a
    part = <double*> calloc(nblk * R * R, sizeof(double))
    if part == NULL:
        raise MemoryError()
    cdef const floating* pa = &A[0, 0]
    try:
        for b in prange(nblk, nogil=True, schedule="static", num_threads=nt):
            _gram_rows(pa, part + b * R * R, b * ROWS, min((b + 1) * ROWS, I), R)
        for b in range(nblk):
            for r in range(R):
                for q in range(R):
                    G[r, q] += part[b * R * R + r * R + q]
        # exactly symmetric: the lower triangle is the upper one
        for r in range(R):
            for q in range(r):
                G[r, q] = G[q, r]
        return out
    finally:
        free(part)
