/* sktensor_fast: the row subproblem of CP-APR, solved by projected damped Newton (PDN-R) or
 * projected L-BFGS (PQN-R).
 *
 * The one definition of the solvers' arithmetic: the CPU kernels (backends/cpu/_cpapr.pyx,
 * through sktf_apr_cpu.h) and the OpenCL kernels (backends/opencl/kernels/cpapr_rows.cl) both
 * compile these functions, so for the same row both do the same operations in the same order.
 *
 * With every factor but B held fixed, row i of B solves
 *     minimise  f(b) = sum_r b_r - sum_t x_t log(b . pi_t)   over b >= 0,
 * t running over the p nonzeros of row i, pi_t the Khatri-Rao row of nonzero t (the product of
 * the other factors' rows).  The rules (active set, line search, damping and L-BFGS updates,
 * fall-back multiplicative step) follow Hansen, Plantenga & Kolda, "Newton-based optimization
 * for Kullback-Leibler nonnegative tensor factorizations" (2015), as implemented in the Tensor
 * Toolbox's cp_apr.
 *
 * Where the data and the scratch live differs between the devices (the CPU keeps each row's
 * scratch contiguous and caches the Khatri-Rao rows; a work-item of the OpenCL kernels keeps
 * its scratch interleaved with its neighbours' in global memory and forms the Khatri-Rao rows
 * on the fly), so the includer defines first:
 *
 *   sktf_apr_ctx           a struct type with at least `R` (the rank) and `p` (the row's
 *                          nonzeros), and whatever the hooks below read
 *   SKTF_APR_WS            the address space of the scratch vectors (SKTF_GLOBAL or nothing)
 *   SKTF_APR_IDX_T         the integer type of the list of free variables
 *   SKTF_APR_INT           the integer type of rank indices (int64_t on the CPU, where it
 *                          saves sign extensions in the address arithmetic; int on devices)
 *   SKTF_APR_E(v, r)       entry r of scratch vector v (may read the context `c` in scope)
 *   SKTF_APR_X(c, t)       the value of the row's nonzero t, as SKTF_REAL
 *   SKTF_APR_UPS(c, w, t)  the slot of nonzero t in the scratch w->ups (an lvalue)
 *   sktf_apr_pi(c, t)      function: pointer to the Khatri-Rao row of nonzero t (entries read
 *                          with SKTF_APR_E, valid until the next call)
 *   sktf_apr_mdotpi(c, m, t)  function: m . pi_t, formed as sktf_apr_dot(c, m, pi_t) forms it
 */
#ifndef SKTF_APR_ROW_H
#define SKTF_APR_ROW_H

#include "sktf_platform.h"
#include "sktf_cp.h"

/* line-search constants of the Tensor Toolbox: unit first step, halving, at most 10 steps,
 * Armijo constant 1e-4; thresholds below which a step counts as a collapse to zero */
#define SKTF_LS_STEP_RED ((SKTF_REAL)0.5)
#define SKTF_LS_MAX_STEPS 10
#define SKTF_LS_SUFF_DECR ((SKTF_REAL)1.0e-4)
#define SKTF_LS_MIN_DESCENT ((SKTF_REAL)1.0e-7)
#define SKTF_LS_SMALL_STEP ((SKTF_REAL)1.0e-7)

#define SKTF_APR_INF ((SKTF_REAL)INFINITY)

typedef SKTF_APR_WS SKTF_REAL *sktf_apr_vec;
typedef SKTF_APR_WS const SKTF_REAL *sktf_apr_cvec;

/* the per-row scratch of the solvers */
typedef struct {
    sktf_apr_vec m, m_new, m_old, g, g_old, phi, d, rhs;
    sktf_apr_vec H;                      /* R x R (PDN-R) */
    sktf_apr_vec L;                      /* R x R (PDN-R) */
    sktf_apr_vec S;                      /* mem x R (PQN-R) */
    sktf_apr_vec Y;                      /* mem x R (PQN-R) */
    sktf_apr_vec rho;                    /* mem (PQN-R) */
    sktf_apr_vec alpha;                  /* mem (PQN-R) */
    sktf_apr_vec ups;                    /* one per nonzero (PDN-R), see SKTF_APR_UPS */
    SKTF_APR_WS SKTF_APR_IDX_T *free_idx;    /* R (PDN-R) */
} sktf_apr_work;

