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
from libc.stdint cimport int64_t
from libc.math cimport sqrt, fabs, isfinite

import numpy as np
cimport numpy as cnp

cnp.import_array()

ctypedef fused floating:
    float
    double

cdef extern from "sktf_dense.h":
    int sktf_matmul_rows_f64(const double* A, const double* M, double* out, int64_t lo,
                             int64_t hi, int64_t R) noexcept nogil
    int sktf_matmul_rows_f32(const float* A, const float* M, float* out, int64_t lo,
                             int64_t hi, int64_t R) noexcept nogil
    int sktf_gram_rows_f64(const double* A, double* G, int64_t lo, int64_t hi,
                           int64_t R) noexcept nogil
    int sktf_gram_rows_f32(const float* A, double* G, int64_t lo, int64_t hi,
                           int64_t R) noexcept nogil
    int sktf_dense_level
    int sktf_dense_avx2() noexcept nogil

def _use_avx2(on=None):
    """Whether the instances of ranks 1..16 run their AVX2 builds (CPUs that have AVX2), and
    with ``on`` given, set it (False: the baseline builds; True: AVX2 where the CPU has it).
    Returns the old setting.  Only for tests and benchmarks: both give the same bits."""
    global sktf_dense_level
    old = bool(sktf_dense_avx2())
    if on is not None:
        sktf_dense_level = -1
        if not on or not sktf_dense_avx2():
            sktf_dense_level = 0
    return old


#: rows per block (a fixed size: results do not depend on the thread count)
DEF ROWS = 512


#: widest M handled with a row accumulator on the stack (wider: NumPy)
DEF MAXQ = 128

#: the largest rank of :func:`als_update`
MAX_RANK = MAXQ


cdef void _matmul_rows(const floating* A, const floating* M, floating* out, Py_ssize_t lo,
                       Py_ssize_t hi, Py_ssize_t R, Py_ssize_t Q) noexcept nogil:
    cdef Py_ssize_t i, r, q
    cdef floating a
    cdef floating acc[MAXQ]
    cdef const floating* m
    if Q == R:              # ranks 1..16: the instances of sktf_dense.h (same arithmetic)
        if floating is double:
            if sktf_matmul_rows_f64(A, M, out, lo, hi, R):
                return
        else:
            if sktf_matmul_rows_f32(A, M, out, lo, hi, R):
                return
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
    if floating is double:  # ranks 1..16: the instances of sktf_dense.h (same arithmetic)
        if sktf_gram_rows_f64(A, G, lo, hi, R):
            return
    else:
        if sktf_gram_rows_f32(A, G, lo, hi, R):
            return
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


cdef void _block_max(const floating* U, double* m, Py_ssize_t lo, Py_ssize_t hi,
                     Py_ssize_t R) noexcept nogil:
    """m[r] = the largest of m[r] and |U[i, r]| over the rows lo..hi (NaN entries ignored)."""
    cdef Py_ssize_t i, r
    for i in range(lo, hi):
        for r in range(R):
            m[r] = max(m[r], fabs(U[i * R + r]))


cdef void _scale_rows(floating* U, const floating* s, Py_ssize_t lo, Py_ssize_t hi,
                      Py_ssize_t R) noexcept nogil:
    """U[i, r] *= s[r] for the rows lo..hi."""
    cdef Py_ssize_t i, r
    for i in range(lo, hi):
        for r in range(R):
            U[i * R + r] = U[i * R + r] * s[r]


cdef void _sum_blocks(const double* part, Py_ssize_t nblk, Py_ssize_t R,
                      double* G) noexcept nogil:
    """G (R x R, C order) += the blocks' Gram products ``part`` in block order, then the lower
    triangle set to the upper one (exactly symmetric)."""
    cdef Py_ssize_t b, r, q
    for b in range(nblk):
        for r in range(R):
            for q in range(R):
                G[r * R + q] += part[b * R * R + r * R + q]
    for r in range(R):
        for q in range(r):
            G[r * R + q] = G[q * R + r]


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
        _sum_blocks(part, nblk, R, &G[0, 0])
        return out
    finally:
        free(part)


