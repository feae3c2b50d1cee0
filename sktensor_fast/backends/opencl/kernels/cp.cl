/* OpenCL kernels of sktensor_fast.
 *
 * The host prepends a header that defines:
 *   VAL_T          double or float
 *   IDX_T          int or long (coordinate type)
 *   NMODES         number of modes of the tensor
 *   FACTOR_PARAMS  the parameter list "__global const VAL_T* F0, ..., F{NMODES-1}"
 *   FACTOR_ARRAY   "__global const VAL_T* F[NMODES] = {F0, ..., F{NMODES-1}};"
 *   USE_FP64       when VAL_T is double
 *
 * Layout: factor matrices are row-major (I_n x R); coordinates of one mode's copy of the tensor
 * are row-major (nnz x NMODES), sorted by that mode's coordinate.
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* the per-nonzero formulas shared with the CPU kernels (SKTF_PHI_WEIGHT) */
#include "sktf_cp.h"

/* VEC columns per lane (1, 2, 4 or 8; R % VEC == 0), VEC_T the matching vector type, VSUM the
 * sum of its components (the host defines VEC_T; VEC defaults to 1) */
#ifndef VEC
#define VEC 1
#define VEC_T VAL_T
#endif

/* FROW(p, r): the VEC entries r of the factor row at p as a VEC_T.  With FP32_FACTORS the
 * factors are float copies (FVEC_T, converted by TO_VEC_T); their products and sums stay in
 * VAL_T. */
#ifdef FP32_FACTORS
#define FROW(p, r) TO_VEC_T(((__global const FVEC_T*)(p))[r])
#else
#define FROW(p, r) (((__global const VEC_T*)(p))[r])
#endif
#if VEC == 1
#define VSUM(x) (x)
#elif VEC == 2
#define VSUM(x) ((x).s0 + (x).s1)
#elif VEC == 4
#define VSUM(x) (((x).s0 + (x).s1) + ((x).s2 + (x).s3))
#else
#define VSUM(x) ((((x).s0 + (x).s1) + ((x).s2 + (x).s3)) + (((x).s4 + (x).s5) + ((x).s6 + (x).s7)))
#endif

#ifdef PHI_SHUFFLE_NV
/* NVIDIA devices: exchange a value with lane (lane ^ off) of the warp (PTX shfl.sync) */
inline VAL_T shfl_xor_nv(VAL_T v, int off)
{
#ifdef USE_FP64
    int2 x = as_int2(v);
    int lo, hi;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(lo) : "r"(x.x), "r"(off));
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(hi) : "r"(x.y), "r"(off));
    return as_double((int2)(lo, hi));
#else
    int y;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(y) : "r"(as_int(v)), "r"(off));
    return as_float(y);
#endif
}
#endif

/* LOCAL_STORE(v, r, p): the VEC entries of v to p[r * VEC ...] in local memory, by vstoreN
 * (which asks only the alignment of one entry of p) */
#if VEC == 1
#define LOCAL_STORE(v, r, p) ((p)[r] = (v))
#else
#define VSTORE_CAT(a, b) a##b
#define VSTORE_N(n) VSTORE_CAT(vstore, n)
#define LOCAL_STORE(v, r, p) VSTORE_N(VEC)(v, r, p)
#endif

/* Position of entry k of chunk c in the copy of the nonzeros: consecutive (the mode-sorted
 * order) or chunk-interleaved (INTERLEAVED: entry k of chunk c at k * nchunks + c, the order of
 * dense.cl's interleave_nonzeros, so that the chunks of a work-group read neighbouring entries
 * at every step) */
#ifdef INTERLEAVED
#define POS(k) ((OFF_T)(k) * (OFF_T)nchunks + c)
#else
#define POS(k) (s + (OFF_T)(k))
#endif

/* Integer type of the offsets in accumulate: int where the host has checked that every offset
 * fits (32-bit arithmetic costs fewer instructions on GPUs), long otherwise */
#ifndef OFF_T
#define OFF_T long
#endif

