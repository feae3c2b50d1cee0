/* Small dense steps on factor matrices (row-major I x R), VAL_T defined by the host header. */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* the per-nonzero formulas shared with the CPU kernels (SKTF_DATA_TERM) */
#include "sktf_cp.h"

/* partial[b, r, s] = sum over rows i of block b of A[i, r] * C[i, s]  (A^T C by blocks) */
__kernel void cross_partial(const long I, const int R, const long rows_per_block,
                            __global const VAL_T* A, __global const VAL_T* C,
                            __global VAL_T* partial)
{
    const int rs = get_global_id(0);
    const long b = get_global_id(1);
    const long i0 = b * rows_per_block;
    if (rs >= R * R || i0 >= I) return;
    const int r = rs / R, s = rs % R;
    const long i1 = min(i0 + rows_per_block, I);
    VAL_T acc = 0;
    for (long i = i0; i < i1; ++i) acc += A[i * R + r] * C[i * R + s];
    partial[b * R * R + rs] = acc;
}

/* rows i0 .. i1-1 of column r reduced: op 0 = sum A*C, op 1 = max |A|, op 2 = sum |A| */
inline VAL_T column_rows(const int op, __global const VAL_T* A, __global const VAL_T* C, const int R,
                          const int r, const long i0, const long i1)
{
    VAL_T acc = 0;
    if (op == 0) {
        for (long i = i0; i < i1; ++i) acc += A[i * R + r] * C[i * R + r];
    } else if (op == 1) {
        for (long i = i0; i < i1; ++i) acc = fmax(acc, fabs(A[i * R + r]));
    } else {
        for (long i = i0; i < i1; ++i) acc += fabs(A[i * R + r]);
    }
    return acc;
}

/* per-column partial reductions (ops of column_rows), one per column and block of rows */
__kernel void column_partial(const long I, const int R, const long rows_per_block, const int op,
                             __global const VAL_T* A, __global const VAL_T* C,
                             __global VAL_T* partial)
{
    const int r = get_global_id(0);
    const long b = get_global_id(1);
    const long i0 = b * rows_per_block;
    if (r >= R || i0 >= I) return;
    partial[b * R + r] = column_rows(op, A, C, R, r, i0, min(i0 + rows_per_block, I));
}

/* CP-ALS's reductions of a new factor U (I x R) in one launch, per block of rows: entries
 * 0 .. R-1 the column statistic (op 0: sum of U*U, op 1: max |U|), R .. R+R*R-1 the Gram
 * matrix UᵀU (row-major), then (K = 2R + R*R) the column inner products sum U*M.  Each
 * entry adds up its rows in the order of column_partial / cross_partial. */
__kernel void als_partial(const long I, const int R, const long rows_per_block, const int op,
                          const int K, __global const VAL_T* U, __global const VAL_T* M,
                          __global VAL_T* partial)
{
    const int k = get_global_id(0);
    const long b = get_global_id(1);
    const long i0 = b * rows_per_block;
    if (k >= K || i0 >= I) return;
    const long i1 = min(i0 + rows_per_block, I);
    VAL_T acc = 0;
    if (k < R) {
        acc = column_rows(op, U, U, R, k, i0, i1);
    } else if (k < R + R * R) {
        const int r = (k - R) / R, s = (k - R) % R;
        for (long i = i0; i < i1; ++i) acc += U[i * R + r] * U[i * R + s];
    } else {
        acc = column_rows(0, U, M, R, k - R - R * R, i0, i1);
    }
    partial[b * K + k] = acc;
}

/* out[k] over the blocks b of partial[b, k]: the maximum for k < n_max, else the sum */
__kernel void finish_partial(const int nblocks, const int K, const int n_max,
                             __global const VAL_T* partial, __global VAL_T* out)
{
    const int k = get_global_id(0);
    if (k >= K) return;
    VAL_T acc = 0;
    for (int b = 0; b < nblocks; ++b) {
        const VAL_T v = partial[(long)b * K + k];
        acc = k < n_max ? fmax(acc, v) : acc + v;
    }
    out[k] = acc;
}

/* out = A @ M for A (I x R) and a small M (R x Q) */
__kernel void matmul_small(const long I, const int R, const int Q, __global const VAL_T* A,
                           __global const VAL_T* M, __global VAL_T* out)
{
    const int q = get_global_id(0);
    const long i = get_global_id(1);
    if (q >= Q || i >= I) return;
    VAL_T acc = 0;
    for (int r = 0; r < R; ++r) acc += A[i * R + r] * M[r * Q + q];
    out[i * Q + q] = acc;
}

