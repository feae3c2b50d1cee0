/* Small dense steps on factor matrices (row-major I x R), VAL_T defined by the host header. */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* partial[b, r, s] = sum over rows i of block b of A[i, r] * C[i, s]  (A^T C by blocks) */
__kernel void cross_partial(const long I, const int R, const long rows_per_block,
                            __global const VAL_T* A, __global const VAL_T* C,
                            __global VAL_T* partial)
{
    const int rs = get_global_id(0);
    const long b = get_global_id(1);
    if (rs >= R * R) return;
    const int r = rs / R, s = rs % R;
    const long i0 = b * rows_per_block;
    const long i1 = min(i0 + rows_per_block, I);
    VAL_T acc = 0;
    for (long i = i0; i < i1; ++i) acc += A[i * R + r] * C[i * R + s];
    partial[b * R * R + rs] = acc;
}

/* per-column partial reductions: op 0 = sum A*C, op 1 = max |A| */
__kernel void column_partial(const long I, const int R, const long rows_per_block, const int op,
                             __global const VAL_T* A, __global const VAL_T* C,
                             __global VAL_T* partial)
{
    const int r = get_global_id(0);
    const long b = get_global_id(1);
    if (r >= R) return;
    const long i0 = b * rows_per_block;
    const long i1 = min(i0 + rows_per_block, I);
    VAL_T acc = 0;
    if (op == 0) {
        for (long i = i0; i < i1; ++i) acc += A[i * R + r] * C[i * R + r];
    } else {
        for (long i = i0; i < i1; ++i) acc = fmax(acc, fabs(A[i * R + r]));
    }
    partial[b * R + r] = acc;
}

/* out[k] = sum (op 0) or max (op 1) over b of partial[b, k] */
__kernel void finish_partial(const int nblocks, const int K, const int op,
                             __global const VAL_T* partial, __global VAL_T* out)
{
    const int k = get_global_id(0);
    if (k >= K) return;
    VAL_T acc = 0;
    for (int b = 0; b < nblocks; ++b) {
        const VAL_T v = partial[(long)b * K + k];
        acc = op == 0 ? acc + v : fmax(acc, v);
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
