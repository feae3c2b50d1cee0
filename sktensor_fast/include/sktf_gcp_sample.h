/* sktensor_fast: the samplers of Generalized CP (which entries a gradient step draws).
 *
 * The one definition of the sampler: the CPU kernels (backends/cpu/_gcp.pyx) and the OpenCL
 * kernels (backends/opencl/kernels/gcp.cl, which get this header pasted in) call
 * sktf_gcp_sample, so for a step key K every device draws the same entries, with the same
 * values, weights and correction flags.
 *
 * Sample j of step key K (the random words are those of sktf_rng.h: word c of sample j is
 * sktf_rand(sktf_sample_key(K, j), c)):
 *
 *   j < p        a nonzero, uniformly: position below(word 0, nnz); weight wp, its value, and
 *                the correction flag of the semi-stratified sampler (f(x, m) - f(0, m));
 *   j >= p       an "other" entry, weight wq, no correction:
 *                - from an explicit list (explicit_z): position t = below(word 0, n) in
 *                  [nonzeros; zeros] (include_nz) or in the zeros alone; the zeros are the
 *                  list zsubs, or (implicit_z) every entry that is not a nonzero, in
 *                  linear-index order, computed from the sorted linear indices `lin`;
 *                - else uniformly over the index space: coordinate k of attempt a is
 *                  below(word a N + k, shape[k]); zmode 0 takes it with value 0, zmode 1 looks
 *                  its value up, zmode 2 (stratified) rejects nonzeros and draws again; after
 *                  max_attempts rejections (a dense region) the zero of rank
 *                  below(next word, nzero) is taken, computed from `lin` (without `lin`, when
 *                  the product of the shape overflows 64 bits, rejection goes on).
 *
 * "Is this coordinate a nonzero?" is a binary search of the sorted linear indices, narrowed
 * first to the bucket of the key's high bits (bucket[b] = number of nonzeros whose linear
 * index is below b << bshift), or, without linear indices, of the lexicographically sorted
 * coordinate rows themselves.
 *
 * The sampler's integer parameters are an array of SKTF_GCP_NPARAMS 64-bit integers (indices
 * SKTF_GCP_* below; the OpenCL host uploads it as is, the CPU keeps it in its sampler object),
 * read into an sktf_gcp_sampler together with the tensor's arrays.  Types: SKTF_REAL for
 * values and weights (double in C, the program's VAL_T in OpenCL), SKTF_INDEX for stored
 * coordinates (int64 in C, the program's IDX_T in OpenCL); a drawn coordinate is an sktf_i64.
 * Arrays live in SKTF_GLOBAL memory (__global in OpenCL).
 */
#ifndef SKTF_GCP_SAMPLE_H
#define SKTF_GCP_SAMPLE_H

#include "sktf_platform.h"
#include "sktf_rng.h"

#ifndef SKTF_INDEX
#ifdef __OPENCL_VERSION__
#define SKTF_INDEX IDX_T
#else
#define SKTF_INDEX sktf_i64
#endif
#endif

/* the parameter array */
#define SKTF_GCP_NNZ 0           /* nonzeros */
#define SKTF_GCP_NZ 1            /* length of the explicit list of zeros (explicit_z) */
#define SKTF_GCP_EXPLICIT_Z 2    /* other entries are drawn from a list */
#define SKTF_GCP_P 3             /* samples of nonzeros */
#define SKTF_GCP_Q 4             /* other samples */
#define SKTF_GCP_ZMODE 5         /* 0: value 0, 1: value looked up, 2: nonzeros rejected */
#define SKTF_GCP_INCLUDE_NZ 6    /* the list is [nonzeros; zeros] */
#define SKTF_GCP_CORRECT 7       /* nonzero samples carry the correction flag */
#define SKTF_GCP_HAS_LIN 8       /* `lin` holds the sorted linear indices */
#define SKTF_GCP_HAS_BUCKET 9    /* `bucket` narrows searches of `lin` */
#define SKTF_GCP_BSHIFT 10       /* the bucket of linear index e is e >> bshift */
#define SKTF_GCP_IMPLICIT_Z 11   /* the list of zeros is every entry not a nonzero */
#define SKTF_GCP_MAX_ATTEMPTS 12 /* rejections before the zero is computed from `lin` */
#define SKTF_GCP_NZERO 13        /* entries that are not nonzeros (with `lin`) */
#define SKTF_GCP_NPARAMS 14

