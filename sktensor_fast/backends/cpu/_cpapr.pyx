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
the Tensor Toolbox's ``cp_apr``.

Every function here trusts its inputs; ``backends/cpu/backend.py`` checks shapes and dtypes
(everything is float64 here; the Python layer converts float32 data).
"""
cimport cython
from cython.parallel cimport prange, parallel
from libc.stdlib cimport malloc, free
from libc.string cimport memset, memcpy
from libc.math cimport fabs, log, sqrt, isinf, isfinite, INFINITY
from libc.stdint cimport int64_t, int8_t

import numpy as np

#: Methods understood by :func:`row_solve`.
PDNR = 0
PQNR = 1

# Line-search constants of the Tensor Toolbox (unit first step, halving, at most 10 steps,
# Armijo constant 1e-4; thresholds below which a step counts as a collapse to zero).
cdef double LS_STEP_RED = 0.5
cdef int LS_MAX_STEPS = 10
cdef double LS_SUFF_DECR = 1.0e-4
cdef double LS_MIN_DESCENT = 1.0e-7
cdef double LS_SMALL_STEP = 1.0e-7

#: Largest Khatri-Rao block (nonzeros x rank doubles) cached per thread; longer rows
#: recompute their Khatri-Rao rows on the fly.
PI_CACHE_ELEMS = 1 << 22


cdef struct RowCtx:
    Py_ssize_t R
    Py_ssize_t p            # nonzeros in this row
    int nmodes
    int mode
    const int64_t* subs     # nnz x nmodes
    const int64_t* idx      # perm + start (NULL: identity, nonzero = start + t)
    Py_ssize_t start
    double** fac
    const double* x         # the row's values (length p)
    double* pic             # cached Khatri-Rao rows (p x R) or NULL
    double* tmp             # R scratch when not cached


cdef inline Py_ssize_t _nz(RowCtx* c, Py_ssize_t t) noexcept nogil:
    if c.idx != NULL:
        return c.idx[t]
    return c.start + t


cdef inline void _krp(RowCtx* c, Py_ssize_t nz, double* out) noexcept nogil:
    cdef int k
    cdef bint first = True
    cdef Py_ssize_t r, R = c.R
    cdef const double* a
    cdef const int64_t* sub = c.subs + nz * c.nmodes
    for k in range(c.nmodes):
        if k == c.mode:
            continue
        a = c.fac[k] + sub[k] * R
        if first:
            for r in range(R):
                out[r] = a[r]
            first = False
        else:
            for r in range(R):
                out[r] = out[r] * a[r]
    if first:
        for r in range(R):
            out[r] = 1.0


cdef inline const double* _pi(RowCtx* c, Py_ssize_t t) noexcept nogil:
    """Khatri-Rao row of the row's nonzero ``t`` (valid until the next call)."""
    if c.pic != NULL:
        return c.pic + t * c.R
    _krp(c, _nz(c, t), c.tmp)
    return c.tmp


cdef inline double _dot(const double* a, const double* b, Py_ssize_t n) noexcept nogil:
    cdef double s = 0.0
    cdef Py_ssize_t r
    for r in range(n):
        s = s + a[r] * b[r]
    return s


cdef double _objective(RowCtx* c, const double* m) noexcept nogil:
    """Negative log-likelihood of the row: sum(m) - sum_t x_t log(m . pi_t)."""
    cdef double term1 = 0.0, term2 = 0.0
    cdef Py_ssize_t r, t
    for r in range(c.R):
        term1 = term1 - m[r]
    for t in range(c.p):
        term2 = term2 + c.x[t] * log(_dot(m, _pi(c, t), c.R))
    return -(term1 + term2)


cdef void _partials(RowCtx* c, const double* m, double eps, double* phi,
                    double* ups) noexcept nogil:
    """phi = sum_t x_t / max(v_t, eps) pi_t with v_t = m . pi_t; ups_t = x_t / max(v_t², eps)."""
    cdef Py_ssize_t r, t, R = c.R
    cdef const double* pi
    cdef double v, w
    for r in range(R):
        phi[r] = 0.0
    for t in range(c.p):
        pi = _pi(c, t)
        v = _dot(m, pi, R)
        w = c.x[t] / (v if v > eps else eps)
        for r in range(R):
            phi[r] = phi[r] + w * pi[r]
        if ups != NULL:
            ups[t] = c.x[t] / (v * v if v * v > eps else eps)