# ---------------------------------------------------------------------- CP-ALS's R x R steps

#: sweeps of the Jacobi eigenvalue iteration before it gives up (it converges in a few)
DEF MAX_SWEEPS = 60
DEF DBL_EPS = 2.220446049250313e-16


cdef int _jacobi_eigh(double* A, double* V, double* w, Py_ssize_t R) noexcept nogil:
    """Eigenvalues ``w`` and eigenvectors (columns of ``V``) of the symmetric R x R matrix
    ``A`` (overwritten) by cyclic Jacobi rotations.  Returns 0, or -1 when it did not
    converge in MAX_SWEEPS sweeps."""
    cdef Py_ssize_t p, q, k, sweep
    cdef double apq, app, aqq, theta, t, c, s, g, akp, akq, off
    for p in range(R):
        for q in range(R):
            V[p * R + q] = 1.0 if p == q else 0.0
    for sweep in range(MAX_SWEEPS):
        off = 0
        for p in range(R):
            for q in range(p + 1, R):
                off += fabs(A[p * R + q])
        if off == 0:
            for p in range(R):
                w[p] = A[p * R + p]
            return 0
        for p in range(R):
            for q in range(p + 1, R):
                apq = A[p * R + q]
                if apq == 0:
                    continue
                app = A[p * R + p]
                aqq = A[q * R + q]
                g = 100.0 * fabs(apq)
                if sweep > 3 and fabs(app) + g == fabs(app) and fabs(aqq) + g == fabs(aqq):
                    A[p * R + q] = 0     # below the rounding of both diagonal entries
                    A[q * R + p] = 0
                    continue
                theta = (aqq - app) / (2.0 * apq)
                if fabs(theta) > 1e150:
                    t = 0.5 / theta
                else:
                    t = 1.0 / (fabs(theta) + sqrt(theta * theta + 1.0))
                    if theta < 0:
                        t = -t
                c = 1.0 / sqrt(t * t + 1.0)
                s = t * c
                for k in range(R):          # A <- A J (columns p and q)
                    akp = A[k * R + p]
                    akq = A[k * R + q]
                    A[k * R + p] = c * akp - s * akq
                    A[k * R + q] = s * akp + c * akq
                for k in range(R):          # A <- Jᵀ A (rows p and q)
                    akp = A[p * R + k]
                    akq = A[q * R + k]
                    A[p * R + k] = c * akp - s * akq
                    A[q * R + k] = s * akp + c * akq
                A[p * R + q] = 0
                A[q * R + p] = 0
                for k in range(R):          # V <- V J
                    akp = V[k * R + p]
                    akq = V[k * R + q]
                    V[k * R + p] = c * akp - s * akq
                    V[k * R + q] = s * akp + c * akq
    return -1


#: the Cholesky inverse is kept when ‖Y‖_F ‖Y⁻¹‖_F, a bound on the condition number, is below
#: this (the eigenvalue path would then invert Y as well: it cuts below 1e12)
DEF CHOL_COND = 1e10


cdef int _cholesky_inverse(const double* Y, double* inv, double* L, double* M,
                           Py_ssize_t R) noexcept nogil:
    """``inv`` = Y⁻¹ by a Cholesky factorisation Y = L Lᵀ (``L``, ``M``: R² doubles each of
    work), when Y is positive definite and ‖Y‖_F ‖Y⁻¹‖_F < CHOL_COND.  Returns 0, or -1
    (then ``inv`` is not to be used)."""
    cdef Py_ssize_t i, j, k
    cdef double acc, ny = 0, ni = 0
    for i in range(R):
        for j in range(i + 1):
            acc = Y[i * R + j]
            for k in range(j):
                acc -= L[i * R + k] * L[j * R + k]
            if i == j:
                if not acc > 0:
                    return -1
                L[i * R + i] = sqrt(acc)
            else:
                L[i * R + j] = acc / L[j * R + j]
    # M = L⁻¹ (lower triangular), column by column
    for j in range(R):
        M[j * R + j] = 1.0 / L[j * R + j]
        for i in range(j + 1, R):
            acc = 0
            for k in range(j, i):
                acc -= L[i * R + k] * M[k * R + j]
            M[i * R + j] = acc / L[i * R + i]
    # Y⁻¹ = Mᵀ M, the upper triangle mirrored (exactly symmetric)
    for i in range(R):
        for j in range(i, R):
            acc = 0
            for k in range(j, R):
                acc += M[k * R + i] * M[k * R + j]
            inv[i * R + j] = acc
            inv[j * R + i] = acc
    for i in range(R * R):
        ny += Y[i] * Y[i]
        ni += inv[i] * inv[i]
    if not sqrt(ny) * sqrt(ni) < CHOL_COND:
        return -1
    return 0