/* a sampler: its parameters and the arrays it reads */
typedef struct sktf_gcp_sampler {
    sktf_i64 nnz, nz, p, q, max_attempts, nzero;
    int nmodes, explicit_z, zmode, include_nz, correct, has_lin, has_bucket, bshift,
        implicit_z;
    SKTF_REAL wp, wq;                         /* weights of nonzero and other samples */
    SKTF_GLOBAL const sktf_i64* shape;        /* (nmodes) */
    SKTF_GLOBAL const sktf_i64* strides;      /* of the linear index (with has_lin) */
    SKTF_GLOBAL const SKTF_INDEX* subs;       /* nonzeros (nnz x nmodes), sorted */
    SKTF_GLOBAL const SKTF_REAL* vals;        /* their values */
    SKTF_GLOBAL const sktf_i64* lin;          /* their sorted linear indices (has_lin) */
    SKTF_GLOBAL const sktf_i64* bucket;       /* offsets into lin by high bits (has_bucket) */
    SKTF_GLOBAL const SKTF_INDEX* zsubs;      /* explicit list of zeros (nz x nmodes) */
} sktf_gcp_sampler;

/* the sampler of parameter array sp and these arrays */
SKTF_INLINE sktf_gcp_sampler sktf_gcp_sampler_make(
    SKTF_GLOBAL const sktf_i64* sp, const int nmodes, SKTF_GLOBAL const sktf_i64* shape,
    SKTF_GLOBAL const sktf_i64* strides, SKTF_GLOBAL const SKTF_INDEX* subs,
    SKTF_GLOBAL const SKTF_REAL* vals, SKTF_GLOBAL const sktf_i64* lin,
    SKTF_GLOBAL const sktf_i64* bucket, SKTF_GLOBAL const SKTF_INDEX* zsubs,
    const SKTF_REAL wp, const SKTF_REAL wq)
{
    sktf_gcp_sampler S;
    S.nnz = sp[SKTF_GCP_NNZ];
    S.nz = sp[SKTF_GCP_NZ];
    S.p = sp[SKTF_GCP_P];
    S.q = sp[SKTF_GCP_Q];
    S.max_attempts = sp[SKTF_GCP_MAX_ATTEMPTS];
    S.nzero = sp[SKTF_GCP_NZERO];
    S.nmodes = nmodes;
    S.explicit_z = (int)sp[SKTF_GCP_EXPLICIT_Z];
    S.zmode = (int)sp[SKTF_GCP_ZMODE];
    S.include_nz = (int)sp[SKTF_GCP_INCLUDE_NZ];
    S.correct = (int)sp[SKTF_GCP_CORRECT];
    S.has_lin = (int)sp[SKTF_GCP_HAS_LIN];
    S.has_bucket = (int)sp[SKTF_GCP_HAS_BUCKET];
    S.bshift = (int)sp[SKTF_GCP_BSHIFT];
    S.implicit_z = (int)sp[SKTF_GCP_IMPLICIT_Z];
    S.wp = wp;
    S.wq = wq;
    S.shape = shape;
    S.strides = strides;
    S.subs = subs;
    S.vals = vals;
    S.lin = lin;
    S.bucket = bucket;
    S.zsubs = zsubs;
    return S;
}

/* linear index of coordinate idx (with has_lin) */
SKTF_INLINE sktf_i64 sktf_gcp_linear(const sktf_gcp_sampler* S, const sktf_i64* idx)
{
    sktf_i64 key = 0;
    for (int k = 0; k < S->nmodes; ++k) key += idx[k] * S->strides[k];
    return key;
}