#define SKTF_E SKTF_APR_E

/* a . b over the rank */
SKTF_INLINE SKTF_REAL sktf_apr_dot(const sktf_apr_ctx *c, sktf_apr_cvec a, sktf_apr_cvec b)
{
    SKTF_REAL s = 0;
    for (SKTF_APR_INT r = 0; r < c->R; ++r) s = s + SKTF_E(a, r) * SKTF_E(b, r);
    return s;
}

SKTF_INLINE void sktf_apr_copy(const sktf_apr_ctx *c, sktf_apr_vec dst, sktf_apr_cvec src)
{
    for (SKTF_APR_INT r = 0; r < c->R; ++r) SKTF_E(dst, r) = SKTF_E(src, r);
}

/* negative log-likelihood of the row: sum(m) - sum_t x_t log(m . pi_t) */
SKTF_INLINE SKTF_REAL sktf_apr_objective(const sktf_apr_ctx *c, sktf_apr_cvec m)
{
    SKTF_REAL term1 = 0, term2 = 0;
    for (SKTF_APR_INT r = 0; r < c->R; ++r) term1 = term1 - SKTF_E(m, r);
    for (sktf_i64 t = 0; t < c->p; ++t)
        term2 = term2 + SKTF_APR_X(c, t) * log(sktf_apr_mdotpi(c, m, t));
    return -(term1 + term2);
}

/* phi = sum_t x_t / max(v_t, eps) pi_t with v_t = m . pi_t; ups_t = x_t / max(v_t^2, eps)
 * (when want_ups) */
SKTF_INLINE void sktf_apr_partials(const sktf_apr_ctx *c, sktf_apr_work *w, sktf_apr_cvec m,
                                   const SKTF_REAL eps, const int want_ups)
{
    const SKTF_APR_INT R = c->R;
    sktf_apr_vec phi = w->phi;
    for (SKTF_APR_INT r = 0; r < R; ++r) SKTF_E(phi, r) = 0;
    for (sktf_i64 t = 0; t < c->p; ++t) {
        sktf_apr_cvec pi = sktf_apr_pi(c, t);
        const SKTF_REAL v = sktf_apr_dot(c, m, pi);
        const SKTF_REAL x = SKTF_APR_X(c, t);
        const SKTF_REAL wt = SKTF_PHI_WEIGHT(x, v, eps);
        for (SKTF_APR_INT r = 0; r < R; ++r) SKTF_E(phi, r) = SKTF_E(phi, r) + wt * SKTF_E(pi, r);
        if (want_ups) SKTF_APR_UPS(c, w, t) = SKTF_PHI_WEIGHT(x, v * v, eps);
    }
}

/* max_r |min(m_r, g_r)|: the infinity norm of the complementarity violation */
SKTF_INLINE SKTF_REAL sktf_apr_kkt(const sktf_apr_ctx *c, sktf_apr_cvec m, sktf_apr_cvec g)
{
    SKTF_REAL k = 0;
    for (SKTF_APR_INT r = 0; r < c->R; ++r) {
        const SKTF_REAL a = fabs(SKTF_E(m, r) < SKTF_E(g, r) ? SKTF_E(m, r) : SKTF_E(g, r));
        if (a > k) k = a;
    }
    return k;
}

/* min(eps_active, ||m - P(m - g)||) = min(eps_active, ||min(m, g)||): Bertsekas' threshold
 * for the active set */
SKTF_INLINE SKTF_REAL sktf_apr_active_threshold(const sktf_apr_ctx *c, sktf_apr_cvec m,
                                                sktf_apr_cvec g, const SKTF_REAL eps_active)
{
    SKTF_REAL s = 0;
    for (SKTF_APR_INT r = 0; r < c->R; ++r) {
        const SKTF_REAL a = SKTF_E(m, r) < SKTF_E(g, r) ? SKTF_E(m, r) : SKTF_E(g, r);
        s = s + a * a;
    }
    s = sqrt(s);
    return eps_active < s ? eps_active : s;
}

