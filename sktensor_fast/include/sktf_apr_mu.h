/* sktensor_fast: one inner step of CP-APR MU on the CPU (backends/cpu/_cpapr.pyx mu_step):
 *
 *   kkt = max_i |min(B_i, 1 - Phi_i)|;   B *= Phi unless kkt < tol
 *
 * with NumPy's numbers (np.abs(np.minimum(B, 1 - Phi)).max() and B *= Phi, 1 - Phi in the
 * arrays' type): the maximum is exact in any order, so the first loop is a SIMD reduction.
 * It also sums B_i 0 + (1 - Phi_i) 0, which is NaN exactly when some B_i or Phi_i is NaN or
 * infinite; then a second, scalar pass takes np.minimum's and max's rules (a NaN operand
 * makes the minimum NaN, a NaN makes the maximum NaN). */
#ifndef SKTF_APR_MU_H
#define SKTF_APR_MU_H

#include <stdint.h>

#include "sktf_macros.h"

#ifdef _OPENMP
#define SKTF_MU_SIMD_MAX_SUM(k, z) SKTF_PRAGMA(omp simd reduction(max:k) reduction(+:z))
#else
#define SKTF_MU_SIMD_MAX_SUM(k, z)
#endif

#define SKTF_MU_STEP(T, SUF)                                                              \
static double sktf_mu_step_##SUF(T *restrict B, const T *restrict P, int64_t n, double tol) \
{                                                                                         \
    T k = 0, z = 0;                                                                       \
    SKTF_MU_SIMD_MAX_SUM(k, z)                                                            \
    for (int64_t i = 0; i < n; ++i) {                                                     \
        const T t = 1 - P[i];                                                             \
        const T m = B[i] < t ? B[i] : t;                                                  \
        const T a = m < 0 ? -m : m;                                                       \
        k = a > k ? a : k;                                                                \
        z += B[i] * 0 + t * 0;                                                            \
    }                                                                                     \
    if (z != z) {                                                                         \
        k = 0;                                                                            \
        for (int64_t i = 0; i < n; ++i) {                                                 \
            const T t = 1 - P[i];                                                         \
            const T m = (B[i] < t || B[i] != B[i]) ? B[i] : t;                            \
            const T a = m < 0 ? -m : m;                                                   \
            if (a > k || a != a) k = a;                                                   \
            if (k != k) break;                                                            \
        }                                                                                 \
    }                                                                                     \
    const double kd = (double) k;                                                         \
    if (!(kd < tol)) {                                                                    \
        SKTF_SIMD for (int64_t i = 0; i < n; ++i) B[i] = B[i] * P[i];                     \
    }                                                                                     \
    return kd;                                                                            \
}

SKTF_MU_STEP(double, f64)
SKTF_MU_STEP(float, f32)

#endif /* SKTF_APR_MU_H */
