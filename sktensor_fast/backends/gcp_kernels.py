"""GCP's primitives on one backend, ``backend.gcp``: the interface :class:`GcpKernels`.

Sampling, gradients and losses on samples and on the whole tensor, and the element-wise
steps of the stochastic optimisers.  The public methods check their arguments here and call
the backend's ``_``-prefixed implementation.
"""
import numpy as np

from .gcp_plan import SAMPLERS, UPDATE_RULES, check_loss

__all__ = ["GcpKernels"]


# ---------------------------------------------------------------------- GCP primitives
def _int(value, name, lo=0, hi=None):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or isinstance(value, np.bool_):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < lo or (hi is not None and value >= hi):
        rng = f"[{lo}, {hi})" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be in {rng}, got {value}")
    return value


def _float(value, name):
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if value != value:
        raise ValueError(f"{name} must not be NaN")
    return value


def _pair(value, name):
    try:
        vals = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a pair (nonzeros, others), got {value!r}") from None
    if len(vals) != 2:
        raise ValueError(f"{name} must be a pair (nonzeros, others), got {value!r}")
    return tuple(_int(v, name) for v in vals)


def _active(active, N):
    if active is None:
        return (True,) * N
    act = tuple(bool(a) for a in active)
    if len(act) != N:
        raise ValueError(f"active has {len(act)} entries for {N} modes")
    return act


def _check_zero_subs(zero_subs, shape):
    """``zero_subs`` as an int64 (n, N) array of coordinates inside ``shape``."""
    N = len(shape)
    z = np.asarray(zero_subs)
    if z.size == 0:
        return np.zeros((0, N), dtype=np.int64)
    if z.dtype.kind not in "iu":
        if z.dtype.kind == "f" and np.all(np.isfinite(z)) and np.all(z == np.round(z)):
            z = z.astype(np.int64)
        else:
            raise TypeError(f"zero_subs must hold integer coordinates, got dtype {z.dtype}")
    if z.ndim != 2 or z.shape[1] != N:
        raise ValueError(f"zero_subs must be an (n, {N}) array of coordinates, got shape "
                         f"{z.shape}")
    z = np.ascontiguousarray(z, dtype=np.int64)
    bad = (z < 0) | (z >= np.asarray(shape, dtype=np.int64)[None, :])
    if bad.any():
        row = int(np.argwhere(bad)[0, 0])
        raise ValueError(f"zero_subs row {row} {tuple(z[row])} is outside the tensor's shape "
                         f"{tuple(shape)}")
    return z


def _shape(a):
    shape = getattr(a, "shape", None)
    if type(shape) is tuple:
        return shape
    return tuple(shape) if shape is not None else np.shape(a)


def _matrices(arrays, name, N=None):
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"{name} must be a list of (I_k x R) matrices")
    if N is not None and len(arrays) != N:
        raise ValueError(f"{name} has {len(arrays)} arrays for {N} modes")
    shapes = [_shape(a) for a in arrays]
    if any(len(sh) != 2 for sh in shapes):
        raise ValueError(f"{name} must be 2-D matrices, got shapes {shapes}")
    return shapes


def _sample_factors(sample, weights, factors):
    """Checks of an explicit sample (subs, x, w, corr) against the factors; returns R."""
    shapes = _matrices(factors, "factors")
    R = shapes[0][1] if shapes else 0
    if any(sh[1] != R for sh in shapes):
        raise ValueError(f"the factors have different numbers of columns: {shapes}")
    if np.shape(weights) != (R,):
        raise ValueError(f"weights have shape {np.shape(weights)}, expected ({R},)")
    try:
        subs, x, w, corr = sample
    except (TypeError, ValueError):
        raise TypeError("sample must be a tuple (subs, x, w, corr)") from None
    n = np.shape(x)[0] if np.ndim(x) == 1 else -1
    if np.shape(subs) != (n, len(factors)) or np.shape(w) != (n,) or np.shape(corr) != (n,):
        raise ValueError(f"sample: subs must be (n, {len(factors)}) and x, w, corr of length "
                         f"n; got shapes {np.shape(subs)}, {np.shape(x)}, {np.shape(w)}, "
                         f"{np.shape(corr)}")
    if n:
        # the kernels index the factors' rows with the coordinates: check them first
        subs = np.asarray(subs)
        if subs.dtype.kind not in "iu":
            raise TypeError(f"sample: subs must hold integer coordinates, got dtype "
                            f"{subs.dtype}")
        rows = np.array([sh[0] for sh in shapes], dtype=np.int64)
        bad = (subs < 0) | (subs >= rows[None, :])
        if bad.any():
            j = int(np.argwhere(bad)[0, 0])
            raise ValueError(f"sample: coordinates {tuple(int(v) for v in subs[j])} of sample "
                             f"{j} are outside the factors' rows {tuple(rows.tolist())}")
    return R


