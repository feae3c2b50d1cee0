# distutils: extra_compile_args = -fno-math-errno
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
# (-fno-math-errno: errno is never read here, and without it GCC cannot vectorise sqrt in the
# optimiser steps)
"""Compiled CPU kernels of Generalized CP (Cython, OpenMP): sampling, loss, fused gradient.

The stochastic gradient of GCP is ``G_k = Σ_j y_j · (⊛_{l≠k} A_l[i_l(j), :])`` accumulated into
row ``i_k(j)`` of mode ``k``, over the samples ``j``, with ``y_j = w_j ∂f/∂m(x_j, m_j)``.
:func:`gradient` computes it without building the sampled tensor.  On one thread each sample
is drawn, its N factor rows read, its model value (suffix products) and weighted derivative
``y_j`` formed, and its contributions added straight into their gradient rows, in sample
order.  On several threads samples are processed in blocks of a fixed size, one parallel
region per block (one block per step at the default sample counts):

1. the block's samples are cut into chunks of 256; the first thread takes chunks from the
   front and does exactly that (in sample order), while the other threads take chunks from
   the back, one at a time, until they meet: for each, draw the samples, form model values
   and ``y_j``, and store, for every mode, the chunk's samples (rows and ``y_j``) sorted by
   row range (a stable counting sort into at most 64 ranges of ``2^s`` rows, fixed by the
   mode's size);
2. after a barrier, one task per (mode, row range) forms the contribution rows
   ``y_j · ⊛_{l≠k} A_l[i_l, :]`` of the stored samples again from ``y_j`` and the factor
   rows (the prefix × suffix products of the serial version, in its order) and adds them
   into their rows, chunk by chunk and in sample order within each, after the first
   thread's.  A row is owned by exactly one range, so no atomics and no per-thread copies of
   the gradient are needed.  (Storing the N contribution rows of every sample instead would
   write and read back N·R words per sample, most of them cache misses; forming them again
   reads factor rows, which stay in cache far more often.)
3. (:func:`run_steps` only) the optimiser step: in the same tasks, on each range's rows
   (written into a second copy of the factors, so that the other ranges still read the
   step's factors), or, for a single step, after a barrier by every thread on its share of
   the rows.

One parallel driver (``_fused_parallel``) runs both: a gradient is its one step without an
optimiser, an epoch of :func:`run_steps` its steps in one parallel region.

Steps too small for that (a few hundred samples: two barriers a step would cost more than the
shares save) run on one thread; with ``draw_ahead`` a second thread draws the samples of the
next steps meanwhile, into a ring of a few steps' samples (``_steps_drawn_ahead``).  Samples
do not depend on the factors, so the thread computing the steps reads them from the ring
instead of drawing them, with the same sums in the same order; a step whose samples are not
there yet it draws itself, so it never waits for the other thread.

Storing, sorting and re-forming the contributions costs about half as much as drawing the
samples; the first thread's chunks are spared it, and a thread that the operating system holds
back delays only the chunk it holds (the others take the rest from either end).  A step wakes
the threads once, and no part of it runs on one thread while the others wait.

This is the "sparse array" variant of GenTen's fused sampling + MTTKRP.  Per-thread private
gradient buffers would have to be zeroed and merged over every row of every mode at each step
(Σ I_k · R · threads) and would make the summation order depend on the thread count; with the
lists by row range, the work per step is proportional to the number of samples, and every
gradient row is the sum of its contributions in increasing sample order, whatever the
threads and wherever they met: the result is bitwise identical for any thread count (the
module is compiled without contraction of a*b + c into fused multiply-adds, which would round
the two paths differently).

Samples are drawn by the sampler of ``sktensor_fast/include/sktf_gcp_sample.h``
(``sktf_gcp_sample``), the one definition that the OpenCL kernels call too: for a step key
every device draws the same entries.  Its random numbers come from the counter-based generator
of ``sktf_rng.h`` (word c of sample j at step key K depends on (K, j, c) only), so no state is
shared between threads and the samples do not depend on the schedule either
(:meth:`GcpSampler.draw` reproduces exactly the samples of the fused kernel).  The header
describes the samplers: stratified zeros found by rejection, or computed from the sorted linear
indices on dense tensors and after ``max_attempts`` rejections; look-ups of a coordinate among
the nonzeros by a bucketed binary search of those indices.  Like the other kernels, these trust
their inputs; the Python layer (``backends/cpu/gcp_ops.py``) validates shapes and builds the
sampler.
"""
from cython.parallel cimport prange, parallel, threadid
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset, memcpy
from libc.math cimport sqrt, pow
from libc.stdint cimport int64_t, uint64_t, int8_t

cdef extern from "Python.h":
    # declared without an exception clause: the caller cleans up, then propagates the error
    int _check_signals "PyErr_CheckSignals"()

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from "sktf_gcp.h":
    void sktf_adam_chunk(double* u, const double* g, double* m, double* v, int64_t n,
                         double beta1, double beta2, double a, double e, double lower) nogil
    void sktf_adagrad_chunk(double* u, const double* g, double* s, int64_t n, double lr,
                            double eps, double lower) nogil
    void sktf_sgd_chunk(double* u, const double* g, int64_t n, double lr, double lower) nogil
    void sktf_adam_chunk_to(double* out, const double* u, const double* g, double* m,
                            double* v, int64_t n, double beta1, double beta2, double a,
                            double e, double lower) nogil
    void sktf_adagrad_chunk_to(double* out, const double* u, const double* g, double* s,
                               int64_t n, double lr, double eps, double lower) nogil
    void sktf_sgd_chunk_to(double* out, const double* u, const double* g, int64_t n,
                           double lr, double lower) nogil
    void SKTF_PREFETCH(const void* p) nogil
    void SKTF_PREFETCH_W(const void* p) nogil
    void sktf_omp_barrier() noexcept nogil
    int sktf_omp_team_size() noexcept nogil
    ctypedef struct sktf_gcp_claims:
        int64_t front, back
    int64_t sktf_gcp_claim_front(sktf_gcp_claims* c, int64_t share,
                                 int64_t* first) noexcept nogil
    int64_t sktf_gcp_claim_back(sktf_gcp_claims* c) noexcept nogil
    void sktf_gcp_add_stored(double* g_k, double** fac, const int64_t* srows,
                             const double* sy, int64_t i0, int64_t i1, int N, int k,
                             const double* lam, int64_t R) noexcept nogil
    int64_t sktf_load_acquire(const int64_t* p) noexcept nogil
    void sktf_store_release(int64_t* p, int64_t v) noexcept nogil
    void sktf_nap() noexcept nogil

cdef extern from "sktf_rng.h":
    # the counter-based generator, written once for every device (sktensor_fast/include);
    # its words are turned into samples by sktf_gcp_sample.h only
    uint64_t sktf_mix_seed(uint64_t seed, uint64_t step) noexcept nogil

cdef extern from "sktf_losses.h":
    # the losses, written once for every device (sktensor_fast/include/sktf_losses.h)
    double _loss_value "sktf_loss_value"(int code, double p, double x, double m) noexcept nogil
    double _loss_deriv "sktf_loss_deriv"(int code, double p, double x, double m) noexcept nogil
    int SKTF_N_LOSSES

cdef extern from "sktf_gcp_sample.h":
    # the samplers, written once for every device (sktensor_fast/include/sktf_gcp_sample.h)
    ctypedef struct sktf_gcp_sampler:
        int64_t nnz, nz, p, q, max_attempts, nzero
        int nmodes, explicit_z, zmode, include_nz, correct, has_lin, has_bucket, bshift
        int implicit_z
        double wp, wq
        const int64_t* shape
        const int64_t* strides
        const int64_t* subs
        const double* vals
        const int64_t* lin
        const int64_t* bucket
        const int64_t* zsubs
    sktf_gcp_sampler sktf_gcp_sampler_make(
        const int64_t* sp, int nmodes, const int64_t* shape, const int64_t* strides,
        const int64_t* subs, const double* vals, const int64_t* lin, const int64_t* bucket,
        const int64_t* zsubs, double wp, double wq) noexcept nogil
    int64_t sktf_gcp_find(const sktf_gcp_sampler* S, const int64_t* idx) noexcept nogil
    double sktf_gcp_sample(const sktf_gcp_sampler* S, uint64_t key, int64_t j, int64_t* idx,
                           double* w, int* corr) noexcept nogil
    void sktf_gcp_touch_ahead(const sktf_gcp_sampler* S, uint64_t key, int64_t j, int64_t end,
                              int dist) noexcept nogil
    void sktf_gcp_touch_first(const sktf_gcp_sampler* S, uint64_t key, int64_t j0,
                              int64_t end, int dist) noexcept nogil
    enum:
        SKTF_GCP_NNZ
        SKTF_GCP_NZ
        SKTF_GCP_EXPLICIT_Z
        SKTF_GCP_P
        SKTF_GCP_Q
        SKTF_GCP_ZMODE
        SKTF_GCP_INCLUDE_NZ
        SKTF_GCP_CORRECT
        SKTF_GCP_HAS_LIN
        SKTF_GCP_HAS_BUCKET
        SKTF_GCP_BSHIFT
        SKTF_GCP_IMPLICIT_Z
        SKTF_GCP_MAX_ATTEMPTS
        SKTF_GCP_NZERO
        SKTF_GCP_NPARAMS

cdef enum:
    # samples per chunk of the loss sum (fixed: sums do not depend on the thread count)
    LOSS_CHUNK = 1024
    # samples drawn ahead of the one being processed (their rows are prefetched)
    LOOKAHEAD = 8
    # samples per task of GcpSampler.draw
    DRAW_CHUNK = 1024
    # samples per task of the first phase of the multi-threaded gradient
    PHASE1_CHUNK = 256
    # most row ranges per mode in its second phase
    MAX_PARTS = 64
    # below this much work (samples x modes x rank, or entries) a kernel runs on one thread;
    # the sampling kernels take one thread per this much work (see _threads_for)
    SERIAL_WORK = 131072
    # work of drawing a sample, in those units (its memory reads cost about as much as 32
    # products of the gradient: a sample costs (modes x rank + SAMPLE_WORK) units)
    SAMPLE_WORK = 32
    # samples between two checks for a pending signal (Ctrl-C) in the long-running kernels
    SIGNAL_EVERY = 1 << 20
    # the ring of the drawing thread (_steps_drawn_ahead): at most this many steps' samples,
    # and about this many bytes of them
    AHEAD_MAX_SLOTS = 32
    AHEAD_BYTES = 1 << 19
    # int64 words between two of its flags (one cache line each)
    FLAG_STRIDE = 8

