# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Compiled, threaded passes of a generator of synthetic sparse tensors with Zipf-skewed
coordinates (``benchmarks/synth.py`` builds tensors of up to billions of nonzeros with them).

A nonzero is drawn as a *linear index* ``sum_k c_k * stride_k`` (row-major strides of the
shape), so that the coordinates are sorted and made distinct as one int64 key each:

1. :func:`draw_linear` draws the keys of draw numbers ``start .. start + count - 1``.  Mode
   ``k``'s coordinate of draw ``d`` is ``perm_k[F_k^-1(u)]``, ``u`` a uniform double made from
   the counter-based generator of ``sktf_rng.h`` keyed by (seed, ``d``, ``k``), ``F_k^-1`` the
   inverse of the mode's cumulative distribution found through a guide table.
2. ``_construct.radix_sort_keys`` sorts the keys (keys only, the low ``nbits`` bits; two
   buffers).
3. :func:`count_unique`, :func:`compact` and :func:`merge_unique` make sorted keys distinct
   and merge them with those drawn before.  An exact number of them is kept with
   :func:`priority_histogram`, :func:`priority_members` and :func:`compact`: every distinct
   key has a pseudo-random priority (a hash of the seed and the key), and the keys whose
   (priority, key) pair is at most a threshold are kept.