def _check_out(out, shapes):
    """``out`` (the gradients' arrays, optional): one per factor, each of its factor's shape
    (the kernels write every row a sample names)."""
    if out is None:
        return
    if not isinstance(out, (list, tuple)) or len(out) != len(shapes):
        n = len(out) if isinstance(out, (list, tuple)) else out
        raise ValueError(f"out has {n} arrays for {len(shapes)} modes")
    for k, g in enumerate(out):
        if _shape(g) != shapes[k]:
            raise ValueError(f"out[{k}] has shape {_shape(g)}, the factor {shapes[k]}")


def _moments(rule, moments, shapes, active, name="moments"):
    """Checks of the moments of update ``rule`` against the factors' shapes (the active
    modes); returns them as a tuple of lists."""
    names = UPDATE_RULES[rule][0]
    if not isinstance(moments, (list, tuple)) or len(moments) != len(names):
        raise ValueError(f"{name} must hold the {len(names)} moment(s) of the {rule!r} update "
                         f"({', '.join(names) or 'none'}), one list of arrays per moment")
    N = len(shapes)
    for j, arrs in enumerate(moments):
        if not isinstance(arrs, (list, tuple)) or len(arrs) != N:
            raise ValueError(f"{name}: moment {names[j]!r} must hold {N} arrays, one per "
                             f"factor")
        for k in range(N):
            if active[k] and _shape(arrs[k]) != shapes[k]:
                raise ValueError(f"mode {k}: moment {names[j]!r} has shape "
                                 f"{_shape(arrs[k])}, the factor {shapes[k]}")
    return tuple(moments)


