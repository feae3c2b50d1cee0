/* sktensor_fast: the CPU kernels over COO (backends/cpu/_kernels.pyx): one partition of
 * MTTKRP / CP-APR's Phi over nonzeros sorted by the output mode, and the Poisson data term.
 *
 * Each kernel is written once, as a loop skeleton whose per-nonzero Khatri-Rao arithmetic is
 * a hook: for 3-, 4- and 5-way tensors the rows of the other modes are multiplied in
 * registers where they are used (constant trip counts, ranks 8, 16, 32 as compile-time
 * constants so that the rank loops vectorise fully), for any other number of modes the
 * Khatri-Rao row is formed in scratch first.  The entry points dispatch on the number of
 * modes and the rank. */
#ifndef SKTF_COO_H
#define SKTF_COO_H

#include <stdint.h>
#include <math.h>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#define SKTF_HAVE_OPENMP 1
static int sktf_max_threads(void) { return omp_get_max_threads(); }
#else
#define SKTF_HAVE_OPENMP 0
static int sktf_max_threads(void) { return 1; }
#endif

#include "sktf_macros.h"
#include "sktf_cp.h"
#include "sktf_log.h"

/* prefetch distances (nonzeros ahead): coordinates of nonzero j + 2 D, rows of j + D */
#define SKTF_COO_PF 16

/* ------------------------------------------------------------------ the loop skeletons */
/* One partition, nonzeros s..e of the order perm (NULL: identity), of the COO MTTKRP (B
   NULL) or Phi (each nonzero weighted by 1 / max(B[row] . pi, eps)) of mode `mode`: runs of
   equal output rows summed in acc and written to out, except the partition's first row
   (bnd slot 2p) and last run (slot 2p + 1), which other partitions may share (the caller
   adds the boundary slots in partition order).  The hooks, for NMV modes and rank RR:
     DECL                     declarations at the start
     PF_ROWS(T, RR, NMV, qs)  prefetch the factor rows of the nonzero with coordinates qs
     SETUP(T, RR, NMV, sub)   per nonzero with coordinates sub, before KR is read
     KR(NMV, r)               entry r of its Khatri-Rao row
   scratch holds 2 R entries: the accumulator when R > 32, and the generic hooks' row.
   PFR: 1 to prefetch the factor rows SKTF_COO_PF nonzeros ahead (and the coordinates of
   permuted nonzeros twice as far), 0 to prefetch nothing (factors that stay in cache: there
   the prefetch instructions cost more than they save). */
#define SKTF_COO_PART_SKELETON(FN, T, RR, NMV, DECL, PF_ROWS, SETUP, KR, PFR)             \
    SKTF_COO_PART_SKELETON_AT(, FN, T, RR, NMV, DECL, PF_ROWS, SETUP, KR, PFR)
