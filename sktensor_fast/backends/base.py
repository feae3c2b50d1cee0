"""The kernel interface: the few primitives every algorithm is written against.

An algorithm (CP-ALS, CP-APR, GCP) never asks which device it runs on.  It receives a
:class:`Backend`, asks it to ``prepare`` the tensor once (upload it, build the storage format),
keeps its factor matrices as backend arrays, and calls the primitives below.  Only R x R
matrices, length-R vectors and scalars come back to the host as NumPy objects.

Backend arrays are whatever the backend uses (NumPy arrays on the CPU, ``pyopencl.array.Array``
on an OpenCL device).  Factor matrices are C-contiguous (I_n x R).
"""
import contextlib
from abc import ABC, abstractmethod

import numpy as np

__all__ = ["Backend"]


class Backend(ABC):
    """Abstract kernel backend."""

    #: short name used in ``show_config`` and error messages
    name = "abstract"

    # ------------------------------------------------------------------ data placement
    @abstractmethod
    def prepare(self, X, format="auto"):
        """Lay out a validated :class:`SparseTensor` for the kernels (once per fit)."""

    @abstractmethod
    def asarray(self, a, dtype=None):
        """Host array -> backend array (a copy when it must cross to a device)."""

    @abstractmethod
    def to_numpy(self, a):
        """Backend array -> NumPy array on the host."""

    @abstractmethod
    def zeros(self, shape, dtype):
        """A zero-filled backend array."""

    def copy(self, a):
        return a.copy()

    def compute_scope(self):
        """Context manager entered around a whole fit, ``transform`` or ``score`` (settings
        that hold for the computation, e.g. the CPU backend's single-threaded BLAS)."""
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ sparse kernels
    @abstractmethod
    def mttkrp(self, T, factors, mode, out=None):
        """Matricised tensor times Khatri-Rao product for ``mode``: (I_mode x R)."""

    @abstractmethod
    def phi(self, T, factors, mode, B, eps, out=None):
        """CP-APR's Φ = (X_(n) ⊘ max(B Π, eps)) Πᵀ, computed without storing Π."""

    @abstractmethod
    def model_values(self, T, weights, factors):
        """Values of the Kruskal model at the nonzeros of ``T`` (length nnz, backend array)."""

    # ------------------------------------------------------------------ small dense steps
    @abstractmethod
    def gram(self, A):
        """AᵀA as a NumPy (R x R) array."""

    @abstractmethod
    def matmul_small(self, A, M):
        """A @ M for a backend (I x R) A and a host (R x R) M; returns a backend array."""

    @abstractmethod
    def column_norms(self, A, ord=2):
        """Per-column norms (``ord`` 1, 2 or ``inf``) as a NumPy vector."""

    @abstractmethod
    def scale_columns(self, A, s):
        """A[:, r] *= s[r] in place (``s`` a host vector); returns A."""

    @abstractmethod
    def inner(self, A, B):
        """sum(A * B) over all entries, per column: a NumPy vector of length R."""

    @staticmethod
    def check_factors(T, factors, mode=None, B=None, out=None, weights=None):
        """Shapes of the kernels' dense arguments, checked before any compiled code runs.

        Every factor k must be (I_k x R) with one R; ``B`` and ``out`` (I_mode x R); ``weights``
        of length R.  Returns R.  Raises ValueError naming the argument otherwise.
        """
        if len(factors) != T.ndim:
            raise ValueError(f"{len(factors)} factor matrices given for a tensor with {T.ndim} "
                             f"modes")
        shapes = [tuple(getattr(f, "shape", np.shape(f))) for f in factors]
        if any(len(s) != 2 for s in shapes):
            raise ValueError(f"factor matrices must be 2-D, got shapes {shapes}")
        R = shapes[0][1]
        for k, s in enumerate(shapes):
            if s[1] != R:
                raise ValueError(f"factor {k} has {s[1]} columns, factor 0 has {R}")
            if s[0] != T.shape[k] and k != mode:
                raise ValueError(f"factor {k} has {s[0]} rows but mode {k} of the tensor has "
                                 f"length {T.shape[k]}")
        if mode is not None and not 0 <= mode < T.ndim:
            raise ValueError(f"mode {mode} is out of range for a tensor with {T.ndim} modes")
        for name, a in (("B", B), ("out", out)):
            if a is not None and tuple(a.shape) != (T.shape[mode], R):
                raise ValueError(f"{name} has shape {tuple(a.shape)}, expected "
                                 f"({T.shape[mode]}, {R})")
        if weights is not None and np.shape(weights) != (R,):
            raise ValueError(f"weights have shape {np.shape(weights)}, expected ({R},)")
        return R

    def tensor_norm_sq(self, T):
        return T.norm_sq

    def model_zero_count(self, T, weights, factors):
        """How many nonzeros of ``T`` the Kruskal model gives a value <= 0 (an int)."""
        m = np.asarray(self.to_numpy(self.model_values(T, weights, factors)))
        return int(np.count_nonzero(m <= 0))

    def decide(self, flag):
        """A host decision that every participant of the fit must take alike (e.g. a time
        limit read from a clock): returned as it is on one device; the distributed backend
        takes process 0's."""
        return bool(flag)

    # --- CP-APR primitives ------------------------------------------------------------
    # Element-wise steps of CP-APR on (I x R) backend arrays, and the row subproblem solver of
    # its Newton variants.  Defaults raise, so a backend only claims CP-APR when it has them.
    def _apr_missing(self, what):
        raise NotImplementedError(f"the {self.name!r} backend does not implement the CP-APR "
                                  f"primitive {what}")

    def apr_shift_inadmissible(self, A, Phi, kappa_tol, kappa):
        """A[(Phi > 1) & (A < kappa_tol)] += kappa in place (the "inadmissible zeros" of
        CP-APR MU: entries stuck at zero although the gradient asks them to grow); returns the
        number of shifted entries."""
        self._apr_missing("apr_shift_inadmissible")

    def apr_kkt_violation(self, B, Phi):
        """max |min(B, 1 - Phi)| over all entries, as a float (0.0 for an empty B)."""
        self._apr_missing("apr_kkt_violation")

    def multiply_(self, B, Phi):
        """B *= Phi element-wise in place; returns B."""
        self._apr_missing("multiply_")

    def apr_mu_rows_(self, B, Phi, tol):
        """B[i] *= Phi[i] in place for the rows whose KKT violation max_r |min(B, 1 - Phi)|
        is at least ``tol``; returns how many rows were updated (row-wise MU steps, so that a
        row's result does not depend on the other rows).

        This default takes B and Phi through the host; backends should override it."""
        Bh = np.array(self.to_numpy(B))
        Ph = np.asarray(self.to_numpy(Phi))
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

    def poisson_data_term(self, T, weights, factors, eps=0.0):
        """Σ over the nonzeros of x log(max(m, eps)) as a float, ``m`` the values of the
        Kruskal model (``weights``, ``factors``) there; terms with x = 0 are 0.  Backends form
        m on the fly (no array of nnz model values)."""
        self._apr_missing("poisson_data_term")

    def apr_row_solve(self, T, factors, mode, B, method, params):
        """Solve CP-APR's row subproblems of ``mode`` in place in ``B``.

        ``factors[k]`` for k != mode are held fixed, ``B`` (I_mode x R) holds the starting
        point with the weights folded in.  ``method`` is ``"pdnr"`` (projected damped Newton)
        or ``"pqnr"`` (projected L-BFGS); ``params`` holds ``tol``, ``max_inner``,
        ``eps_div_zero``, ``eps_active``, ``mu0`` and ``lbfgs_mem``.  Returns a dict with
        ``kkt`` (largest KKT violation of a row at its first inner iteration), ``n_inner``
        (inner iterations summed over rows) and ``n_changed`` (rows that were not converged on
        entry).
        """
        self._apr_missing("apr_row_solve")

    # --- GCP primitives ----------------------------------------------------------------
    # Generalized CP (decomposition/gcp.py).  ``loss`` is a loss object of
    # decomposition/losses.py: built-in losses carry an integer ``code`` (and ``param``) for
    # the kernels, a user-defined loss has code < 0 and is evaluated on the host.  Defaults
    # raise, so a backend only claims GCP when it has them.
    def _gcp_missing(self, what):
        raise NotImplementedError(f"the {self.name!r} backend does not implement the GCP "
                                  f"primitive {what}")

    def gcp_setup(self, T, sampler, n_grad, n_loss, loss_seed, zero_subs=None):
        """Prepare stochastic GCP on the prepared tensor ``T`` (once per fit); returns a state.

        ``sampler`` is ``"stratified"``, ``"semi-stratified"`` or ``"uniform"``; ``n_grad`` is
        (samples of nonzeros, samples of other entries) per gradient step (uniform: their sum
        is drawn from all entries); ``n_loss`` the same for the fixed stratified sample of the
        loss estimate, drawn here from ``loss_seed``.  ``zero_subs`` (host int array) lists the
        observed zero entries when only some entries are observed (a mask); by default every
        entry outside the nonzeros of ``T`` is an observed zero.  The state exposes ``n_grad``,
        ``n_loss`` (counts actually used), ``n_entries`` (entries the loss sums over) and
        ``dtype`` (of the factor matrices the stochastic primitives work on).
        """
        self._gcp_missing("gcp_setup")

    def gcp_sampled_gradient(self, T, state, weights, factors, loss, seed, step, out=None,
                             active=None, with_loss=False):
        """Stochastic gradient of Σ f(x, m) w.r.t. every factor, from one fresh sample.

        The sample is a function of (``seed``, ``step``) only, so runs are reproducible and
        independent of the thread count.  Returns ``(grads, f)``: backend arrays shaped like
        ``factors`` (``out`` is reused when given; modes with ``active[k]`` false are left
        untouched) and the sampled loss estimate when ``with_loss`` (else None).
        """
        self._gcp_missing("gcp_sampled_gradient")

    def gcp_loss_estimate(self, T, state, weights, factors, loss):
        """Estimate of Σ f(x, m) over all (observed) entries from the state's fixed sample."""
        self._gcp_missing("gcp_loss_estimate")

    def gcp_full_loss_grad(self, T, weights, factors, loss, mask=None, modes=None,
                           need_grad=True):
        """Exact Σ f(x, m) over all entries (``mask``: boolean array, True = observed) and the
        exact gradient of the modes in ``modes`` (all by default), the MTTKRP of the dense
        derivative tensor.  Returns ``(float, grads)``; only for tensors small enough to be
        dense (the estimator checks the size first)."""
        self._gcp_missing("gcp_full_loss_grad")

    def gcp_sample_gradient(self, sample, weights, factors, loss, out=None, active=None,
                            with_loss=False):
        """As :meth:`gcp_sampled_gradient`, over an explicit sample instead of a drawn one.

        ``sample`` is ``(subs, x, w, corr)``: host arrays of coordinates (n x N, int64),
        values, weights and semi-stratified correction flags (int8), in the order in which
        the contributions are to be added.  The distributed backend uses it: each process
        holds the part of a draw whose data it owns."""
        self._gcp_missing("gcp_sample_gradient")

    def gcp_sample_loss(self, sample, weights, factors, loss):
        """Σ_j w_j (f(x_j, m_j) − corr_j f(0, m_j)) over an explicit ``sample`` (see
        :meth:`gcp_sample_gradient`)."""
        self._gcp_missing("gcp_sample_loss")

    def gcp_optimizer_state(self, solver, factors):
        """Zero moments of a stochastic solver (``adam``, ``adagrad``, ``sgd``): a dict of lists
        of backend arrays shaped like ``factors``."""
        self._gcp_missing("gcp_optimizer_state")

    def gcp_optimizer_step(self, solver, factors, grads, state, lr, t, lower, beta1, beta2,
                           epsilon, active=None):
        """One Adam / AdaGrad / SGD step in place on ``factors`` (and ``state``), at step ``t``
        (from 1, for Adam's bias correction), clipping every entry to ``lower``."""
        self._gcp_missing("gcp_optimizer_step")

    def gcp_steps(self, T, state, weights, factors, loss, seed, first_draw, n_steps, solver,
                  opt, lr, t_first, lower, beta1, beta2, epsilon, active=None, out=None,
                  deadline=None, clock=None):
        """``n_steps`` steps of a stochastic solver: for ``s = 0, 1, …`` the gradient of draw
        ``first_draw + s`` (:meth:`gcp_sampled_gradient`), then optimiser step ``t_first + s``
        (:meth:`gcp_optimizer_step`).  With ``deadline``, stops after the first step at which
        ``clock()`` exceeds it (a :meth:`decide`, so that the processes of a distributed fit
        stop together).  Returns ``(grads, steps_done, timed_out)``.  This default
        calls the two primitives step by step; a backend may run the steps in one call (the
        same results)."""
        for s in range(n_steps):
            out, _ = self.gcp_sampled_gradient(T, state, weights, factors, loss, seed,
                                               first_draw + s, out=out, active=active)
            self.gcp_optimizer_step(solver, factors, out, opt, lr, t_first + s, lower, beta1,
                                    beta2, epsilon, active)
            if deadline is not None and self.decide(clock() > deadline):
                return out, s + 1, True
        return out, n_steps, False

    def info(self):
        """A dict describing this backend for ``show_config``."""
        return {"name": self.name}