class GcpKernels:
    """The primitives of generalized CP (decomposition/gcp.py) on one backend:
    ``backend.gcp``.

    The public methods check their arguments here, once for every backend, and call the
    backend's ``_``-prefixed implementation with them checked (active modes as a tuple of
    bools, counts as ints, coordinates as int64).  ``loss`` is a loss object of
    decomposition/losses.py: built-in losses carry an integer ``code`` (and ``param``) for
    the kernels, a user-defined loss has code < 0 (or none) and is evaluated on the host.
    This base class implements none of them: a backend without GCP raises
    NotImplementedError.
    """

    def __init__(self, backend):
        self.backend = backend

    def _missing(self, what):
        raise NotImplementedError(f"the {self.backend.name!r} backend does not implement the "
                                  f"GCP primitive {what}")

    # ------------------------------------------------------------------ public, checked
    def setup(self, T, sampler, n_grad, n_loss, loss_seed, zero_subs=None):
        """Prepare stochastic GCP on the prepared tensor ``T`` (once per fit); returns a state.

        ``sampler`` is ``"stratified"``, ``"semi-stratified"`` or ``"uniform"``; ``n_grad`` is
        (samples of nonzeros, samples of other entries) per gradient step (uniform: their sum
        is drawn from all entries); ``n_loss`` the same for the fixed stratified sample of the
        loss estimate, drawn here from ``loss_seed``.  ``zero_subs`` (host int array) lists the
        observed zero entries when only some entries are observed (a mask); by default every
        entry outside the nonzeros of ``T`` is an observed zero.  The state is a
        :class:`~sktensor_fast.backends.gcp_plan.GcpState`: it exposes ``n_grad``, ``n_loss``
        (counts actually used), ``n_entries`` (entries the loss sums over) and ``dtype`` (of
        the factor matrices the stochastic primitives work on).
        """
        if sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {sampler!r}; use one of {sorted(SAMPLERS)}")
        n_grad = _pair(n_grad, "n_grad")
        n_loss = _pair(n_loss, "n_loss")
        loss_seed = _int(loss_seed, "loss_seed", 0, 2 ** 64)
        if zero_subs is not None:
            zero_subs = _check_zero_subs(zero_subs, T.shape)
        return self._setup(T, sampler, n_grad, n_loss, loss_seed, zero_subs)

    def sampled_gradient(self, T, state, weights, factors, loss, seed, step, out=None,
                         active=None, with_loss=False):
        """Stochastic gradient of Σ f(x, m) w.r.t. every factor, from one fresh sample.

        The sample is a function of (``seed``, ``step``) only, so runs are reproducible and
        independent of the thread count.  Returns ``(grads, f)``: backend arrays shaped like
        ``factors`` (``out`` is reused when given; modes with ``active[k]`` false are left
        untouched) and the sampled loss estimate when ``with_loss`` (else None).
        """
        shapes = _matrices(factors, "factors")
        self.backend.check_factors(T, factors, weights=weights)
        loss = check_loss(loss)
        seed = _int(seed, "seed", 0, 2 ** 64)
        step = _int(step, "step", 0, 2 ** 64 - 1)
        act = _active(active, T.ndim)
        _check_out(out, shapes)
        return self._sampled_gradient(T, state, weights, factors, loss, seed, step, out, act,
                                      bool(with_loss))

    def loss_estimate(self, T, state, weights, factors, loss):
        """Estimate of Σ f(x, m) over all (observed) entries from the state's fixed sample."""
        _matrices(factors, "factors")
        self.backend.check_factors(T, factors, weights=weights)
        return self._loss_estimate(T, state, weights, factors, check_loss(loss))

    def full_loss_grad(self, T, weights, factors, loss, mask=None, modes=None,
                       need_grad=True):
        """Exact Σ f(x, m) over all entries (``mask``: boolean array, True = observed) and the
        exact gradient of the modes in ``modes`` (all by default), the MTTKRP of the dense
        derivative tensor.  Returns ``(float, grads)``; only for tensors small enough to be
        dense (the estimator checks the size first)."""
        _matrices(factors, "factors")
        self.backend.check_factors(T, factors, weights=weights)
        loss = check_loss(loss, exact=True)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != tuple(T.shape):
                raise ValueError(f"mask has shape {mask.shape}, expected {tuple(T.shape)}")
            mask = mask.astype(bool)
        if modes is not None:
            modes = [_int(k, "mode", 0, T.ndim) for k in modes]
        return self._full_loss_grad(T, weights, factors, loss, mask, modes, bool(need_grad))

    def sample_gradient(self, sample, weights, factors, loss, out=None, active=None,
                        with_loss=False):
        """As :meth:`sampled_gradient`, over an explicit sample instead of a drawn one.

        ``sample`` is ``(subs, x, w, corr)``: host arrays of coordinates (n x N, int64),
        values, weights and semi-stratified correction flags (int8), in the order in which
        the contributions are to be added.  The distributed backend uses it: each process
        holds the part of a draw whose data it owns."""
        _sample_factors(sample, weights, factors)
        act = _active(active, len(factors))
        _check_out(out, _matrices(factors, "factors"))
        return self._sample_gradient(sample, weights, factors, check_loss(loss), out, act,
                                     bool(with_loss))

    def sample_loss(self, sample, weights, factors, loss):
        """Σ_j w_j (f(x_j, m_j) − corr_j f(0, m_j)) over an explicit ``sample`` (see
        :meth:`sample_gradient`)."""
        _sample_factors(sample, weights, factors)
        return self._sample_loss(sample, weights, factors, check_loss(loss))

    def optimizer_update(self, rule, factors, grads, moments, coefficients, lower,
                         active=None):
        """One step of a stochastic optimiser in place on ``factors`` and ``moments``, every
        factor entry clipped to ``lower`` (modes with ``active[k]`` false untouched).

        ``rule`` is a key of :data:`~sktensor_fast.backends.gcp_plan.UPDATE_RULES`; ``moments[j][k]`` is moment j of
        factor k (shaped like it), ``coefficients`` the scalars of this step:

        - ``"sgd"``, ``(lr,)``: ``U ← max(U − lr G, lower)``;
        - ``"adagrad"``, ``(lr, epsilon)``, moments ``(S,)``: ``S ← S + G²``,
          ``U ← max(U − lr G / (√S + epsilon), lower)``;
        - ``"adam"``, ``(beta1, beta2, step, guard)``, moments ``(M, V)``:
          ``M ← beta1 M + (1 − beta1) G``, ``V ← beta2 V + (1 − beta2) G²``,
          ``U ← max(U − step M / (√V + guard), lower)``.

        The optimiser objects (decomposition/optimizers.py) compute the coefficients of each
        step (Adam's bias corrections are folded into ``step`` and ``guard``)."""
        if not isinstance(rule, str) or rule not in UPDATE_RULES:
            raise ValueError(f"unknown update rule {rule!r}; use one of "
                             f"{', '.join(UPDATE_RULES)}")
        coef_names = UPDATE_RULES[rule][1]
        shapes = _matrices(factors, "factors")
        N = len(factors)
        if not isinstance(grads, (list, tuple)) or len(grads) != N:
            raise ValueError(f"{len(grads) if isinstance(grads, (list, tuple)) else grads!r} "
                             f"gradients for {N} factors")
        act = _active(active, N)
        moments = _moments(rule, moments, shapes, act)
        for k in range(N):
            if act[k] and _shape(grads[k]) != shapes[k]:
                raise ValueError(f"mode {k}: the gradient has shape {_shape(grads[k])}, the "
                                 f"factor {shapes[k]}")
        try:
            coefs = tuple(coefficients)
        except TypeError:
            coefs = None
        if coefs is None or len(coefs) != len(coef_names):
            raise ValueError(f"the {rule!r} update takes the coefficients "
                             f"({', '.join(coef_names)}), got {coefficients!r}")
        coefs = tuple(_float(c, name) for c, name in zip(coefs, coef_names))
        return self._optimizer_update(rule, factors, grads, moments, coefs,
                                      _float(lower, "lower"), act)

    def steps(self, T, state, weights, factors, loss, seed, first_draw, n_steps, optimizer,
              lower, active=None, out=None, deadline=None, clock=None):
        """``n_steps`` steps of a stochastic optimiser: for ``s = 0, 1, …`` the gradient of
        draw ``first_draw + s`` (:meth:`sampled_gradient`), then ``optimizer.step`` (its
        next step, through :meth:`optimizer_update`), every factor entry clipped to
        ``lower``.  ``optimizer`` is an optimiser object of decomposition/optimizers.py
        after its ``start``.  With ``deadline``, stops after the first step at which
        ``clock()`` exceeds it (a ``backend.decide``, so that the processes of a distributed
        fit stop together).  Returns ``(grads, steps_done, timed_out)``.  By default the
        steps run one by one; a backend may run them in one call (the same results, the
        optimiser's step counter advanced by the steps done)."""
        shapes = _matrices(factors, "factors")
        self.backend.check_factors(T, factors, weights=weights)
        loss = check_loss(loss)
        seed = _int(seed, "seed", 0, 2 ** 64)
        first_draw = _int(first_draw, "first_draw", 0, 2 ** 64 - 1)
        n_steps = _int(n_steps, "n_steps", 0)
        rule = getattr(optimizer, "rule", None)
        if not (isinstance(rule, str) and rule in UPDATE_RULES
                and callable(getattr(optimizer, "step", None))):
            raise TypeError(f"optimizer must be a stochastic optimiser of "
                            f"decomposition.optimizers (e.g. make_optimizer('adam')), got "
                            f"{type(optimizer).__name__}")
        act = _active(active, T.ndim)
        if getattr(optimizer, "moments", None) is None:
            raise ValueError("the optimiser has no moments: call optimizer.start(backend, "
                             "factors) first")
        _moments(rule, optimizer.moments, shapes, act, "the optimiser's moments")
        if out is not None:
            if len(out) != T.ndim:
                raise ValueError(f"out has {len(out)} arrays for {T.ndim} modes")
            for k, g in enumerate(out):
                if _shape(g) != shapes[k]:
                    raise ValueError(f"out[{k}] has shape {_shape(g)}, the factor {shapes[k]}")
        if deadline is not None and not callable(clock):
            raise TypeError("a deadline needs a clock (a callable returning the time)")
        return self._steps(T, state, weights, factors, loss, seed, first_draw, n_steps,
                           optimizer, _float(lower, "lower"), act, out, deadline, clock)

    # ------------------------------------------------------------------ implementations
    def _steps(self, T, state, weights, factors, loss, seed, first_draw, n_steps, optimizer,
               lower, active, out, deadline, clock):
        return self._stepwise(T, state, weights, factors, loss, seed, first_draw, n_steps,
                              optimizer, lower, active, out, deadline, clock)

    def _stepwise(self, T, state, weights, factors, loss, seed, first_draw, n_steps, optimizer,
                  lower, active, out, deadline, clock):
        """The steps one by one: the backend's gradient, then the optimiser's step."""
        for s in range(n_steps):
            out, _ = self._sampled_gradient(T, state, weights, factors, loss, seed,
                                            first_draw + s, out, active, False)
            optimizer.step(self.backend, factors, out, lower, active)
            if deadline is not None and self.backend.decide(clock() > deadline):
                return out, s + 1, True
        return out, n_steps, False

    def _setup(self, T, sampler, n_grad, n_loss, loss_seed, zero_subs):
        self._missing("setup")

    def _sampled_gradient(self, T, state, weights, factors, loss, seed, step, out, active,
                          with_loss):
        self._missing("sampled_gradient")

    def _loss_estimate(self, T, state, weights, factors, loss):
        self._missing("loss_estimate")

    def _full_loss_grad(self, T, weights, factors, loss, mask, modes, need_grad):
        self._missing("full_loss_grad")

    def _sample_gradient(self, sample, weights, factors, loss, out, active, with_loss):
        self._missing("sample_gradient")

    def _sample_loss(self, sample, weights, factors, loss):
        self._missing("sample_loss")

    def _optimizer_update(self, rule, factors, grads, moments, coefficients, lower, active):
        self._missing("optimizer_update")