/* ... with the attributes ATTR (an instruction set) */
#define SKTF_COO_PART_SKELETON_AT(ATTR, FN, T, RR, NMV, DECL, PF_ROWS, SETUP, KR, PFR)    \
ATTR static void FN(const int64_t *subs, const T *vals, const int64_t *perm, int64_t s,   \
               int64_t e, T * const *fac, int nmodes, int mode, int64_t R, const T *B,    \
               T eps, T *out, T *bnd, int64_t *bnd_row, int64_t p, T *scratch)            \
{                                                                                         \
    DECL                                                                                  \
    T accv[32];                       /* ranks up to 32 on the stack, else scratch */     \
    T * const acc = ((RR) <= 32) ? accv : scratch;                                        \
    (void) R; (void) nmodes; (void) fac;                                                  \
    int64_t nz = perm ? perm[s] : s;                                                      \
    const int64_t first_row = subs[nz * (NMV) + mode];                                    \
    int64_t cur = first_row;                                                              \
    T *dst;                                                                               \
    SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) acc[r] = 0;                              \
    for (int64_t j = s; j < e; ++j) {                                                     \
        if ((PFR) && perm && j + 2 * SKTF_COO_PF < e) {                                   \
            const int64_t q = perm[j + 2 * SKTF_COO_PF];                                  \
            SKTF_PREFETCH(subs + q * (NMV));                                              \
            SKTF_PREFETCH(vals + q);                                                      \
        }                                                                                 \
        if ((PFR) && j + SKTF_COO_PF < e) {                                               \
            const int64_t *qs = subs                                                      \
                + (perm ? perm[j + SKTF_COO_PF] : j + SKTF_COO_PF) * (NMV);               \
            PF_ROWS(T, RR, NMV, qs)                                                       \
        }                                                                                 \
        nz = perm ? perm[j] : j;                                                          \
        const int64_t *sub = subs + nz * (NMV);                                           \
        const int64_t row = sub[mode];                                                    \
        if (row != cur) {                                                                 \
            if (cur == first_row) { dst = bnd + (2 * p) * (RR); bnd_row[2 * p] = cur; }    \
            else dst = out + cur * (RR);                                                  \
            SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) { dst[r] = acc[r]; acc[r] = 0; }  \
            cur = row;                                                                    \
        }                                                                                 \
        SETUP(T, RR, NMV, sub)                                                        \
        T w = vals[nz];                                                                   \
        if (B) {                                                                          \
            const T *b = B + row * (RR);                                                  \
            T dot = 0;                                                                    \
            SKTF_SIMD_SUM(dot)                                                            \
            for (int64_t r = 0; r < (RR); ++r) dot = dot + b[r] * KR(NMV, r);             \
            w = SKTF_PHI_WEIGHT(w, dot, eps);                                             \
        }                                                                                 \
        SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) acc[r] += w * KR(NMV, r);            \
    }                                                                                     \
    if (cur == first_row) { dst = bnd + (2 * p) * (RR); bnd_row[2 * p] = cur; }            \
    else { dst = bnd + (2 * p + 1) * (RR); bnd_row[2 * p + 1] = cur; }                    \
    SKTF_SIMD for (int64_t r = 0; r < (RR); ++r) dst[r] = acc[r];                         \
}

/* Σ x_j log(max(m_j, eps)) over nonzeros s..e (zeros skipped), m_j = Σ_r weights[r] ALL(r)
   with ALL(r) the product of all NMV rows of nonzero j; hooks as above (scratch: R entries
   for the generic row).  The logarithms are taken in blocks (sktf_log.h).  PFR: as for
   the partitions (0: factors that stay in cache, no prefetching); ATTR: an instruction set */
#define SKTF_COO_LL_SKELETON(FN, T, RR, NMV, DECL, PF_ROWS, SETUP, ALL)                   \
    SKTF_COO_LL_SKELETON_AT(, FN, T, RR, NMV, DECL, PF_ROWS, SETUP, ALL, 1)
#define SKTF_COO_LL_SKELETON_AT(ATTR, FN, T, RR, NMV, DECL, PF_ROWS, SETUP, ALL, PFR)     \
ATTR static double FN(const int64_t *subs, const T *vals, int64_t s, int64_t e,           \
                 T * const *fac, int nmodes, const T *weights, int64_t R, double eps,     \
                 T *scratch)                                                              \
{                                                                                         \
    DECL                                                                                  \
    SKTF_LOG_DECL                                                                         \
    (void) R; (void) nmodes; (void) scratch;                                              \
    for (int64_t j = s; j < e; ++j) {                                                     \
        if ((PFR) && j + SKTF_COO_PF < e) {                                               \
            const int64_t *qs = subs + (j + SKTF_COO_PF) * (NMV);                         \
            PF_ROWS(T, RR, NMV, qs)                                                       \
        }                                                                                 \
        if (vals[j] == 0) continue;                                                       \
        const int64_t *sub = subs + j * (NMV);                                            \
        SETUP(T, RR, NMV, sub)                                                        \
        T acc = 0;                                                                        \
        SKTF_SIMD_SUM(acc)                                                                \
        for (int64_t r = 0; r < (RR); ++r) acc = acc + weights[r] * ALL(NMV, r);          \
        SKTF_LOG_PUSH((double) vals[j], (double) acc, eps)                                \
    }                                                                                     \
    SKTF_LOG_FLUSH(eps)                                                                   \
    return tot_;                                                                          \
}

