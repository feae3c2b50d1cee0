/* sktensor_fast: MTTKRP and CP-APR's Phi of 3-way tensors with two tiny modes, over fibers
 * (backends/cpu/_fiber.pyx; the layout is described in formats/fibers.py).
 *
 * The nonzeros are sorted by (a, b, c): a the longest mode (the root), b and c the tiny ones.
 * A fiber is the run of nonzeros with the same (a, b); each stores its value and its leaf
 * coordinate c only.  The rows of a and b are read once per fiber, so a nonzero costs one
 * factor row (mode c's) instead of two, and the product of the fiber's rows is formed once:
 *
 *   output c (leaf):   g = A_a[ia] * A_b[ib];          out[ic] += w g
 *   output a or b:     h = the other fiber-level row,  g = B[i_out] * h (Phi) or h (MTTKRP);
 *                      acc += w A_c[ic] over the fiber, then out[i_out] += acc * h
 *
 * with w = x / max(g . B[ic], eps) (leaf, Phi), x / max(g . A_c[ic], eps) (a or b, Phi), or
 * x (MTTKRP).  One call handles the fibers f0..f1 of one chunk into a private buffer whose
 * rows start at lo; the caller adds the chunks' buffers in chunk order. */
#ifndef SKTF_FIBER_H
#define SKTF_FIBER_H

#include <stdint.h>
#include <string.h>

#include "sktf_macros.h"
#include "sktf_cp.h"
#include "sktf_log.h"

typedef struct {
    const int64_t *fptr;      /* (nf + 1) offsets of the fibers into leaf / vals */
    const int32_t *fa;        /* (nf) root coordinate of each fiber */
    const int32_t *fb;        /* (nf) middle coordinate of each fiber */
    const int32_t *leaf;      /* (nnz) leaf coordinate of each nonzero */
    const void *vals;         /* (nnz) values in fiber order */
    const void *Aa, *Ab, *Ac; /* the factors of the root, middle and leaf modes (I x R) */
    const void *B;            /* Phi: the (I_out x R) matrix of the output mode; NULL: MTTKRP */
    double eps;
    int64_t R;
    int out;                  /* 0: root a, 1: middle b, 2: leaf c */
} sktf_fiber_job;

/* one chunk of fibers f0..f1 into buf (rows from lo), for rank RR (a constant, or R);
   DECL declares g and acc (RR entries each): arrays of a constant size, so that they live in
   registers, or for any R the caller's scratch (2 R entries) */
