/* sktensor_fast: the CPU side of the CP-APR row solvers (backends/cpu/_cpapr.pyx).
 *
 * Defines where a row's data and scratch live on the CPU, then includes the solvers
 * (sktf_apr_row.h): each thread solves one row at a time with its own contiguous scratch; the
 * Khatri-Rao rows of the row's nonzeros are cached (pic) when they fit, else formed into tmp
 * on every use.  The row's values are copied into x (contiguous).
 */
#ifndef SKTF_APR_CPU_H
#define SKTF_APR_CPU_H

#include <stddef.h>
#include "sktf_platform.h"

typedef struct {
    int64_t R;              /* the rank */
    int64_t p;              /* nonzeros in this row */
    int nmodes;
    int mode;
    const int64_t *subs;    /* nnz x nmodes */
    const int64_t *idx;     /* perm + start (NULL: identity, nonzero = start + t) */
    int64_t start;
    double **fac;
    const double *x;        /* the row's values (length p) */
    double *pic;            /* cached Khatri-Rao rows (p x R) or NULL */
    double *tmp;            /* R scratch when not cached */
} sktf_apr_ctx;

/* the position of the row's nonzero t in the tensor */
static inline int64_t sktf_apr_nz(const sktf_apr_ctx *c, int64_t t)
{
    return c->idx != NULL ? c->idx[t] : c->start + t;
}

/* Khatri-Rao row of nonzero nz (the product of the other modes' factor rows) into out */
static inline void sktf_apr_krp(const sktf_apr_ctx *c, int64_t nz, double *out)
{
    const int64_t R = c->R;
    const int64_t *sub = c->subs + nz * c->nmodes;
    int first = 1;
    for (int k = 0; k < c->nmodes; ++k) {
        if (k == c->mode) continue;
        const double *a = c->fac[k] + sub[k] * R;
        if (first) {
            for (int64_t r = 0; r < R; ++r) out[r] = a[r];
            first = 0;
        } else {
            for (int64_t r = 0; r < R; ++r) out[r] = out[r] * a[r];
        }
    }
    if (first) {
        for (int64_t r = 0; r < R; ++r) out[r] = 1.0;
    }
}

/* the hooks of sktf_apr_row.h */
static inline const double *sktf_apr_pi(const sktf_apr_ctx *c, int64_t t)
{
    if (c->pic != NULL) return c->pic + t * c->R;
    sktf_apr_krp(c, sktf_apr_nz(c, t), c->tmp);
    return c->tmp;
}

#define SKTF_APR_WS
#define SKTF_APR_IDX_T int64_t
#define SKTF_APR_INT int64_t
#define SKTF_APR_E(v, r) (v)[r]
#define SKTF_APR_X(c, t) ((c)->x[t])
#define SKTF_APR_UPS(c, w, t) ((w)->ups[t])
#define sktf_apr_mdotpi(c, m, t) sktf_apr_dot((c), (m), sktf_apr_pi((c), (t)))

#include "sktf_apr_row.h"

#endif /* SKTF_APR_CPU_H */