#: Loss codes the kernels evaluate (those of sktensor_fast._loss_table).
LOSS_CODES = tuple(range(SKTF_N_LOSSES))


def step_key(uint64_t seed, uint64_t step):
    """The generator key of gradient step ``step`` of a run seeded with ``seed``."""
    return sktf_mix_seed(seed, step)


# ---------------------------------------------------------------------------- losses
def loss_values(int code, double param, const double[::1] x, const double[::1] m,
                double[::1] value, double[::1] deriv):
    """f(x, m) and ∂f/∂m as the kernels compute them (for tests)."""
    cdef Py_ssize_t i, n = x.shape[0]
    with nogil:
        for i in range(n):
            value[i] = _loss_value(code, param, x[i], m[i])
            deriv[i] = _loss_deriv(code, param, x[i], m[i])


# ---------------------------------------------------------------------------- sampling
cdef struct Src:
    # a drawn sample (the shared sampler of sktf_gcp_sample.h at step key `key`) or an
    # explicit one
    sktf_gcp_sampler g
    int nmodes
    uint64_t key
    # an explicit sample instead of drawing one (xn >= 0)
    const int64_t* xsubs
    const double* xvals
    const double* xw
    const int8_t* xcorr
    const double* xy           # precomputed w (f'(x, m) - corr f'(0, m)), or NULL
    int64_t xn
    # what decides whether the serial loop prefetches what its samples read (see
    # _prefetches): the bytes of the data a draw looks at, the factor rows of all modes
    int64_t prefetch_bytes
    int64_t rows


cdef bint _interrupted() noexcept nogil:
    """Whether a signal is pending whose handler raised (Ctrl-C): takes the GIL briefly to run
    the handlers, leaving their exception set for :func:`_reraise`."""
    cdef int rc
    with gil:
        rc = _check_signals()
    return rc != 0


cdef int _reraise() except -1:
    """Propagate the exception a signal handler left set (see :func:`_interrupted`)."""
    return -1


cdef inline int64_t _n_samples(const Src* S) noexcept nogil:
    if S.xn >= 0:
        return S.xn
    return S.g.p + S.g.q


cdef inline double _sample(const Src* S, int64_t j, int64_t* idx, double* w,
                           int* corr) noexcept nogil:
    """Sample ``j``: coordinates into ``idx``; returns the data value, sets weight and flag
    (drawn by the shared sampler, or read from the explicit sample)."""
    cdef int k, N = S.nmodes
    if S.xn >= 0:  # explicit sample
        for k in range(N):
            idx[k] = S.xsubs[j * N + k]
        w[0] = S.xw[j]
        corr[0] = S.xcorr[j] if S.xcorr != NULL else 0
        return S.xvals[j]
    return sktf_gcp_sample(&S.g, S.key, j, idx, w, corr)


cdef class GcpSampler:
    """Where the samples of a GCP fit come from (built once per fit by the CPU backend).

    Parameters
    ----------
    shape : int64 (N,)
    subs, vals : the (observed) nonzeros, lexicographically sorted.
    lin : their sorted linear indices, or an empty array when the shape's product overflows.
    bucket, bshift : optional index of ``lin`` by its high bits (``lin >> bshift``), so that a
        search touches a bucket of about one entry instead of log2(nnz) levels of ``lin``;
        an empty ``bucket`` searches all of ``lin``.
    zsubs : explicit list of (observed) zero coordinates; used when ``explicit_z``.
    implicit_z : with ``explicit_z`` and an empty ``zsubs``: the list is every entry that is not
        a nonzero, in linear-index order, computed from ``lin`` (needs ``lin``).
    max_attempts : rejections of a stratified zero sample before it is computed from ``lin``
        (without ``lin``, rejection goes on until it finds a zero).
    p, q : samples of nonzeros and "other" samples per draw; ``wp``, ``wq`` their weights.
    zmode : 0 the other samples have value 0, 1 their value is looked up, 2 nonzeros are
        rejected (stratified).
    include_nz : with ``explicit_z``, other samples are drawn from [nonzeros; zsubs].
    correct : semi-stratified correction on the nonzero samples.
    """

    cdef Src src
    cdef object keep
    cdef object _params
    cdef public int64_t p, q
    cdef public double wp, wq

    def __init__(self, const int64_t[::1] shape, const int64_t[:, ::1] subs,
                 const double[::1] vals, const int64_t[::1] lin, const int64_t[:, ::1] zsubs,
                 bint explicit_z, int64_t p, int64_t q, double wp, double wq, int zmode,
                 bint include_nz, bint correct, const int64_t[::1] bucket=None,
                 int bshift=0, bint implicit_z=False, int64_t max_attempts=256):
        cdef int N = shape.shape[0]
        cdef int k
        cdef bint has_lin = lin.shape[0] == vals.shape[0] and vals.shape[0] > 0
        strides = np.zeros(N, dtype=np.int64)
        cdef int64_t[::1] st = strides
        cdef int64_t s = 1
        for k in range(N - 1, -1, -1):
            st[k] = s
            s *= shape[k]
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if implicit_z and (not explicit_z or zsubs.shape[0] or not has_lin):
            raise ValueError("implicit_z needs explicit_z, an empty zsubs and the linear "
                             "index of the nonzeros")
        # the parameter array of sktf_gcp_sample.h (what the OpenCL backend uploads)
        params = np.zeros(SKTF_GCP_NPARAMS, dtype=np.int64)
        cdef int64_t[::1] sp = params
        sp[SKTF_GCP_NNZ] = vals.shape[0]
        sp[SKTF_GCP_NZ] = (s - vals.shape[0]) if implicit_z else zsubs.shape[0]
        sp[SKTF_GCP_EXPLICIT_Z] = explicit_z
        sp[SKTF_GCP_P] = p
        sp[SKTF_GCP_Q] = q
        sp[SKTF_GCP_ZMODE] = zmode
        sp[SKTF_GCP_INCLUDE_NZ] = include_nz
        sp[SKTF_GCP_CORRECT] = correct
        sp[SKTF_GCP_HAS_LIN] = has_lin
        sp[SKTF_GCP_HAS_BUCKET] = has_lin and bucket is not None and bucket.shape[0] > 1
        sp[SKTF_GCP_BSHIFT] = bshift if sp[SKTF_GCP_HAS_BUCKET] else 0
        sp[SKTF_GCP_IMPLICIT_Z] = implicit_z
        sp[SKTF_GCP_MAX_ATTEMPTS] = max_attempts
        sp[SKTF_GCP_NZERO] = (s - vals.shape[0]) if has_lin else 0
        self.keep = (shape, subs, vals, lin, zsubs, strides, bucket)
        self._params = params
        memset(&self.src, 0, sizeof(Src))
        self.src.nmodes = N
        self.src.g = sktf_gcp_sampler_make(
            &sp[0], N, &shape[0], &st[0] if has_lin else NULL,
            &subs[0, 0] if subs.shape[0] > 0 else NULL,
            &vals[0] if vals.shape[0] > 0 else NULL, &lin[0] if has_lin else NULL,
            &bucket[0] if sp[SKTF_GCP_HAS_BUCKET] else NULL,
            &zsubs[0, 0] if zsubs.shape[0] > 0 else NULL, wp, wq)
        self.src.xn = -1
        self.src.rows = int(np.sum(np.asarray(shape)))
        self.src.prefetch_bytes = (vals.shape[0] * (8 * N + 16) + zsubs.shape[0] * 8 * N
                                   + (bucket.shape[0] * 8 if bucket is not None else 0))
        self.p, self.q, self.wp, self.wq = p, q, wp, wq

    @property
    def n_samples(self):
        return self.src.g.p + self.src.g.q

    def prefetches(self, Py_ssize_t R):
        """Whether the serial loop of steps prefetches for this sampler at rank ``R`` (see
        :func:`prefetch_bytes`)."""
        return bool(_prefetches(&self.src, R))

    @property
    def params(self):
        """The sampler's parameter array (``SKTF_GCP_*`` of sktf_gcp_sample.h)."""
        return self._params.copy()

    def draw(self, uint64_t key, int64_t[:, ::1] out_subs, double[::1] out_x,
             double[::1] out_w, int8_t[::1] out_corr, int num_threads=1):
        """Materialise the sample of step key ``key`` (same samples as the fused kernel)."""
        cdef Src S = self.src
        cdef int64_t n = S.g.p + S.g.q, j, j0, j1, ci, c0, c1
        cdef int N = S.nmodes, c
        cdef double w
        cdef bint stopped = False
        S.key = key
        if n == 0:
            return
        num_threads = _threads_for(n * N, num_threads)
        with nogil:
            j0 = 0
            while j0 < n:  # in pieces, to see Ctrl-C in between
                j1 = min(n, j0 + SIGNAL_EVERY)
                for ci in prange((j1 - j0 + DRAW_CHUNK - 1) // DRAW_CHUNK, schedule='dynamic',
                                 num_threads=num_threads):
                    c0 = j0 + ci * DRAW_CHUNK
                    c1 = min(j1, c0 + DRAW_CHUNK)
                    # with prefetch hints for the samples ahead (sktf_gcp_sample.h)
                    sktf_gcp_touch_first(&S.g, S.key, c0, c1, LOOKAHEAD)
                    for j in range(c0, c1):
                        sktf_gcp_touch_ahead(&S.g, S.key, j, c1, LOOKAHEAD)
                        c = 0
                        out_x[j] = _sample(&S, j, &out_subs[j, 0], &out_w[j], &c)
                        out_corr[j] = c
                if j1 < n and _interrupted():
                    stopped = True
                    break
                j0 = j1
        if stopped:
            _reraise()

    def find(self, const int64_t[:, ::1] idx, int64_t[::1] out):
        """Positions of coordinate rows among the nonzeros (-1 when absent), for tests."""
        cdef Py_ssize_t i
        with nogil:
            for i in range(idx.shape[0]):
                out[i] = sktf_gcp_find(&self.src.g, &idx[i, 0])


