/* sktensor_fast: GCP's stochastic optimiser steps on one entry, written once for the CPU
 * kernels (sktf_gcp.h, whose loops over chunks of entries the compiler vectorises) and the
 * OpenCL kernels (gcp.cl, one work-item per entry).
 *
 * Each returns the entry's new value, clipped below at `lower` (the loss's lower bound), and
 * updates its optimiser state through the pointers.  Adam's bias corrections are folded into
 * `a` and `e` by the caller once per step: a = lr sqrt(1 - beta2^t) / (1 - beta1^t),
 * e = eps sqrt(1 - beta2^t).
 */
#ifndef SKTF_OPTIM_H
#define SKTF_OPTIM_H

#include "sktf_platform.h"

SKTF_INLINE SKTF_REAL sktf_clip_lower(const SKTF_REAL u, const SKTF_REAL lower)
{
    return u < lower ? lower : u;
}

/* Adam: m and v, the first and second moments of the gradient entry g */
SKTF_INLINE SKTF_REAL sktf_adam_entry(const SKTF_REAL u, const SKTF_REAL g, SKTF_REAL *m,
                                      SKTF_REAL *v, const SKTF_REAL beta1,
                                      const SKTF_REAL beta2, const SKTF_REAL a,
                                      const SKTF_REAL e, const SKTF_REAL lower)
{
    const SKTF_REAL mi = beta1 * *m + ((SKTF_REAL) 1 - beta1) * g;
    const SKTF_REAL vi = beta2 * *v + ((SKTF_REAL) 1 - beta2) * g * g;
    *m = mi;
    *v = vi;
    return sktf_clip_lower(u - a * mi / (sqrt(vi) + e), lower);
}

/* AdaGrad: s, the sum of the squared gradient entries */
SKTF_INLINE SKTF_REAL sktf_adagrad_entry(const SKTF_REAL u, const SKTF_REAL g, SKTF_REAL *s,
                                         const SKTF_REAL lr, const SKTF_REAL eps,
                                         const SKTF_REAL lower)
{
    const SKTF_REAL si = *s + g * g;
    *s = si;
    return sktf_clip_lower(u - lr * g / (sqrt(si) + eps), lower);
}

/* plain stochastic gradient descent */
SKTF_INLINE SKTF_REAL sktf_sgd_entry(const SKTF_REAL u, const SKTF_REAL g, const SKTF_REAL lr,
                                     const SKTF_REAL lower)
{
    return sktf_clip_lower(u - lr * g, lower);
}

#endif /* SKTF_OPTIM_H */
