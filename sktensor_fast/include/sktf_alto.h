/* sktensor_fast: the CPU kernels over the ALTO format (backends/cpu/_alto.pyx; the layout is
 * described in formats/alto.py): index codec (PEXT/PDEP or byte tables), one partition of
 * MTTKRP / CP-APR's Phi, Kruskal model values, the parallel LSD radix sort of the indices. */
#ifndef SKTF_ALTO_H
#define SKTF_ALTO_H

#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "sktf_macros.h"
#include "sktf_cp.h"
#include "sktf_log.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(SKTF_NO_BMI2)
#include <immintrin.h>
#define SKTF_BMI2_BUILD 1
#define SKTF_BMI2 __attribute__((target("bmi2")))
/* the PEXT kernels also use AVX2 and FMA: every CPU with a fast PEXT has them */
#define SKTF_PEXT_KERNEL __attribute__((target("bmi2,avx2,fma")))
#else
#define SKTF_BMI2_BUILD 0
#define SKTF_BMI2
#define SKTF_PEXT_KERNEL
#endif

/* Bit layout of the linear index, per mode n (built by formats/alto.py). */
typedef struct {
    int nmodes;
    int words;                /* 64-bit words per index: 1, or 2 stored as (hi, lo) */
    const uint64_t *mask_lo;  /* [n] index bits of mode n in the low word */
    const uint64_t *mask_hi;  /* [n] ... in the high word */
    const int32_t *lo_bits;   /* [n] popcount(mask_lo[n]) */
    const int32_t *gptr;      /* [n + 1] shift groups of mode n: gptr[n] .. gptr[n+1] */
    const int32_t *gword;     /* 0: low word, 1: high word */
    const int32_t *grs;       /* right shift */
    const int32_t *gls;       /* left shift */
    const uint64_t *gmask;    /* coordinate bits of the group (after shifting) */
    int nbytes;               /* index bytes that hold bits */
    const uint64_t *tab;      /* [nbytes][256][words]: byte value -> its bits, grouped */
    const int32_t *goff;      /* [n] offset of mode n in the grouped value */
    const int32_t *gbits;     /* [n] bits of mode n */
    const uint64_t *gcmask;   /* [n] (1 << gbits[n]) - 1 */
} sktf_codec;

/* One MTTKRP / Φ call over ALTO. */
typedef struct {
    sktf_codec cd;
    const uint64_t *lin;
    const void *vals;
    void * const *fac;        /* nmodes factor matrices (I_k x R), row-major */
    int mode;
    int64_t R;
    const void *B;            /* NULL for MTTKRP, (I_mode x R) for Φ */
    double eps;
    void *out;                /* (I_mode x R) */
    const int32_t *slot;      /* compact path: per nonzero, its row's index in its
                                 partition's compact buffer, -1 for a row the partition
                                 owns (written in place); NULL otherwise */
    int pf;                   /* software-prefetch distance (nonzeros ahead) of the 3- to
                                 5-way kernels; 0: none (factors that stay in cache) */
    int64_t lane_mask;        /* buffer path: nonzero j of a partition starting at s adds
                                 into lane (j - s) & lane_mask of the partition's buffer, */
    int64_t lane_stride;      /* lanes lane_stride entries apart (lane_mask + 1 lanes, a
                                 power of two; 0 and 0: one lane) */
} sktf_alto_job;

static int sktf_use_pext = 0;