#define SKTF_FIBER_CHUNK(FN, T, RR, ATTR, DECL, AK)                                       \
ATTR static void FN(const sktf_fiber_job *jb, int64_t f0, int64_t f1, T *buf, int64_t lo, \
                    T *scratch)                                                           \
{                                                                                         \
    const int64_t R = jb->R;                                                              \
    const int64_t * const fptr = jb->fptr;                                                \
    const int32_t * const leaf = jb->leaf;                                                \
    const T * const vals = (const T *) jb->vals;                                          \
    const T * const Aa = (const T *) jb->Aa;                                              \
    const T * const Ab = (const T *) jb->Ab;                                              \
    const T * const Ac = (const T *) jb->Ac;                                              \
    const T * const B = (const T *) jb->B;                                                \
    const T eps = (T) jb->eps;                                                            \
    DECL                                                                                  \
    (void) R; (void) scratch;                                                             \
    for (int64_t f = f0; f < f1; ++f) {                                                   \
        const T *ra = Aa + (int64_t) jb->fa[f] * (RR);                                    \
        const T *rb = Ab + (int64_t) jb->fb[f] * (RR);                                    \
        const int64_t s = fptr[f], e = fptr[f + 1];                                       \
        if (jb->out == 2) {                                                               \
            SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) g[r] = ra[r] * rb[r];            \
            for (int64_t t = s; t < e; ++t) {                                             \
                T w = vals[t];                                                            \
                T *d = buf + ((int64_t) leaf[t] - lo) * (RR);                             \
                if (B) {                                                                  \
                    const T *bc = B + (int64_t) leaf[t] * (RR);                           \
                    T dot = 0;                                                            \
                    SKTF_SIMD_SUM(dot)                                                    \
                    for (int64_t r = 0; r < (RR); ++r) dot = dot + g[r] * bc[r];          \
                    w = SKTF_PHI_WEIGHT(w, dot, eps);                                     \
                }                                                                         \
                SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) d[r] += w * g[r];            \
            }                                                                             \
            continue;                                                                     \
        }                                                                                 \
        /* output a (row ra's) or b (row rb's): h the other fiber-level row */            \
        const T *h = (jb->out == 0) ? rb : ra;                                            \
        const int64_t io = (jb->out == 0) ? jb->fa[f] : jb->fb[f];                        \
        SKTF_FIBER_ZERO_##AK(RR)                                                          \
        if (B) {                                                                          \
            const T *bo = B + io * (RR);                                                  \
            SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) g[r] = bo[r] * h[r];             \
            for (int64_t t = s; t < e; ++t) {                                             \
                const T *rc = Ac + (int64_t) leaf[t] * (RR);                              \
                T dot = 0;                                                                \
                SKTF_SIMD_SUM(dot)                                                        \
                for (int64_t r = 0; r < (RR); ++r) dot = dot + g[r] * rc[r];              \
                const T w = SKTF_PHI_WEIGHT(vals[t], dot, eps);                           \
                SKTF_FIBER_ADD_##AK(RR, w, rc)                                            \
            }                                                                             \
        } else {                                                                          \
            for (int64_t t = s; t < e; ++t) {                                             \
                const T *rc = Ac + (int64_t) leaf[t] * (RR);                              \
                const T w = vals[t];                                                      \
                SKTF_FIBER_ADD_##AK(RR, w, rc)                                            \
            }                                                                             \
        }                                                                                 \
        T *d = buf + (io - lo) * (RR);                                                    \
        SKTF_FIBER_STORE_##AK                                                             \
        for (int64_t r = 0; r < (RR); ++r) d[r] += acc[r] * h[r];                         \
    }                                                                                     \
}

/* the Poisson data term of the fibers f0..f1: Σ x log(max(m, eps)) over their nonzeros with
   x != 0, m = g . A_c[ic] with g = weights * A_a[ia] * A_b[ib] formed once per fiber (the
   logarithms in blocks, sktf_log.h); DECL declares g (RR entries) */
#define SKTF_FIBER_LL(FN, T, RR, ATTR, DECL)                                              \
ATTR static double FN(const sktf_fiber_job *jb, const T *weights, int64_t f0, int64_t f1, \
                      double eps, T *scratch)                                             \
{                                                                                         \
    const int64_t R = jb->R;                                                              \
    const int64_t * const fptr = jb->fptr;                                                \
    const int32_t * const leaf = jb->leaf;                                                \
    const T * const vals = (const T *) jb->vals;                                          \
    const T * const Aa = (const T *) jb->Aa;                                              \
    const T * const Ab = (const T *) jb->Ab;                                              \
    const T * const Ac = (const T *) jb->Ac;                                              \
    DECL                                                                                  \
    SKTF_LOG_DECL                                                                         \
    (void) R; (void) scratch;                                                             \
    for (int64_t f = f0; f < f1; ++f) {                                                   \
        const T *ra = Aa + (int64_t) jb->fa[f] * (RR);                                    \
        const T *rb = Ab + (int64_t) jb->fb[f] * (RR);                                    \
        SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) g[r] = weights[r] * (ra[r] * rb[r]);  \
        for (int64_t t = fptr[f]; t < fptr[f + 1]; ++t) {                                 \
            if (vals[t] == 0) continue;                                                   \
            const T *rc = Ac + (int64_t) leaf[t] * (RR);                                  \
            T m = 0;                                                                      \
            SKTF_SIMD_SUM(m)                                                              \
            for (int64_t r = 0; r < (RR); ++r) m = m + g[r] * rc[r];                      \
            SKTF_LOG_PUSH((double) vals[t], (double) m, eps)                              \
        }                                                                                 \
    }                                                                                     \
    SKTF_LOG_FLUSH(eps)                                                                   \
    return tot_;                                                                          \
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define SKTF_FIBER_AVX2 1
#define SKTF_FIBER_ATTR __attribute__((target("avx2,fma")))
static int sktf_fiber_simd_level(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 3 : 1;
}
#else
#define SKTF_FIBER_AVX2 0
#define SKTF_FIBER_ATTR
static int sktf_fiber_simd_level(void) { return 1; }
#endif