cdef int _inverse_gram(double* Y, double* inv, double* work, Py_ssize_t R) noexcept nogil:
    """``inv`` = Y⁻¹ for the symmetric positive semidefinite R x R ``Y`` (kept), the
    pseudo-inverse when Y is singular or nearly so (eigenvalues below ``R eps`` times the
    largest cut, as NumPy's pinv does); what ``gram.inverse_gram`` computes.  Matrices whose
    condition number is certainly below ``CHOL_COND`` (which that function inverts) are
    inverted through a Cholesky factorisation, the others through Jacobi rotations.  ``work``:
    2 R² + 2 R doubles.  Returns 0, 1 when Y holds NaN or infinite values, 2 when the
    eigenvalue iteration did not converge."""
    cdef double* A = work
    cdef double* V = work + R * R
    cdef double* w = work + 2 * R * R
    cdef double* iw = w + R
    cdef Py_ssize_t i, j, k
    cdef double top, low, cut, acc
    for i in range(R * R):
        if not isfinite(Y[i]):
            return 1
    # well conditioned (the common case): a Cholesky inverse, a fraction of the rotations' cost
    if _cholesky_inverse(Y, inv, A, V, R) == 0:
        return 0
    for i in range(R * R):
        A[i] = Y[i]
    if _jacobi_eigh(A, V, w, R) != 0:
        return 2
    top = w[0]
    low = w[0]
    for k in range(1, R):
        top = max(top, w[k])
        low = min(low, w[k])
    if top > 0 and low > top * 1e-12:
        for k in range(R):
            iw[k] = 1.0 / w[k]
    else:
        cut = max(top, 0.0) * R * DBL_EPS
        for k in range(R):
            iw[k] = 1.0 / w[k] if w[k] > cut else 0.0
    for i in range(R):
        for j in range(R):
            acc = 0
            for k in range(R):
                acc += V[i * R + k] * iw[k] * V[j * R + k]
            inv[i * R + j] = acc
    return 0


