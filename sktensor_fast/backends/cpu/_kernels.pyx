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
    #include <stdint.h>
    #include <math.h>
    #ifdef _OPENMP
    #define SKTF_KSIMD _Pragma("omp simd")
    #define SKTF_KSIMD_SUM_dot _Pragma("omp simd reduction(+:dot)")
    #define SKTF_KSIMD_SUM_acc _Pragma("omp simd reduction(+:acc)")
    #else
    #define SKTF_KSIMD
    #define SKTF_KSIMD_SUM_dot
    #define SKTF_KSIMD_SUM_acc
    #endif
    /* prefetch distances (nonzeros ahead): coordinates of nonzero j + 2 D, rows of j + D */
    #define SKTF_KPF 16
    #define SKTF_KPF_ROW(P, BYTES)                                                            \\
        { const char *p_ = (const char *) (P);                                                \\
          for (int64_t q_ = 0; q_ < (int64_t) (BYTES); q_ += 64) __builtin_prefetch(p_ + q_); \\
          __builtin_prefetch(p_ + (BYTES) - 1); }

    /* products of the rank-r entries of K rows p[0..K-1], left to right */
    #define SKTF_KPROD_2(p, r) ((p)[0][r] * (p)[1][r])
    #define SKTF_KPROD_3(p, r) (SKTF_KPROD_2(p, r) * (p)[2][r])
    #define SKTF_KPROD_4(p, r) (SKTF_KPROD_3(p, r) * (p)[3][r])
    #define SKTF_KPROD_5(p, r) (SKTF_KPROD_4(p, r) * (p)[4][r])
    /* the Khatri-Rao row of an NM-way nonzero (NM - 1 rows), its model-value product (NM) */
    #define SKTF_KKR_3 SKTF_KPROD_2
    #define SKTF_KKR_4 SKTF_KPROD_3
    #define SKTF_KKR_5 SKTF_KPROD_4
    #define SKTF_KALL_3 SKTF_KPROD_3
    #define SKTF_KALL_4 SKTF_KPROD_4
    #define SKTF_KALL_5 SKTF_KPROD_5

    /* One partition of the COO MTTKRP / Φ of an NM-way tensor, NM = 3..5 (see
       sorted_accumulate): the Khatri-Rao row formed in registers where it is used, runs of
       equal output rows summed in acc, the partition's first row and last run to bnd. */
    #define SKTF_COO_PARTN(FN, T, RR, NM)                                                     \\
    static void FN(const int64_t *subs, const T *vals, const int64_t *perm, int64_t s,        \\
                   int64_t e, T * const *fac, int mode, int64_t R, const T *B, T eps, T *out, \\
                   T *bnd, int64_t *bnd_row, int64_t p, T *scratch)                           \\
    {                                                                                         \\
        const T *fo[(NM) - 1];                     /* the other modes' factors, in order */   \\
        int ko[(NM) - 1];                                                                     \\
        for (int k = 0, q = 0; k < (NM); ++k)                                                 \\
            if (k != mode) { ko[q] = k; fo[q] = fac[k]; ++q; }                                \\
        T accv[32];                       /* ranks up to 32 on the stack, else scratch */     \\
        T * const acc = ((RR) <= 32) ? accv : scratch;                                        \\
        (void) R;                                                                             \\
        int64_t nz = perm ? perm[s] : s;                                                      \\
        const int64_t first_row = subs[nz * (NM) + mode];                                     \\
        int64_t cur = first_row;                                                              \\
        T *dst;                                                                               \\
        SKTF_KSIMD for (int64_t r = 0; r < (RR); ++r) acc[r] = 0;                             \\
        for (int64_t j = s; j < e; ++j) {                                                     \\
            if (perm && j + 2 * SKTF_KPF < e) {                                               \\
                const int64_t q = perm[j + 2 * SKTF_KPF];                                     \\
                __builtin_prefetch(subs + q * (NM));                                          \\
                __builtin_prefetch(vals + q);                                                 \\
            }                                                                                 \\
            if (j + SKTF_KPF < e) {                                                           \\
                const int64_t *qs = subs + (perm ? perm[j + SKTF_KPF] : j + SKTF_KPF) * (NM); \\
                for (int q = 0; q < (NM) - 1; ++q)                                            \\
                    SKTF_KPF_ROW(fo[q] + qs[ko[q]] * (RR), (RR) * sizeof(T))                  \\
            }                                                                                 \\
            nz = perm ? perm[j] : j;                                                          \\
            const int64_t *sub = subs + nz * (NM);                                            \\
            const int64_t row = sub[mode];                                                    \\
            if (row != cur) {                                                                 \\
                if (cur == first_row) { dst = bnd + (2 * p) * (RR); bnd_row[2 * p] = cur; }    \\
                else dst = out + cur * (RR);                                                  \\
                SKTF_KSIMD for (int64_t r = 0; r < (RR); ++r) { dst[r] = acc[r]; acc[r] = 0; } \\
                cur = row;                                                                    \\
            }                                                                                 \\
            const T *pk[(NM) - 1];                                                            \\
            for (int q = 0; q < (NM) - 1; ++q) pk[q] = fo[q] + sub[ko[q]] * (RR);             \\
            T w = vals[nz];                                                                   \\
            if (B) {                                                                          \\
                const T *b = B + row * (RR);                                                  \\
                T dot = 0;                                                                    \\
                SKTF_KSIMD_SUM_dot                                                            \\
                for (int64_t r = 0; r < (RR); ++r) dot = dot + b[r] * SKTF_KKR_##NM(pk, r);   \\
                if (dot < eps) dot = eps;                                                     \\
                w = w / dot;                                                                  \\
            }                                                                                 \\
            SKTF_KSIMD for (int64_t r = 0; r < (RR); ++r) acc[r] += w * SKTF_KKR_##NM(pk, r); \\
        }                                                                                     \\
        if (cur == first_row) { dst = bnd + (2 * p) * (RR); bnd_row[2 * p] = cur; }            \\
        else { dst = bnd + (2 * p + 1) * (RR); bnd_row[2 * p + 1] = cur; }                    \\
        SKTF_KSIMD for (int64_t r = 0; r < (RR); ++r) dst[r] = acc[r];                        \\
    }

    /* Σ x_j log(max(m_j, eps)) over nonzeros s..e of an NM-way tensor (zeros skipped) */
    #define SKTF_COO_LLN(FN, T, RR, NM)                                                       \\
    static double FN(const int64_t *subs, const T *vals, int64_t s, int64_t e,                \\
                     T * const *fac, const T *weights, int64_t R, double eps)                 \\
    {                                                                                         \\
        double tot = 0;                                                                       \\
        (void) R;                                                                             \\
        for (int64_t j = s; j < e; ++j) {                                                     \\
            if (j + SKTF_KPF < e) {                                                           \\
                const int64_t *q = subs + (j + SKTF_KPF) * (NM);                              \\
                for (int k = 0; k < (NM); ++k)                                                \\
                    SKTF_KPF_ROW(fac[k] + q[k] * (RR), (RR) * sizeof(T))                      \\
            }                                                                                 \\
            if (vals[j] == 0) continue;                                                       \\
            const int64_t *sub = subs + j * (NM);                                             \\
            const T *pk[NM];                                                                  \\
            for (int k = 0; k < (NM); ++k) pk[k] = fac[k] + sub[k] * (RR);                    \\
            T acc = 0;                                                                        \\
            SKTF_KSIMD_SUM_acc                                                                \\
            for (int64_t r = 0; r < (RR); ++r) acc = acc + weights[r] * SKTF_KALL_##NM(pk, r); \\
            double m = (double) acc;                                                          \\
            if (m < eps) m = eps;                                                             \\
            tot = tot + (double) vals[j] * log(m);                                            \\
        }                                                                                     \\
        return tot;                                                                           \\
    }

    /* KERNEL at ranks R (any), 8, 16, 32 for NM modes: functions PREFIX<NM>_<SUF>_<rank> */
    #define SKTF_KAT_RANKS(KERNEL, PREFIX, T, SUF, NM)                                        \\
    KERNEL(PREFIX##NM##_##SUF##_rr, T, R, NM)                                                 \\
    KERNEL(PREFIX##NM##_##SUF##_8, T, 8, NM)                                                  \\
    KERNEL(PREFIX##NM##_##SUF##_16, T, 16, NM)                                                \\
    KERNEL(PREFIX##NM##_##SUF##_32, T, 32, NM)
    /* SET PREFIX<NM>_<SUF>_<rank> ARGS for the rank R and NM modes, then return VAL (SET and
       VAL empty for void kernels) */
    #define SKTF_KRANK_CALL(SET, VAL, PREFIX, NM, SUF, ARGS)                                  \\
        switch (R) {                                                                          \\
        case 8: SET PREFIX##NM##_##SUF##_8 ARGS; return VAL;                                  \\
        case 16: SET PREFIX##NM##_##SUF##_16 ARGS; return VAL;                                \\
        case 32: SET PREFIX##NM##_##SUF##_32 ARGS; return VAL;                                \\
        default: SET PREFIX##NM##_##SUF##_rr ARGS; return VAL;                                \\
        }
    /* ... for nmodes = 3, 4 or 5 (the callers check the range) */
    #define SKTF_KNWAY_CALL(SET, VAL, PREFIX, SUF, ARGS)                                      \\
        switch (nmodes) {                                                                     \\
        case 3: { SKTF_KRANK_CALL(SET, VAL, PREFIX, 3, SUF, ARGS) }                           \\
        case 4: { SKTF_KRANK_CALL(SET, VAL, PREFIX, 4, SUF, ARGS) }                           \\
        default: { SKTF_KRANK_CALL(SET, VAL, PREFIX, 5, SUF, ARGS) }                          \\
        }

    /* the entry points (nmodes 3..5, any rank) */
    #define SKTF_COO_FAMILY(T, SUF)                                                           \\
    SKTF_KAT_RANKS(SKTF_COO_PARTN, sktf_coo_part, T, SUF, 3)                                  \\
    SKTF_KAT_RANKS(SKTF_COO_PARTN, sktf_coo_part, T, SUF, 4)                                  \\
    SKTF_KAT_RANKS(SKTF_COO_PARTN, sktf_coo_part, T, SUF, 5)                                  \\
    SKTF_KAT_RANKS(SKTF_COO_LLN, sktf_coo_ll, T, SUF, 3)                                      \\
    SKTF_KAT_RANKS(SKTF_COO_LLN, sktf_coo_ll, T, SUF, 4)                                      \\
    SKTF_KAT_RANKS(SKTF_COO_LLN, sktf_coo_ll, T, SUF, 5)                                      \\
    static void sktf_coo_partn_##SUF(const int64_t *subs, const T *vals, const int64_t *perm, \\
                   int64_t s, int64_t e, T * const *fac, int nmodes, int mode, int64_t R,     \\
                   const T *B, T eps, T *out, T *bnd, int64_t *bnd_row, int64_t p, T *scratch) \\
    {                                                                                         \\
        SKTF_KNWAY_CALL(, , sktf_coo_part, SUF, (subs, vals, perm, s, e, fac, mode, R, B,     \\
                        eps, out, bnd, bnd_row, p, scratch))                                  \\
    }                                                                                         \\
    static double sktf_coo_lln_##SUF(const int64_t *subs, const T *vals, int64_t s,           \\
                   int64_t e, T * const *fac, int nmodes, const T *weights, int64_t R,        \\
                   double eps)                                                                \\
    {                                                                                         \\
        double res_;                                                                          \\
        SKTF_KNWAY_CALL(res_ =, res_, sktf_coo_ll, SUF, (subs, vals, s, e, fac, weights, R,   \\
                        eps))                                                                 \\
    }

    SKTF_COO_FAMILY(double, f64)
    SKTF_COO_FAMILY(float, f32)
    """
    int SKTF_HAVE_OPENMP
    int sktf_max_threads() nogil
    void sktf_coo_partn_f64(const int64_t* subs, const double* vals, const int64_t* perm,
                            int64_t s, int64_t e, double** fac, int nmodes, int mode, int64_t R,
                            const double* B, double eps, double* out, double* bnd,
                            int64_t* bnd_row, int64_t p, double* scratch) noexcept nogil
    void sktf_coo_partn_f32(const int64_t* subs, const float* vals, const int64_t* perm,
                            int64_t s, int64_t e, float** fac, int nmodes, int mode, int64_t R,
                            const float* B, float eps, float* out, float* bnd,
                            int64_t* bnd_row, int64_t p, float* scratch) noexcept nogil
    double sktf_coo_lln_f64(const int64_t* subs, const double* vals, int64_t s, int64_t e,
                            double** fac, int nmodes, const double* weights, int64_t R,
                            double eps) noexcept nogil
    double sktf_coo_lln_f32(const int64_t* subs, const float* vals, int64_t s, int64_t e,
                            float** fac, int nmodes, const float* weights, int64_t R,
                            double eps) noexcept nogil

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
                if 3 <= nmodes <= 5:
                    if floating is double:
                        sktf_coo_partn_f64(&subs[0, 0], &vals[0], &perm[0] if use_perm else NULL,
                                           s, e, fac, nmodes, mode, R, bptr, eps, &out[0, 0],
                                           bnd, bnd_row, p, acc)
                    else:
                        sktf_coo_partn_f32(&subs[0, 0], &vals[0], &perm[0] if use_perm else NULL,
                                           s, e, fac, nmodes, mode, R, bptr, <float> eps,
                                           &out[0, 0], bnd, bnd_row, p, acc)
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
            for b in prange(nchunks, schedule='dynamic'):
                acc = 0
                e = min(b * _SUM_CHUNK + _SUM_CHUNK, nnz)
                if 3 <= nmodes <= 5:
                    if floating is double:
                        acc = sktf_coo_lln_f64(&subs[0, 0], &vals[0], b * _SUM_CHUNK, e, fac,
                                               nmodes, &weights[0] if R > 0 else NULL, R, eps)
                    else:
                        acc = sktf_coo_lln_f32(&subs[0, 0], &vals[0], b * _SUM_CHUNK, e, fac,
                                               nmodes, &weights[0] if R > 0 else NULL, R, eps)
                    part[b] = acc
                    continue
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
