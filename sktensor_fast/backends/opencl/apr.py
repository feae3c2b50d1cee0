"""``backend.apr`` of the OpenCL backend: CP-APR's element-wise steps and row solvers."""
import numpy as np

from ..apr_kernels import AprKernels
from . import cpapr_rows

__all__ = ["OpenCLAprKernels"]


class OpenCLAprKernels(AprKernels):
    """``backend.apr`` of the OpenCL backend: element-wise kernels of dense.cl and the row
    solvers of cpapr_rows.py (arguments checked by AprKernels)."""

    def _shift_inadmissible(self, A, Phi, kappa_tol, kappa):
        be = self.backend
        n = A.size
        if n == 0:
            return 0
        count = int(round(be._vec_reduce(2, A, Phi, kappa_tol, n)))
        if count:
            be.launch(be.dense_kernel(A.dtype, "apr_shift"), (n,), np.int64(n), A.data, Phi.data,
                      A.dtype.type(kappa_tol), A.dtype.type(kappa))
        return count

    def _kkt_violation(self, B, Phi):
        if B.size == 0:
            return 0.0
        return self.backend._vec_reduce(1, B, Phi, 0.0, B.size)

    def _multiply_(self, B, Phi):
        be = self.backend
        if B.size:
            be.launch(be.dense_kernel(B.dtype, "multiply_inplace"), (B.size,), np.int64(B.size),
                      B.data, Phi.data)
        return B

    def _mu_rows_(self, B, Phi, tol):
        return cpapr_rows.mu_rows(self.backend, B, Phi, tol)

    def _row_solve(self, T, factors, mode, B, method, params):
        return cpapr_rows.row_solve(self.backend, T, factors, mode, B, method, params)