/* position of coordinate idx among the nonzeros, or -1 */
SKTF_INLINE sktf_i64 sktf_gcp_find(const sktf_gcp_sampler* S, const sktf_i64* idx)
{
    const int N = S->nmodes;
    sktf_i64 lo = 0, hi = S->nnz;
    if (S->has_lin) {
        const sktf_i64 key = sktf_gcp_linear(S, idx);
        if (S->has_bucket) {  /* the bucket of the key's high bits */
            lo = S->bucket[key >> S->bshift];
            hi = S->bucket[(key >> S->bshift) + 1];
        }
        while (lo < hi) {
            const sktf_i64 mid = (lo + hi) >> 1;
            if (S->lin[mid] < key) lo = mid + 1;
            else hi = mid;
        }
        return (lo < S->nnz && S->lin[lo] == key) ? lo : -1;
    }
    /* no linear index (the product of the shape overflows 64 bits): compare coordinate rows */
    while (lo < hi) {
        const sktf_i64 mid = (lo + hi) >> 1;
        int c = 0;
        for (int k = 0; k < N; ++k) {
            const sktf_i64 v = (sktf_i64)S->subs[mid * N + k];
            if (v != idx[k]) {
                c = v < idx[k] ? -1 : 1;
                break;
            }
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo < S->nnz) {
        for (int k = 0; k < N; ++k)
            if ((sktf_i64)S->subs[lo * N + k] != idx[k]) return -1;
        return lo;
    }
    return -1;
}

/* Coordinates of the t-th entry (0-based) that is not a nonzero, in linear-index order: with
 * d_i = lin[i] - i the number of zeros before nonzero i (non-decreasing), the nonzeros before
 * that zero are those with d_i <= t, and its linear index is t plus their number. */
SKTF_INLINE void sktf_gcp_zero_coords(const sktf_gcp_sampler* S, const sktf_i64 t,
                                      sktf_i64* idx)
{
    sktf_i64 lo = 0, hi = S->nnz;
    while (lo < hi) {
        const sktf_i64 mid = (lo + hi) >> 1;
        if (S->lin[mid] - mid <= t) lo = mid + 1;
        else hi = mid;
    }
    const sktf_i64 e = t + lo;
    for (int k = 0; k < S->nmodes; ++k) idx[k] = (e / S->strides[k]) % S->shape[k];
}

/* copy row t of a coordinate array */
SKTF_INLINE void sktf_gcp_row(SKTF_GLOBAL const SKTF_INDEX* a, const sktf_i64 t, const int N,
                              sktf_i64* idx)
{
    for (int k = 0; k < N; ++k) idx[k] = (sktf_i64)a[t * N + k];
}

/* coordinates of attempt `a` of a uniform draw over the index space (words a N .. a N + N-1) */
SKTF_INLINE void sktf_gcp_uniform_coords(const sktf_gcp_sampler* S, const sktf_u64 skey,
                                         const sktf_i64 a, sktf_i64* idx)
{
    const int N = S->nmodes;
    for (int k = 0; k < N; ++k)
        idx[k] = sktf_below(sktf_rand(skey, (sktf_u64)(a * N + k)), S->shape[k]);
}

/* Sample j of step key `key`: its coordinates into idx (nmodes values); returns its data
 * value and sets its weight and correction flag. */
SKTF_INLINE SKTF_REAL sktf_gcp_sample(const sktf_gcp_sampler* S, const sktf_u64 key,
                                      const sktf_i64 j, sktf_i64* idx, SKTF_REAL* w,
                                      int* corr)
{
    const int N = S->nmodes;
    const sktf_u64 skey = sktf_sample_key(key, j);
    if (j < S->p) {
        const sktf_i64 t = sktf_below(sktf_rand(skey, 0), S->nnz);
        sktf_gcp_row(S->subs, t, N, idx);
        *w = S->wp;
        *corr = S->correct;
        return S->vals[t];
    }
    *w = S->wq;
    *corr = 0;
    if (S->explicit_z) {
        const sktf_i64 n = S->nz + (S->include_nz ? S->nnz : 0);
        sktf_i64 t = sktf_below(sktf_rand(skey, 0), n);
        if (S->include_nz) {
            if (t < S->nnz) {
                sktf_gcp_row(S->subs, t, N, idx);
                return S->zmode == 1 ? S->vals[t] : (SKTF_REAL)0;
            }
            t -= S->nnz;
        }
        if (S->implicit_z) sktf_gcp_zero_coords(S, t, idx);
        else sktf_gcp_row(S->zsubs, t, N, idx);
        return (SKTF_REAL)0;
    }
    for (sktf_i64 a = 0;; ++a) {
        sktf_gcp_uniform_coords(S, skey, a, idx);
        if (S->zmode == 0) return (SKTF_REAL)0;
        const sktf_i64 pos = sktf_gcp_find(S, idx);
        if (S->zmode == 1) return pos >= 0 ? S->vals[pos] : (SKTF_REAL)0;
        if (pos < 0) return (SKTF_REAL)0;
        if (a + 1 >= S->max_attempts && S->has_lin) {
            /* rejection keeps failing (a dense region): the zero of a uniform rank */
            sktf_gcp_zero_coords(
                S, sktf_below(sktf_rand(skey, (sktf_u64)((a + 1) * N)), S->nzero), idx);
            return (SKTF_REAL)0;
        }
    }
}

#ifndef __OPENCL_VERSION__
/* The hints must be inlined into the loop that calls them: GCC deems a function whose only
   effects are prefetches free of side effects and drops calls to it that it did not inline. */
#if defined(__GNUC__) || defined(__clang__)
#define SKTF_GCP_PREFETCH(p) __builtin_prefetch((const void*)(p), 0, 3)
#define SKTF_GCP_HINT __attribute__((always_inline)) static inline
#else
#define SKTF_GCP_PREFETCH(p) ((void)(p))
#define SKTF_GCP_HINT static inline
#endif
#define SKTF_GCP_TOUCH_MODES 8

/* Prefetch hints for a CPU loop that draws sample j some samples ahead of its use (no effect
 * on what is drawn).  sktf_gcp_sample_touch(S, key, j, 0) prefetches the first memory that
 * sample j reads (the nonzero's row and value, the listed entry, or the bucket of its first
 * attempt's key); with level 1, called later, it also prefetches the linear indices that
 * bucket points at, which the first level brought into the cache. */
SKTF_GCP_HINT void sktf_gcp_sample_touch(const sktf_gcp_sampler* S, const sktf_u64 key,
                                       const sktf_i64 j, const int level)
{
    const int N = S->nmodes;
    const sktf_u64 skey = sktf_sample_key(key, j);
    sktf_i64 idx[SKTF_GCP_TOUCH_MODES];
    if (j < S->p || (S->explicit_z && !S->implicit_z)) {
        if (level) return;
        sktf_i64 t;
        if (j < S->p) {
            t = sktf_below(sktf_rand(skey, 0), S->nnz);
        } else {
            t = sktf_below(sktf_rand(skey, 0), S->nz + (S->include_nz ? S->nnz : 0));
            if (!S->include_nz || t >= S->nnz) {
                t -= S->include_nz ? S->nnz : 0;
                SKTF_GCP_PREFETCH(S->zsubs + t * N);
                return;
            }
        }
        SKTF_GCP_PREFETCH(S->subs + t * N);
        SKTF_GCP_PREFETCH(S->vals + t);
        return;
    }
    if (S->explicit_z || S->zmode == 0 || !S->has_lin || !S->has_bucket
            || N > SKTF_GCP_TOUCH_MODES)
        return;
    sktf_gcp_uniform_coords(S, skey, 0, idx);
    const sktf_i64 b = sktf_gcp_linear(S, idx) >> S->bshift;
    if (!level) SKTF_GCP_PREFETCH(S->bucket + b);
    else SKTF_GCP_PREFETCH(S->lin + S->bucket[b]);
}

/* The hints that a loop drawing each sample `dist` places ahead of its use gives at sample j
 * (samples below `end`): the first memory of sample j + 3 dist, the linear indices of sample
 * j + 2 dist; sktf_gcp_touch_first gives those that the iterations before j0 would have. */
SKTF_GCP_HINT void sktf_gcp_touch_ahead(const sktf_gcp_sampler* S, const sktf_u64 key,
                                        const sktf_i64 j, const sktf_i64 end, const int dist)
{
    if (j + 3 * dist < end) sktf_gcp_sample_touch(S, key, j + 3 * dist, 0);
    if (j + 2 * dist < end) sktf_gcp_sample_touch(S, key, j + 2 * dist, 1);
}

SKTF_GCP_HINT void sktf_gcp_touch_first(const sktf_gcp_sampler* S, const sktf_u64 key,
                                        const sktf_i64 j0, const sktf_i64 end, const int dist)
{
    for (sktf_i64 j = j0; j < end && j < j0 + 3 * dist; ++j) sktf_gcp_sample_touch(S, key, j, 0);
    for (sktf_i64 j = j0; j < end && j < j0 + 2 * dist; ++j) sktf_gcp_sample_touch(S, key, j, 1);
}
#endif

#endif /* SKTF_GCP_SAMPLE_H */