static int sktf_has_bmi2(void) {
#if SKTF_BMI2_BUILD
    __builtin_cpu_init();
    return __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("avx2")
           && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static int sktf_pext_is_fast(void) {
#if SKTF_BMI2_BUILD
    if (!sktf_has_bmi2()) return 0;
    /* microcoded (slow) PEXT/PDEP on AMD before Zen 3 */
    if (__builtin_cpu_is("amd") && (__builtin_cpu_is("znver1") || __builtin_cpu_is("znver2")
                                    || __builtin_cpu_is("bdver4")))
        return 0;
    return 1;
#else
    return 0;
#endif
}

static inline void sktf_load(const sktf_codec *cd, const uint64_t *lin, int64_t j,
                             uint64_t *lo, uint64_t *hi) {
    if (cd->words == 2) { *hi = lin[2 * j]; *lo = lin[2 * j + 1]; }
    else { *hi = 0; *lo = lin[j]; }
}

static inline int64_t sktf_decode_gen1(const sktf_codec *cd, uint64_t lo, uint64_t hi, int n) {
    uint64_t v = 0;
    for (int g = cd->gptr[n]; g < cd->gptr[n + 1]; ++g) {
        uint64_t w = cd->gword[g] ? hi : lo;
        v |= ((w >> cd->grs[g]) << cd->gls[g]) & cd->gmask[g];
    }
    return (int64_t) v;
}

/* Generic decoder: regroup the index bits so that each mode's bits are contiguous (one
   table lookup per index byte), then one shift and mask per mode. */
static inline void sktf_decode_tab(const sktf_codec *cd, uint64_t lo, uint64_t hi,
                                   int64_t *c) {
    const uint64_t *tab = cd->tab;
    const int nb = cd->nbytes;
    if (cd->words == 1) {
        uint64_t g = 0;
        for (int k = 0; k < nb; ++k) g |= tab[(k << 8) | ((lo >> (8 * k)) & 255)];
        for (int n = 0; n < cd->nmodes; ++n)
            c[n] = cd->gbits[n] ? (int64_t) ((g >> cd->goff[n]) & cd->gcmask[n]) : 0;
    } else {
        uint64_t g0 = 0, g1 = 0;
        for (int k = 0; k < nb; ++k) {
            uint64_t v = (k < 8 ? lo >> (8 * k) : hi >> (8 * (k - 8))) & 255;
            const uint64_t *t = tab + 2 * ((k << 8) | v);
            g0 |= t[0];
            g1 |= t[1];
        }
        for (int n = 0; n < cd->nmodes; ++n) {
            const int off = cd->goff[n], b = cd->gbits[n];
            uint64_t v;
            if (b == 0) v = 0;
            else if (off >= 64) v = g1 >> (off - 64);
            else if (off + b <= 64) v = g0 >> off;
            else v = (g0 >> off) | (g1 << (64 - off));
            c[n] = (int64_t) (v & cd->gcmask[n]);
        }
    }
}

#define SKTF_DECODE_GEN(cd, lo, hi, c) sktf_decode_tab((cd), (lo), (hi), (c));

#if SKTF_BMI2_BUILD
#define SKTF_DECODE_PEXT(cd, lo, hi, c)         if ((cd)->words == 1) {             for (int n_ = 0; n_ < (cd)->nmodes; ++n_)                 (c)[n_] = (int64_t) _pext_u64((lo), (cd)->mask_lo[n_]);         } else {             for (int n_ = 0; n_ < (cd)->nmodes; ++n_)                 (c)[n_] = (int64_t) (_pext_u64((lo), (cd)->mask_lo[n_])                           | (_pext_u64((hi), (cd)->mask_hi[n_]) << (cd)->lo_bits[n_]));         }
#endif

/* ---------------------------------------------------------------- encode / decode */
static void sktf_encode_gen(const sktf_codec *cd, const int64_t *subs, int64_t s, int64_t e,
                            uint64_t *lin) {
    const int N = cd->nmodes;
    for (int64_t j = s; j < e; ++j) {
        uint64_t w[2] = {0, 0};   /* lo, hi */
        for (int n = 0; n < N; ++n) {
            uint64_t c = (uint64_t) subs[j * N + n];
            for (int g = cd->gptr[n]; g < cd->gptr[n + 1]; ++g)
                w[cd->gword[g]] |= ((c & cd->gmask[g]) >> cd->gls[g]) << cd->grs[g];
        }
        if (cd->words == 2) { lin[2 * j] = w[1]; lin[2 * j + 1] = w[0]; }
        else lin[j] = w[0];
    }
}

#if SKTF_BMI2_BUILD
SKTF_BMI2 static void sktf_encode_pext(const sktf_codec *cd, const int64_t *subs, int64_t s,
                                       int64_t e, uint64_t *lin) {
    const int N = cd->nmodes;
    for (int64_t j = s; j < e; ++j) {
        uint64_t lo = 0, hi = 0;
        for (int n = 0; n < N; ++n) {
            uint64_t c = (uint64_t) subs[j * N + n];
            lo |= _pdep_u64(c, cd->mask_lo[n]);
            if (cd->words == 2) hi |= _pdep_u64(c >> cd->lo_bits[n], cd->mask_hi[n]);
        }
        if (cd->words == 2) { lin[2 * j] = hi; lin[2 * j + 1] = lo; }
        else lin[j] = lo;
    }
}
SKTF_BMI2 static int64_t sktf_decode_pext1(const sktf_codec *cd, uint64_t lo, uint64_t hi,
                                           int n) {
    uint64_t v = _pext_u64(lo, cd->mask_lo[n]);
    if (cd->words == 2) v |= _pext_u64(hi, cd->mask_hi[n]) << cd->lo_bits[n];
    return (int64_t) v;
}
SKTF_BMI2 static void sktf_decode_pext_range(const sktf_codec *cd, const uint64_t *lin,
                                             int64_t s, int64_t e, int64_t *subs) {
    const int N = cd->nmodes;
    for (int64_t j = s; j < e; ++j) {
        uint64_t lo, hi;
        sktf_load(cd, lin, j, &lo, &hi);
        SKTF_DECODE_PEXT(cd, lo, hi, subs + (j - s) * N)
    }
}
#endif

static void sktf_encode(const sktf_codec *cd, const int64_t *subs, int64_t s, int64_t e,
                        uint64_t *lin) {
#if SKTF_BMI2_BUILD
    if (sktf_use_pext) { sktf_encode_pext(cd, subs, s, e, lin); return; }
#endif
    sktf_encode_gen(cd, subs, s, e, lin);
}

/* coordinates of the nonzeros s..e; subs points at the row of nonzero s */
static void sktf_decode_range(const sktf_codec *cd, const uint64_t *lin, int64_t s, int64_t e,
                              int64_t *subs) {
#if SKTF_BMI2_BUILD
    if (sktf_use_pext) { sktf_decode_pext_range(cd, lin, s, e, subs); return; }
#endif
    const int N = cd->nmodes;
    for (int64_t j = s; j < e; ++j) {
        uint64_t lo, hi;
        sktf_load(cd, lin, j, &lo, &hi);
        SKTF_DECODE_GEN(cd, lo, hi, subs + (j - s) * N)
    }
}

/* per-mode coordinate intervals of the nonzeros s..e (cmin/cmax of length nmodes);
   c: scratch for SKTF_IBLOCK * nmodes coordinates */
#define SKTF_IBLOCK 256
static void sktf_intervals(const sktf_codec *cd, const uint64_t *lin, int64_t s, int64_t e,
                           int64_t *cmin, int64_t *cmax, int64_t *c) {
    const int N = cd->nmodes;
    for (int n = 0; n < N; ++n) { cmin[n] = INT64_MAX; cmax[n] = -1; }
    for (int64_t b = s; b < e; b += SKTF_IBLOCK) {
        const int64_t be = (b + SKTF_IBLOCK < e) ? b + SKTF_IBLOCK : e;
        sktf_decode_range(cd, lin, b, be, c);
        for (int64_t j = 0; j < be - b; ++j)
            for (int n = 0; n < N; ++n) {
                const int64_t v = c[j * N + n];
                if (v < cmin[n]) cmin[n] = v;
                if (v > cmax[n]) cmax[n] = v;
            }
    }
}

/* shared[i] = 1 when row i of mode n holds nonzeros of more than one partition; *entries
   = the entries of the compact path's buffers: over the shared rows, the number of partitions
   holding nonzeros in each */
static int sktf_shared_rows(const sktf_codec *cd, const uint64_t *lin, const int64_t *ptr,
                            int64_t nparts, int n, int64_t nrows, uint8_t *shared,
                            int64_t *entries) {
    int64_t *last = (int64_t *) malloc((nrows > 0 ? nrows : 1) * sizeof(int64_t));
    int64_t visits = 0, touched = 0, nshared = 0;   /* (row, partition) pairs, rows */
    if (last == NULL) return -1;
    for (int64_t i = 0; i < nrows; ++i) last[i] = -1;
    memset(shared, 0, (size_t) nrows);
    for (int64_t p = 0; p < nparts; ++p) {
        for (int64_t j = ptr[p]; j < ptr[p + 1]; ++j) {
            uint64_t lo, hi;
            sktf_load(cd, lin, j, &lo, &hi);
#if SKTF_BMI2_BUILD
            int64_t row = sktf_use_pext ? sktf_decode_pext1(cd, lo, hi, n)
                                        : sktf_decode_gen1(cd, lo, hi, n);
#else
            int64_t row = sktf_decode_gen1(cd, lo, hi, n);
#endif
            if (last[row] != p) {
                if (last[row] >= 0) shared[row] = 1;
                last[row] = p;
                ++visits;
            }
        }
    }
    for (int64_t i = 0; i < nrows; ++i) {
        touched += last[i] >= 0;
        nshared += shared[i];
    }
    /* a row of one partition counts one visit and is not shared */
    *entries = visits - (touched - nshared);
    free(last);
    return 0;
}

/* coordinate of mode n of one index */
static inline int64_t sktf_decode_mode(const sktf_codec *cd, uint64_t lo, uint64_t hi, int n) {
#if SKTF_BMI2_BUILD
    if (sktf_use_pext) return sktf_decode_pext1(cd, lo, hi, n);
#endif
    return sktf_decode_gen1(cd, lo, hi, n);
}

/* The compact path's plan for mode n in one partition (nonzeros s..e): the rows of its
   nonzeros that are flagged shared, sorted and without repeats, into rows_out (room for
   e - s); returns their count.  slot[j] = index of nonzero j's row among them, or -1 for
   a row that no other partition touches.  k1, k2 (int64) and i1, i2 (int32): scratch of
   e - s entries each.  The order of the rows (hence of the slots) depends on the data
   only: sorted (by a map over their span where it is short, else a radix sort). */
static int64_t sktf_compact_part(const sktf_codec *cd, const uint64_t *lin, int64_t s,
                                 int64_t e, int n, int nbits, const uint8_t *shared,
                                 int32_t *slot, int64_t *rows_out, int64_t *k1, int64_t *k2,
                                 int32_t *i1, int32_t *i2) {
    int64_t m = 0, cnt[256], rmin = INT64_MAX, rmax = -1;
    for (int64_t j = s; j < e; ++j) {
        uint64_t lo, hi;
        sktf_load(cd, lin, j, &lo, &hi);
        const int64_t row = sktf_decode_mode(cd, lo, hi, n);
        if (shared[row]) {
            k1[m] = row; i1[m] = (int32_t) (j - s); ++m;
            if (row < rmin) rmin = row;
            if (row > rmax) rmax = row;
        }
        else slot[j] = -1;
    }
    if (m > 0 && rmax - rmin < 2 * (e - s)) {
        /* the shared rows span at most twice the partition's nonzeros: mark them in a map
           over that span (k2, as 2 (e - s) int32), number the marked rows in order, look
           each nonzero's up (no sort; the same rows and slots) */
        int32_t *map = (int32_t *) k2;
        const int64_t span = rmax - rmin + 1;
        memset(map, 0, (size_t) span * sizeof(int32_t));
        for (int64_t t = 0; t < m; ++t) map[k1[t] - rmin] = 1;
        int64_t u = 0;
        for (int64_t k = 0; k < span; ++k)
            if (map[k]) { map[k] = (int32_t) u; rows_out[u++] = rmin + k; }
        for (int64_t t = 0; t < m; ++t) slot[s + i1[t]] = map[k1[t] - rmin];
        return u;
    }
    /* LSD radix sort of (row, offset) by row, 8-bit digits (stable: offsets ascend) */
    for (int sh = 0; sh < nbits; sh += 8) {
        memset(cnt, 0, sizeof cnt);
        for (int64_t t = 0; t < m; ++t) cnt[(k1[t] >> sh) & 255]++;
        int64_t run = 0;
        for (int d = 0; d < 256; ++d) { const int64_t c = cnt[d]; cnt[d] = run; run += c; }
        for (int64_t t = 0; t < m; ++t) {
            const int64_t o = cnt[(k1[t] >> sh) & 255]++;
            k2[o] = k1[t];
            i2[o] = i1[t];
        }
        int64_t *kt = k1; k1 = k2; k2 = kt;
        int32_t *it = i1; i1 = i2; i2 = it;
    }
    int64_t u = -1;
    for (int64_t t = 0; t < m; ++t) {
        if (t == 0 || k1[t] != k1[t - 1]) rows_out[++u] = k1[t];
        slot[s + i1[t]] = (int32_t) u;
    }
    return u + 1;
}

/* wall-clock seconds and the calling OpenMP thread's number (0 without OpenMP): for the
   optional phase timings of the accumulate kernels */
static inline double sktf_wtime(void)
{
#if defined(_OPENMP)
    return omp_get_wtime();
#elif defined(CLOCK_MONOTONIC)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
#else
    return 0.0;
#endif
}
static inline int sktf_thread_num(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* first index of the sorted a[0..n) with a[k] >= v */
static inline int64_t sktf_lower_bound(const int64_t *a, int64_t n, int64_t v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < v) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* ---------------------------------------------------------------- one partition */
#define SKTF_ALTO_PART(FN, T, RR, ATTR, DECODE, PIDECL)                                   \
ATTR static void FN(const sktf_alto_job *jb, int64_t s, int64_t e, T *buf,                \
                    int64_t buf_lo, T *cb, T *scratch, int64_t *c)                         \
{                                                                                         \
    const sktf_codec *cd = &jb->cd;                                                       \
    const int64_t R = jb->R;                                                              \
    const int N = cd->nmodes, mode = jb->mode;                                            \
    T * const *fac = (T * const *) jb->fac;                                               \
    const T *vals = (const T *) jb->vals;                                                 \
    const T *B = (const T *) jb->B;                                                       \
    T *out = (T *) jb->out;                                                               \
    const int32_t *slot = jb->slot;                                                       \
    const T eps = (T) jb->eps;                                                            \
    PIDECL;                                                                               \
    (void) R; (void) scratch;                                                             \
    for (int64_t j = s; j < e; ++j) {                                                     \
        uint64_t lo, hi;                                                                  \
        sktf_load(cd, jb->lin, j, &lo, &hi);                                              \
        DECODE(cd, lo, hi, c)                                                             \
        int first = 1;                                                                    \
        for (int k = 0; k < N; ++k) {                                                     \
            if (k == mode) continue;                                                      \
            const T *f = fac[k] + c[k] * (RR);                                            \
            if (first) { SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) pi[r] = f[r];        \
                         first = 0; }                                             \
            else { SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) pi[r] *= f[r]; }          \
        }                                                                                 \
        if (first) { for (int64_t r = 0; r < (RR); ++r) pi[r] = 1; }                      \
        const int64_t row = c[mode];                                                      \
        T w = vals[j];                                                                    \
        if (B) {                                                                          \
            const T *b = B + row * (RR);                                                  \
            T dot = 0;                                                                    \
            SKTF_SIMD_SUM(dot)                                                             \
            for (int64_t r = 0; r < (RR); ++r) dot = dot + b[r] * pi[r];              \
            w = SKTF_PHI_WEIGHT(w, dot, eps);                                             \
        }                                                                                 \
        if (buf) {                                                                        \
            T *d = buf + (row - buf_lo) * (RR) + ((j - s) & jb->lane_mask) * jb->lane_stride; \
            SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) d[r] += w * pi[r];               \
        } else {                                                                          \
            T *d = (slot && slot[j] >= 0) ? cb + (int64_t) slot[j] * (RR) : out + row * (RR); \
            SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) d[r] += w * pi[r];               \
        }                                                                                 \
    }                                                                                     \
}

