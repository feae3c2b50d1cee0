/* CP-APR row subproblems on the device: projected damped Newton (PDN-R), projected L-BFGS
 * (PQN-R), the row-wise multiplicative step and the reductions of their per-row results.
 *
 * The host prepends a header (see cp.cl) and defines in addition:
 *   REAL_T      the type the solvers compute in (double when the device has fp64, like the
 *               CPU solver, else float); VAL_T is the type of the data, factors and B
 *   REAL_FP64   when REAL_T is double
 * The row solver kernels exist only when NMODES is defined.
 *
 * With every factor but B held fixed, row i of B solves
 *     minimise  f(b) = sum_r b_r - sum_t x_t log(b . pi_t)   over b >= 0,
 * t running over the nonzeros of row i: the run row_ptr[i]:row_ptr[i+1] of the tensor's copy
 * sorted by the mode, pi_t the product of the other factors' rows (formed on the fly).
 * One work-item solves one row from start to finish, with the same operations in the same
 * order as backends/cpu/_cpapr.pyx, so both give the same result.
 *
 * Per-row scratch lives in global memory, interleaved: entry k of a row's scratch is at
 * k * st + lid (lid the row's place in the batch, st the batch capacity), so that neighbouring
 * work-items read neighbouring addresses.
 */
#ifdef REAL_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
/* no fused multiply-adds: the CPU build does not use them either */
#pragma OPENCL FP_CONTRACT OFF

#define RED_WG 256

/* Largest KKT violation, inner iterations summed and rows changed, over n rows: one
 * work-group (size a power of two <= RED_WG).  out[0] holds the bits of the maximum
 * (REAL_T), out[1] and out[2] the two sums.  With use_kkt == 0 only the sums are formed. */
__kernel void reduce_rows(const long n, const int use_kkt, __global const REAL_T* kkt,
                          __global const int* inner, __global const int* changed,
                          __global ulong* out)
{
    __local REAL_T lk[RED_WG];
    __local long li[RED_WG];
    __local long lc[RED_WG];
    const int l = get_local_id(0);
    const int G = get_local_size(0);
    REAL_T k = 0;
    long si = 0, sc = 0;
    for (long i = l; i < n; i += G) {
        if (use_kkt) {
            const REAL_T v = kkt[i];
            if (isnan(v) || v > k) k = v;      /* NaN propagates, like NumPy's max */
        }
        si += inner[i];
        sc += changed[i];
    }
    lk[l] = k;
    li[l] = si;
    lc[l] = sc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = G / 2; h > 0; h /= 2) {
        if (l < h) {
            const REAL_T v = lk[l + h];
            if (!isnan(lk[l]) && (isnan(v) || v > lk[l])) lk[l] = v;
            li[l] += li[l + h];
            lc[l] += lc[l + h];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l == 0) {
#ifdef REAL_FP64
        out[0] = as_ulong(lk[0]);
#else
        out[0] = (ulong)as_uint(lk[0]);
#endif
        out[1] = (ulong)li[0];
        out[2] = (ulong)lc[0];
    }
}

/* Row-wise multiplicative step of CP-APR: B[i] *= Phi[i] for the rows whose KKT violation
 * max_r |min(B, 1 - Phi)| is at least tol; flag[i] says whether row i was updated. */
__kernel void apr_mu_rows(const long I, const int R, __global VAL_T* B,
                          __global const VAL_T* Phi, const VAL_T tol, __global int* flag)
{
    const long i = get_global_id(0);
    if (i >= I) return;
    __global VAL_T* b = B + i * R;
    __global const VAL_T* ph = Phi + i * R;
    VAL_T k = 0;
    for (int r = 0; r < R; ++r) {
        const VAL_T t = (VAL_T)1 - ph[r];
        const VAL_T a = (isnan(b[r]) || isnan(t)) ? b[r] + t : fabs(b[r] < t ? b[r] : t);
        if (isnan(a) || a > k) k = a;
        if (isnan(k)) break;
    }
    const int upd = k >= tol;
    if (upd) {
        for (int r = 0; r < R; ++r) b[r] = b[r] * ph[r];
    }
    flag[i] = upd;
}

#ifdef NMODES

/* row_ptr[r] = first position of the mode-sorted nonzeros whose coordinate is >= r, for
 * r = 0..I: work-item j writes the entries between the coordinates of nonzeros j-1 and j. */
