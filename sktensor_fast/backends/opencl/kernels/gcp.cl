/* Generalized CP on an OpenCL device: sampling, loss, sampled gradient, optimiser steps.
 *
 * The host prepends a header that defines VAL_T, IDX_T, NMODES, FACTOR_PARAMS, FACTOR_ARRAY,
 * GRAD_PARAMS ("__global VAL_T* G0, ..., G{NMODES-1}"), GRAD_ARRAY and USE_FP64 (see cp.cl).
 *
 * Every arithmetic expression below is written in the order of the CPU kernels of
 * backends/cpu/_gcp.pyx, and contraction of a*b + c into fused multiply-adds is off (as it is
 * there), so that for the same sample the two backends form the same sums.
 *
 * Random numbers: the counter-based generator of sktf_rng.h, the same functions as the CPU
 * kernels; a sample depends on (K, j) only, never on which work-item draws it.
 *
 * Sampler parameters (array `sp` of longs, set up by backends/opencl/gcp_ops.py):
 *   0 nnz          nonzeros (lexicographically sorted coordinates `subs`, values `vals`)
 *   1 nz           length of the list of (observed) zeros
 *   2 explicit_z   "other" samples are drawn from that list, not from the index space
 *   3 p            samples of nonzeros
 *   4 q            other samples
 *   5 zmode        0: other samples have value 0, 1: value looked up, 2: nonzeros rejected
 *   6 include_nz   the list is [nonzeros; zeros] (1) or the zeros only (0)
 *   7 correct      semi-stratified: nonzero samples carry the correction flag
 *   8 has_lin      `lin` holds the sorted linear indices of the nonzeros
 *   9 has_bucket   `bucket` narrows searches of `lin` by the key's high bits
 *  10 bshift       shift of those high bits
 *  11 implicit_z   the list of zeros is every entry that is not a nonzero, in linear-index
 *                  order (what numpy.argwhere lists), computed from `lin` on the fly
 *  12 max_attempts rejections of a stratified zero sample before that zero is computed from
 *                  `lin` (a uniform rank among the zeros); without `lin` rejection goes on
 *  13 nzero        entries that are not nonzeros (with `lin`)
 */
#pragma OPENCL FP_CONTRACT OFF

/* the losses f(x, m) and df/dm and the counter-based generator, written once for every
 * device (sktensor_fast/include) */
#include "sktf_losses.h"
#include "sktf_rng.h"

#define GCP_NO_KEY 0xFFFFFFFFFFFFFFFFUL

