# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Parallel copies of host memory (OpenMP threads).

The OpenCL backend copies a tensor's values into page-locked staging buffers before a
transfer to the device: one thread copies at a fraction of the memory bandwidth of a
many-core host, several get close to it.  A streamed tensor's host blocks are gathered from
the nonzeros in a mode's order and stored chunk-interleaved, as the device kernels read them
(:func:`interleave_block`).  The bytes written are the same for any number of threads.
"""
from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t
from libc.math cimport fabs
from libc.string cimport memcpy

import numpy as np

ctypedef fused value_t:
    float
    double

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


#: chunks per tile of :func:`interleave_block` (a tile writes runs of this many entries)
DEF TILE_CHUNKS = 64


def interleave_block(const int32_t[:, ::1] subs, const value_t[::1] vals, order,
                     Py_ssize_t start, Py_ssize_t stop, Py_ssize_t chunk,
                     int32_t[:, ::1] out_subs, value_t[::1] out_vals, int num_threads=1):
    """Gather nonzeros ``start:stop`` of an order into a chunk-interleaved block.

    The block's ``j``-th nonzero is nonzero ``order[start + j]`` of ``subs`` / ``vals``
    (nonzero ``start + j`` when ``order`` is None).  With ``chunk`` > 0 it is stored at
    ``(j % chunk) * nchunks + j // chunk``, ``nchunks = ceil(n / chunk)`` for ``n = stop -
    start`` nonzeros (entry ``k`` of chunk ``c`` at ``k * nchunks + c``: the order the device
    kernels of the chunked layouts read); the ``nchunks * chunk - n`` positions past the last
    nonzero get zero coordinates and values.  With ``chunk`` = 0 the block is stored in order.

    Parameters
    ----------
    subs : (nnz, N) int32 array
    vals : (nnz,) float32 or float64 array
    order : (m,) int32 array or None
        Positions into ``subs``; ``start:stop`` of it are read.
    start, stop : int
        The block's range of ``order`` (or of the nonzeros).
    chunk : int
        Nonzeros per chunk, or 0.
    out_subs : (padded, N) int32 array, out_vals : (padded,) array of ``vals``' type
        The block; ``padded`` = ``nchunks * chunk`` (``n`` when ``chunk`` = 0).
    num_threads : int, default=1

    Raises
    ------
    ValueError
        On shapes that do not agree or positions outside the arrays.
    """
    cdef Py_ssize_t nnz = subs.shape[0]
    cdef Py_ssize_t N = subs.shape[1]
    cdef Py_ssize_t n = stop - start
    cdef Py_ssize_t nchunks, padded, ntiles, t, c, c0, c1, k, j, p, q, src
    cdef const int32_t[::1] ordv
    cdef const int32_t* op = NULL
    cdef int bad = 0
    if vals.shape[0] != nnz:
        raise ValueError(f"interleave_block: {nnz} coordinate rows but {vals.shape[0]} values")
    if chunk < 0 or start < 0 or n < 0:
        raise ValueError(f"interleave_block: bad range {start}:{stop} or chunk {chunk}")
    if order is None:
        if stop > nnz:
            raise ValueError(f"interleave_block: range {start}:{stop} past {nnz} nonzeros")
    else:
        ordv = order
        if stop > ordv.shape[0]:
            raise ValueError(f"interleave_block: range {start}:{stop} past an order of "
                             f"{ordv.shape[0]}")
        if n:
            op = &ordv[0]
    if chunk:
        nchunks = (n + chunk - 1) // chunk
        padded = nchunks * chunk
    else:
        nchunks = 1
        padded = n
    if out_subs.shape[0] != padded or out_subs.shape[1] != N or out_vals.shape[0] != padded:
        raise ValueError(f"interleave_block: the block needs ({padded}, {N}) coordinates and "
                         f"{padded} values, got ({out_subs.shape[0]}, {out_subs.shape[1]}) and "
                         f"{out_vals.shape[0]}")
    if padded == 0:
        return
    cdef const int32_t* ps = &subs[0, 0] if nnz else NULL
    cdef const value_t* pv = &vals[0] if nnz else NULL
    cdef int32_t* ds = &out_subs[0, 0]
    cdef value_t* dv = &out_vals[0]
    if not chunk:
        chunk = 1               # chunks of one: position p = j, tiles of consecutive entries
        nchunks = n
    ntiles = (nchunks + TILE_CHUNKS - 1) // TILE_CHUNKS
    if num_threads < 1:
        num_threads = 1
    for t in prange(ntiles, nogil=True, schedule="static", num_threads=num_threads):
        c0 = t * TILE_CHUNKS
        c1 = c0 + TILE_CHUNKS
        if c1 > nchunks:
            c1 = nchunks
        # destination order: for each entry k of the tile's chunks, a run of c1 - c0 entries
        for k in range(chunk):
            for c in range(c0, c1):
                j = c * chunk + k
                p = k * nchunks + c
                if j < n:
                    src = op[start + j] if op != NULL else start + j
                    if src < 0 or src >= nnz:
                        bad += 1
                        src = 0
                    for q in range(N):
                        ds[p * N + q] = ps[src * N + q]
                    dv[p] = pv[src]
                else:
                    for q in range(N):
                        ds[p * N + q] = 0
                    dv[p] = 0
    if bad:
        raise ValueError("interleave_block: the order holds positions outside the nonzeros")


ctypedef fused item_t:
    int64_t
    float
    double


def take_rows(const item_t[:, ::1] src, const int64_t[::1] order, item_t[:, ::1] out,
              int num_threads=1):
    """``out[i] = src[order[i]]`` for every row ``i`` of ``out`` (NumPy's ``src[order]``), in
    ``num_threads`` contiguous blocks of ``out``.

    Raises
    ------
    ValueError
        On shapes that do not agree or an entry of ``order`` outside ``src``'s rows.
    """
    cdef Py_ssize_t n = order.shape[0]
    cdef Py_ssize_t m = src.shape[0]
    cdef Py_ssize_t N = src.shape[1]
    cdef Py_ssize_t nb, b, i, lo, hi, q, r
    cdef int bad = 0
    if out.shape[0] != n or out.shape[1] != N:
        raise ValueError(f"take_rows: {n} rows of {N} asked for, the output is "
                         f"({out.shape[0]}, {out.shape[1]})")
    if n == 0 or N == 0:
        return
    nb = (n * N) // (MIN_BLOCK_C // 8)
    if nb > num_threads:
        nb = num_threads
    if nb < 1:
        nb = 1
    cdef const item_t* ps = &src[0, 0] if m else NULL
    cdef item_t* po = &out[0, 0]
    cdef const int64_t* pi = &order[0]
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        lo = n * b // nb
        hi = n * (b + 1) // nb
        for i in range(lo, hi):
            r = pi[i]
            if r < 0 or r >= m:
                bad += 1
                continue
            for q in range(N):
                po[i * N + q] = ps[r * N + q]
    if bad:
        raise ValueError("take_rows: the order holds rows outside the source")


# ---------------------------------------------------------------- the normal form's passes
def column_sumsq(const value_t[:, ::1] f, value_t[::1] out):
    """``out[r] = Σ_i f[i, r]²``, squared and added in ``f``'s type, row after row: the bits of
    ``np.add.reduce(f * f, axis=0)`` (NumPy adds along the rows of a C-ordered matrix in row
    order), which :func:`numpy.linalg.norm` takes the root of, without its temporary matrix.
    """
    cdef Py_ssize_t I = f.shape[0], R = f.shape[1], i, r
    cdef value_t x
    if out.shape[0] != R:
        raise ValueError(f"column_sumsq: {R} columns, {out.shape[0]} outputs")
    with nogil:
        for r in range(R):
            out[r] = 0
        for i in range(I):
            for r in range(R):
                x = f[i, r]
                out[r] = out[r] + x * x


def column_argmax_abs(const value_t[:, ::1] f, int64_t[::1] argmax):
    """``argmax[r]`` = the first row of the largest ``|f[i, r]|``, the first NaN if there is
    one: :func:`numpy.argmax` of each column's magnitudes, in one pass over the rows of a
    C-ordered matrix (NumPy's ``argmax(axis=0)`` copies it transposed first, and an
    ``argmax`` per column reads every row once per column).
    """
    cdef Py_ssize_t I = f.shape[0], R = f.shape[1], i, r
    cdef value_t a
    if argmax.shape[0] != R:
        raise ValueError(f"column_argmax_abs: {R} columns, {argmax.shape[0]} outputs")
    if R == 0:
        return
    cdef value_t[::1] best = np.full(R, -1, dtype=np.asarray(f[:1, :1]).dtype)
    cdef unsigned char[::1] nan = np.zeros(R, dtype=np.uint8)
    cdef value_t* pb = &best[0]
    cdef int64_t* pa = &argmax[0]
    cdef unsigned char* pn = &nan[0]
    cdef const value_t* row
    cdef bint gt
    with nogil:
        for r in range(R):
            pa[r] = 0
        for i in range(I):
            row = &f[i, 0]
            # branch-free, so that the loop over the columns vectorises; a NaN compares
            # false and is never taken here, only noted
            for r in range(R):
                a = fabs(row[r])
                gt = a > pb[r]
                pb[r] = a if gt else pb[r]
                pa[r] = i if gt else pa[r]
                pn[r] |= a != a
        for r in range(R):
            if pn[r]:
                for i in range(I):
                    if f[i, r] != f[i, r]:
                        pa[r] = i
                        break


def arrange_columns(const value_t[:, ::1] f, const int64_t[::1] order, const value_t[::1] scale,
                    const unsigned char[::1] negate, value_t[:, ::1] out, int64_t[::1] argmax,
                    int num_threads=1):
    """``out[:, r] = f[:, order[r]] / scale[r]``, negated where ``negate[r]``, and ``argmax[r]``
    the first row of the largest ``|out[i, r]|`` (the first NaN if any, as
    :func:`numpy.argmax`): NumPy's ``take``, division, negation, ``abs`` and ``argmax`` of the
    normal form in one pass, the rows in ``num_threads`` blocks.  Every entry is one division
    (and a negation), so the bits do not depend on the threads.

    Raises
    ------
    ValueError
        On shapes that do not agree or an entry of ``order`` outside ``f``'s columns.
    """
    cdef Py_ssize_t I = f.shape[0], C = f.shape[1], R = out.shape[1]
    cdef Py_ssize_t nb, b, i, r, lo, hi
    if (out.shape[0] != I or order.shape[0] != R or scale.shape[0] != R
            or negate.shape[0] != R or argmax.shape[0] != R):
        raise ValueError("arrange_columns: the shapes do not agree")
    for r in range(R):
        if order[r] < 0 or order[r] >= C:
            raise ValueError(f"arrange_columns: column {order[r]} of a matrix of {C}")
    if R == 0:
        return
    argmax[:] = 0
    if I == 0:
        return
    nb = I // 4096
    if nb > num_threads:
        nb = num_threads
    if nb < 1:
        nb = 1
    # per block and column: the largest magnitude, its first row, the first NaN's row (or -1)
    cdef value_t[:, ::1] best = np.empty((nb, R), dtype=np.asarray(scale).dtype)
    cdef int64_t[:, ::1] where = np.zeros((nb, R), dtype=np.int64)
    cdef int64_t[:, ::1] nan = np.full((nb, R), -1, dtype=np.int64)
    cdef value_t* pb
    cdef int64_t* pw
    cdef int64_t* pn
    cdef const value_t* row
    cdef value_t* orow
    cdef value_t v, a
    cdef bint gt
    for b in prange(nb, nogil=True, schedule="static", num_threads=nb):
        lo = I * b // nb
        hi = I * (b + 1) // nb
        pb = &best[b, 0]
        pw = &where[b, 0]
        pn = &nan[b, 0]
        for r in range(R):
            pb[r] = -1
            pw[r] = lo
        for i in range(lo, hi):
            row = &f[i, 0]
            orow = &out[i, 0]
            for r in range(R):
                v = row[order[r]] / scale[r]
                if negate[r]:
                    v = -v
                orow[r] = v
                a = fabs(v)
                gt = a > pb[r]
                pb[r] = a if gt else pb[r]
                pw[r] = i if gt else pw[r]
                if a != a and pn[r] < 0:
                    pn[r] = i
    # the blocks in row order: a later block wins only with a strictly larger magnitude
    for r in range(R):
        argmax[r] = where[0, r]
        for b in range(nb):
            if nan[b, r] >= 0:
                argmax[r] = nan[b, r]
                break
        else:
            a = best[0, r]
            for b in range(1, nb):
                if best[b, r] > a:
                    a = best[b, r]
                    argmax[r] = where[b, r]