/* Kruskal model values at the nonzeros s..e (in ALTO order): into res[j] when vals is
   NULL, else *sum += vals[j] log(max(m_j, eps)) over the nonzeros with vals[j] != 0 */
#define SKTF_ALTO_VALUES(FN, T, ATTR, DECODE)                                             \
ATTR static void FN(const sktf_alto_job *jb, const T *weights, int64_t s, int64_t e,      \
                    T *res, T *pi, int64_t *c, const T *vals, double eps, double *sum)    \
{                                                                                         \
    const sktf_codec *cd = &jb->cd;                                                       \
    const int64_t R = jb->R;                                                              \
    const int N = cd->nmodes;                                                             \
    T * const *fac = (T * const *) jb->fac;                                               \
    SKTF_LOG_DECL                                                                         \
    for (int64_t j = s; j < e; ++j) {                                                     \
        uint64_t lo, hi;                                                                  \
        sktf_load(cd, jb->lin, j, &lo, &hi);                                              \
        DECODE(cd, lo, hi, c)                                                             \
        for (int64_t r = 0; r < R; ++r) pi[r] = fac[0][c[0] * R + r];                     \
        for (int k = 1; k < N; ++k) {                                                     \
            const T *f = fac[k] + c[k] * R;                                               \
            for (int64_t r = 0; r < R; ++r) pi[r] *= f[r];                                \
        }                                                                                 \
        T acc = 0;                                                                        \
        for (int64_t r = 0; r < R; ++r) acc = acc + weights[r] * pi[r];                   \
        if (vals == NULL) { res[j] = acc; continue; }                                     \
        if (vals[j] == 0) continue;                                                       \
        SKTF_LOG_PUSH((double) vals[j], (double) acc, eps)                                \
    }                                                                                     \
    SKTF_LOG_FLUSH(eps)                                                                   \
    if (vals != NULL) *sum += tot_;                                                       \
}