/* MTTKRP (PHI undefined) or CP-APR's Phi (PHI defined) for one mode.
 *
 * Work-item (lane r, chunk c): lane r owns columns r*VEC .. r*VEC+VEC-1 (one vector load per
 * factor row); chunk c is `chunk` consecutive nonzeros in the order of the output mode.  A lane
 * accumulates a run of equal output rows in registers and touches global memory once per run:
 * a plain store for rows that start and end inside the chunk (owned); the chunk's first and
 * last rows (maybe shared with neighbouring chunks) go to the boundary list (bnd_row[2c],
 * bnd_val[2c]) and (bnd_row[2c+1], bnd_val[2c+1]), which is sorted by row and is reduced by
 * `reduce_level` the same way, level after level.  No atomics: a row owning millions of
 * nonzeros (power-law data) costs no contention, and the result is deterministic.  Local size
 * (RP, LG): RP >= R/VEC lanes for the columns, LG chunks per group.  Every row of `out` that
 * holds a nonzero is stored (never added to), the others are left as they were: the host zeroes
 * `out` first unless every row holds one.  Factor rows, B, out and the boundary values are
 * VEC-aligned (R % VEC == 0).  With GROUP_BND the list holds two entries per work-group (see
 * the end of the kernel).
 */
__kernel void accumulate(const long nnz, const int R_arg, const int mode_arg, const int chunk,
                         const long nchunks,
                         __global const IDX_T* restrict subs,
                         __global const VAL_T* restrict vals,
                         FACTOR_PARAMS,
                         __global const VAL_T* restrict B, const VAL_T eps,
                         __global VAL_T* out, __global long* restrict bnd_row,
                         __global VAL_T* restrict bnd_val
#ifdef PHI
                         , __local VAL_T* pi_loc
#endif
#ifdef GROUP_BND
                         , __local VAL_T* grp_val, __local long* grp_row
#endif
                         )
{
    /* FIXED_RANK / FIXED_MODE / FIXED_RP: the rank, the output mode and the lanes per chunk
     * (the local size's first dimension) as compile-time constants */
#ifdef FIXED_RANK
    const int R = FIXED_RANK;
#else
    const int R = R_arg;
#endif
#ifdef FIXED_MODE
    const int mode = FIXED_MODE;
#else
    const int mode = mode_arg;
#endif
    FACTOR_ARRAY
    const int r = get_local_id(0);
#ifdef FIXED_RP
    const int RP = FIXED_RP;
#else
    const int RP = get_local_size(0);
#endif
    const int RV = R / VEC;
    const int g = get_local_id(1);
    const OFF_T c = get_global_id(1);
    const OFF_T s = c * (OFF_T)chunk;
    const OFF_T e = min(s + (OFF_T)chunk, (OFF_T)nnz);
    const int active = (r < RV) && (s < e);
    OFF_T first_row = -1, last_row = -1, cur = -1;
    if (s < e) {
        first_row = subs[POS(0) * NMODES + mode];
        last_row = subs[POS(e - s - 1) * NMODES + mode];
        cur = first_row;
    }
    VEC_T acc = (VEC_T)0;
#ifdef DATA_TERM
    /* DATA_TERM (with PHI, B the mode's factor with the weights folded in): no output rows;
     * lane 0 of each chunk adds x log(max(<B[row], pi>, eps)) of its nonzeros (those with
     * x != 0), and the work-group's sum goes to bnd_val[group] */
    VAL_T dsum = 0;
#endif
    /* where the partial sum of the chunk's first row goes: its slot of the boundary list, in
     * local memory with GROUP_BND */
#ifdef GROUP_BND
#define STORE_FIRST(v) LOCAL_STORE(v, r, grp_val + (2 * g) * R)
#else
#define STORE_FIRST(v) (((__global VEC_T*)(bnd_val + (2 * c) * R))[r] = (v))
#endif
#ifdef PREFETCH
    /* PREFETCH: the coordinates and value of step k+1 are loaded during step k, so that only
     * the factor-row gathers wait on memory within a step */
    IDX_T nx[NMODES];
    VAL_T nv = 0;
#pragma unroll
    for (int m = 0; m < NMODES; ++m) nx[m] = 0;
    if (s < e) {
#pragma unroll
        for (int m = 0; m < NMODES; ++m) nx[m] = subs[POS(0) * NMODES + m];
        nv = vals[POS(0)];
    }
#endif
    for (int k = 0; k < chunk; ++k) {
        const OFF_T j = POS(k);
        const int valid = s + k < e;
        OFF_T row = -1;
        VAL_T xv = 0;
        VEC_T pi = (VEC_T)0;
#ifdef PREFETCH
        IDX_T cx[NMODES];
#pragma unroll
        for (int m = 0; m < NMODES; ++m) cx[m] = nx[m];
        xv = nv;
        if (s + k + 1 < e) {
            const OFF_T jn = POS(k + 1);
#pragma unroll
            for (int m = 0; m < NMODES; ++m) nx[m] = subs[jn * NMODES + m];
            nv = vals[jn];
        }
        if (valid) {
#pragma unroll
            for (int m = 0; m < NMODES; ++m)
                if (m == mode) row = cx[m];
            if (r < RV) {
                pi = (VEC_T)1;
#pragma unroll
                for (int m = 0; m < NMODES; ++m) {
                    if (m != mode)
                        pi *= FROW(F[m] + (OFF_T)cx[m] * R, r);
                }
            }
        }
#else
        if (valid) {
            row = subs[j * NMODES + mode];
#ifdef PHI
            xv = vals[j];     /* Φ: measured faster with the value loaded early */
#endif
            if (r < RV) {
                pi = (VEC_T)1;
                for (int m = 0; m < NMODES; ++m) {
                    if (m != mode)
                        pi *= FROW(F[m] + (OFF_T)subs[j * NMODES + m] * R, r);
                }
            }
        }
#endif
#if defined(PHI) && defined(PHI_SHUFFLE_NV)
        /* <B[row], pi> by a butterfly over the RP (<= 32) lanes of this chunk, which sit in
         * one warp: lane r holds its columns' part of the dot, five or fewer exchanges */
        VAL_T part = 0;
        if (valid && r < RV) part = VSUM(((__global const VEC_T*)(B + row * R))[r] * pi);
        for (int off = RP >> 1; off > 0; off >>= 1) part += shfl_xor_nv(part, off);
#ifdef DATA_TERM
        if (valid && r == 0 && xv != 0) dsum += SKTF_DATA_TERM(xv, part, eps);
#endif
        VAL_T w = 0;
        if (valid) w = SKTF_PHI_WEIGHT(xv, part, eps);
#elif defined(PHI)
        /* <B[row], pi> from the lanes' parts, shared through local memory.  Two buffers used
         * in turn need one barrier per nonzero: a lane that writes the buffer of step k+1 has
         * passed the barrier of step k, so every lane has finished reading the same buffer at
         * step k-1. */
        __local VAL_T* buf = pi_loc + (k & 1) * (RP * get_local_size(1)) + g * RP;
        buf[r] = (valid && r < RV) ? VSUM(((__global const VEC_T*)(B + row * R))[r] * pi) : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        VAL_T w = 0;
        if (valid && r < RV) {
            VAL_T dot = 0;
            for (int q = 0; q < RV; ++q) dot += buf[q];
#ifdef DATA_TERM
            if (r == 0 && xv != 0) dsum += SKTF_DATA_TERM(xv, dot, eps);
#endif
            w = SKTF_PHI_WEIGHT(xv, dot, eps);
        }
#elif defined(PREFETCH)
        const VAL_T w = xv;
#else
        const VAL_T w = valid ? vals[j] : 0;
#endif
#ifndef DATA_TERM
        if (valid && active) {
            if (row != cur) {
                if (cur == first_row) STORE_FIRST(acc);
                else ((__global VEC_T*)(out + cur * R))[r] = acc;
                acc = (VEC_T)0;
                cur = row;
            }
            acc += w * pi;
        }
#endif
    }
#ifdef DATA_TERM
    /* the group's sum, in the order of its work-items (after the last step's exchanges) */
    {
        const int t = g * RP + r;
        barrier(CLK_LOCAL_MEM_FENCE);
        pi_loc[t] = dsum;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t == 0) {
            VAL_T total = 0;
            for (int q = 0; q < RP * (int)get_local_size(1); ++q) total += pi_loc[q];
            bnd_val[get_group_id(1)] = total;
        }
    }
