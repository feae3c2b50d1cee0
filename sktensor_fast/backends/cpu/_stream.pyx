# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""STREAM kernels (McCalpin): copy, scale, add and triad on float64 arrays, OpenMP-parallel.

They measure the memory bandwidth the sparse kernels are compared against
(``benchmarks/run.py``).  Every loop is a static ``prange`` with the same schedule, so a thread
touches the same slice of every array in every kernel (and in :func:`fill`, which does the first
touch of freshly allocated arrays).  STREAM counts 16 bytes per element for copy and scale and
24 for add and triad (reads plus writes, no write-allocate traffic).

The caller passes arrays of equal length; nothing here checks them.
"""
from cython.parallel cimport prange


def fill(double[::1] a, double value, int num_threads=1):
    """a[:] = value (parallel first touch, in the kernels' static schedule)."""
    cdef Py_ssize_t n = a.shape[0], i
    with nogil:
        for i in prange(n, schedule='static', num_threads=num_threads):
            a[i] = value


def copy(double[::1] c, const double[::1] a, int num_threads=1):
    """c = a."""
    cdef Py_ssize_t n = c.shape[0], i
    with nogil:
        for i in prange(n, schedule='static', num_threads=num_threads):
            c[i] = a[i]


def scale(double[::1] b, const double[::1] c, double q, int num_threads=1):
    """b = q * c."""
    cdef Py_ssize_t n = b.shape[0], i
    with nogil:
        for i in prange(n, schedule='static', num_threads=num_threads):
            b[i] = q * c[i]


def add(double[::1] c, const double[::1] a, const double[::1] b, int num_threads=1):
    """c = a + b."""
    cdef Py_ssize_t n = c.shape[0], i
    with nogil:
        for i in prange(n, schedule='static', num_threads=num_threads):
            c[i] = a[i] + b[i]


def triad(double[::1] a, const double[::1] b, const double[::1] c, double q,
          int num_threads=1):
    """a = b + q * c."""
    cdef Py_ssize_t n = a.shape[0], i
    with nogil:
        for i in prange(n, schedule='static', num_threads=num_threads):
            a[i] = b[i] + q * c[i]
