# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Compiled CPU kernels over the ALTO format (Cython, OpenMP).

See :mod:`sktensor_fast.backends.cpu.formats.alto` for the layout.  A nonzero is stored as one linear index
(one or two 64-bit words) whose bits interleave the bits of its coordinates, plus its value; the
nonzeros are sorted by that index and cut into partitions of equal nonzero counts.

Decoding a coordinate gathers the bits of its mode out of the index.  Two decoders:

* ``pext``: one BMI2 parallel-bit-extract per mode and word (x86-64 CPUs with a fast PEXT:
  Intel since Haswell, AMD since Zen 3; chosen at import, by CPUID).  These kernels are also
  compiled for AVX2 + FMA, which all such CPUs have;
* ``generic`` (any CPU): one lookup per index byte in a 256-entry table that moves the byte's
  bits to a layout where every mode's bits are contiguous (BLCO's re-linearisation, done on the
  fly), OR-ed together; then one shift and mask per mode.  The tables of a 64-bit index take
  2 KiB per index byte, so they stay in L1.

Encoding (build time) uses PDEP, or per mode a short list of (word, shift, mask) groups.

The hot loops (one partition of MTTKRP or CP-APR's Φ) are written in C, in
``sktensor_fast/include/sktf_alto.h``, once per value type, per decoder and per rank class
(R = 8, 16, 32 as compile-time constants so the rank loops vectorise fully, any other R through
a run-time trip count).  Output conflicts between
partitions are resolved in one of two ways chosen by the caller (see ``formats/alto.py``):

* ``buffer``: every partition accumulates into a private buffer spanning its own row interval of
  the target mode; a parallel loop over output rows then adds the buffers in partition order.
  No atomics, and the result does not depend on the number of threads.
* ``compact``: a partition adds straight into the output the rows no other partition touches,
  and the rows it shares (flagged once per mode) into its own compact buffer, one entry per such
  row (``slot[j]`` per nonzero); a parallel loop over row blocks then adds the compact buffers
  in partition order.  No atomics either, and the same result for every thread count.

Like the other kernels these trust their inputs: the Python layer validates shapes and dtypes.
"""
cimport cython
from cython.parallel cimport prange, parallel
from libc.stdlib cimport malloc, free
from libc.string cimport memset
from libc.stdint cimport int64_t, uint64_t, int32_t, uint8_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from "sktf_log.h":
    int sktf_log_init(int level) nogil

cdef extern from "sktf_alto.h":
    ctypedef struct sktf_codec:
        int nmodes
        int words
        const uint64_t* mask_lo
        const uint64_t* mask_hi
        const int32_t* lo_bits
        const int32_t* gptr
        const int32_t* gword
        const int32_t* grs
        const int32_t* gls
        const uint64_t* gmask
        int nbytes
        const uint64_t* tab
        const int32_t* goff
        const int32_t* gbits
        const uint64_t* gcmask

    ctypedef struct sktf_alto_job:
        sktf_codec cd
        const uint64_t* lin
        const void* vals
        void** fac
        int mode
        int64_t R
        const void* B
        double eps
        void* out
        const int32_t* slot
        int pf
        int64_t lane_mask
        int64_t lane_stride

    int sktf_use_pext
    int sktf_pf_dist
    int SKTF_BMI2_BUILD
    int SKTF_IBLOCK
    int sktf_pext_is_fast() nogil
    int sktf_has_bmi2() nogil
    void sktf_encode(const sktf_codec* cd, const int64_t* subs, int64_t s, int64_t e,
                     uint64_t* lin) noexcept nogil
    void sktf_decode_range(const sktf_codec* cd, const uint64_t* lin, int64_t s, int64_t e,
                           int64_t* subs) noexcept nogil
    void sktf_intervals(const sktf_codec* cd, const uint64_t* lin, int64_t s, int64_t e,
                        int64_t* cmin, int64_t* cmax, int64_t* c) noexcept nogil
    int sktf_shared_rows(const sktf_codec* cd, const uint64_t* lin, const int64_t* ptr,
                         int64_t nparts, int n, int64_t nrows, uint8_t* shared,
                         int64_t* entries) noexcept nogil
    void sktf_alto_part_f64(const sktf_alto_job* jb, int64_t s, int64_t e, double* buf,
                            int64_t buf_lo, double* cb, double* scratch,
                            int64_t* c) noexcept nogil
    void sktf_alto_part_f32(const sktf_alto_job* jb, int64_t s, int64_t e, float* buf,
                            int64_t buf_lo, float* cb, float* scratch, int64_t* c) noexcept nogil
    void sktf_alto_part_lanes_f64(const sktf_alto_job* jb, int64_t s, int64_t e, double* buf,
                                  int64_t buf_lo, int64_t span, double* scratch,
                                  int64_t* c) noexcept nogil
    void sktf_alto_part_lanes_f32(const sktf_alto_job* jb, int64_t s, int64_t e, float* buf,
                                  int64_t buf_lo, int64_t span, float* scratch,
                                  int64_t* c) noexcept nogil
    void sktf_alto_values_f64(const sktf_alto_job* jb, const double* weights, int64_t s,
                              int64_t e, double* res, double* pi, int64_t* c,
                              const double* vals, double eps, double* sum) noexcept nogil
    void sktf_alto_values_f32(const sktf_alto_job* jb, const float* weights, int64_t s,
                              int64_t e, float* res, float* pi, int64_t* c,
                              const float* vals, double eps, double* sum) noexcept nogil
    int sktf_radix_sort(uint64_t* key, void* val, int64_t n, int words, int vsize, int nbits,
                        int nthreads, int dbits) noexcept nogil
    int64_t sktf_compact_part(const sktf_codec* cd, const uint64_t* lin, int64_t s, int64_t e,
                              int n, int nbits, const uint8_t* shared, int32_t* slot,
                              int64_t* rows_out, int64_t* k1, int64_t* k2, int32_t* i1,
                              int32_t* i2) noexcept nogil
    int64_t sktf_lower_bound(const int64_t* a, int64_t n, int64_t v) noexcept nogil
    double sktf_wtime() noexcept nogil
    int sktf_thread_num() noexcept nogil

ctypedef fused floating:
    float
    double

sktf_use_pext = sktf_pext_is_fast()

#: Whether this build can use BMI2 PEXT/PDEP (x86-64 with GCC or Clang).
HAVE_PEXT_BUILD = bool(SKTF_BMI2_BUILD)


#: The instance of the data term's vectorised logarithm this module takes (``sktf_log.h``;
#: 0 generic, 1 AVX2 with FMA, 2 AVX-512): the best the CPU runs.
LOG_LEVEL = int(sktf_log_init(-1))


def _set_log_level(int level):
    """Make the data term of this module take the logarithm's instance ``level`` (-1: the
    best the CPU runs; a higher one than that: that).  Returns the level taken.  Only for
    tests and benchmarks (the instances round differently, within the tested bound)."""
    return int(sktf_log_init(level))


def pext_available():
    """True when this CPU has a fast PEXT/PDEP and the build can use it."""
    return bool(sktf_pext_is_fast())


def _set_prefetch_distance(int d):
    """Software-prefetch distance (nonzeros ahead) of the 3- to 5-way kernels; 0 turns it
    off.  Calls told that their rows stay in cache (``cached=True``) prefetch nothing
    whatever this says.  Returns the old one.  Only for tests and benchmarks: it does not
    change any result."""
    global sktf_pf_dist
    old = sktf_pf_dist
    sktf_pf_dist = max(d, 0)
    return old


def get_decoder():
    """The index decoder in use: ``"pext"`` or ``"generic"``."""
    return "pext" if sktf_use_pext else "generic"


def set_decoder(name):
    """Select the index decoder (``"pext"``, ``"generic"`` or ``"auto"``); returns the old one.

    ``"pext"`` raises ``ValueError`` where the CPU or the build lacks BMI2 (it is allowed on
    CPUs whose PEXT is slow).  Only for tests and benchmarks: both decoders give identical
    coordinates.
    """
    global sktf_use_pext
    old = get_decoder()
    if name == "auto":
        sktf_use_pext = sktf_pext_is_fast()
    elif name == "generic":
        sktf_use_pext = 0
    elif name == "pext":
        if not sktf_has_bmi2():
            raise ValueError("PEXT is not available: this CPU or this build of sktensor_fast "
                             "lacks BMI2")
        sktf_use_pext = 1
    else:
        raise ValueError(f"unknown decoder {name!r}; use 'pext', 'generic' or 'auto'")
    return old


def _padded(a, dtype):
    """``a`` flattened to ``dtype`` with one zero appended (so that pointers stay valid)."""
    a = np.asarray(a, dtype=dtype).reshape(-1)
    return np.ascontiguousarray(np.concatenate([a, np.zeros(1, dtype=dtype)]))


cdef class Codec:
    """The bit layout of ALTO indices (arrays built by ``formats/alto.py``)."""

    cdef sktf_codec cd
    cdef readonly object mask_lo, mask_hi, lo_bits, gptr, gword, grs, gls, gmask
    cdef readonly object tab, goff, gbits, gcmask
    cdef readonly int nmodes, words

    def __init__(self, int words, mask_lo, mask_hi, lo_bits, gptr, gword, grs, gls, gmask,
                 tab, goff, gbits):
        self.mask_lo = np.ascontiguousarray(mask_lo, dtype=np.uint64)
        self.mask_hi = np.ascontiguousarray(mask_hi, dtype=np.uint64)
        self.lo_bits = np.ascontiguousarray(lo_bits, dtype=np.int32)
        self.gptr = np.ascontiguousarray(gptr, dtype=np.int32)
        # at least one element so that the pointers below are valid
        self.gword = _padded(gword, np.int32)
        self.grs = _padded(grs, np.int32)
        self.gls = _padded(gls, np.int32)
        self.gmask = _padded(gmask, np.uint64)
        self.tab = _padded(tab, np.uint64)
        self.goff = np.ascontiguousarray(goff, dtype=np.int32)
        self.gbits = np.ascontiguousarray(gbits, dtype=np.int32)
        self.gcmask = np.array([(1 << int(b)) - 1 for b in self.gbits], dtype=np.uint64)
        self.nmodes = self.lo_bits.shape[0]
        if (self.tab.shape[0] - 1) % (256 * words):
            raise ValueError("the decoding table must hold 256 entries of `words` words per byte")
        if words not in (1, 2):
            raise ValueError("an ALTO index has 1 or 2 words")
        if (self.mask_lo.shape[0] != self.nmodes or self.mask_hi.shape[0] != self.nmodes
                or self.gptr.shape[0] != self.nmodes + 1):
            raise ValueError("inconsistent codec arrays")
        self.words = words
        self._fill()

    cdef _fill(self):
        cdef const uint64_t[::1] ml = self.mask_lo
        cdef const uint64_t[::1] mh = self.mask_hi
        cdef const int32_t[::1] lb = self.lo_bits
        cdef const int32_t[::1] gp = self.gptr
        cdef const int32_t[::1] gw = self.gword
        cdef const int32_t[::1] rs = self.grs
        cdef const int32_t[::1] ls = self.gls
        cdef const uint64_t[::1] gm = self.gmask
        cdef const uint64_t[::1] tb = self.tab
        cdef const int32_t[::1] go = self.goff
        cdef const int32_t[::1] gb = self.gbits
        cdef const uint64_t[::1] gc = self.gcmask
        self.cd.nmodes = self.nmodes
        self.cd.nbytes = (tb.shape[0] - 1) // (256 * self.words)
        self.cd.tab = &tb[0]
        if self.nmodes > 0:
            self.cd.goff = &go[0]
            self.cd.gbits = &gb[0]
            self.cd.gcmask = &gc[0]
        self.cd.words = self.words
        if self.nmodes > 0:
            self.cd.mask_lo = &ml[0]
            self.cd.mask_hi = &mh[0]
            self.cd.lo_bits = &lb[0]
        self.cd.gptr = &gp[0]
        self.cd.gword = &gw[0]
        self.cd.grs = &rs[0]
        self.cd.gls = &ls[0]
        self.cd.gmask = &gm[0]

    def encode(self, const int64_t[:, ::1] subs, int num_threads=1):
        """Linear indices of coordinate rows: (nnz,) or (nnz, 2) [hi, lo] uint64."""
        cdef Py_ssize_t nnz = subs.shape[0]
        cdef Py_ssize_t chunk = 16384
        cdef Py_ssize_t nchunks = (nnz + chunk - 1) // chunk
        cdef Py_ssize_t b, s, e
        if subs.shape[1] != self.nmodes:
            raise ValueError(f"subs has {subs.shape[1]} columns, the codec {self.nmodes} modes")
        if self.words == 2:
            lin = np.empty((nnz, 2), dtype=np.uint64)
        else:
            lin = np.empty(nnz, dtype=np.uint64)
        cdef uint64_t[::1] flat = lin.reshape(-1)
        if nnz == 0:
            return lin
        with nogil:
            for b in prange(nchunks, schedule='dynamic', num_threads=num_threads):
                s = b * chunk
                e = min(s + chunk, nnz)
                sktf_encode(&self.cd, &subs[0, 0], s, e, &flat[0])
        return lin

    def decode(self, lin, int num_threads=1):
        """Coordinates (nnz, nmodes) int64 of linear indices."""
        cdef const uint64_t[::1] flat = np.ascontiguousarray(lin, dtype=np.uint64).reshape(-1)
        cdef Py_ssize_t nnz = flat.shape[0] // self.words
        cdef Py_ssize_t chunk = 16384
        cdef Py_ssize_t nchunks = (nnz + chunk - 1) // chunk
        cdef Py_ssize_t b, s, e
        subs = np.empty((nnz, self.nmodes), dtype=np.int64)
        cdef int64_t[:, ::1] sv = subs
        if nnz == 0 or self.nmodes == 0:
            return subs
        with nogil:
            for b in prange(nchunks, schedule='dynamic', num_threads=num_threads):
                s = b * chunk
                e = min(s + chunk, nnz)
                sktf_decode_range(&self.cd, &flat[0], s, e, &sv[s, 0])
        return subs

    def sort(self, lin, vals, int nbits, int num_threads=1, int digit_bits=8):
        """Sort ``lin`` (in place) and permute ``vals`` (in place) with it (LSD radix sort
        with ``digit_bits``-bit digits)."""
        cdef uint64_t[::1] flat = lin.reshape(-1)
        cdef cnp.ndarray v = vals
        cdef Py_ssize_t n = v.shape[0]
        cdef int rc
        if not (v.flags.c_contiguous and v.flags.writeable):
            raise ValueError("vals must be a writeable contiguous array")
        if n == 0:
            return
        with nogil:
            rc = sktf_radix_sort(&flat[0], cnp.PyArray_DATA(v), n, self.words,
                                 <int> cnp.PyArray_ITEMSIZE(v), nbits, num_threads,
                                 digit_bits)
        if rc != 0:
            raise MemoryError("not enough memory to sort the ALTO indices")

    def intervals(self, lin, const int64_t[::1] part_ptr, int num_threads=1):
        """(nparts, nmodes) arrays cmin, cmax: coordinate interval of every partition."""
        cdef const uint64_t[::1] flat = np.ascontiguousarray(lin, dtype=np.uint64).reshape(-1)
        cdef Py_ssize_t nparts = part_ptr.shape[0] - 1
        cdef int N = self.nmodes
        cmin = np.empty((max(nparts, 0), N), dtype=np.int64)
        cmax = np.empty((max(nparts, 0), N), dtype=np.int64)
        cdef int64_t[:, ::1] vmin = cmin
        cdef int64_t[:, ::1] vmax = cmax
        cdef Py_ssize_t p
        cdef int64_t* c
        if nparts <= 0 or N == 0:
            return cmin, cmax
        with nogil, parallel(num_threads=num_threads):
            c = <int64_t*> malloc(SKTF_IBLOCK * N * sizeof(int64_t))
            for p in prange(nparts, schedule='dynamic'):
                sktf_intervals(&self.cd, &flat[0], part_ptr[p], part_ptr[p + 1],
                               &vmin[p, 0], &vmax[p, 0], c)
            free(c)
        return cmin, cmax

    def shared_rows(self, lin, const int64_t[::1] part_ptr, int mode, Py_ssize_t length):
        """``(flags, entries)``: uint8 flags over the rows of ``mode``, 1 where more than one
        partition has nonzeros; and the entries of the compact path's buffers (the number of
        partitions with nonzeros in a shared row, summed over the shared rows)."""
        cdef const uint64_t[::1] flat = np.ascontiguousarray(lin, dtype=np.uint64).reshape(-1)
        cdef Py_ssize_t nparts = part_ptr.shape[0] - 1
        flags = np.zeros(length, dtype=np.uint8)
        cdef uint8_t[::1] fv = flags
        cdef int rc = 0
        cdef int64_t entries = 0
        if nparts <= 0 or length == 0:
            return flags, 0
        with nogil:
            rc = sktf_shared_rows(&self.cd, &flat[0], &part_ptr[0], nparts, mode, length, &fv[0],
                                  &entries)
        if rc != 0:
            raise MemoryError()
        return flags, int(entries)

    def compact_plan(self, lin, const int64_t[::1] part_ptr, int mode, const uint8_t[::1] shared,
                     int nbits, int num_threads=1):
        """The compact path's plan for ``mode``: ``(slot, rows, roff)``.

        ``rows[roff[p]:roff[p + 1]]`` are the rows of ``mode`` that partition ``p`` shares with
        another partition (``shared`` flags, from :meth:`shared_rows`), sorted; ``slot[j]``
        (int32, one per nonzero) is the index of nonzero ``j``'s row among its partition's, or
        -1 where the partition owns the row.  ``nbits``: bits of the mode's coordinates.  The
        plan depends on the data and the partitions only.
        """
        cdef const uint64_t[::1] flat = np.ascontiguousarray(lin, dtype=np.uint64).reshape(-1)
        cdef Py_ssize_t nparts = part_ptr.shape[0] - 1
        cdef Py_ssize_t nnz = flat.shape[0] // self.words
        cdef Py_ssize_t p, q, big = 0
        cdef int failed = 0
        cdef int* failed_p = &failed
        cdef char* blk
        slot_a = np.empty(nnz, dtype=np.int32)
        tmp_a = np.empty(max(nnz, 1), dtype=np.int64)
        cnt_a = np.zeros(max(nparts, 0), dtype=np.int64)
        cdef int32_t[::1] slot = slot_a
        cdef int64_t[::1] tmp = tmp_a
        cdef int64_t[::1] cnt = cnt_a
        if mode < 0 or mode >= self.nmodes or shared.shape[0] == 0 or nparts <= 0 or nnz == 0:
            return slot_a, np.zeros(0, dtype=np.int64), np.zeros(max(nparts, 0) + 1, np.int64)
        for p in range(nparts):
            big = max(big, part_ptr[p + 1] - part_ptr[p])
        if big >= 2 ** 31:
            raise ValueError("the compact path needs partitions of fewer than 2**31 nonzeros")
        with nogil, parallel(num_threads=num_threads):
            blk = <char*> malloc(big * 2 * (sizeof(int64_t) + sizeof(int32_t)) + 16)
            if blk == NULL:
                failed_p[0] = 1
            for p in prange(nparts, schedule='dynamic'):
                if blk != NULL:
                    cnt[p] = sktf_compact_part(&self.cd, &flat[0], part_ptr[p], part_ptr[p + 1],
                                               mode, nbits, &shared[0], &slot[0],
                                               &tmp[part_ptr[p]], <int64_t*> blk,
                                               (<int64_t*> blk) + big,
                                               <int32_t*> ((<int64_t*> blk) + 2 * big),
                                               (<int32_t*> ((<int64_t*> blk) + 2 * big)) + big)
            free(blk)
        if failed:
            raise MemoryError("ALTO: cannot allocate the scratch of the compact path's plan")
        roff = np.zeros(nparts + 1, dtype=np.int64)
        np.cumsum(cnt_a, out=roff[1:])
        rows = np.empty(int(roff[nparts]), dtype=np.int64)
        for p in range(nparts):
            q = part_ptr[p]
            rows[roff[p]:roff[p + 1]] = tmp_a[q:q + cnt[p]]
        return slot_a, rows, roff


cdef int _fill_factors(list factors, void** fac) except -1:
    cdef Py_ssize_t k
    cdef cnp.ndarray f
    for k in range(len(factors)):
        f = factors[k]
        fac[k] = cnp.PyArray_DATA(f) if f.shape[0] > 0 else NULL
    return 0


def accumulate(Codec codec, lin, const floating[::1] vals, const int64_t[::1] part_ptr,
               const int64_t[:, ::1] pmin, const int64_t[:, ::1] pmax,
               list factors, int mode, floating[:, ::1] out, object B=None, double eps=0.0,
               int num_threads=1, bint use_buffer=True, object plan=None, object work=None,
               object waves=None, int lanes=1, bint cached=False, object times=None):
    """MTTKRP (``B is None``) or CP-APR's Φ (``B`` given) over ALTO, into ``out`` (overwritten).

    Parameters
    ----------
    codec : the bit layout; ``lin`` : sorted linear indices; ``vals`` : values in that order.
    part_ptr : partition boundaries (nparts + 1); ``pmin``/``pmax`` : (nparts, N) intervals.
    factors : N C-contiguous (I_k x R) arrays of the dtype of ``vals``.
    use_buffer : private per-partition buffers over row intervals + merge (True), or the
        compact path (False): rows owned by one partition written in place, shared rows into
        per-partition compact buffers merged after.
    plan : for the compact path, ``(slot, rows, roff)`` of :meth:`Codec.compact_plan`.
    work : optional 1-D array of the dtype of ``vals`` used for the buffers when it is large
        enough (the largest wave's buffer rows times R), so that repeated calls reuse the same
        pages.
    waves : optional int64 boundaries into the partitions (first 0, last nparts): the
        partitions of one wave run at a time (buffers, then merge), so that only one wave's
        buffers exist at once.
    lanes : buffer path only: copies of every partition's buffer (1, 2, 4, ...: a power of
        two); nonzero ``s + t`` of a partition starting at ``s`` adds into copy
        ``t % lanes``, and the copies are added in copy order at the end of the partition.
        For small outputs, whose rows come back every few nonzeros (the buffer needs
        ``lanes`` times its rows times R entries).
    cached : the rows the kernels read stay in cache: no software prefetching.

    times : optional float64 array of at least ``4 + 2 * num_threads`` entries that receives
        the seconds of each phase (for benchmarks; the result does not change): ``[0]`` zeroing
        the output, ``[1]`` the partitions (wall, all waves), ``[2]`` the merges (wall, all
        waves), ``[3]`` the number of waves, ``[4 + t]`` the time thread ``t`` spent in its
        partitions and ``[4 + num_threads + t]`` in its merge blocks.  What a thread does not
        spend there of the phase's wall time, it waits.

    Either way every output row is the sum of its partitions' contributions in partition
    order, each partition's in nonzero order (with lanes: in the order of the lanes, each in
    nonzero order): the result depends neither on the waves nor on the thread count.
    """
    cdef const uint64_t[::1] flat = np.ascontiguousarray(lin, dtype=np.uint64).reshape(-1)
    cdef Py_ssize_t nnz = vals.shape[0]
    cdef int N = codec.nmodes
    cdef Py_ssize_t R = out.shape[1]
    cdef Py_ssize_t I = out.shape[0]
    cdef Py_ssize_t nparts = part_ptr.shape[0] - 1
    cdef sktf_alto_job jb
    cdef void** fac = <void**> malloc((N if N > 0 else 1) * sizeof(void*))
    cdef const floating[:, ::1] Bv
    cdef const int32_t[::1] slot
    cdef const int64_t[::1] crows
    cdef const int64_t[::1] croff
    cdef Py_ssize_t* boff = NULL
    cdef floating* bufs = NULL
    cdef floating* scratch
    cdef floating* dst
    cdef floating* src
    cdef int64_t* c
    cdef Py_ssize_t p, r, i, ch, nch, a, b, x, y, lo, hi, total, size, span, w, p0, p1, k, n, bs
    cdef Py_ssize_t CH = 64
    cdef floating[::1] wk
    cdef const int64_t[::1] wp
    cdef bint own_bufs = True
    cdef bint compact = not use_buffer
    cdef Py_ssize_t lane, nl
    cdef double[::1] tv
    cdef double* tp = NULL
    cdef double t0, t1
    if fac == NULL:
        raise MemoryError()
    if lanes < 1 or (lanes & (lanes - 1)) != 0 or lanes > 64:
        free(fac)
        raise ValueError(f"lanes must be a power of two from 1 to 64, got {lanes}")
    if compact:
        lanes = 1
    try:
        if times is not None:
            tv = times
            if tv.shape[0] < 4 + 2 * num_threads:
                raise ValueError("times needs 4 + 2 * num_threads entries")
            tp = &tv[0]
            memset(tp, 0, (4 + 2 * num_threads) * sizeof(double))
            t0 = sktf_wtime()
        _fill_factors(factors, fac)
        jb.cd = codec.cd
        jb.lin = &flat[0] if flat.shape[0] > 0 else NULL
        jb.vals = &vals[0] if nnz > 0 else NULL
        jb.fac = fac
        jb.mode = mode
        jb.R = R
        jb.B = NULL
        jb.eps = eps
        jb.out = &out[0, 0] if I > 0 and R > 0 else NULL
        jb.slot = NULL
        jb.pf = 0 if cached else sktf_pf_dist
        jb.lane_mask = lanes - 1
        jb.lane_stride = 0
        if B is not None:
            Bv = B
            if I > 0 and R > 0:
                jb.B = &Bv[0, 0]
        if I > 0 and R > 0:
            with nogil:
                memset(&out[0, 0], 0, I * R * sizeof(floating))
        if tp != NULL:
            tp[0] = sktf_wtime() - t0
        if nnz == 0 or nparts <= 0 or R == 0 or I == 0:
            return out
        if compact:
            if plan is None or len(plan) != 3:
                raise ValueError("the compact path needs its plan (slot, rows, roff)")
            slot, crows, croff = plan
            if slot.shape[0] != nnz or croff.shape[0] != nparts + 1:
                raise ValueError("the compact plan does not match the tensor's partitions")
            jb.slot = &slot[0]
        if waves is None:
            wv_ptr = np.array([0, nparts], dtype=np.int64)
        else:
            wv_ptr = np.ascontiguousarray(waves, dtype=np.int64)
        wp = wv_ptr
        if wp.shape[0] < 2 or wp[0] != 0 or wp[wp.shape[0] - 1] != nparts:
            raise ValueError("waves must run from 0 to the number of partitions")
        # offsets of every partition's buffer inside its wave's
        boff = <Py_ssize_t*> malloc((nparts + 1) * sizeof(Py_ssize_t))
        if boff == NULL:
            raise MemoryError()
        total = 0
        for w in range(wp.shape[0] - 1):
            if wp[w + 1] < wp[w]:
                raise ValueError("waves must not decrease")
            size = 0
            for p in range(wp[w], wp[w + 1]):
                boff[p] = size
                if compact:
                    size += (croff[p + 1] - croff[p]) * R
                elif pmax[p, mode] >= pmin[p, mode]:
                    size += (pmax[p, mode] - pmin[p, mode] + 1) * R * lanes
            total = max(total, size)
        boff[nparts] = 0
        if work is not None and total > 0:
            wk = work
            if wk.shape[0] >= total:
                bufs = &wk[0]
                own_bufs = False
        if own_bufs:
            bufs = <floating*> malloc((total if total > 0 else 1) * sizeof(floating))
        if bufs == NULL:
            raise MemoryError(f"ALTO's private buffers need {total * sizeof(floating)} bytes")
        nch = (I + CH - 1) // CH
        # merge blocks of the compact path: rows [ch * bs, (ch + 1) * bs)
        bs = max(CH, (I + 16 * num_threads - 1) // (16 * num_threads))
        for w in range(wp.shape[0] - 1):
            p0 = wp[w]
            p1 = wp[w + 1]
            if tp != NULL:
                tp[3] += 1
                t0 = sktf_wtime()
            with nogil, parallel(num_threads=num_threads):
                scratch = <floating*> malloc(R * sizeof(floating))
                c = <int64_t*> malloc(N * sizeof(int64_t))
                for p in prange(p0, p1, schedule='dynamic'):
                    if tp != NULL:
                        t1 = sktf_wtime()
                    if compact:
                        span = (croff[p + 1] - croff[p]) * R
                        if span > 0:
                            memset(bufs + boff[p], 0, span * sizeof(floating))
                        if floating is double:
                            sktf_alto_part_f64(&jb, part_ptr[p], part_ptr[p + 1], NULL, 0,
                                               bufs + boff[p], scratch, c)
                        else:
                            sktf_alto_part_f32(&jb, part_ptr[p], part_ptr[p + 1], NULL, 0,
                                               bufs + boff[p], scratch, c)
                    elif pmax[p, mode] >= pmin[p, mode]:
                        span = (pmax[p, mode] - pmin[p, mode] + 1) * R
                        memset(bufs + boff[p], 0, span * lanes * sizeof(floating))
                        if floating is double:
                            sktf_alto_part_lanes_f64(&jb, part_ptr[p], part_ptr[p + 1],
                                                     bufs + boff[p], pmin[p, mode], span,
                                                     scratch, c)
                        else:
                            sktf_alto_part_lanes_f32(&jb, part_ptr[p], part_ptr[p + 1],
                                                     bufs + boff[p], pmin[p, mode], span,
                                                     scratch, c)
                        # the lanes, added into the first in lane order
                        nl = jb.lane_mask + 1
                        for lane in range(1, nl):
                            dst = bufs + boff[p]
                            src = dst + lane * span
                            for i in range(span):
                                dst[i] += src[i]
                    if tp != NULL:
                        tp[4 + sktf_thread_num()] += sktf_wtime() - t1
                free(scratch)
                free(c)
            if tp != NULL:
                t1 = sktf_wtime()
                tp[1] += t1 - t0
                t0 = t1
            if compact:
                # merge: blocks of rows in parallel; in each, the partitions' shared rows that
                # fall in the block, added in partition order (deterministic)
                with nogil:
                    for ch in prange((I + bs - 1) // bs, schedule='dynamic',
                                     num_threads=num_threads):
                        if tp != NULL:
                            t1 = sktf_wtime()
                        a = ch * bs
                        b = min(a + bs, I)
                        for p in range(p0, p1):
                            n = croff[p + 1] - croff[p]
                            if n == 0:
                                continue
                            k = sktf_lower_bound(&crows[croff[p]], n, a)
                            while k < n and crows[croff[p] + k] < b:
                                src = bufs + boff[p] + k * R
                                dst = &out[crows[croff[p] + k], 0]
                                for r in range(R):
                                    dst[r] += src[r]
                                k = k + 1
                        if tp != NULL:
                            tp[4 + num_threads + sktf_thread_num()] += sktf_wtime() - t1
                if tp != NULL:
                    tp[2] += sktf_wtime() - t0
                continue
            # merge: blocks of CH rows in parallel, partitions added in order (deterministic)
            with nogil:
                for ch in prange(nch, schedule='dynamic', num_threads=num_threads):
                    if tp != NULL:
                        t1 = sktf_wtime()
                    a = ch * CH
                    b = min(a + CH, I)
                    for p in range(p0, p1):
                        lo = pmin[p, mode]
                        hi = pmax[p, mode] + 1
                        x = max(a, lo)
                        y = min(b, hi)
                        if x >= y:
                            continue
                        src = bufs + boff[p] + (x - lo) * R
                        dst = &out[x, 0]
                        for i in range((y - x) * R):
                            dst[i] += src[i]
                    if tp != NULL:
                        tp[4 + num_threads + sktf_thread_num()] += sktf_wtime() - t1
            if tp != NULL:
                tp[2] += sktf_wtime() - t0
        return out
    finally:
        free(fac)
        free(boff)
        if own_bufs:
            free(bufs)


def kruskal_values(Codec codec, lin, const floating[::1] weights, list factors,
                   floating[::1] res, int num_threads=1, bint cached=False):
    """res[j] = Σ_r weights[r] Π_k factors[k][i_k(j), r] at the nonzeros in ALTO order
    (``cached``: the factors stay in cache, no software prefetching)."""
    cdef const uint64_t[::1] flat = np.ascontiguousarray(lin, dtype=np.uint64).reshape(-1)
    cdef Py_ssize_t nnz = res.shape[0]
    cdef int N = codec.nmodes
    cdef Py_ssize_t R = weights.shape[0]
    cdef sktf_alto_job jb
    cdef void** fac = <void**> malloc((N if N > 0 else 1) * sizeof(void*))
    cdef Py_ssize_t chunk = 8192
    cdef Py_ssize_t nchunks = (nnz + chunk - 1) // chunk
    cdef Py_ssize_t b
    cdef floating* pi
    cdef int64_t* c
    if fac == NULL:
        raise MemoryError()
    try:
        if nnz == 0:
            return res
        if R == 0:
            res[:] = 0
            return res
        _fill_factors(factors, fac)
        jb.cd = codec.cd
        jb.lin = &flat[0]
        jb.fac = fac
        jb.R = R
        jb.pf = 0 if cached else sktf_pf_dist
        jb.lane_mask = 0
        jb.lane_stride = 0
        with nogil, parallel(num_threads=num_threads):
            pi = <floating*> malloc(R * sizeof(floating))
            c = <int64_t*> malloc(N * sizeof(int64_t))
            for b in prange(nchunks, schedule='dynamic'):
                if floating is double:
                    sktf_alto_values_f64(&jb, &weights[0], b * chunk, min(b * chunk + chunk, nnz),
                                         &res[0], pi, c, NULL, 0, NULL)
                else:
                    sktf_alto_values_f32(&jb, &weights[0], b * chunk, min(b * chunk + chunk, nnz),
                                         &res[0], pi, c, NULL, 0, NULL)
            free(pi)
            free(c)
        return res
    finally:
        free(fac)


def poisson_data_term(Codec codec, lin, const floating[::1] vals, const floating[::1] weights,
                      list factors, double eps, int num_threads=1, bint cached=False):
    """Σ_j x_j log(max(m_j, eps)) over the nonzeros in ALTO order (``vals`` in that order),
    the model value m_j formed on the fly.  Partial sums over fixed chunks are added in chunk
    order: the same result for every thread count.  ``cached``: the factors stay in cache,
    no software prefetching."""
    cdef const uint64_t[::1] flat = np.ascontiguousarray(lin, dtype=np.uint64).reshape(-1)
    cdef Py_ssize_t nnz = vals.shape[0]
    cdef int N = codec.nmodes
    cdef Py_ssize_t R = weights.shape[0]
    cdef sktf_alto_job jb
    cdef Py_ssize_t chunk = 8192
    cdef Py_ssize_t nchunks = (nnz + chunk - 1) // chunk
    cdef void** fac = <void**> malloc((N if N > 0 else 1) * sizeof(void*))
    cdef double* part = <double*> malloc((nchunks if nchunks > 0 else 1) * sizeof(double))
    cdef Py_ssize_t b
    cdef floating* pi
    cdef int64_t* c
    cdef double total = 0
    if fac == NULL or part == NULL:
        free(fac)
        free(part)
        raise MemoryError()
    try:
        if nnz == 0:
            return 0.0
        _fill_factors(factors, fac)
        jb.cd = codec.cd
        jb.lin = &flat[0]
        jb.fac = fac
        jb.R = R
        jb.pf = 0 if cached else sktf_pf_dist
        jb.lane_mask = 0
        jb.lane_stride = 0
        with nogil, parallel(num_threads=num_threads):
            pi = <floating*> malloc((R if R > 0 else 1) * sizeof(floating))
            c = <int64_t*> malloc(N * sizeof(int64_t))
            for b in prange(nchunks, schedule='dynamic'):
                part[b] = 0
                if floating is double:
                    sktf_alto_values_f64(&jb, &weights[0] if R > 0 else NULL, b * chunk,
                                         min(b * chunk + chunk, nnz), NULL, pi, c, &vals[0],
                                         eps, &part[b])
                else:
                    sktf_alto_values_f32(&jb, &weights[0] if R > 0 else NULL, b * chunk,
                                         min(b * chunk + chunk, nnz), NULL, pi, c, &vals[0],
                                         eps, &part[b])
            free(pi)
            free(c)
        for b in range(nchunks):
            total += part[b]
        return total
    finally:
        free(fac)
        free(part)