cdef void _explicit_src(Src* S, int N, object xsubs, object xvals, object xw, object xcorr,
                        object xy):
    cdef const int64_t[:, ::1] xs = xsubs
    cdef const double[::1] xv = xvals
    cdef const double[::1] xwv = xw
    cdef const int8_t[::1] xc
    cdef const double[::1] xyv
    memset(S, 0, sizeof(Src))
    S.nmodes = N
    S.xn = xs.shape[0]
    if S.xn > 0:
        S.xsubs = &xs[0, 0]
        S.xvals = &xv[0]
        S.xw = &xwv[0]
        if xcorr is not None:
            xc = xcorr
            S.xcorr = &xc[0]
        if xy is not None:
            xyv = xy
            S.xy = &xyv[0]


# ---------------------------------------------------------------------------- fused gradient
cdef inline double _terms(const Src* S, int64_t j, double x, double w, int corr, int code,
                          double param, const double* lam, double** fac, int N, Py_ssize_t R,
                          const int64_t* idx, const double** rows, double* suf, double* pre,
                          bint want_loss, double* yout=NULL) noexcept nogil:
    """For sample j (coordinates ``idx``, value x, weight w), read its factor rows and leave
    in ``suf[k]`` the product of the rows after mode k and in ``pre`` the weighted derivative
    times λ; returns the weighted loss (when ``want_loss``).  The contribution of mode k is
    then ``pre ⊛ suf[k]`` once ``pre`` has been multiplied by the rows of the modes before k.
    ``yout`` (optional) receives the weighted derivative."""
    cdef double m = 0.0, yv, f = 0.0
    cdef int k
    cdef Py_ssize_t r
    for k in range(N):
        rows[k] = fac[k] + idx[k] * R
    for r in range(R):
        suf[(N - 1) * R + r] = 1.0
    for k in range(N - 2, -1, -1):
        for r in range(R):
            suf[k * R + r] = suf[(k + 1) * R + r] * rows[k + 1][r]
    for r in range(R):
        m += lam[r] * rows[0][r] * suf[r]
    if S.xy != NULL:
        yv = S.xy[j]
    else:
        yv = _loss_deriv(code, param, x, m)
        if corr:
            yv = yv - _loss_deriv(code, param, 0.0, m)
        yv = w * yv
    if want_loss:
        f = _loss_value(code, param, x, m)
        if corr:
            f = f - _loss_value(code, param, 0.0, m)
        f = w * f
    for r in range(R):
        pre[r] = yv * lam[r]
    if yout != NULL:
        yout[0] = yv
    return f


# bytes below which the serial loop does not prefetch (about a core's share of cache)
cdef int64_t PREFETCH_BYTES = 1 << 20


def prefetch_bytes(value=None):
    """The size below which the serial sample loop does not prefetch (bytes of the data a
    draw reads, or of the factor and gradient rows); sets it when ``value`` is given (for
    tests: the results are the same bits either way).  Returns the setting before."""
    global PREFETCH_BYTES
    old = PREFETCH_BYTES
    if value is not None:
        PREFETCH_BYTES = int(value)
    return old


cdef inline bint _prefetches(const Src* S, Py_ssize_t R) noexcept nogil:
    """Whether the serial loop prefetches: when the data a draw reads (``S.prefetch``, decided
    from the tensor's bytes) or the factor and gradient rows (16 R bytes a row) exceed
    :data:`PREFETCH_BYTES`; below, everything stays in cache and the hints only cost
    instructions (an explicit sample is read in order: only its rows count)."""
    if S.rows * R * 16 > PREFETCH_BYTES:
        return True
    return S.prefetch_bytes > PREFETCH_BYTES and S.xn < 0


cdef inline void _prefetch_rows(double** fac, double** grad, const int8_t* active,
                                const int64_t* idx, int N, Py_ssize_t R) noexcept nogil:
    cdef int k
    cdef Py_ssize_t off
    for k in range(N):
        for off in range(0, R, 8):  # one cache line holds 8 doubles
            SKTF_PREFETCH(fac[k] + idx[k] * R + off)
            if active[k]:
                SKTF_PREFETCH_W(grad[k] + idx[k] * R + off)


cdef inline void _prefetch_factor_rows(double** fac, const int64_t* idx, int N,
                                       Py_ssize_t R) noexcept nogil:
    cdef int k
    cdef Py_ssize_t off
    for k in range(N):
        for off in range(0, R, 8):
            SKTF_PREFETCH(fac[k] + idx[k] * R + off)


cdef void _serial_range(const Src* S, int64_t j0, int64_t j1, int code, double param,
                        const double* lam, double** fac, double** grad,
                        const int8_t* active, Py_ssize_t R, bint want_loss, double* total,
                        double* fout, int64_t* ring, double* ring_x, int* ring_c, double* suf,
                        const double** rows) noexcept nogil:
    """Samples ``j0 .. j1 - 1``, each contribution added straight into its gradient row, in
    sample order.  Their loss terms are added to ``total[0]`` (in sample order), or, with
    ``fout``, the term of sample j is written to ``fout[j - j0]``.  Scratch: ``ring``
    (LOOKAHEAD N), ``ring_x`` (2 LOOKAHEAD), ``ring_c`` (LOOKAHEAD), ``suf`` (N R + R + 1),
    ``rows`` (N).

    Samples are drawn ``LOOKAHEAD`` ahead and their factor and gradient rows prefetched, and
    the memory that drawing them reads (the nonzero's coordinates and value, the bucket and
    linear indices that a zero is looked up in) is prefetched two and three ``LOOKAHEAD``
    ahead (sktf_gcp_touch_ahead), so that the memory latency of the random rows overlaps the
    arithmetic of earlier samples."""
    cdef int N = S.nmodes, k, slot
    cdef int64_t j
    cdef Py_ssize_t r
    cdef double f, t
    cdef double* g
    cdef double* ring_w = ring_x + LOOKAHEAD
    cdef double* pre = suf + N * R
    cdef int64_t* idx
    # prefetch hints for drawing samples (sktf_gcp_sample.h; they must be called from the
    # loop itself, see there)
    cdef bint touch = _prefetches(S, R)
    if S.xn < 0 and touch:
        sktf_gcp_touch_first(&S.g, S.key, j0, j1, LOOKAHEAD)
    for j in range(j0, min(j0 + LOOKAHEAD, j1)):
        slot = <int> (j - j0)
        ring_x[slot] = _sample(S, j, ring + slot * N, &ring_w[slot], &ring_c[slot])
        if touch:
            _prefetch_rows(fac, grad, active, ring + slot * N, N, R)
    for j in range(j0, j1):
        if S.xn < 0 and touch:
            sktf_gcp_touch_ahead(&S.g, S.key, j, j1, LOOKAHEAD)
        slot = <int> ((j - j0) % LOOKAHEAD)
        idx = ring + slot * N
        f = _terms(S, j, ring_x[slot], ring_w[slot], ring_c[slot], code, param, lam, fac, N,
                   R, idx, rows, suf, pre, want_loss)
        if fout != NULL:
            fout[j - j0] = f
        else:
            total[0] = total[0] + f
        for k in range(N):
            if active[k]:
                g = grad[k] + idx[k] * R
                for r in range(R):
                    t = pre[r] * suf[k * R + r]
                    g[r] = g[r] + t
            if k < N - 1:
                for r in range(R):
                    pre[r] *= rows[k][r]
        if j + LOOKAHEAD < j1:  # refill the slot with the sample LOOKAHEAD ahead
            ring_x[slot] = _sample(S, j + LOOKAHEAD, idx, &ring_w[slot], &ring_c[slot])
            if touch:
                _prefetch_rows(fac, grad, active, idx, N, R)


cdef double _gradient_serial(const Src* S, int code, double param, const double* lam,
                             double** fac, double** grad, const int8_t* active,
                             Py_ssize_t R, bint want_loss) except? -1.0:
    """One thread: every contribution goes straight into its gradient row, in sample order
    (:func:`_serial_range`; the same order, hence the same sums, as the multi-threaded
    version)."""
    cdef int N = S.nmodes
    cdef int64_t ns = _n_samples(S), j0
    cdef double total = 0.0
    cdef bint stopped = False
    cdef int64_t* ring = <int64_t*> malloc(LOOKAHEAD * N * sizeof(int64_t))
    cdef double* ring_x = <double*> malloc(2 * LOOKAHEAD * sizeof(double))
    cdef int* ring_c = <int*> malloc(LOOKAHEAD * sizeof(int))
    cdef double* suf = <double*> malloc((N * R + R + 1) * sizeof(double))
    cdef const double** rows = <const double**> malloc(N * sizeof(double*))
    if ring == NULL or ring_x == NULL or ring_c == NULL or suf == NULL or rows == NULL:
        free(ring); free(ring_x); free(ring_c); free(suf); free(<void*> rows)
        raise MemoryError()
    with nogil:
        j0 = 0
        while j0 < ns:  # in pieces, to see Ctrl-C in between
            _serial_range(S, j0, min(ns, j0 + SIGNAL_EVERY), code, param, lam, fac, grad,
                          active, R, want_loss, &total, NULL, ring, ring_x, ring_c, suf, rows)
            j0 += SIGNAL_EVERY
            if j0 < ns and _interrupted():
                stopped = True
                break
    free(ring); free(ring_x); free(ring_c); free(suf); free(<void*> rows)
    if stopped:
        _reraise()
    return total


