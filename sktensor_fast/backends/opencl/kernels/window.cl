/* The nonzeros of a partial_fit window, built on the device: the kept slices of the previous
 * window's nonzeros, renumbered 0, 1, ... in the order they are listed, then the batch's
 * nonzeros with their mode-0 coordinate shifted by the number of kept slices.  Both inputs are
 * in canonical order (sorted by mode 0 first) and the kept slices are listed by ascending row,
 * so the output is in canonical order too.  One work-item per output nonzero; no atomics.
 *
 * Kept slice j covers entries dst_start[j] .. dst_start[j + 1] - 1 of the output and starts
 * at entry src_start[j] of the previous window; an output entry finds its slice by a binary
 * search of dst_start (a slice without nonzeros has dst_start[j] == dst_start[j + 1] and is
 * never found).  The host defines VAL_T and IDX_T (header()). */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

__kernel void window_gather(const long n, const long n_keep, const int ncols, const int nkept,
                            __global const long* dst_start, __global const long* src_start,
                            __global const IDX_T* hist_subs, __global const VAL_T* hist_vals,
                            __global const IDX_T* batch_subs, __global const VAL_T* batch_vals,
                            __global IDX_T* subs, __global VAL_T* vals)
{
    const long i = get_global_id(0);
    if (i >= n) return;
    if (i < n_keep) {
        /* the last j with dst_start[j] <= i: dst_start[0] = 0 <= i < dst_start[nkept] */
        int lo = 0, hi = nkept;
        while (hi - lo > 1) {
            const int mid = (lo + hi) >> 1;
            if (dst_start[mid] <= i) lo = mid; else hi = mid;
        }
        const long s = src_start[lo] + (i - dst_start[lo]);
        subs[i * ncols] = (IDX_T) lo;
        for (int k = 1; k < ncols; ++k) subs[i * ncols + k] = hist_subs[s * ncols + k];
        vals[i] = hist_vals[s];
    } else {
        const long b = i - n_keep;
        subs[i * ncols] = batch_subs[b * ncols] + (IDX_T) nkept;
        for (int k = 1; k < ncols; ++k) subs[i * ncols + k] = batch_subs[b * ncols + k];
        vals[i] = batch_vals[b];
    }
}
