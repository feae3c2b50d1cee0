/* sktensor_fast: the Poisson data term's logarithms in blocks, vectorised (the CPU kernels of
 * sktf_coo.h, sktf_alto.h and sktf_fiber.h).
 *
 * A kernel of the data term Σ x log(max(m, eps)) forms the model values m of its nonzeros
 * (those with x != 0) into a block of SKTF_LOG_BLOCK entries, with their values x beside
 * them, and hands each full block (and the last, partial one) to sktf_xlogm, which returns
 * the block's sum.  sktf_xlogm takes the logarithms of the whole block in one loop that the
 * compiler vectorises (sktf_log_core: no table, no branch), then adds x log m into
 * SKTF_LOG_LANES partial sums (entry i into sum i % SKTF_LOG_LANES) and adds those in a
 * fixed order: a block's sum depends on its entries only, never on the thread that runs it.
 *
 * sktf_log_core(v), for v normal, positive and finite: v = 2^k m with m in [sqrt(1/2),
 * sqrt(2)), f = m - 1, s = f / (2 + f), so that log(1 + f) = 2 atanh(s) = f - f^2/2 +
 * s (f^2/2 + R(s^2)) with R(z) = Σ_{j>=1} 2 z^j / (2j + 1) (since f - 2s = s f), R replaced
 * by a polynomial of degree 8 fitted to it on [0, (3 - 2 sqrt 2)^2] (absolute error below
 * 2e-20, weighted least squares iterated towards the minimax fit), and k log 2 added as
 * k ln2_hi + k ln2_lo, ln2_hi with 42 significant bits so that k ln2_hi is exact.  Within
 * one ulp of the C library's log, and equal to it for about 98 % of the arguments
 * (tests/kernels/cpu/test_data_term.py compares the two over the whole range).  Zero, negative, subnormal, infinite and NaN
 * arguments (none in a block of positive model values above eps >= DBL_MIN) take the C
 * library's log instead: a block that holds any is patched after its vector loop.
 *
 * Instances: generic, AVX2 with FMA, AVX-512 (x86-64 with GCC or Clang); sktf_log_init()
 * chooses one from the CPU once (each module that includes this header calls it when it is
 * imported), so that one process always takes the same.  The instances may round
 * differently (fused multiply-adds), each within the bound above. */
#ifndef SKTF_LOG_H
#define SKTF_LOG_H

#include <stdint.h>
#include <string.h>
#include <math.h>
#include <float.h>

#include "sktf_macros.h"
#include "sktf_cp.h"

#define SKTF_LOG_BLOCK 256
#define SKTF_LOG_LANES 8

/* a SIMD loop whose only loop-carried dependence is the bitwise or into v */
#ifdef _OPENMP
#define SKTF_LOG_SIMD_OR(v) SKTF_PRAGMA(omp simd reduction(|:v))
#else
#define SKTF_LOG_SIMD_OR(v)
#endif

/* log(v) for v normal, positive and finite (anything for other v) */
static inline double sktf_log_core(double v)
{
    uint64_t iv;
    memcpy(&iv, &v, sizeof iv);
    /* u's exponent field is k + 1023 where v = 2^k m, m in [sqrt(1/2), sqrt(2)) */
    const uint64_t u = iv + (UINT64_C(0x3ff0000000000000) - UINT64_C(0x3fe6a09e667f3bcd));
    const uint64_t mbits = iv - (u & UINT64_C(0xfff0000000000000)) + UINT64_C(0x3ff0000000000000);
    /* k as a double without an int64 conversion (none in AVX2): 2^52 + (k + 1023) */
    const uint64_t kbits = UINT64_C(0x4330000000000000) | (u >> 52);
    double m, k;
    memcpy(&m, &mbits, sizeof m);
    memcpy(&k, &kbits, sizeof k);
    k -= 4503599627371519.0;                                   /* 2^52 + 1023 */
    const double f = m - 1.0;
    const double s = f / (2.0 + f);
    const double z = s * s;
    const double hfsq = 0.5 * f * f;
    const double R = z * (0.6666666666666666 + z * (0.4000000000000624
                   + z * (0.28571428569087287 + z * (0.22222222646579154
                   + z * (0.18181775683301682 + z * (0.15387089965969697
                   + z * (0.1325013624374854 + z * 0.13251162328832658)))))));
    return k * 0.6931471805598903                              /* ln2_hi, 0x3fe62e42fefa3800 */
           + (f - (hfsq - (s * (hfsq + R) + k * 5.497923018708371e-14)));      /* ln2_lo */
}