#elif defined(GROUP_BND)
    /* GROUP_BND: the chunks' first and last rows go to their slots 2g, 2g + 1 of a list in
     * local memory, which the group reduces as reduce_level reduces a chunk of the global
     * list: a row whose pieces all lie in the group's chunks (neither the group's first nor
     * its last row) is stored, the group's first and last rows go to slots 2G and 2G + 1 of
     * the global boundary list (G the group).  One work-item per column walks the group's
     * 2 LG entries in order, so a row's pieces are added in chunk order. */
    if (active) {
        if (cur == first_row) {
            STORE_FIRST(acc);
            LOCAL_STORE((VEC_T)0, r, grp_val + (2 * g + 1) * R);
        } else {
            LOCAL_STORE(acc, r, grp_val + (2 * g + 1) * R);
        }
        if (r == 0) {
            grp_row[2 * g] = (long)first_row;
            grp_row[2 * g + 1] = (long)last_row;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int LG = get_local_size(1);
    const OFF_T G = get_group_id(1);
    const int nfull = (int)min((OFF_T)LG, (OFF_T)nchunks - G * LG);  /* chunks holding nonzeros */
    if (nfull > 0) {
        const long gfirst = grp_row[0];
        for (int q = g * RP + r; q < R; q += RP * LG) {
            long rowc = gfirst;
            VAL_T a = 0;
            for (int i = 0; i < 2 * nfull; ++i) {
                const long row = grp_row[i];
                if (row != rowc) {
                    if (rowc == gfirst) bnd_val[(2 * G) * R + q] = a;
                    else out[rowc * R + q] = a;
                    a = 0;
                    rowc = row;
                }
                a += grp_val[i * R + q];
            }
            if (rowc == gfirst) {
                bnd_val[(2 * G) * R + q] = a;
                bnd_val[(2 * G + 1) * R + q] = 0;
            } else {
                bnd_val[(2 * G + 1) * R + q] = a;
            }
        }
        if (g == 0 && r == 0) {
            bnd_row[2 * G] = gfirst;
            bnd_row[2 * G + 1] = grp_row[2 * nfull - 1];
        }
    }
#else
    if (active) {
        /* the chunk's first and last rows go to its two slots of the boundary list */
        if (cur == first_row) {
            STORE_FIRST(acc);
            ((__global VEC_T*)(bnd_val + (2 * c + 1) * R))[r] = (VEC_T)0;
        } else {
            ((__global VEC_T*)(bnd_val + (2 * c + 1) * R))[r] = acc;
        }
        if (r == 0) {
            bnd_row[2 * c] = (long)first_row;
            bnd_row[2 * c + 1] = (long)last_row;
        }
    }
#endif
#undef STORE_FIRST
}

/* values of the Kruskal model at the nonzeros: out[j] = sum_r w[r] prod_m F[m][subs[j,m], r] */
__kernel void kruskal_values(const long nnz, const int R, __global const IDX_T* subs,
                             __global const VAL_T* w, FACTOR_PARAMS, __global VAL_T* out)
{
    FACTOR_ARRAY
    const long j = get_global_id(0);
    if (j >= nnz) return;
    VAL_T total = 0;
    for (int r = 0; r < R; ++r) {
        VAL_T p = w[r];
        for (int m = 0; m < NMODES; ++m) p *= F[m][(long)subs[j * NMODES + m] * R + r];
        total += p;
    }
    out[j] = total;
}

#ifdef RANK
/* MTTKRP (PHI undefined) or CP-APR's Phi (PHI defined) for one mode, one work-item per chunk:
 * the "wide" variant of `accumulate` for small ranks (RANK, a compile-time constant; RW = RANK /
 * VEC vectors per row).  The work-item holds whole rows (the product pi of the other modes'
 * factor rows, the run's sum and, for Phi, the run's row of B) in registers, so <B[row], pi> is
 * a private dot product (no exchange between lanes) and the index work of a nonzero is done once
 * for all RANK columns instead of once per lane.  The nonzeros come in the chunk-interleaved
 * order of `interleave_nonzeros`: entry k of chunk c sits at k * nchunks + c, so neighbouring
 * work-items read neighbouring nonzeros (coalesced loads).  Runs, owned rows and the boundary
 * list are those of `accumulate` without GROUP_BND; rows of `out` that hold no nonzero are left
 * as they were. */
#define RW (RANK / VEC)
__kernel void accumulate_wide(const long nnz, const long nchunks, const int mode,
                              const int chunk,
                              __global const IDX_T* restrict subs,
                              __global const VAL_T* restrict vals,
                              FACTOR_PARAMS,
                              __global const VAL_T* restrict B, const VAL_T eps,
                              __global VAL_T* out, __global long* restrict bnd_row,
                              __global VAL_T* restrict bnd_val)
{
    FACTOR_ARRAY
    const long c = get_global_id(0);
    if (c >= nchunks) return;
    const long s = c * (long)chunk;
    const int n = (int)(min(s + (long)chunk, nnz) - s);
    const long first_row = subs[c * NMODES + mode];
    const long last_row = subs[((long)(n - 1) * nchunks + c) * NMODES + mode];
    long cur = first_row;
    VEC_T acc[RW];
    for (int q = 0; q < RW; ++q) acc[q] = (VEC_T)0;
#ifdef PHI
    VEC_T brow[RW];
    for (int q = 0; q < RW; ++q) brow[q] = ((__global const VEC_T*)(B + cur * RANK))[q];
#endif
    for (int k = 0; k < n; ++k) {
        const long p = (long)k * nchunks + c;
        const long row = subs[p * NMODES + mode];
        VEC_T pi[RW];
        for (int q = 0; q < RW; ++q) pi[q] = (VEC_T)1;
        for (int m = 0; m < NMODES; ++m) {
            if (m == mode) continue;
            __global const VEC_T* f = (__global const VEC_T*)(F[m] + (long)subs[p * NMODES + m] * RANK);
            for (int q = 0; q < RW; ++q) pi[q] *= f[q];
        }
        if (row != cur) {
            __global VEC_T* dst = (__global VEC_T*)(cur == first_row ? bnd_val + (2 * c) * RANK
                                                                     : out + cur * RANK);
            for (int q = 0; q < RW; ++q) {
                dst[q] = acc[q];
                acc[q] = (VEC_T)0;
            }
            cur = row;
#ifdef PHI
            for (int q = 0; q < RW; ++q) brow[q] = ((__global const VEC_T*)(B + cur * RANK))[q];
#endif
        }
#ifdef PHI
        VAL_T dot = 0;
        for (int q = 0; q < RW; ++q) dot += VSUM(brow[q] * pi[q]);
        const VAL_T w = SKTF_PHI_WEIGHT(vals[p], dot, eps);
#else
        const VAL_T w = vals[p];
#endif
        for (int q = 0; q < RW; ++q) acc[q] += w * pi[q];
    }
    /* the chunk's first and last rows go to its two slots of the boundary list */
    __global VEC_T* b0 = (__global VEC_T*)(bnd_val + (2 * c) * RANK);
    __global VEC_T* b1 = (__global VEC_T*)(bnd_val + (2 * c + 1) * RANK);
    for (int q = 0; q < RW; ++q) {
        if (cur == first_row) {
            b0[q] = acc[q];
            b1[q] = (VEC_T)0;
        } else {
            b1[q] = acc[q];
        }
    }
    bnd_row[2 * c] = first_row;
    bnd_row[2 * c + 1] = last_row;
}
#endif
