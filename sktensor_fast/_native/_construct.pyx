# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Compiled passes that build the canonical form of a sparse tensor.

The canonical form of :class:`~sktensor_fast.SparseTensor` is: coordinates inside the shape,
finite values, rows sorted lexicographically (mode 0 slowest), repeated coordinates summed and
zeros dropped.  It is built in three parallel passes over a packed key: the coordinate of mode
``k`` shifted into its own bit field, mode 0 in the highest bits, so that the order of the keys
is the lexicographic order of the rows and a coordinate is recovered with a shift and a mask.

1. :func:`linearize` checks every coordinate against the shape and every value for finiteness,
   writes the keys, and reports whether they already increase (then nothing is sorted).
2. :func:`radix_sort` sorts the keys, the values carried along: a least-significant-digit
   radix sort of 8- to 11-bit digits, each pass a count and a stable scatter per block.
3. :func:`compact_count` / :func:`compact_write` add up runs of equal keys in their input
   order, drop zero sums and decode the keys into int64 coordinates.

The blocks of a pass are contiguous ranges of the input in order, so the sort is stable and
every result (order, sums) is the same whatever the number of threads.  Tensors whose packed key
needs more than 64 bits are sorted by the caller another way (NumPy's lexsort).

:func:`mode_order` is the stable counting sort of the nonzeros by one mode's coordinate that
the storage formats and the OpenCL backend use, :func:`narrow` copies coordinates into a
narrower integer type, and :func:`value_stats` is one pass over the values that answers the
questions estimators ask of them (counts, binary data, sums).
"""
cimport cython
from cython.parallel cimport prange
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset, memcpy
from libc.math cimport floor
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                          uint64_t)

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


# ----------------------------------------------------------------------------- linearize
# per-block report of linearize, in int64 slots
DEF L_BAD_ROW = 0      # first row with a coordinate outside the shape (or n)
DEF L_BAD_VAL = 1      # first non-finite value (or n)
DEF L_DESC = 2         # 1 when some key is smaller than the one before it (inside the block)
DEF L_EQUAL = 3        # 1 when some key equals the one before it (inside the block)
DEF L_ZERO = 4         # number of zero values
DEF L_SLOTS = 5


cdef void _lin_block(const index_t* subs, const value_t* vals, Py_ssize_t N,
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
        keys[i] = key
        if hist != NULL:
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


def linearize(const index_t[:, ::1] subs, const value_t[::1] vals, shape, shifts,
              uint64_t[::1] keys, int64_t[:, ::1] hist=None, int top_shift=0,
              int num_threads=1):
    """Packed keys of the rows of ``subs`` into ``keys``, checking everything.

    Returns a dict: ``bad_row`` (first row holding a coordinate outside ``[0, shape)``, or -1),
    ``bad_val`` (first non-finite value before that row, or -1), ``order`` (2: the keys
    strictly increase, 1: they never decrease, 0: unsorted) and ``zeros`` (number of zero
    values).  ``keys`` is only meaningful when ``bad_row`` is -1.  With ``hist`` (one row per
    block, :func:`num_blocks`, and ``2 ** (key bits - top_shift)`` columns), the pass also
    counts the keys of every block by their digit above ``top_shift``, for :func:`sort_unique`.
    """
    cdef Py_ssize_t n = subs.shape[0]
    cdef Py_ssize_t N = subs.shape[1]
    cdef Py_ssize_t nb = _nblocks(n, num_threads)
    cdef Py_ssize_t b, k
    cdef uint64_t[::1] shp = np.asarray(shape, dtype=np.uint64)
    cdef int64_t[::1] sh = np.asarray(shifts, dtype=np.int64)
    cdef int64_t[:, ::1] rep = np.zeros((nb, L_SLOTS), dtype=np.int64)
    cdef int64_t* ph = NULL
    cdef Py_ssize_t hstride = 0
    if vals.shape[0] != n or keys.shape[0] < n or shp.shape[0] != N or sh.shape[0] != N:
        raise ValueError("linearize: inconsistent array sizes")
    if hist is not None:
        if hist.shape[0] != nb:
            raise ValueError("linearize: the histogram needs one row per block")
        hstride = hist.shape[1]
        ph = &hist[0, 0]
    if n == 0:
        return {"bad_row": -1, "bad_val": -1, "order": 2, "zeros": 0}
    cdef const index_t* ps = &subs[0, 0]
    cdef const value_t* pv = &vals[0]
    cdef uint64_t* pk = &keys[0]
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _lin_block(ps, pv, N, &shp[0], &sh[0], pk, n * b // nb, n * (b + 1) // nb, n,
                   &rep[b, 0], (ph + b * hstride) if ph != NULL else NULL, top_shift)
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
            if keys[k] < keys[k - 1]:
                desc = 1
            elif keys[k] == keys[k - 1]:
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
    cdef Py_ssize_t b, d, D, nd
    cdef int shift = 0, width
    cdef uint64_t mask
    cdef int64_t run, c, total
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
            nd = 0
            for d in range(D):
                total = 0
                for b in range(nb):
                    total += hist[b * D + d]
                if total:
                    nd += 1
            if nd <= 1:
                shift += width
                continue
            run = 0
            for d in range(D):
                for b in range(nb):
                    c = hist[b * D + d]
                    hist[b * D + d] = run
                    run += c
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


# ----------------------------------------------------------------------------- compact
DEF C_COUNT = 0        # rows written by the block
DEF C_DUP = 1          # 1 when the block holds a repeated key
DEF C_OVER = 2         # first run (index of its first entry) whose sum is not finite, or n
DEF C_ZERO = 3         # runs whose sum is zero (dropped)
DEF C_SLOTS = 4


cdef Py_ssize_t _run_start(const uint64_t* keys, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """First index >= i that starts a run of equal keys."""
    while 0 < i < n and keys[i] == keys[i - 1]:
        i += 1
    return i


cdef void _compact_block(const uint64_t* keys, const value_t* vals, Py_ssize_t lo,
                         Py_ssize_t hi, Py_ssize_t n, int write, Py_ssize_t N,
                         const int64_t* shifts, const uint64_t* masks, int64_t* out_subs,
                         value_t* out_vals, int64_t* rep) noexcept nogil:
    cdef Py_ssize_t i, j, k
    cdef int64_t o = 0, dup = 0, over = n, zero = 0
    cdef value_t s
    cdef uint64_t key
    i = lo
    while i < hi:
        key = keys[i]
        s = vals[i]
        j = i + 1
        while j < n and keys[j] == key:
            s = s + vals[j]
            j += 1
        if j > i + 1:
            dup = 1
            if s - s != 0 and over == n:
                over = i
        if s != 0:
            if write:
                for k in range(N):
                    out_subs[o * N + k] = <int64_t> ((key >> shifts[k]) & masks[k])
                out_vals[o] = s
            o += 1
        else:
            zero += 1
        i = j
    rep[C_COUNT] = o
    rep[C_DUP] = dup
    rep[C_OVER] = over
    rep[C_ZERO] = zero


def compact(const uint64_t[::1] keys, const value_t[::1] vals, shifts, masks,
            int check_only=0, int num_threads=1):
    """Sum runs of equal keys (in input order), drop zero sums, decode the keys.

    ``keys`` must be sorted.  Returns a dict with ``subs`` (int64, rows x len(shifts)) and
    ``vals`` (the value dtype), ``dup`` (whether some key repeats), ``overflow`` (index of the
    first entry of the first run whose sum is not finite, or -1; then nothing is written) and
    ``zeros`` (runs dropped because their sum is 0).  With ``check_only`` only the counts are
    computed (``subs`` and ``vals`` are None).
    """
    cdef Py_ssize_t n = keys.shape[0]
    cdef Py_ssize_t N = len(shifts)
    cdef Py_ssize_t nb = _nblocks(n, num_threads)
    cdef Py_ssize_t b
    cdef int64_t[::1] sh = np.asarray(shifts, dtype=np.int64)
    cdef uint64_t[::1] mk = np.asarray(masks, dtype=np.uint64)
    cdef int64_t[::1] starts = np.empty(nb + 1, dtype=np.int64)
    cdef int64_t[::1] offs = np.zeros(nb + 1, dtype=np.int64)
    cdef int64_t[:, ::1] rep = np.zeros((nb, C_SLOTS), dtype=np.int64)
    cdef int64_t[:, ::1] out_subs
    cdef value_t[::1] out_vals
    if vals.shape[0] != n:
        raise ValueError("compact: keys and vals differ in length")
    dtype = np.float32 if value_t is float else np.float64
    if n == 0:
        return {"subs": np.zeros((0, N), np.int64), "vals": np.zeros(0, dtype), "dup": False,
                "overflow": -1, "zeros": 0}
    cdef const uint64_t* pk = &keys[0]
    cdef const value_t* pv = &vals[0]
    for b in range(nb + 1):
        starts[b] = _run_start(pk, n * b // nb, n)
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _compact_block(pk, pv, starts[b], starts[b + 1], n, 0, N, &sh[0], &mk[0], NULL, NULL,
                       &rep[b, 0])
    over = n
    for b in range(nb):
        offs[b + 1] = offs[b] + rep[b, C_COUNT]
        if rep[b, C_OVER] < over:
            over = rep[b, C_OVER]
    res = {"dup": bool(np.any(np.asarray(rep[:, C_DUP]))),
           "overflow": -1 if over == n else int(over),
           "zeros": int(np.sum(np.asarray(rep[:, C_ZERO]))),
           "subs": None, "vals": None, "nnz": int(offs[nb])}
    if check_only or over < n:
        return res
    subs_arr = np.empty((offs[nb], N), dtype=np.int64)
    vals_arr = np.empty(offs[nb], dtype=dtype)
    out_subs = subs_arr
    out_vals = vals_arr
    cdef int64_t* po = &out_subs[0, 0] if offs[nb] else NULL
    cdef value_t* pov = &out_vals[0] if offs[nb] else NULL
    if offs[nb]:
        for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
            _compact_block(pk, pv, starts[b], starts[b + 1], n, 1, N, &sh[0], &mk[0],
                           po + offs[b] * N, pov + offs[b], &rep[b, 0])
    res["subs"] = subs_arr
    res["vals"] = vals_arr
    return res


# ----------------------------------------------------------------------------- sort_unique
DEF SMALL_SORT = 32
DEF MAX_DIGIT = 11


cdef void _msd_scatter(const uint64_t* keys, const value_t* vals, uint64_t* dkeys,
                       value_t* dvals, Py_ssize_t lo, Py_ssize_t hi, int shift,
                       int64_t* pos) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t j
    cdef uint64_t key
    for i in range(lo, hi):
        key = keys[i]
        j = pos[key >> shift]
        pos[key >> shift] = j + 1
        dkeys[j] = key
        dvals[j] = vals[i]


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


cdef void _lsd(uint64_t* k, value_t* v, uint64_t* sk, value_t* sv, Py_ssize_t m,
               int lowbits, int64_t* cnt) noexcept nogil:
    """Stable sort of ``k[:m]`` by its low ``lowbits`` bits, ``v`` along; the result ends in
    ``k``/``v``; ``sk``/``sv`` are scratch of ``m`` entries, ``cnt`` of 2**MAX_DIGIT."""
    cdef Py_ssize_t i, d, D
    cdef int shift = 0, w, width
    cdef int64_t run, c, j
    cdef uint64_t mask
    cdef uint64_t* a = k
    cdef uint64_t* bk = sk
    cdef uint64_t* tk
    cdef value_t* av = v
    cdef value_t* bv = sv
    cdef value_t* tv
    cdef int ordered = 1
    for i in range(1, m):
        if k[i] < k[i - 1]:
            ordered = 0
            break
    if ordered:
        return
    if m <= SMALL_SORT:
        _insertion(k, v, m)
        return
    width = 8 if m < 4096 else MAX_DIGIT
    while shift < lowbits:
        w = lowbits - shift
        if w > width:
            w = width
        D = (<Py_ssize_t> 1) << w
        mask = D - 1
        memset(cnt, 0, D * sizeof(int64_t))
        for i in range(m):
            cnt[(a[i] >> shift) & mask] += 1
        if cnt[(a[0] >> shift) & mask] == m:
            shift += w
            continue
        run = 0
        for d in range(D):
            c = cnt[d]
            cnt[d] = run
            run += c
        for i in range(m):
            d = (a[i] >> shift) & mask
            j = cnt[d]
            cnt[d] = j + 1
            bk[j] = a[i]
            bv[j] = av[i]
        tk = a
        a = bk
        bk = tk
        tv = av
        av = bv
        bv = tv
        shift += w
    if a != k:
        memcpy(k, a, m * sizeof(uint64_t))
        memcpy(v, av, m * sizeof(value_t))


cdef int64_t _compact_inplace(uint64_t* k, value_t* v, Py_ssize_t m,
                              int64_t* rep) noexcept nogil:
    """Sum runs of equal keys of the sorted ``k[:m]`` into their first slots, dropping zero
    sums; ``rep`` gets (dup, first overflowing run or -1, zero sums).  Returns the count."""
    cdef Py_ssize_t i = 0, j
    cdef int64_t o = 0, dup = 0, over = -1, zero = 0
    cdef uint64_t key
    cdef value_t s
    while i < m:
        key = k[i]
        s = v[i]
        j = i + 1
        while j < m and k[j] == key:
            s = s + v[j]
            j += 1
        if j > i + 1:
            dup = 1
            if s - s != 0 and over < 0:
                over = i
        if s != 0:
            k[o] = key
            v[o] = s
            o += 1
        else:
            zero += 1
        i = j
    rep[0] = dup
    rep[1] = over
    rep[2] = zero
    return o


cdef void _decode(const uint64_t* k, const value_t* v, Py_ssize_t m, Py_ssize_t N,
                  const int64_t* shifts, const uint64_t* masks, int64_t* out,
                  value_t* ov) noexcept nogil:
    cdef Py_ssize_t i, q
    cdef uint64_t key
    for i in range(m):
        key = k[i]
        for q in range(N):
            out[i * N + q] = <int64_t> ((key >> shifts[q]) & masks[q])
        ov[i] = v[i]


def msd_scatter(const uint64_t[::1] keys, const value_t[::1] vals, int64_t[:, ::1] hist,
                int top_shift, int num_threads=1):
    """Stable scatter of the keys (values along) by their digit above ``top_shift``.

    ``hist`` holds the per-block counts of that digit made by :func:`linearize` with the same
    ``num_threads`` (it is overwritten).  Returns ``(keys2, vals2, bstart)``: the scattered
    copies and the start of every bucket (length ``2**digit + 1``).  The inputs are not needed
    afterwards.
    """
    cdef Py_ssize_t n = keys.shape[0]
    cdef Py_ssize_t nb = hist.shape[0]
    cdef Py_ssize_t Dt = hist.shape[1]
    cdef Py_ssize_t b, d
    cdef int64_t run, c
    dtype = np.float32 if value_t is float else np.float64
    if nb != _nblocks(n, num_threads) or vals.shape[0] != n:
        raise ValueError("msd_scatter: the histogram does not match the blocks")
    bstart_arr = np.empty(Dt + 1, dtype=np.int64)
    cdef int64_t[::1] bstart = bstart_arr
    keys2_arr = np.empty(n, dtype=np.uint64)
    vals2_arr = np.empty(n, dtype=dtype)
    cdef uint64_t[::1] keys2 = keys2_arr
    cdef value_t[::1] vals2 = vals2_arr
    run = 0
    for d in range(Dt):
        bstart[d] = run
        for b in range(nb):
            c = hist[b, d]
            hist[b, d] = run
            run += c
    bstart[Dt] = n
    if run != n:
        raise ValueError("msd_scatter: the histogram does not count every key")
    if n == 0:
        return keys2_arr, vals2_arr, bstart_arr
    cdef const uint64_t* pk = &keys[0]
    cdef const value_t* pv = &vals[0]
    cdef uint64_t* pk2 = &keys2[0]
    cdef value_t* pv2 = &vals2[0]
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        _msd_scatter(pk, pv, pk2, pv2, n * b // nb, n * (b + 1) // nb, top_shift, &hist[b, 0])
    return keys2_arr, vals2_arr, bstart_arr


def sort_buckets(uint64_t[::1] keys, value_t[::1] vals, const int64_t[::1] bstart,
                 int low_bits, shifts, masks, int num_threads=1):
    """Sort every bucket ``keys[bstart[d]:bstart[d + 1]]`` by its low ``low_bits`` bits (values
    along), sum runs of equal keys, drop zero sums, and decode the keys into coordinates.

    Each bucket is sorted by a least-significant-digit radix sort while it is in cache, by one
    thread; buckets larger than a share of the work are sorted by all threads together.  The
    arrays are overwritten.  Returns a dict like :func:`compact` (with ``overflow_key``, the key
    of the first run whose sum is not finite, when ``overflow`` is not -1).
    """
    cdef Py_ssize_t n = keys.shape[0]
    cdef Py_ssize_t Dt = bstart.shape[0] - 1
    cdef Py_ssize_t N = len(shifts)
    cdef Py_ssize_t d, m, s, small_max = 0
    cdef int nt = max(1, num_threads)
    cdef int failed = 0
    cdef int64_t[::1] sh = np.asarray(shifts, dtype=np.int64)
    cdef uint64_t[::1] mk = np.asarray(masks, dtype=np.uint64)
    cdef int64_t[::1] counts = np.zeros(max(Dt, 1), dtype=np.int64)
    cdef int64_t[::1] offs = np.zeros(Dt + 1, dtype=np.int64)
    brep_arr = np.zeros((max(Dt, 1), 3), dtype=np.int64)
    brep_arr[:, 1] = -1
    cdef int64_t[:, ::1] brep = brep_arr
    cdef uint64_t* sk
    cdef value_t* sv
    cdef int64_t* cnt
    dtype = np.float32 if value_t is float else np.float64
    if vals.shape[0] != n or Dt < 1 or bstart[Dt] != n:
        raise ValueError("sort_buckets: inconsistent arrays")
    if n == 0:
        return {"subs": np.zeros((0, N), np.int64), "vals": np.zeros(0, dtype), "dup": False,
                "overflow": -1, "zeros": 0, "nnz": 0}
    cdef uint64_t* pk = &keys[0]
    cdef value_t* pv = &vals[0]
    # buckets that one thread would take too long on are sorted by all threads together
    cdef Py_ssize_t big = n + 1 if nt == 1 else max(1 << 18, n // (2 * nt))
    big_buckets = []
    for d in range(Dt):
        m = bstart[d + 1] - bstart[d]
        if m > big:
            big_buckets.append(d)
        elif m > small_max:
            small_max = m
    if small_max > 0:
        for d in prange(Dt, nogil=True, schedule="dynamic", num_threads=nt, chunksize=1):
            m = bstart[d + 1] - bstart[d]
            if m == 0 or m > big:
                continue
            sk = <uint64_t*> malloc(m * sizeof(uint64_t))
            sv = <value_t*> malloc(m * sizeof(value_t))
            cnt = <int64_t*> malloc(((<Py_ssize_t> 1) << MAX_DIGIT) * sizeof(int64_t))
            if sk == NULL or sv == NULL or cnt == NULL:
                failed += 1
            else:
                _lsd(pk + bstart[d], pv + bstart[d], sk, sv, m, low_bits, cnt)
                counts[d] = _compact_inplace(pk + bstart[d], pv + bstart[d], m, &brep[d, 0])
            free(sk)
            free(sv)
            free(cnt)
    if failed:
        raise MemoryError("sort_buckets: no memory for the scratch of a bucket")
    keys_arr = np.asarray(keys)
    vals_arr = np.asarray(vals)
    for d in big_buckets:
        s = bstart[d]
        m = bstart[d + 1] - s
        if low_bits > 0:
            ka = np.empty(m, dtype=np.uint64)
            va = np.empty(m, dtype=dtype)
            vb = np.empty(m, dtype=dtype)
            kb_i, vb_i = radix_sort(keys_arr[s:s + m], vals_arr[s:s + m], ka, va, vb,
                                    low_bits, num_threads)
            if kb_i == 1:
                keys_arr[s:s + m] = ka
            if vb_i != 0:
                vals_arr[s:s + m] = (None, va, vb)[vb_i]
            del ka, va, vb
        counts[d] = _compact_inplace(pk + s, pv + s, m, &brep[d, 0])
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
    res = {"dup": dup, "overflow": -1, "zeros": int(zeros), "subs": None, "vals": None,
           "nnz": int(offs[Dt])}
    if over >= 0:
        res["overflow"] = int(over)
        res["overflow_key"] = int(_overflow_key(pk, pv, bstart, brep, Dt))
        return res
    subs_arr = np.empty((offs[Dt], N), dtype=np.int64)
    out_vals_arr = np.empty(offs[Dt], dtype=dtype)
    cdef int64_t[:, ::1] out_subs = subs_arr
    cdef value_t[::1] out_vals = out_vals_arr
    cdef int64_t* po = &out_subs[0, 0] if offs[Dt] else NULL
    cdef value_t* pov = &out_vals[0] if offs[Dt] else NULL
    if offs[Dt]:
        for d in prange(Dt, nogil=True, schedule="dynamic", num_threads=nt, chunksize=4):
            _decode(pk + bstart[d], pv + bstart[d], counts[d], N, &sh[0], &mk[0],
                    po + offs[d] * N, pov + offs[d])
    res["subs"] = subs_arr
    res["vals"] = out_vals_arr
    return res


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
    cdef double x, s = 0, s2 = 0
    cdef int64_t nonint = 0, neg = 0, nonbin = 0
    cdef int64_t fi = -1, fn = -1, fb = -1
    for i in range(lo, hi):
        x = v[i]
        s += x
        s2 += x * x
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


def value_stats(const value_t[::1] vals, int num_threads=1):
    """One pass over finite values: how many are not integers, negative, not 0 or 1 (and the
    first position of each, or -1), their sum and sum of squares in float64."""
    cdef Py_ssize_t n = vals.shape[0]
    cdef Py_ssize_t nblk = max(1, (n + STATS_BLOCK_C - 1) // STATS_BLOCK_C)
    cdef Py_ssize_t b
    cdef int nt = max(1, min(num_threads, n // MIN_BLOCK_C))
    cdef int64_t[:, ::1] rep = np.zeros((nblk, S_SLOTS), dtype=np.int64)
    cdef double[:, ::1] sums = np.zeros((nblk, 2), dtype=np.float64)
    cdef double s = 0, s2 = 0
    if n == 0:
        return {"nonint": 0, "negative": 0, "nonbinary": 0, "first_nonint": -1,
                "first_negative": -1, "first_nonbinary": -1, "sum": 0.0, "sum_sq": 0.0}
    cdef const value_t* pv = &vals[0]
    for b in prange(nblk, nogil=True, schedule="static", num_threads=nt):
        _stats_block(pv, b * STATS_BLOCK_C, min((b + 1) * STATS_BLOCK_C, n), &rep[b, 0],
                     &sums[b, 0])
    out = {"nonint": 0, "negative": 0, "nonbinary": 0, "first_nonint": -1,
           "first_negative": -1, "first_nonbinary": -1}
    for b in range(nblk):
        s += sums[b, 0]
        s2 += sums[b, 1]
        for name, slot, first in (("nonint", S_NONINT, S_FIRST_NONINT),
                                  ("negative", S_NEG, S_FIRST_NEG),
                                  ("nonbinary", S_NONBIN, S_FIRST_NONBIN)):
            out[name] += rep[b, slot]
            if out["first_" + name] < 0 and rep[b, first] >= 0:
                out["first_" + name] = int(rep[b, first])
    out["sum"] = s
    out["sum_sq"] = s2
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
