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

#ifndef UNROLL
#define UNROLL 4
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

/* MTTKRP (PHI undefined) or CP-APR's Phi (PHI defined) for one mode.
 *
 * Work-item (lane r, chunk c): lane r owns column r; chunk c is `chunk` consecutive nonzeros in
 * the order of the output mode.  A lane accumulates a run of equal output rows in a register
 * and touches global memory once per run: a plain store for rows that start and end inside the
 * chunk (owned); the chunk's first and last rows (maybe shared with neighbouring chunks) go to
 * the boundary list (bnd_row[2c], bnd_val[2c]) and (bnd_row[2c+1], bnd_val[2c+1]), which is
 * sorted by row and is reduced by `reduce_level` the same way, level after level.  No atomics:
 * a row owning millions of nonzeros (power-law data) costs no contention, and the result is
 * deterministic.  Local size (RP, LG): RP >= R lanes for the columns, LG chunks per group.
 * `out` must be zero on entry.
 */
__kernel void accumulate(const long nnz, const int R, const int mode, const int chunk,
                         __global const IDX_T* subs, __global const VAL_T* vals,
                         FACTOR_PARAMS,
                         __global const VAL_T* B, const VAL_T eps,
                         __global VAL_T* out, __global long* bnd_row,
                         __global VAL_T* bnd_val
#ifdef PHI
                         , __local VAL_T* pi_loc
#endif
                         )
{
    FACTOR_ARRAY
    const int r = get_local_id(0);
    const int RP = get_local_size(0);
    const int g = get_local_id(1);
    const long c = get_global_id(1);
    const long s = c * (long)chunk;
    const long e = min(s + (long)chunk, nnz);
    const int active = (r < R) && (s < e);
    long first_row = -1, last_row = -1, cur = -1;
    if (s < e) {
        first_row = subs[s * NMODES + mode];
        last_row = subs[(e - 1) * NMODES + mode];
        cur = first_row;
    }
    VAL_T acc = 0;
    /* UNROLL nonzeros at a time: their coordinates, values and factor entries are loaded
     * first (independent loads in flight together), then reduced in order */
    for (int k0 = 0; k0 < chunk; k0 += UNROLL) {
        long rowv[UNROLL];
        VAL_T piv[UNROLL], xv[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long j = s + k0 + u;
            rowv[u] = -1;
            piv[u] = 0;
            xv[u] = 0;
            if (j < e) {
                rowv[u] = subs[j * NMODES + mode];
                xv[u] = vals[j];
                if (r < R) {
                    VAL_T pi = 1;
                    for (int m = 0; m < NMODES; ++m) {
                        if (m != mode) pi *= F[m][(long)subs[j * NMODES + m] * R + r];
                    }
                    piv[u] = pi;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int k = k0 + u;
            const long j = s + k;
            const int valid = j < e;
            const long row = rowv[u];
            const VAL_T pi = piv[u];
#if defined(PHI) && defined(PHI_SHUFFLE_NV)
            /* <B[row], pi> by a butterfly over the RP (<= 32) lanes of this chunk, which sit
             * in one warp: lane r holds B[row, r] * pi_r, five or fewer register exchanges */
            VAL_T part = (valid && r < R) ? B[row * R + r] * pi : 0;
            for (int off = RP >> 1; off > 0; off >>= 1) part += shfl_xor_nv(part, off);
            VAL_T w = 0;
            if (valid) w = xv[u] / (part < eps ? eps : part);
#elif defined(PHI) && defined(PHI_REDUNDANT)
            /* every lane computes <B[row], pi> itself: no barriers, the factor rows it reads
             * are the ones its neighbours read (cache broadcasts) */
            VAL_T w = 0;
            if (valid && r < R) {
                VAL_T dot = 0;
                for (int q = 0; q < R; ++q) {
                    VAL_T pq = B[row * R + q];
                    for (int m = 0; m < NMODES; ++m) {
                        if (m != mode) pq *= F[m][(long)subs[j * NMODES + m] * R + q];
                    }
                    dot += pq;
                }
                w = xv[u] / (dot < eps ? eps : dot);
            }
#elif defined(PHI)
            /* <B[row], pi> reduced across the lanes of this chunk through local memory.  Two
             * buffers used in turn need one barrier per nonzero: a lane that writes the buffer
             * of step k+1 has passed the barrier of step k, so every lane has finished reading
             * the same buffer at step k-1. */
            __local VAL_T* buf = pi_loc + (k & 1) * (RP * get_local_size(1)) + g * RP;
            buf[r] = pi;
            barrier(CLK_LOCAL_MEM_FENCE);
            VAL_T w = 0;
            if (valid && r < R) {
                VAL_T dot = 0;
                for (int q = 0; q < R; ++q) dot += B[row * R + q] * buf[q];
                w = xv[u] / (dot < eps ? eps : dot);
            }
#else
            const VAL_T w = xv[u];
#endif
            if (valid && active) {
                if (row != cur) {
                    if (cur == first_row) bnd_val[(2 * c) * R + r] = acc;
                    else out[cur * R + r] = acc;
                    acc = 0;
                    cur = row;
                }
                acc += w * pi;
            }
        }
    }
    if (active) close_chunk(c, R, r, cur, first_row, last_row, acc, bnd_row, bnd_val);
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
