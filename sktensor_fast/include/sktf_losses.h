/* sktensor_fast: the element-wise losses of Generalized CP, f(x, m) and df/dm (x, m).
 *
 * The one definition of their formulas: the CPU kernels (backends/cpu/_gcp.pyx), the NumPy
 * interface of decomposition/losses.py (through _native/_numerics.pyx) and the OpenCL kernels
 * (backends/opencl/kernels/gcp.cl) all evaluate these functions.  In OpenCL SKTF_REAL is the
 * program's VAL_T, so float programs evaluate the same expressions in single precision.
 *
 * The codes are those of sktensor_fast/_loss_table.py (names, domains, parameters); the test
 * suite checks the constants below against that table.  p is the loss parameter (r of the
 * negative binomial, delta of Huber, beta of the beta divergence), ignored by the others.
 * An unknown code gives 0.
 */
#ifndef SKTF_LOSSES_H
#define SKTF_LOSSES_H

#include "sktf_platform.h"

#define SKTF_LOSS_GAUSSIAN 0
#define SKTF_LOSS_BERNOULLI_ODDS 1
#define SKTF_LOSS_BERNOULLI_LOGIT 2
#define SKTF_LOSS_POISSON 3
#define SKTF_LOSS_POISSON_LOG 4
#define SKTF_LOSS_RAYLEIGH 5
#define SKTF_LOSS_GAMMA 6
#define SKTF_LOSS_HUBER 7
#define SKTF_LOSS_NEGATIVE_BINOMIAL 8
#define SKTF_LOSS_BETA 9
#define SKTF_LOSS_ZT_POISSON 10
#define SKTF_N_LOSSES 11

/* guard inside logarithms and denominators */
#define SKTF_LOSS_EPS ((SKTF_REAL)1e-10)
#define SKTF_LOSS_PI ((SKTF_REAL)3.14159265358979323846)

/* f(x, m) */
SKTF_INLINE SKTF_REAL sktf_loss_value(const int code, const SKTF_REAL p, const SKTF_REAL x,
                                      const SKTF_REAL m)
{
    SKTF_REAL d, me;
    switch (code) {
    case SKTF_LOSS_GAUSSIAN:
        return (x - m) * (x - m);
    case SKTF_LOSS_BERNOULLI_ODDS:
        return log1p(m) - x * log(m + SKTF_LOSS_EPS);
    case SKTF_LOSS_BERNOULLI_LOGIT:
        /* log(1 + e^m) - x m without overflow */
        if (m > 0) return m + log1p(exp(-m)) - x * m;
        return log1p(exp(m)) - x * m;
    case SKTF_LOSS_POISSON:
        return m - x * log(m + SKTF_LOSS_EPS);
    case SKTF_LOSS_POISSON_LOG:
        return exp(m) - x * m;
    case SKTF_LOSS_RAYLEIGH:
        me = m + SKTF_LOSS_EPS;
        return (SKTF_REAL)2 * log(me) + (SKTF_LOSS_PI / (SKTF_REAL)4) * (x / me) * (x / me);
    case SKTF_LOSS_GAMMA:
        me = m + SKTF_LOSS_EPS;
        return x / me + log(me);
    case SKTF_LOSS_HUBER:
        d = fabs(x - m);
        if (d < p) return d * d;
        return (SKTF_REAL)2 * p * d - p * p;
    case SKTF_LOSS_NEGATIVE_BINOMIAL:
        return (p + x) * log1p(m) - x * log(m + SKTF_LOSS_EPS);
    case SKTF_LOSS_BETA:
        me = m + SKTF_LOSS_EPS;
        return pow(me, p) / p - x * pow(me, p - (SKTF_REAL)1) / (p - (SKTF_REAL)1);
    case SKTF_LOSS_ZT_POISSON:
        return m - x * log(m + SKTF_LOSS_EPS) + log(-expm1(-m) + SKTF_LOSS_EPS);
    }
    return 0;
}

/* df/dm (x, m) */
SKTF_INLINE SKTF_REAL sktf_loss_deriv(const int code, const SKTF_REAL p, const SKTF_REAL x,
                                      const SKTF_REAL m)
{
    SKTF_REAL d, me, e;
    switch (code) {
    case SKTF_LOSS_GAUSSIAN:
        return (SKTF_REAL)2 * (m - x);
    case SKTF_LOSS_BERNOULLI_ODDS:
        return (SKTF_REAL)1 / (m + (SKTF_REAL)1) - x / (m + SKTF_LOSS_EPS);
    case SKTF_LOSS_BERNOULLI_LOGIT:
        /* the logistic function e^m / (1 + e^m), stable for large |m| */
        e = exp(-fabs(m));
        if (m >= 0) return (SKTF_REAL)1 / ((SKTF_REAL)1 + e) - x;
        return e / ((SKTF_REAL)1 + e) - x;
    case SKTF_LOSS_POISSON:
        return (SKTF_REAL)1 - x / (m + SKTF_LOSS_EPS);
    case SKTF_LOSS_POISSON_LOG:
        return exp(m) - x;
    case SKTF_LOSS_RAYLEIGH:
        me = m + SKTF_LOSS_EPS;
        return (SKTF_REAL)2 / me - (SKTF_LOSS_PI / (SKTF_REAL)2) * x * x / (me * me * me);
    case SKTF_LOSS_GAMMA:
        me = m + SKTF_LOSS_EPS;
        return (SKTF_REAL)1 / me - x / (me * me);
    case SKTF_LOSS_HUBER:
        d = x - m;
        if (fabs(d) < p) return (SKTF_REAL)(-2) * d;
        if (d > 0) return (SKTF_REAL)(-2) * p;
        if (d < 0) return (SKTF_REAL)2 * p;
        return 0;
    case SKTF_LOSS_NEGATIVE_BINOMIAL:
        /* the exact derivative (r + x)/(1 + m) - x/(m + eps), as the Tensor Toolbox */
        return (p + x) / ((SKTF_REAL)1 + m) - x / (m + SKTF_LOSS_EPS);
    case SKTF_LOSS_BETA:
        me = m + SKTF_LOSS_EPS;
        return pow(me, p - (SKTF_REAL)1) - x * pow(me, p - (SKTF_REAL)2);
    case SKTF_LOSS_ZT_POISSON:
        return (SKTF_REAL)1 - x / (m + SKTF_LOSS_EPS) + (SKTF_REAL)1 / (expm1(m) + SKTF_LOSS_EPS);
    }
    return 0;
}

#endif /* SKTF_LOSSES_H */
