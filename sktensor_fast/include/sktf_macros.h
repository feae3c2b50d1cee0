/* sktensor_fast: the macros that the CPU kernels over COO (sktf_coo.h), ALTO (sktf_alto.h)
 * and GCP (sktf_gcp.h) share: SIMD hints, software prefetch, products of factor rows. */
#ifndef SKTF_MACROS_H
#define SKTF_MACROS_H

#include <stdint.h>

#define SKTF_PRAGMA(x) _Pragma(#x)

/* The rank loops are short (R values); ask for SIMD explicitly, since after full unrolling
   of a constant trip count the compiler may otherwise keep them scalar.  SKTF_SIMD_SUM(v):
   a SIMD loop whose only loop-carried dependence is the sum v. */
#ifdef _OPENMP
#define SKTF_SIMD SKTF_PRAGMA(omp simd)
#define SKTF_SIMD_SUM(v) SKTF_PRAGMA(omp simd reduction(+:v))
#else
#define SKTF_SIMD
#define SKTF_SIMD_SUM(v)
#endif

/* software prefetch of the cache line at p, for reading / for writing */
#if defined(__GNUC__) || defined(__clang__)
#define SKTF_PREFETCH(p) __builtin_prefetch((const void *) (p), 0, 3)
#define SKTF_PREFETCH_W(p) __builtin_prefetch((const void *) (p), 1, 3)
#else
#define SKTF_PREFETCH(p) ((void) 0)
#define SKTF_PREFETCH_W(p) ((void) 0)
#endif

/* prefetch the BYTES bytes at P (a factor row) */
#define SKTF_PF_ROW(P, BYTES)                                                             \
    { const char *p_ = (const char *) (P);                                                \
      for (int64_t q_ = 0; q_ < (int64_t) (BYTES); q_ += 64) SKTF_PREFETCH(p_ + q_);      \
      SKTF_PREFETCH(p_ + (BYTES) - 1); }

/* products of the rank-r entries of K rows p[0..K-1], left to right */
#define SKTF_PROD_2(p, r) ((p)[0][r] * (p)[1][r])
#define SKTF_PROD_3(p, r) (SKTF_PROD_2(p, r) * (p)[2][r])
#define SKTF_PROD_4(p, r) (SKTF_PROD_3(p, r) * (p)[3][r])
#define SKTF_PROD_5(p, r) (SKTF_PROD_4(p, r) * (p)[4][r])
/* the Khatri-Rao row of an NM-way nonzero (NM - 1 rows) and its model-value product (NM) */
#define SKTF_KR_3 SKTF_PROD_2
#define SKTF_KR_4 SKTF_PROD_3
#define SKTF_KR_5 SKTF_PROD_4
#define SKTF_ALL_3 SKTF_PROD_3
#define SKTF_ALL_4 SKTF_PROD_4
#define SKTF_ALL_5 SKTF_PROD_5

#endif /* SKTF_MACROS_H */