cdef inline int _part_shift(int64_t rows) noexcept nogil:
    """Row ranges of a mode in the multi-threaded gradient: row i is in range ``i >> shift``,
    the smallest shift that makes at most ``MAX_PARTS`` ranges (fixed by the mode's size)."""
    cdef int s = 0
    while rows > 0 and ((rows - 1) >> s) >= MAX_PARTS:
        s += 1
    return s


cdef inline int64_t _n_parts(int64_t rows) noexcept nogil:
    """Number of row ranges of a mode (see :func:`_part_shift`)."""
    if rows <= 0:
        return 0
    return ((rows - 1) >> _part_shift(rows)) + 1


cdef enum:
    SOLVER_SGD = 0
    SOLVER_ADAGRAD = 1
    SOLVER_ADAM = 2

cdef inline void _opt_chunk(int solver, double* u, const double* g, double* s1, double* s2,
                            int64_t n, double lr, double beta1, double beta2, double a,
                            double e, double lower) noexcept nogil:
    if solver == SOLVER_ADAM:
        sktf_adam_chunk(u, g, s1, s2, n, beta1, beta2, a, e, lower)
    elif solver == SOLVER_ADAGRAD:
        sktf_adagrad_chunk(u, g, s1, n, lr, e, lower)
    else:
        sktf_sgd_chunk(u, g, n, lr, lower)


cdef inline void _opt_chunk_to(int solver, double* out, const double* u, const double* g,
                               double* s1, double* s2, int64_t n, double lr, double beta1,
                               double beta2, double a, double e, double lower) noexcept nogil:
    """:func:`_opt_chunk` into ``out`` (``u`` left as it is)."""
    if solver == SOLVER_ADAM:
        sktf_adam_chunk_to(out, u, g, s1, s2, n, beta1, beta2, a, e, lower)
    elif solver == SOLVER_ADAGRAD:
        sktf_adagrad_chunk_to(out, u, g, s1, n, lr, e, lower)
    else:
        sktf_sgd_chunk_to(out, u, g, n, lr, lower)


cdef struct OptRule:
    # the optimiser of the fused steps (see _fused_parallel): its rule, moments, settings
    int solver
    double** m1                # Adam's first moments / AdaGrad's sums, per mode
    double** m2                # Adam's second moments, per mode
    double lr, beta1, beta2, eps, lower
    int64_t t_first            # the step counter of the first step


cdef struct OptStep:
    # one optimiser step fused into the multi-threaded gradient (see _fused_parallel)
    int solver
    double** m1                # Adam's first moments / AdaGrad's sums, per mode
    double** m2                # Adam's second moments, per mode
    double lr, beta1, beta2
    double a, e                # step and epsilon as _opt_apply computes them for this step
    double lower


cdef inline void _opt_set(OptStep* o, const OptRule* r, double t) noexcept nogil:
    """The constants of step ``t`` of the optimiser ``r``, as :func:`_opt_apply` computes
    them."""
    cdef double bc1, bc2
    o.solver = r.solver
    o.m1 = r.m1
    o.m2 = r.m2
    o.lr = r.lr
    o.beta1 = r.beta1
    o.beta2 = r.beta2
    o.a = r.lr
    o.e = r.eps
    o.lower = r.lower
    if r.solver == SOLVER_ADAM:
        bc1 = 1.0 - pow(r.beta1, t)
        bc2 = 1.0 - pow(r.beta2, t)
        o.a = r.lr * sqrt(bc2) / bc1
        o.e = r.eps * sqrt(bc2)


cdef inline int64_t _part_start(int64_t p, int64_t rows) noexcept nogil:
    """First row of row range ``p`` of a mode of ``rows`` rows (``p`` up to the number of
    ranges, whose start is ``rows``)."""
    cdef int64_t lo = p << _part_shift(rows)
    return lo if lo < rows else rows


cdef void _stored_chunk(const Src* S, int64_t b0, int64_t c0, int64_t c1, int64_t ci,
                        int code, double param, const double* lam, double** fac,
                        const int8_t* active, const int64_t* shape, Py_ssize_t R,
                        bint want_loss, int64_t block, double* yval, double* fval,
                        int64_t* keys, int64_t* srows, double* sy, int64_t* boff,
                        int64_t* ring, double* ring_x, int* ring_c, double* suf,
                        const double** rows, int64_t* cnt) noexcept nogil:
    """Step 1 of :func:`_fused_parallel` on the block's samples ``c0 .. c1 - 1`` (chunk
    ``ci``): draw them (``LOOKAHEAD`` ahead, their factor rows prefetched), form model values,
    weighted derivatives (``yval``) and loss terms (``fval``), and for every active mode store
    the samples' rows and derivatives sorted by row range (a stable counting sort) from
    position ``k block + c0`` of ``srows`` / ``sy``, the ranges' offsets in ``boff``."""
    cdef int N = S.nmodes, k, l, slot, sh
    cdef int64_t jj, p, i, nparts, pos0
    cdef int64_t* idx
    cdef int64_t* off
    cdef double* pre = suf + N * R
    if S.xn < 0:
        sktf_gcp_touch_first(&S.g, S.key, b0 + c0, b0 + c1, LOOKAHEAD)
    for jj in range(c0, min(c0 + LOOKAHEAD, c1)):
        slot = <int> (jj - c0)
        ring_x[slot] = _sample(S, b0 + jj, ring + slot * N, &ring_x[LOOKAHEAD + slot],
                               &ring_c[slot])
        _prefetch_factor_rows(fac, ring + slot * N, N, R)
    for jj in range(c0, c1):
        if S.xn < 0:
            sktf_gcp_touch_ahead(&S.g, S.key, b0 + jj, b0 + c1, LOOKAHEAD)
        slot = <int> ((jj - c0) % LOOKAHEAD)
        idx = ring + slot * N
        fval[jj] = _terms(S, b0 + jj, ring_x[slot], ring_x[LOOKAHEAD + slot], ring_c[slot],
                          code, param, lam, fac, N, R, idx, rows, suf, pre, want_loss,
                          &yval[jj])
        for k in range(N):
            keys[jj * N + k] = idx[k]
        if jj + LOOKAHEAD < c1:  # refill the slot LOOKAHEAD samples ahead
            ring_x[slot] = _sample(S, b0 + jj + LOOKAHEAD, idx, &ring_x[LOOKAHEAD + slot],
                                   &ring_c[slot])
            _prefetch_factor_rows(fac, idx, N, R)
    for k in range(N):
        if not active[k]:
            continue
        nparts = _n_parts(shape[k])
        sh = _part_shift(shape[k])
        off = boff + (ci * N + k) * (MAX_PARTS + 1)
        pos0 = k * block + c0
        for p in range(nparts + 1):
            cnt[p] = 0
        for jj in range(c0, c1):
            cnt[(keys[jj * N + k] >> sh) + 1] += 1
        for p in range(nparts):
            cnt[p + 1] += cnt[p]
        for p in range(nparts + 1):
            off[p] = cnt[p]
        for jj in range(c0, c1):
            p = keys[jj * N + k] >> sh
            i = pos0 + cnt[p]
            for l in range(N):
                srows[i * N + l] = keys[jj * N + l]
            sy[i] = yval[jj]
            cnt[p] += 1


cdef inline int _task_mode(int64_t t, const int64_t* task_off) noexcept nogil:
    """The mode of task ``t`` of the row-range phase (tasks of mode k: task_off[k] onward)."""
    cdef int k = 0
    while t >= task_off[k + 1]:
        k = k + 1
    return k


cdef inline void _add_stored_range(int k, int64_t p, int64_t front, int64_t nchunks,
                                   const int64_t* boff, int N, int64_t block, double** grad,
                                   double** fac, const int64_t* srows, const double* sy,
                                   const double* lam, int64_t R) noexcept nogil:
    """Row range ``p`` of mode ``k``: the contributions of the samples the chunks ``front``
    to ``nchunks - 1`` stored for it, chunk by chunk, added into ``grad[k]``."""
    cdef int64_t cj, pos0
    cdef const int64_t* off
    for cj in range(front, nchunks):
        off = boff + (cj * N + k) * (MAX_PARTS + 1)
        pos0 = k * block + cj * PHASE1_CHUNK
        sktf_gcp_add_stored(grad[k], fac, srows, sy, pos0 + off[p], pos0 + off[p + 1], N, k,
                            lam, R)


cdef inline void _add_loss_terms(double* total, const double* fval,
                                 int64_t n) noexcept nogil:
    """``total[0] += fval[j]`` for j = 0 .. n - 1, in order."""
    cdef int64_t j
    for j in range(n):
        total[0] += fval[j]