__kernel void row_pointers(const long nnz, const long I, const int mode,
                           __global const IDX_T* subs, __global long* row_ptr)
{
    const long j = get_global_id(0);
    if (j > nnz) return;
    const long cur = j < nnz ? (long)subs[j * NMODES + mode] : I;
    const long prev = j > 0 ? (long)subs[(j - 1) * NMODES + mode] : -1;
    for (long r = prev + 1; r <= cur; ++r) row_ptr[r] = j;
}

#define LS_STEP_RED ((REAL_T)0.5)
#define LS_MAX_STEPS 10
#define LS_SUFF_DECR ((REAL_T)1.0e-4)
#define LS_MIN_DESCENT ((REAL_T)1.0e-7)
#define LS_SMALL_STEP ((REAL_T)1.0e-7)

typedef struct {
    int R;
    int mode;
    long p;                              /* nonzeros of the row */
    long start;                          /* first of them in the mode-sorted copy */
    long st;                             /* stride of the interleaved scratch */
    __global const IDX_T* subs;
    __global const VAL_T* vals;
    __global const VAL_T* F[NMODES];
    __global REAL_T* tmp;                /* one Khatri-Rao row */
} RowCtx;

/* entry r of a scratch vector */
#define E(v, r) (v)[(long)(r) * c->st]

/* Khatri-Rao row of nonzero nz into c->tmp */
inline void krp(const RowCtx* c, const long nz)
{
    const int R = c->R;
    int first = 1;
    for (int k = 0; k < NMODES; ++k) {
        if (k == c->mode) continue;
        __global const VAL_T* a = c->F[k] + (long)c->subs[nz * NMODES + k] * R;
        if (first) {
            for (int r = 0; r < R; ++r) E(c->tmp, r) = (REAL_T)a[r];
            first = 0;
        } else {
            for (int r = 0; r < R; ++r) E(c->tmp, r) = E(c->tmp, r) * (REAL_T)a[r];
        }
    }
    if (first) {
        for (int r = 0; r < R; ++r) E(c->tmp, r) = 1;
    }
}

inline REAL_T dotv(const RowCtx* c, __global const REAL_T* a, __global const REAL_T* b)
{
    REAL_T s = 0;
    for (int r = 0; r < c->R; ++r) s = s + E(a, r) * E(b, r);
    return s;
}

/* negative log-likelihood of the row: sum(m) - sum_t x_t log(m . pi_t); the Khatri-Rao rows
 * are formed entry by entry (the same products as krp) without going through memory */
REAL_T objective(const RowCtx* c, __global const REAL_T* m)
{
    const int R = c->R;
    REAL_T term1 = 0, term2 = 0;
    long off[NMODES];
    for (int r = 0; r < R; ++r) term1 = term1 - E(m, r);
    for (long t = 0; t < c->p; ++t) {
        const long nz = c->start + t;
        for (int k = 0; k < NMODES; ++k) off[k] = (long)c->subs[nz * NMODES + k] * R;
        REAL_T s = 0;
        for (int r = 0; r < R; ++r) {
            REAL_T pr = 1;
            for (int k = 0; k < NMODES; ++k) {
                if (k != c->mode) pr = pr * (REAL_T)c->F[k][off[k] + r];
            }
            s = s + E(m, r) * pr;
        }
        term2 = term2 + (REAL_T)c->vals[nz] * log(s);
    }
    return -(term1 + term2);
}

/* phi = sum_t x_t / max(v_t, eps) pi_t with v_t = m . pi_t; ups_t = x_t / max(v_t^2, eps) */
void partials(const RowCtx* c, __global const REAL_T* m, const REAL_T eps,
              __global REAL_T* phi, __global REAL_T* ups)
{
    const int R = c->R;
    for (int r = 0; r < R; ++r) E(phi, r) = 0;
    for (long t = 0; t < c->p; ++t) {
        const long nz = c->start + t;
        krp(c, nz);
        const REAL_T v = dotv(c, m, c->tmp);
        const REAL_T x = (REAL_T)c->vals[nz];
        const REAL_T w = x / (v > eps ? v : eps);
        for (int r = 0; r < R; ++r) E(phi, r) = E(phi, r) + w * E(c->tmp, r);
        if (ups) ups[nz] = x / (v * v > eps ? v * v : eps);
    }
}