/* software prefetch, SKTF_PF_DIST nonzeros ahead, of the rows a nonzero will touch: the
   distance of each call is jb->pf, which the caller sets to sktf_pf_dist, or to 0 where the
   rows the kernel reads stay in cache (there the decoding ahead and the prefetch
   instructions cost more than they save) */
static int sktf_pf_dist = 24;
#define SKTF_PF_DIST pf_

/* Decoders of nonzero J: its coordinates in the modes ko[0..NO-1] into CO[0..NO-1] and,
   where mode >= 0, in mode `mode` into ROW; SETUP(NM, NO) once per call.  The pext
   masks are gathered in ko's order at setup, so that CO stays in registers. */
#define SKTF_DN_GEN_SETUP(NM, NO)                                                         \
    int64_t cg_[NM];
#define SKTF_DN_GEN(NM, NO, J, CO, ROW)                                                   \
    { uint64_t lo_, hi_; sktf_load(cd, lin, (J), &lo_, &hi_);                             \
      sktf_decode_tab(cd, lo_, hi_, cg_);                                                 \
      for (int q_ = 0; q_ < (NO); ++q_) (CO)[q_] = cg_[ko[q_]];                           \
      ROW = (mode >= 0) ? cg_[mode] : 0; }
#define SKTF_DN_PEXT1_SETUP(NM, NO)                                                       \
    uint64_t mo_[NO];                                                                     \
    const uint64_t mr_ = (mode >= 0) ? cd->mask_lo[mode] : 0;                             \
    for (int q_ = 0; q_ < (NO); ++q_) mo_[q_] = cd->mask_lo[ko[q_]];
#define SKTF_DN_PEXT1(NM, NO, J, CO, ROW)                                                 \
    { const uint64_t lo_ = lin[(J)];                                                      \
      for (int q_ = 0; q_ < (NO); ++q_) (CO)[q_] = (int64_t) _pext_u64(lo_, mo_[q_]);     \
      ROW = (int64_t) _pext_u64(lo_, mr_); }                 /* mask 0 (no mode): 0 */