/* Projected backtracking search along d from m_old into m_new, falling back on the
 * multiplicative step m_old * phi when no step decreases the objective or the step collapses
 * to zero.  f[0] = f(m_old), f[1] = f after the unit step (f(m_old) when that step was not
 * evaluated or on fall-back), f[2] = f(m_new). */
SKTF_INLINE void sktf_apr_linesearch(const sktf_apr_ctx *c, sktf_apr_cvec d, sktf_apr_cvec g,
                                     sktf_apr_cvec m_old, sktf_apr_cvec phi,
                                     sktf_apr_vec m_new, SKTF_REAL *f)
{
    const SKTF_APR_INT R = c->R;
    SKTF_REAL step = 1, gd, msum, fn = SKTF_APR_INF, f1 = SKTF_APR_INF;
    int count = 1;
    const SKTF_REAL fo = sktf_apr_objective(c, m_old);
    while (count <= SKTF_LS_MAX_STEPS) {
        gd = 0;
        msum = 0;
        for (SKTF_APR_INT r = 0; r < R; ++r) {
            SKTF_REAL v = SKTF_E(m_old, r) + step * SKTF_E(d, r);
            if (!(v > 0)) v = 0;
            SKTF_E(m_new, r) = v;
            gd = gd + SKTF_E(g, r) * (v - SKTF_E(m_old, r));
            msum = msum + v;
        }
        if (gd > 0 || msum < SKTF_LS_MIN_DESCENT) {
            fn = SKTF_APR_INF;
            if (count == 1) f1 = fn;
            step = step * SKTF_LS_STEP_RED;
            count += 1;
        } else {
            fn = sktf_apr_objective(c, m_new);
            if (count == 1) f1 = fn;
            if (fn <= fo + SKTF_LS_SUFF_DECR * gd) break;
            step = step * SKTF_LS_STEP_RED;
            count += 1;
        }
    }
    if (isinf(f1)) f1 = fo;
    msum = 0;
    for (SKTF_APR_INT r = 0; r < R; ++r) msum = msum + SKTF_E(m_new, r);
    if ((count >= SKTF_LS_MAX_STEPS && fn > fo) || msum < SKTF_LS_SMALL_STEP) {
        for (SKTF_APR_INT r = 0; r < R; ++r) {
            SKTF_REAL v = SKTF_E(m_old, r) * SKTF_E(phi, r);
            if (!(v > 0)) v = 0;
            SKTF_E(m_new, r) = v;
        }
        fn = sktf_apr_objective(c, m_new);
        f1 = fo;
    }
    f[0] = fo;
    f[1] = f1;
    f[2] = fn;
}

/* Solve A y = b (n x n, symmetric positive definite; A overwritten by its Cholesky factor,
 * b by y); 0 when A is not numerically positive definite. */
SKTF_INLINE int sktf_apr_cholesky_solve(const sktf_apr_ctx *c, sktf_apr_vec A, sktf_apr_vec b,
                                        const SKTF_APR_INT n)
{
    SKTF_REAL s;
    (void) c;                       /* read by SKTF_E on some devices only */
    for (SKTF_APR_INT j = 0; j < n; ++j) {
        s = SKTF_E(A, j * n + j);
        for (SKTF_APR_INT k = 0; k < j; ++k) s = s - SKTF_E(A, j * n + k) * SKTF_E(A, j * n + k);
        if (!(s > 0) || !isfinite(s)) return 0;
        s = sqrt(s);
        SKTF_E(A, j * n + j) = s;
        for (SKTF_APR_INT i = j + 1; i < n; ++i) {
            s = SKTF_E(A, i * n + j);
            for (SKTF_APR_INT k = 0; k < j; ++k) s = s - SKTF_E(A, i * n + k) * SKTF_E(A, j * n + k);
            SKTF_E(A, i * n + j) = s / SKTF_E(A, j * n + j);
        }
    }
    for (SKTF_APR_INT i = 0; i < n; ++i) {                  /* L z = b */
        s = SKTF_E(b, i);
        for (SKTF_APR_INT k = 0; k < i; ++k) s = s - SKTF_E(A, i * n + k) * SKTF_E(b, k);
        SKTF_E(b, i) = s / SKTF_E(A, i * n + i);
    }
    for (SKTF_APR_INT i = n - 1; i >= 0; --i) {             /* L^T y = z */
        s = SKTF_E(b, i);
        for (SKTF_APR_INT k = i + 1; k < n; ++k) s = s - SKTF_E(A, k * n + i) * SKTF_E(b, k);
        SKTF_E(b, i) = s / SKTF_E(A, i * n + i);
    }
    return 1;
}

