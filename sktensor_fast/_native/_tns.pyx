# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Parallel parsing and formatting of FROSTT ``.tns`` text.

:func:`parse` turns a block of whole lines into coordinates and values.  The block is cut into
segments at line breaks, one per thread; every segment counts its line breaks (an upper bound on
its rows), parses its lines into its own range of the output, and the ranges are then closed up
in order.  So the rows come out in file order whatever the number of threads.

A coordinate is a run of digits (other integral spellings such as ``+12`` or ``1.2e1`` go through
``strtod``).  A value of at most 19 significant digits and a decimal exponent within 22 is
computed exactly as ``mantissa * 10**e`` or ``mantissa / 10**-e``: both operands are exact
doubles, so the one rounding gives the correctly rounded result, the same double as Python's
``float()``; every other value goes through the C library's ``strtod`` (correctly rounded).
Nothing but ``[0-9+-.eE]`` is handed to ``strtod``, so hexadecimal, ``inf`` or ``nan`` text is
refused here as by the pure-Python rules.

A segment stops at its first bad line and reports where it starts; the caller re-reads that
one line in Python to say what is wrong with it (its line number is known from the line breaks
before it).

:func:`format_rows` writes rows of coordinates (1-based) and values as text, each thread
formatting a contiguous range into its own part of one buffer.
"""
cimport cython
from cython.parallel cimport prange
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memmove, memchr, memcpy
from libc.stdint cimport int64_t, uint64_t, int32_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #include <stdint.h>
    #include <math.h>
    #include <float.h>
    #include <stdio.h>

    static const double skn_pow10[23] = {
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
        1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

    static inline int skn_ws(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13 && c != 10); }
    static inline int skn_sep(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13); }

    /* end of the token starting at p */
    static inline const char *skn_tok_end(const char *p, const char *end) {
        while (p < end && !skn_sep((unsigned char) *p)) p++;
        return p;
    }

    /* strtod on [s, e) when it holds only characters of a decimal number; 1 on success */
    static int skn_strtod(const char *s, const char *e, double *out) {
        char local[128];
        char *buf = local;
        int64_t len = e - s;
        int ok = 0;
        for (const char *q = s; q < e; q++) {
            char c = *q;
            if (!((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' ||
                  c == 'E'))
                return 0;
        }
        if (len <= 0) return 0;
        if (len >= (int64_t) sizeof(local)) {
            buf = (char *) malloc(len + 1);
            if (buf == NULL) return 0;
        }
        memcpy(buf, s, len);
        buf[len] = 0;
        char *stop = NULL;
        double v = strtod(buf, &stop);
        if (stop == buf + len) { *out = v; ok = 1; }
        if (buf != local) free(buf);
        return ok;
    }

    /* a coordinate token at *pp: digits, or another spelling of an integer; 1 on success */
    static inline int skn_coord(const char **pp, const char *end, int64_t *out) {
        const char *p = *pp, *s = p;
        uint64_t v = 0;
        int nd = 0, any = 0;
        while (p < end && (unsigned) (*p - '0') < 10u) {
            unsigned d = (unsigned) (*p - '0');
            any = 1;
            if (nd > 0 || d) {           /* leading zeros do not count */
                if (nd < 19) v = v * 10 + d;
                nd++;
            }
            p++;
        }
        if (any && (p == end || skn_sep((unsigned char) *p))) {
            /* 19 digits stay below 2**64; beyond int64 is an error the caller explains */
            if (nd > 19 || v > (uint64_t) INT64_MAX) { *pp = p; return 0; }
            *out = (int64_t) v;
            *pp = p;
            return 1;
        }
        const char *e = skn_tok_end(s, end);
        *pp = e;
        /* +digits */
        if (*s == '+' && e - s >= 2 && e - s <= 19) {
            int digits = 1;
            uint64_t w = 0;
            for (const char *q = s + 1; q < e; q++) {
                if ((unsigned) (*q - '0') >= 10u) { digits = 0; break; }
                w = w * 10 + (uint64_t) (*q - '0');
            }
            if (digits) { *out = (int64_t) w; return 1; }
        }
        double d;
        if (!skn_strtod(s, e, &d)) return 0;
        if (!(d - d == 0) || d != floor(d) || fabs(d) >= 9223372036854775808.0) return 0;
        *out = (int64_t) d;
        return 1;
    }

    /* a value token at *pp; 1 on success (the value may be infinite: the caller checks) */
    static inline int skn_value(const char **pp, const char *end, double *out) {
        const char *p = *pp, *s = p;
        int neg = 0, any = 0, inexact = 0, nd = 0;
        uint64_t m = 0;
        int64_t dexp = 0;
        if (p < end && (*p == '-' || *p == '+')) { neg = *p == '-'; p++; }
        while (p < end && (unsigned) (*p - '0') < 10u) {
            unsigned d = (unsigned) (*p - '0');
            any = 1;
            if (m == 0 && d == 0) { /* leading zero */ }
            else if (nd < 19) { m = m * 10 + d; nd++; }
            else { dexp++; if (d) inexact = 1; }
            p++;
        }
        if (p < end && *p == '.') {
            p++;
            while (p < end && (unsigned) (*p - '0') < 10u) {
                unsigned d = (unsigned) (*p - '0');
                any = 1;
                if (m == 0 && d == 0) dexp--;
                else if (nd < 19) { m = m * 10 + d; nd++; dexp--; }
                else if (d) inexact = 1;
                p++;
            }
        }
        if (any && p < end && (*p == 'e' || *p == 'E')) {
            const char *q = p + 1;
            int eneg = 0;
            int64_t ev = 0;
            int edig = 0;
            if (q < end && (*q == '-' || *q == '+')) { eneg = *q == '-'; q++; }
            while (q < end && (unsigned) (*q - '0') < 10u) {
                if (ev < 100000) ev = ev * 10 + (*q - '0');
                edig++;
                q++;
            }
            if (edig == 0) inexact = 2;  /* malformed: let strtod decide */
            dexp += eneg ? -ev : ev;
            p = q;
        }
        if (any && !inexact && (p == end || skn_sep((unsigned char) *p))) {
            if (m == 0) { *out = neg ? -0.0 : 0.0; *pp = p; return 1; }
            if (m <= (1ull << 53) && dexp >= -22 && dexp <= 22) {
                double v = (double) m;
                v = dexp >= 0 ? v * skn_pow10[dexp] : v / skn_pow10[-dexp];
                *out = neg ? -v : v;
                *pp = p;
                return 1;
            }
        }
        const char *e = skn_tok_end(s, end);
        *pp = e;
        return skn_strtod(s, e, out);
    }

    typedef struct {
        int64_t rows;       /* rows written */
        int64_t err;        /* offset of the first bad line, or -1 */
        int64_t zeros;      /* zero values */
        int64_t underflows; /* nonzero text values that round to 0 in the value type */
        int64_t desc;       /* some row is lexicographically before the one above it */
        int64_t equal;      /* some row equals the one above it */
    } skn_seg;

    /* parse the lines of buf[lo:hi) (lo at a line start) into subs/vals rows from 0 on */
    static void skn_parse_seg(const char *buf, int64_t lo, int64_t hi, int ncols, int64_t base,
                              const int64_t *shape, int64_t *subs, void *vals, int f32,
                              int64_t *maxima, skn_seg *rep) {
        const char *p = buf + lo, *end = buf + hi;
        int N = ncols - 1;
        int64_t r = 0;
        rep->err = -1;
        rep->zeros = 0;
        rep->underflows = 0;
        rep->desc = 0;
        rep->equal = 0;
        while (p < end) {
            const char *line = p;
            while (p < end && skn_ws((unsigned char) *p)) p++;
            if (p == end) break;
            if (*p == '\\n') { p++; continue; }
            if (*p == '#') {
                const char *nl = (const char *) memchr(p, '\\n', end - p);
                p = nl ? nl + 1 : end;
                continue;
            }
            int64_t *row = subs + r * N;
            int k;
            for (k = 0; k < N; k++) {
                if (k > 0) {
                    while (p < end && skn_ws((unsigned char) *p)) p++;
                    if (p == end || *p == '\\n') goto bad;
                }
                int64_t c;
                if (!skn_coord(&p, end, &c)) goto bad;
                if (c < base) goto bad;
                c -= base;
                if (c == INT64_MAX) goto bad;   /* its mode would be longer than int64 holds */
                if (shape != NULL && c >= shape[k]) goto bad;
                row[k] = c;
                if (c > maxima[k]) maxima[k] = c;
            }
            while (p < end && skn_ws((unsigned char) *p)) p++;
            if (p == end || *p == '\\n') goto bad;
            double v;
            if (!skn_value(&p, end, &v)) goto bad;
            if (!(v - v == 0)) goto bad;
            if (f32) {
                float fv = (float) v;
                if (isinf(fv)) goto bad;     /* rounds beyond the largest float32 */
                ((float *) vals)[r] = fv;
                if ((float) v == 0) {
                    rep->zeros++;
                    if (v != 0) rep->underflows++;
                }
            } else {
                ((double *) vals)[r] = v;
                if (v == 0) rep->zeros++;
            }
            while (p < end && skn_ws((unsigned char) *p)) p++;
            if (p < end && *p != '\\n') goto bad;
            if (p < end) p++;
            if (r > 0) {
                const int64_t *prev = row - N;
                int cmp = 0;
                for (k = 0; k < N; k++) {
                    if (row[k] != prev[k]) { cmp = row[k] < prev[k] ? -1 : 1; break; }
                }
                if (cmp < 0) rep->desc = 1;
                else if (cmp == 0) rep->equal = 1;
            }
            r++;
            continue;
        bad:
            rep->err = line - buf;
            break;
        }
        rep->rows = r;
    }

    static int64_t skn_count_nl(const char *p, int64_t n) {
        int64_t c = 0;
        for (int64_t i = 0; i < n; i++) c += p[i] == '\\n';
        return c;
    }
    """
    ctypedef struct skn_seg:
        int64_t rows
        int64_t err
        int64_t zeros
        int64_t underflows
        int64_t desc
        int64_t equal
    void skn_parse_seg(const char* buf, int64_t lo, int64_t hi, int ncols, int64_t base,
                       const int64_t* shape, int64_t* subs, void* vals, int f32,
                       int64_t* maxima, skn_seg* rep) noexcept nogil
    int64_t skn_count_nl(const char* p, int64_t n) noexcept nogil