#define SKTF_DN_PEXT2_SETUP(NM, NO)                                                       \
    uint64_t mo_[NO], ho_[NO]; int so_[NO];                                               \
    const uint64_t mr_ = (mode >= 0) ? cd->mask_lo[mode] : 0;                             \
    const uint64_t hr_ = (mode >= 0) ? cd->mask_hi[mode] : 0;                             \
    const int sr_ = (mode >= 0) ? cd->lo_bits[mode] : 0;                                  \
    for (int q_ = 0; q_ < (NO); ++q_) {                                                   \
        mo_[q_] = cd->mask_lo[ko[q_]]; ho_[q_] = cd->mask_hi[ko[q_]];                     \
        so_[q_] = cd->lo_bits[ko[q_]]; }
#define SKTF_DN_PEXT2(NM, NO, J, CO, ROW)                                                 \
    { const uint64_t hi_ = lin[2 * (J)], lo_ = lin[2 * (J) + 1];                          \
      for (int q_ = 0; q_ < (NO); ++q_)                                                   \
          (CO)[q_] = (int64_t) (_pext_u64(lo_, mo_[q_]) | (_pext_u64(hi_, ho_[q_]) << so_[q_])); \
      ROW = (int64_t) (_pext_u64(lo_, mr_) | (_pext_u64(hi_, hr_) << sr_)); }

/* the loop of SKTF_ALTO_PARTN over nonzeros s..e; constants HASB: Φ, B given; SLOT: the
   compact path (slot, cb); PF: prefetch SKTF_PF_DIST nonzeros ahead.  Each combination is
   compiled apart, so that the loop of factors in cache carries no test it does not need */