cdef int64_t _fused_parallel(const Src* S0, const uint64_t* seed, int64_t first_draw,
                             int64_t n_steps, int code, double param, const double* lam,
                             double** fac, double** grad, const int8_t* active,
                             const int64_t* shape, Py_ssize_t R, int64_t block,
                             bint want_loss, double* total, int num_threads, double* work,
                             const OptRule* rule, bint in_place,
                             bint* interrupted) except -1:
    """The multi-threaded gradient of every active mode, and with ``rule`` the optimiser
    step after it, for ``n_steps`` steps in one parallel region: the one parallel driver of
    :func:`gradient` and :func:`run_steps`.

    Step ``s`` draws its samples at key ``step_key(seed[0], first_draw + s + 1)``, or, when
    ``seed`` is NULL, at ``S0``'s own key (the single step of :func:`gradient`).  A step's
    samples go in blocks of ``block`` (``work`` holds ``workspace_size(N, R, block)`` words,
    kept by the caller between calls: fresh pages would fault on every step; the gradient
    arrays need not be zeroed), and each block's samples in chunks of PHASE1_CHUNK (the last
    one shorter):

    1. the first thread takes chunks from the front (sktf_gcp_claim_front, larger pieces
       while many are left) and adds their samples' contributions straight into the gradient
       rows, in sample order, as the serial version does (in the first block of a step it
       zeroes the gradient first), while the other threads take chunks from the back
       (sktf_gcp_claim_back), one at a time, until they meet, and store them
       (:func:`_stored_chunk`: rows and weighted derivatives sorted by row range);
    2. after a barrier, one task per (mode, row range) forms the contributions of the stored
       samples of its rows again from the derivatives and factor rows (the products of the
       serial version, in its order: sktf_gcp_add_stored) and adds them, chunk by chunk and
       in sample order within each, after the first thread's.  Every gradient row is thus the
       sum of its contributions in increasing sample order, as in the serial version,
       wherever the threads met (a row belongs to one range: no conflicts, no atomics, the
       same bits for any thread count).  After the last block of a step, with ``rule``, the
       same task applies the optimiser step to the range's rows, written into the other of
       two copies of the factors: step s reads copy s % 2 and writes copy (s + 1) % 2 (the
       user's arrays are copy 0; at the end the last step's factors are copied there), so a
       range's rows can be updated while other ranges still read the factors of the step;
    3. with ``rule`` and ``in_place`` instead (one step: no second copy to allocate), after
       a barrier every thread applies the optimiser step to its share of the rows of every
       active mode, in place.

    The first thread's chunks cost what the serial version costs; the others pay for storing,
    sorting and re-forming their contributions.  A thread that the operating system holds
    back delays only the chunk it holds: the others take the rest, from either end.  Two
    barriers per block (after the samples, after the ranges) and no wake-up of sleeping
    threads between blocks or steps.  Unless ``total`` is NULL the first thread adds the
    samples' loss terms (``want_loss``: computed, else 0) into ``total[0]`` in sample order.  Pending signals are handled by the first
    thread every ``SIGNAL_EVERY`` samples (not after every step: taking the interpreter's
    lock there cost about a fifth of a small step)
    (``interrupted[0]`` says that a handler raised; its exception is left set).  Returns the
    steps done."""
    cdef int N = S0.nmodes
    cdef int64_t ns = _n_samples(S0)
    cdef int64_t nblocks = (ns + block - 1) // block
    cdef bint two_copies = rule != NULL and not in_place
    cdef double* yval = work                       # weighted derivative of each sample
    cdef double* fval = yval + block               # loss term of each sample
    cdef int64_t* keys = <int64_t*> (fval + block)  # rows of each sample
    # the stored samples of chunk c and active mode k, sorted by row range: their rows
    # (N per sample) and weighted derivatives, from position (k block + c PHASE1_CHUNK) on
    cdef int64_t* srows = keys + block * N
    cdef double* sy = <double*> (srows + block * N * N)
    cdef int64_t* boff = <int64_t*> (sy + block * N)  # where each range starts, per chunk, mode
    cdef int64_t* task_off = <int64_t*> malloc((N + 1) * sizeof(int64_t))
    cdef double** copy1 = <double**> calloc(N, sizeof(double*))
    cdef double*** copies = <double***> malloc(2 * sizeof(double**))
    # shared between the threads: claims of blocks r % 2 (r counting the blocks of every
    # step), [steps done, interrupted, samples since the last check for signals]
    cdef sktf_gcp_claims* claims = <sktf_gcp_claims*> malloc(2 * sizeof(sktf_gcp_claims))
    cdef int64_t* shared = <int64_t*> calloc(3, sizeof(int64_t))
    # (variables of the parallel block are initialised here: Cython copies them in)
    cdef int64_t ntasks, t, p, nc = 0, c = 0, lo, hi, step = 0, bi = 0, b0 = 0, nb = 0
    cdef int64_t nchunks = 0, nb_next = 0, done, lo3 = 0, hi3 = 0
    cdef int k, me = 0, nteam = 1, k1 = 0
    cdef bint last = False
    cdef Src Sl
    cdef OptStep o
    cdef double** cur = NULL
    cdef double** nxt = NULL
    cdef sktf_gcp_claims* cl = NULL
    # thread scratch
    cdef int64_t* ring = NULL
    cdef double* ring_x = NULL
    cdef int* ring_c = NULL
    cdef int64_t* cnt = NULL
    cdef double* suf = NULL
    cdef const double** rows = NULL
    try:
        if (task_off == NULL or copy1 == NULL or copies == NULL or claims == NULL
                or shared == NULL):
            raise MemoryError()
        ntasks = 0
        for k in range(N):
            task_off[k] = ntasks
            copy1[k] = fac[k]
            if active[k] and shape[k] > 0:
                ntasks += _n_parts(shape[k])
                if two_copies:
                    copy1[k] = <double*> malloc(shape[k] * R * sizeof(double))
                    if copy1[k] == NULL:
                        raise MemoryError()
        task_off[N] = ntasks
        copies[0] = fac
        copies[1] = copy1
        claims[0].front = 0
        claims[0].back = (min(block, ns) + PHASE1_CHUNK - 1) // PHASE1_CHUNK
        with nogil, parallel(num_threads=num_threads):
            me = threadid()
            nteam = sktf_omp_team_size()
            ring = <int64_t*> malloc(LOOKAHEAD * N * sizeof(int64_t))
            ring_x = <double*> malloc(2 * LOOKAHEAD * sizeof(double))
            ring_c = <int*> malloc(LOOKAHEAD * sizeof(int))
            suf = <double*> malloc((N * R + R + 1) * sizeof(double))
            rows = <const double**> malloc(N * sizeof(double*))
            cnt = <int64_t*> malloc((MAX_PARTS + 1) * sizeof(int64_t))
            for step in range(n_steps):
                cur = copies[step % 2]
                nxt = copies[(step + 1) % 2]
                Sl = S0[0]
                if seed != NULL:
                    Sl.key = sktf_mix_seed(seed[0], <uint64_t> (first_draw + step + 1))
                if rule != NULL:
                    _opt_set(&o, rule, <double> (rule.t_first + step))
                for bi in range(nblocks):
                    b0 = bi * block
                    nb = min(block, ns - b0)
                    nchunks = (nb + PHASE1_CHUNK - 1) // PHASE1_CHUNK
                    last = bi == nblocks - 1
                    cl = claims + (step * nblocks + bi) % 2
                    # 1. the first thread from the front, straight into the gradient; the
                    #    others from the back, stored
                    if me == 0:
                        if bi == 0:
                            for k1 in range(N):
                                if active[k1] and shape[k1] > 0:
                                    memset(grad[k1], 0, shape[k1] * R * sizeof(double))
                        while True:
                            nc = sktf_gcp_claim_front(cl, 2 * nteam, &c)
                            if nc == 0:
                                break
                            _serial_range(&Sl, b0 + c * PHASE1_CHUNK,
                                          b0 + min(nb, (c + nc) * PHASE1_CHUNK), code, param,
                                          lam, cur, grad, active, R, want_loss, NULL,
                                          fval + c * PHASE1_CHUNK, ring, ring_x, ring_c, suf,
                                          rows)
                    else:
                        while True:
                            c = sktf_gcp_claim_back(cl)
                            if c < 0:
                                break
                            _stored_chunk(&Sl, b0, c * PHASE1_CHUNK,
                                          min(nb, (c + 1) * PHASE1_CHUNK), c, code, param, lam,
                                          cur, active, shape, R, want_loss, block, yval, fval,
                                          keys, srows, sy, boff, ring, ring_x, ring_c, suf,
                                          rows, cnt)
                    sktf_omp_barrier()
                    if me == 0:  # the claims of the next block (this block's other copy)
                        nb_next = min(block, ns) if last else min(block, ns - b0 - block)
                        claims[(step * nblocks + bi + 1) % 2].front = 0
                        claims[(step * nblocks + bi + 1) % 2].back = \
                            (nb_next + PHASE1_CHUNK - 1) // PHASE1_CHUNK
                    # 2. one task per (mode, row range): the contributions of the stored
                    #    samples of its rows, chunk by chunk, each formed again from y and
                    #    the factor rows with the products of the serial version; after the
                    #    step's last block, the optimiser step on the range's rows
                    for t in prange(ntasks, schedule='dynamic'):
                        k = _task_mode(t, task_off)
                        p = t - task_off[k]
                        _add_stored_range(k, p, cl.front, nchunks, boff, N, block, grad, cur,
                                          srows, sy, lam, R)
                        if two_copies and last:
                            lo = _part_start(p, shape[k]) * R
                            hi = _part_start(p + 1, shape[k]) * R
                            _opt_chunk_to(o.solver, nxt[k] + lo, cur[k] + lo, grad[k] + lo,
                                          o.m1[k] + lo if o.m1[k] != NULL else NULL,
                                          o.m2[k] + lo if o.m2[k] != NULL else NULL, hi - lo,
                                          o.lr, o.beta1, o.beta2, o.a, o.e, o.lower)
                    if rule != NULL and in_place and last:
                        # 3. the optimiser step, every thread on its share of each mode's rows
                        sktf_omp_barrier()
                        for k1 in range(N):
                            if not active[k1] or shape[k1] == 0:
                                continue
                            lo3 = (shape[k1] * me) // nteam * R
                            hi3 = (shape[k1] * (me + 1)) // nteam * R
                            _opt_chunk(o.solver, cur[k1] + lo3, grad[k1] + lo3,
                                       o.m1[k1] + lo3 if o.m1[k1] != NULL else NULL,
                                       o.m2[k1] + lo3 if o.m2[k1] != NULL else NULL,
                                       hi3 - lo3, o.lr, o.beta1, o.beta2, o.a, o.e, o.lower)
                    if me == 0:
                        if total != NULL:
                            _add_loss_terms(total, fval, nb)
                        if last:
                            shared[0] = step + 1
                        shared[2] += nb
                        if (shared[2] >= SIGNAL_EVERY
                                and not (last and step + 1 == n_steps)):
                            shared[2] = 0
                            with gil:
                                if _check_signals() != 0:
                                    shared[1] = 1
                    sktf_omp_barrier()
                    if shared[1]:
                        break
                if shared[1]:
                    break
            free(ring)
            free(ring_x)
            free(ring_c)
            free(suf)
            free(<void*> rows)
            free(cnt)
        done = shared[0]
        interrupted[0] = shared[1] != 0
        if two_copies and done % 2 == 1:  # the last step's factors are in copy 1
            for k in range(N):
                if copy1[k] != fac[k]:
                    memcpy(fac[k], copy1[k], shape[k] * R * sizeof(double))
        return done
    finally:
        if copy1 != NULL:
            for k in range(N):
                if copy1[k] != fac[k]:
                    free(copy1[k])
        free(copy1); free(<void*> copies); free(task_off); free(claims); free(shared)