ctypedef fused value_t:
    float
    double

#: bytes a segment should hold at least before another thread is worth starting
DEF MIN_SEGMENT_C = 262144
MIN_SEGMENT = MIN_SEGMENT_C


def parse(const unsigned char[::1] buf, Py_ssize_t length, int ncols, int64_t base, shape,
          int64_t[:, ::1] subs, value_t[::1] vals, Py_ssize_t row0, int num_threads=1):
    """Parse the lines of ``buf[:length]`` into ``subs[row0:]`` and ``vals[row0:]``.

    ``ncols`` columns a line (``ncols - 1`` coordinates, then the value), coordinates counted
    from ``base`` and, with ``shape`` (an int64 array), below the mode lengths.  The output must
    have room for ``buf.count(b"\\n") + 1`` rows after ``row0``.  Returns a dict: ``rows``
    (rows written), ``error`` (offset of the first bad line, or -1), ``maxima`` (largest
    coordinate of every mode, -1 when no row), ``zeros`` (zero values), ``underflows`` (values
    not 0 in the text that round to 0 as float32), ``order`` (2: every
    row after the one above it, 1: some equal, 0: some before it).
    """
    cdef Py_ssize_t N = ncols - 1
    cdef Py_ssize_t nseg = max(1, min(num_threads, length // MIN_SEGMENT_C))
    cdef Py_ssize_t s, lo, w, k
    cdef int f32 = value_t is float
    cdef int64_t[::1] bounds = np.empty(nseg + 1, dtype=np.int64)
    cdef int64_t[::1] caps = np.zeros(nseg, dtype=np.int64)
    cdef int64_t[::1] starts = np.zeros(nseg + 1, dtype=np.int64)
    cdef int64_t[:, ::1] maxima = np.full((nseg, max(N, 1)), -1, dtype=np.int64)
    cdef int64_t[::1] shp
    cdef const int64_t* pshape = NULL
    cdef skn_seg* reps
    cdef const char* pb = <const char*> &buf[0] if length else NULL
    cdef const void* found
    if N < 1:
        raise ValueError("parse: a line needs at least one coordinate and a value")
    if length > buf.shape[0]:
        raise ValueError("parse: length beyond the buffer")
    if subs.shape[1] != N or vals.shape[0] != subs.shape[0]:
        raise ValueError("parse: output arrays of the wrong shape")
    if shape is not None:
        shp = np.ascontiguousarray(shape, dtype=np.int64)
        if shp.shape[0] != N:
            raise ValueError("parse: shape has the wrong length")
        pshape = &shp[0]
    result = {"rows": 0, "error": -1, "maxima": np.full(N, -1, dtype=np.int64), "zeros": 0,
              "underflows": 0, "order": 2}
    if length == 0:
        return result
    # segment boundaries just after a line break
    bounds[0] = 0
    for s in range(1, nseg):
        lo = max(length * s // nseg, bounds[s - 1])
        found = memchr(pb + lo, 10, length - lo) if lo < length else NULL
        bounds[s] = (<const char*> found - pb) + 1 if found != NULL else length
    bounds[nseg] = length
    for s in prange(nseg, nogil=True, schedule="static", num_threads=nseg):
        caps[s] = skn_count_nl(pb + bounds[s], bounds[s + 1] - bounds[s])
    caps[nseg - 1] += 1
    for s in range(nseg):
        starts[s + 1] = starts[s] + caps[s]
    if row0 + starts[nseg] > subs.shape[0]:
        raise ValueError("parse: the output has no room for every line")
    reps = <skn_seg*> calloc(nseg, sizeof(skn_seg))
    if reps == NULL:
        raise MemoryError()
    cdef int64_t* psubs = &subs[0, 0] if subs.shape[0] else NULL
    cdef value_t* pvals = &vals[0] if vals.shape[0] else NULL
    try:
        for s in prange(nseg, nogil=True, schedule="static", num_threads=nseg):
            skn_parse_seg(pb, bounds[s], bounds[s + 1], ncols, base, pshape,
                          psubs + (row0 + starts[s]) * N, <void*> (pvals + row0 + starts[s]),
                          f32, &maxima[s, 0], &reps[s])
        for s in range(nseg):
            if reps[s].err >= 0:
                result["error"] = int(reps[s].err)
                return result
        # close up the segments' ranges, in order; then check the order across them
        w = 0
        order = 2
        zeros = 0
        underflows = 0
        for s in range(nseg):
            if reps[s].rows and w != starts[s]:
                memmove(psubs + (row0 + w) * N, psubs + (row0 + starts[s]) * N,
                        reps[s].rows * N * sizeof(int64_t))
                memmove(pvals + row0 + w, pvals + row0 + starts[s],
                        reps[s].rows * sizeof(value_t))
            if reps[s].rows and w > 0:
                c = _cmp_rows(psubs + (row0 + w) * N, psubs + (row0 + w - 1) * N, N)
                if c < 0:
                    order = 0
                elif c == 0 and order == 2:
                    order = 1
            if reps[s].desc:
                order = 0
            elif reps[s].equal and order == 2:
                order = 1
            zeros += reps[s].zeros
            underflows += reps[s].underflows
            w += reps[s].rows
        mx = np.asarray(maxima).max(axis=0)[:N] if N else np.zeros(0, np.int64)
        result.update(rows=int(w), maxima=mx, zeros=int(zeros), underflows=int(underflows),
                      order=order)
        return result
    finally:
        free(reps)


cdef int _cmp_rows(const int64_t* a, const int64_t* b, Py_ssize_t N) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(N):
        if a[k] != b[k]:
            return -1 if a[k] < b[k] else 1
    return 0


def compare_rows(const int64_t[::1] a, const int64_t[::1] b):
    """-1, 0 or 1 as row ``a`` comes before, equals or comes after row ``b``."""
    return _cmp_rows(&a[0], &b[0], a.shape[0])


# ----------------------------------------------------------------------------- formatting
cdef extern from *:
    """
    static const char skn_digit_pairs[201] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";

    /* decimal digits of v at p; returns the number of characters */
    static inline int skn_u64(char *p, uint64_t v) {
        char tmp[24];
        int n = 0;
        while (v >= 100) {
            unsigned q = (unsigned) (v % 100);
            v /= 100;
            tmp[n++] = skn_digit_pairs[2 * q + 1];
            tmp[n++] = skn_digit_pairs[2 * q];
        }
        if (v >= 10) {
            tmp[n++] = skn_digit_pairs[2 * v + 1];
            tmp[n++] = skn_digit_pairs[2 * v];
        } else {
            tmp[n++] = (char) ('0' + v);
        }
        for (int i = 0; i < n; i++) p[i] = tmp[n - 1 - i];
        return n;
    }

    /* the value as text: mode 0 an integer, 1 "%.{prec}g", 2 the shortest of %.15g, %.16g,
       %.17g that reads back as the same double, 3 (float32 values) the shortest of %.6g to
       %.9g that reads back as the same float32 */
    /* a float written as digits alone gets ".0" (as Python writes floats): it stays a float
       to a reader that guesses types */
    static inline int skn_float_mark(char *p, int n) {
        for (int i = 0; i < n; i++)
            if (p[i] == '.' || p[i] == 'e' || p[i] == 'n' || p[i] == 'i') return n;
        p[n] = '.';
        p[n + 1] = '0';
        return n + 2;
    }

    static inline int skn_fmt_value(char *p, double v, int mode, int prec) {
        if (mode == 0) {
            if (v < 0) { p[0] = '-'; return 1 + skn_u64(p + 1, (uint64_t) (-v)); }
            return skn_u64(p, (uint64_t) v);
        }
        if (mode == 1) return snprintf(p, 32, "%.*g", prec, v);
        if (mode == 3) {
            /* a float32 value: the shortest text that reads back (as a double rounded to
               float32) as the same float32; 9 digits always do */
            for (int digits = 6; digits <= 9; digits++) {
                int n = snprintf(p, 32, "%.*g", digits, v);
                if (digits == 9 || (float) strtod(p, NULL) == (float) v)
                    return skn_float_mark(p, n);
            }
        }
        for (int digits = 15; digits <= 17; digits++) {
            int n = snprintf(p, 32, "%.*g", digits, v);
            if (digits == 17 || strtod(p, NULL) == v) return skn_float_mark(p, n);
        }
        return 0;
    }

    /* rows [lo, hi) as text at out; returns the bytes written */
    static int64_t skn_format_block(const int64_t *subs, const void *vals, int f32, int N,
                                    int64_t lo, int64_t hi, int mode, int prec, char *out) {
        char *p = out;
        for (int64_t i = lo; i < hi; i++) {
            const int64_t *row = subs + i * N;
            for (int k = 0; k < N; k++) {
                p += skn_u64(p, (uint64_t) (row[k] + 1));
                *p++ = ' ';
            }
            double v = f32 ? (double) ((const float *) vals)[i] : ((const double *) vals)[i];
            p += skn_fmt_value(p, v, mode, prec);
            *p++ = '\\n';
        }
        return p - out;
    }
    """
    int64_t skn_format_block(const int64_t* subs, const void* vals, int f32, int N, int64_t lo,
                             int64_t hi, int mode, int prec, char* out) noexcept nogil

#: rows formatted by one task (a fixed size: the text does not depend on the thread count)
DEF FORMAT_BLOCK_C = 8192
FORMAT_BLOCK = FORMAT_BLOCK_C

#: bytes a row may take at most: 20 per coordinate and separator, 32 for the value, a newline
def row_bytes_max(Py_ssize_t ncoords):
    return 20 * ncoords + 35


def format_rows(const int64_t[:, ::1] subs, const value_t[::1] vals, Py_ssize_t lo,
                Py_ssize_t hi, int mode, int precision, unsigned char[::1] out,
                int num_threads=1):
    """Text of rows ``lo:hi`` (1-based coordinates, the value last) into ``out``.

    ``mode`` 0 writes the values as integers (the caller checked that they are), 1 with
    ``%.{precision}g``, 2 with the shortest of ``%.15g``, ``%.16g`` and ``%.17g`` that reads
    back as the same number (for float32 values: of ``%.6g`` to ``%.9g``, read back as a double
    rounded to float32).  ``out`` needs ``(hi - lo) * row_bytes_max(N)`` bytes.  Returns
    the number of bytes written.
    """
    cdef Py_ssize_t N = subs.shape[1]
    cdef Py_ssize_t rows = hi - lo
    cdef Py_ssize_t rmax = 20 * N + 33
    cdef Py_ssize_t nblk = (rows + FORMAT_BLOCK_C - 1) // FORMAT_BLOCK_C
    cdef Py_ssize_t b, w, blo, bhi
    cdef int f32 = value_t is float
    cdef int nt = max(1, min(num_threads, nblk))
    if mode == 2 and f32:
        mode = 3
    cdef int64_t[::1] lens = np.zeros(max(nblk, 1), dtype=np.int64)
    if rows <= 0:
        return 0
    if lo < 0 or hi > subs.shape[0] or vals.shape[0] != subs.shape[0]:
        raise ValueError("format_rows: rows out of range")
    if out.shape[0] < rows * rmax:
        raise ValueError("format_rows: the output buffer is too small")
    cdef const int64_t* ps = &subs[0, 0]
    cdef const value_t* pv = &vals[0]
    cdef char* po = <char*> &out[0]
    for b in prange(nblk, nogil=True, schedule="dynamic", num_threads=nt):
        blo = lo + b * FORMAT_BLOCK_C
        bhi = blo + FORMAT_BLOCK_C
        if bhi > hi:
            bhi = hi
        lens[b] = skn_format_block(ps, <const void*> pv, f32, N, blo, bhi, mode, precision,
                                   po + b * FORMAT_BLOCK_C * rmax)
    w = 0
    for b in range(nblk):
        if w != b * FORMAT_BLOCK_C * rmax:
            memmove(po + w, po + b * FORMAT_BLOCK_C * rmax, lens[b])
        w += lens[b]
    return w


def count_newlines(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t stop):
    """Line breaks in ``buf[start:stop]``."""
    if stop <= start:
        return 0
    if start < 0 or stop > buf.shape[0]:
        raise ValueError("count_newlines: range outside the buffer")
    return skn_count_nl(<const char*> &buf[start], stop - start)


cdef struct _lines_seg:
    int64_t count       # line breaks in the segment
    int64_t first       # offset of its first line break (-1: none)
    int64_t last        # offset of its last line break
    int64_t longest     # longest line between two of its own line breaks
    int64_t at          # start of that line


def line_stats(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t stop,
               int64_t limit, int num_threads=1):
    """Line breaks in ``buf[start:stop]`` and the first line longer than ``limit`` bytes.

    Returns ``(count, offset)``: the number of line breaks and the offset of the start of the
    first line (counted from ``start``; the text before ``start`` is not looked at) longer than
    ``limit`` bytes without its line break, or -1 when there is none (or ``limit < 0``).  The
    text after the last line break counts as a line.  One pass, in parallel segments.
    """
    cdef Py_ssize_t n = stop - start
    if n <= 0:
        return 0, -1
    if start < 0 or stop > buf.shape[0]:
        raise ValueError("line_stats: range outside the buffer")
    cdef Py_ssize_t nseg = max(1, min(num_threads, n // MIN_SEGMENT_C))
    cdef _lines_seg* segs = <_lines_seg*> calloc(nseg, sizeof(_lines_seg))
    if segs == NULL:
        raise MemoryError()
    cdef const unsigned char* p = &buf[start]
    cdef Py_ssize_t s, i, lo, hi, prev
    cdef int64_t count = 0, bad = -1, line_start = 0, length
    try:
        for s in prange(nseg, nogil=True, schedule="static", num_threads=nseg):
            lo = n * s // nseg
            hi = n * (s + 1) // nseg
            segs[s].first = -1
            segs[s].last = -1
            segs[s].longest = -1
            prev = -1
            for i in range(lo, hi):
                if p[i] == 10:
                    segs[s].count += 1
                    if prev >= 0 and i - prev - 1 > segs[s].longest:
                        segs[s].longest = i - prev - 1
                        segs[s].at = prev + 1
                    if segs[s].first < 0:
                        segs[s].first = i
                    prev = i
            segs[s].last = prev
        # lines that cross segments, and the first segment's leading line, in order
        if limit >= 0:
            line_start = 0
            for s in range(nseg):
                if segs[s].first < 0:
                    continue
                length = segs[s].first - line_start
                if length > limit:
                    bad = line_start
                    break
                if segs[s].longest > limit:
                    # the first such line inside the segment: scan it again to find it
                    prev = segs[s].first
                    for i in range(segs[s].first + 1, segs[s].last + 1):
                        if p[i] == 10:
                            if i - prev - 1 > limit:
                                bad = prev + 1
                                break
                            prev = i
                    break
                line_start = segs[s].last + 1
            if bad < 0 and n - line_start > limit:
                bad = line_start
        for s in range(nseg):
            count += segs[s].count
    finally:
        free(segs)
    return count, bad