/* AK says how a fiber's sum acc is kept: V, in a vector of the rank's width (registers; an
   array would stay in memory, each update waiting for the previous one's store), with GCC or
   Clang at constant ranks; A, in the array acc itself.  SKTF_FIBER_ZERO_<AK>,
   SKTF_FIBER_ADD_<AK>(w, row) (acc += w row), SKTF_FIBER_STORE_<AK> (into the array acc). */
#define SKTF_FIBER_ZERO_A(K) for (int64_t r = 0; r < (K); ++r) acc[r] = 0;
#define SKTF_FIBER_ADD_A(K, W, ROW) for (int64_t r = 0; r < (K); ++r) acc[r] += (W) * (ROW)[r];
#define SKTF_FIBER_STORE_A
#if defined(__GNUC__) || defined(__clang__)
#define SKTF_FIBER_ARR(T, K)                                                              \
    typedef T vec_t __attribute__((vector_size(32)));                                     \
    T g[K], acc[K];                                                                       \
    vec_t accv_[(K) * sizeof(T) / 32];
#define SKTF_FIBER_ZERO_V(K) for (int q_ = 0; q_ < (int) ((K) * sizeof(*acc) / 32); ++q_) \
    accv_[q_] = (vec_t) {0};
#define SKTF_FIBER_ADD_V(K, W, ROW)                                                        \
    for (int q_ = 0; q_ < (int) ((K) * sizeof(*acc) / 32); ++q_) {                        \
        vec_t rv_; memcpy(&rv_, (ROW) + q_ * (32 / sizeof(*acc)), 32); accv_[q_] += (W) * rv_; }
#define SKTF_FIBER_STORE_V memcpy(acc, accv_, sizeof accv_);
#else
#define SKTF_FIBER_ARR(T, K) T g[K], acc[K];
#define SKTF_FIBER_ZERO_V(K) SKTF_FIBER_ZERO_A(K)
#define SKTF_FIBER_ADD_V(K, W, ROW) SKTF_FIBER_ADD_A(K, W, ROW)
#define SKTF_FIBER_STORE_V
#endif
#define SKTF_FIBER_SCR(T) T * const g = scratch; T * const acc = scratch + R;

#if SKTF_FIBER_AVX2
#include <immintrin.h>
/* Phi in float64 for ranks 8 and 16 with AVX2 and FMA, in two passes over each segment of
   up to SKTF_FIBER_SEG nonzeros of a fiber: first the weights w = x / max(dot, eps) of all
   of them, 4 at a time with one vector division, into a small array; then the updates of the
   output (leaf) or of the fiber's sum (root, middle) in nonzero order.  In one pass per
   nonzero, each update waited for its division and its dot product's chain of additions,
   and the queues filled up with the updates waiting for them.  For the leaf output, a run
   of up to SKTF_FIBER_GROUP fibers over the same consecutive rows (every fiber of a dense
   tensor) takes each output row once: loaded, the run's updates added in fiber order,
   stored (one pass per nonzero loaded and stored the row each time).  Every value is the scalar
   loop's, bit for bit: a nonzero's dot product is the vector of the fused multiply-adds of
   its quarters from zero (g[0:4] * row[0:4] + 0, then + g[4:8] * row[4:8], ...), its 4 lanes
   added in order from zero ((((0 + s0) + s1) + s2) + s3), as the compiler reduces
   SKTF_SIMD_SUM's loop at these ranks (tests/kernels/cpu/test_fibers.py compares the two);
   4 nonzeros' sums are formed together after a 4 x 4 transposition; the division is the
   correctly rounded one either way.  MTTKRP takes the scalar loop. */
