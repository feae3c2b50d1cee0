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
whatever the thread count.  The loop over one partition (and the Poisson data term's loop) is
written once, in C, in ``sktensor_fast/include/sktf_coo.h``.
"""
cimport cython
from cython.parallel cimport prange, parallel
from libc.stdlib cimport malloc, free
from libc.string cimport memset
from libc.stdint cimport int64_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from "sktf_coo.h":
    int SKTF_HAVE_OPENMP
    int sktf_max_threads() nogil
    int64_t sktf_cache_bytes() nogil
    int sktf_coo_simd_level() nogil
    void sktf_coo_partn_f64(const int64_t* subs, const double* vals, const int64_t* perm,
                            int64_t s, int64_t e, double** fac, int nmodes, int mode, int64_t R,
                            const double* B, double eps, double* out, double* bnd,
                            int64_t* bnd_row, int64_t p, double* scratch,
                            int cached) noexcept nogil
    void sktf_coo_partn_f32(const int64_t* subs, const float* vals, const int64_t* perm,
                            int64_t s, int64_t e, float** fac, int nmodes, int mode, int64_t R,
                            const float* B, float eps, float* out, float* bnd,
                            int64_t* bnd_row, int64_t p, float* scratch,
                            int cached) noexcept nogil
    double sktf_coo_lln_f64(const int64_t* subs, const double* vals, int64_t s, int64_t e,
                            double** fac, int nmodes, const double* weights, int64_t R,
                            double eps, double* scratch, int cached) noexcept nogil
    double sktf_coo_lln_f32(const int64_t* subs, const float* vals, int64_t s, int64_t e,
                            float** fac, int nmodes, const float* weights, int64_t R,
                            double eps, float* scratch, int cached) noexcept nogil
    void sktf_coo_krp_f64(double* pi, const int64_t* sub, double** fac, int nmodes, int skip,
                          int64_t R) noexcept nogil
    void sktf_coo_krp_f32(float* pi, const int64_t* sub, float** fac, int nmodes, int skip,
                          int64_t R) noexcept nogil

cdef extern from "sktf_log.h":
    int sktf_log_level
    int sktf_log_init(int level) nogil
    int sktf_log_cpu_level() nogil
    void sktf_log_array(const double* v, double* out, int64_t n, int level) noexcept nogil

ctypedef fused floating:
    float
    double

#: Whether the extension was compiled with OpenMP.
HAVE_OPENMP = bool(SKTF_HAVE_OPENMP)

#: The instance of the data term's vectorised logarithm this module takes (``sktf_log.h``;
#: 0 generic, 1 AVX2 with FMA, 2 AVX-512): the best the CPU runs.
LOG_LEVEL = int(sktf_log_init(-1))


def _set_log_level(int level):
    """Make the data term of this module take the logarithm's instance ``level`` (-1: the
    best the CPU runs; a higher one than that: that).  Returns the level taken.  Only for
    tests and benchmarks (the instances round differently, within the tested bound)."""
    return int(sktf_log_init(level))


def log_levels():
    """The instances of the data term's logarithm this CPU runs: ``range(best + 1)``."""
    return list(range(int(sktf_log_cpu_level()) + 1))


def log_array(const double[::1] v, int level=-1):
    """``log(v)`` by the data term's vectorised logarithm, instance ``level`` (-1: the one the
    data term of this module takes; one the CPU does not run: :class:`ValueError`).  For the
    tests."""
    cdef Py_ssize_t n = v.shape[0]
    if level == -1:
        level = sktf_log_level
    if level < 0 or level > sktf_log_cpu_level():
        raise ValueError(f"level must be -1 or one of {log_levels()}, got {level}")
    out = np.empty(n, dtype=np.float64)
    cdef double[::1] o = out
    if n > 0:
        with nogil:
            sktf_log_array(&v[0], &o[0], n, level)
    return out

#: Bytes of a core's level-2 cache (what the C library reports, else 256 KiB), read once.
CACHE_BYTES = int(sktf_cache_bytes())


#: 2 when the CPU has AVX2 and FMA (the COO kernels of factors in cache then take their
#: instances compiled for them), else 1; read once.
SIMD_LEVEL = int(sktf_coo_simd_level())


cpdef bint factors_cached(Py_ssize_t nbytes):
    """Whether factor matrices of ``nbytes`` bytes in all stay in a core's cache during a
    kernel (at most half of :data:`CACHE_BYTES`): the MTTKRP then skips prefetching their
    rows and, for ranks up to 16 of 3- to 5-way tensors, runs a kernel of its own rank."""
    return nbytes <= CACHE_BYTES // 2


def max_threads():
    """Threads OpenMP would use by default (honours OMP_NUM_THREADS and threadpoolctl)."""
    return sktf_max_threads()


