/* Generalized CP on an OpenCL device: the kernels that take no rank, a program of their own
 * (backends/opencl/gcp_ops.py, _SETUP_KERNELS): the tensor's set-up for the sampler (linear
 * indices, their buckets, the order check), samples materialised, sums of a sample's losses
 * and the optimisers' steps one factor at a time.  Kept apart from the step's kernels of
 * gcp.cl, which a GPU builds for the fit's rank: a fit builds this small program and one
 * program of the step's kernels, not the step's kernels twice.
 *
 * The host prepends the header of cp.cl (VAL_T, IDX_T, NMODES, USE_FP64).  The arithmetic is
 * written in the order of the CPU kernels, contraction into fused multiply-adds off (see
 * gcp.cl). */
#pragma OPENCL FP_CONTRACT OFF

#include "sktf_rng.h"
#include "sktf_gcp_sample.h"
#include "sktf_optim.h"

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

/* --------------------------------------------------------------------------- loss sums */
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