#define SKTF_FIBER_SEG 64
#define SKTF_FIBER_GROUP 8
SKTF_FIBER_ATTR static inline __m256d sktf_fiber_dot4_(__m256d s0, __m256d s1, __m256d s2,
                                                       __m256d s3)
{
    const __m256d t0 = _mm256_unpacklo_pd(s0, s1), t1 = _mm256_unpackhi_pd(s0, s1);
    const __m256d t2 = _mm256_unpacklo_pd(s2, s3), t3 = _mm256_unpackhi_pd(s2, s3);
    __m256d d = _mm256_add_pd(_mm256_setzero_pd(), _mm256_permute2f128_pd(t0, t2, 0x20));
    d = _mm256_add_pd(d, _mm256_permute2f128_pd(t1, t3, 0x20));
    d = _mm256_add_pd(d, _mm256_permute2f128_pd(t0, t2, 0x31));
    return _mm256_add_pd(d, _mm256_permute2f128_pd(t1, t3, 0x31));
}
#define SKTF_FIBER_DOTV_(NQ, GV, ROW, S)                                                  \
    { S = _mm256_fmadd_pd(GV[0], _mm256_loadu_pd(ROW), _mm256_setzero_pd());              \
      for (int q_ = 1; q_ < (NQ); ++q_)                                                   \
          S = _mm256_fmadd_pd(GV[q_], _mm256_loadu_pd((ROW) + 4 * q_), S); }

/* the weights of the nonzeros u..u+n-1 (rows M + leaf[t] * RR against gv) into wv[0..n-1];
   software-pipelined: the products of block j, the sums of block j - 1 and the division of
   block j - 2 are issued together, so that few instructions wait for their operands */
#define SKTF_FIBER_PROD4_(NQ, M, K, S0, S1, S2, S3)                                        \
    {   const int32_t *l_ = leaf + (K);                                                   \
        SKTF_FIBER_DOTV_(NQ, gv, (M) + (int64_t) l_[0] * (4 * NQ), S0)                    \
        SKTF_FIBER_DOTV_(NQ, gv, (M) + (int64_t) l_[1] * (4 * NQ), S1)                    \
        SKTF_FIBER_DOTV_(NQ, gv, (M) + (int64_t) l_[2] * (4 * NQ), S2)                    \
        SKTF_FIBER_DOTV_(NQ, gv, (M) + (int64_t) l_[3] * (4 * NQ), S3) }
#define SKTF_FIBER_DIV4_(K, D, J)                                                         \
    _mm256_store_pd(wv + 4 * (J), _mm256_div_pd(_mm256_loadu_pd(vals + (K) + 4 * (J)),    \
                                                _mm256_max_pd(epsv, D)));
#define SKTF_FIBER_WEIGHTS_(NQ, M, U, N)                                                  \
    {   const int64_t nb_ = (N) / 4;                                                      \
        __m256d s0_ = _mm256_setzero_pd(), s1_ = s0_, s2_ = s0_, s3_ = s0_, d1_ = s0_;    \
        for (int64_t j_ = 0; j_ < nb_ + 2; ++j_) {                                        \
            if (j_ >= 2) SKTF_FIBER_DIV4_(U, d1_, j_ - 2)                                 \
            if (j_ >= 1 && j_ <= nb_) d1_ = sktf_fiber_dot4_(s0_, s1_, s2_, s3_);         \
            if (j_ < nb_) SKTF_FIBER_PROD4_(NQ, M, (U) + 4 * j_, s0_, s1_, s2_, s3_)      \
        }                                                                                 \
        for (int64_t k_ = 4 * nb_; k_ < (N); ++k_) {                                      \
            const __m256d z_ = _mm256_setzero_pd();                                       \
            SKTF_FIBER_DOTV_(NQ, gv, (M) + (int64_t) leaf[(U) + k_] * (4 * NQ), s0_)      \
            const __m256d d_ = sktf_fiber_dot4_(s0_, z_, z_, z_);                         \
            _mm256_storeu_pd(wv + k_, _mm256_div_pd(_mm256_set1_pd(vals[(U) + k_]),       \
                                                    _mm256_max_pd(epsv, d_)));            \
        }                                                                                 \
    }