/* ------------------------------------------------------- hooks for 3-, 4-, 5-way tensors */
/* the other modes' factors, in order (ko: their modes), and per nonzero their rows pk, whose
   products are formed in registers (SKTF_KR_<NM>, SKTF_ALL_<NM>) */
#define SKTF_COO_N_DECL(T, NM)                                                            \
    const T *fo[(NM) - 1];                                                                \
    int ko[(NM) - 1];                                                                     \
    for (int k = 0, q = 0; k < (NM); ++k)                                                 \
        if (k != mode) { ko[q] = k; fo[q] = fac[k]; ++q; }
#define SKTF_COO_N_PF(T, RR, NM, QS)                                                      \
    for (int q = 0; q < (NM) - 1; ++q)                                                    \
        SKTF_PF_ROW(fo[q] + (QS)[ko[q]] * (RR), (RR) * sizeof(T))
#define SKTF_COO_N_SETUP(T, RR, NM, SUB)                                                  \
    const T *pk[(NM) - 1];                                                                \
    for (int q = 0; q < (NM) - 1; ++q) pk[q] = fo[q] + (SUB)[ko[q]] * (RR);
#define SKTF_COO_N_KR(NM, r) SKTF_KR_##NM(pk, r)
/* all modes (the model value) */
#define SKTF_COO_NA_PF(T, RR, NM, QS)                                                     \
    for (int k = 0; k < (NM); ++k) SKTF_PF_ROW(fac[k] + (QS)[k] * (RR), (RR) * sizeof(T))
#define SKTF_COO_NA_SETUP(T, RR, NM, SUB)                                                 \
    const T *pk[NM];                                                                      \
    for (int k = 0; k < (NM); ++k) pk[k] = fac[k] + (SUB)[k] * (RR);
#define SKTF_COO_NA_ALL(NM, r) SKTF_ALL_##NM(pk, r)

#define SKTF_COO_PARTN(FN, T, RR, NM)                                                     \
    SKTF_COO_PART_SKELETON(FN, T, RR, NM, SKTF_COO_N_DECL(T, NM), SKTF_COO_N_PF,          \
                           SKTF_COO_N_SETUP, SKTF_COO_N_KR, 1)
/* ... without prefetching the factor rows, for factors that stay in cache */
#define SKTF_COO_PARTC(FN, T, RR, NM)                                                     \
    SKTF_COO_PART_SKELETON(FN, T, RR, NM, SKTF_COO_N_DECL(T, NM), SKTF_COO_N_PF,          \
                           SKTF_COO_N_SETUP, SKTF_COO_N_KR, 0)
/* ... compiled for AVX2 with FMA as well (x86-64 with GCC or Clang): chosen at run time on
   CPUs that have them (sktf_coo_simd_level) */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define SKTF_COO_HAVE_AVX2_PATH 1
#define SKTF_COO_PARTX(FN, T, RR, NM)                                                     \
    SKTF_COO_PART_SKELETON_AT(__attribute__((target("avx2,fma"))), FN, T, RR, NM,         \
                              SKTF_COO_N_DECL(T, NM), SKTF_COO_N_PF, SKTF_COO_N_SETUP,    \
                              SKTF_COO_N_KR, 0)
static int sktf_coo_simd_level(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 2 : 1;
}
#else
#define SKTF_COO_HAVE_AVX2_PATH 0
#define SKTF_COO_PARTX SKTF_COO_PARTC
static int sktf_coo_simd_level(void) { return 1; }
#endif
#define SKTF_COO_LLN(FN, T, RR, NM)                                                       \
    SKTF_COO_LL_SKELETON(FN, T, RR, NM, , SKTF_COO_NA_PF, SKTF_COO_NA_SETUP, SKTF_COO_NA_ALL)
/* ... factors in cache: no prefetching, and (x86-64) an instance for AVX2 with FMA; any
   other number of modes takes the kernel for any (sktf_coo_ll_any_<SUF>) */