cdef int _pointers(list arrays, double** out) except -1:
    cdef Py_ssize_t k
    cdef double[:, ::1] F
    for k in range(len(arrays)):
        F = arrays[k]
        out[k] = &F[0, 0] if F.shape[0] > 0 and F.shape[1] > 0 else NULL
    return 0


cdef int _const_pointers(list arrays, double** out) except -1:
    cdef Py_ssize_t k
    cdef const double[:, ::1] F
    for k in range(len(arrays)):
        F = arrays[k]
        out[k] = <double*> &F[0, 0] if F.shape[0] > 0 and F.shape[1] > 0 else NULL
    return 0


def workspace_size(int nmodes, Py_ssize_t R, int64_t block):
    """Words (8 bytes) of the workspace of the multi-threaded gradient for ``block`` samples."""
    cdef int64_t tasks = (block + PHASE1_CHUNK - 1) // PHASE1_CHUNK
    return int(2 * block + (2 + nmodes) * block * nmodes + tasks * nmodes * (MAX_PARTS + 1))


def default_block(int nmodes, Py_ssize_t R):
    """Samples per block of the fused gradient (fixed, independent of the thread count)."""
    cdef int64_t b = (1 << 22) // max(1, nmodes * R)
    return int(max(1024, min(b, 65536)))


def gradient(GcpSampler sampler, uint64_t key, int code, double param,
             const double[::1] weights, list factors, list grads, const int8_t[::1] active,
             bint want_loss=True, int num_threads=1, object xsubs=None, object xvals=None,
             object xw=None, object xcorr=None, object xy=None, int64_t block=0,
             object work=None, int64_t work_per_thread=0):
    """Fused sampled GCP gradient of every active mode (see the module docstring).

    Samples come from ``sampler`` at step key ``key``, or, when ``xsubs`` is given, from the
    explicit sample (``xsubs``, ``xvals``, weights ``xw``, correction flags ``xcorr``).  With
    ``xy`` (explicit samples only) the weighted derivatives are taken from it instead of the
    loss ``code`` (user-defined losses).  ``grads[k]`` (I_k x R) is overwritten for every mode
    with ``active[k]``; returns the sampled loss Σ_j w_j (f(x_j, m_j) − corr_j f(0, m_j)) when
    ``want_loss``, else 0.  ``work``: optional float64 workspace of at least
    :func:`workspace_size` words for the block used (reused between calls).
    ``work_per_thread``: units of work (samples x (modes x rank + SAMPLE_WORK)) per thread
    (default ``SERIAL_WORK``; tests make it small to run the multi-threaded path on small
    samples).
    """
    cdef int N = len(factors)
    cdef Src S
    cdef Py_ssize_t R = weights.shape[0]
    cdef double** fac = <double**> malloc(N * sizeof(double*))
    cdef double** grad = <double**> malloc(N * sizeof(double*))
    cdef int64_t* shape = <int64_t*> malloc(N * sizeof(int64_t))
    cdef int k
    cdef double[::1] wv
    cdef double total = 0.0
    cdef bint interrupted = False
    if fac == NULL or grad == NULL or shape == NULL:
        free(fac); free(grad); free(shape)
        raise MemoryError()
    try:
        if xsubs is not None:
            _explicit_src(&S, N, xsubs, xvals, xw, xcorr, xy)
        else:
            S = sampler.src
            S.key = key
        _const_pointers(factors, fac)
        _pointers(grads, grad)
        for k in range(N):
            shape[k] = (<object> grads[k]).shape[0]
        if block <= 0:
            block = default_block(N, R)
        block = max(1, min(block, _n_samples(&S)))
        # one thread per SERIAL_WORK units (below: not worth waking threads; the result
        # is the same for any count)
        num_threads = _threads_for(_n_samples(&S) * (N * R + SAMPLE_WORK), num_threads,
                                   work_per_thread)
        if R == 0 or _n_samples(&S) == 0:
            for k in range(N):
                if active[k]:
                    grads[k][...] = 0
            return 0.0
        if num_threads == 1:
            for k in range(N):
                if active[k] and shape[k] > 0:
                    memset(grad[k], 0, shape[k] * R * sizeof(double))
            return _gradient_serial(&S, code, param, &weights[0], fac, grad, &active[0], R,
                                    want_loss and S.xy == NULL)
        need = workspace_size(N, R, block)
        if work is None or (<object> work).shape[0] < need:
            work = np.empty(need)
        wv = work
        _fused_parallel(&S, NULL, 0, 1, code, param, &weights[0], fac, grad, &active[0], shape,
                        R, block, want_loss and S.xy == NULL, &total, num_threads, &wv[0],
                        NULL, False, &interrupted)
        if interrupted:
            _reraise()
        return total
    finally:
        free(fac); free(grad); free(shape)


def loss_sum(GcpSampler sampler, uint64_t key, int code, double param,
             const double[::1] weights, list factors, int num_threads=1, object xsubs=None,
             object xvals=None, object xw=None, object xcorr=None):
    """Σ_j w_j (f(x_j, m_j) − corr_j f(0, m_j)) over a sample (drawn or explicit).

    Partial sums over fixed chunks of samples are added in chunk order: the result does not
    depend on the thread count.
    """
    cdef int N = len(factors)
    cdef Src S
    cdef Py_ssize_t R = weights.shape[0]
    cdef double** fac = <double**> malloc(N * sizeof(double*))
    cdef int64_t ns, nchunks, ci, j, j0, j1, c0, c1
    cdef int64_t piece = SIGNAL_EVERY // LOSS_CHUNK
    cdef bint stopped = False
    cdef double* part = NULL
    cdef double total = 0.0, x, w, m, f, pr
    cdef int64_t* idx = NULL
    cdef double* prod = NULL
    cdef int k, corr
    cdef Py_ssize_t r
    cdef const double* lam = &weights[0] if R > 0 else NULL
    if fac == NULL:
        raise MemoryError()
    try:
        if xsubs is not None:
            _explicit_src(&S, N, xsubs, xvals, xw, xcorr, None)
        else:
            S = sampler.src
            S.key = key
        _const_pointers(factors, fac)
        ns = _n_samples(&S)
        if ns == 0:
            return 0.0
        nchunks = (ns + LOSS_CHUNK - 1) // LOSS_CHUNK
        num_threads = _threads_for(ns * N * R, num_threads)
        part = <double*> malloc(nchunks * sizeof(double))
        if part == NULL:
            raise MemoryError()
        with nogil:
            c0 = 0
            while c0 < nchunks:  # in pieces, to see Ctrl-C in between
                c1 = min(nchunks, c0 + piece)
                with parallel(num_threads=num_threads):
                    idx = <int64_t*> malloc(N * sizeof(int64_t))
                    prod = <double*> malloc((R + 1) * sizeof(double))
                    for ci in prange(c0, c1, schedule='dynamic'):
                        j0 = ci * LOSS_CHUNK
                        j1 = min(ns, j0 + LOSS_CHUNK)
                        pr = 0.0
                        if S.xn >= 0:  # the factor rows of the first samples
                            for j in range(j0, min(j1, j0 + LOOKAHEAD)):
                                _prefetch_factor_rows(fac, S.xsubs + j * N, N, R)
                        for j in range(j0, j1):
                            if S.xn >= 0 and j + LOOKAHEAD < j1:  # ... and those ahead
                                _prefetch_factor_rows(fac, S.xsubs + (j + LOOKAHEAD) * N, N, R)
                            w = 0.0  # assigned here so that it is private to the thread
                            corr = 0
                            x = _sample(&S, j, idx, &w, &corr)
                            for r in range(R):
                                prod[r] = lam[r]
                            for k in range(N):
                                for r in range(R):
                                    prod[r] = prod[r] * fac[k][idx[k] * R + r]
                            m = 0.0
                            for r in range(R):
                                m = m + prod[r]
                            f = _loss_value(code, param, x, m)
                            if corr:
                                f = f - _loss_value(code, param, 0.0, m)
                            pr = pr + w * f
                        part[ci] = pr
                    free(idx)
                    free(prod)
                if c1 < nchunks and _interrupted():
                    stopped = True
                    break
                c0 = c1
        if stopped:
            _reraise()
        for ci in range(nchunks):
            total += part[ci]
        return total
    finally:
        free(fac)
        free(part)


# ---------------------------------------------------------------------------- optimiser steps
cdef enum:
    STEP_CHUNK = 4096


def adam_step(double[::1] u, const double[::1] g, double[::1] mom, double[::1] var, double lr,
              double beta1, double beta2, double eps, double bc1, double bc2, double lower,
              int num_threads=1):
    """Adam: mom, var ← moments; u ← max(u − lr (mom/bc1) / (√(var/bc2) + eps), lower).

    Computed as ``u − (lr √bc2 / bc1) mom / (√var + eps √bc2)`` (the same quantity), with one
    division and one square root per entry.
    """
    cdef Py_ssize_t n = u.shape[0], c, i0, nchunks = (n + STEP_CHUNK - 1) // STEP_CHUNK
    cdef double a = lr * sqrt(bc2) / bc1, e = eps * sqrt(bc2)
    if n == 0:
        return
    if n < SERIAL_WORK:
        num_threads = 1
    with nogil:
        for c in prange(nchunks, schedule='dynamic', num_threads=num_threads):
            i0 = c * STEP_CHUNK
            sktf_adam_chunk(&u[i0], &g[i0], &mom[i0], &var[i0], min(STEP_CHUNK, n - i0),
                            beta1, beta2, a, e, lower)