/* A[i, r] *= s[r] */
__kernel void scale_columns(const long I, const int R, __global VAL_T* A, __global const VAL_T* s)
{
    const int r = get_global_id(0);
    const long i = get_global_id(1);
    if (r >= R || i >= I) return;
    A[i * R + r] *= s[r];
}

/* Grid-stride partial reductions over n entries (one partial per work-item):
 *   op 0: sum A[i] * log(max(C[i], p))           (Poisson data term, A = counts, C = model)
 *   op 1: max |min(A[i], 1 - C[i])|               (CP-APR KKT violation, A = B, C = Phi)
 *   op 2: count of (C[i] > 1 and A[i] < p)        (CP-APR inadmissible zeros, A = A, C = Phi)
 */
__kernel void vec_partial(const long n, const int op, __global const VAL_T* A,
                          __global const VAL_T* C, const VAL_T p, __global VAL_T* partial,
                          __local VAL_T* loc)
{
    const long g = get_global_id(0);
    const long G = get_global_size(0);
    VAL_T acc = 0;
    for (long i = g; i < n; i += G) {
        if (op == 0) { if (A[i] != 0) acc += SKTF_DATA_TERM(A[i], C[i], p); }
        else if (op == 1) acc = fmax(acc, fabs(fmin(A[i], (VAL_T)1 - C[i])));
        else acc += (C[i] > 1 && A[i] < p) ? 1 : 0;
    }
    /* the work-group's result, its work-items taken in order: one partial per group */
    const int t = get_local_id(0);
    loc[t] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t == 0) {
        VAL_T r = loc[0];
        for (int q = 1; q < (int)get_local_size(0); ++q)
            r = op == 1 ? fmax(r, loc[q]) : r + loc[q];
        partial[get_group_id(0)] = r;
    }
}

/* CP-APR: A[i] += kappa where Phi[i] > 1 and A[i] < tol (inadmissible zeros) */
__kernel void apr_shift(const long n, __global VAL_T* A, __global const VAL_T* Phi,
                        const VAL_T tol, const VAL_T kappa)
{
    const long i = get_global_id(0);
    if (i < n && Phi[i] > 1 && A[i] < tol) A[i] += kappa;
}

/* A[offset + i] += B[i] */
__kernel void add_into(const long n, const long offset, __global VAL_T* A,
                       __global const VAL_T* B)
{
    const long i = get_global_id(0);
    if (i < n) A[offset + i] += B[i];
}

/* B[i] *= Phi[i] */
__kernel void multiply_inplace(const long n, __global VAL_T* B, __global const VAL_T* Phi)
{
    const long i = get_global_id(0);
    if (i < n) B[i] *= Phi[i];
}

/* Chunk c of a boundary level: the runs of rows of entries s..e-1 of a list of (row, R-vector)
 * entries sorted by row; a run inside the chunk is a whole row's sum and is stored, the first
 * and last runs go to the next level's list (entries 2c, 2c + 1), or are stored too with
 * `final` (a single chunk covers the list).  Column r of the R. */
inline void reduce_chunk(const long c, const long s, const long e, const int R, const int r,
                         const int final, __global const long* rows,
                         __global const VAL_T* vals, __global VAL_T* out,
                         __global long* bnd_row, __global VAL_T* bnd_val)
{
    const long first_row = rows[s];
    const long last_row = rows[e - 1];
    long cur = first_row;
    VAL_T acc = 0;
    for (long j = s; j < e; ++j) {
        const long row = rows[j];
        if (row != cur) {
            if (cur == first_row && !final) bnd_val[(2 * c) * R + r] = acc;
            else out[cur * R + r] = acc;
            acc = 0;
            cur = row;
        }
        acc += vals[j * R + r];
    }
    if (final) {
        out[cur * R + r] = acc;
        return;
    }
    close_chunk(c, R, r, cur, first_row, last_row, acc, bnd_row, bnd_val);
}

/* One level of the boundary reduction: chunk get_global_id(1) of the list (see reduce_chunk). */
__kernel void reduce_level(const long n, const int R, const int chunk, const int final,
                           __global const long* rows, __global const VAL_T* vals,
                           __global VAL_T* out, __global long* bnd_row, __global VAL_T* bnd_val)
{
    const int r = get_local_id(0);
    const long c = get_global_id(1);
    const long s = c * (long)chunk;
    const long e = min(s + (long)chunk, n);
    if (r >= R || s >= e) return;
    reduce_chunk(c, s, e, R, r, final, rows, vals, out, bnd_row, bnd_val);
}