cdef inline void _krp_row(floating* pi, const int64_t* sub, floating** fac, int nmodes,
                          int skip, Py_ssize_t R) noexcept nogil:
    """pi[r] = prod_{k != skip} fac[k][sub[k], r]  (the Khatri-Rao row of one nonzero)."""
    if floating is double:
        sktf_coo_krp_f64(pi, sub, fac, nmodes, skip, R)
    else:
        sktf_coo_krp_f32(pi, sub, fac, nmodes, skip, R)


cdef Py_ssize_t _fill_pointers(list factors, floating** fac, floating dummy,
                               int skip=-1) except -1:
    """Pointers to the factors' data into ``fac``; returns their rows, factor ``skip``'s
    left out."""
    cdef Py_ssize_t k, rows = 0
    cdef floating[:, ::1] F
    cdef const floating[:, ::1] Fc
    for k in range(len(factors)):
        Fc = factors[k]
        if k != skip:
            rows += Fc.shape[0]
        if Fc.shape[0] == 0:
            fac[k] = NULL
        else:
            fac[k] = <floating*> &Fc[0, 0]
    return rows


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
    cdef Py_ssize_t p, r, s, e, row
    cdef floating* pi
    cdef floating* dst
    cdef int cached
    if fac == NULL:
        raise MemoryError()
    try:
        # the factors the kernel reads (those of the other modes): in cache or not
        cached = SIMD_LEVEL if factors_cached(_fill_pointers(factors, fac, dummy, mode) * R
                                              * sizeof(floating)) else 0
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
            # per thread: the accumulator of ranks above 32 and one Khatri-Rao row
            pi = <floating*> malloc(2 * R * sizeof(floating))
            for p in prange(nparts, schedule='dynamic'):
                s = part_ptr[p]
                e = part_ptr[p + 1]
                bnd_row[2 * p] = -1
                bnd_row[2 * p + 1] = -1
                if s >= e:
                    continue
                if floating is double:
                    sktf_coo_partn_f64(&subs[0, 0], &vals[0], &perm[0] if use_perm else NULL,
                                       s, e, fac, nmodes, mode, R, bptr, eps, &out[0, 0], bnd,
                                       bnd_row, p, pi, cached)
                else:
                    sktf_coo_partn_f32(&subs[0, 0], &vals[0], &perm[0] if use_perm else NULL,
                                       s, e, fac, nmodes, mode, R, bptr, <float> eps,
                                       &out[0, 0], bnd, bnd_row, p, pi, cached)
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
            for j in prange(nnz, schedule='dynamic', chunksize=4096):
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
    added in chunk order, so the result is the same for every thread count.  The logarithms
    are taken in blocks (``sktf_log.h``); factors that stay in cache (:func:`factors_cached`)
    are not prefetched, and on CPUs with AVX2 and FMA their kernel is compiled for them.
    """
    cdef Py_ssize_t nnz = subs.shape[0]
    cdef int nmodes = subs.shape[1]
    cdef Py_ssize_t R = weights.shape[0]
    cdef Py_ssize_t nchunks = (nnz + _SUM_CHUNK - 1) // _SUM_CHUNK
    cdef floating** fac = <floating**> malloc(nmodes * sizeof(floating*))
    cdef double* part = <double*> malloc((nchunks if nchunks > 0 else 1) * sizeof(double))
    cdef floating dummy = 0
    cdef Py_ssize_t b, e
    cdef floating* pi
    cdef double acc, total = 0
    cdef int cached
    if fac == NULL or part == NULL:
        free(fac)
        free(part)
        raise MemoryError()
    try:
        cached = SIMD_LEVEL if factors_cached(_fill_pointers(factors, fac, dummy) * R
                                              * sizeof(floating)) else 0
        with nogil, parallel(num_threads=num_threads):
            pi = <floating*> malloc((R if R > 0 else 1) * sizeof(floating))
            for b in prange(nchunks, schedule='dynamic'):
                acc = 0
                e = min(b * _SUM_CHUNK + _SUM_CHUNK, nnz)
                if floating is double:
                    acc = sktf_coo_lln_f64(&subs[0, 0], &vals[0], b * _SUM_CHUNK, e, fac, nmodes,
                                           &weights[0] if R > 0 else NULL, R, eps, pi, cached)
                else:
                    acc = sktf_coo_lln_f32(&subs[0, 0], &vals[0], b * _SUM_CHUNK, e, fac, nmodes,
                                           &weights[0] if R > 0 else NULL, R, eps, pi, cached)
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
            for t in prange(nt, schedule='dynamic', num_threads=nt):
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
            for t in prange(nt, schedule='dynamic', num_threads=nt):
                s = n * t // nt
                e = n * (t + 1) // nt
                for j in range(s, e):
                    d = coords[j]
                    out[cnt[t * L + d]] = j
                    cnt[t * L + d] += 1
        return order
    finally:
        free(cnt)