/* Projected damped Newton on one row (w->m the starting point, overwritten by the result);
 * returns the inner iterations used, sets *kkt0 (the KKT violation at the first iteration)
 * and *changed (the row was not converged on entry). */
SKTF_INLINE int sktf_apr_pdnr_row(const sktf_apr_ctx *c, sktf_apr_work *w, const SKTF_REAL tol,
                                  const int max_inner, const SKTF_REAL eps_div_zero,
                                  const SKTF_REAL eps_active, const SKTF_REAL mu0,
                                  SKTF_REAL *kkt0, int *changed)
{
    const SKTF_APR_INT R = c->R;
    SKTF_REAL mu = mu0, kkt, wk, q, pred_red, actual_red, rho_, u;
    SKTF_REAL f[3];
    int n_it = 0;
    for (int i = 0; i < max_inner; ++i) {
        n_it = i + 1;
        sktf_apr_partials(c, w, w->m, eps_div_zero, 1);
        for (SKTF_APR_INT r = 0; r < R; ++r) SKTF_E(w->g, r) = 1 - SKTF_E(w->phi, r);
        kkt = sktf_apr_kkt(c, w->m, w->g);
        if (i == 0) *kkt0 = kkt;
        if (kkt < tol) break;
        *changed = 1;
        /* free variables; the others move along -g or stay at zero */
        wk = sktf_apr_active_threshold(c, w->m, w->g, eps_active);
        SKTF_APR_INT nfree = 0;
        for (SKTF_APR_INT r = 0; r < R; ++r) {
            SKTF_E(w->d, r) = 0;
            if (SKTF_E(w->m, r) <= wk && SKTF_E(w->g, r) > 0) {
                if (SKTF_E(w->m, r) != 0) SKTF_E(w->d, r) = -SKTF_E(w->g, r);
            } else {
                SKTF_E(w->free_idx, nfree) = r;
                nfree += 1;
            }
        }
        /* Hessian of the free variables: sum_t ups_t pi_t[a] pi_t[b] */
        for (SKTF_APR_INT a = 0; a < nfree * nfree; ++a) SKTF_E(w->H, a) = 0;
        for (sktf_i64 t = 0; t < c->p; ++t) {
            sktf_apr_cvec pi = sktf_apr_pi(c, t);
            u = SKTF_APR_UPS(c, w, t);
            for (SKTF_APR_INT a = 0; a < nfree; ++a) {
                q = u * SKTF_E(pi, SKTF_E(w->free_idx, a));
                for (SKTF_APR_INT b = 0; b <= a; ++b)
                    SKTF_E(w->H, a * nfree + b) = SKTF_E(w->H, a * nfree + b)
                                                  + q * SKTF_E(pi, SKTF_E(w->free_idx, b));
            }
        }
        for (SKTF_APR_INT a = 0; a < nfree; ++a) {
            SKTF_E(w->H, a * nfree + a) = SKTF_E(w->H, a * nfree + a) + mu;
            for (SKTF_APR_INT b = 0; b < a; ++b) SKTF_E(w->H, b * nfree + a) = SKTF_E(w->H, a * nfree + b);
        }
        for (SKTF_APR_INT a = 0; a < nfree * nfree; ++a) SKTF_E(w->L, a) = SKTF_E(w->H, a);
        for (SKTF_APR_INT a = 0; a < nfree; ++a) SKTF_E(w->rhs, a) = -SKTF_E(w->g, SKTF_E(w->free_idx, a));
        if (sktf_apr_cholesky_solve(c, w->L, w->rhs, nfree)) {
            for (SKTF_APR_INT a = 0; a < nfree; ++a) SKTF_E(w->d, SKTF_E(w->free_idx, a)) = SKTF_E(w->rhs, a);
        } else {
            /* the damped Hessian is numerically singular: steepest descent */
            for (SKTF_APR_INT r = 0; r < R; ++r) SKTF_E(w->d, r) = -SKTF_E(w->g, r);
        }
        /* predicted reduction of the damped quadratic model over the free variables */
        q = 0;
        pred_red = 0;
        for (SKTF_APR_INT a = 0; a < nfree; ++a) {
            const SKTF_APR_INT fa = (SKTF_APR_INT)SKTF_E(w->free_idx, a);
            u = 0;
            for (SKTF_APR_INT b = 0; b < nfree; ++b)
                u = u + SKTF_E(w->H, a * nfree + b) * SKTF_E(w->d, SKTF_E(w->free_idx, b));
            q = q + SKTF_E(w->d, fa) * u;
            pred_red = pred_red + SKTF_E(w->d, fa) * SKTF_E(w->g, fa);
        }
        pred_red = pred_red + (SKTF_REAL)0.5 * q;
        if (pred_red > 0) {
            for (SKTF_APR_INT r = 0; r < R; ++r) SKTF_E(w->d, r) = -SKTF_E(w->g, r);
        }
        sktf_apr_linesearch(c, w->d, w->g, w->m, w->phi, w->m_new, f);
        sktf_apr_copy(c, w->m, w->m_new);
        /* adapt the damping from the agreement between model and unit step */
        actual_red = f[0] - f[1];
        if (pred_red == 0) {
            mu = mu * 10;
        } else {
            rho_ = actual_red / (-pred_red);
            if (rho_ < (SKTF_REAL)0.25) mu = mu * (SKTF_REAL)3.5;
            else if (rho_ > (SKTF_REAL)0.75) mu = mu * ((SKTF_REAL)2 / (SKTF_REAL)7);
        }
    }
    return n_it;
}

