# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Compiled CPU kernels (Cython, OpenMP).

Every function here trusts its inputs: indices are validated by :class:`SparseTensor` and the
shapes of the factor matrices by the Python layer (``backends/cpu/backend.py``) before any
call.  The functions release the GIL and run their loops with ``prange``.

Output rows are accumulated without atomics.  The nonzeros are visited in the order of the
output mode (through a permutation array, as in GenTen's permuted MTTKRP) and cut into
fixed-size partitions.  A partition owns every row that starts and ends inside it and stores
those plainly; only its first and last row may be shared with neighbouring partitions, and
those go to small private buffers that are added in partition order after the parallel loop.
The partition size does not depend on the number of threads, so results are bitwise identical
whatever the thread count.
"""
cimport cython
from cython.parallel cimport prange, parallel
from libc.stdlib cimport malloc, free
from libc.string cimport memset
from libc.math cimport fabs, log
from libc.stdint cimport int64_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    #define SKTF_HAVE_OPENMP 1
    static int sktf_max_threads(void) { return omp_get_max_threads(); }
    #else
    #define SKTF_HAVE_OPENMP 0
    static int sktf_max_threads(void) { return 1; }
    #endif
    """
    int SKTF_HAVE_OPENMP
    int sktf_max_threads() nogil

ctypedef fused floating:
    float
    double

#: Whether the extension was compiled with OpenMP.
HAVE_OPENMP = bool(SKTF_HAVE_OPENMP)


def max_threads():
    """Threads OpenMP would use by default (honours OMP_NUM_THREADS and threadpoolctl)."""
    return sktf_max_threads()


cdef inline void _krp_row(floating* pi, const int64_t* sub, floating** fac, int nmodes,
                          int skip, Py_ssize_t R) noexcept nogil:
    """pi[r] = prod_{k != skip} fac[k][sub[k], r]  (the Khatri-Rao row of one nonzero)."""
    cdef int k, first = 1
    cdef Py_ssize_t r
    cdef const floating* a
    for k in range(nmodes):
        if k == skip:
            continue
        a = fac[k] + sub[k] * R
        if first:
            for r in range(R):
                pi[r] = a[r]
            first = 0
        else:
            for r in range(R):
                pi[r] *= a[r]
    if first:  # a 1-way tensor: the Khatri-Rao product of nothing is a row of ones
        for r in range(R):
            pi[r] = 1


cdef int _fill_pointers(list factors, floating** fac, floating dummy) except -1:
    cdef Py_ssize_t k
    cdef floating[:, ::1] F
    cdef const floating[:, ::1] Fc
    for k in range(len(factors)):
        Fc = factors[k]
        if Fc.shape[0] == 0:
            fac[k] = NULL
        else:
            fac[k] = <floating*> &Fc[0, 0]
    return 0


def sorted_accumulate(const int64_t[:, ::1] subs, const floating[::1] vals,
                      const int64_t[::1] perm, const int64_t[::1] part_ptr,
                      list factors, int mode, floating[:, ::1] out,
                      object B=None, double eps=0.0, int num_threads=1):
    """MTTKRP (``B is None``) or the CP-APR Φ kernel (``B`` given) for one mode.

    Parameters
    ----------
    subs, vals : the tensor in COO form (coordinates of nonzero ``j`` in ``subs[j]``).
    perm : nonzeros sorted by their coordinate in ``mode`` (stable); empty means identity.
    part_ptr : partition boundaries into ``perm`` (length nparts + 1, first 0, last nnz).
    factors : list of C-contiguous (I_k x R) arrays of the same dtype as ``vals``.
    out : (I_mode x R) output, overwritten.
    B : (I_mode x R) array or None.  With B, each nonzero contributes
        ``x / max(<B[i], pi>, eps) * pi`` (Φ); without, ``x * pi`` (MTTKRP).
    """
    cdef Py_ssize_t nnz = vals.shape[0]
    cdef int nmodes = subs.shape[1]
    cdef Py_ssize_t R = out.shape[1]
    cdef Py_ssize_t I = out.shape[0]
    cdef Py_ssize_t nparts = part_ptr.shape[0] - 1
    cdef bint use_perm = perm.shape[0] > 0
    cdef bint phi = B is not None
    cdef floating** fac = <floating**> malloc(nmodes * sizeof(floating*))
    cdef floating* bnd = NULL
    cdef int64_t* bnd_row = NULL
    cdef const floating[:, ::1] Bv
    cdef const floating* bptr = NULL
    cdef floating dummy = 0
    cdef Py_ssize_t p, j, r, i, s, e, nz, row, cur, first_row, last_row
    cdef floating* pi
    cdef floating* acc
    cdef floating* dst
    cdef floating w, dot
    if fac == NULL:
        raise MemoryError()
    try:
        _fill_pointers(factors, fac, dummy)
        if phi:
            Bv = B
            if I > 0:
                bptr = &Bv[0, 0]
        if I > 0:
            with nogil:
                memset(&out[0, 0], 0, I * R * sizeof(floating))
        if nnz == 0 or nparts <= 0 or R == 0:
            return
        bnd = <floating*> malloc(2 * nparts * R * sizeof(floating))
        bnd_row = <int64_t*> malloc(2 * nparts * sizeof(int64_t))
        if bnd == NULL or bnd_row == NULL:
            raise MemoryError()
        with nogil, parallel(num_threads=num_threads):
            pi = <floating*> malloc(2 * R * sizeof(floating))
            acc = pi + R
            for p in prange(nparts, schedule='dynamic'):
                s = part_ptr[p]
                e = part_ptr[p + 1]
                bnd_row[2 * p] = -1
                bnd_row[2 * p + 1] = -1
                if s >= e:
                    continue
                nz = perm[s] if use_perm else s
                first_row = subs[nz, mode]
                nz = perm[e - 1] if use_perm else e - 1
                last_row = subs[nz, mode]
                cur = first_row
                for r in range(R):
                    acc[r] = 0
                for j in range(s, e):
                    nz = perm[j] if use_perm else j
                    row = subs[nz, mode]
                    if row != cur:
                        # flush the finished run of row `cur`
                        if cur == first_row:
                            dst = bnd + (2 * p) * R
                            bnd_row[2 * p] = cur
                        else:
                            dst = &out[cur, 0]
                        for r in range(R):
                            dst[r] = acc[r]
                            acc[r] = 0
                        cur = row
                    _krp_row(pi, &subs[nz, 0], fac, nmodes, mode, R)
                    if phi:
                        dot = 0
                        for r in range(R):
                            dot = dot + bptr[row * R + r] * pi[r]
                        if dot < eps:
                            dot = eps
                        w = vals[nz] / dot
                    else:
                        w = vals[nz]
                    for r in range(R):
                        acc[r] += w * pi[r]
                # the last run of the partition
                if cur == first_row:
                    dst = bnd + (2 * p) * R
                    bnd_row[2 * p] = cur
                else:
                    dst = bnd + (2 * p + 1) * R
                    bnd_row[2 * p + 1] = cur
                for r in range(R):
                    dst[r] = acc[r]
            free(pi)
        # merge the shared rows in partition order (deterministic)
        with nogil:
            for p in range(2 * nparts):
                row = bnd_row[p]
                if row >= 0:
                    dst = &out[row, 0]
                    for r in range(R):
                        dst[r] += bnd[p * R + r]
    finally:
        free(fac)
        free(bnd)
        free(bnd_row)


def kruskal_values(const int64_t[:, ::1] subs, const floating[::1] weights, list factors,
                   floating[::1] out, int num_threads=1):
    """out[j] = sum_r weights[r] * prod_k factors[k][subs[j, k], r]."""
    cdef Py_ssize_t nnz = subs.shape[0]
    cdef int nmodes = subs.shape[1]
    cdef Py_ssize_t R = weights.shape[0]
    cdef floating** fac = <floating**> malloc(nmodes * sizeof(floating*))
    cdef floating dummy = 0
    cdef Py_ssize_t j, r
    cdef floating* pi
    cdef floating s
    if fac == NULL:
        raise MemoryError()
    try:
        _fill_pointers(factors, fac, dummy)
        if nnz == 0:
            return
        if R == 0:
            out[:] = 0
            return
        with nogil, parallel(num_threads=num_threads):
            pi = <floating*> malloc(R * sizeof(floating))
            for j in prange(nnz, schedule='static'):
                _krp_row(pi, &subs[j, 0], fac, nmodes, -1, R)
                s = 0
                for r in range(R):
                    s = s + weights[r] * pi[r]
                out[j] = s
            free(pi)
    finally:
        free(fac)


# nonzeros per partial sum of the reductions below; fixed, so that a sum does not depend on
# the number of threads
cdef enum:
    _SUM_CHUNK = 8192


def poisson_data_term(const int64_t[:, ::1] subs, const floating[::1] vals,
                      const floating[::1] weights, list factors, double eps,
                      int num_threads=1):
    """Σ_j x_j log(max(m_j, eps)) with m_j = Σ_r weights[r] Π_k factors[k][subs[j, k], r].

    The model value of each nonzero is formed and used at once (no array of nnz model values).
    Entries with x_j = 0 contribute nothing.  Partial sums over fixed chunks of nonzeros are
    added in chunk order, so the result is the same for every thread count.
    """
    cdef Py_ssize_t nnz = subs.shape[0]
    cdef int nmodes = subs.shape[1]
    cdef Py_ssize_t R = weights.shape[0]
    cdef Py_ssize_t nchunks = (nnz + _SUM_CHUNK - 1) // _SUM_CHUNK
    cdef floating** fac = <floating**> malloc(nmodes * sizeof(floating*))
    cdef double* part = <double*> malloc((nchunks if nchunks > 0 else 1) * sizeof(double))
    cdef floating dummy = 0
    cdef Py_ssize_t b, j, r, e
    cdef floating* pi
    cdef double m, acc, total = 0
    if fac == NULL or part == NULL:
        free(fac)
        free(part)
        raise MemoryError()
    try:
        _fill_pointers(factors, fac, dummy)
        with nogil, parallel(num_threads=num_threads):
            pi = <floating*> malloc((R if R > 0 else 1) * sizeof(floating))
            for b in prange(nchunks, schedule='static'):
                acc = 0
                e = min(b * _SUM_CHUNK + _SUM_CHUNK, nnz)
                for j in range(b * _SUM_CHUNK, e):
                    if vals[j] == 0:
                        continue
                    _krp_row(pi, &subs[j, 0], fac, nmodes, -1, R)
                    m = 0
                    for r in range(R):
                        m = m + weights[r] * pi[r]
                    if m < eps:
                        m = eps
                    acc = acc + vals[j] * log(m)
                part[b] = acc
            free(pi)
        for b in range(nchunks):
            total += part[b]
        return total
    finally:
        free(fac)
        free(part)


def counting_order(const int64_t[:] coords, Py_ssize_t length, int num_threads=1):
    """Stable order of the entries by ``coords`` (each in [0, length)): a counting sort.

    Each thread counts and then places one contiguous block of the entries, the blocks in
    order, so the result is the stable order whatever the thread count.  The caller bounds
    ``num_threads * length`` (one count per key and thread).
    """
    cdef Py_ssize_t n = coords.shape[0]
    cdef Py_ssize_t nt = max(1, min(num_threads, n))
    cdef Py_ssize_t L = max(length, 1)
    cdef cnp.ndarray order = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = order
    cdef int64_t* cnt = <int64_t*> malloc(nt * L * sizeof(int64_t))
    cdef Py_ssize_t t, j, d, s, e
    cdef int64_t run, c
    if cnt == NULL:
        raise MemoryError()
    try:
        if n == 0:
            return order
        with nogil:
            memset(cnt, 0, nt * L * sizeof(int64_t))
            for t in prange(nt, schedule='static', num_threads=nt):
                s = n * t // nt
                e = n * (t + 1) // nt
                for j in range(s, e):
                    cnt[t * L + coords[j]] += 1
            run = 0
            for d in range(L):
                for t in range(nt):
                    c = cnt[t * L + d]
                    cnt[t * L + d] = run
                    run = run + c
            for t in prange(nt, schedule='static', num_threads=nt):
                s = n * t // nt
                e = n * (t + 1) // nt
                for j in range(s, e):
                    d = coords[j]
                    out[cnt[t * L + d]] = j
                    cnt[t * L + d] += 1
        return order
    finally:
        free(cnt)