/* v outside the range of sktf_log_core (zero, negative, subnormal, infinite, NaN) */
#define SKTF_LOG_SPECIAL(v) ((((v) >= DBL_MIN) & ((v) <= DBL_MAX)) ^ 1)

/* the same test in integer operations that vectorise (AVX2 has no unsigned 64-bit compare):
   with w = bits(v) - bits(DBL_MIN), v is special iff w >= bits(inf) - bits(DBL_MIN), iff
   (w >> 52) + 2 >= 2^11; the bitwise or of these values over a block is at least 2^11 iff
   one of them is (each is below 2^13) */
static inline uint64_t sktf_log_flag(double v)
{
    uint64_t iv;
    memcpy(&iv, &v, sizeof iv);
    return ((iv - UINT64_C(0x0010000000000000)) >> 52) + 2;
}
#define SKTF_LOG_FLAGGED(or_) ((or_) >= 2048)

/* never inlined or specialised to a constant n: GCC's clone for n = SKTF_LOG_BLOCK (the
   value of every full block) left the loop of the logarithms scalar */
#if defined(__GNUC__) && !defined(__clang__)
#define SKTF_LOG_NOCLONE __attribute__((noinline, noclone))
#elif defined(__clang__)
#define SKTF_LOG_NOCLONE __attribute__((noinline))
#else
#define SKTF_LOG_NOCLONE
#endif

/* FN(x, m, n, eps) = Σ_{i<n} x[i] log(max(m[i], eps)), n <= SKTF_LOG_BLOCK.  The special
   arguments are looked for in a loop of their own (in the loop of the logarithms, the
   generic instance's or stayed scalar) */
#define SKTF_XLOGM(FN, ATTR)                                                              \
ATTR SKTF_LOG_NOCLONE static double FN(const double *x, const double *m, int n, double eps) \
{                                                                                         \
    double lg[SKTF_LOG_BLOCK];                                                            \
    double acc[SKTF_LOG_LANES];                                                           \
    uint64_t bad = 0;                                                                     \
    int i = 0;                                                                            \
    SKTF_SIMD for (int j = 0; j < n; ++j) lg[j] = sktf_log_core(SKTF_CLAMP_BELOW(m[j], eps)); \
    SKTF_LOG_SIMD_OR(bad)                                                                 \
    for (int j = 0; j < n; ++j) bad |= sktf_log_flag(SKTF_CLAMP_BELOW(m[j], eps));         \
    if (SKTF_LOG_FLAGGED(bad)) {                                                          \
        for (int j = 0; j < n; ++j) {                                                     \
            const double v = SKTF_CLAMP_BELOW(m[j], eps);                                 \
            if (SKTF_LOG_SPECIAL(v)) lg[j] = log(v);                                      \
        }                                                                                 \
    }                                                                                     \
    for (int l = 0; l < SKTF_LOG_LANES; ++l) acc[l] = 0;                                  \
    for (; i + SKTF_LOG_LANES <= n; i += SKTF_LOG_LANES) {                                \
        SKTF_SIMD for (int l = 0; l < SKTF_LOG_LANES; ++l) acc[l] += x[i + l] * lg[i + l]; \
    }                                                                                     \
    for (int l = 0; i + l < n; ++l) acc[l] += x[i + l] * lg[i + l];                       \
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])); \
}                                                                                         \
/* FN_log(v, out, n): out[i] = log(v[i]) (the tests' view of the same loop) */            \
ATTR SKTF_LOG_NOCLONE static void FN##_log(const double *v, double *out, int64_t n)      \
{                                                                                         \
    uint64_t bad = 0;                                                                     \
    SKTF_SIMD for (int64_t j = 0; j < n; ++j) out[j] = sktf_log_core(v[j]);               \
    SKTF_LOG_SIMD_OR(bad)                                                                 \
    for (int64_t j = 0; j < n; ++j) bad |= sktf_log_flag(v[j]);                           \
    if (SKTF_LOG_FLAGGED(bad)) {                                                          \
        for (int64_t j = 0; j < n; ++j)                                                   \
            if (SKTF_LOG_SPECIAL(v[j])) out[j] = log(v[j]);                               \
    }                                                                                     \
}