/* max_r |min(m_r, g_r)| */
inline REAL_T kkt_violation(const RowCtx* c, __global const REAL_T* m,
                            __global const REAL_T* g)
{
    REAL_T k = 0;
    for (int r = 0; r < c->R; ++r) {
        const REAL_T a = fabs(E(m, r) < E(g, r) ? E(m, r) : E(g, r));
        if (a > k) k = a;
    }
    return k;
}

/* min(eps_active, ||min(m, g)||): Bertsekas' threshold for the active set */
inline REAL_T active_threshold(const RowCtx* c, __global const REAL_T* m,
                               __global const REAL_T* g, const REAL_T eps_active)
{
    REAL_T s = 0;
    for (int r = 0; r < c->R; ++r) {
        const REAL_T a = E(m, r) < E(g, r) ? E(m, r) : E(g, r);
        s = s + a * a;
    }
    s = sqrt(s);
    return eps_active < s ? eps_active : s;
}

/* Projected backtracking search along d from m_old into m_new, falling back on the
 * multiplicative step m_old * phi; f[0] = f(m_old), f[1] = f after the unit step (f(m_old)
 * when not evaluated or on fall-back), f[2] = f(m_new). */
void linesearch(const RowCtx* c, __global const REAL_T* d, __global const REAL_T* g,
                __global const REAL_T* m_old, __global const REAL_T* phi,
                __global REAL_T* m_new, REAL_T* f)
{
    const int R = c->R;
    REAL_T step = 1, gd, msum, fn = INFINITY, f1 = INFINITY;
    int count = 1;
    const REAL_T fo = objective(c, m_old);
    while (count <= LS_MAX_STEPS) {
        gd = 0;
        msum = 0;
        for (int r = 0; r < R; ++r) {
            REAL_T v = E(m_old, r) + step * E(d, r);
            if (!(v > 0)) v = 0;
            E(m_new, r) = v;
            gd = gd + E(g, r) * (v - E(m_old, r));
            msum = msum + v;
        }
        if (gd > 0 || msum < LS_MIN_DESCENT) {
            fn = INFINITY;
            if (count == 1) f1 = fn;
            step = step * LS_STEP_RED;
            count += 1;
        } else {
            fn = objective(c, m_new);
            if (count == 1) f1 = fn;
            if (fn <= fo + LS_SUFF_DECR * gd) break;
            step = step * LS_STEP_RED;
            count += 1;
        }
    }
    if (isinf(f1)) f1 = fo;
    msum = 0;
    for (int r = 0; r < R; ++r) msum = msum + E(m_new, r);
    if ((count >= LS_MAX_STEPS && fn > fo) || msum < LS_SMALL_STEP) {
        for (int r = 0; r < R; ++r) {
            REAL_T v = E(m_old, r) * E(phi, r);
            if (!(v > 0)) v = 0;
            E(m_new, r) = v;
        }
        fn = objective(c, m_new);
        f1 = fo;
    }
    f[0] = fo;
    f[1] = f1;
    f[2] = fn;
}

/* Solve A y = b (n x n, symmetric positive definite; A overwritten by its Cholesky factor,
 * b by y); 0 when A is not numerically positive definite. */
int cholesky_solve(const RowCtx* c, __global REAL_T* A, __global REAL_T* b, const int n)
{
    REAL_T s;
    for (int j = 0; j < n; ++j) {
        s = E(A, j * n + j);
        for (int k = 0; k < j; ++k) s = s - E(A, j * n + k) * E(A, j * n + k);
        if (!(s > 0) || !isfinite(s)) return 0;
        s = sqrt(s);
        E(A, j * n + j) = s;
        for (int i = j + 1; i < n; ++i) {
            s = E(A, i * n + j);
            for (int k = 0; k < j; ++k) s = s - E(A, i * n + k) * E(A, j * n + k);
            E(A, i * n + j) = s / E(A, j * n + j);
        }
    }
    for (int i = 0; i < n; ++i) {                  /* L z = b */
        s = E(b, i);
        for (int k = 0; k < i; ++k) s = s - E(A, i * n + k) * E(b, k);
        E(b, i) = s / E(A, i * n + i);
    }
    for (int i = n - 1; i >= 0; --i) {             /* L^T y = z */
        s = E(b, i);
        for (int k = i + 1; k < n; ++k) s = s - E(A, k * n + i) * E(b, k);
        E(b, i) = s / E(A, i * n + i);
    }
    return 1;
}

