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
 * One work-item solves one row from start to finish with the solvers of sktf_apr_row.h, the
 * functions the CPU kernels (backends/cpu/_cpapr.pyx) call too, so both give the same result.
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
} sktf_apr_ctx;

/* entry r of a scratch vector (interleaved with the other rows of the batch) */
#define E(v, r) (v)[(long)(r) * c->st]

/* Khatri-Rao row of nonzero nz into c->tmp */
inline void krp(const sktf_apr_ctx* c, const long nz)
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

/* The hooks of sktf_apr_row.h: where a row's data and scratch are. */
inline __global const REAL_T* sktf_apr_pi(const sktf_apr_ctx* c, const long t)
{
    krp(c, c->start + t);
    return c->tmp;
}

/* m . pi_t with the Khatri-Rao row formed entry by entry (the same products as krp, so the
 * same value as sktf_apr_dot(c, m, sktf_apr_pi(c, t))) without going through memory */
inline REAL_T sktf_apr_mdotpi(const sktf_apr_ctx* c, __global const REAL_T* m, const long t)
{
    const int R = c->R;
    const long nz = c->start + t;
    long off[NMODES];
    for (int k = 0; k < NMODES; ++k) off[k] = (long)c->subs[nz * NMODES + k] * R;
    REAL_T s = 0;
    for (int r = 0; r < R; ++r) {
        REAL_T pr = 1;
        for (int k = 0; k < NMODES; ++k) {
            if (k != c->mode) pr = pr * (REAL_T)c->F[k][off[k] + r];
        }
        s = s + E(m, r) * pr;
    }
    return s;
}

#define SKTF_REAL REAL_T
#define SKTF_APR_WS __global
#define SKTF_APR_IDX_T int
#define SKTF_APR_INT int
#define SKTF_APR_E(v, r) E(v, r)
#define SKTF_APR_X(c, t) ((REAL_T)(c)->vals[(c)->start + (t)])
#define SKTF_APR_UPS(c, w, t) ((w)->ups[(c)->start + (t)])

/* the solvers, written once for every device */
#include "sktf_apr_row.h"

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
        sktf_apr_ctx ctx;
        sktf_apr_ctx* c = &ctx;
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
        sktf_apr_work w;
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
            n_it = sktf_apr_pdnr_row(c, &w, tol, max_inner, eps_div_zero, eps_active, mu0, &kkt0,
                            &changed);
        else
            n_it = sktf_apr_pqnr_row(c, &w, tol, max_inner, eps_div_zero, eps_active, mem, &kkt0,
                            &changed);
        for (int r = 0; r < R; ++r) b[r] = (VAL_T)E(w.m, r);
    }
    kkt_out[row] = kkt0;
    inner_out[row] = n_it;
    changed_out[row] = changed;
}

#endif