cdef inline double _kkt(const double* m, const double* g, Py_ssize_t R) noexcept nogil:
    """max_r |min(m_r, g_r)|: the infinity norm of the complementarity violation."""
    cdef double k = 0.0, a
    cdef Py_ssize_t r
    for r in range(R):
        a = fabs(m[r] if m[r] < g[r] else g[r])
        if a > k:
            k = a
    return k


cdef inline double _active_threshold(const double* m, const double* g, Py_ssize_t R,
                                     double eps_active) noexcept nogil:
    """min(eps_active, ||m - P(m - g)||): Bertsekas' threshold for the active set."""
    cdef double s = 0.0, a
    cdef Py_ssize_t r
    for r in range(R):
        # m - max(m - g, 0) = min(m, g)
        a = m[r] if m[r] < g[r] else g[r]
        s = s + a * a
    s = sqrt(s)
    return eps_active if eps_active < s else s


cdef void _linesearch(RowCtx* c, const double* d, const double* g, const double* m_old,
                      const double* phi, double* m_new, double* f_old, double* f_1,
                      double* f_new) noexcept nogil:
    """Projected backtracking search along ``d`` from ``m_old``; result in ``m_new``.

    Falls back on the multiplicative update ``m_old * phi`` when no step decreases the
    objective or the step collapses to zero.  ``f_1`` is the objective after the unit step
    (``f_old`` when that step was not evaluated or the fall-back was taken).
    """
    cdef Py_ssize_t r, R = c.R
    cdef double step = 1.0, gd, msum, fn = INFINITY, f1 = INFINITY
    cdef int count = 1
    cdef double fo = _objective(c, m_old)
    while count <= LS_MAX_STEPS:
        gd = 0.0
        msum = 0.0
        for r in range(R):
            m_new[r] = m_old[r] + step * d[r]
            if not (m_new[r] > 0):
                m_new[r] = 0.0
            gd = gd + g[r] * (m_new[r] - m_old[r])
            msum = msum + m_new[r]
        if gd > 0 or msum < LS_MIN_DESCENT:
            fn = INFINITY
            if count == 1:
                f1 = fn
            step = step * LS_STEP_RED
            count += 1
        else:
            fn = _objective(c, m_new)
            if count == 1:
                f1 = fn
            if fn <= fo + LS_SUFF_DECR * gd:
                break
            step = step * LS_STEP_RED
            count += 1
    if isinf(f1):
        f1 = fo
    msum = 0.0
    for r in range(R):
        msum = msum + m_new[r]
    if (count >= LS_MAX_STEPS and fn > fo) or msum < LS_SMALL_STEP:
        for r in range(R):
            m_new[r] = m_old[r] * phi[r]
            if not (m_new[r] > 0):
                m_new[r] = 0.0
        fn = _objective(c, m_new)
        f1 = fo
    f_old[0] = fo
    f_1[0] = f1
    f_new[0] = fn


cdef bint _cholesky_solve(double* A, double* b, Py_ssize_t n) noexcept nogil:
    """Solve A y = b for symmetric positive definite A (n x n, overwritten by its Cholesky
    factor); y overwrites b.  False when A is not numerically positive definite."""
    cdef Py_ssize_t i, j, k
    cdef double s
    for j in range(n):
        s = A[j * n + j]
        for k in range(j):
            s = s - A[j * n + k] * A[j * n + k]
        if not (s > 0) or not isfinite(s):
            return False
        s = sqrt(s)
        A[j * n + j] = s
        for i in range(j + 1, n):
            s = A[i * n + j]
            for k in range(j):
                s = s - A[i * n + k] * A[j * n + k]
            A[i * n + j] = s / A[j * n + j]
    for i in range(n):          # L z = b
        s = b[i]
        for k in range(i):
            s = s - A[i * n + k] * b[k]
        b[i] = s / A[i * n + i]
    for i in range(n - 1, -1, -1):   # L^T y = z
        s = b[i]
        for k in range(i + 1, n):
            s = s - A[k * n + i] * b[k]
        b[i] = s / A[i * n + i]
    return True


cdef struct Work:
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
    double* S           # lbfgs_mem x R
    double* Y           # lbfgs_mem x R
    double* rho         # lbfgs_mem
    double* alpha       # lbfgs_mem
    double* ups         # max_p
    double* x           # max_p
    int64_t* free_idx   # R