/* ----------------------------------------------------------------------------- sampling */
/* position of coordinate idx among the nonzeros, or -1 */
inline long gcp_find(__global const long* sp, __global const long* strides,
                     __global const IDX_T* subs, __global const long* lin,
                     __global const long* bucket, const long* idx)
{
    const long nnz = sp[0];
    long lo = 0, hi = nnz;
    if (sp[8]) {
        long key = 0;
        for (int k = 0; k < NMODES; ++k) key += idx[k] * strides[k];
        if (sp[9]) {
            lo = bucket[key >> sp[10]];
            hi = bucket[(key >> sp[10]) + 1];
        }
        while (lo < hi) {
            const long mid = (lo + hi) >> 1;
            if (lin[mid] < key) lo = mid + 1;
            else hi = mid;
        }
        return (lo < nnz && lin[lo] == key) ? lo : -1;
    }
    /* no linear index (the product of the shape overflows a long): compare coordinate rows */
    while (lo < hi) {
        const long mid = (lo + hi) >> 1;
        int c = 0;
        for (int k = 0; k < NMODES; ++k) {
            const long v = subs[mid * NMODES + k];
            if (v != idx[k]) {
                c = v < idx[k] ? -1 : 1;
                break;
            }
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo < nnz) {
        for (int k = 0; k < NMODES; ++k)
            if (subs[lo * NMODES + k] != idx[k]) return -1;
        return lo;
    }
    return -1;
}

/* coordinates of the t-th zero in linear-index order: with d_j = lin[j] - j the number of
 * zeros before nonzero j (non-decreasing), the nonzeros before zero t are those with
 * d_j <= t, and the zero's linear index is t plus their number */
inline void gcp_zero_coords(const long t, const long nnz, __global const long* lin,
                            __global const long* shape, __global const long* strides,
                            long* idx)
{
    long lo = 0, hi = nnz;
    while (lo < hi) {
        const long mid = (lo + hi) >> 1;
        if (lin[mid] - mid <= t) lo = mid + 1;
        else hi = mid;
    }
    const long e = t + lo;
    for (int k = 0; k < NMODES; ++k) idx[k] = (e / strides[k]) % shape[k];
}

/* sample j: coordinates into idx; returns the data value, sets the weight and the flag */
inline VAL_T gcp_sample(const long j, const ulong key, __global const long* sp,
                        __global const long* shape, __global const long* strides,
                        __global const IDX_T* subs, __global const VAL_T* vals,
                        __global const long* lin, __global const long* bucket,
                        __global const IDX_T* zsubs, const VAL_T wp, const VAL_T wq,
                        long* idx, VAL_T* w, int* corr)
{
    const long nnz = sp[0];
    const ulong skey = sktf_sample_key(key, j);
    ulong c = 0;
    if (j < sp[3]) {
        const long t = sktf_below(sktf_rand(skey, c), nnz);
        for (int k = 0; k < NMODES; ++k) idx[k] = subs[t * NMODES + k];
        *w = wp;
        *corr = (int)sp[7];
        return vals[t];
    }
    *w = wq;
    *corr = 0;
    if (sp[2]) {
        const long n = sp[1] + (sp[6] ? nnz : 0);
        long t = sktf_below(sktf_rand(skey, c), n);
        if (sp[6]) {
            if (t < nnz) {
                for (int k = 0; k < NMODES; ++k) idx[k] = subs[t * NMODES + k];
                return sp[5] == 1 ? vals[t] : (VAL_T)0;
            }
            t -= nnz;
        }
        if (sp[11]) {
            gcp_zero_coords(t, nnz, lin, shape, strides, idx);
        } else {
            for (int k = 0; k < NMODES; ++k) idx[k] = zsubs[t * NMODES + k];
        }
        return 0;
    }
    for (long a = 1;; ++a) {
        for (int k = 0; k < NMODES; ++k) {
            idx[k] = sktf_below(sktf_rand(skey, c), shape[k]);
            c += 1;
        }
        if (sp[5] == 0) return 0;
        const long pos = gcp_find(sp, strides, subs, lin, bucket, idx);
        if (sp[5] == 1) return pos >= 0 ? vals[pos] : (VAL_T)0;
        if (pos < 0) return 0;
        if (a >= sp[12] && sp[8]) {
            /* rejection keeps failing (a dense region): the zero of a uniform rank */
            gcp_zero_coords(sktf_below(sktf_rand(skey, c), sp[13]), nnz, lin, shape, strides,
                            idx);
            return 0;
        }
    }
}

/* materialise samples 0..ns-1 of step key `key` */
__kernel void gcp_draw(const ulong key, const long ns, __global const long* sp,
                       __global const long* shape, __global const long* strides,
                       __global const IDX_T* subs, __global const VAL_T* vals,
                       __global const long* lin, __global const long* bucket,
                       __global const IDX_T* zsubs, const VAL_T wp, const VAL_T wq,
                       __global IDX_T* out_subs, __global VAL_T* out_x,
                       __global VAL_T* out_w, __global char* out_corr)
{
    const long j = get_global_id(0);
    if (j >= ns) return;
    long idx[NMODES];
    VAL_T w = 0;
    int corr = 0;
    const VAL_T x = gcp_sample(j, key, sp, shape, strides, subs, vals, lin, bucket, zsubs,
                               wp, wq, idx, &w, &corr);
    for (int k = 0; k < NMODES; ++k) out_subs[j * NMODES + k] = (IDX_T)idx[k];
    out_x[j] = x;
    out_w[j] = w;
    out_corr[j] = (char)corr;
}

/* -------------------------------------------------------------------- sampled gradient */
/* Per sample j < ns: the model value m (written to m_out), and for a built-in loss
 * (code >= 0) the weighted derivative y = w (f'(x, m) - corr f'(0, m)) and, when want_loss,
 * the weighted loss w (f(x, m) - corr f(0, m)).  For every active mode k the sort key
 * (row << 32 | j) goes to keys[k * npad + j]; entries ns..npad-1 get the largest key. */
__kernel void gcp_terms(const long ns, const long npad, const int R, const int code,
                        const VAL_T param, __global const VAL_T* lam, FACTOR_PARAMS,
                        __global const IDX_T* ssubs, __global const VAL_T* sx,
                        __global const VAL_T* sw, __global const char* scorr,
                        __global const int* active, const int want_loss,
                        __global VAL_T* m_out, __global VAL_T* y_out, __global VAL_T* f_out,
                        __global ulong* keys)
{
    FACTOR_ARRAY
    const long j = get_global_id(0);
    if (j >= npad) return;
    if (j >= ns) {
        for (int k = 0; k < NMODES; ++k)
            if (active[k]) keys[k * npad + j] = GCP_NO_KEY;
        return;
    }
    __global const IDX_T* ij = ssubs + j * NMODES;
    VAL_T m = 0;
    for (int r = 0; r < R; ++r) {
        VAL_T s = 1;
        for (int k = NMODES - 1; k >= 1; --k) s = s * F[k][(long)ij[k] * R + r];
        m = m + lam[r] * F[0][(long)ij[0] * R + r] * s;
    }
    m_out[j] = m;
    if (code >= 0) {
        const VAL_T x = sx[j], w = sw[j];
        const int corr = scorr[j];
        VAL_T yv = sktf_loss_deriv(code, param, x, m);
        if (corr) yv = yv - sktf_loss_deriv(code, param, 0, m);
        y_out[j] = w * yv;
        if (want_loss) {
            VAL_T f = sktf_loss_value(code, param, x, m);
            if (corr) f = f - sktf_loss_value(code, param, 0, m);
            f_out[j] = w * f;
        }
    }
    for (int k = 0; k < NMODES; ++k)
        if (active[k]) keys[k * npad + j] = ((ulong)ij[k] << 32) | (ulong)j;
}

/* Bitonic sort of the keys of every active mode (rows of `keys`, npad a power of two).
 * gcp_sort_local works on blocks of 2 L keys in local memory: with kfix == 0 it runs the
 * stages k = 2 .. 2L (sorting each block in the direction the network asks for), else the
 * steps j = L .. 1 of stage kfix.  gcp_sort_global runs one step (k, j) with j >= 2L. */
__kernel void gcp_sort_local(const long npad, __global const int* active,
                             __global ulong* keys, const long kfix, __local ulong* buf)
{
    const int mode = get_global_id(1);
    if (!active[mode]) return;
    __global ulong* a = keys + mode * npad;
    const long L = get_local_size(0);
    const long t = get_local_id(0);
    const long base = (long)get_group_id(0) * 2 * L;
    buf[t] = a[base + t];
    buf[t + L] = a[base + t + L];
    barrier(CLK_LOCAL_MEM_FENCE);
    const long k0 = kfix ? kfix : 2;
    const long k1 = kfix ? kfix : 2 * L;
    for (long k = k0; k <= k1; k <<= 1) {
        for (long j = kfix ? L : (k >> 1); j > 0; j >>= 1) {
            const long i = 2 * j * (t / j) + (t & (j - 1));
            const int up = ((base + i) & k) == 0;
            const ulong x = buf[i], y = buf[i + j];
            if ((x > y) == up) {
                buf[i] = y;
                buf[i + j] = x;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    a[base + t] = buf[t];
    a[base + t + L] = buf[t + L];
}

__kernel void gcp_sort_global(const long npad, __global const int* active,
                              __global ulong* keys, const long k, const long j)
{
    const int mode = get_global_id(1);
    if (!active[mode]) return;
    __global ulong* a = keys + mode * npad;
    const long t = get_global_id(0);
    const long i = 2 * j * (t / j) + (t & (j - 1));
    const int up = (i & k) == 0;
    const ulong x = a[i], y = a[i + j];
    if ((x > y) == up) {
        a[i] = y;
        a[i + j] = x;
    }
}

/* Gradient rows of every active mode from the sorted keys: work-item (r, p, k) with p the
 * first position of a run of equal rows sums the run's contributions, in increasing sample
 * order, into column r of its row (no atomics: every row is written by one work-item, and the
 * sums are those of the CPU kernel).  The contribution of sample j to mode k is
 * ((y lam[r]) prod_{l<k} A_l[i_l, r]) * (prod_{l>k} A_l[i_l, r], from the last mode down).
 * Rows without samples are not written (the host zeroes the gradients first). */
__kernel void gcp_scatter(const long ns, const long npad, const int R,
                          __global const VAL_T* lam, FACTOR_PARAMS,
                          __global const IDX_T* ssubs, __global const VAL_T* y,
                          __global const ulong* keys, __global const int* active,
                          GRAD_PARAMS)
{
    FACTOR_ARRAY
    GRAD_ARRAY
    const int r = get_global_id(0);
    const long p = get_global_id(1);
    const int k = get_global_id(2);
    if (r >= R || p >= ns || !active[k]) return;
    __global const ulong* kk = keys + k * npad;
    const ulong row = kk[p] >> 32;
    if (p > 0 && (kk[p - 1] >> 32) == row) return;
    VAL_T acc = 0;
    for (long q = p; q < ns && (kk[q] >> 32) == row; ++q) {
        const long j = (long)(kk[q] & 0xFFFFFFFFUL);
        __global const IDX_T* ij = ssubs + j * NMODES;
        VAL_T pre = y[j] * lam[r];
        for (int l = 0; l < k; ++l) pre = pre * F[l][(long)ij[l] * R + r];
        VAL_T suf = 1;
        for (int l = NMODES - 1; l > k; --l) suf = suf * F[l][(long)ij[l] * R + r];
        acc = acc + pre * suf;
    }
    G[k][(long)row * R + r] = acc;
}

/* --------------------------------------------------------------------------- loss sums */
/* Per sample: w (f(x, m) - corr f(0, m)) with m formed as the CPU's loss sum forms it
 * (lam[r] times the rows of modes 0, 1, ...); for a user-defined loss (code < 0) only m. */
__kernel void gcp_sample_loss(const long ns, const int R, const int code, const VAL_T param,
                              __global const VAL_T* lam, FACTOR_PARAMS,
                              __global const IDX_T* ssubs, __global const VAL_T* sx,
                              __global const VAL_T* sw, __global const char* scorr,
                              __global VAL_T* m_out, __global VAL_T* f_out)
{
    FACTOR_ARRAY
    const long j = get_global_id(0);
    if (j >= ns) return;
    __global const IDX_T* ij = ssubs + j * NMODES;
    VAL_T m = 0;
    for (int r = 0; r < R; ++r) {
        VAL_T prod = lam[r];
        for (int k = 0; k < NMODES; ++k) prod = prod * F[k][(long)ij[k] * R + r];
        m = m + prod;
    }
    m_out[j] = m;
    if (code >= 0) {
        VAL_T f = sktf_loss_value(code, param, sx[j], m);
        if (scorr[j]) f = f - sktf_loss_value(code, param, 0, m);
        f_out[j] = sw[j] * f;
    }
}

/* part[c] = f[c chunk] + ... + f[(c + 1) chunk - 1], added in order */
__kernel void gcp_chunk_sums(const long n, const long chunk, __global const VAL_T* f,
                             __global VAL_T* part)
{
    const long c = get_global_id(0);
    const long j0 = c * chunk;
    if (j0 >= n) return;
    const long j1 = min(n, j0 + chunk);
    VAL_T s = 0;
    for (long j = j0; j < j1; ++j) s = s + f[j];
    part[c] = s;
}

/* ------------------------------------------------------------------- tensor set-up */
__kernel void gcp_linear_index(const long nnz, __global const IDX_T* subs,
                               __global const long* strides, __global long* lin)
{
    const long j = get_global_id(0);
    if (j >= nnz) return;
    long s = 0;
    for (int k = 0; k < NMODES; ++k) s += (long)subs[j * NMODES + k] * strides[k];
    lin[j] = s;
}

/* bucket[b] = number of nonzeros whose linear index is below b << shift (b = 0..nb) */
__kernel void gcp_bucket(const long nb, const long nnz, const int shift,
                         __global const long* lin, __global long* bucket)
{
    const long b = get_global_id(0);
    if (b > nb) return;
    if (b == nb) {
        bucket[b] = nnz;
        return;
    }
    const long key = b << shift;
    long lo = 0, hi = nnz;
    while (lo < hi) {
        const long mid = (lo + hi) >> 1;
        if (lin[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    bucket[b] = lo;
}

/* bad[0] = 1 when the coordinate rows are not strictly increasing (lexicographically) */
__kernel void gcp_check_order(const long nnz, __global const IDX_T* subs, __global int* bad)
{
    const long j = get_global_id(0) + 1;
    if (j >= nnz) return;
    int c = 0;
    for (int k = 0; k < NMODES; ++k) {
        const IDX_T a = subs[(j - 1) * NMODES + k], b = subs[j * NMODES + k];
        if (a != b) {
            c = a < b ? -1 : 1;
            break;
        }
    }
    if (c >= 0) bad[0] = 1;
}

/* -------------------------------------------------------------------- optimiser steps */
__kernel void gcp_adam(const long n, __global VAL_T* u, __global const VAL_T* g,
                       __global VAL_T* mom, __global VAL_T* var, const VAL_T beta1,
                       const VAL_T beta2, const VAL_T a, const VAL_T e, const VAL_T lower)
{
    const long i = get_global_id(0);
    if (i >= n) return;
    const VAL_T b1 = (VAL_T)1 - beta1, b2 = (VAL_T)1 - beta2;
    const VAL_T gi = g[i];
    const VAL_T mi = beta1 * mom[i] + b1 * gi;
    const VAL_T vi = beta2 * var[i] + b2 * gi * gi;
    mom[i] = mi;
    var[i] = vi;
    const VAL_T ui = u[i] - a * mi / (sqrt(vi) + e);
    u[i] = ui < lower ? lower : ui;
}

__kernel void gcp_adagrad(const long n, __global VAL_T* u, __global const VAL_T* g,
                          __global VAL_T* acc, const VAL_T lr, const VAL_T eps,
                          const VAL_T lower)
{
    const long i = get_global_id(0);
    if (i >= n) return;
    const VAL_T gi = g[i];
    const VAL_T si = acc[i] + gi * gi;
    acc[i] = si;
    const VAL_T ui = u[i] - lr * gi / (sqrt(si) + eps);
    u[i] = ui < lower ? lower : ui;
}

__kernel void gcp_sgd(const long n, __global VAL_T* u, __global const VAL_T* g,
                      const VAL_T lr, const VAL_T lower)
{
    const long i = get_global_id(0);
    if (i >= n) return;
    const VAL_T ui = u[i] - lr * g[i];
    u[i] = ui < lower ? lower : ui;
}