typedef struct {
    __global REAL_T* m;
    __global REAL_T* m_new;
    __global REAL_T* m_old;
    __global REAL_T* g;
    __global REAL_T* g_old;
    __global REAL_T* phi;
    __global REAL_T* d;
    __global REAL_T* rhs;
    __global REAL_T* H;                  /* R x R (PDN-R) */
    __global REAL_T* L;                  /* R x R (PDN-R) */
    __global REAL_T* S;                  /* mem x R (PQN-R) */
    __global REAL_T* Y;                  /* mem x R (PQN-R) */
    __global REAL_T* rho;                /* mem (PQN-R) */
    __global REAL_T* alpha;              /* mem (PQN-R) */
    __global REAL_T* ups;                /* indexed by nonzero (PDN-R) */
    __global int* free_idx;              /* R (PDN-R) */
} Work;

inline void copyv(const RowCtx* c, __global REAL_T* dst, __global const REAL_T* src)
{
    for (int r = 0; r < c->R; ++r) E(dst, r) = E(src, r);
}

int pdnr_row(const RowCtx* c, const Work* w, const REAL_T tol, const int max_inner,
             const REAL_T eps_div_zero, const REAL_T eps_active, const REAL_T mu0,
             REAL_T* kkt0, int* changed)
{
    const int R = c->R;
    REAL_T mu = mu0, kkt, wk, q, pred_red, actual_red, rho_, u;
    REAL_T f[3];
    int n_it = 0;
    for (int i = 0; i < max_inner; ++i) {
        n_it = i + 1;
        partials(c, w->m, eps_div_zero, w->phi, w->ups);
        for (int r = 0; r < R; ++r) E(w->g, r) = 1 - E(w->phi, r);
        kkt = kkt_violation(c, w->m, w->g);
        if (i == 0) *kkt0 = kkt;
        if (kkt < tol) break;
        *changed = 1;
        /* free variables; the others move along -g or stay at zero */
        wk = active_threshold(c, w->m, w->g, eps_active);
        int nfree = 0;
        for (int r = 0; r < R; ++r) {
            E(w->d, r) = 0;
            if (E(w->m, r) <= wk && E(w->g, r) > 0) {
                if (E(w->m, r) != 0) E(w->d, r) = -E(w->g, r);
            } else {
                E(w->free_idx, nfree) = r;
                nfree += 1;
            }
        }
        /* Hessian of the free variables: sum_t ups_t pi_t[a] pi_t[b] */
        for (int a = 0; a < nfree * nfree; ++a) E(w->H, a) = 0;
        for (long t = 0; t < c->p; ++t) {
            const long nz = c->start + t;
            krp(c, nz);
            u = w->ups[nz];
            for (int a = 0; a < nfree; ++a) {
                q = u * E(c->tmp, E(w->free_idx, a));
                for (int b = 0; b <= a; ++b)
                    E(w->H, a * nfree + b) = E(w->H, a * nfree + b)
                                             + q * E(c->tmp, E(w->free_idx, b));
            }
        }
        for (int a = 0; a < nfree; ++a) {
            E(w->H, a * nfree + a) = E(w->H, a * nfree + a) + mu;
            for (int b = 0; b < a; ++b) E(w->H, b * nfree + a) = E(w->H, a * nfree + b);
        }
        for (int a = 0; a < nfree * nfree; ++a) E(w->L, a) = E(w->H, a);
        for (int a = 0; a < nfree; ++a) E(w->rhs, a) = -E(w->g, E(w->free_idx, a));
        if (cholesky_solve(c, w->L, w->rhs, nfree)) {
            for (int a = 0; a < nfree; ++a) E(w->d, E(w->free_idx, a)) = E(w->rhs, a);
        } else {
            /* the damped Hessian is numerically singular: steepest descent */
            for (int r = 0; r < R; ++r) E(w->d, r) = -E(w->g, r);
        }
        /* predicted reduction of the damped quadratic model over the free variables */
        q = 0;
        pred_red = 0;
        for (int a = 0; a < nfree; ++a) {
            const int fa = E(w->free_idx, a);
            u = 0;
            for (int b = 0; b < nfree; ++b)
                u = u + E(w->H, a * nfree + b) * E(w->d, E(w->free_idx, b));
            q = q + E(w->d, fa) * u;
            pred_red = pred_red + E(w->d, fa) * E(w->g, fa);
        }
        pred_red = pred_red + (REAL_T)0.5 * q;
        if (pred_red > 0) {
            for (int r = 0; r < R; ++r) E(w->d, r) = -E(w->g, r);
        }
        linesearch(c, w->d, w->g, w->m, w->phi, w->m_new, f);
        copyv(c, w->m, w->m_new);
        /* adapt the damping from the agreement between model and unit step */
        actual_red = f[0] - f[1];
        if (pred_red == 0) {
            mu = mu * 10;
        } else {
            rho_ = actual_red / (-pred_red);
            if (rho_ < (REAL_T)0.25) mu = mu * (REAL_T)3.5;
            else if (rho_ > (REAL_T)0.75) mu = mu * ((REAL_T)2 / (REAL_T)7);
        }
    }
    return n_it;
}