4. :func:`split_linear` turns the keys into rows of coordinates, :func:`draw_values` and
   :func:`summed_values` give the values (counts 1..4, from the generator keyed by the
   nonzero's position).

Every number drawn depends on (seed, stream, counter) only, and every pass is either
elementwise or an order-preserving compaction at offsets counted first, so the results are
bitwise the same for any number of threads and any split of the work.
"""
from cython.parallel cimport prange
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset
from libc.stdint cimport int32_t, int64_t, uint64_t

import numpy as np

cdef extern from "sktf_rng.h":
    uint64_t sktf_mix_seed(uint64_t seed, uint64_t step) noexcept nogil
    uint64_t sktf_sample_key(uint64_t key, int64_t j) noexcept nogil
    uint64_t sktf_rand(uint64_t skey, uint64_t c) noexcept nogil
    int64_t sktf_below(uint64_t r, int64_t n) noexcept nogil

cdef extern from "sktf_macros.h":
    void SKTF_PREFETCH(const void* p) noexcept nogil

#: generator streams: each stream's key is ``sktf_mix_seed(seed, stream)``
DEF STREAM_COORDS_C = 1
DEF STREAM_VALUES_C = 2
DEF STREAM_PRIORITY_C = 3
STREAM_COORDS = STREAM_COORDS_C
STREAM_VALUES = STREAM_VALUES_C
STREAM_PRIORITY = STREAM_PRIORITY_C

#: items a block should hold at least before another thread is worth starting
DEF MIN_BLOCK_C = 65536
MIN_BLOCK = MIN_BLOCK_C

#: draws of a chunk of :func:`draw_linear` (whose table look-ups are prefetched together)
DEF CHUNK = 32


#: 2**-53: a 53-bit integer times this is a double in [0, 1)
DEF TWO_M53 = 1.0 / 9007199254740992.0

ctypedef fused value_t:
    float
    double


cdef inline Py_ssize_t _nblocks(Py_ssize_t n, int num_threads) noexcept nogil:
    cdef Py_ssize_t nb = n // MIN_BLOCK_C
    if nb > num_threads:
        nb = num_threads
    if nb < 1:
        nb = 1
    return nb


cdef inline bint _overlap(const int64_t* p, Py_ssize_t n, const int64_t* q,
                          Py_ssize_t m) noexcept nogil:
    """Whether the int64 arrays at ``p`` (``n`` entries) and ``q`` (``m``) share memory."""
    if n == 0 or m == 0 or p == NULL or q == NULL:
        return False
    return p < q + m and q < p + n


cdef inline uint64_t _key(seed, uint64_t stream) except? 0:
    return sktf_mix_seed(<uint64_t> (int(seed) & 0xFFFFFFFFFFFFFFFF), stream)


def stream_key(seed, stream):
    """The generator key of ``stream`` (:data:`STREAM_COORDS`, :data:`STREAM_VALUES`,
    :data:`STREAM_PRIORITY`) for ``seed`` (a Python int, taken modulo 2**64)."""
    return int(_key(seed, <uint64_t> stream))


cdef inline uint64_t _priority(uint64_t pkey, int64_t lin) noexcept nogil:
    return sktf_sample_key(pkey, lin)


# ------------------------------------------------------------------------ draws
cdef inline int64_t _scan_cdf(double u, const double* cdf, int64_t n, int64_t i) noexcept nogil:
    """``min(searchsorted(cdf, u, "right"), n - 1)`` by a scan up from ``i``, a lower bound
    of the answer."""
    while i < n - 1 and cdf[i] <= u:
        i += 1
    return i


cdef inline int64_t _guide_bin(double u, int64_t K) noexcept nogil:
    """The bin of the guide table where the scan for ``u`` starts: ``floor(u K) - 1`` as
    computed (the product may round up to the next integer, never down), at least 0."""
    cdef int64_t b = <int64_t> (u * K)
    if b > K - 1:
        b = K - 1
    return b - 1 if b >= 1 else 0


cdef inline double _uniform(uint64_t skey, Py_ssize_t k) noexcept nogil:
    """The uniform double in [0, 1) of mode ``k`` of a draw: the top 53 bits of its ``k``-th
    random word over 2**53."""
    return <double> (sktf_rand(skey, <uint64_t> k) >> 11) * TWO_M53


cdef int _draw_block(int64_t* out, Py_ssize_t lo, Py_ssize_t hi, uint64_t ckey, int64_t start,
                     Py_ssize_t N, const double* cdfs, const int64_t* cstart,
                     const int32_t* guides, const int64_t* gstart, const int32_t* perms,
                     const int64_t* strides) noexcept nogil:
    """Draws ``lo .. hi - 1`` in chunks of ``CHUNK``: the uniforms and guide bins of a chunk
    first, then its guide entries, then the scans of the CDFs and the permutations, each
    stage prefetching what the next one reads (the cache misses of a chunk's table look-ups
    overlap instead of following each other).  Returns 1 when the scratch could not be
    allocated."""
    cdef double* U = <double*> malloc(N * CHUNK * sizeof(double))
    cdef int64_t* P = <int64_t*> malloc(N * CHUNK * sizeof(int64_t))
    cdef Py_ssize_t i0, j, k, c
    cdef uint64_t skey
    cdef double u
    cdef int64_t acc, i, e
    if U == NULL or P == NULL:
        free(U)
        free(P)
        return 1
    i0 = lo
    while i0 < hi:
        c = hi - i0
        if c > CHUNK:
            c = CHUNK
        for j in range(c):
            skey = sktf_sample_key(ckey, start + i0 + j)
            for k in range(N):
                u = _uniform(skey, k)
                e = gstart[k] + _guide_bin(u, gstart[k + 1] - gstart[k] - 1)
                U[k * CHUNK + j] = u
                P[k * CHUNK + j] = e
                SKTF_PREFETCH(guides + e)
        for k in range(N):
            for j in range(c):
                i = guides[P[k * CHUNK + j]]
                P[k * CHUNK + j] = i
                SKTF_PREFETCH(cdfs + cstart[k] + i)
                SKTF_PREFETCH(perms + cstart[k] + i)
        for j in range(c):
            acc = 0
            for k in range(N):
                i = _scan_cdf(U[k * CHUNK + j], cdfs + cstart[k], cstart[k + 1] - cstart[k],
                              P[k * CHUNK + j])
                acc += <int64_t> perms[cstart[k] + i] * strides[k]
            out[i0 + j] = acc
        i0 += c
    free(U)
    free(P)
    return 0


cdef _check_tables(Py_ssize_t N, const double[::1] cdfs, const int64_t[::1] cdf_starts,
                  const int32_t[::1] guides, const int64_t[::1] guide_starts,
                  const int32_t[::1] perms):
    cdef Py_ssize_t k
    cdef int64_t n, K, g
    if N < 1:
        raise ValueError("draw_linear: at least one mode is needed")
    if cdf_starts.shape[0] != N + 1 or guide_starts.shape[0] != N + 1:
        raise ValueError(f"draw_linear: cdf_starts and guide_starts need {N + 1} entries "
                         f"(one more than the modes), got {cdf_starts.shape[0]} and "
                         f"{guide_starts.shape[0]}")
    if cdf_starts[0] != 0 or guide_starts[0] != 0:
        raise ValueError("draw_linear: cdf_starts and guide_starts must start at 0")
    for k in range(N):
        if cdf_starts[k + 1] - cdf_starts[k] < 1:
            raise ValueError(f"draw_linear: mode {k} has an empty distribution")
        if guide_starts[k + 1] - guide_starts[k] < 2:
            raise ValueError(f"draw_linear: mode {k} has a guide table of fewer than 2 entries")
    if cdf_starts[N] > cdfs.shape[0] or cdf_starts[N] > perms.shape[0]:
        raise ValueError("draw_linear: cdfs or perms is shorter than cdf_starts says")
    if guide_starts[N] > guides.shape[0]:
        raise ValueError("draw_linear: guides is shorter than guide_starts says")
    for k in range(N):
        n = cdf_starts[k + 1] - cdf_starts[k]
        for g in range(guide_starts[k], guide_starts[k + 1]):
            if guides[g] < 0 or guides[g] > n:
                raise ValueError(f"draw_linear: mode {k}'s guide table holds {guides[g]}, "
                                 f"outside [0, {n}]")
        for g in range(cdf_starts[k], cdf_starts[k + 1]):
            if perms[g] < 0 or perms[g] >= n:
                raise ValueError(f"draw_linear: mode {k}'s permutation holds {perms[g]}, "
                                 f"outside [0, {n})")


def draw_linear(int64_t[::1] out, seed, int64_t start, const double[::1] cdfs,
                const int64_t[::1] cdf_starts, const int32_t[::1] guides,
                const int64_t[::1] guide_starts, const int32_t[::1] perms,
                const int64_t[::1] strides, int num_threads=1):
    """Linear indices of the draws ``start .. start + len(out) - 1``, into ``out``.

    Mode ``k`` (of ``N = len(strides)``) has the cumulative distribution
    ``cdf = cdfs[cdf_starts[k]:cdf_starts[k + 1]]`` (increasing, last entry 1.0), the guide
    table ``g = guides[guide_starts[k]:guide_starts[k + 1]]`` of ``K + 1`` entries,
    ``g[b] = searchsorted(cdf, b / K, "right")`` (``b / K`` as a double), and the permutation
    ``perms[cdf_starts[k]:cdf_starts[k + 1]]`` of its indices.  Draw ``d``'s coordinate in
    mode ``k`` is ``perm[min(searchsorted(cdf, u, "right"), n - 1)]``, ``u`` the top 53 bits
    of ``rand(sample_key(key, d), k)`` over 2**53 (``key``: stream :data:`STREAM_COORDS` of
    ``seed``; ``sktf_rng.h``), found by a scan of the CDF up from ``g[floor(u K) - 1]``; and
    ``out[d - start] = sum_k coord_k * strides[k]``.

    The caller makes sure that the linear indices fit in int64.

    Parameters
    ----------
    out : int64 array
        Receives one linear index per draw.
    seed : int
        Seed of the generator (taken modulo 2**64).
    start : int
        Draw number of ``out[0]``.
    cdfs, cdf_starts, guides, guide_starts, perms, strides : arrays
        The modes' tables, as above: float64, int64, int32, int64, int32, int64
        (``cdf_starts`` and ``guide_starts`` have ``N + 1`` entries).
    num_threads : int, default=1
        Threads to draw with (the draws do not depend on it).
    """
    cdef Py_ssize_t N = strides.shape[0]
    cdef Py_ssize_t n = out.shape[0]
    cdef Py_ssize_t nb, b
    cdef uint64_t ckey = _key(seed, STREAM_COORDS_C)
    cdef int failed = 0
    _check_tables(N, cdfs, cdf_starts, guides, guide_starts, perms)
    if start < 0:
        raise ValueError(f"draw_linear: start must be >= 0, got {start}")
    if n == 0:
        return
    nb = _nblocks(n, num_threads)
    cdef int64_t* po = &out[0]
    cdef const double* pc = &cdfs[0]
    cdef const int64_t* pcs = &cdf_starts[0]
    cdef const int32_t* pg = &guides[0]
    cdef const int64_t* pgs = &guide_starts[0]
    cdef const int32_t* pp = &perms[0]
    cdef const int64_t* ps = &strides[0]
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        failed += _draw_block(po, n * b // nb, n * (b + 1) // nb, ckey, start, N, pc, pcs, pg,
                           pgs, pp, ps)
    if failed:
        raise MemoryError()


def zipf_codes(const double[::1] cdf, const int32_t[::1] guide, const double[::1] u):
    """``min(searchsorted(cdf, u, "right"), len(cdf) - 1)`` through the guide table
    ``guide`` (see :func:`draw_linear`), for uniforms ``u`` in [0, 1): the inverse of the
    distribution that :func:`draw_linear` applies, for one mode (int64 array)."""
    cdef Py_ssize_t i, m = u.shape[0]
    cdef int64_t n = cdf.shape[0], K = guide.shape[0] - 1
    if n < 1 or K < 1:
        raise ValueError("zipf_codes: needs a non-empty cdf and a guide table of >= 2 entries")
    for i in range(K + 1):
        if guide[i] < 0 or guide[i] > n:
            raise ValueError(f"zipf_codes: the guide table holds {guide[i]}, outside [0, {n}]")
    for i in range(m):
        if not (0.0 <= u[i] < 1.0):
            raise ValueError(f"zipf_codes: u[{i}] = {u[i]!r} lies outside [0, 1)")
    out = np.empty(m, dtype=np.int64)
    cdef int64_t[::1] o = out
    with nogil:
        for i in range(m):
            o[i] = _scan_cdf(u[i], &cdf[0], n, guide[_guide_bin(u[i], K)])
    return out


# ------------------------------------------------------------------------ distinct keys
# A pass over sorted keys handles the runs of equal keys that *start* in its block (a run
# may go on into the next blocks): the run starts are what the distinct keys are.

cdef inline bint _starts_run(const int64_t* k, Py_ssize_t i) noexcept nogil:
    return i == 0 or k[i] != k[i - 1]


cdef inline bint _kept(int64_t key, uint64_t pkey, bint select, uint64_t max_prio,
                       int64_t max_key) noexcept nogil:
    cdef uint64_t p
    if not select:
        return True
    p = _priority(pkey, key)
    return p < max_prio or (p == max_prio and key <= max_key)


cdef int64_t _count_kept(const int64_t* k, Py_ssize_t lo, Py_ssize_t hi, uint64_t pkey,
                         bint select, uint64_t max_prio, int64_t max_key) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t c = 0
    for i in range(lo, hi):
        if _starts_run(k, i) and _kept(k[i], pkey, select, max_prio, max_key):
            c += 1
    return c


cdef void _write_kept(const int64_t* k, int64_t* dst, Py_ssize_t lo, Py_ssize_t hi,
                      uint64_t pkey, bint select, uint64_t max_prio,
                      int64_t max_key) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t j = 0
    for i in range(lo, hi):
        if _starts_run(k, i) and _kept(k[i], pkey, select, max_prio, max_key):
            dst[j] = k[i]
            j += 1


cdef int64_t* _block_offsets(const int64_t* k, Py_ssize_t n, Py_ssize_t nb, uint64_t pkey,
                             bint select, uint64_t max_prio, int64_t max_key) except NULL:
    """Per block, the distinct (and kept) keys before it; entry ``nb`` is their total."""
    cdef int64_t* offs = <int64_t*> calloc(nb + 1, sizeof(int64_t))
    cdef Py_ssize_t b
    if offs == NULL:
        raise MemoryError()
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        offs[b + 1] = _count_kept(k, n * b // nb, n * (b + 1) // nb, pkey, select, max_prio,
                                  max_key)
    for b in range(nb):
        offs[b + 1] += offs[b]
    return offs


def count_unique(const int64_t[::1] keys, int num_threads=1):
    """Number of distinct values of the sorted array ``keys``."""
    cdef Py_ssize_t n = keys.shape[0]
    if n == 0:
        return 0
    cdef Py_ssize_t nb = _nblocks(n, num_threads)
    cdef int64_t* offs = _block_offsets(&keys[0], n, nb, 0, False, 0, 0)
    cdef int64_t total = offs[nb]
    free(offs)
    return total


# ------------------------------------------------------------------------ merge
cdef inline Py_ssize_t _lower_bound(const int64_t* k, Py_ssize_t n, int64_t x) noexcept nogil:
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        if k[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef int64_t _merge_block(const int64_t* a, Py_ssize_t a0, Py_ssize_t a1, const int64_t* b,
                          Py_ssize_t b0, Py_ssize_t b1, int64_t* out) noexcept nogil:
    """The distinct values of ``a[a0:a1]`` and ``b[b0:b1]`` (sorted) in increasing order:
    counted (``out`` NULL) or written.  Without branches on the data: every value taken is
    written at the slot of the last distinct one or the next (a repeat writes the same value
    again), and the count moves on when the value differs from the last."""
    cdef int64_t c, x, y, v, last
    cdef bint take_a, new
    if a0 >= a1 and b0 >= b1:
        return 0
    # the first value
    if b0 >= b1 or (a0 < a1 and a[a0] <= b[b0]):
        last = a[a0]
        a0 += 1
    else:
        last = b[b0]
        b0 += 1
    c = 1
    if out != NULL:
        out[0] = last
    # (the test of ``out`` is the same at every step: the compiler takes it out of the loop)
    while a0 < a1 and b0 < b1:
        x = a[a0]
        y = b[b0]
        take_a = x <= y
        v = x if take_a else y
        a0 += take_a
        b0 += not take_a
        c += v != last
        if out != NULL:
            out[c - 1] = v
        last = v
    # the rest of one of them
    if a0 >= a1:
        a = b
        a0 = b0
        a1 = b1
    while a0 < a1:
        v = a[a0]
        a0 += 1
        new = v != last
        if new:
            if out != NULL:
                out[c] = v
            c += 1
            last = v
    return c


def merge_unique(const int64_t[::1] a, const int64_t[::1] b, out=None, int num_threads=1):
    """The distinct values of the sorted arrays ``a`` and ``b`` (each may repeat values):
    written into ``out`` (an int64 array with room for them, overlapping neither input) in
    increasing order when it is given; returns how many there are.

    The work is cut by values: block ``t`` takes the values from the ``t``-th cut of the
    longer array (moved back to the start of its run of equal values) up to the next cut,
    from both arrays, so that no value is split between blocks.
    """
    cdef Py_ssize_t n1 = a.shape[0], n2 = b.shape[0]
    cdef Py_ssize_t nb, t, cut
    cdef int64_t total
    cdef int64_t[::1] o
    cdef const int64_t* p1 = &a[0] if n1 else NULL
    cdef const int64_t* p2 = &b[0] if n2 else NULL
    cdef const int64_t* tmp
    if n1 < n2:
        # cut the longer one
        tmp = p1
        p1 = p2
        p2 = tmp
        n1, n2 = n2, n1
    if n1 == 0:
        return 0
    nb = _nblocks(n1 + n2, num_threads)
    cdef int64_t* cut1 = <int64_t*> malloc((nb + 1) * sizeof(int64_t))
    cdef int64_t* cut2 = <int64_t*> malloc((nb + 1) * sizeof(int64_t))
    cdef int64_t* offs = <int64_t*> calloc(nb + 1, sizeof(int64_t))
    try:
        if cut1 == NULL or cut2 == NULL or offs == NULL:
            raise MemoryError()
        cut1[0] = 0
        cut2[0] = 0
        cut1[nb] = n1
        cut2[nb] = n2
        for t in range(1, nb):
            cut = n1 * t // nb
            cut = _lower_bound(p1, cut, p1[cut])     # the start of p1[cut]'s run
            if cut < cut1[t - 1]:
                cut = cut1[t - 1]
            cut1[t] = cut
            cut2[t] = _lower_bound(p2, n2, p1[cut]) if cut < n1 else n2
            if cut2[t] < cut2[t - 1]:
                cut2[t] = cut2[t - 1]
        for t in prange(nb, nogil=True, schedule="static", num_threads=nb):
            offs[t + 1] = _merge_block(p1, cut1[t], cut1[t + 1], p2, cut2[t], cut2[t + 1],
                                       NULL)
        for t in range(nb):
            offs[t + 1] += offs[t]
        total = offs[nb]
        if out is None:
            return total
        o = out
        if o.shape[0] < total:
            raise ValueError(f"merge_unique: out has room for {o.shape[0]} values, the arrays "
                             f"hold {total} distinct ones")
        if total == 0:
            return 0
        if _overlap(&o[0], o.shape[0], p1, n1) or _overlap(&o[0], o.shape[0], p2, n2):
            raise ValueError("merge_unique: out overlaps an input")
        _merge_write(p1, p2, cut1, cut2, offs, nb, &o[0])
        return total
    finally:
        free(cut1)
        free(cut2)
        free(offs)


cdef void _merge_write(const int64_t* p1, const int64_t* p2, const int64_t* cut1,
                       const int64_t* cut2, const int64_t* offs, Py_ssize_t nb,
                       int64_t* out) noexcept:
    cdef Py_ssize_t t
    for t in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _merge_block(p1, cut1[t], cut1[t + 1], p2, cut2[t], cut2[t + 1], out + offs[t])


cdef void _prio_hist(const int64_t* k, Py_ssize_t lo, Py_ssize_t hi, uint64_t pkey, int shift,
                     int64_t* hist) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(lo, hi):
        if _starts_run(k, i):
            hist[_priority(pkey, k[i]) >> shift] += 1


def priority_histogram(const int64_t[::1] keys, seed, int bits, int num_threads=1):
    """Histogram of the top ``bits`` bits (1..20) of the priorities of the distinct values of
    the sorted array ``keys`` (int64 array of ``2**bits`` counts).  The priority of key ``x``
    is ``sample_key(key, x)`` of stream :data:`STREAM_PRIORITY` of ``seed``: a pseudo-random
    64-bit word that depends on the seed and the key only."""
    if bits < 1 or bits > 20:
        raise ValueError(f"priority_histogram: bits must be in [1, 20], got {bits}")
    cdef Py_ssize_t n = keys.shape[0]
    cdef Py_ssize_t nb = _nblocks(n, num_threads)
    cdef Py_ssize_t b, d, D = 1 << bits
    cdef uint64_t pkey = _key(seed, STREAM_PRIORITY_C)
    out = np.zeros(D, dtype=np.int64)
    if n == 0:
        return out
    cdef int64_t[::1] o = out
    cdef int64_t* hist = <int64_t*> calloc(nb * D, sizeof(int64_t))
    if hist == NULL:
        raise MemoryError()
    cdef const int64_t* pk = &keys[0]
    try:
        for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
            _prio_hist(pk, n * b // nb, n * (b + 1) // nb, pkey, 64 - bits, hist + b * D)
        for b in range(nb):
            for d in range(D):
                o[d] += hist[b * D + d]
    finally:
        free(hist)
    return out


cdef int64_t _members_block(const int64_t* k, Py_ssize_t lo, Py_ssize_t hi, uint64_t pkey,
                            int shift, uint64_t bucket, uint64_t* prio_out,
                            int64_t* key_out) noexcept nogil:
    """The distinct keys of a block whose priority lies in ``bucket``: counted (outputs NULL)
    or written."""
    cdef Py_ssize_t i
    cdef int64_t c = 0
    cdef uint64_t p
    for i in range(lo, hi):
        if _starts_run(k, i):
            p = _priority(pkey, k[i])
            if (p >> shift) == bucket:
                if prio_out != NULL:
                    prio_out[c] = p
                    key_out[c] = k[i]
                c += 1
    return c


def priority_members(const int64_t[::1] keys, seed, int64_t bucket, int bits,
                     int num_threads=1):
    """The distinct values of the sorted array ``keys`` whose priority's top ``bits`` bits
    are ``bucket`` (see :func:`priority_histogram`), in the order of ``keys``: a pair of
    arrays (priorities as uint64, keys as int64)."""
    if bits < 1 or bits > 20:
        raise ValueError(f"priority_members: bits must be in [1, 20], got {bits}")
    if bucket < 0 or bucket >= (1 << bits):
        raise ValueError(f"priority_members: bucket must be in [0, 2**{bits}), got {bucket}")
    cdef Py_ssize_t n = keys.shape[0]
    cdef Py_ssize_t nb, b
    cdef uint64_t pkey = _key(seed, STREAM_PRIORITY_C)
    cdef int shift = 64 - bits
    cdef const int64_t* pk
    cdef int64_t* offs
    cdef uint64_t[::1] pv
    cdef int64_t[::1] mv
    if n == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    nb = _nblocks(n, num_threads)
    pk = &keys[0]
    offs = <int64_t*> calloc(nb + 1, sizeof(int64_t))
    if offs == NULL:
        raise MemoryError()
    try:
        for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
            offs[b + 1] = _members_block(pk, n * b // nb, n * (b + 1) // nb, pkey, shift,
                                         <uint64_t> bucket, NULL, NULL)
        for b in range(nb):
            offs[b + 1] += offs[b]
        prios = np.empty(offs[nb], dtype=np.uint64)
        members = np.empty(offs[nb], dtype=np.int64)
        if offs[nb] > 0:
            pv = prios
            mv = members
            _members_write(pk, n, nb, pkey, shift, <uint64_t> bucket, offs, &pv[0], &mv[0])
        return prios, members
    finally:
        free(offs)


cdef void _members_write(const int64_t* pk, Py_ssize_t n, Py_ssize_t nb, uint64_t pkey,
                         int shift, uint64_t bucket, const int64_t* offs, uint64_t* pp,
                         int64_t* pm) noexcept:
    cdef Py_ssize_t b
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _members_block(pk, n * b // nb, n * (b + 1) // nb, pkey, shift, bucket,
                       pp + offs[b], pm + offs[b])


def compact(const int64_t[::1] src, int64_t[::1] dst, seed=0, threshold=None,
            int num_threads=1):
    """The distinct values of the sorted array ``src``, into ``dst`` (in increasing order);
    returns how many.

    With ``threshold = (max_priority, max_key)`` only the values ``x`` whose pair
    ``(priority(x), x)`` is at most ``(max_priority, max_key)`` (lexicographically) are
    kept; ``priority`` is that of :func:`priority_histogram` for ``seed``.  ``dst`` must
    not overlap ``src`` and must have room for the values kept (else ValueError, before
    anything is written).
    """
    cdef Py_ssize_t n = src.shape[0]
    cdef Py_ssize_t m = dst.shape[0]
    cdef bint select = threshold is not None
    cdef uint64_t max_prio = 0
    cdef int64_t max_key = 0
    cdef uint64_t pkey = _key(seed, STREAM_PRIORITY_C)
    cdef Py_ssize_t nb, b
    if select:
        max_prio = <uint64_t> (int(threshold[0]) & 0xFFFFFFFFFFFFFFFF)
        max_key = int(threshold[1])
    if n == 0:
        return 0
    cdef const int64_t* ps = &src[0]
    cdef int64_t* pd = &dst[0] if m else NULL
    if _overlap(pd, m, ps, n):
        raise ValueError("compact: dst overlaps src")
    nb = _nblocks(n, num_threads)
    cdef int64_t* offs = _block_offsets(ps, n, nb, pkey, select, max_prio, max_key)
    cdef int64_t total = offs[nb]
    try:
        if total > m:
            raise ValueError(f"compact: dst has room for {m} values, {total} are kept")
        for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
            _write_kept(ps, pd + offs[b] if pd != NULL else NULL, n * b // nb,
                        n * (b + 1) // nb, pkey, select, max_prio, max_key)
    finally:
        free(offs)
    return total


# ------------------------------------------------------------------------ rows and values
cdef int _split_block(const int64_t* lin, int64_t* subs, Py_ssize_t lo, Py_ssize_t hi,
                      Py_ssize_t N, const int64_t* shape) noexcept nogil:
    """Rows ``lo .. hi - 1``; 1 when some index lies outside the shape (those rows are
    left unspecified)."""
    cdef Py_ssize_t i, k
    cdef int64_t x, s
    cdef int bad = 0
    cdef int64_t* row
    for i in range(lo, hi):
        x = lin[i]
        row = subs + i * N
        if x < 0:
            bad = 1
            continue
        for k in range(N - 1, 0, -1):
            s = shape[k]
            row[k] = x % s
            x = x // s
        row[0] = x
        if x >= shape[0]:
            bad = 1
    return bad


def split_linear(const int64_t[::1] lin, int64_t[:, ::1] subs, const int64_t[::1] shape,
                 int num_threads=1):
    """The row-major coordinates of the linear indices ``lin`` of a tensor of ``shape``:
    ``subs[i]`` (an ``len(lin) x N`` int64 array) such that
    ``lin[i] = sum_k subs[i, k] * prod(shape[k + 1:])``.  ValueError when an index lies
    outside the shape."""
    cdef Py_ssize_t n = lin.shape[0]
    cdef Py_ssize_t N = shape.shape[0]
    cdef Py_ssize_t nb, b, k
    cdef int bad = 0
    if N < 1:
        raise ValueError("split_linear: the shape needs at least one mode")
    if subs.shape[0] != n or subs.shape[1] != N:
        raise ValueError(f"split_linear: subs must have shape ({n}, {N}), got "
                         f"({subs.shape[0]}, {subs.shape[1]})")
    for k in range(N):
        if shape[k] < 1:
            raise ValueError(f"split_linear: mode {k} has length {shape[k]} < 1")
    if n == 0:
        return
    nb = _nblocks(n, num_threads)
    cdef const int64_t* pl = &lin[0]
    cdef int64_t* ps = &subs[0, 0]
    cdef const int64_t* psh = &shape[0]
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        bad += _split_block(pl, ps, n * b // nb, n * (b + 1) // nb, N, psh)
    if bad:
        raise ValueError("split_linear: a linear index lies outside the shape")


cdef inline int64_t _value(uint64_t vkey, int64_t pos, uint64_t t) noexcept nogil:
    """Count 1..4 number ``t`` of the nonzero at position ``pos``."""
    return 1 + sktf_below(sktf_rand(sktf_sample_key(vkey, pos), t), 4)


cdef void _values_block(value_t* out, Py_ssize_t lo, Py_ssize_t hi, uint64_t vkey,
                        int64_t start) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(lo, hi):
        out[i] = <value_t> _value(vkey, start + i, 0)


def draw_values(value_t[::1] out, seed, int64_t start=0, int num_threads=1):
    """Counts 1..4 for the nonzeros at positions ``start .. start + len(out) - 1``, into the
    float32 or float64 array ``out``: ``1 + below(rand(sample_key(key, pos), 0), 4)`` with
    ``key`` the stream :data:`STREAM_VALUES` of ``seed``."""
    cdef Py_ssize_t n = out.shape[0]
    cdef Py_ssize_t nb, b
    cdef uint64_t vkey = _key(seed, STREAM_VALUES_C)
    if start < 0:
        raise ValueError(f"draw_values: start must be >= 0, got {start}")
    if n == 0:
        return
    nb = _nblocks(n, num_threads)
    cdef value_t* po = &out[0]
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _values_block(po, n * b // nb, n * (b + 1) // nb, vkey, start)


cdef void _summed_block(const int64_t* k, Py_ssize_t n, value_t* out, Py_ssize_t lo,
                        Py_ssize_t hi, uint64_t vkey, int64_t j) noexcept nogil:
    cdef Py_ssize_t i, e
    cdef double s
    for i in range(lo, hi):
        if _starts_run(k, i):
            s = 0
            e = i
            while e < n and k[e] == k[i]:
                s += _value(vkey, j, <uint64_t> (e - i))
                e += 1
            out[j] = <value_t> s
            j += 1


def summed_values(const int64_t[::1] keys, value_t[::1] out, seed, int num_threads=1):
    """Values of the distinct keys of the sorted array ``keys`` (with repeats): the ``j``-th
    distinct key, repeated ``m`` times, gets the sum of the counts 1..4 number ``0 .. m - 1``
    of position ``j`` (number 0 is what :func:`draw_values` gives position ``j``).  ``out``
    has one entry per distinct key (:func:`count_unique`)."""
    cdef Py_ssize_t n = keys.shape[0]
    cdef Py_ssize_t nb, b
    cdef uint64_t vkey = _key(seed, STREAM_VALUES_C)
    if n == 0:
        if out.shape[0] != 0:
            raise ValueError(f"summed_values: out has {out.shape[0]} entries, keys 0 distinct "
                             f"values")
        return
    cdef const int64_t* pk = &keys[0]
    nb = _nblocks(n, num_threads)
    cdef int64_t* offs = _block_offsets(pk, n, nb, 0, False, 0, 0)
    try:
        if offs[nb] != out.shape[0]:
            raise ValueError(f"summed_values: out has {out.shape[0]} entries, keys "
                             f"{offs[nb]} distinct values")
        _summed_all(pk, n, &out[0], nb, vkey, offs)
    finally:
        free(offs)


cdef void _summed_all(const int64_t* pk, Py_ssize_t n, value_t* po, Py_ssize_t nb,
                      uint64_t vkey, const int64_t* offs) noexcept:
    cdef Py_ssize_t b
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _summed_block(pk, n, po, n * b // nb, n * (b + 1) // nb, vkey, offs[b])
