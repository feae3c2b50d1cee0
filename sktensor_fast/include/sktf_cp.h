/* sktensor_fast: the per-nonzero arithmetic of the sparse CP kernels, written once for every
 * device.
 *
 * The CPU kernels over COO (sktf_coo.h) and ALTO (sktf_alto.h), the CP-APR row solvers
 * (sktf_apr_row.h, on the CPU and in cpapr_rows.cl) and the OpenCL kernels (cp.cl, dense.cl)
 * apply these formulas to every nonzero.  They are type-generic macros: the CPU instantiates
 * them for float and double, the OpenCL kernels for VAL_T and its vector types, so the same
 * expression (operands in the same order) is compiled everywhere.
 *
 *   SKTF_CLAMP_BELOW(v, eps)   max(v, eps) as a comparison (v < eps ? eps : v): a model
 *                              value kept away from zero
 *   SKTF_PHI_WEIGHT(x, v, eps) the weight x / max(v, eps) of a nonzero with value x and
 *                              model value v = <B[row], pi> in CP-APR's Phi (pi: its
 *                              Khatri-Rao row), and of the row solvers' partial derivatives
 *   SKTF_DATA_TERM(x, m, eps)  the nonzero's term x log(max(m, eps)) of the Poisson data term
 *                              (callers skip x = 0)
 *
 * The Khatri-Rao row itself is the product of the other modes' factor rows taken left to right
 * (mode 0 first); the CPU forms it entry by entry in registers, an OpenCL work-item a vector of
 * columns at a time (SKTF_PROD_* of sktf_macros.h and the loops of cp.cl keep that order).
 */
#ifndef SKTF_CP_H
#define SKTF_CP_H

#define SKTF_CLAMP_BELOW(v, eps) ((v) < (eps) ? (eps) : (v))
#define SKTF_PHI_WEIGHT(x, v, eps) ((x) / SKTF_CLAMP_BELOW(v, eps))
#define SKTF_DATA_TERM(x, m, eps) ((x) * log(SKTF_CLAMP_BELOW(m, eps)))

#endif /* SKTF_CP_H */