cdef int _pdnr_row(RowCtx* c, Work* w, double tol, int max_inner, double eps_div_zero,
                   double eps_active, double mu0, double* kkt0, int8_t* changed) noexcept nogil:
    """Projected damped Newton on one row; returns the inner iterations used."""
    cdef Py_ssize_t R = c.R, r, a, b, t, nfree
    cdef double mu = mu0, kkt, wk, q, pred_red, actual_red, rho_, u, f_old, f_1, f_new
    cdef const double* pi
    cdef int i, n_it = 0
    cdef bint ok
    for i in range(max_inner):
        n_it = i + 1
        _partials(c, w.m, eps_div_zero, w.phi, w.ups)
        for r in range(R):
            w.g[r] = 1.0 - w.phi[r]
        kkt = _kkt(w.m, w.g, R)
        if i == 0:
            kkt0[0] = kkt
        if kkt < tol:
            break
        changed[0] = 1
        # free variables; the others move along -g (set G) or stay at zero (set A)
        wk = _active_threshold(w.m, w.g, R, eps_active)
        nfree = 0
        for r in range(R):
            w.d[r] = 0.0
            if w.m[r] <= wk and w.g[r] > 0:
                if w.m[r] != 0:
                    w.d[r] = -w.g[r]
            else:
                w.free_idx[nfree] = r
                nfree += 1
        # Hessian of the free variables: sum_t ups_t pi_t[a] pi_t[b]
        for a in range(nfree * nfree):
            w.H[a] = 0.0
        for t in range(c.p):
            pi = _pi(c, t)
            u = w.ups[t]
            for a in range(nfree):
                q = u * pi[w.free_idx[a]]
                for b in range(a + 1):
                    w.H[a * nfree + b] += q * pi[w.free_idx[b]]
        for a in range(nfree):
            w.H[a * nfree + a] += mu
            for b in range(a):
                w.H[b * nfree + a] = w.H[a * nfree + b]
        memcpy(w.L, w.H, nfree * nfree * sizeof(double))
        for a in range(nfree):
            w.rhs[a] = -w.g[w.free_idx[a]]
        ok = _cholesky_solve(w.L, w.rhs, nfree)
        if ok:
            for a in range(nfree):
                w.d[w.free_idx[a]] = w.rhs[a]
        else:
            # the damped Hessian is numerically singular: steepest descent
            for r in range(R):
                w.d[r] = -w.g[r]
        # predicted reduction of the damped quadratic model over the free variables
        q = 0.0
        pred_red = 0.0
        for a in range(nfree):
            u = 0.0
            for b in range(nfree):
                u = u + w.H[a * nfree + b] * w.d[w.free_idx[b]]
            q = q + w.d[w.free_idx[a]] * u
            pred_red = pred_red + w.d[w.free_idx[a]] * w.g[w.free_idx[a]]
        pred_red = pred_red + 0.5 * q
        if pred_red > 0:
            for r in range(R):
                w.d[r] = -w.g[r]
        _linesearch(c, w.d, w.g, w.m, w.phi, w.m_new, &f_old, &f_1, &f_new)
        memcpy(w.m, w.m_new, R * sizeof(double))
        # adapt the damping from the agreement between model and unit step
        actual_red = f_old - f_1
        if pred_red == 0:
            mu = mu * 10.0
        else:
            rho_ = actual_red / (-pred_red)
            if rho_ < 0.25:
                mu = mu * 3.5
            elif rho_ > 0.75:
                mu = mu * (2.0 / 7.0)
    return n_it


cdef void _lbfgs_direction(Work* w, Py_ssize_t R, int mem, int newest, int npairs,
                           double eps_active) noexcept nogil:
    """Projected L-BFGS direction (two-loop recursion over the ``npairs`` newest pairs)."""
    cdef double wk, s
    cdef Py_ssize_t r
    cdef int j, k
    wk = _active_threshold(w.m, w.g, R, eps_active)
    for r in range(R):
        w.d[r] = -w.g[r]
        if w.g[r] > 0 and w.m[r] <= wk:
            w.d[r] = 0.0            # fixed at (or next to) the bound
    if npairs == 0:
        return
    k = newest
    for j in range(npairs):
        w.alpha[k] = w.rho[k] * _dot(w.S + k * R, w.d, R)
        for r in range(R):
            w.d[r] = w.d[r] - w.alpha[k] * w.Y[k * R + r]
        k = (k - 1 + mem) % mem
    s = 1.0 / w.rho[newest] / _dot(w.Y + newest * R, w.Y + newest * R, R)
    for r in range(R):
        w.d[r] = w.d[r] * s
    for j in range(npairs):
        k = (k + 1) % mem
        s = w.rho[k] * _dot(w.Y + k * R, w.d, R)
        for r in range(R):
            w.d[r] = w.d[r] + (w.alpha[k] - s) * w.S[k * R + r]
    for r in range(R):
        if w.g[r] > 0 and w.m[r] <= wk:
            w.d[r] = 0.0


