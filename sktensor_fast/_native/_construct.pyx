# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Compiled passes that build the canonical form of a sparse tensor.

The canonical form of :class:`~sktensor_fast.SparseTensor` is: coordinates inside the shape,
finite values, rows sorted lexicographically (mode 0 slowest), repeated coordinates summed and
zeros dropped.  It is built from a packed key: the coordinate of mode ``k`` shifted into its
own bit field, mode 0 in the highest bits, so that the order of the keys is the lexicographic
order of the rows and a coordinate is recovered with a shift and a mask.

1. :func:`scan` checks every coordinate against the shape and every value for finiteness,
   counts the keys by their top digit and reports whether they already increase (then
   nothing is sorted).  It only reads the input (and writes the keys when asked to).
2. :func:`sort_into` works inside the arrays of the result: a stable scatter by the top digit
   (the keys into the tail of the coordinate array, the values into the value array), a
   least-significant-digit radix sort of every bucket in cache with the sums of repeated keys,
   and the decoding of the keys into rows from the front (a bucket too large for one thread
   is sorted by all of them with :func:`radix_sort`).  The only memory it touches besides
   the result is a little scratch per thread, which matters as much as the work: the first
   touch of fresh pages costs about as much as a pass over them.

The blocks of a pass are contiguous ranges of the input in order, so the sort is stable and
every result (order, sums) is the same whatever the number of threads.  Tensors whose packed key
needs more than 64 bits are sorted by the caller another way (NumPy's lexsort).

:func:`mode_order` is the stable counting sort of the nonzeros by one mode's coordinate that
the storage formats and the OpenCL backend use, :func:`narrow` copies coordinates into a
narrower integer type, and :func:`value_stats` is one pass over the values that answers the
questions estimators ask of them (counts, binary data, sums).
"""
cimport cython
from cython.parallel cimport prange, threadid
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset, memcpy, memmove
from libc.math cimport fabs, floor
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                          uint64_t)

import time

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    #define SKN_HAVE_OPENMP 1
    static int skn_max_threads(void) { return omp_get_max_threads(); }
    #else
    #define SKN_HAVE_OPENMP 0
    static int skn_max_threads(void) { return 1; }
    #endif
    """
    int SKN_HAVE_OPENMP
    int skn_max_threads() nogil

cdef extern from *:
    """
    #if defined(__linux__)
    #include <sys/mman.h>
    #include <unistd.h>
    static int skn_no_huge_pages(void* p, size_t nbytes) {
    #ifdef MADV_NOHUGEPAGE
        size_t page = (size_t) sysconf(_SC_PAGESIZE);
        size_t lo = ((size_t) p + page - 1) / page * page;
        size_t hi = ((size_t) p + nbytes) / page * page;
        if (hi <= lo) return 0;
        return madvise((void*) lo, hi - lo, MADV_NOHUGEPAGE) == 0 ? 1 : -1;
    #else
        return 0;
    #endif
    }
    #else
    static int skn_no_huge_pages(void* p, size_t nbytes) { return 0; }
    #endif
    """
    int skn_no_huge_pages(void* p, size_t nbytes) nogil

HAVE_OPENMP = bool(SKN_HAVE_OPENMP)

#: items a block should hold at least before another thread is worth starting
DEF MIN_BLOCK_C = 32768
MIN_BLOCK = MIN_BLOCK_C


def max_threads():
    """Threads OpenMP would use by default (honours OMP_NUM_THREADS and threadpoolctl)."""
    return skn_max_threads()


cdef inline Py_ssize_t _nblocks(Py_ssize_t n, int num_threads) noexcept nogil:
    cdef Py_ssize_t nb = n // MIN_BLOCK_C
    if nb > num_threads:
        nb = num_threads
    if nb < 1:
        nb = 1
    return nb


def small_pages(arr):
    """Ask the kernel to back ``arr`` (not yet touched) with base-size pages instead of
    transparent huge pages.  Returns 1 when it was asked, 0 where the platform has no such
    advice, -1 when the call failed (nothing changes then)."""
    cdef cnp.ndarray a = arr
    if not cnp.PyArray_ISCARRAY(a) or a.nbytes == 0:
        return 0
    return skn_no_huge_pages(cnp.PyArray_DATA(a), <size_t> a.nbytes)


def num_blocks(Py_ssize_t n, int num_threads):
    """Blocks the passes cut ``n`` items into for ``num_threads`` threads."""
    return _nblocks(n, num_threads)


ctypedef fused index_t:
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    uint16_t
    uint32_t
    uint64_t

ctypedef fused value_t:
    float
    double

ctypedef fused order_t:
    int32_t
    int64_t

ctypedef fused coord_t:
    int32_t
    int64_t


# ----------------------------------------------------------------------------- scan
# per-block report of scan, in int64 slots
DEF L_BAD_ROW = 0      # first row with a coordinate outside the shape (or n)
DEF L_BAD_VAL = 1      # first non-finite value (or n)
DEF L_DESC = 2         # 1 when some key is smaller than the one before it (inside the block)
DEF L_EQUAL = 3        # 1 when some key equals the one before it (inside the block)
DEF L_ZERO = 4         # number of zero values
DEF L_SLOTS = 5


cdef inline uint64_t _row_key(const index_t* row, Py_ssize_t N,
                              const int64_t* shifts) noexcept nogil:
    """Packed key of one row whose coordinates were checked."""
    cdef Py_ssize_t k
    cdef uint64_t key = 0
    for k in range(N):
        key = key | ((<uint64_t> (<int64_t> row[k])) << shifts[k])
    return key


cdef void _scan_block(const index_t* subs, const value_t* vals, Py_ssize_t N,
                      const uint64_t* shape, const int64_t* shifts, uint64_t* keys,
                      Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t n, int64_t* rep, int64_t* hist,
                      int top_shift) noexcept nogil:
    cdef Py_ssize_t i, k
    cdef uint64_t key, u, prev = 0
    cdef value_t v
    cdef int64_t bad_row = n, bad_val = n, desc = 0, equal = 0, zero = 0
    for i in range(lo, hi):
        key = 0
        for k in range(N):
            # negative coordinates of signed types wrap to huge unsigned ones
            u = <uint64_t> (<int64_t> subs[i * N + k])
            if u >= shape[k]:
                bad_row = i
                break
            key = key | (u << shifts[k])
        if bad_row < n:
            break
        if keys != NULL:
            keys[i] = key
        hist[key >> top_shift] += 1
        v = vals[i]
        if v - v != 0:          # NaN or infinite
            if bad_val == n:
                bad_val = i
        elif v == 0:
            zero += 1
        if i > lo:
            if key < prev:
                desc = 1
            elif key == prev:
                equal = 1
        prev = key
    rep[L_BAD_ROW] = bad_row
    rep[L_BAD_VAL] = bad_val
    rep[L_DESC] = desc
    rep[L_EQUAL] = equal
    rep[L_ZERO] = zero


def scan(const index_t[:, ::1] subs, const value_t[::1] vals, shape, shifts,
         int64_t[:, ::1] hist, int top_shift, uint64_t[::1] keys=None, int num_threads=1):
    """Check every row and count the keys by their top digit, in one pass.

    Every coordinate is checked against ``shape`` and every value for finiteness; the packed
    key of every row (mode ``k``'s coordinate shifted left by ``shifts[k]``) is counted in
    ``hist`` (one row per block, :func:`num_blocks`, zeroed by the caller) by its digit above
    ``top_shift``, and written to ``keys`` when given.

    Returns a dict: ``bad_row`` (first row holding a coordinate outside ``[0, shape)``, or -1),
    ``bad_val`` (first non-finite value before that row, or -1), ``order`` (2: the keys
    strictly increase, 1: they never decrease, 0: unsorted) and ``zeros`` (number of zero
    values).  ``hist`` and ``keys`` are only meaningful when ``bad_row`` is -1.
    """
    cdef Py_ssize_t n = subs.shape[0]
    cdef Py_ssize_t N = subs.shape[1]
    cdef Py_ssize_t nb = _nblocks(n, num_threads)
    cdef Py_ssize_t b, k
    cdef uint64_t[::1] shp = np.asarray(shape, dtype=np.uint64)
    cdef int64_t[::1] sh = np.asarray(shifts, dtype=np.int64)
    cdef int64_t[:, ::1] rep = np.zeros((nb, L_SLOTS), dtype=np.int64)
    cdef uint64_t* pk = NULL
    cdef uint64_t ka, kb
    if vals.shape[0] != n or shp.shape[0] != N or sh.shape[0] != N:
        raise ValueError("scan: inconsistent array sizes")
    if hist.shape[0] != nb:
        raise ValueError("scan: the histogram needs one row per block")
    if keys is not None:
        if keys.shape[0] != n:
            raise ValueError("scan: keys has the wrong length")
        if n:
            pk = &keys[0]
    if n == 0:
        return {"bad_row": -1, "bad_val": -1, "order": 2, "zeros": 0}
    cdef const index_t* ps = &subs[0, 0]
    cdef const value_t* pv = &vals[0]
    cdef Py_ssize_t hstride = hist.shape[1]
    cdef int64_t* ph = &hist[0, 0]
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _scan_block(ps, pv, N, &shp[0], &sh[0], pk, n * b // nb, n * (b + 1) // nb, n,
                    &rep[b, 0], ph + b * hstride, top_shift)
    bad_row = n
    bad_val = n
    desc = equal = zeros = 0
    for b in range(nb):
        if rep[b, L_BAD_ROW] < n:
            bad_row = rep[b, L_BAD_ROW]
            # values after a bad row were not looked at; report those before it only
            if rep[b, L_BAD_VAL] < bad_val:
                bad_val = rep[b, L_BAD_VAL]
            break
        if rep[b, L_BAD_VAL] < bad_val:
            bad_val = rep[b, L_BAD_VAL]
        desc |= rep[b, L_DESC]
        equal |= rep[b, L_EQUAL]
        zeros += rep[b, L_ZERO]
        if b > 0:
            k = n * b // nb
            ka = _row_key(ps + (k - 1) * N, N, &sh[0])
            kb = _row_key(ps + k * N, N, &sh[0])
            if kb < ka:
                desc = 1
            elif kb == ka:
                equal = 1
    order = 0 if desc else (1 if equal else 2)
    return {"bad_row": -1 if bad_row == n else int(bad_row),
            "bad_val": -1 if bad_val == n else int(bad_val),
            "order": order, "zeros": int(zeros)}


# ----------------------------------------------------------------------------- radix sort
cdef void _count_block(const uint64_t* keys, Py_ssize_t lo, Py_ssize_t hi, int shift,
                       uint64_t mask, int64_t* hist) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(lo, hi):
        hist[(keys[i] >> shift) & mask] += 1


cdef void _scatter_block(const uint64_t* keys, const value_t* vals, uint64_t* dkeys,
                         value_t* dvals, Py_ssize_t lo, Py_ssize_t hi, int shift,
                         uint64_t mask, int64_t* pos) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t j
    cdef uint64_t key
    for i in range(lo, hi):
        key = keys[i]
        j = pos[(key >> shift) & mask]
        pos[(key >> shift) & mask] = j + 1
        dkeys[j] = key
        dvals[j] = vals[i]


cdef void _scatter_keys(const uint64_t* keys, uint64_t* dkeys, Py_ssize_t lo, Py_ssize_t hi,
                        int shift, uint64_t mask, int64_t* pos) noexcept nogil:
    cdef Py_ssize_t i
    cdef uint64_t key, d
    for i in range(lo, hi):
        key = keys[i]
        d = (key >> shift) & mask
        dkeys[pos[d]] = key
        pos[d] += 1


cdef Py_ssize_t _digit_offsets(int64_t* hist, Py_ssize_t nb, Py_ssize_t D) noexcept nogil:
    """The digits that occur in the counts ``hist[b * D + d]`` of ``nb`` blocks; when more
    than one, the counts become where each block's keys of each digit go (after every key of
    a smaller digit and the keys of that digit in the blocks before: a stable pass)."""
    cdef Py_ssize_t b, d, nd = 0
    cdef int64_t total, run = 0, c
    for d in range(D):
        total = 0
        for b in range(nb):
            total += hist[b * D + d]
        if total:
            nd += 1
    if nd > 1:
        for d in range(D):
            for b in range(nb):
                c = hist[b * D + d]
                hist[b * D + d] = run
                run += c
    return nd


def radix_plan(int nbits):
    """Digit widths of the passes for keys of ``nbits`` bits: 11 bits at most per pass, the
    passes as even as possible (fewer passes: less memory traffic)."""
    if nbits <= 0:
        return []
    npass = (nbits + 10) // 11
    width = (nbits + npass - 1) // npass
    plan = []
    left = nbits
    while left > 0:
        plan.append(min(width, left))
        left -= width
    return plan


def radix_sort(uint64_t[::1] keys, const value_t[::1] vals, uint64_t[::1] keys2,
               value_t[::1] vals1, value_t[::1] vals2, int nbits, int num_threads=1):
    """Stable sort of ``keys`` (their low ``nbits`` bits), ``vals`` carried along.

    ``keys`` is overwritten; ``vals`` is only read (it may be the caller's array).  ``keys2``,
    ``vals1`` and ``vals2`` are scratch of the same length.  Returns ``(k, v)``: which key
    buffer (0: ``keys``, 1: ``keys2``) and which value buffer (0: ``vals``, 1: ``vals1``,
    2: ``vals2``) hold the sorted result.  Passes whose digit is the same for every key are
    skipped.
    """
    cdef Py_ssize_t n = keys.shape[0]
    cdef Py_ssize_t nb = _nblocks(n, num_threads)
    cdef Py_ssize_t b, D
    cdef int shift = 0, width
    cdef uint64_t mask
    cdef uint64_t* src_k = &keys[0] if n else NULL
    cdef uint64_t* dst_k = &keys2[0] if n else NULL
    cdef uint64_t* tmp_k
    cdef const value_t* src_v = &vals[0] if n else NULL
    cdef value_t* dst_v = &vals2[0] if n else NULL
    cdef value_t* other_v = &vals1[0] if n else NULL
    cdef value_t* tmp_v
    cdef int key_buf = 0, val_buf = 0, dst_val_buf = 2, other_val_buf = 1
    cdef int64_t* hist = NULL
    if keys2.shape[0] < n or vals1.shape[0] < n or vals2.shape[0] < n or vals.shape[0] < n:
        raise ValueError("radix_sort: scratch arrays are too short")
    if n < 2:
        return 0, 0
    plan = radix_plan(nbits)
    hist = <int64_t*> malloc(nb * (1 << 11) * sizeof(int64_t))
    if hist == NULL:
        raise MemoryError()
    try:
        for width in plan:
            D = 1 << width
            mask = D - 1
            memset(hist, 0, nb * D * sizeof(int64_t))
            for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
                _count_block(src_k, n * b // nb, n * (b + 1) // nb, shift, mask, hist + b * D)
            # one digit for every key: this pass would not move anything
            if _digit_offsets(hist, nb, D) <= 1:
                shift += width
                continue
            for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
                _scatter_block(src_k, src_v, dst_k, dst_v, n * b // nb, n * (b + 1) // nb,
                               shift, mask, hist + b * D)
            shift += width
            # the destination becomes the source; the next destination is the other buffer
            tmp_k = src_k
            src_k = dst_k
            dst_k = tmp_k
            key_buf = 1 - key_buf
            src_v = dst_v
            val_buf = dst_val_buf
            tmp_v = dst_v
            dst_v = other_v
            other_v = tmp_v
            dst_val_buf, other_val_buf = other_val_buf, dst_val_buf
        return key_buf, val_buf
    finally:
        free(hist)


def radix_sort_keys(uint64_t[::1] keys, uint64_t[::1] scratch, int nbits, int num_threads=1):
    """Sort ``keys`` by their low ``nbits`` bits (least significant digit first, keys only:
    the passes of :func:`radix_sort` without values to carry).

    ``scratch`` is a buffer of at least the same length.  Returns which buffer holds the
    sorted keys: 0 for ``keys``, 1 for ``scratch`` (its first ``len(keys)`` entries); the
    other one holds garbage.  Passes whose digit is the same for every key are skipped.  Keys
    with bits set above ``nbits`` are ordered by their low bits only.
    """
    cdef Py_ssize_t n = keys.shape[0]
    cdef Py_ssize_t nb, b, D
    cdef int shift = 0, width, which = 0
    cdef uint64_t mask
    cdef uint64_t* src
    cdef uint64_t* dst
    cdef uint64_t* tmp
    cdef int64_t* hist = NULL
    if scratch.shape[0] < n:
        raise ValueError(f"radix_sort_keys: scratch has {scratch.shape[0]} entries, fewer than "
                         f"the {n} keys")
    if nbits < 0 or nbits > 64:
        raise ValueError(f"radix_sort_keys: nbits must be in [0, 64], got {nbits}")
    if n < 2:
        return 0
    src = &keys[0]
    dst = &scratch[0]
    nb = _nblocks(n, num_threads)
    hist = <int64_t*> malloc(nb * (1 << 11) * sizeof(int64_t))
    if hist == NULL:
        raise MemoryError()
    try:
        for width in radix_plan(nbits):
            D = 1 << width
            mask = D - 1
            memset(hist, 0, nb * D * sizeof(int64_t))
            for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
                _count_block(src, n * b // nb, n * (b + 1) // nb, shift, mask, hist + b * D)
            if _digit_offsets(hist, nb, D) > 1:
                for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
                    _scatter_keys(src, dst, n * b // nb, n * (b + 1) // nb, shift, mask,
                                  hist + b * D)
                tmp = src
                src = dst
                dst = tmp
                which = 1 - which
            shift += width
        return which
    finally:
        free(hist)


# ----------------------------------------------------------------------------- sort_into
DEF SMALL_SORT = 32
DEF MAX_DIGIT = 11
DEF MAX_PASSES = 16        # 64 bits in digits of 4 bits or more
DEF CNT_SLOTS = 16 << 11   # MAX_PASSES << MAX_DIGIT


cdef int _place_block(const index_t* src, Py_ssize_t Ns, const int64_t* kshifts,
                      const value_t* vals, Py_ssize_t lo, Py_ssize_t hi, int top_shift,
                      int64_t* pos, const int64_t* bstart, uint64_t Dt, uint64_t* dkeys,
                      value_t* dvals) noexcept nogil:
    """Stable scatter of the keys of rows ``lo:hi`` (packed again from ``src``) and their
    values by the digit above ``top_shift``.  Returns 1, having stopped, at a key that the
    counts do not account for (a digit outside them, or a bucket already full): the writes
    stay inside the arrays whatever the caller passed."""
    cdef Py_ssize_t i
    cdef int64_t j
    cdef uint64_t key, d
    for i in range(lo, hi):
        key = _row_key(src + i * Ns, Ns, kshifts)
        d = key >> top_shift
        if d >= Dt:
            return 1
        j = pos[d]
        if j >= bstart[d + 1]:
            return 1
        pos[d] = j + 1
        dkeys[j] = key
        dvals[j] = vals[i]
    return 0


cdef void _insertion(uint64_t* k, value_t* v, Py_ssize_t m) noexcept nogil:
    cdef Py_ssize_t i, j
    cdef uint64_t key
    cdef value_t val
    for i in range(1, m):
        key = k[i]
        val = v[i]
        j = i
        while j > 0 and k[j - 1] > key:
            k[j] = k[j - 1]
            v[j] = v[j - 1]
            j -= 1
        k[j] = key
        v[j] = val


cdef int _digit_width(Py_ssize_t m, int lowbits, int max_digit) noexcept nogil:
    """Width of the digits sorting ``m`` keys by ``lowbits`` bits: as few passes as digits of
    at most ``max_digit`` bits allow (no wider than ``m`` needs: the counts of a digit are
    cleared and summed on every pass), the passes as even as possible."""
    cdef int w = max_digit, p
    while w > 4 and ((<Py_ssize_t> 1) << (w - 1)) > m:
        w -= 1
    p = (lowbits + w - 1) // w
    return (lowbits + p - 1) // p


cdef void _lsd(uint64_t* k, value_t* v, uint64_t* sk, value_t* sv, Py_ssize_t m,
               int lowbits, int max_digit, int64_t* cnt) noexcept nogil:
    """Stable sort of ``k[:m]`` by its low ``lowbits`` bits, ``v`` along; the result ends in
    ``k``/``v``; ``sk``/``sv`` are scratch of ``m`` entries, ``cnt`` of ``CNT_SLOTS``.  One
    pass counts the digits of every pass; passes whose digit is the same for every key are
    skipped."""
    cdef Py_ssize_t i, d, D
    cdef int p, P, w, shift
    cdef int64_t run, c, j
    cdef uint64_t mask, key
    cdef uint64_t* a = k
    cdef uint64_t* bk = sk
    cdef uint64_t* tk
    cdef value_t* av = v
    cdef value_t* bv = sv
    cdef value_t* tv
    cdef int64_t* cp
    for i in range(1, m):
        if k[i] < k[i - 1]:
            break
    else:
        return
    if m <= SMALL_SORT:
        _insertion(k, v, m)
        return
    w = _digit_width(m, lowbits, max_digit)
    P = (lowbits + w - 1) // w
    D = (<Py_ssize_t> 1) << w
    mask = D - 1
    memset(cnt, 0, P * D * sizeof(int64_t))
    for i in range(m):
        key = k[i]
        for p in range(P):
            cnt[p * D + ((key >> (p * w)) & mask)] += 1
    for p in range(P):
        shift = p * w
        cp = cnt + p * D
        if cp[(a[0] >> shift) & mask] == m:
            continue
        run = 0
        for d in range(D):
            c = cp[d]
            cp[d] = run
            run += c
        for i in range(m):
            key = a[i]
            d = (key >> shift) & mask
            j = cp[d]
            cp[d] = j + 1
            bk[j] = key
            bv[j] = av[i]
        tk = a
        a = bk
        bk = tk
        tv = av
        av = bv
        bv = tv
    if a != k:
        memcpy(k, a, m * sizeof(uint64_t))
        memcpy(v, av, m * sizeof(value_t))


cdef int64_t _compact_inplace(uint64_t* k, value_t* v, Py_ssize_t m,
                              int64_t* rep) noexcept nogil:
    """Sum runs of equal keys of the sorted ``k[:m]`` into their first slots, dropping zero
    sums; ``rep`` gets (dup, first overflowing run or -1, zero sums).  Returns the count.

    Runs are added up in double precision and rounded once to ``value_t``: in float32 a long
    run is not cut short (2**25 repeats of 1.0 give 2**25, not 2**24, where adding 1.0 to
    2**24 stops changing the sum)."""
    cdef Py_ssize_t i = 0, j
    cdef int64_t o = 0, dup = 0, over = -1, zero = 0
    cdef uint64_t key
    cdef double s
    cdef value_t r
    # the common case: no repeated key and no zero value, nothing moves
    while i < m:
        if (i + 1 < m and k[i + 1] == k[i]) or v[i] == 0:
            break
        i += 1
    o = i
    while i < m:
        key = k[i]
        s = v[i]
        j = i + 1
        while j < m and k[j] == key:
            s = s + v[j]
            j += 1
        r = <value_t>s
        if j > i + 1:
            dup = 1
            if r - r != 0 and over < 0:
                over = i
        if r != 0:
            k[o] = key
            v[o] = r
            o += 1
        else:
            zero += 1
        i = j
    rep[0] = dup
    rep[1] = over
    rep[2] = zero
    return o


cdef void _decode_rows(const uint64_t* kp, int64_t* out, Py_ssize_t N,
                       const int64_t* shifts, const uint64_t* masks, const int64_t* offs,
                       const int64_t* bstart, Py_ssize_t Dt, Py_ssize_t lo,
                       Py_ssize_t hi) noexcept nogil:
    """Rows ``lo:hi`` of the result: the coordinates of the key of row ``o``, which bucket
    ``d`` keeps at ``bstart[d] + o - offs[d]`` (at or after ``o``)."""
    cdef Py_ssize_t a = 0, b = Dt, mid, d, o, end, q
    cdef int64_t delta
    cdef uint64_t key
    cdef int64_t s0, s1, s2
    cdef uint64_t m0, m1, m2
    if lo >= hi:
        return
    while b - a > 1:          # the last bucket starting at or before lo
        mid = (a + b) // 2
        if offs[mid] <= lo:
            a = mid
        else:
            b = mid
    d = a
    o = lo
    if N == 3:
        s0, s1, s2 = shifts[0], shifts[1], shifts[2]
        m0, m1, m2 = masks[0], masks[1], masks[2]
    while o < hi:
        while offs[d + 1] <= o:
            d += 1
        end = offs[d + 1] if offs[d + 1] < hi else hi
        delta = bstart[d] - offs[d]
        if N == 3:
            while o < end:
                key = kp[o + delta]
                out[o * 3] = <int64_t> ((key >> s0) & m0)
                out[o * 3 + 1] = <int64_t> ((key >> s1) & m1)
                out[o * 3 + 2] = <int64_t> ((key >> s2) & m2)
                o += 1
        else:
            while o < end:
                key = kp[o + delta]
                for q in range(N):
                    out[o * N + q] = <int64_t> ((key >> shifts[q]) & masks[q])
                o += 1


cdef object _sort_buckets_and_decode(uint64_t* kp, value_t* pv, int64_t* po,
                                     object out_subs, object out_vals,
                                     Py_ssize_t n, Py_ssize_t N, Py_ssize_t Dt, int nt,
                                     int low_bits, int stop_on_dup, int max_digit,
                                     int base_pages, int num_threads, int64_t[::1] bstart,
                                     int64_t[::1] sh, uint64_t[::1] mk, double scatter_s,
                                     double scatter_cpu):
    """Steps 2 and 3 of :func:`sort_into`, which depend on the value type only (the
    coordinates' type matters to the scatter alone: one copy of this per value type)."""
    cdef Py_ssize_t d, m, s, c, t, small_max = 0, r, nxt, nout, chunk
    cdef int64_t[::1] counts = np.zeros(max(Dt, 1), dtype=np.int64)
    cdef int64_t[::1] offs = np.zeros(Dt + 1, dtype=np.int64)
    brep_arr = np.zeros((max(Dt, 1), 3), dtype=np.int64)
    brep_arr[:, 1] = -1
    cdef int64_t[:, ::1] brep = brep_arr
    cdef uint64_t* sk = NULL
    cdef value_t* sv = NULL
    cdef int64_t* cnt = NULL
    dtype = np.float32 if value_t is float else np.float64
    t1 = time.perf_counter()
    c1 = time.process_time()
    # 2. every bucket sorted in cache by one thread, summed and compacted in place; buckets
    #    that one thread would take too long on are sorted by all threads together
    cdef Py_ssize_t big = n + 1 if nt == 1 else max(1 << 18, n // (2 * nt))
    big_buckets = []
    for d in range(Dt):
        m = bstart[d + 1] - bstart[d]
        if m > big:
            big_buckets.append(d)
        elif m > small_max:
            small_max = m
    if small_max > 0:
        sk = <uint64_t*> malloc(nt * small_max * sizeof(uint64_t))
        sv = <value_t*> malloc(nt * small_max * sizeof(value_t))
        cnt = <int64_t*> malloc(nt * CNT_SLOTS * sizeof(int64_t))
        if sk == NULL or sv == NULL or cnt == NULL:
            free(sk)
            free(sv)
            free(cnt)
            raise MemoryError("sort_into: no memory for the scratch of the buckets")
        for d in prange(Dt, nogil=True, schedule="dynamic", num_threads=nt, chunksize=4):
            m = bstart[d + 1] - bstart[d]
            if m == 0 or m > big:
                continue
            t = threadid()
            if low_bits > 0:
                _lsd(kp + bstart[d], pv + bstart[d], sk + t * small_max, sv + t * small_max,
                     m, low_bits, max_digit, cnt + t * CNT_SLOTS)
            counts[d] = _compact_inplace(kp + bstart[d], pv + bstart[d], m, &brep[d, 0])
        free(sk)
        free(sv)
        free(cnt)
    if big_buckets:
        keys_arr = np.asarray(out_subs).reshape(-1)[(N - 1) * n:].view(np.uint64)
        vals_arr = np.asarray(out_vals)
        for d in big_buckets:
            s = bstart[d]
            m = bstart[d + 1] - s
            if low_bits > 0:
                ka = np.empty(m, dtype=np.uint64)
                va = np.empty(m, dtype=dtype)
                vb = np.empty(m, dtype=dtype)
                if base_pages:
                    for scratch in (ka, va, vb):
                        small_pages(scratch)
                kb_i, vb_i = radix_sort(keys_arr[s:s + m], vals_arr[s:s + m], ka, va, vb,
                                        low_bits, num_threads)
                if kb_i == 1:
                    keys_arr[s:s + m] = ka
                if vb_i != 0:
                    vals_arr[s:s + m] = (None, va, vb)[vb_i]
                del ka, va, vb
            counts[d] = _compact_inplace(kp + s, pv + s, m, &brep[d, 0])
    over = -1
    dup = False
    zeros = 0
    for d in range(Dt):
        offs[d + 1] = offs[d] + counts[d]
        if brep[d, 0]:
            dup = True
        if brep[d, 1] >= 0 and over < 0:
            over = bstart[d] + brep[d, 1]
        zeros += brep[d, 2]
    nout = offs[Dt]
    t2 = time.perf_counter()
    c2 = time.process_time()
    res = {"nnz": int(nout), "dup": dup, "zeros": int(zeros), "overflow": -1,
           "seconds": [scatter_s, t2 - t1, 0.0], "cpu_seconds": [scatter_cpu, c2 - c1, 0.0]}
    if over >= 0:
        res["overflow"] = int(over)
        res["overflow_key"] = int(_overflow_key(kp, pv, bstart, brep, Dt))
        return res
    if dup and stop_on_dup:
        return res
    # 3. decode.  Row o is written to flat slots [N o, N o + N) and its key read from slot
    #    (N - 1) n + (o or later); a round of rows [r, nxt) with N nxt <= (N - 1) n + r writes
    #    below every key it or a later round reads, so its rows go in parallel.  What is left
    #    shrinks by a factor N each round; once it is an eighth of the rows or less (few
    #    parallel regions: each may wait for a descheduled thread on a busy machine), it is
    #    decoded in order by one thread (always safe).
    r = 0
    while r < nout:
        nxt = nout
        if nt > 1 and N > 1:
            nxt = ((N - 1) * n + r) // N
            if nxt > nout:
                nxt = nout
            if nxt - r < 2 * MIN_BLOCK_C or nout - r <= n // 8:
                nxt = nout
                chunk = 0
            else:
                chunk = 1
        else:
            chunk = 0
        if chunk == 0:
            if N > 1 or nout < n:
                _decode_rows(kp, po, N, &sh[0], &mk[0], &offs[0], &bstart[0], Dt, r, nout)
            break
        for c in prange(nt, nogil=True, schedule="static", num_threads=nt):
            _decode_rows(kp, po, N, &sh[0], &mk[0], &offs[0], &bstart[0], Dt,
                         r + (nxt - r) * c // nt, r + (nxt - r) * (c + 1) // nt)
        r = nxt
    if nout < n:
        # the values of every bucket move down to their place, in bucket order (a bucket's
        # place ends before the next bucket starts)
        for d in range(Dt):
            if counts[d] and offs[d] != bstart[d]:
                memmove(pv + offs[d], pv + bstart[d], counts[d] * sizeof(value_t))
    res["seconds"][2] = time.perf_counter() - t2
    res["cpu_seconds"][2] = time.process_time() - c2
    return res


def sort_into(const index_t[:, ::1] src, key_shifts, const value_t[::1] vals,
              int64_t[:, ::1] hist, int top_shift, shifts, masks,
              int64_t[:, ::1] out_subs, value_t[::1] out_vals, int stop_on_dup=0,
              int max_digit=MAX_DIGIT, int base_pages=0, int num_threads=1):
    """Sort the rows by their packed keys, sum repeated keys, drop zeros and decode, into
    ``out_subs`` and ``out_vals``.

    Parameters
    ----------
    src : integer array (n, Ns)
        Rows whose packed keys (column ``k`` shifted left by ``key_shifts[k]``) are sorted:
        the coordinates :func:`scan` checked, or the keys it wrote (one column, shift 0).
    vals : array (n,)
        The values.
    hist : int64 array
        The counts of :func:`scan` with the same ``top_shift`` and ``num_threads``
        (overwritten).
    shifts, masks : sequences of int
        The layout of the key: mode ``q`` of the result is ``(key >> shifts[q]) & masks[q]``.
    out_subs : int64 array (n, N), out_vals : array (n,)
        Fresh arrays that receive the result in their first ``nnz`` rows.  The sort works
        inside them: the keys are scattered into the last ``n`` slots of ``out_subs`` (read as
        a flat array) and the values into ``out_vals``, every bucket of the top digit is
        sorted there in cache, and the keys are decoded into rows from the front, in rounds
        that never write over a key still to be read.
    stop_on_dup : int
        Return before decoding when a key repeats (the caller raises).
    max_digit : int
        Widest digit (4 to 11 bits) of the bucket sorts.
    base_pages : int
        Allocate the scratch of buckets too large for one thread in base-size pages
        (:func:`small_pages`).

    Returns
    -------
    dict
        ``nnz`` (rows of the result), ``dup`` (some key repeats), ``zeros`` (runs dropped
        because their sum is 0), ``overflow`` (-1, or the position of the first run whose sum
        is not finite: then nothing is decoded, and ``overflow_key`` is its key), and
        ``seconds`` and ``cpu_seconds`` (of every thread of the process): the time of the
        scatter, the bucket sorts and the decoding.

    The blocks of the scatter are contiguous ranges of the input in order and every sort is
    stable, so equal keys are summed in input order whatever the number of threads.
    """
    cdef Py_ssize_t n = src.shape[0]
    cdef Py_ssize_t Ns = src.shape[1]
    cdef Py_ssize_t N = out_subs.shape[1]
    cdef Py_ssize_t nb = hist.shape[0]
    cdef Py_ssize_t Dt = hist.shape[1]
    cdef Py_ssize_t b, d
    cdef int nt = max(1, num_threads)
    cdef int failed = 0
    cdef int64_t run, cc
    cdef int64_t[::1] ksh = np.asarray(key_shifts, dtype=np.int64)
    cdef int64_t[::1] sh = np.asarray(shifts, dtype=np.int64)
    cdef uint64_t[::1] mk = np.asarray(masks, dtype=np.uint64)
    cdef int64_t[::1] bstart = np.empty(Dt + 1, dtype=np.int64)
    if (vals.shape[0] != n or out_vals.shape[0] != n or out_subs.shape[0] != n
            or ksh.shape[0] != Ns or sh.shape[0] != N or mk.shape[0] != N or N < 1):
        raise ValueError("sort_into: inconsistent array sizes")
    if nb != _nblocks(n, num_threads) or Dt < 1:
        raise ValueError("sort_into: the histogram does not match the blocks")
    if not 0 <= top_shift < 64:
        raise ValueError("sort_into: top_shift must be in [0, 64)")
    if not 4 <= max_digit <= MAX_DIGIT:
        raise ValueError(f"sort_into: max_digit must be in [4, {MAX_DIGIT}]")
    run = 0
    for d in range(Dt):
        bstart[d] = run
        for b in range(nb):
            cc = hist[b, d]
            hist[b, d] = run
            run += cc
    bstart[Dt] = n
    if run != n:
        raise ValueError("sort_into: the histogram does not count every key")
    if n == 0:
        return {"nnz": 0, "dup": False, "zeros": 0, "overflow": -1, "seconds": [0.0] * 3,
                "cpu_seconds": [0.0] * 3}
    cdef const index_t* ps = &src[0, 0]
    cdef const value_t* pv_in = &vals[0]
    cdef int64_t* po = &out_subs[0, 0]
    cdef uint64_t* kp = <uint64_t*> (po + (N - 1) * n)
    cdef value_t* pv = &out_vals[0]
    t0 = time.perf_counter()
    c0 = time.process_time()
    # 1. stable scatter by the top digit (its first touch of the output's memory: parallel)
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        failed += _place_block(ps, Ns, &ksh[0], pv_in, n * b // nb, n * (b + 1) // nb,
                               top_shift, &hist[b, 0], &bstart[0], <uint64_t> Dt, kp, pv)
    if failed:
        raise ValueError("sort_into: the keys do not match the histogram (another top_shift, "
                         "thread count or input than the scan's)")
    t1 = time.perf_counter()
    c1 = time.process_time()
    return _sort_buckets_and_decode(kp, pv, po, out_subs, out_vals, n, N, Dt, nt, top_shift,
                                    stop_on_dup, max_digit, base_pages, num_threads, bstart,
                                    sh, mk, <double> (t1 - t0), <double> (c1 - c0))


cdef uint64_t _overflow_key(const uint64_t* k, const value_t* v, const int64_t[::1] bstart,
                            const int64_t[:, ::1] brep, Py_ssize_t Dt):
    """Key of the first run whose sum overflowed: its sum, written by the compaction like any
    other, is the first value of its bucket that is not finite (every input was finite)."""
    cdef Py_ssize_t d, i
    for d in range(Dt):
        if brep[d, 1] >= 0:
            i = bstart[d]
            while i < bstart[d + 1]:
                if v[i] - v[i] != 0:
                    return k[i]
                i += 1
    return 0


# ----------------------------------------------------------------------------- mode order
cdef void _mo_count(const coord_t* subs, Py_ssize_t N, Py_ssize_t mode, Py_ssize_t lo,
                    Py_ssize_t hi, int64_t* cnt) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(lo, hi):
        cnt[subs[i * N + mode]] += 1


cdef void _mo_place(const coord_t* subs, Py_ssize_t N, Py_ssize_t mode, Py_ssize_t lo,
                    Py_ssize_t hi, int64_t* pos, order_t* out) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t c, j
    for i in range(lo, hi):
        c = subs[i * N + mode]
        j = pos[c]
        pos[c] = j + 1
        out[j] = <order_t> i


def mode_order(const coord_t[:, ::1] subs, Py_ssize_t mode, Py_ssize_t length,
               order_t[::1] out, int num_threads=1):
    """Stable order of the rows of ``subs`` by column ``mode`` (values in ``[0, length)``)
    into ``out``: a counting sort, each block counting and then placing a contiguous range of
    rows.  The caller bounds ``num_threads * length`` (one count per key and block) and makes
    sure that every row index fits in ``out``'s type."""
    cdef Py_ssize_t n = subs.shape[0]
    cdef Py_ssize_t N = subs.shape[1]
    cdef Py_ssize_t nb = _nblocks(n, num_threads)
    cdef Py_ssize_t L = max(length, 1)
    cdef Py_ssize_t b, d
    cdef int64_t run, c
    cdef int64_t* cnt
    if out.shape[0] != n:
        raise ValueError("mode_order: the output has the wrong length")
    if not 0 <= mode < N:
        raise ValueError(f"mode_order: mode {mode} out of range")
    if n == 0:
        return
    cnt = <int64_t*> calloc(nb * L, sizeof(int64_t))
    if cnt == NULL:
        raise MemoryError()
    cdef const coord_t* ps = &subs[0, 0]
    cdef order_t* po = &out[0]
    try:
        for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
            _mo_count(ps, N, mode, n * b // nb, n * (b + 1) // nb, cnt + b * L)
        run = 0
        for d in range(L):
            for b in range(nb):
                c = cnt[b * L + d]
                cnt[b * L + d] = run
                run += c
        for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
            _mo_place(ps, N, mode, n * b // nb, n * (b + 1) // nb, cnt + b * L, po)
    finally:
        free(cnt)


# ----------------------------------------------------------------------------- narrow copies
cdef void _narrow_block(const int64_t* src, int32_t* dst, Py_ssize_t lo,
                        Py_ssize_t hi) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(lo, hi):
        dst[i] = <int32_t> src[i]


def narrow(const int64_t[:, ::1] subs, int32_t[:, ::1] out, int num_threads=1):
    """``out[...] = subs`` into int32 (the caller checked that every coordinate fits)."""
    cdef Py_ssize_t n = subs.shape[0] * subs.shape[1]
    cdef Py_ssize_t nb = _nblocks(n, num_threads)
    cdef Py_ssize_t b
    if out.shape[0] != subs.shape[0] or out.shape[1] != subs.shape[1]:
        raise ValueError("narrow: shapes differ")
    if n == 0:
        return
    cdef const int64_t* ps = &subs[0, 0]
    cdef int32_t* po = &out[0, 0]
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _narrow_block(ps, po, n * b // nb, n * (b + 1) // nb)


# ----------------------------------------------------------------------------- value checks
#: values per block of value_stats: partial sums are formed per block and added in block
#: order, so the sums do not depend on the thread count
DEF STATS_BLOCK_C = 65536
STATS_BLOCK = STATS_BLOCK_C

DEF S_NONINT = 0
DEF S_NEG = 1
DEF S_NONBIN = 2
DEF S_FIRST_NONINT = 3
DEF S_FIRST_NEG = 4
DEF S_FIRST_NONBIN = 5
DEF S_SLOTS = 6


cdef void _stats_block(const value_t* v, Py_ssize_t lo, Py_ssize_t hi, int64_t* rep,
                       double* sums) noexcept nogil:
    cdef Py_ssize_t i
    cdef double x, s = 0, s2 = 0, amax = 0
    cdef int64_t nonint = 0, neg = 0, nonbin = 0
    cdef int64_t fi = -1, fn = -1, fb = -1
    for i in range(lo, hi):
        x = v[i]
        s += x
        s2 += x * x
        if fabs(x) > amax:
            amax = fabs(x)
        if x != floor(x):
            nonint += 1
            if fi < 0:
                fi = i
        if x < 0:
            neg += 1
            if fn < 0:
                fn = i
        if x != 0 and x != 1:
            nonbin += 1
            if fb < 0:
                fb = i
    rep[S_NONINT] = nonint
    rep[S_NEG] = neg
    rep[S_NONBIN] = nonbin
    rep[S_FIRST_NONINT] = fi
    rep[S_FIRST_NEG] = fn
    rep[S_FIRST_NONBIN] = fb
    sums[0] = s
    sums[1] = s2
    sums[2] = amax


def value_stats(const value_t[::1] vals, int num_threads=1):
    """One pass over finite values: how many are not integers, negative, not 0 or 1 (and the
    first position of each, or -1), their sum and sum of squares in float64, and their largest
    magnitude (``max_abs``)."""
    cdef Py_ssize_t n = vals.shape[0]
    cdef Py_ssize_t nblk = max(1, (n + STATS_BLOCK_C - 1) // STATS_BLOCK_C)
    cdef Py_ssize_t b
    cdef int nt = max(1, min(num_threads, n // MIN_BLOCK_C))
    cdef int64_t[:, ::1] rep = np.zeros((nblk, S_SLOTS), dtype=np.int64)
    cdef double[:, ::1] sums = np.zeros((nblk, 3), dtype=np.float64)
    cdef double s = 0, s2 = 0, amax = 0
    if n == 0:
        return {"nonint": 0, "negative": 0, "nonbinary": 0, "first_nonint": -1,
                "first_negative": -1, "first_nonbinary": -1, "sum": 0.0, "sum_sq": 0.0,
                "max_abs": 0.0}
    cdef const value_t* pv = &vals[0]
    for b in prange(nblk, nogil=True, schedule="static", num_threads=nt):
        _stats_block(pv, b * STATS_BLOCK_C, min((b + 1) * STATS_BLOCK_C, n), &rep[b, 0],
                     &sums[b, 0])
    out = {"nonint": 0, "negative": 0, "nonbinary": 0, "first_nonint": -1,
           "first_negative": -1, "first_nonbinary": -1}
    for b in range(nblk):
        s += sums[b, 0]
        s2 += sums[b, 1]
        if sums[b, 2] > amax:
            amax = sums[b, 2]
        for name, slot, first in (("nonint", S_NONINT, S_FIRST_NONINT),
                                  ("negative", S_NEG, S_FIRST_NEG),
                                  ("nonbinary", S_NONBIN, S_FIRST_NONBIN)):
            out[name] += rep[b, slot]
            if out["first_" + name] < 0 and rep[b, first] >= 0:
                out["first_" + name] = int(rep[b, first])
    out["sum"] = s
    out["sum_sq"] = s2
    out["max_abs"] = amax
    return out


# ----------------------------------------------------------------------------- canonical check
DEF K_RANGE = 1        # a coordinate outside the shape
DEF K_VALUE = 2        # a value that is zero, NaN or infinite
DEF K_ORDER = 3        # a row not after the one above it


cdef void _check_block(const int64_t* subs, const value_t* vals, Py_ssize_t N,
                       const int64_t* shape, Py_ssize_t lo, Py_ssize_t hi,
                       int64_t* rep) noexcept nogil:
    cdef Py_ssize_t i, k
    cdef int64_t c
    cdef value_t v
    cdef int cmp
    rep[0] = -1
    rep[1] = 0
    for i in range(lo, hi):
        for k in range(N):
            c = subs[i * N + k]
            if c < 0 or c >= shape[k]:
                rep[0] = i
                rep[1] = K_RANGE
                return
        v = vals[i]
        if v - v != 0 or v == 0:
            rep[0] = i
            rep[1] = K_VALUE
            return
        if i > 0:
            cmp = 0
            for k in range(N):
                if subs[i * N + k] != subs[(i - 1) * N + k]:
                    cmp = -1 if subs[i * N + k] < subs[(i - 1) * N + k] else 1
                    break
            if cmp <= 0:
                rep[0] = i
                rep[1] = K_ORDER
                return


def check_canonical(const int64_t[:, ::1] subs, const value_t[::1] vals, shape,
                    int num_threads=1):
    """Whether arrays read from outside already are a canonical tensor: coordinates inside
    ``shape``, values finite and nonzero, rows strictly increasing.  Returns ``(-1, None)`` or
    ``(row, problem)`` for the first row that is not, ``problem`` one of ``"range"``,
    ``"value"`` and ``"order"``."""
    cdef Py_ssize_t n = subs.shape[0]
    cdef Py_ssize_t N = subs.shape[1]
    cdef Py_ssize_t nb = _nblocks(n, num_threads)
    cdef Py_ssize_t b
    cdef int64_t[::1] shp = np.ascontiguousarray(shape, dtype=np.int64)
    cdef int64_t[:, ::1] rep = np.zeros((nb, 2), dtype=np.int64)
    if vals.shape[0] != n or shp.shape[0] != N:
        raise ValueError("check_canonical: inconsistent arrays")
    if n == 0:
        return -1, None
    cdef const int64_t* ps = &subs[0, 0]
    cdef const value_t* pv = &vals[0]
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _check_block(ps, pv, N, &shp[0], n * b // nb, n * (b + 1) // nb, &rep[b, 0])
    for b in range(nb):
        if rep[b, 0] >= 0:
            return int(rep[b, 0]), {K_RANGE: "range", K_VALUE: "value", K_ORDER: "order"}[
                rep[b, 1]]
    return -1, None