/* The last levels of the boundary reduction in one launch of one work-group: level after level
 * (each a pass of the group's work-items over the level's chunks, then a barrier), the lists
 * alternating between (rows_a, vals_a), which holds the first, and (rows_b, vals_b), until one
 * chunk covers the list.  The barrier's global fence makes a level's writes visible to the whole
 * group before the next level reads them. */
__kernel void reduce_tail(long n, const int R, const int chunk,
                          __global long* rows_a, __global VAL_T* vals_a, __global VAL_T* out,
                          __global long* rows_b, __global VAL_T* vals_b)
{
    const int r = get_local_id(0);
    const long lg = get_local_size(1);
    __global long* src_row = rows_a;
    __global VAL_T* src_val = vals_a;
    __global long* dst_row = rows_b;
    __global VAL_T* dst_val = vals_b;
    for (;;) {
        const long nch = (n + chunk - 1) / chunk;
        const int final = nch == 1;
        if (r < R) {
            for (long c = get_local_id(1); c < nch; c += lg) {
                const long s = c * (long)chunk;
                reduce_chunk(c, s, min(s + (long)chunk, n), R, r, final, src_row, src_val,
                             out, dst_row, dst_val);
            }
        }
        if (final) return;
        barrier(CLK_GLOBAL_MEM_FENCE);
        n = 2 * nch;
        __global long* tr = src_row; src_row = dst_row; dst_row = tr;
        __global VAL_T* tv = src_val; src_val = dst_val; dst_val = tv;
    }
}

/* dst[j] = src[order[j]] for the nonzeros (coordinates row-major, ncols per nonzero): builds a
 * mode-sorted copy of the tensor on the device from the uploaded one */
__kernel void gather_nonzeros(const long n, const int ncols, __global const long* order,
                              __global const IDX_T* src_subs, __global const VAL_T* src_vals,
                              __global IDX_T* dst_subs, __global VAL_T* dst_vals)
{
    const long j = get_global_id(0);
    if (j >= n) return;
    const long o = order[j];
    for (int k = 0; k < ncols; ++k) dst_subs[j * ncols + k] = src_subs[o * ncols + k];
    dst_vals[j] = src_vals[o];
}

/* dst[(j % chunk) * nchunks + j / chunk] = src[j]: the chunk-interleaved order of a mode-sorted
 * copy (entry k of chunk c at k * nchunks + c), read by cp.cl's accumulate_wide.  The positions
 * past the end of a short last chunk are left as they are: the kernels never read them. */
__kernel void interleave_nonzeros(const long n, const long nchunks, const int chunk,
                                  const int ncols, __global const IDX_T* src_subs,
                                  __global const VAL_T* src_vals, __global IDX_T* dst_subs,
                                  __global VAL_T* dst_vals)
{
    const long j = get_global_id(0);
    if (j >= n) return;
    const long p = (j % chunk) * nchunks + j / chunk;
    for (int k = 0; k < ncols; ++k) dst_subs[p * ncols + k] = src_subs[j * ncols + k];
    dst_vals[p] = src_vals[j];
}

/* dst[p(j)] = src[o(j)] for the nonzeros: o(j) = order[j] (use_order) or j, p(j) the
 * chunk-interleaved position (j % chunk) * nchunks + j / chunk (chunk > 0) or j.  Builds a mode's
 * sorted or chunk-interleaved copy straight from the uploaded tensor and that mode's order
 * (int: the host checks that every position fits). */
__kernel void gather_interleave(const long n, const long nchunks, const int chunk,
                                const int ncols, const int use_order,
                                __global const int* order, __global const IDX_T* src_subs,
                                __global const VAL_T* src_vals, __global IDX_T* dst_subs,
                                __global VAL_T* dst_vals)
{
    const long j = get_global_id(0);
    if (j >= n) return;
    const long o = use_order ? (long) order[j] : j;
    const long p = chunk > 0 ? (j % chunk) * nchunks + j / chunk : j;
    for (int k = 0; k < ncols; ++k) dst_subs[p * ncols + k] = src_subs[o * ncols + k];
    dst_vals[p] = src_vals[o];
}

/* count[0] = the distinct coordinates of column `col` of the n x ncols rows of `subs` (in any
 * order): seen[c] (zeroed before) is set once per coordinate c, by the one work-item whose
 * exchange finds it unset, which also counts it; the others only read it */
__kernel void count_rows(const long n, const int ncols, const int col,
                         __global const IDX_T* subs, volatile __global int* seen,
                         volatile __global int* count)
{
    const long j = get_global_id(0);
    if (j >= n) return;
    const long c = (long) subs[j * ncols + col];
    if (!seen[c] && atomic_xchg(&seen[c], 1) == 0) atomic_inc(count);
}