def adagrad_step(double[::1] u, const double[::1] g, double[::1] acc, double lr, double eps,
                 double lower, int num_threads=1):
    """AdaGrad: acc += g²; u ← max(u − lr g / (√acc + eps), lower)."""
    cdef Py_ssize_t n = u.shape[0], c, i0, nchunks = (n + STEP_CHUNK - 1) // STEP_CHUNK
    if n == 0:
        return
    if n < SERIAL_WORK:
        num_threads = 1
    with nogil:
        for c in prange(nchunks, schedule='dynamic', num_threads=num_threads):
            i0 = c * STEP_CHUNK
            sktf_adagrad_chunk(&u[i0], &g[i0], &acc[i0], min(STEP_CHUNK, n - i0), lr, eps,
                               lower)


def sgd_step(double[::1] u, const double[::1] g, double lr, double lower, int num_threads=1):
    """u ← max(u − lr g, lower)."""
    cdef Py_ssize_t n = u.shape[0], c, i0, nchunks = (n + STEP_CHUNK - 1) // STEP_CHUNK
    if n == 0:
        return
    if n < SERIAL_WORK:
        num_threads = 1
    with nogil:
        for c in prange(nchunks, schedule='dynamic', num_threads=num_threads):
            i0 = c * STEP_CHUNK
            sktf_sgd_chunk(&u[i0], &g[i0], min(STEP_CHUNK, n - i0), lr, lower)


# ---------------------------------------------------------------------------- fused steps
#: Codes of the stochastic solvers for :func:`run_steps`.
SOLVER_CODES = {"sgd": SOLVER_SGD, "adagrad": SOLVER_ADAGRAD, "adam": SOLVER_ADAM}


cdef inline int _threads_for(int64_t work, int num_threads,
                             int64_t unit=SERIAL_WORK) noexcept nogil:
    """Threads for a call doing ``work`` units (samples x modes x rank, or entries): one per
    ``unit`` (``SERIAL_WORK``) units, at most ``num_threads``.  Every thread then has a share
    long enough to be worth waking it, and a region does not wait at its barrier for threads
    that had next to nothing to do (on a busy machine each of them may first wait for a
    core)."""
    cdef int64_t t = work // (unit if unit > 0 else SERIAL_WORK)
    if t < 1:
        return 1
    return <int> t if t < num_threads else num_threads


cdef void _opt_apply(int solver, double* u, const double* g, double* s1, double* s2,
                     int64_t n, double lr, double beta1, double beta2, double eps, double t,
                     double lower, int num_threads) noexcept nogil:
    """One optimiser step on ``n`` entries, as :func:`adam_step` / :func:`adagrad_step` /
    :func:`sgd_step` compute it (same expressions, same bits)."""
    cdef int64_t c, i0, nchunks = (n + STEP_CHUNK - 1) // STEP_CHUNK
    cdef double a = lr, e = eps, bc1, bc2
    if n <= 0:
        return
    if solver == SOLVER_ADAM:
        bc1 = 1.0 - pow(beta1, t)
        bc2 = 1.0 - pow(beta2, t)
        a = lr * sqrt(bc2) / bc1
        e = eps * sqrt(bc2)
    num_threads = _threads_for(n, num_threads)
    if num_threads == 1:
        for c in range(nchunks):
            i0 = c * STEP_CHUNK
            _opt_chunk(solver, u + i0, g + i0, s1 + i0 if s1 != NULL else NULL,
                       s2 + i0 if s2 != NULL else NULL, min(STEP_CHUNK, n - i0), lr, beta1,
                       beta2, a, e, lower)
        return
    for c in prange(nchunks, schedule='dynamic', num_threads=num_threads):
        i0 = c * STEP_CHUNK
        _opt_chunk(solver, u + i0, g + i0, s1 + i0 if s1 != NULL else NULL,
                   s2 + i0 if s2 != NULL else NULL, min(STEP_CHUNK, n - i0), lr, beta1,
                   beta2, a, e, lower)


# ---------------------------------------------------------------------------- drawn ahead
#: Most samples a step may have for the serial loop of steps to draw them on a second thread
#: (the ring holds at least two steps' samples).
AHEAD_MAX_SAMPLES = 1 << 16


# steps of the last _steps_drawn_ahead of the process computed from the drawing thread's
# slots, and drawn by the computing thread itself (see ahead_stats)
cdef int64_t _AHEAD_STATS[2]


def ahead_stats():
    """``(from_slots, drawn_here)`` of the last loop of steps with a drawing thread in this
    process (:func:`run_steps` with ``draw_ahead``): the steps whose samples the drawing
    thread had ready, and those the computing thread drew itself (for tests and
    benchmarks)."""
    return int(_AHEAD_STATS[0]), int(_AHEAD_STATS[1])


cdef struct Ahead:
    # what the computing thread and the drawing thread of _steps_drawn_ahead share
    Src src                    # the sampler (its key set per step)
    uint64_t seed
    int64_t first_draw, n_steps, ns, nslots
    int64_t* subs              # per slot: ns N coordinates
    double* x                  # per slot: ns data values
    double* w                  # per slot: ns weights
    int8_t* corr               # per slot: ns correction flags
    int64_t* flags             # FLAG_STRIDE words apart: ready of each slot, consumed, stop
    Py_ssize_t R
    int64_t done               # steps done (set by the computing thread; -1: no memory)
    int64_t here               # of which drawn by the computing thread


cdef inline int64_t _ahead_slots(int64_t ns, int N) noexcept nogil:
    """Slots of the ring: about AHEAD_BYTES of samples, at least 2, at most AHEAD_MAX_SLOTS."""
    cdef int64_t per = ns * (8 * N + 17)
    cdef int64_t n = AHEAD_BYTES // (per if per > 0 else 1)
    if n < 2:
        return 2
    return n if n < AHEAD_MAX_SLOTS else AHEAD_MAX_SLOTS