/* projected L-BFGS direction (two-loop recursion over the npairs newest pairs) */
void lbfgs_direction(const RowCtx* c, const Work* w, const int mem, const int newest,
                     const int npairs, const REAL_T eps_active)
{
    const int R = c->R;
    REAL_T s;
    int k;
    const REAL_T wk = active_threshold(c, w->m, w->g, eps_active);
    for (int r = 0; r < R; ++r) {
        E(w->d, r) = -E(w->g, r);
        if (E(w->g, r) > 0 && E(w->m, r) <= wk) E(w->d, r) = 0;
    }
    if (npairs == 0) return;
    k = newest;
    for (int j = 0; j < npairs; ++j) {
        s = 0;
        for (int r = 0; r < R; ++r) s = s + E(w->S, k * R + r) * E(w->d, r);
        E(w->alpha, k) = E(w->rho, k) * s;
        for (int r = 0; r < R; ++r) E(w->d, r) = E(w->d, r) - E(w->alpha, k) * E(w->Y, k * R + r);
        k = (k - 1 + mem) % mem;
    }
    s = 0;
    for (int r = 0; r < R; ++r) s = s + E(w->Y, newest * R + r) * E(w->Y, newest * R + r);
    s = 1 / E(w->rho, newest) / s;
    for (int r = 0; r < R; ++r) E(w->d, r) = E(w->d, r) * s;
    for (int j = 0; j < npairs; ++j) {
        k = (k + 1) % mem;
        s = 0;
        for (int r = 0; r < R; ++r) s = s + E(w->Y, k * R + r) * E(w->d, r);
        s = E(w->rho, k) * s;
        for (int r = 0; r < R; ++r)
            E(w->d, r) = E(w->d, r) + (E(w->alpha, k) - s) * E(w->S, k * R + r);
    }
    for (int r = 0; r < R; ++r) {
        if (E(w->g, r) > 0 && E(w->m, r) <= wk) E(w->d, r) = 0;
    }
}

int pqnr_row(const RowCtx* c, const Work* w, const REAL_T tol, const int max_inner,
             const REAL_T eps_div_zero, const REAL_T eps_active, const int mem,
             REAL_T* kkt0, int* changed)
{
    const int R = c->R;
    int n_it = 0, newest = -1, npairs = 0;
    REAL_T kkt, sy;
    REAL_T f[3];
    for (int i = 0; i < max_inner; ++i) {
        n_it = i + 1;
        partials(c, w->m, eps_div_zero, w->phi, 0);
        for (int r = 0; r < R; ++r) E(w->g, r) = 1 - E(w->phi, r);
        if (i == 0) {
            /* a projected gradient step primes the L-BFGS memory */
            copyv(c, w->m_old, w->m);
            copyv(c, w->g_old, w->g);
            for (int r = 0; r < R; ++r) E(w->d, r) = -E(w->g, r);
            linesearch(c, w->d, w->g_old, w->m_old, w->phi, w->m, f);
            partials(c, w->m, eps_div_zero, w->phi, 0);
            for (int r = 0; r < R; ++r) E(w->g, r) = 1 - E(w->phi, r);
        }
        kkt = kkt_violation(c, w->m, w->g);
        if (i == 0) *kkt0 = kkt;
        if (kkt < tol) break;
        *changed = 1;
        /* store the newest (step, gradient change) pair when its curvature is positive */
        sy = 0;
        for (int r = 0; r < R; ++r)
            sy = sy + (E(w->m, r) - E(w->m_old, r)) * (E(w->g, r) - E(w->g_old, r));
        if (sy > 0 && isfinite(1 / sy)) {
            newest = (newest + 1) % mem;
            for (int r = 0; r < R; ++r) {
                E(w->S, newest * R + r) = E(w->m, r) - E(w->m_old, r);
                E(w->Y, newest * R + r) = E(w->g, r) - E(w->g_old, r);
            }
            E(w->rho, newest) = 1 / sy;
            if (npairs < mem) npairs += 1;
        }
        lbfgs_direction(c, w, mem, newest, npairs, eps_active);
        copyv(c, w->m_old, w->m);
        copyv(c, w->g_old, w->g);
        linesearch(c, w->d, w->g_old, w->m_old, w->phi, w->m, f);
    }
    return n_it;
}

