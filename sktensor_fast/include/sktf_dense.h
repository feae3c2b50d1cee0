/* sktensor_fast: the small dense steps of the CPU backend (backends/cpu/_dense.pyx) at ranks
 * known when compiling.  U = M Y (rows lo..hi of an I x R M, an R x R Y) and the Gram matrix
 * of rows lo..hi are short loops over R: with a run-time R the compiler cannot unroll them
 * and each row costs the overhead of a vector loop with a remainder.  Instances for R = 1..16
 * (float and double) with the same arithmetic, in the same order, as the loops of _dense.pyx:
 * the results do not depend on which of them runs. */
#ifndef SKTF_DENSE_H
#define SKTF_DENSE_H

#include <stdint.h>

#include "sktf_macros.h"

#define SKTF_DENSE_SMALL_RANK 16

/* the product's rank loops vectorised over the output's columns (SKTF_SIMD), the loop over a
   row's entries unrolled (GCC: otherwise it vectorises across rows and shuffles M into place,
   five times slower); the order of the operations of every entry is the loops' */
#if defined(__GNUC__) && !defined(__clang__)
#define SKTF_DENSE_UNROLL _Pragma("GCC unroll 16")
#else
#define SKTF_DENSE_UNROLL
#endif

/* The instances are compiled twice on x86-64 with GCC or Clang: for the baseline (SSE2) and
   for AVX2 without FMA, taken at run time on CPUs that have AVX2.  Without FMA the compiler
   cannot fuse a multiply and an add, so both compute every product and every sum as the loops
   say (IEEE operations in the same order, whatever the vector width): the same bits. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define SKTF_DENSE_HAVE_AVX2 1
#define SKTF_DENSE_AVX2 __attribute__((target("avx2")))
/* -1: not decided yet; 0 or 1 (tests may set 0 to run the baseline instances) */
static int sktf_dense_level = -1;
static int sktf_dense_avx2(void)
{
    if (sktf_dense_level < 0) {
        __builtin_cpu_init();
        sktf_dense_level = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return sktf_dense_level;
}
#else
#define SKTF_DENSE_HAVE_AVX2 0
#define SKTF_DENSE_AVX2
static int sktf_dense_level = 0;
static int sktf_dense_avx2(void) { return 0; }
#endif

/* out[i] = sum_r A[i, r] M[r, :] (r in order) for the rows i in lo..hi */
#define SKTF_DENSE_MATMUL(T, SUF, RR) SKTF_DENSE_MATMUL_AT(, T, SUF, RR)
#define SKTF_DENSE_MATMUL_X(T, SUF, RR) SKTF_DENSE_MATMUL_AT(SKTF_DENSE_AVX2, T, SUF##x, RR)
#define SKTF_DENSE_MATMUL_AT(ATTR, T, SUF, RR)                                            \
ATTR static void sktf_matmul_rows_##SUF##_##RR(const T *A, const T *M, T *out,            \
                                               int64_t lo, int64_t hi)                    \
{                                                                                         \
    for (int64_t i = lo; i < hi; ++i) {                                                   \
        T acc[RR];                                                                        \
        SKTF_SIMD for (int q = 0; q < (RR); ++q) acc[q] = 0;                              \
        SKTF_DENSE_UNROLL for (int r = 0; r < (RR); ++r) {                                \
            const T a = A[i * (RR) + r];                                                  \
            SKTF_SIMD for (int q = 0; q < (RR); ++q) acc[q] += a * M[r * (RR) + q];       \
        }                                                                                 \
        SKTF_SIMD for (int q = 0; q < (RR); ++q) out[i * (RR) + q] = acc[q];              \
    }                                                                                     \
}
/* G[r, :] = sum_i A[i, r] A[i, :] (i in order, in double) for the rows lo..hi */
#define SKTF_DENSE_GRAM(T, SUF, RR) SKTF_DENSE_GRAM_AT(, T, SUF, RR)
#define SKTF_DENSE_GRAM_X(T, SUF, RR) SKTF_DENSE_GRAM_AT(SKTF_DENSE_AVX2, T, SUF##x, RR)
#define SKTF_DENSE_GRAM_AT(ATTR, T, SUF, RR)                                              \
ATTR static void sktf_gram_rows_##SUF##_##RR(const T *A, double *G, int64_t lo,           \
                                             int64_t hi)                                  \
{                                                                                         \
    for (int r = 0; r < (RR); ++r) {                                                      \
        double acc[RR];                                                                   \
        for (int q = 0; q < (RR); ++q) acc[q] = 0;                                        \
        for (int64_t i = lo; i < hi; ++i) {                                               \
            const double a = A[i * (RR) + r];                                             \
            for (int q = 0; q < (RR); ++q) acc[q] += a * A[i * (RR) + q];                 \
        }                                                                                 \
        for (int q = 0; q < (RR); ++q) G[r * (RR) + q] = acc[q];                          \
    }                                                                                     \
}
#define SKTF_DENSE_AT(KERNEL, T, SUF)                                                     \
KERNEL(T, SUF, 1) KERNEL(T, SUF, 2) KERNEL(T, SUF, 3) KERNEL(T, SUF, 4) KERNEL(T, SUF, 5) \
KERNEL(T, SUF, 6) KERNEL(T, SUF, 7) KERNEL(T, SUF, 8) KERNEL(T, SUF, 9)                   \
KERNEL(T, SUF, 10) KERNEL(T, SUF, 11) KERNEL(T, SUF, 12) KERNEL(T, SUF, 13)               \
KERNEL(T, SUF, 14) KERNEL(T, SUF, 15) KERNEL(T, SUF, 16)
#define SKTF_DENSE_TABLE(PREFIX, SUF)                                                     \
    { PREFIX##SUF##_1, PREFIX##SUF##_2, PREFIX##SUF##_3, PREFIX##SUF##_4,                 \
      PREFIX##SUF##_5, PREFIX##SUF##_6, PREFIX##SUF##_7, PREFIX##SUF##_8,                 \
      PREFIX##SUF##_9, PREFIX##SUF##_10, PREFIX##SUF##_11, PREFIX##SUF##_12,              \
      PREFIX##SUF##_13, PREFIX##SUF##_14, PREFIX##SUF##_15, PREFIX##SUF##_16 }

/* the entry points: 1 when R is one of the instances (the work is then done), else 0 */
#if SKTF_DENSE_HAVE_AVX2
#define SKTF_DENSE_AVX2_INSTANCES(T, SUF)                                                 \
SKTF_DENSE_AT(SKTF_DENSE_MATMUL_X, T, SUF)                                                \
SKTF_DENSE_AT(SKTF_DENSE_GRAM_X, T, SUF)
#define SKTF_DENSE_PICK(NAME, SUF)                                                        \
    static const fn_t tabx[SKTF_DENSE_SMALL_RANK] = SKTF_DENSE_TABLE(NAME, SUF##x);       \
    const fn_t *t = sktf_dense_avx2() ? tabx : tab;
#else
#define SKTF_DENSE_AVX2_INSTANCES(T, SUF)
#define SKTF_DENSE_PICK(NAME, SUF) const fn_t *t = tab;
#endif
#define SKTF_DENSE_FAMILY(T, SUF)                                                         \
SKTF_DENSE_AT(SKTF_DENSE_MATMUL, T, SUF)                                                  \
SKTF_DENSE_AT(SKTF_DENSE_GRAM, T, SUF)                                                    \
SKTF_DENSE_AVX2_INSTANCES(T, SUF)                                                         \
static int sktf_matmul_rows_##SUF(const T *A, const T *M, T *out, int64_t lo, int64_t hi, \
                                  int64_t R)                                              \
{                                                                                         \
    typedef void (*fn_t)(const T *, const T *, T *, int64_t, int64_t);                   \
    static const fn_t tab[SKTF_DENSE_SMALL_RANK] =                                        \
        SKTF_DENSE_TABLE(sktf_matmul_rows_, SUF);                                         \
    SKTF_DENSE_PICK(sktf_matmul_rows_, SUF)                                               \
    if (R < 1 || R > SKTF_DENSE_SMALL_RANK) return 0;                                     \
    t[R - 1](A, M, out, lo, hi);                                                          \
    return 1;                                                                             \
}                                                                                         \
static int sktf_gram_rows_##SUF(const T *A, double *G, int64_t lo, int64_t hi, int64_t R) \
{                                                                                         \
    typedef void (*fn_t)(const T *, double *, int64_t, int64_t);                         \
    static const fn_t tab[SKTF_DENSE_SMALL_RANK] = SKTF_DENSE_TABLE(sktf_gram_rows_, SUF); \
    SKTF_DENSE_PICK(sktf_gram_rows_, SUF)                                                 \
    if (R < 1 || R > SKTF_DENSE_SMALL_RANK) return 0;                                     \
    t[R - 1](A, G, lo, hi);                                                               \
    return 1;                                                                             \
}

SKTF_DENSE_FAMILY(double, f64)
SKTF_DENSE_FAMILY(float, f32)

#endif /* SKTF_DENSE_H */
