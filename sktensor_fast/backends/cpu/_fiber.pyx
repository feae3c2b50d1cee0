# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""MTTKRP and CP-APR's Φ over the fibers of a 3-way tensor with two tiny modes (Cython,
OpenMP).

See :mod:`sktensor_fast.backends.cpu.formats.fibers` for the layout; the loop over one chunk
of fibers is written in C, in ``sktensor_fast/include/sktf_fiber.h``.  Every chunk adds into
a private buffer over its own row interval of the output mode; a parallel loop over blocks of
output rows then adds the buffers in chunk order.  The chunks are fixed by the data, so the
result is bitwise the same for every thread count.

Like the other kernels this trusts its inputs: ``formats/fibers.py`` builds them.
"""
cimport cython
from cython.parallel cimport prange, parallel
from libc.stdlib cimport malloc, free
from libc.string cimport memset
from libc.stdint cimport int64_t, int32_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from "sktf_fiber.h":
    ctypedef struct sktf_fiber_job:
        const int64_t* fptr
        const int32_t* fa
        const int32_t* fb
        const int32_t* leaf
        const void* vals
        const void* Aa
        const void* Ab
        const void* Ac
        const void* B
        double eps
        int64_t R
        int out
    int sktf_fiber_simd_level() nogil
    void sktf_fiber_chunk_f64(const sktf_fiber_job* jb, int64_t f0, int64_t f1, double* buf,
                              int64_t lo, double* scratch, int simd) noexcept nogil
    void sktf_fiber_chunk_f32(const sktf_fiber_job* jb, int64_t f0, int64_t f1, float* buf,
                              int64_t lo, float* scratch, int simd) noexcept nogil
    double sktf_fiber_lln_f64(const sktf_fiber_job* jb, const double* weights, int64_t f0,
                              int64_t f1, double eps, double* scratch, int simd) noexcept nogil
    double sktf_fiber_lln_f32(const sktf_fiber_job* jb, const float* weights, int64_t f0,
                              int64_t f1, double eps, float* scratch, int simd) noexcept nogil

cdef extern from "sktf_log.h":
    int sktf_log_init(int level) nogil

ctypedef fused floating:
    float
    double

#: 3 when the CPU has AVX2 and FMA (the kernels then take their instances compiled for
#: them; rounding differs by the fused multiply-adds, one process always takes the same),
#: else 1.  2 (tests): the same instances without Φ's blocked loop in float64 at ranks 8
#: and 16 (``sktf_fiber.h``), whose results are those of 2 bit for bit.
SIMD_LEVEL = int(sktf_fiber_simd_level())

#: The instance of the data term's vectorised logarithm this module takes (``sktf_log.h``;
#: 0 generic, 1 AVX2 with FMA, 2 AVX-512): the best the CPU runs.
LOG_LEVEL = int(sktf_log_init(-1))


def _set_log_level(int level):
    """Make the data term of this module take the logarithm's instance ``level`` (-1: the
    best the CPU runs; a higher one than that: that).  Returns the level taken.  Only for
    tests and benchmarks."""
    return int(sktf_log_init(level))


cdef void _run(const sktf_fiber_job* jb, floating* out, floating* bufs, const Py_ssize_t* boff,
               const int64_t* cptr, const int64_t* clo, const int64_t* chi, Py_ssize_t nch,
               Py_ssize_t I, Py_ssize_t R, int num_threads, int simd) noexcept nogil:
    """The kernel of one call: the chunks into their buffers (parallel), then the buffers
    added into ``out`` (zeroed here) in chunk order, blocks of rows in parallel."""
    cdef floating* scratch
    cdef floating* src
    cdef floating* dst
    cdef Py_ssize_t q, ch, a, b, x, y, i, nblk
    cdef Py_ssize_t CH = 64
    memset(out, 0, I * R * sizeof(floating))
    with parallel(num_threads=num_threads):
        scratch = <floating*> malloc(2 * R * sizeof(floating))
        for q in prange(nch, schedule='dynamic'):
            memset(bufs + boff[q], 0, (boff[q + 1] - boff[q]) * sizeof(floating))
            if floating is double:
                sktf_fiber_chunk_f64(jb, cptr[q], cptr[q + 1], bufs + boff[q], clo[q],
                                     scratch, simd)
            else:
                sktf_fiber_chunk_f32(jb, cptr[q], cptr[q + 1], bufs + boff[q], clo[q],
                                     scratch, simd)
        free(scratch)
    # merge: blocks of CH rows in parallel, the chunks added in chunk order
    nblk = (I + CH - 1) // CH
    for ch in prange(nblk, schedule='dynamic', num_threads=num_threads):
        a = ch * CH
        b = min(a + CH, I)
        for q in range(nch):
            x = max(a, clo[q])
            y = min(b, chi[q] + 1)
            if x >= y:
                continue
            src = bufs + boff[q] + (x - clo[q]) * R
            dst = out + x * R
            for i in range((y - x) * R):
                dst[i] += src[i]


def accumulate(const int64_t[::1] fptr, const int32_t[::1] fa, const int32_t[::1] fb,
               const int32_t[::1] leaf, const floating[::1] vals, const int64_t[::1] cptr,
               const int64_t[::1] clo, const int64_t[::1] chi,
               const floating[:, ::1] Aa, const floating[:, ::1] Ab, const floating[:, ::1] Ac,
               int which, floating[:, ::1] out, object B=None, double eps=0.0,
               int num_threads=1, object work=None):
    """MTTKRP (``B is None``) or Φ (``B`` given) of the root (``which`` 0), middle (1) or
    leaf (2) mode into ``out`` (overwritten).

    ``fptr`` (nf + 1), ``fa``, ``fb`` (nf): the fibers; ``leaf``, ``vals`` (nnz): their
    nonzeros.  ``cptr`` (nch + 1): chunk boundaries into the fibers; ``clo``, ``chi`` (nch):
    each chunk's row interval of the output mode.  ``Aa``, ``Ab``, ``Ac``: the factors of the
    root, middle and leaf modes (the output mode's is not read).  ``work``: an optional 1-D
    array of the dtype of ``vals`` for the buffers, used when large enough.
    """
    cdef Py_ssize_t I = out.shape[0], R = out.shape[1]
    cdef Py_ssize_t nch = cptr.shape[0] - 1
    cdef sktf_fiber_job jb
    cdef const floating[:, ::1] Bv
    cdef Py_ssize_t* boff = NULL
    cdef floating* bufs = NULL
    cdef bint own = True
    cdef floating[::1] wk
    cdef Py_ssize_t q, total
    cdef int simd = SIMD_LEVEL
    if which < 0 or which > 2:
        raise ValueError(f"which must be 0, 1 or 2, got {which}")
    if I > 0 and R > 0:
        with nogil:
            memset(&out[0, 0], 0, I * R * sizeof(floating))
    if nch <= 0 or I == 0 or R == 0 or vals.shape[0] == 0:
        return out
    jb.fptr = &fptr[0]
    jb.fa = &fa[0]
    jb.fb = &fb[0]
    jb.leaf = &leaf[0]
    jb.vals = &vals[0]
    jb.Aa = &Aa[0, 0]
    jb.Ab = &Ab[0, 0]
    jb.Ac = &Ac[0, 0]
    jb.B = NULL
    jb.eps = eps
    jb.R = R
    jb.out = which
    if B is not None:
        Bv = B
        jb.B = &Bv[0, 0]
    boff = <Py_ssize_t*> malloc((nch + 1) * sizeof(Py_ssize_t))
    if boff == NULL:
        raise MemoryError()
    try:
        total = 0
        for q in range(nch):
            boff[q] = total
            total += (chi[q] - clo[q] + 1) * R
        boff[nch] = total
        if work is not None:
            wk = work
            if wk.shape[0] >= total:
                bufs = &wk[0]
                own = False
        if own:
            bufs = <floating*> malloc((total if total > 0 else 1) * sizeof(floating))
            if bufs == NULL:
                raise MemoryError(f"the fiber kernels' buffers need {total * sizeof(floating)} "
                                  f"bytes")
        with nogil:
            _run(&jb, &out[0, 0], bufs, boff, &cptr[0], &clo[0], &chi[0], nch, I, R,
                 num_threads, simd)
        return out
    finally:
        free(boff)
        if own:
            free(bufs)


cdef class PhiPlan:
    """One mode's MTTKRP (``B`` None) or Φ over the fibers with its arrays bound once:
    :meth:`run` computes it into ``out`` again from the arrays' current contents (CP-APR MU
    updates ``B``, a factor, in place between the Φ of its inner iterations).  The arguments
    are those of :func:`accumulate` (``work`` required, large enough); every float array of
    one type, float64 or float32, C-contiguous: checked here once, so that a call costs no
    Python-level work (between two kernels, whose nonzeros leave the caches cold, each
    Python step costs microseconds)."""
    cdef sktf_fiber_job jb
    cdef Py_ssize_t* boff
    cdef Py_ssize_t nch, nrows, rank
    cdef const int64_t* cptr
    cdef const int64_t* clo
    cdef const int64_t* chi
    cdef void* outp
    cdef void* bufs
    cdef bint f64
    cdef int num_threads, simd
    cdef object keep
    cdef readonly object out

    def __cinit__(self):
        self.boff = NULL

    def __dealloc__(self):
        free(self.boff)

    def __init__(self, fptr, fa, fb, leaf, vals, cptr, clo, chi, Aa, Ab, Ac, int which,
                 out, B, double eps, int num_threads, work):
        cdef Py_ssize_t q, total = 0
        cdef cnp.ndarray c, lo, hi
        if which < 0 or which > 2:
            raise ValueError(f"which must be 0, 1 or 2, got {which}")
        ints = {"fptr": (fptr, np.int64), "fa": (fa, np.int32), "fb": (fb, np.int32),
                "leaf": (leaf, np.int32), "cptr": (cptr, np.int64), "clo": (clo, np.int64),
                "chi": (chi, np.int64)}
        dtype = np.asarray(vals).dtype
        if dtype not in (np.float64, np.float32):
            raise TypeError(f"the values must be float64 or float32, got {dtype}")
        reals = {"vals": vals, "Aa": Aa, "Ab": Ab, "Ac": Ac, "out": out, "work": work}
        if B is not None:
            reals["B"] = B
        for name, (a, t) in ints.items():
            if not (isinstance(a, np.ndarray) and a.dtype == t and a.ndim == 1
                    and a.flags.c_contiguous):
                raise TypeError(f"{name} must be a C-contiguous 1-D {np.dtype(t)} array")
        for name, a in reals.items():
            if not (isinstance(a, np.ndarray) and a.dtype == dtype and a.flags.c_contiguous):
                raise TypeError(f"{name} must be a C-contiguous {dtype} array")
        if out.ndim != 2 or not out.flags.writeable or not work.flags.writeable:
            raise ValueError("out must be a writeable 2-D array, work writeable")
        self.nrows, self.rank = out.shape[0], out.shape[1]
        for name in ("Aa", "Ab", "Ac") + (("B",) if B is not None else ()):
            if reals[name].ndim != 2 or reals[name].shape[1] != self.rank:
                raise ValueError(f"{name} must have {self.rank} columns")
        if B is not None and B.shape[0] != self.nrows:
            raise ValueError(f"B has {B.shape[0]} rows, out {self.nrows}")
        self.nch = cptr.shape[0] - 1
        if clo.shape[0] < self.nch or chi.shape[0] < self.nch:
            raise ValueError("clo and chi need one entry per chunk")
        self.keep = (fptr, fa, fb, leaf, vals, cptr, clo, chi, Aa, Ab, Ac, B, work)
        self.out = out
        self.f64 = dtype == np.float64
        self.num_threads = max(1, num_threads)
        self.simd = SIMD_LEVEL
        c, lo, hi = cptr, clo, chi
        self.cptr = <const int64_t*> cnp.PyArray_DATA(c)
        self.clo = <const int64_t*> cnp.PyArray_DATA(lo)
        self.chi = <const int64_t*> cnp.PyArray_DATA(hi)
        self.boff = <Py_ssize_t*> malloc((self.nch + 1 if self.nch > 0 else 1)
                                         * sizeof(Py_ssize_t))
        if self.boff == NULL:
            raise MemoryError()
        for q in range(self.nch):
            self.boff[q] = total
            total += (self.chi[q] - self.clo[q] + 1) * self.rank
        self.boff[self.nch if self.nch > 0 else 0] = total
        if work.shape[0] < total:
            raise ValueError(f"work holds {work.shape[0]} entries, the buffers need {total}")
        self.jb.fptr = <const int64_t*> cnp.PyArray_DATA(<cnp.ndarray> fptr)
        self.jb.fa = <const int32_t*> cnp.PyArray_DATA(<cnp.ndarray> fa)
        self.jb.fb = <const int32_t*> cnp.PyArray_DATA(<cnp.ndarray> fb)
        self.jb.leaf = <const int32_t*> cnp.PyArray_DATA(<cnp.ndarray> leaf)
        self.jb.vals = cnp.PyArray_DATA(<cnp.ndarray> vals)
        self.jb.Aa = cnp.PyArray_DATA(<cnp.ndarray> Aa)
        self.jb.Ab = cnp.PyArray_DATA(<cnp.ndarray> Ab)
        self.jb.Ac = cnp.PyArray_DATA(<cnp.ndarray> Ac)
        self.jb.B = NULL if B is None else cnp.PyArray_DATA(<cnp.ndarray> B)
        self.jb.eps = eps
        self.jb.R = self.rank
        self.jb.out = which
        self.outp = cnp.PyArray_DATA(<cnp.ndarray> out)
        self.bufs = cnp.PyArray_DATA(<cnp.ndarray> work)
        if vals.shape[0] == 0:
            self.nch = 0

    def run(self):
        """Compute into ``out`` and return it."""
        if self.nrows == 0 or self.rank == 0:
            return self.out
        with nogil:
            if self.nch <= 0:
                if self.f64:
                    memset(self.outp, 0, self.nrows * self.rank * sizeof(double))
                else:
                    memset(self.outp, 0, self.nrows * self.rank * sizeof(float))
            elif self.f64:
                _run(&self.jb, <double*> self.outp, <double*> self.bufs, self.boff, self.cptr,
                     self.clo, self.chi, self.nch, self.nrows, self.rank, self.num_threads, self.simd)
            else:
                _run(&self.jb, <float*> self.outp, <float*> self.bufs, self.boff, self.cptr,
                     self.clo, self.chi, self.nch, self.nrows, self.rank, self.num_threads, self.simd)
        return self.out


def poisson_data_term(const int64_t[::1] fptr, const int32_t[::1] fa, const int32_t[::1] fb,
                      const int32_t[::1] leaf, const floating[::1] vals,
                      const int64_t[::1] cptr, const floating[:, ::1] Aa,
                      const floating[:, ::1] Ab, const floating[:, ::1] Ac,
                      const floating[::1] weights, double eps, int num_threads=1):
    """Σ x log(max(m, eps)) over the nonzeros with x != 0, m their model values (``weights``
    and the factors of the root, middle and leaf modes; formed on the fly).  One partial sum
    per chunk of ``cptr``, added in chunk order: the same result for every thread count."""
    cdef Py_ssize_t nch = cptr.shape[0] - 1
    cdef Py_ssize_t R = weights.shape[0]
    cdef sktf_fiber_job jb
    cdef double* part
    cdef floating* scratch
    cdef Py_ssize_t q
    cdef double total = 0
    cdef int simd = SIMD_LEVEL
    if nch <= 0 or vals.shape[0] == 0 or R == 0:
        return 0.0
    jb.fptr = &fptr[0]
    jb.fa = &fa[0]
    jb.fb = &fb[0]
    jb.leaf = &leaf[0]
    jb.vals = &vals[0]
    jb.Aa = &Aa[0, 0]
    jb.Ab = &Ab[0, 0]
    jb.Ac = &Ac[0, 0]
    jb.B = NULL
    jb.eps = eps
    jb.R = R
    jb.out = 0
    part = <double*> malloc(nch * sizeof(double))
    if part == NULL:
        raise MemoryError()
    try:
        with nogil, parallel(num_threads=num_threads):
            scratch = <floating*> malloc(R * sizeof(floating))
            for q in prange(nch, schedule='dynamic'):
                if floating is double:
                    part[q] = sktf_fiber_lln_f64(&jb, &weights[0], cptr[q], cptr[q + 1], eps,
                                                 scratch, simd)
                else:
                    part[q] = sktf_fiber_lln_f32(&jb, &weights[0], cptr[q], cptr[q + 1], eps,
                                                 scratch, simd)
            free(scratch)
        for q in range(nch):
            total += part[q]
        return total
    finally:
        free(part)