/* Solve rows row0 .. row0 + nrows - 1 of the mode in place in B (one work-item per row).
 * method 0: PDN-R, 1: PQN-R.  work holds st * (9 R + extra) REAL_T (extra: 2 R^2 for PDN-R,
 * 2 mem R + 2 mem for PQN-R), iwork st * R ints (PDN-R), ups one REAL_T per nonzero (PDN-R).
 * Per row: kkt_out (KKT violation at the first inner iteration), inner_out (inner
 * iterations), changed_out (not converged on entry); rows without nonzeros are set to 0. */
__kernel void apr_rows(const int method, const long row0, const long nrows, const long st,
                       const int R, const int mode, __global const long* row_ptr,
                       __global const IDX_T* subs, __global const VAL_T* vals,
                       FACTOR_PARAMS,
                       __global VAL_T* B, const REAL_T tol, const int max_inner,
                       const REAL_T eps_div_zero, const REAL_T eps_active, const REAL_T mu0,
                       const int mem, __global REAL_T* work, __global int* iwork,
                       __global REAL_T* ups, __global REAL_T* kkt_out,
                       __global int* inner_out, __global int* changed_out)
{
    const long lid = get_global_id(0);
    if (lid >= nrows) return;
    const long row = row0 + lid;
    __global VAL_T* b = B + row * R;
    const long start = row_ptr[row];
    const long p = row_ptr[row + 1] - start;
    REAL_T kkt0 = 0;
    int changed = 0, n_it = 0;
    if (p == 0) {
        /* no data in this row: the optimum is zero */
        for (int r = 0; r < R; ++r) b[r] = 0;
    } else {
        FACTOR_ARRAY
        RowCtx ctx;
        RowCtx* c = &ctx;
        ctx.R = R;
        ctx.mode = mode;
        ctx.p = p;
        ctx.start = start;
        ctx.st = st;
        ctx.subs = subs;
        ctx.vals = vals;
        for (int k = 0; k < NMODES; ++k) ctx.F[k] = F[k];
        __global REAL_T* base = work + lid;
        const long vr = (long)R * st;
        Work w;
        w.m = base;
        w.m_new = base + vr;
        w.m_old = base + 2 * vr;
        w.g = base + 3 * vr;
        w.g_old = base + 4 * vr;
        w.phi = base + 5 * vr;
        w.d = base + 6 * vr;
        w.rhs = base + 7 * vr;
        ctx.tmp = base + 8 * vr;
        __global REAL_T* extra = base + 9 * vr;
        w.H = extra;
        w.L = extra + (long)R * vr;
        w.S = extra;
        w.Y = extra + (long)mem * vr;
        w.rho = extra + 2 * (long)mem * vr;
        w.alpha = extra + 2 * (long)mem * vr + (long)mem * st;
        w.ups = ups;
        w.free_idx = iwork + lid;
        for (int r = 0; r < R; ++r) E(w.m, r) = (REAL_T)b[r];
        if (method == 0)
            n_it = pdnr_row(c, &w, tol, max_inner, eps_div_zero, eps_active, mu0, &kkt0,
                            &changed);
        else
            n_it = pqnr_row(c, &w, tol, max_inner, eps_div_zero, eps_active, mem, &kkt0,
                            &changed);
        for (int r = 0; r < R; ++r) b[r] = (VAL_T)E(w.m, r);
    }
    kkt_out[row] = kkt0;
    inner_out[row] = n_it;
    changed_out[row] = changed;
}

#endif