cdef void _ahead_draw(Ahead* A) noexcept nogil:
    """The drawing thread: the samples of the steps after the one being computed, into their
    slots of the ring (slot s % nslots for step s), as far ahead as the ring allows; a step
    the computing thread has reached is skipped (it draws that one itself).  Returns when
    every step is drawn or ``stop`` is set."""
    cdef Src S = A.src
    cdef int N = S.nmodes
    cdef int64_t s = 0, c, j, slot, ns = A.ns
    cdef int k
    cdef bint resting = False
    cdef bint touch = _prefetches(&S, A.R)
    while True:
        if sktf_load_acquire(A.flags + (A.nslots + 1) * FLAG_STRIDE):
            return
        c = sktf_load_acquire(A.flags + A.nslots * FLAG_STRIDE)   # steps consumed
        if s <= c:      # step c is being computed (its slot was looked at): the next one
            s = c + 1
        if s >= A.n_steps:
            return
        # a full ring: sleep until half of it is free again (few wake-ups; the ring holds
        # enough steps for the computing thread meanwhile)
        if s >= c + A.nslots - (A.nslots // 2 if resting else 0):
            resting = True
            sktf_nap()
            continue
        resting = False
        slot = s % A.nslots
        S.key = sktf_mix_seed(A.seed, <uint64_t> (A.first_draw + s + 1))
        if touch:
            sktf_gcp_touch_first(&S.g, S.key, 0, ns, LOOKAHEAD)
        for j in range(ns):
            if touch:
                sktf_gcp_touch_ahead(&S.g, S.key, j, ns, LOOKAHEAD)
            k = 0
            A.x[slot * ns + j] = sktf_gcp_sample(&S.g, S.key, j, A.subs + (slot * ns + j) * N,
                                                 &A.w[slot * ns + j], &k)
            A.corr[slot * ns + j] = <int8_t> k
        sktf_store_release(A.flags + slot * FLAG_STRIDE, s)
        s += 1


cdef void _ahead_compute(Ahead* A, int code, double param, const double* lam,
                         double** fac, double** grad, const int8_t* active,
                         const int64_t* shape, const OptRule* rule,
                         bint* interrupted) noexcept nogil:
    """The computing thread: the steps in order, as the serial loop of :func:`run_steps`
    computes them, each from the samples the drawing thread left in its slot when they are
    there, else drawn here (the same samples: they depend on the step key and their number
    only).  Pending signals are handled every ``SIGNAL_EVERY`` samples (``interrupted``: a
    handler raised).  Leaves the steps done in ``A.done`` (-1: out of memory); sets
    ``stop``."""
    cdef Src E, Sl
    cdef int N = A.src.nmodes, k
    cdef int64_t s, slot, ns = A.ns, since = 0, done = 0, here = 0
    cdef Py_ssize_t R = A.R
    cdef double total = 0.0
    cdef int64_t* ring = <int64_t*> malloc(LOOKAHEAD * N * sizeof(int64_t))
    cdef double* ring_x = <double*> malloc(2 * LOOKAHEAD * sizeof(double))
    cdef int* ring_c = <int*> malloc(LOOKAHEAD * sizeof(int))
    cdef double* suf = <double*> malloc((N * R + R + 1) * sizeof(double))
    cdef const double** rows = <const double**> malloc(N * sizeof(double*))
    if ring != NULL and ring_x != NULL and ring_c != NULL and suf != NULL and rows != NULL:
        # the slots read as explicit samples (the same _sample, _terms and sums)
        E = A.src
        E.xn = ns
        E.xy = NULL
        for s in range(A.n_steps):
            slot = s % A.nslots
            for k in range(N):
                if active[k] and shape[k] > 0:
                    memset(grad[k], 0, shape[k] * R * sizeof(double))
            if sktf_load_acquire(A.flags + slot * FLAG_STRIDE) == s:
                E.xsubs = A.subs + slot * ns * N
                E.xvals = A.x + slot * ns
                E.xw = A.w + slot * ns
                E.xcorr = A.corr + slot * ns
                _serial_range(&E, 0, ns, code, param, lam, fac, grad, active, R, False,
                              &total, NULL, ring, ring_x, ring_c, suf, rows)
            else:
                here += 1
                Sl = A.src
                Sl.key = sktf_mix_seed(A.seed, <uint64_t> (A.first_draw + s + 1))
                _serial_range(&Sl, 0, ns, code, param, lam, fac, grad, active, R, False,
                              &total, NULL, ring, ring_x, ring_c, suf, rows)
            # the slot is read: the drawing thread may fill it again
            sktf_store_release(A.flags + A.nslots * FLAG_STRIDE, s + 1)
            for k in range(N):
                if active[k] and fac[k] != NULL:
                    _opt_apply(rule.solver, fac[k], grad[k], rule.m1[k], rule.m2[k],
                               shape[k] * R, rule.lr, rule.beta1, rule.beta2, rule.eps,
                               <double> (rule.t_first + s), rule.lower, 1)
            done = s + 1
            since += ns
            if since >= SIGNAL_EVERY and done < A.n_steps:
                since = 0
                if _interrupted():
                    interrupted[0] = True
                    break
    else:
        done = -1
    free(ring); free(ring_x); free(ring_c); free(suf); free(<void*> rows)
    A.done = done
    A.here = here
    sktf_store_release(A.flags + (A.nslots + 1) * FLAG_STRIDE, 1)


cdef int64_t _steps_drawn_ahead(const Src* S0, uint64_t seed, int64_t first_draw,
                                int64_t n_steps, int code, double param, const double* lam,
                                double** fac, double** grad, const int8_t* active,
                                const int64_t* shape, Py_ssize_t R, const OptRule* rule,
                                bint* interrupted) except -1:
    """The serial loop of steps of :func:`run_steps` with a second thread drawing the samples
    of the next steps meanwhile (``_ahead_draw``, into a ring of a few steps' samples),
    while the first computes the steps (``_ahead_compute``) exactly as the serial loop does:
    the same samples, sums in the same order, the same bits.  For steps too small to share
    between threads (barriers at every step would cost more than the shares save), whose
    drawing (random numbers, look-ups among the nonzeros) is a good part of their time.
    Nothing waits for the drawing thread: a step whose samples are not in their slot when the
    computing thread gets there is drawn by it (a drawing thread that the operating system
    holds back costs only its share).  The drawing thread sleeps while the ring is full,
    until half of it is free.  Returns the steps done."""
    cdef int N = S0.nmodes
    cdef Ahead A
    cdef int64_t ns = _n_samples(S0), i
    cdef int me = 0
    memset(&A, 0, sizeof(Ahead))
    A.src = S0[0]
    A.seed = seed
    A.first_draw = first_draw
    A.n_steps = n_steps
    A.ns = ns
    A.R = R
    A.nslots = _ahead_slots(ns, N)
    A.subs = <int64_t*> malloc(A.nslots * ns * N * sizeof(int64_t))
    A.x = <double*> malloc(A.nslots * ns * sizeof(double))
    A.w = <double*> malloc(A.nslots * ns * sizeof(double))
    A.corr = <int8_t*> malloc(A.nslots * ns * sizeof(int8_t))
    A.flags = <int64_t*> malloc((A.nslots + 2) * FLAG_STRIDE * sizeof(int64_t))
    try:
        if A.subs == NULL or A.x == NULL or A.w == NULL or A.corr == NULL or A.flags == NULL:
            raise MemoryError()
        for i in range(A.nslots + 2):
            A.flags[i * FLAG_STRIDE] = -1
        A.flags[A.nslots * FLAG_STRIDE] = 0        # consumed
        A.flags[(A.nslots + 1) * FLAG_STRIDE] = 0  # stop
        with nogil, parallel(num_threads=2):
            me = threadid()
            if me == 0:
                _ahead_compute(&A, code, param, lam, fac, grad, active, shape, rule,
                               interrupted)
            else:
                _ahead_draw(&A)
        if A.done < 0:
            raise MemoryError()
        _AHEAD_STATS[0] = A.done - A.here
        _AHEAD_STATS[1] = A.here
        return A.done
    finally:
        free(A.subs); free(A.x); free(A.w); free(A.corr); free(A.flags)


def run_steps(GcpSampler sampler, uint64_t seed, int64_t first_draw, int64_t n_steps,
              int code, double param, const double[::1] weights, list factors, list grads,
              const int8_t[::1] active, int solver, list moments1, list moments2, double lr,
              int64_t t_first, double beta1, double beta2, double eps, double lower,
              int num_threads=1, object work=None, object deadline=None, object clock=None,
              int64_t work_per_thread=0, int64_t block=0, bint draw_ahead=False):
    """``n_steps`` steps of a stochastic solver in one call: for each, the fused sampled
    gradient of every active mode (the draw ``first_draw + s`` of ``seed``, as
    :func:`gradient` at key ``step_key(seed, first_draw + s + 1)``), then the optimiser step
    ``t_first + s`` of ``solver`` (a code of :data:`SOLVER_CODES`) in place on ``factors``
    and the moments (``moments1``: Adam's first moments or AdaGrad's sums; ``moments2``:
    Adam's second moments; None where unused), clipped to ``lower``.

    The same bits as calling :func:`gradient` and :func:`adam_step` (etc.) step by step,
    without the Python work between them.  ``grads`` (I_k x R, C-contiguous) receive the
    gradients.  Between steps pending signals are handled (Ctrl-C raises) and, when
    ``deadline`` is given, ``clock()`` is compared with it.  ``work_per_thread`` and
    ``block`` (samples per block of the multi-threaded gradient, 0 for
    :func:`default_block`) as for :func:`gradient`.  ``draw_ahead``: when the steps run on
    one thread (``num_threads`` 1, or too few samples per thread for ``work_per_thread``),
    without ``deadline``, and have at most :data:`AHEAD_MAX_SAMPLES` samples, one more
    thread draws the samples of the next steps meanwhile (``_steps_drawn_ahead``; the same
    bits); the caller asks for it when a second CPU is free.
    Returns ``(steps_done, timed_out)``.
    """
    cdef int N = len(factors)
    cdef Src S = sampler.src
    cdef Py_ssize_t R = weights.shape[0]
    cdef int64_t ns = S.g.p + S.g.q, s, done = 0
    cdef int k, nt
    cdef bint timed_out = False, interrupted = False
    cdef double** fac = <double**> malloc(N * sizeof(double*))
    cdef double** grad = <double**> malloc(N * sizeof(double*))
    cdef double** m1 = <double**> calloc(N, sizeof(double*))
    cdef double** m2 = <double**> calloc(N, sizeof(double*))
    cdef int64_t* shape = <int64_t*> malloc(N * sizeof(int64_t))
    cdef double[::1] wv
    cdef double* wp = NULL
    cdef OptRule rule
    if fac == NULL or grad == NULL or m1 == NULL or m2 == NULL or shape == NULL:
        free(fac); free(grad); free(m1); free(m2); free(shape)
        raise MemoryError()
    try:
        if solver not in (SOLVER_SGD, SOLVER_ADAGRAD, SOLVER_ADAM):
            raise ValueError(f"unknown solver code {solver}")
        _pointers(factors, fac)
        _pointers(grads, grad)
        if solver != SOLVER_SGD:
            _pointers(moments1, m1)
        if solver == SOLVER_ADAM:
            _pointers(moments2, m2)
        for k in range(N):
            shape[k] = (<object> grads[k]).shape[0]
        nt = _threads_for(ns * (N * R + SAMPLE_WORK), num_threads, work_per_thread)
        if nt > 1 and R > 0:
            if block <= 0:
                block = default_block(N, R)
            block = max(1, min(block, ns))
            need = workspace_size(N, R, block)
            if work is None or (<object> work).shape[0] < need:
                work = np.empty(need)
            wv = work
            wp = &wv[0]
        rule.solver = solver
        rule.m1 = m1
        rule.m2 = m2
        rule.lr = lr
        rule.beta1 = beta1
        rule.beta2 = beta2
        rule.eps = eps
        rule.lower = lower
        rule.t_first = t_first
        if (draw_ahead and nt == 1 and R > 0 and 0 < ns <= AHEAD_MAX_SAMPLES
                and deadline is None and n_steps > 1):
            # one thread computes the steps, another draws their samples ahead
            done = _steps_drawn_ahead(&S, seed, first_draw, n_steps, code, param,
                                      &weights[0], fac, grad, &active[0], shape, R, &rule,
                                      &interrupted)
            if interrupted:
                _reraise()
            return done, False
        if R > 0 and ns > 0 and nt > 1 and deadline is None and n_steps > 0:
            # every step in one parallel region (no deadline to check between steps)
            done = _fused_parallel(&S, &seed, first_draw, n_steps, code, param, &weights[0],
                                   fac, grad, &active[0], shape, R, block, False, NULL, nt, wp,
                                   &rule, False, &interrupted)
            if interrupted:
                _reraise()
            return done, False
        for s in range(n_steps):
            S.key = sktf_mix_seed(seed, <uint64_t> (first_draw + s + 1))
            if R > 0 and ns > 0 and nt > 1:
                # one step: the gradient zeroed, summed and the optimiser step applied in
                # place by the threads that own its rows
                rule.t_first = t_first + s
                _fused_parallel(&S, &seed, first_draw + s, 1, code, param, &weights[0], fac,
                                grad, &active[0], shape, R, block, False, NULL, nt, wp, &rule,
                                True, &interrupted)
                if interrupted:
                    _reraise()
            else:
                for k in range(N):
                    if active[k] and shape[k] > 0 and R > 0:
                        memset(grad[k], 0, shape[k] * R * sizeof(double))
                if R > 0 and ns > 0:
                    _gradient_serial(&S, code, param, &weights[0], fac, grad, &active[0], R,
                                     False)
                with nogil:
                    for k in range(N):
                        if active[k] and fac[k] != NULL:
                            _opt_apply(solver, fac[k], grad[k], m1[k], m2[k], shape[k] * R,
                                       lr, beta1, beta2, eps, <double> (t_first + s), lower,
                                       num_threads)
            done = s + 1
            if _check_signals() != 0:
                _reraise()
            if deadline is not None and clock() > deadline:
                timed_out = True
                break
        return done, timed_out
    finally:
        free(fac); free(grad); free(m1); free(m2); free(shape)

