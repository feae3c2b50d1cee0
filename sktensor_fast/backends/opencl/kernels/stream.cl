/* STREAM kernels (copy, scale, add, triad), one element per work-item.
   The host defines VAL_T (and USE_FP64 for double). */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

__kernel void stream_copy(const long n, __global VAL_T* c, __global const VAL_T* a)
{
    const long i = get_global_id(0);
    if (i < n) c[i] = a[i];
}

__kernel void stream_scale(const long n, __global VAL_T* b, __global const VAL_T* c,
                           const VAL_T q)
{
    const long i = get_global_id(0);
    if (i < n) b[i] = q * c[i];
}

__kernel void stream_add(const long n, __global VAL_T* c, __global const VAL_T* a,
                         __global const VAL_T* b)
{
    const long i = get_global_id(0);
    if (i < n) c[i] = a[i] + b[i];
}

__kernel void stream_triad(const long n, __global VAL_T* a, __global const VAL_T* b,
                           __global const VAL_T* c, const VAL_T q)
{
    const long i = get_global_id(0);
    if (i < n) a[i] = b[i] + q * c[i];
}
