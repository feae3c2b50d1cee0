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
 * Sampling: the samplers of sktf_gcp_sample.h, the same functions as the CPU kernels, with
 * their parameter array `sp` (SKTF_GCP_* indices, set up by backends/opencl/gcp_ops.py).
 */
#pragma OPENCL FP_CONTRACT OFF

/* the losses f(x, m) and df/dm, the counter-based generator, the samplers and the optimiser
 * steps, written once for every device (sktensor_fast/include) */
#include "sktf_losses.h"
#include "sktf_rng.h"
#include "sktf_gcp_sample.h"
#include "sktf_optim.h"

#define GCP_NO_KEY 0xFFFFFFFFFFFFFFFFUL

/* ----------------------------------------------------------------------------- sampling */
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
    const sktf_gcp_sampler S = sktf_gcp_sampler_make(sp, NMODES, shape, strides, subs, vals,
                                                     lin, bucket, zsubs, wp, wq);
    long idx[NMODES];
    VAL_T w = 0;
    int corr = 0;
    const VAL_T x = sktf_gcp_sample(&S, key, j, idx, &w, &corr);
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
    VAL_T mi = mom[i], vi = var[i];
    u[i] = sktf_adam_entry(u[i], g[i], &mi, &vi, beta1, beta2, a, e, lower);
    mom[i] = mi;
    var[i] = vi;
}

__kernel void gcp_adagrad(const long n, __global VAL_T* u, __global const VAL_T* g,
                          __global VAL_T* acc, const VAL_T lr, const VAL_T eps,
                          const VAL_T lower)
{
    const long i = get_global_id(0);
    if (i >= n) return;
    VAL_T si = acc[i];
    u[i] = sktf_adagrad_entry(u[i], g[i], &si, lr, eps, lower);
    acc[i] = si;
}

__kernel void gcp_sgd(const long n, __global VAL_T* u, __global const VAL_T* g,
                      const VAL_T lr, const VAL_T lower)
{
    const long i = get_global_id(0);
    if (i >= n) return;
    u[i] = sktf_sgd_entry(u[i], g[i], lr, lower);
}