/* projected L-BFGS direction (two-loop recursion over the npairs newest pairs) */
SKTF_INLINE void sktf_apr_lbfgs_direction(const sktf_apr_ctx *c, sktf_apr_work *w,
                                          const int mem, const int newest, const int npairs,
                                          const SKTF_REAL eps_active)
{
    const SKTF_APR_INT R = c->R;
    SKTF_REAL s;
    int k;
    const SKTF_REAL wk = sktf_apr_active_threshold(c, w->m, w->g, eps_active);
    for (SKTF_APR_INT r = 0; r < R; ++r) {
        SKTF_E(w->d, r) = -SKTF_E(w->g, r);
        if (SKTF_E(w->g, r) > 0 && SKTF_E(w->m, r) <= wk) SKTF_E(w->d, r) = 0;
    }
    if (npairs == 0) return;
    k = newest;
    for (int j = 0; j < npairs; ++j) {
        s = 0;
        for (SKTF_APR_INT r = 0; r < R; ++r) s = s + SKTF_E(w->S, k * R + r) * SKTF_E(w->d, r);
        SKTF_E(w->alpha, k) = SKTF_E(w->rho, k) * s;
        for (SKTF_APR_INT r = 0; r < R; ++r)
            SKTF_E(w->d, r) = SKTF_E(w->d, r) - SKTF_E(w->alpha, k) * SKTF_E(w->Y, k * R + r);
        k = (k - 1 + mem) % mem;
    }
    s = 0;
    for (SKTF_APR_INT r = 0; r < R; ++r) s = s + SKTF_E(w->Y, newest * R + r) * SKTF_E(w->Y, newest * R + r);
    s = 1 / SKTF_E(w->rho, newest) / s;
    for (SKTF_APR_INT r = 0; r < R; ++r) SKTF_E(w->d, r) = SKTF_E(w->d, r) * s;
    for (int j = 0; j < npairs; ++j) {
        k = (k + 1) % mem;
        s = 0;
        for (SKTF_APR_INT r = 0; r < R; ++r) s = s + SKTF_E(w->Y, k * R + r) * SKTF_E(w->d, r);
        s = SKTF_E(w->rho, k) * s;
        for (SKTF_APR_INT r = 0; r < R; ++r)
            SKTF_E(w->d, r) = SKTF_E(w->d, r) + (SKTF_E(w->alpha, k) - s) * SKTF_E(w->S, k * R + r);
    }
    for (SKTF_APR_INT r = 0; r < R; ++r) {
        if (SKTF_E(w->g, r) > 0 && SKTF_E(w->m, r) <= wk) SKTF_E(w->d, r) = 0;
    }
}