#define SKTF_FIBER_PHI4(FN, RR)                                                           \
SKTF_FIBER_ATTR static void FN(const sktf_fiber_job *jb, int64_t f0, int64_t f1,          \
                               double *buf, int64_t lo)                                   \
{                                                                                         \
    enum { NQ = (RR) / 4 };                                                               \
    const int64_t * const fptr = jb->fptr;                                                \
    const int32_t * const leaf = jb->leaf;                                                \
    const double * const vals = (const double *) jb->vals;                                \
    const double * const Aa = (const double *) jb->Aa;                                    \
    const double * const Ab = (const double *) jb->Ab;                                    \
    const double * const Ac = (const double *) jb->Ac;                                    \
    const double * const B = (const double *) jb->B;                                      \
    const __m256d epsv = _mm256_set1_pd(jb->eps);                                         \
    double wall[SKTF_FIBER_GROUP][SKTF_FIBER_SEG + 4] __attribute__((aligned(32)));       \
    double gs[SKTF_FIBER_GROUP][RR] __attribute__((aligned(32)));                         \
    double * const wv = wall[0];                                                          \
    __m256d gv[NQ], acc[NQ];                                                              \
    for (int64_t f = f0; f < f1; ++f) {                                                   \
        const double *ra = Aa + (int64_t) jb->fa[f] * (RR);                               \
        const double *rb = Ab + (int64_t) jb->fb[f] * (RR);                               \
        const int64_t s = fptr[f], e = fptr[f + 1];                                       \
        if (jb->out == 2 && e - s <= SKTF_FIBER_SEG && leaf[e - 1] - leaf[s] == e - s - 1) { \
            /* a run of fibers over the same consecutive leaf rows: their weights first,  \
               then each row loaded once, its fibers' updates added in fiber order */     \
            const int64_t n = e - s;                                                      \
            const int32_t c0 = leaf[s];                                                   \
            int64_t G = 1;                                                                \
            while (G < SKTF_FIBER_GROUP && f + G < f1 && fptr[f + G + 1] - fptr[f + G] == n \
                   && leaf[fptr[f + G]] == c0 && leaf[fptr[f + G + 1] - 1] == c0 + n - 1) \
                ++G;                                                                      \
            for (int64_t i = 0; i < G; ++i) {                                             \
                const double *ri = Aa + (int64_t) jb->fa[f + i] * (RR);                   \
                const double *rj = Ab + (int64_t) jb->fb[f + i] * (RR);                   \
                for (int q = 0; q < NQ; ++q) {                                            \
                    gv[q] = _mm256_mul_pd(_mm256_loadu_pd(ri + 4 * q), _mm256_loadu_pd(rj + 4 * q)); \
                    _mm256_store_pd(gs[i] + 4 * q, gv[q]);                                \
                }                                                                         \
                double * const wv = wall[i];                                              \
                SKTF_FIBER_WEIGHTS_(NQ, B, fptr[f + i], n)                                \
            }                                                                             \
            double *d = buf + ((int64_t) c0 - lo) * (RR);                                 \
            for (int64_t k = 0; k < n; ++k, d += (RR)) {                                  \
                for (int q = 0; q < NQ; ++q) acc[q] = _mm256_loadu_pd(d + 4 * q);         \
                for (int64_t i = 0; i < G; ++i) {                                         \
                    const __m256d wb = _mm256_broadcast_sd(wall[i] + k);                  \
                    for (int q = 0; q < NQ; ++q)                                          \
                        acc[q] = _mm256_fmadd_pd(wb, _mm256_load_pd(gs[i] + 4 * q), acc[q]); \
                }                                                                         \
                for (int q = 0; q < NQ; ++q) _mm256_storeu_pd(d + 4 * q, acc[q]);         \
            }                                                                             \
            f += G - 1;                                                                   \
            continue;                                                                     \
        }                                                                                 \
        if (jb->out == 2) {                                                               \
            for (int q = 0; q < NQ; ++q)                                                  \
                gv[q] = _mm256_mul_pd(_mm256_loadu_pd(ra + 4 * q), _mm256_loadu_pd(rb + 4 * q)); \
            for (int64_t u = s; u < e; u += SKTF_FIBER_SEG) {                             \
                const int64_t n = e - u < SKTF_FIBER_SEG ? e - u : SKTF_FIBER_SEG;        \
                SKTF_FIBER_WEIGHTS_(NQ, B, u, n)                                          \
                for (int64_t k = 0; k < n; ++k) {                                         \
                    double *d = buf + ((int64_t) leaf[u + k] - lo) * (RR);                \
                    const __m256d wb = _mm256_broadcast_sd(wv + k);                       \
                    for (int q = 0; q < NQ; ++q)                                          \
                        _mm256_storeu_pd(d + 4 * q, _mm256_fmadd_pd(wb, gv[q],            \
                                                    _mm256_loadu_pd(d + 4 * q)));         \
                }                                                                         \
            }                                                                             \
            continue;                                                                     \
        }                                                                                 \
        const double *h = (jb->out == 0) ? rb : ra;                                       \
        const int64_t io = (jb->out == 0) ? jb->fa[f] : jb->fb[f];                        \
        const double *bo = B + io * (RR);                                                 \
        for (int q = 0; q < NQ; ++q) {                                                    \
            gv[q] = _mm256_mul_pd(_mm256_loadu_pd(bo + 4 * q), _mm256_loadu_pd(h + 4 * q)); \
            acc[q] = _mm256_setzero_pd();                                                 \
        }                                                                                 \
        for (int64_t u = s; u < e; u += SKTF_FIBER_SEG) {                                 \
            const int64_t n = e - u < SKTF_FIBER_SEG ? e - u : SKTF_FIBER_SEG;            \
            SKTF_FIBER_WEIGHTS_(NQ, Ac, u, n)                                             \
            for (int64_t k = 0; k < n; ++k) {                                             \
                const double *rc = Ac + (int64_t) leaf[u + k] * (RR);                     \
                const __m256d wb = _mm256_broadcast_sd(wv + k);                           \
                for (int q = 0; q < NQ; ++q)                                              \
                    acc[q] = _mm256_fmadd_pd(wb, _mm256_loadu_pd(rc + 4 * q), acc[q]);    \
            }                                                                             \
        }                                                                                 \
        double *d = buf + (io - lo) * (RR);                                               \
        for (int q = 0; q < NQ; ++q)                                                      \
            _mm256_storeu_pd(d + 4 * q, _mm256_fmadd_pd(acc[q], _mm256_loadu_pd(h + 4 * q), \
                                                        _mm256_loadu_pd(d + 4 * q)));     \
    }                                                                                     \
}
SKTF_FIBER_PHI4(sktf_fiber_phi4_8, 8)
SKTF_FIBER_PHI4(sktf_fiber_phi4_16, 16)
/* Phi in float64 at rank 8 or 16 with AVX2: the blocked loop; 1 when it ran */
#define SKTF_FIBER_PHI4_f64(JB, F0, F1, BUF, LO)                                          \
    if ((JB)->B && (JB)->R == 8) { sktf_fiber_phi4_8(JB, F0, F1, BUF, LO); return; }      \
    if ((JB)->B && (JB)->R == 16) { sktf_fiber_phi4_16(JB, F0, F1, BUF, LO); return; }
