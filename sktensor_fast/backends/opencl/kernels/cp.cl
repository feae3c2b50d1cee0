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
    for (int k = 0; k < chunk; ++k) {
        const long j = s + k;
        const int valid = j < e;
        long row = -1;
        VAL_T pi = 0;
        if (valid) {
            row = subs[j * NMODES + mode];
            if (r < R) {
                pi = 1;
                for (int m = 0; m < NMODES; ++m) {
                    if (m != mode) pi *= F[m][(long)subs[j * NMODES + m] * R + r];
                }
            }
        }
#if defined(PHI) && defined(PHI_REDUNDANT)
        /* every lane computes <B[row], pi> itself: no barriers, the factor rows it reads are
         * the ones its neighbours read (cache broadcasts) */
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
            w = vals[j] / (dot < eps ? eps : dot);
        }
#elif defined(PHI)
        /* <B[row], pi> reduced across the lanes of this chunk through local memory.  Two
         * buffers used in turn need one barrier per nonzero: a lane that writes the buffer of
         * step k+1 has passed the barrier of step k, so every lane has finished reading the
         * same buffer at step k-1. */
        __local VAL_T* buf = pi_loc + (k & 1) * (RP * get_local_size(1)) + g * RP;
        buf[r] = pi;
        barrier(CLK_LOCAL_MEM_FENCE);
        VAL_T w = 0;
        if (valid && r < R) {
            VAL_T dot = 0;
            for (int q = 0; q < R; ++q) dot += B[row * R + q] * buf[q];
            w = vals[j] / (dot < eps ? eps : dot);
        }
#else
        const VAL_T w = valid ? vals[j] : 0;
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