/* Projected quasi-Newton (L-BFGS with mem pairs) on one row; as sktf_apr_pdnr_row. */
SKTF_INLINE int sktf_apr_pqnr_row(const sktf_apr_ctx *c, sktf_apr_work *w, const SKTF_REAL tol,
                                  const int max_inner, const SKTF_REAL eps_div_zero,
                                  const SKTF_REAL eps_active, const int mem, SKTF_REAL *kkt0,
                                  int *changed)
{
    const SKTF_APR_INT R = c->R;
    int n_it = 0, newest = -1, npairs = 0;
    SKTF_REAL kkt, sy;
    SKTF_REAL f[3];
    for (int i = 0; i < max_inner; ++i) {
        n_it = i + 1;
        sktf_apr_partials(c, w, w->m, eps_div_zero, 0);
        for (SKTF_APR_INT r = 0; r < R; ++r) SKTF_E(w->g, r) = 1 - SKTF_E(w->phi, r);
        if (i == 0) {
            /* a projected gradient step primes the L-BFGS memory */
            sktf_apr_copy(c, w->m_old, w->m);
            sktf_apr_copy(c, w->g_old, w->g);
            for (SKTF_APR_INT r = 0; r < R; ++r) SKTF_E(w->d, r) = -SKTF_E(w->g, r);
            sktf_apr_linesearch(c, w->d, w->g_old, w->m_old, w->phi, w->m, f);
            sktf_apr_partials(c, w, w->m, eps_div_zero, 0);
            for (SKTF_APR_INT r = 0; r < R; ++r) SKTF_E(w->g, r) = 1 - SKTF_E(w->phi, r);
        }
        kkt = sktf_apr_kkt(c, w->m, w->g);
        if (i == 0) *kkt0 = kkt;
        if (kkt < tol) break;
        *changed = 1;
        /* store the newest (step, gradient change) pair when its curvature is positive */
        sy = 0;
        for (SKTF_APR_INT r = 0; r < R; ++r)
            sy = sy + (SKTF_E(w->m, r) - SKTF_E(w->m_old, r)) * (SKTF_E(w->g, r) - SKTF_E(w->g_old, r));
        if (sy > 0 && isfinite(1 / sy)) {
            newest = (newest + 1) % mem;
            for (SKTF_APR_INT r = 0; r < R; ++r) {
                SKTF_E(w->S, newest * R + r) = SKTF_E(w->m, r) - SKTF_E(w->m_old, r);
                SKTF_E(w->Y, newest * R + r) = SKTF_E(w->g, r) - SKTF_E(w->g_old, r);
            }
            SKTF_E(w->rho, newest) = 1 / sy;
            if (npairs < mem) npairs += 1;
        }
        sktf_apr_lbfgs_direction(c, w, mem, newest, npairs, eps_active);
        sktf_apr_copy(c, w->m_old, w->m);
        sktf_apr_copy(c, w->g_old, w->g);
        sktf_apr_linesearch(c, w->d, w->g_old, w->m_old, w->phi, w->m, f);
    }
    return n_it;
}

#undef SKTF_E

#endif /* SKTF_APR_ROW_H */