def als_update(const floating[:, ::1] M, list grams, int mode, bint first,
               floating[:, ::1] U, double[:, ::1] G, double[::1] weights, int num_threads=1):
    """CP-ALS's update of factor ``mode`` from its MTTKRP ``M`` (I x R), in one call.

    ``U = M Y⁺`` with ``Y`` the element-wise product of the Gram matrices ``grams`` (R x R,
    float64) of the other modes, taken in mode order, and ``Y⁺`` its inverse (pseudo-inverse
    when singular; see ``_inverse_gram``); ``weights`` the 2-norms of U's columns (``first``)
    or their largest magnitudes, at least 1; U's columns divided by their nonzero weights;
    ``G = UᵀU``.  Returns 0, 1 when Y holds NaN or infinite values, 2 when its eigenvalues
    could not be computed (U, G and weights are then not written).  ``R`` is at most 128.
    """
    cdef Py_ssize_t I = M.shape[0], R = M.shape[1]
    cdef Py_ssize_t nmodes = len(grams)
    cdef Py_ssize_t k, i, r, b
    cdef Py_ssize_t nblk = (I + ROWS - 1) // ROWS
    cdef int nt = max(1, min(num_threads, nblk))
    cdef const double[:, ::1] Gk
    cdef int status
    cdef double v, a
    if R > MAXQ or U.shape[0] != I or U.shape[1] != R or G.shape[0] != R \
            or G.shape[1] != R or weights.shape[0] != R:
        raise ValueError("als_update: shapes do not match")
    buf = np.empty(2 * R * R + 4 * R * R + 2 * R, dtype=np.float64)
    cdef double[::1] bv = buf
    cdef double* Y = &bv[0]
    cdef double* inv = Y + R * R
    cdef double* work = inv + R * R
    for i in range(R * R):
        Y[i] = 1.0
    for k in range(nmodes):
        if k == mode:
            continue
        Gk = grams[k]
        if Gk.shape[0] != R or Gk.shape[1] != R:
            raise ValueError("als_update: a Gram matrix is not R x R")
        for i in range(R):
            for r in range(R):
                Y[i * R + r] = Y[i * R + r] * Gk[i, r]
    with nogil:
        status = _inverse_gram(Y, inv, work, R)
    if status != 0:
        return status
    if I == 0:
        for r in range(R):
            weights[r] = 0.0 if first else 1.0
        np.asarray(G)[...] = 0
        return 0
    cdef double* minv = work       # Y⁺ in the floating type of M and U
    cdef floating* pinv = <floating*> minv
    for i in range(R * R):
        pinv[i] = <floating> inv[i]
    cdef const floating* pm = &M[0, 0]
    cdef floating* pu = &U[0, 0]
    # U = M Y⁺ block by block; beyond the first iteration each block's largest magnitudes
    # too, while its rows are in cache (a maximum does not depend on the order it is taken in)
    cdef double* bmax = <double*> calloc(nblk * R, sizeof(double))
    cdef double* part = NULL
    cdef Py_ssize_t lo, hi
    if bmax == NULL:
        raise MemoryError()
    try:
        for b in prange(nblk, nogil=True, schedule="static", num_threads=nt):
            lo = b * ROWS
            hi = min((b + 1) * ROWS, I)
            _matmul_rows(pm, pinv, pu, lo, hi, R, R)
            if not first:
                _block_max(pu, bmax + b * R, lo, hi, R)
        with nogil:
            for r in range(R):
                weights[r] = 0
            if first:           # 2-norms, rows added in order
                for i in range(I):
                    for r in range(R):
                        v = pu[i * R + r]
                        weights[r] += v * v
                for r in range(R):
                    weights[r] = sqrt(weights[r])
            else:               # largest magnitudes, at least 1
                for b in range(nblk):
                    for r in range(R):
                        weights[r] = max(weights[r], bmax[b * R + r])
                for r in range(R):
                    weights[r] = max(weights[r], 1.0)
            for r in range(R):
                # weights of NaN columns stay NaN and the columns as they are
                a = 1.0 / weights[r] if weights[r] > 0 else 1.0
                pinv[r] = <floating> a
        if nblk > 1:
            # the columns scaled and the Gram matrix's block products in one pass over U
            # (the blocks of gram(), added in block order as there)
            part = <double*> calloc(nblk * R * R, sizeof(double))
            if part == NULL:
                raise MemoryError()
            for b in prange(nblk, nogil=True, schedule="static", num_threads=nt):
                lo = b * ROWS
                hi = min((b + 1) * ROWS, I)
                _scale_rows(pu, pinv, lo, hi, R)
                _gram_rows(<const floating*> pu, part + b * R * R, lo, hi, R)
            with nogil:
                for r in range(R):
                    for k in range(R):
                        G[r, k] = 0
                _sum_blocks(part, nblk, R, &G[0, 0])
            return 0
        with nogil:
            _scale_rows(pu, pinv, 0, I, R)
    finally:
        free(bmax)
        free(part)
    with nogil:             # one block: what gram() computes, without its buffers
        _gram_rows(<const floating*> pu, &G[0, 0], 0, I, R)
        for r in range(R):
            for k in range(r):
                G[r, k] = G[k, r]
    return 0