#define SKTF_PN_LOOP(T, RR, NM, DEC, HASB, SLOT, PF)                                      \
    for (int64_t j = s; j < e; ++j) {                                                     \
        int64_t co_[(NM) - 1], row;                                                       \
        if ((PF) && j + SKTF_PF_DIST < e) {                                               \
            DEC(NM, (NM) - 1, j + SKTF_PF_DIST, co_, row)                                 \
            for (int q = 0; q < (NM) - 1; ++q)                                            \
                SKTF_PF_ROW(fo[q] + co_[q] * (RR), (RR) * sizeof(T))                      \
            if (HASB) SKTF_PF_ROW(B + row * (RR), (RR) * sizeof(T))                       \
            SKTF_PF_ROW(((SLOT) && slot[j + SKTF_PF_DIST] >= 0)                           \
                        ? cb + (int64_t) slot[j + SKTF_PF_DIST] * (RR)                    \
                        : dst + (row - dst_lo) * (RR), (RR) * sizeof(T))                  \
        }                                                                                 \
        DEC(NM, (NM) - 1, j, co_, row)                                                    \
        const T *p[(NM) - 1];                                                             \
        for (int q = 0; q < (NM) - 1; ++q) p[q] = fo[q] + co_[q] * (RR);                  \
        T *d = ((SLOT) && slot[j] >= 0) ? cb + (int64_t) slot[j] * (RR)                   \
                                        : dst + (row - dst_lo) * (RR)                     \
                                          + ((j - s) & lmask_) * lstride_;                \
        /* ranks up to 32: the Khatri-Rao row formed once, in registers (the output row    \
           may alias a factor row as far as the compiler knows, which would otherwise      \
           make it read and multiply the rows again after the first store) */             \
        T kr_[32];                                                                        \
        if ((RR) <= 32) {                                                                 \
            SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) kr_[r] = SKTF_KR_##NM(p, r);     \
        }                                                                                 \
        T w = vals[j];                                                                    \
        if (HASB) {                                                                       \
            const T *b = B + row * (RR);                                                  \
            T dot = 0;                                                                    \
            SKTF_SIMD_SUM(dot)                                                            \
            for (int64_t r = 0; r < (RR); ++r)                                            \
                dot = dot + b[r] * ((RR) <= 32 ? kr_[r] : SKTF_KR_##NM(p, r));            \
            w = SKTF_PHI_WEIGHT(w, dot, eps);                                             \
        }                                                                                 \
        SKTF_SIMD for (int64_t r = 0; r < (RR); ++r)                                      \
            d[r] += w * ((RR) <= 32 ? kr_[r] : SKTF_KR_##NM(p, r));                       \
    }
/* ... for B given or not */
#define SKTF_PN_LOOPS(T, RR, NM, DEC, SLOT, PF)                                           \
    if (B) { SKTF_PN_LOOP(T, RR, NM, DEC, 1, SLOT, PF) }                                  \
    else { SKTF_PN_LOOP(T, RR, NM, DEC, 0, SLOT, PF) }

/* NM-way tensors, NM = 3..5: the coordinates decoded into registers, the Khatri-Rao row
   formed where it is used (never stored), the rows of the nonzero SKTF_PF_DIST ahead
   prefetched.  A nonzero costs NM - 1 factor row loads (and B's row for Φ) and one
   read-modify-write of its output row.  dst is the partition's private buffer (rows from
   dst_lo) or the output itself (dst_lo = 0); with jb->slot, the rows the partition shares
   go to its compact buffer cb instead.  With lanes (jb->lane_mask > 0, buffer path only),
   consecutive nonzeros add into different copies of the buffer, so that a small output,
   whose rows come back every few nonzeros, does not wait on the previous update of the
   same row (its store and reload); the caller adds the lanes in lane order. */
#define SKTF_ALTO_PARTN(FN, T, RR, NM, ATTR, DSETUP, DEC)                                 \
ATTR static void FN(const sktf_alto_job *jb, int64_t s, int64_t e, T *dst,                \
                    int64_t dst_lo, T *cb)                                                \
{                                                                                         \
    const sktf_codec *cd = &jb->cd;                                                       \
    const int64_t R = jb->R;                                                              \
    const int mode = jb->mode;                                                            \
    const T *fo[(NM) - 1];                     /* the other modes' factors, in order */   \
    int ko[(NM) - 1];                                                                     \
    for (int k = 0, q = 0; k < (NM); ++k)                                                 \
        if (k != mode) { ko[q] = k; fo[q] = ((T * const *) jb->fac)[k]; ++q; }            \
    const T * const vals = (const T *) jb->vals;                                          \
    const T * const B = (const T *) jb->B;                                                \
    const T eps = (T) jb->eps;                                                            \
    const uint64_t * const lin = jb->lin;                                                 \
    const int32_t * const slot = jb->slot;                                                \
    const int pf_ = jb->pf;                                                               \
    const int64_t lmask_ = jb->lane_mask, lstride_ = jb->lane_stride;                     \
    DSETUP(NM, (NM) - 1)                                                                  \
    (void) R; (void) cd;                                                                  \
    if (slot) { SKTF_PN_LOOPS(T, RR, NM, DEC, 1, 1) }                                      \
    else if (pf_ > 0) { SKTF_PN_LOOPS(T, RR, NM, DEC, 0, 1) }                             \
    else { SKTF_PN_LOOPS(T, RR, NM, DEC, 0, 0) }                                          \
}

/* Kruskal model values of NM-way tensors (as SKTF_ALTO_VALUES; vals != NULL: the data
   term, nonzeros with x = 0 skipped before any work) */
#define SKTF_ALTO_VALUESN(FN, T, RR, NM, ATTR, DSETUP, DEC)                               \
ATTR static void FN(const sktf_alto_job *jb, const T *weights, int64_t s, int64_t e,      \
                    T *res, const T *vals, double eps, double *sum)                       \
{                                                                                         \
    const sktf_codec *cd = &jb->cd;                                                       \
    const int64_t R = jb->R;                                                              \
    const int mode = -1;                       /* no output mode: decode all into co_ */  \
    const T *fa[NM];                                                                      \
    int ko[NM];                                                                           \
    for (int k = 0; k < (NM); ++k) { ko[k] = k; fa[k] = ((T * const *) jb->fac)[k]; }     \
    const uint64_t * const lin = jb->lin;                                                 \
    const int pf_ = jb->pf;                                                               \
    DSETUP(NM, NM)                                                                        \
    (void) R; (void) cd;                                                                  \
    SKTF_LOG_DECL                                                                         \
    for (int64_t j = s; j < e; ++j) {                                                     \
        int64_t co_[NM], row_;                                                            \
        if (SKTF_PF_DIST > 0 && j + SKTF_PF_DIST < e) {                                   \
            DEC(NM, NM, j + SKTF_PF_DIST, co_, row_)                                      \
            for (int k = 0; k < (NM); ++k)                                                \
                SKTF_PF_ROW(fa[k] + co_[k] * (RR), (RR) * sizeof(T))                      \
        }                                                                                 \
        if (vals != NULL && vals[j] == 0) continue;                                       \
        DEC(NM, NM, j, co_, row_)                                                         \
        (void) row_;                                                                      \
        const T *p[NM];                                                                   \
        for (int k = 0; k < (NM); ++k) p[k] = fa[k] + co_[k] * (RR);                      \
        T acc = 0;                                                                        \
        _Pragma("omp simd reduction(+:acc)")                                              \
        for (int64_t r = 0; r < (RR); ++r) acc = acc + weights[r] * SKTF_ALL_##NM(p, r);  \
        if (vals == NULL) { res[j] = acc; continue; }                                     \
        SKTF_LOG_PUSH((double) vals[j], (double) acc, eps)                                \
    }                                                                                     \
    SKTF_LOG_FLUSH(eps)                                                                   \
    if (vals != NULL) *sum += tot_;                                                       \
}

/* KERNEL at ranks R (any), 8, 16, 32, for NM modes and decoder DNAME: functions
   PREFIX<NM>_<DNAME>_<SUF>_<rank> */
#define SKTF_AT_RANKS(KERNEL, PREFIX, T, SUF, NM, DNAME, ATTR)                            \
KERNEL(PREFIX##NM##_##DNAME##_##SUF##_rr, T, R, NM, ATTR, SKTF_DN_##DNAME##_SETUP,        \
       SKTF_DN_##DNAME)                                                                   \
KERNEL(PREFIX##NM##_##DNAME##_##SUF##_8, T, 8, NM, ATTR, SKTF_DN_##DNAME##_SETUP,         \
       SKTF_DN_##DNAME)                                                                   \
KERNEL(PREFIX##NM##_##DNAME##_##SUF##_16, T, 16, NM, ATTR, SKTF_DN_##DNAME##_SETUP,       \
       SKTF_DN_##DNAME)                                                                   \
KERNEL(PREFIX##NM##_##DNAME##_##SUF##_32, T, 32, NM, ATTR, SKTF_DN_##DNAME##_SETUP,       \
       SKTF_DN_##DNAME)
#define SKTF_NWAY_KERNELS(T, SUF, DNAME, ATTR)                                            \
SKTF_AT_RANKS(SKTF_ALTO_PARTN, sktf_pn, T, SUF, 3, DNAME, ATTR)                           \
SKTF_AT_RANKS(SKTF_ALTO_PARTN, sktf_pn, T, SUF, 4, DNAME, ATTR)                           \
SKTF_AT_RANKS(SKTF_ALTO_PARTN, sktf_pn, T, SUF, 5, DNAME, ATTR)                           \
SKTF_AT_RANKS(SKTF_ALTO_VALUESN, sktf_vn, T, SUF, 3, DNAME, ATTR)                         \
SKTF_AT_RANKS(SKTF_ALTO_VALUESN, sktf_vn, T, SUF, 4, DNAME, ATTR)                         \
SKTF_AT_RANKS(SKTF_ALTO_VALUESN, sktf_vn, T, SUF, 5, DNAME, ATTR)

/* call the rank variant of PREFIX<NM>_<DNAME>_<SUF> with ARGS, and return */
#define SKTF_RANK_CALL(PREFIX, NM, DNAME, SUF, ARGS)                                      \
    switch (jb->R) {                                                                      \
    case 8: PREFIX##NM##_##DNAME##_##SUF##_8 ARGS; return;                                \
    case 16: PREFIX##NM##_##DNAME##_##SUF##_16 ARGS; return;                              \
    case 32: PREFIX##NM##_##DNAME##_##SUF##_32 ARGS; return;                              \
    default: PREFIX##NM##_##DNAME##_##SUF##_rr ARGS; return;                              \
    }
/* ... choosing the decoder: pext (one or two words) where in use, else the generic one */
#if SKTF_BMI2_BUILD
#define SKTF_DEC_CALL(PREFIX, NM, SUF, ARGS)                                              \
    if (sktf_use_pext) {                                                                  \
        if (jb->cd.words == 1) { SKTF_RANK_CALL(PREFIX, NM, PEXT1, SUF, ARGS) }           \
        else { SKTF_RANK_CALL(PREFIX, NM, PEXT2, SUF, ARGS) }                             \
    }                                                                                     \
    SKTF_RANK_CALL(PREFIX, NM, GEN, SUF, ARGS)
#else
#define SKTF_DEC_CALL(PREFIX, NM, SUF, ARGS) SKTF_RANK_CALL(PREFIX, NM, GEN, SUF, ARGS)
#endif
/* ... and the number of modes (3 to 5; other counts fall through) */
#define SKTF_NWAY_CALL(PREFIX, SUF, ARGS)                                                 \
    switch (jb->cd.nmodes) {                                                              \
    case 3: { SKTF_DEC_CALL(PREFIX, 3, SUF, ARGS) }                                       \
    case 4: { SKTF_DEC_CALL(PREFIX, 4, SUF, ARGS) }                                       \
    case 5: { SKTF_DEC_CALL(PREFIX, 5, SUF, ARGS) }                                       \
    default: break;                                                                       \
    }

#define SKTF_ALTO_FAMILY(T, SUF)                                                          \
SKTF_ALTO_PART(sktf_gen_##SUF##_rr, T, R, , SKTF_DECODE_GEN, T *pi = scratch)             \
SKTF_ALTO_PART(sktf_gen_##SUF##_8, T, 8, , SKTF_DECODE_GEN, T pi[8])                      \
SKTF_ALTO_PART(sktf_gen_##SUF##_16, T, 16, , SKTF_DECODE_GEN, T pi[16])                   \
SKTF_ALTO_PART(sktf_gen_##SUF##_32, T, 32, , SKTF_DECODE_GEN, T pi[32])                   \
SKTF_ALTO_VALUES(sktf_values_gen_##SUF, T, , SKTF_DECODE_GEN)

#define SKTF_ALTO_FAMILY_PEXT(T, SUF)                                                     \
SKTF_ALTO_PART(sktf_pext_##SUF##_rr, T, R, SKTF_PEXT_KERNEL, SKTF_DECODE_PEXT,            \
               T *pi = scratch)                                                           \
SKTF_ALTO_PART(sktf_pext_##SUF##_8, T, 8, SKTF_PEXT_KERNEL, SKTF_DECODE_PEXT, T pi[8])    \
SKTF_ALTO_PART(sktf_pext_##SUF##_16, T, 16, SKTF_PEXT_KERNEL, SKTF_DECODE_PEXT, T pi[16]) \
SKTF_ALTO_PART(sktf_pext_##SUF##_32, T, 32, SKTF_PEXT_KERNEL, SKTF_DECODE_PEXT, T pi[32]) \
SKTF_ALTO_VALUES(sktf_values_pext_##SUF, T, SKTF_PEXT_KERNEL, SKTF_DECODE_PEXT)

SKTF_ALTO_FAMILY(double, f64)
SKTF_ALTO_FAMILY(float, f32)
SKTF_NWAY_KERNELS(double, f64, GEN, )
SKTF_NWAY_KERNELS(float, f32, GEN, )
#if SKTF_BMI2_BUILD
SKTF_ALTO_FAMILY_PEXT(double, f64)
SKTF_ALTO_FAMILY_PEXT(float, f32)
SKTF_NWAY_KERNELS(double, f64, PEXT1, SKTF_PEXT_KERNEL)
SKTF_NWAY_KERNELS(float, f32, PEXT1, SKTF_PEXT_KERNEL)
SKTF_NWAY_KERNELS(double, f64, PEXT2, SKTF_PEXT_KERNEL)
SKTF_NWAY_KERNELS(float, f32, PEXT2, SKTF_PEXT_KERNEL)
#endif

#if SKTF_BMI2_BUILD
#define SKTF_PEXT_DISPATCH(SUF)                                                           \
    if (sktf_use_pext) {                                                                  \
        switch (jb->R) {                                                                  \
        case 8: sktf_pext_##SUF##_8(jb, s, e, buf, buf_lo, cb, scratch, c); return;           \
        case 16: sktf_pext_##SUF##_16(jb, s, e, buf, buf_lo, cb, scratch, c); return;         \
        case 32: sktf_pext_##SUF##_32(jb, s, e, buf, buf_lo, cb, scratch, c); return;         \
        default: sktf_pext_##SUF##_rr(jb, s, e, buf, buf_lo, cb, scratch, c); return;         \
        }                                                                                 \
    }
#else
#define SKTF_PEXT_DISPATCH(SUF)
#endif

#define SKTF_ALTO_DISPATCH(T, SUF)                                                        \
static void sktf_alto_part_##SUF(const sktf_alto_job *jb, int64_t s, int64_t e, T *buf,   \
                                 int64_t buf_lo, T *cb, T *scratch, int64_t *c)           \
{                                                                                         \
    {                                                                                     \
        T *dst = buf ? buf : (T *) jb->out;                                               \
        const int64_t dst_lo = buf ? buf_lo : 0;                                          \
        SKTF_NWAY_CALL(sktf_pn, SUF, (jb, s, e, dst, dst_lo, cb))                         \
    }                                                                                     \
    SKTF_PEXT_DISPATCH(SUF)                                                               \
    switch (jb->R) {                                                                      \
    case 8: sktf_gen_##SUF##_8(jb, s, e, buf, buf_lo, cb, scratch, c); return;                \
    case 16: sktf_gen_##SUF##_16(jb, s, e, buf, buf_lo, cb, scratch, c); return;              \
    case 32: sktf_gen_##SUF##_32(jb, s, e, buf, buf_lo, cb, scratch, c); return;              \
    default: sktf_gen_##SUF##_rr(jb, s, e, buf, buf_lo, cb, scratch, c); return;              \
    }                                                                                     \
}                                                                                         \
static void sktf_alto_values_##SUF(const sktf_alto_job *jb, const T *weights, int64_t s,  \
                                   int64_t e, T *res, T *pi, int64_t *c, const T *vals,   \
                                   double eps, double *sum)                               \
{                                                                                         \
    SKTF_NWAY_CALL(sktf_vn, SUF, (jb, weights, s, e, res, vals, eps, sum))                \
    SKTF_VALUES_PEXT(SUF)                                                                 \
    sktf_values_gen_##SUF(jb, weights, s, e, res, pi, c, vals, eps, sum);                                 \
}

#if SKTF_BMI2_BUILD
#define SKTF_VALUES_PEXT(SUF) \
    if (sktf_use_pext) { sktf_values_pext_##SUF(jb, weights, s, e, res, pi, c, vals, eps, sum); return; }
#else
#define SKTF_VALUES_PEXT(SUF)
#endif

SKTF_ALTO_DISPATCH(double, f64)
SKTF_ALTO_DISPATCH(float, f32)

/* the buffer path's call of one partition whose buffer (from row buf_lo) holds span
   entries per lane: the lanes lie span entries apart */
#define SKTF_ALTO_LANES(T, SUF)                                                           \
static void sktf_alto_part_lanes_##SUF(const sktf_alto_job *jb, int64_t s, int64_t e,     \
                                       T *buf, int64_t buf_lo, int64_t span, T *scratch,   \
                                       int64_t *c)                                         \
{                                                                                         \
    sktf_alto_job j2 = *jb;                                                               \
    j2.lane_stride = jb->lane_mask ? span : 0;                                            \
    sktf_alto_part_##SUF(&j2, s, e, buf, buf_lo, NULL, scratch, c);                       \
}
SKTF_ALTO_LANES(double, f64)
SKTF_ALTO_LANES(float, f32)

/* ---------------------------------------------------------------- LSD radix sort */
/* Sort n linear indices (words per key, stored (hi, lo)) and carry their values (vsize
   bytes each) along.  Digits of dbits bits (at most 16) over the low nbits bits; digits
   that are equal for every key are skipped.  Parallel: each thread histograms and
   scatters its own chunk, so the sort is stable and its result independent of the
   thread count. */
#define SKTF_DIGIT(K, J)                                                                  \
    (straddle ? (((K)[(J) * 2 + 1] >> sh) | ((K)[(J) * 2] << (64 - sh))) & dmask           \
              : ((K)[(J) * words + lo_word] >> sh) & dmask)

static int sktf_radix_sort(uint64_t *key, void *val, int64_t n, int words, int vsize,
                           int nbits, int nthreads, int dbits) {
    if (n <= 1 || nbits <= 0) return 0;
    if (dbits < 1) dbits = 1;
    if (dbits > 16) dbits = 16;
    const int nb = 1 << dbits;
    const uint64_t dmask = (uint64_t) nb - 1;
    if (nthreads < 1) nthreads = 1;
#ifndef _OPENMP
    nthreads = 1;
#endif
    uint64_t *k2 = (uint64_t *) malloc((size_t) n * words * sizeof(uint64_t));
    char *v2 = (char *) malloc((size_t) n * vsize);
    int64_t *hist = (int64_t *) malloc((size_t) nthreads * nb * sizeof(int64_t));
    if (k2 == NULL || v2 == NULL || hist == NULL) { free(k2); free(v2); free(hist); return -1; }
    uint64_t *ksrc = key, *kdst = k2;
    char *vsrc = (char *) val, *vdst = v2;
    for (int shift = 0; shift < nbits; shift += dbits) {
        /* the digit's bits; one that straddles the two words is read as a 128-bit shift */
        const int sh = shift & 63;
        const int lo_word = (shift >= 64) ? 0 : words - 1;
        const int straddle = (words == 2 && shift < 64 && shift + dbits > 64);
        int skip = 0;
        int nt_used = nthreads;
        #pragma omp parallel num_threads(nthreads)
        {
            int t = 0, nt = 1;
#ifdef _OPENMP
            t = omp_get_thread_num();
            nt = omp_get_num_threads();
#endif
            #pragma omp single
            nt_used = nt;
            int64_t s = n * t / nt, e = n * (t + 1) / nt;
            int64_t *h = hist + (int64_t) nb * t;
            memset(h, 0, nb * sizeof(int64_t));
            for (int64_t j = s; j < e; ++j) h[SKTF_DIGIT(ksrc, j)]++;
            #pragma omp barrier
            #pragma omp single
            {
                int64_t run = 0;
                for (int d = 0; d < nb; ++d) {
                    int64_t tot = 0;
                    for (int u = 0; u < nt; ++u) tot += hist[(int64_t) nb * u + d];
                    if (tot == n) skip = 1;
                    for (int u = 0; u < nt; ++u) {
                        int64_t cnt = hist[(int64_t) nb * u + d];
                        hist[(int64_t) nb * u + d] = run;
                        run += cnt;
                    }
                }
            }
            if (!skip) {
                for (int64_t j = s; j < e; ++j) {
                    int64_t d = SKTF_DIGIT(ksrc, j);
                    int64_t o = h[d]++;
                    if (words == 2) {
                        kdst[2 * o] = ksrc[2 * j];
                        kdst[2 * o + 1] = ksrc[2 * j + 1];
                    }
                    else kdst[o] = ksrc[j];
                    if (vsize == 8) ((uint64_t *) vdst)[o] = ((const uint64_t *) vsrc)[j];
                    else if (vsize == 4) ((uint32_t *) vdst)[o] = ((const uint32_t *) vsrc)[j];
                    else memcpy(vdst + o * vsize, vsrc + j * vsize, vsize);
                }
            }
        }
        (void) nt_used;
        if (!skip) {
            uint64_t *kt = ksrc; ksrc = kdst; kdst = kt;
            char *vt = vsrc; vsrc = vdst; vdst = vt;
        }
    }
    if (ksrc != key) {
        memcpy(key, ksrc, (size_t) n * words * sizeof(uint64_t));
        memcpy(val, vsrc, (size_t) n * vsize);
    }
    free(k2); free(v2); free(hist);
    return 0;
}

#endif /* SKTF_ALTO_H */
