"""CP-APR's primitives on one backend, ``backend.apr``: the interface :class:`AprKernels`.

The element-wise steps of the multiplicative updates (shifting inadmissible zeros, the KKT
violation, B *= Φ, row-wise updates) and the row subproblem solvers of the Newton variants.
The public methods check their arguments (:mod:`.checks`) and call the backend's
``_``-prefixed implementation.
"""
import numpy as np

from .checks import check_real, check_same_shape

__all__ = ["AprKernels", "APR_METHODS"]

#: the row solvers of CP-APR's Newton variants
APR_METHODS = ("pdnr", "pqnr")


def _row_params(params):
    """CP-APR's row-solver parameters, checked, with the defaults of mu0 and lbfgs_mem."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    missing = [k for k in ("tol", "max_inner", "eps_div_zero", "eps_active") if k not in params]
    if missing:
        raise ValueError(f"CP-APR row solver parameters lack {', '.join(missing)}")
    out = {}
    for key, default, lo, strict in (("tol", None, None, False),
                                     ("eps_div_zero", None, 0.0, True),
                                     ("eps_active", None, 0.0, False),
                                     ("mu0", 1e-5, 0.0, True)):
        out[key] = check_real(params.get(key, default), f"CP-APR row solver parameter {key}", lo,
                         strict)
    for key, default, lo in (("max_inner", None, 0), ("lbfgs_mem", 3, 1)):
        v = params.get(key, default)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"CP-APR row solver parameter {key} must be an integer, got {v!r}")
        v = int(v)
        if not lo <= v <= 2 ** 31 - 1:
            raise ValueError(f"CP-APR row solver parameter {key} must be in "
                             f"[{lo}, {2 ** 31 - 1}], got {v}")
        out[key] = v
    return out


class AprKernels:
    """The element-wise steps of CP-APR on (I x R) backend arrays and the row subproblem
    solver of its Newton variants, on one backend: ``backend.apr``.

    The public methods check their arguments here, once for every backend, and call the
    backend's ``_``-prefixed implementation.  This base class implements only ``mu_rows_``
    (through the host); the others raise NotImplementedError.
    """

    def __init__(self, backend):
        self.backend = backend

    def _missing(self, what):
        raise NotImplementedError(f"the {self.backend.name!r} backend does not implement the "
                                  f"CP-APR primitive {what}")

    # ------------------------------------------------------------------ public, checked
    def shift_inadmissible(self, A, Phi, kappa_tol, kappa):
        """A[(Phi > 1) & (A < kappa_tol)] += kappa in place (the "inadmissible zeros" of
        CP-APR MU: entries stuck at zero although the gradient asks them to grow); returns the
        number of shifted entries."""
        check_same_shape(A, Phi)
        return self._shift_inadmissible(A, Phi, check_real(kappa_tol, "kappa_tol"),
                                        check_real(kappa, "kappa"))

    def kkt_violation(self, B, Phi):
        """max |min(B, 1 - Phi)| over all entries, as a float (0.0 for an empty B)."""
        check_same_shape(B, Phi, "B")
        return self._kkt_violation(B, Phi)

    def multiply_(self, B, Phi):
        """B *= Phi element-wise in place; returns B."""
        check_same_shape(B, Phi, "B")
        return self._multiply_(B, Phi)

    def mu_step_(self, B, Phi, tol):
        """One inner step of CP-APR MU: ``kkt = max |min(B, 1 - Phi)|`` (as
        :meth:`kkt_violation`), then ``B *= Phi`` in place unless ``kkt < tol``; returns
        ``kkt``.  The same numbers as the two calls, in one call (backends may fuse them)."""
        check_same_shape(B, Phi, "B")
        return self._mu_step_(B, Phi, check_real(tol, "tol"))

    def mu_rows_(self, B, Phi, tol):
        """B[i] *= Phi[i] in place for the rows whose KKT violation max_r |min(B, 1 - Phi)|
        is at least ``tol``; returns how many rows were updated (row-wise MU steps, so that a
        row's result does not depend on the other rows)."""
        check_same_shape(B, Phi, "B")
        if len(B.shape) != 2:
            raise ValueError(f"B must be 2-D, got shape {tuple(B.shape)}")
        return self._mu_rows_(B, Phi, check_real(tol, "tol"))

    def row_solve(self, T, factors, mode, B, method, params):
        """Solve CP-APR's row subproblems of ``mode`` in place in ``B``.

        ``factors[k]`` for k != mode are held fixed, ``B`` (I_mode x R) holds the starting
        point with the weights folded in.  ``method`` is ``"pdnr"`` (projected damped Newton)
        or ``"pqnr"`` (projected L-BFGS); ``params`` holds ``tol``, ``max_inner``,
        ``eps_div_zero``, ``eps_active`` and optionally ``mu0`` (1e-5) and ``lbfgs_mem`` (3).
        Returns a dict with ``kkt`` (largest KKT violation of a row at its first inner
        iteration), ``n_inner`` (inner iterations summed over rows) and ``n_changed`` (rows
        that were not converged on entry).
        """
        if method not in APR_METHODS:
            raise ValueError(f"unknown CP-APR row solver {method!r}; use 'pdnr' or 'pqnr'")
        if isinstance(mode, (bool, np.bool_)) or not isinstance(mode, (int, np.integer)):
            raise TypeError(f"mode must be an integer, got {mode!r}")
        if not (hasattr(B, "shape") and hasattr(B, "dtype")):
            raise TypeError(f"B must be a NumPy or device array (updated in place), got "
                            f"{type(B).__name__}")
        factors = list(factors)
        self.backend.check_factors(T, factors, int(mode), B=B)
        return self._row_solve(T, factors, int(mode), B, method, _row_params(params))

    # ------------------------------------------------------------------ implementations
    def _shift_inadmissible(self, A, Phi, kappa_tol, kappa):
        self._missing("shift_inadmissible")

    def _kkt_violation(self, B, Phi):
        self._missing("kkt_violation")

    def _multiply_(self, B, Phi):
        self._missing("multiply_")

    def _mu_step_(self, B, Phi, tol):
        kkt = self._kkt_violation(B, Phi)
        if not kkt < tol:
            self._multiply_(B, Phi)
        return kkt

    def _mu_rows_(self, B, Phi, tol):
        """Through the host: backends should override it."""
        be = self.backend
        Bh = np.array(be.to_numpy(B))
        Ph = np.asarray(be.to_numpy(Phi))
        if Bh.size == 0:
            return 0
        rows = np.flatnonzero(np.max(np.abs(np.minimum(Bh, 1 - Ph)), axis=1) >= tol)
        if rows.size:
            Bh[rows] *= Ph[rows]
            if hasattr(B, "set"):        # device arrays (pyopencl.array.Array)
                B.set(np.ascontiguousarray(Bh))
            else:
                B[...] = Bh
        return int(rows.size)

    def _row_solve(self, T, factors, mode, B, method, params):
        self._missing("row_solve")
