# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Compiled CP-APR row subproblem solvers (projected damped Newton, projected quasi-Newton).

With every factor but ``B`` (the mode-n factor with the weights folded in) held fixed, the
Poisson log-likelihood splits into one independent problem per row ``i`` of ``B``::

    minimise  f(b) = sum_r b_r - sum_t x_t log(b . pi_t)   over b >= 0

where ``t`` runs over the nonzeros of row ``i`` of the mode-n unfolding and ``pi_t`` is the
Khatri-Rao row of nonzero ``t`` (the product of the other factors' rows).  Those nonzeros are
the contiguous run ``row_ptr[i]:row_ptr[i+1]`` of the mode-n sorted order ``perm``.

Each row is solved by one thread from start to finish with its own workspace, so the result
does not depend on the number of threads.  The rules (active set, line search, damping and
L-BFGS updates, fall-back multiplicative step) follow Hansen, Plantenga & Kolda, "Newton-based
optimization for Kullback-Leibler nonnegative tensor factorizations" (2015), as implemented in
the Tensor Toolbox's ``cp_apr``.  Their arithmetic is written once, in the C header
``sktensor_fast/include/sktf_apr_row.h`` that the OpenCL kernels (``cpapr_rows.cl``) compile
too; this module sets up the per-thread workspace and the Khatri-Rao cache
(``sktf_apr_cpu.h``) and runs the rows in parallel.

Every function here trusts its inputs; ``backends/cpu/backend.py`` checks shapes and dtypes
(everything is float64 here; the Python layer converts float32 data).
"""
cimport cython
from cython.parallel cimport prange, parallel
from libc.stdlib cimport malloc, free
from libc.string cimport memset, memcpy
from libc.stdint cimport int64_t, int8_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

#: Methods understood by :func:`row_solve`.
PDNR = 0
PQNR = 1

#: Largest Khatri-Rao block (nonzeros x rank doubles) cached per thread; longer rows
#: recompute their Khatri-Rao rows on the fly.
PI_CACHE_ELEMS = 1 << 22


cdef extern from "sktf_apr_cpu.h":
    # the solvers' arithmetic, written once for the CPU and the OpenCL kernels
    # (sktensor_fast/include/sktf_apr_row.h)
    ctypedef struct sktf_apr_ctx:
        int64_t R
        int64_t p
        int nmodes
        int mode
        const int64_t* subs
        const int64_t* idx
        int64_t start
        double** fac
        const double* x
        double* pic
        double* tmp
    ctypedef struct sktf_apr_work:
        double* m
        double* m_new
        double* m_old
        double* g
        double* g_old
        double* phi
        double* d
        double* rhs
        double* H
        double* L
        double* S
        double* Y
        double* rho
        double* alpha
        double* ups
        int64_t* free_idx
    int64_t sktf_apr_nz(const sktf_apr_ctx* c, int64_t t) noexcept nogil
    void sktf_apr_krp(const sktf_apr_ctx* c, int64_t nz, double* out) noexcept nogil
    int sktf_apr_pdnr_row(const sktf_apr_ctx* c, sktf_apr_work* w, double tol, int max_inner,
                          double eps_div_zero, double eps_active, double mu0, double* kkt0,
                          int* changed) noexcept nogil
    int sktf_apr_pqnr_row(const sktf_apr_ctx* c, sktf_apr_work* w, double tol, int max_inner,
                          double eps_div_zero, double eps_active, int mem, double* kkt0,
                          int* changed) noexcept nogil


def row_solve(const int64_t[:, ::1] subs, const double[::1] vals, const int64_t[::1] perm,
              const int64_t[::1] row_ptr, list factors, int mode, double[:, ::1] B,
              int method, double tol, int max_inner, double eps_div_zero, double eps_active,
              double mu0, int lbfgs_mem, double[::1] kkt_out, int64_t[::1] inner_out,
              int8_t[::1] changed_out, int num_threads=1):
    """Solve every row subproblem of mode ``mode`` in place in ``B``.

    Parameters
    ----------
    subs, vals : the tensor in COO form.
    perm : nonzeros sorted by their mode-``mode`` coordinate (empty: identity).
    row_ptr : (I + 1) offsets into ``perm`` of each row's run of nonzeros.
    factors : C-contiguous float64 (I_k x R) arrays; ``factors[mode]`` is not read.
    B : (I x R) float64, the starting point (weights folded in); overwritten by the solution.
    method : :data:`PDNR` or :data:`PQNR`.
    kkt_out, inner_out, changed_out : per row, the KKT violation at the first inner iteration,
        the inner iterations used and whether the row was modified (not converged on entry).
        Rows without nonzeros are set to zero and report 0, 0, 0.
    """
    cdef Py_ssize_t I = B.shape[0], R = B.shape[1]
    cdef int nmodes = subs.shape[1]
    cdef bint use_perm = perm.shape[0] > 0
    cdef Py_ssize_t max_p = 0, row, p, cap, k, t, nz
    cdef int mem = lbfgs_mem if lbfgs_mem > 0 else 1
    cdef double** fac = <double**> malloc(nmodes * sizeof(double*))
    cdef const double[:, ::1] F
    cdef sktf_apr_ctx* c
    cdef sktf_apr_work* w
    cdef double* xbuf
    cdef char* blk
    cdef int changed
    cdef Py_ssize_t nbytes
    cdef int failed = 0
    cdef int* failed_p = &failed     # written through a pointer: shared by the threads
    if fac == NULL:
        raise MemoryError()
    try:
        for k in range(nmodes):
            F = factors[k]
            fac[k] = <double*> &F[0, 0] if F.shape[0] > 0 and F.shape[1] > 0 else NULL
        for row in range(I):
            p = row_ptr[row + 1] - row_ptr[row]
            if p > max_p:
                max_p = p
        if I == 0 or R == 0:
            return
        cap = PI_CACHE_ELEMS
        if max_p * R < cap:
            cap = max_p * R
        # per-thread workspace: the structs, 8 R-vectors, 2 R x R, L-BFGS memory, 2 p-vectors,
        # the Khatri-Rao cache and the free-index list
        nbytes = (sizeof(sktf_apr_ctx) + sizeof(sktf_apr_work)
                  + (9 * R + 2 * R * R + 2 * mem * R + 2 * mem + 2 * max_p + cap) * sizeof(double)
                  + R * sizeof(int64_t) + 64)
        blk = NULL
        c = NULL
        w = NULL
        xbuf = NULL
        with nogil, parallel(num_threads=num_threads):
            blk = <char*> malloc(nbytes)
            if blk == NULL:
                failed_p[0] = 1
            else:
                c = <sktf_apr_ctx*> blk
                w = <sktf_apr_work*> (blk + sizeof(sktf_apr_ctx))
                w.m = <double*> (blk + sizeof(sktf_apr_ctx) + sizeof(sktf_apr_work))
                w.m_new = w.m + R
                w.m_old = w.m_new + R
                w.g = w.m_old + R
                w.g_old = w.g + R
                w.phi = w.g_old + R
                w.d = w.phi + R
                w.rhs = w.d + R
                c.tmp = w.rhs + R
                w.H = c.tmp + R
                w.L = w.H + R * R
                w.S = w.L + R * R
                w.Y = w.S + mem * R
                w.rho = w.Y + mem * R
                w.alpha = w.rho + mem
                w.ups = w.alpha + mem
                xbuf = w.ups + max_p
                c.pic = xbuf + max_p         # base of the cache; set per row below
                w.free_idx = <int64_t*> (c.pic + cap)
                c.R = R
                c.nmodes = nmodes
                c.mode = mode
                c.subs = &subs[0, 0]
                c.fac = fac
            for row in prange(I, schedule='dynamic'):
                if blk == NULL:
                    continue
                kkt_out[row] = 0.0
                inner_out[row] = 0
                changed_out[row] = 0
                p = row_ptr[row + 1] - row_ptr[row]
                if p == 0:
                    # no data in this row: the optimum is zero
                    for k in range(R):
                        B[row, k] = 0.0
                    continue
                c.p = p
                c.start = row_ptr[row]
                c.idx = &perm[c.start] if use_perm else NULL
                for t in range(p):
                    nz = sktf_apr_nz(c, t)
                    xbuf[t] = vals[nz]
                c.x = xbuf
                c.pic = xbuf + max_p
                if p * R <= cap:
                    for t in range(p):
                        sktf_apr_krp(c, sktf_apr_nz(c, t), c.pic + t * R)
                else:
                    c.pic = NULL
                for k in range(R):
                    w.m[k] = B[row, k]
                changed = 0
                if method == 0:
                    inner_out[row] = sktf_apr_pdnr_row(c, w, tol, max_inner, eps_div_zero,
                                                       eps_active, mu0, &kkt_out[row],
                                                       &changed)
                else:
                    inner_out[row] = sktf_apr_pqnr_row(c, w, tol, max_inner, eps_div_zero,
                                                       eps_active, mem, &kkt_out[row],
                                                       &changed)
                changed_out[row] = changed
                for k in range(R):
                    B[row, k] = w.m[k]
            free(blk)
        if failed:
            raise MemoryError("CP-APR row solver: cannot allocate the per-thread workspace")
    finally:
        free(fac)



cdef extern from "sktf_apr_mu.h":
    double sktf_mu_step_f64(double* B, const double* P, int64_t n, double tol) noexcept nogil
    double sktf_mu_step_f32(float* B, const float* P, int64_t n, double tol) noexcept nogil



def mu_step_arrays(B, Phi, tol):
    """:func:`mu_step` on two NumPy arrays, or None where they do not qualify: both C-contiguous
    arrays of one shape and of type float64 or float32, ``B`` writeable, their memory apart,
    ``tol`` a float that is not NaN (the caller then takes its checked path, which raises
    the errors).  Reads the arrays through NumPy's C API: called between two Φ kernels,
    whose nonzeros leave the caches cold, every Python-level check costs microseconds."""
    cdef cnp.ndarray b, p
    cdef int nd, typ, i
    cdef Py_ssize_t n = 1
    cdef double t
    cdef char* b0
    cdef char* p0
    if type(B) is not np.ndarray or type(Phi) is not np.ndarray or type(tol) is not float:
        return None
    b = <cnp.ndarray> B
    p = <cnp.ndarray> Phi
    t = <double> tol
    nd = cnp.PyArray_NDIM(b)
    typ = cnp.PyArray_TYPE(b)
    if (t != t or nd != cnp.PyArray_NDIM(p) or typ != cnp.PyArray_TYPE(p)
            or (typ != cnp.NPY_DOUBLE and typ != cnp.NPY_FLOAT)
            or not cnp.PyArray_IS_C_CONTIGUOUS(b) or not cnp.PyArray_IS_C_CONTIGUOUS(p)
            or not cnp.PyArray_ISWRITEABLE(b)):
        return None
    for i in range(nd):
        if cnp.PyArray_DIM(b, i) != cnp.PyArray_DIM(p, i):
            return None
        n *= cnp.PyArray_DIM(b, i)
    if n == 0:
        return 0.0
    b0 = <char*> cnp.PyArray_DATA(b)
    p0 = <char*> cnp.PyArray_DATA(p)
    if b0 < p0 + cnp.PyArray_NBYTES(p) and p0 < b0 + cnp.PyArray_NBYTES(b):
        return None                                       # overlapping memory
    with nogil:
        if typ == cnp.NPY_DOUBLE:
            t = sktf_mu_step_f64(<double*> b0, <const double*> p0, n, t)
        else:
            t = sktf_mu_step_f32(<float*> b0, <const float*> p0, n, t)
    return t