SKTF_XLOGM(sktf_xlogm_gen, )
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define SKTF_LOG_X86 1
SKTF_XLOGM(sktf_xlogm_avx2, __attribute__((target("avx2,fma"))))
SKTF_XLOGM(sktf_xlogm_avx512, __attribute__((target("avx512f,fma"))))
#else
#define SKTF_LOG_X86 0
#endif

/* the instance this process takes: 0 generic, 1 AVX2 with FMA, 2 AVX-512 */
static int sktf_log_level = 0;

/* the best instance the CPU runs (and that the operating system saves the registers of) */
static int sktf_log_cpu_level(void)
{
#if SKTF_LOG_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
    return 0;
}

/* choose the instance: level -1 the best the CPU runs, else min(level, that) */
static int sktf_log_init(int level)
{
    const int best = sktf_log_cpu_level();
    sktf_log_level = (level < 0 || level > best) ? best : level;
    return sktf_log_level;
}

/* Σ_{i<n} x[i] log(max(m[i], eps)) with the chosen instance (n <= SKTF_LOG_BLOCK) */
static double sktf_xlogm(const double *x, const double *m, int n, double eps)
{
#if SKTF_LOG_X86
    if (sktf_log_level == 2) return sktf_xlogm_avx512(x, m, n, eps);
    if (sktf_log_level == 1) return sktf_xlogm_avx2(x, m, n, eps);
#endif
    return sktf_xlogm_gen(x, m, n, eps);
}

/* out[i] = log(v[i]) with the instance of level (the tests) */
static inline void sktf_log_array(const double *v, double *out, int64_t n, int level)
{
#if SKTF_LOG_X86
    if (level == 2) { sktf_xlogm_avx512_log(v, out, n); return; }
    if (level == 1) { sktf_xlogm_avx2_log(v, out, n); return; }
#endif
    (void) level;
    sktf_xlogm_gen_log(v, out, n);
}

/* A kernel's block: SKTF_LOG_DECL declares it (and the running total tot_, a double), 
   SKTF_LOG_PUSH(x, m) adds a nonzero (x != 0), SKTF_LOG_FLUSH adds the last partial block
   into tot_ */
#define SKTF_LOG_DECL                                                                     \
    double xb_[SKTF_LOG_BLOCK], mb_[SKTF_LOG_BLOCK];                                      \
    int nb_ = 0;                                                                          \
    double tot_ = 0;
#define SKTF_LOG_PUSH(X, M, EPS)                                                          \
    { xb_[nb_] = (X); mb_[nb_] = (M);                                                     \
      if (++nb_ == SKTF_LOG_BLOCK) { tot_ += sktf_xlogm(xb_, mb_, nb_, (EPS)); nb_ = 0; } }
#define SKTF_LOG_FLUSH(EPS)                                                               \
    { if (nb_ > 0) tot_ += sktf_xlogm(xb_, mb_, nb_, (EPS)); nb_ = 0; }

#endif /* SKTF_LOG_H */