#else
#define SKTF_FIBER_PHI4_f64(JB, F0, F1, BUF, LO)
#endif
#define SKTF_FIBER_PHI4_f32(JB, F0, F1, BUF, LO)

/* instances: ranks 8, 16 and any, plain and (x86-64) for AVX2 with FMA; the entry point
   chooses by R and by simd (sktf_fiber_simd_level, read once by the caller, so that one
   process always takes the same instance: 1 plain, 2 AVX2 with FMA, 3 the same with Phi's
   blocked loop in float64 at ranks 8 and 16, which gives the bits of 2) */
#define SKTF_FIBER_FAMILY(T, SUF)                                                         \
SKTF_FIBER_CHUNK(sktf_fiber_##SUF##_8, T, 8, , SKTF_FIBER_ARR(T, 8), V)                  \
SKTF_FIBER_CHUNK(sktf_fiber_##SUF##_16, T, 16, , SKTF_FIBER_ARR(T, 16), V)                \
SKTF_FIBER_CHUNK(sktf_fiber_##SUF##_rr, T, R, , SKTF_FIBER_SCR(T), A)                     \
SKTF_FIBER_CHUNK(sktf_fiber_x_##SUF##_8, T, 8, SKTF_FIBER_ATTR, SKTF_FIBER_ARR(T, 8), V)  \
SKTF_FIBER_CHUNK(sktf_fiber_x_##SUF##_16, T, 16, SKTF_FIBER_ATTR, SKTF_FIBER_ARR(T, 16), V)\
SKTF_FIBER_CHUNK(sktf_fiber_x_##SUF##_rr, T, R, SKTF_FIBER_ATTR, SKTF_FIBER_SCR(T), A)    \
SKTF_FIBER_LL(sktf_fiber_ll_##SUF##_8, T, 8, , T g[8];)                                   \
SKTF_FIBER_LL(sktf_fiber_ll_##SUF##_16, T, 16, , T g[16];)                                \
SKTF_FIBER_LL(sktf_fiber_ll_##SUF##_rr, T, R, , T * const g = scratch;)                   \
SKTF_FIBER_LL(sktf_fiber_ll_x_##SUF##_8, T, 8, SKTF_FIBER_ATTR, T g[8];)                  \
SKTF_FIBER_LL(sktf_fiber_ll_x_##SUF##_16, T, 16, SKTF_FIBER_ATTR, T g[16];)               \
SKTF_FIBER_LL(sktf_fiber_ll_x_##SUF##_rr, T, R, SKTF_FIBER_ATTR, T * const g = scratch;)  \
static double sktf_fiber_lln_##SUF(const sktf_fiber_job *jb, const T *weights, int64_t f0, \
                                   int64_t f1, double eps, T *scratch, int simd)          \
{                                                                                         \
    if (simd >= 2) {                                                                      \
        switch (jb->R) {                                                                  \
        case 8: return sktf_fiber_ll_x_##SUF##_8(jb, weights, f0, f1, eps, scratch);      \
        case 16: return sktf_fiber_ll_x_##SUF##_16(jb, weights, f0, f1, eps, scratch);    \
        default: return sktf_fiber_ll_x_##SUF##_rr(jb, weights, f0, f1, eps, scratch);    \
        }                                                                                 \
    }                                                                                     \
    switch (jb->R) {                                                                      \
    case 8: return sktf_fiber_ll_##SUF##_8(jb, weights, f0, f1, eps, scratch);            \
    case 16: return sktf_fiber_ll_##SUF##_16(jb, weights, f0, f1, eps, scratch);          \
    default: return sktf_fiber_ll_##SUF##_rr(jb, weights, f0, f1, eps, scratch);          \
    }                                                                                     \
}                                                                                         \
static void sktf_fiber_chunk_##SUF(const sktf_fiber_job *jb, int64_t f0, int64_t f1,      \
                                   T *buf, int64_t lo, T *scratch, int simd)              \
{                                                                                         \
    if (simd >= 2) {                                                                      \
        if (simd >= 3) { SKTF_FIBER_PHI4_##SUF(jb, f0, f1, buf, lo) }                     \
        switch (jb->R) {                                                                  \
        case 8: sktf_fiber_x_##SUF##_8(jb, f0, f1, buf, lo, scratch); return;             \
        case 16: sktf_fiber_x_##SUF##_16(jb, f0, f1, buf, lo, scratch); return;           \
        default: sktf_fiber_x_##SUF##_rr(jb, f0, f1, buf, lo, scratch); return;           \
        }                                                                                 \
    }                                                                                     \
    switch (jb->R) {                                                                      \
    case 8: sktf_fiber_##SUF##_8(jb, f0, f1, buf, lo, scratch); return;                   \
    case 16: sktf_fiber_##SUF##_16(jb, f0, f1, buf, lo, scratch); return;                 \
    default: sktf_fiber_##SUF##_rr(jb, f0, f1, buf, lo, scratch); return;                 \
    }                                                                                     \
}

SKTF_FIBER_FAMILY(double, f64)
SKTF_FIBER_FAMILY(float, f32)

#endif /* SKTF_FIBER_H */
