/* Shared by every program (prepended by the host after its header). */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* End of a chunk of the run-reducing kernels: the partial sums of the chunk's first and last
 * rows (maybe shared with neighbouring chunks) go to the chunk's two slots of the boundary
 * list; `acc` holds the last run, whose row is `cur`. */
inline void close_chunk(const long c, const int R, const int r, const long cur,
                        const long first_row, const long last_row, const VAL_T acc,
                        __global long* bnd_row, __global VAL_T* bnd_val)
{
    if (cur == first_row) {
        bnd_val[(2 * c) * R + r] = acc;
        bnd_val[(2 * c + 1) * R + r] = 0;
    } else {
        bnd_val[(2 * c + 1) * R + r] = acc;
    }
    if (r == 0) {
        bnd_row[2 * c] = first_row;
        bnd_row[2 * c + 1] = last_row;
    }
}