#define SKTF_COO_LLC(FN, T, RR, NM)                                                       \
    SKTF_COO_LL_SKELETON_AT(, FN, T, RR, NM, , SKTF_COO_NA_PF, SKTF_COO_NA_SETUP,         \
                            SKTF_COO_NA_ALL, 0)
#if SKTF_COO_HAVE_AVX2_PATH
#define SKTF_COO_LLX(FN, T, RR, NM)                                                       \
    SKTF_COO_LL_SKELETON_AT(__attribute__((target("avx2,fma"))), FN, T, RR, NM, ,          \
                            SKTF_COO_NA_PF, SKTF_COO_NA_SETUP, SKTF_COO_NA_ALL, 0)
#else
#define SKTF_COO_LLX SKTF_COO_LLC
#endif
#define sktf_coo_llc_any_f64 sktf_coo_ll_any_f64
#define sktf_coo_llc_any_f32 sktf_coo_ll_any_f32
#define sktf_coo_llx_any_f64 sktf_coo_ll_any_f64
#define sktf_coo_llx_any_f32 sktf_coo_ll_any_f32

/* ------------------------------------------------------- hooks for any number of modes */
/* the Khatri-Rao row of the nonzero with coordinates sub (modes other than skip; a row of
   ones when there is none), multiplied left to right, into pi */
#define SKTF_COO_KRP_ROW(T, SUF)                                                          \
static inline void sktf_coo_krp_##SUF(T *pi, const int64_t *sub, T * const *fac,          \
                                      int nmodes, int skip, int64_t R)                    \
{                                                                                         \
    int first = 1;                                                                        \
    for (int k = 0; k < nmodes; ++k) {                                                    \
        if (k == skip) continue;                                                          \
        const T *a = fac[k] + sub[k] * R;                                                 \
        if (first) { for (int64_t r = 0; r < R; ++r) pi[r] = a[r]; first = 0; }          \
        else { for (int64_t r = 0; r < R; ++r) pi[r] *= a[r]; }                           \
    }                                                                                     \
    if (first) { for (int64_t r = 0; r < R; ++r) pi[r] = 1; }                             \
}
#define SKTF_COO_ANY_PF(T, RR, NMV, QS)                                                   \
    for (int k = 0; k < nmodes; ++k)                                                      \
        if (k != mode) SKTF_PF_ROW(fac[k] + (QS)[k] * R, R * sizeof(T))
#define SKTF_COO_ANY_PF_ALL(T, RR, NMV, QS)                                               \
    for (int k = 0; k < nmodes; ++k) SKTF_PF_ROW(fac[k] + (QS)[k] * R, R * sizeof(T))
#define SKTF_COO_ANY_SETUP_f64(T, RR, NMV, SUB) sktf_coo_krp_f64(pi_, (SUB), fac, nmodes, mode, R);
#define SKTF_COO_ANY_SETUP_f32(T, RR, NMV, SUB) sktf_coo_krp_f32(pi_, (SUB), fac, nmodes, mode, R);
#define SKTF_COO_ANY_SETUP_ALL_f64(T, RR, NMV, SUB) sktf_coo_krp_f64(pi_, (SUB), fac, nmodes, -1, R);
#define SKTF_COO_ANY_SETUP_ALL_f32(T, RR, NMV, SUB) sktf_coo_krp_f32(pi_, (SUB), fac, nmodes, -1, R);
#define SKTF_COO_ANY_KR(NMV, r) pi_[r]