cdef int _pqnr_row(RowCtx* c, Work* w, double tol, int max_inner, double eps_div_zero,
                   double eps_active, int mem, double* kkt0, int8_t* changed) noexcept nogil:
    """Projected quasi-Newton (L-BFGS) on one row; returns the inner iterations used."""
    cdef Py_ssize_t R = c.R, r
    cdef int i, n_it = 0, newest = -1, npairs = 0
    cdef double kkt, sy, f_old, f_1, f_new
    for i in range(max_inner):
        n_it = i + 1
        _partials(c, w.m, eps_div_zero, w.phi, NULL)
        for r in range(R):
            w.g[r] = 1.0 - w.phi[r]
        if i == 0:
            # a projected gradient step primes the L-BFGS memory
            memcpy(w.m_old, w.m, R * sizeof(double))
            memcpy(w.g_old, w.g, R * sizeof(double))
            for r in range(R):
                w.d[r] = -w.g[r]
            _linesearch(c, w.d, w.g_old, w.m_old, w.phi, w.m, &f_old, &f_1, &f_new)
            _partials(c, w.m, eps_div_zero, w.phi, NULL)
            for r in range(R):
                w.g[r] = 1.0 - w.phi[r]
        kkt = _kkt(w.m, w.g, R)
        if i == 0:
            kkt0[0] = kkt
        if kkt < tol:
            break
        changed[0] = 1
        # store the newest (step, gradient change) pair when its curvature is positive
        sy = 0.0
        for r in range(R):
            sy = sy + (w.m[r] - w.m_old[r]) * (w.g[r] - w.g_old[r])
        if sy > 0 and isfinite(1.0 / sy):
            newest = (newest + 1) % mem
            for r in range(R):
                w.S[newest * R + r] = w.m[r] - w.m_old[r]
                w.Y[newest * R + r] = w.g[r] - w.g_old[r]
            w.rho[newest] = 1.0 / sy
            if npairs < mem:
                npairs += 1
        _lbfgs_direction(w, R, mem, newest, npairs, eps_active)
        memcpy(w.m_old, w.m, R * sizeof(double))
        memcpy(w.g_old, w.g, R * sizeof(double))
        _linesearch(c, w.d, w.g_old, w.m_old, w.phi, w.m, &f_old, &f_1, &f_new)
    return n_it


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
    cdef RowCtx* c
    cdef Work* w
    cdef char* blk
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
        nbytes = (sizeof(RowCtx) + sizeof(Work)
                  + (9 * R + 2 * R * R + 2 * mem * R + 2 * mem + 2 * max_p + cap) * sizeof(double)
                  + R * sizeof(int64_t) + 64)
        blk = NULL
        c = NULL
        w = NULL
        with nogil, parallel(num_threads=num_threads):
            blk = <char*> malloc(nbytes)
            if blk == NULL:
                failed_p[0] = 1
            else:
                c = <RowCtx*> blk
                w = <Work*> (blk + sizeof(RowCtx))
                w.m = <double*> (blk + sizeof(RowCtx) + sizeof(Work))
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
                w.x = w.ups + max_p
                c.pic = w.x + max_p          # base of the cache; set per row below
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
                    nz = _nz(c, t)
                    w.x[t] = vals[nz]
                c.x = w.x
                c.pic = <double*> (w.x + max_p)
                if p * R <= cap:
                    for t in range(p):
                        _krp(c, _nz(c, t), c.pic + t * R)
                else:
                    c.pic = NULL
                for k in range(R):
                    w.m[k] = B[row, k]
                if method == 0:
                    inner_out[row] = _pdnr_row(c, w, tol, max_inner, eps_div_zero, eps_active,
                                               mu0, &kkt_out[row], &changed_out[row])
                else:
                    inner_out[row] = _pqnr_row(c, w, tol, max_inner, eps_div_zero,
                                               eps_active, mem, &kkt_out[row],
                                               &changed_out[row])
                for k in range(R):
                    B[row, k] = w.m[k]
            free(blk)
        if failed:
            raise MemoryError("CP-APR row solver: cannot allocate the per-thread workspace")
    finally:
        free(fac)
