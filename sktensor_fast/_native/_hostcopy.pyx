# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""A parallel copy of host memory (OpenMP threads, one contiguous block each).

The OpenCL backend copies a tensor's values into page-locked staging buffers before a
transfer to the device: one thread copies at a fraction of the memory bandwidth of a
many-core host, several get close to it.  The bytes copied are the same for any number of
threads.
"""
from cython.parallel cimport prange
from libc.string cimport memcpy

#: bytes a block should hold at least before another thread is worth starting
DEF MIN_BLOCK_C = 1 << 20
MIN_BLOCK = MIN_BLOCK_C


def copy_bytes(const unsigned char[::1] src, unsigned char[::1] dst, int num_threads=1):
    """``dst[:] = src`` for two byte arrays of the same length, in ``num_threads`` blocks.

    Parameters
    ----------
    src, dst : contiguous uint8 arrays (or any buffer viewed as bytes)
        Source and destination, of equal length, not overlapping.
    num_threads : int, default=1
        Threads to copy with (fewer when the arrays are small).
    """
    cdef Py_ssize_t n = src.shape[0]
    cdef Py_ssize_t nb, b, lo, hi
    if dst.shape[0] != n:
        raise ValueError(f"copy_bytes: source has {n} bytes, destination {dst.shape[0]}")
    if n == 0:
        return
    nb = n // MIN_BLOCK_C
    if nb > num_threads:
        nb = num_threads
    if nb < 1:
        nb = 1
    cdef const unsigned char* ps = &src[0]
    cdef unsigned char* pd = &dst[0]
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        lo = n * b // nb
        hi = n * (b + 1) // nb
        memcpy(pd + lo, ps + lo, hi - lo)