/* ---------------------------------------------------------------- instances, dispatch */
/* KERNEL at ranks R (any), 8, 16, 32 for NM modes: functions PREFIX<NM>_<SUF>_<rank> */
#define SKTF_COO_AT_RANKS(KERNEL, PREFIX, T, SUF, NM)                                     \
KERNEL(PREFIX##NM##_##SUF##_rr, T, R, NM)                                                 \
KERNEL(PREFIX##NM##_##SUF##_8, T, 8, NM)                                                  \
KERNEL(PREFIX##NM##_##SUF##_16, T, 16, NM)                                                \
KERNEL(PREFIX##NM##_##SUF##_32, T, 32, NM)
/* SET PREFIX<NM>_<SUF>_<rank> ARGS for the rank R and NM modes, then return VAL (SET and
   VAL empty for void kernels) */
#define SKTF_COO_RANK_CALL(SET, VAL, PREFIX, NM, SUF, ARGS)                               \
    switch (R) {                                                                          \
    case 8: SET PREFIX##NM##_##SUF##_8 ARGS; return VAL;                                  \
    case 16: SET PREFIX##NM##_##SUF##_16 ARGS; return VAL;                                \
    case 32: SET PREFIX##NM##_##SUF##_32 ARGS; return VAL;                                \
    default: SET PREFIX##NM##_##SUF##_rr ARGS; return VAL;                                \
    }
/* ... for nmodes = 3, 4 or 5, else the kernel for any number of modes */
#define SKTF_COO_NWAY_CALL(SET, VAL, PREFIX, SUF, ARGS)                                   \
    switch (nmodes) {                                                                     \
    case 3: { SKTF_COO_RANK_CALL(SET, VAL, PREFIX, 3, SUF, ARGS) }                        \
    case 4: { SKTF_COO_RANK_CALL(SET, VAL, PREFIX, 4, SUF, ARGS) }                        \
    case 5: { SKTF_COO_RANK_CALL(SET, VAL, PREFIX, 5, SUF, ARGS) }                        \
    default: SET PREFIX##_any_##SUF ARGS; return VAL;                                     \
    }

/* KERNEL at every rank 1..SKTF_COO_SMALL_RANK for NM modes, without prefetching factor rows
   (factors in cache): functions PREFIX<NM>_<SUF>_c<rank>, and their table by rank */
#define SKTF_COO_SMALL_RANK 16
#define SKTF_COO_AT_SMALL_RANKS(KERNEL, PREFIX, T, SUF, NM, TAG)                          \
KERNEL(PREFIX##NM##_##SUF##_##TAG##1, T, 1, NM)                                           \
KERNEL(PREFIX##NM##_##SUF##_##TAG##2, T, 2, NM)                                           \
KERNEL(PREFIX##NM##_##SUF##_##TAG##3, T, 3, NM)                                           \
KERNEL(PREFIX##NM##_##SUF##_##TAG##4, T, 4, NM)                                           \
KERNEL(PREFIX##NM##_##SUF##_##TAG##5, T, 5, NM)                                           \
KERNEL(PREFIX##NM##_##SUF##_##TAG##6, T, 6, NM)                                           \
KERNEL(PREFIX##NM##_##SUF##_##TAG##7, T, 7, NM)                                           \
KERNEL(PREFIX##NM##_##SUF##_##TAG##8, T, 8, NM)                                           \
KERNEL(PREFIX##NM##_##SUF##_##TAG##9, T, 9, NM)                                           \
KERNEL(PREFIX##NM##_##SUF##_##TAG##10, T, 10, NM)                                         \
KERNEL(PREFIX##NM##_##SUF##_##TAG##11, T, 11, NM)                                         \
KERNEL(PREFIX##NM##_##SUF##_##TAG##12, T, 12, NM)                                         \
KERNEL(PREFIX##NM##_##SUF##_##TAG##13, T, 13, NM)                                         \
KERNEL(PREFIX##NM##_##SUF##_##TAG##14, T, 14, NM)                                         \
KERNEL(PREFIX##NM##_##SUF##_##TAG##15, T, 15, NM)                                         \
KERNEL(PREFIX##NM##_##SUF##_##TAG##16, T, 16, NM)
#define SKTF_COO_SMALL_TABLE(PREFIX, SUF, NM, TAG)                                        \
    { PREFIX##NM##_##SUF##_##TAG##1, PREFIX##NM##_##SUF##_##TAG##2,                       \
      PREFIX##NM##_##SUF##_##TAG##3, PREFIX##NM##_##SUF##_##TAG##4,                       \
      PREFIX##NM##_##SUF##_##TAG##5, PREFIX##NM##_##SUF##_##TAG##6,                       \
      PREFIX##NM##_##SUF##_##TAG##7, PREFIX##NM##_##SUF##_##TAG##8,                       \
      PREFIX##NM##_##SUF##_##TAG##9, PREFIX##NM##_##SUF##_##TAG##10,                      \
      PREFIX##NM##_##SUF##_##TAG##11, PREFIX##NM##_##SUF##_##TAG##12,                     \
      PREFIX##NM##_##SUF##_##TAG##13, PREFIX##NM##_##SUF##_##TAG##14,                     \
      PREFIX##NM##_##SUF##_##TAG##15, PREFIX##NM##_##SUF##_##TAG##16 }

/* the entry points (any number of modes, any rank); scratch: 2 R entries per thread.
   cached: nonzero when the factor matrices stay in cache (the caller decides): then
   ranks up to SKTF_COO_SMALL_RANK of 3- to 5-way tensors run a kernel of their own rank
   (the rank loops unrolled) that prefetches no factor rows; 2 (sktf_coo_simd_level) takes
   its AVX2 and FMA instance (rounding differs from the other by the fused multiply-adds;
   one process always takes the same).  The arithmetic is the same
   either way; results do not depend on the thread count.  See doc/guide/tuning.rst,
   "Small ranks on tiny tensors". */
#define SKTF_COO_FAMILY(T, SUF)                                                           \
SKTF_COO_AT_RANKS(SKTF_COO_PARTN, sktf_coo_part, T, SUF, 3)                               \
SKTF_COO_AT_RANKS(SKTF_COO_PARTN, sktf_coo_part, T, SUF, 4)                               \
SKTF_COO_AT_RANKS(SKTF_COO_PARTN, sktf_coo_part, T, SUF, 5)                               \
SKTF_COO_AT_RANKS(SKTF_COO_LLN, sktf_coo_ll, T, SUF, 3)                                   \
SKTF_COO_AT_RANKS(SKTF_COO_LLN, sktf_coo_ll, T, SUF, 4)                                   \
SKTF_COO_AT_RANKS(SKTF_COO_LLN, sktf_coo_ll, T, SUF, 5)                                   \
SKTF_COO_AT_RANKS(SKTF_COO_LLC, sktf_coo_llc, T, SUF, 3)                                  \
SKTF_COO_AT_RANKS(SKTF_COO_LLC, sktf_coo_llc, T, SUF, 4)                                  \
SKTF_COO_AT_RANKS(SKTF_COO_LLC, sktf_coo_llc, T, SUF, 5)                                  \
SKTF_COO_AT_RANKS(SKTF_COO_LLX, sktf_coo_llx, T, SUF, 3)                                  \
SKTF_COO_AT_RANKS(SKTF_COO_LLX, sktf_coo_llx, T, SUF, 4)                                  \
SKTF_COO_AT_RANKS(SKTF_COO_LLX, sktf_coo_llx, T, SUF, 5)                                  \
SKTF_COO_KRP_ROW(T, SUF)                                                                  \
SKTF_COO_PART_SKELETON(sktf_coo_part_any_##SUF, T, R, nmodes, T *pi_ = scratch + R;,      \
                       SKTF_COO_ANY_PF, SKTF_COO_ANY_SETUP_##SUF, SKTF_COO_ANY_KR, 1)     \
SKTF_COO_LL_SKELETON(sktf_coo_ll_any_##SUF, T, R, nmodes, T *pi_ = scratch;,              \
                     SKTF_COO_ANY_PF_ALL, SKTF_COO_ANY_SETUP_ALL_##SUF, SKTF_COO_ANY_KR)  \
SKTF_COO_AT_SMALL_RANKS(SKTF_COO_PARTC, sktf_coo_part, T, SUF, 3, c)                     \
SKTF_COO_AT_SMALL_RANKS(SKTF_COO_PARTC, sktf_coo_part, T, SUF, 4, c)                     \
SKTF_COO_AT_SMALL_RANKS(SKTF_COO_PARTC, sktf_coo_part, T, SUF, 5, c)                     \
SKTF_COO_AT_SMALL_RANKS(SKTF_COO_PARTX, sktf_coo_part, T, SUF, 3, x)                     \
SKTF_COO_AT_SMALL_RANKS(SKTF_COO_PARTX, sktf_coo_part, T, SUF, 4, x)                     \
SKTF_COO_AT_SMALL_RANKS(SKTF_COO_PARTX, sktf_coo_part, T, SUF, 5, x)                     \
typedef void (*sktf_coo_part_fn_##SUF)(const int64_t *, const T *, const int64_t *,       \
               int64_t, int64_t, T * const *, int, int, int64_t, const T *, T, T *, T *,   \
               int64_t *, int64_t, T *);                                                  \
static void sktf_coo_partn_##SUF(const int64_t *subs, const T *vals, const int64_t *perm, \
               int64_t s, int64_t e, T * const *fac, int nmodes, int mode, int64_t R,     \
               const T *B, T eps, T *out, T *bnd, int64_t *bnd_row, int64_t p, T *scratch, \
               int cached)                                                                \
{                                                                                         \
    static const sktf_coo_part_fn_##SUF small[2][3][SKTF_COO_SMALL_RANK] = {              \
        { SKTF_COO_SMALL_TABLE(sktf_coo_part, SUF, 3, c),                                 \
          SKTF_COO_SMALL_TABLE(sktf_coo_part, SUF, 4, c),                                 \
          SKTF_COO_SMALL_TABLE(sktf_coo_part, SUF, 5, c) },                               \
        { SKTF_COO_SMALL_TABLE(sktf_coo_part, SUF, 3, x),                                 \
          SKTF_COO_SMALL_TABLE(sktf_coo_part, SUF, 4, x),                                 \
          SKTF_COO_SMALL_TABLE(sktf_coo_part, SUF, 5, x) } };                             \
    if (cached && R >= 1 && R <= SKTF_COO_SMALL_RANK && nmodes >= 3 && nmodes <= 5) {     \
        small[cached == 2][nmodes - 3][R - 1](subs, vals, perm, s, e, fac, nmodes, mode,  \
                                              R, B, eps, out, bnd, bnd_row, p, scratch);  \
        return;                                                                           \
    }                                                                                     \
    SKTF_COO_NWAY_CALL(, , sktf_coo_part, SUF, (subs, vals, perm, s, e, fac, nmodes,      \
                       mode, R, B, eps, out, bnd, bnd_row, p, scratch))                   \
}                                                                                         \
static double sktf_coo_lln_##SUF(const int64_t *subs, const T *vals, int64_t s,           \
               int64_t e, T * const *fac, int nmodes, const T *weights, int64_t R,        \
               double eps, T *scratch, int cached)                                        \
{                                                                                         \
    double res_;                                                                          \
    if (cached == 2) {                                                                    \
        SKTF_COO_NWAY_CALL(res_ =, res_, sktf_coo_llx, SUF, (subs, vals, s, e, fac,       \
                           nmodes, weights, R, eps, scratch))                             \
    }                                                                                     \
    if (cached) {                                                                         \
        SKTF_COO_NWAY_CALL(res_ =, res_, sktf_coo_llc, SUF, (subs, vals, s, e, fac,       \
                           nmodes, weights, R, eps, scratch))                             \
    }                                                                                     \
    SKTF_COO_NWAY_CALL(res_ =, res_, sktf_coo_ll, SUF, (subs, vals, s, e, fac, nmodes,    \
                       weights, R, eps, scratch))                                         \
}

/* Bytes of a core's level-2 cache (sysconf, where the C library tells it; else 256 KiB). */
static int64_t sktf_cache_bytes(void)
{
    int64_t l2 = 0;
#ifdef _SC_LEVEL2_CACHE_SIZE
    l2 = (int64_t) sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return l2 > 0 ? l2 : 256 * 1024;
}

SKTF_COO_FAMILY(double, f64)
SKTF_COO_FAMILY(float, f32)

#endif /* SKTF_COO_H */
