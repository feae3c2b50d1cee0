"""The CPU implementation of the GCP primitives of :class:`~sktensor_fast.backends.Backend`.

Built-in losses run entirely in the compiled kernels of ``_gcp.pyx`` (sampling, model values,
loss derivative and the fused MTTKRP of every mode in one pass).  A user-defined loss (a Python
object) takes the fallback path: the kernel materialises the sample, ``kruskal_values`` gives
the model values there, NumPy evaluates the loss derivative, and the fused kernel accumulates the
gradient from those explicit weights.

The exact loss and gradient (for L-BFGS-B) use the dense tensor in NumPy: they are only offered
for tensors of at most ``GCP_DENSE_LIMIT`` entries (checked by the estimator).
"""
import numpy as np

from ..._threads import cpu_left_free, get_num_threads, threads_for_load
from .. import gcp_plan
from ..base import GcpKernels
from ..gcp_dense import dense_model, dense_mttkrp, full_loss_grad
from ..gcp_plan import GcpState, bucket_layout, linear_index, loss_code, sampler_plan
from . import _gcp, _kernels, parallel_costs

__all__ = ["CpuGcpKernels", "CpuGcpState", "setup", "sampled_gradient", "loss_estimate",
           "full_loss_grad", "optimizer_update", "run_steps", "dense_mttkrp", "dense_model",
           "step_threads", "gcp_step_costs", "threads_for_gcp_steps"]

#: below this much work a host-side kernel call runs on one thread (as in _gcp.pyx)
_SERIAL_WORK = 131072


def _size(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _linear_index(T):
    """The format's cached linear index of the nonzeros (None where it does not fit)."""
    lin = getattr(T, "linear_index", None)
    if callable(lin):
        return lin()
    return linear_index(T.subs, T.shape)


def _bucket_index(T, lin):
    """Offsets into ``lin`` by high bits (``lin >> shift``), about one nonzero per bucket:
    a look-up then reads two offsets and a handful of entries instead of binary-searching all
    of ``lin``.  Cached on the format object."""
    cache = T.__dict__.setdefault("_gcp_cache", {})
    if "bucket" not in cache:
        nnz = int(lin.shape[0])
        bucket, shift = None, 0
        layout = bucket_layout(_size(T.shape), nnz)
        if layout is not None:
            shift, nb = layout
            counts = np.bincount(lin >> shift, minlength=nb)
            bucket = np.zeros(nb + 1, dtype=np.int64)
            np.cumsum(counts, out=bucket[1:])
        cache["bucket"] = (bucket, shift)
    return cache["bucket"]


def _zero_list(T):
    """Coordinates of every zero of a (small, dense-ish) tensor."""
    full = np.ones(T.shape, dtype=bool)
    if T.nnz:
        full[tuple(np.asarray(T.subs).T)] = False
    return np.ascontiguousarray(np.argwhere(full), dtype=np.int64).reshape(-1, len(T.shape))


class CpuGcpState(GcpState):
    """The :class:`~sktensor_fast.backends.gcp_plan.GcpState` of the CPU backend (besides its
    attributes, those below).

    Attributes
    ----------
    grad_sampler : _gcp.GcpSampler
        Where every gradient sample comes from (the key of a step selects the draw).
    loss_sample : tuple (subs, vals, weights, corr)
        The fixed stratified sample on which the loss is estimated.
    work : ndarray or None
        Workspace of the multi-threaded gradient kernel, kept between steps.
    """

    def __init__(self, grad_sampler, loss_sample, n_grad, n_loss, n_entries, sampler):
        super().__init__(sampler, n_grad, n_loss, n_entries, loss_sample, np.float64)
        self.grad_sampler = grad_sampler
        self.work = None


def _make_sampler(T, kind, p, q, zero_subs, lin, vals, implicit=False):
    """A GcpSampler of ``kind`` drawing ``p`` nonzeros and ``q`` other entries.

    ``zero_subs``: explicit list of the other entries; ``implicit``: draw them from the list of
    all zeros, computed from ``lin``."""
    shape = np.asarray(T.shape, dtype=np.int64)
    subs = np.ascontiguousarray(T.subs, dtype=np.int64)
    nnz = int(T.nnz)
    explicit = zero_subs is not None or implicit
    zs = zero_subs if zero_subs is not None else np.zeros((0, len(T.shape)), dtype=np.int64)
    n_zero = int(zs.shape[0]) if zero_subs is not None else _size(T.shape) - nnz
    p, q, wp, wq, zmode, include_nz, correct = sampler_plan(kind, nnz, n_zero, p, q)
    bucket, shift = None, 0
    if lin is None:
        lin = np.zeros(0, dtype=np.int64)
    else:
        bucket, shift = _bucket_index(T, lin)
    return _gcp.GcpSampler(shape, subs, vals, lin, zs, explicit, int(p), int(q), float(wp),
                           float(wq), zmode, include_nz, correct, bucket,
                           int(shift), implicit_z=bool(implicit),
                           max_attempts=int(gcp_plan.MAX_ATTEMPTS)), (int(p), int(q))


def setup(T, sampler, n_grad, n_loss, loss_seed, zero_subs=None, num_threads=1):
    """The state of :meth:`GcpKernels.setup` (arguments checked there)."""
    vals = np.ascontiguousarray(T.vals, dtype=np.float64)
    lin = _linear_index(T)
    if lin is not None and T.nnz > 1 and np.any(lin[1:] <= lin[:-1]):
        raise ValueError("GCP needs the nonzeros in lexicographic order without duplicates")
    listed = implicit = False
    if zero_subs is not None:
        zero_subs = np.ascontiguousarray(zero_subs, dtype=np.int64).reshape(-1, len(T.shape))
        n_entries = int(T.nnz) + int(zero_subs.shape[0])
    else:
        n_entries = _size(T.shape)
        if gcp_plan.zero_list_mode(n_entries, int(T.nnz), lin is not None):
            # rejection would waste most draws: take the zeros from the list of all zeros
            if n_entries <= gcp_plan.ZERO_LIST_MAX:
                listed = _zero_list(T)
            else:
                implicit = True
    strat = sampler == "stratified"
    grad_sampler, n_grad = _make_sampler(
        T, sampler, n_grad[0], n_grad[1],
        listed if strat and listed is not False else zero_subs, lin, vals,
        implicit=strat and implicit)
    # the loss is always estimated on a stratified sample (GenTen, pyttb)
    loss_sampler, n_loss = _make_sampler(T, "stratified", n_loss[0], n_loss[1],
                                         listed if listed is not False else zero_subs, lin,
                                         vals, implicit=implicit)
    sample = draw(loss_sampler, _gcp.step_key(np.uint64(loss_seed), 0), len(T.shape),
                  num_threads)
    return CpuGcpState(grad_sampler, sample, n_grad, n_loss, n_entries, sampler)


def draw(sampler, key, N, num_threads=1):
    """Materialise the sample of ``sampler`` at step key ``key``."""
    n = int(sampler.n_samples)
    subs = np.empty((n, N), dtype=np.int64)
    x = np.empty(n)
    w = np.empty(n)
    corr = np.empty(n, dtype=np.int8)
    sampler.draw(np.uint64(key), subs, x, w, corr, num_threads)
    return subs, x, w, corr


def _model_values(subs, lam, facs, num_threads):
    m = np.empty(subs.shape[0])
    if subs.shape[0]:
        if subs.shape[0] * len(lam) < _SERIAL_WORK:
            num_threads = 1  # not worth waking threads
        _kernels.kruskal_values(subs, lam, facs, m, num_threads)
    return m


def _custom_weights(loss, x, w, corr, m, deriv=True):
    fn = loss.deriv if deriv else loss.value
    y = fn(x, m)
    c = corr.astype(bool)
    if c.any():
        y = np.array(y, dtype=np.float64, copy=True)
        y[c] -= fn(np.zeros(int(c.sum())), m[c])
    return np.ascontiguousarray(w * y, dtype=np.float64)


def _gradient_args(weights, factors, active, out):
    """The fused gradient's inputs as the kernel takes them: float64 factors and weights, the
    active modes as int8 flags, and the output matrices (new ones unless given)."""
    facs = [np.ascontiguousarray(f, dtype=np.float64) for f in factors]
    lam = np.ascontiguousarray(weights, dtype=np.float64)
    act = (np.ones(len(facs), dtype=np.int8) if active is None
           else np.asarray(active, dtype=np.int8))
    if out is None:
        out = [np.zeros_like(f) for f in facs]
    return facs, lam, act, out


def sampled_gradient(T, state, weights, factors, loss, seed, step, out=None, active=None,
                     with_loss=False, num_threads=1):
    N = len(factors)
    facs, lam, act, out = _gradient_args(weights, factors, active, out)
    key = _gcp.step_key(np.uint64(seed), np.uint64(step + 1))
    code, param = loss_code(loss)
    if code >= 0:
        f = _gcp.gradient(state.grad_sampler, key, code, param, lam, facs, out, act,
                          bool(with_loss), num_threads, work=_workspace(state, N, lam))
        return out, (float(f) if with_loss else None)
    # a user-defined loss: kernel -> model values -> NumPy derivative -> fused MTTKRP
    subs, x, w, corr = draw(state.grad_sampler, key, N, num_threads)
    m = _model_values(subs, lam, facs, num_threads)
    y = _custom_weights(loss, x, w, corr, m)
    _gcp.gradient(None, 0, -1, 0.0, lam, facs, out, act, False, num_threads, xsubs=subs,
                  xvals=x, xw=w, xcorr=corr, xy=y, work=_workspace(state, N, lam))
    f = None
    if with_loss:
        f = float(np.sum(_custom_weights(loss, x, w, corr, m, deriv=False)))
    return out, f


#: Samples a thread must have at least in a step before another thread runs the steps; None
#: (the default): as many as the measured costs of this machine say
#: (:func:`..parallel_costs.threads_for_gcp_steps`).
MIN_SAMPLES_PER_THREAD = None


#: Whether steps that run on one thread while more are free have a second thread draw their
#: samples ahead (``_gcp.run_steps``'s ``draw_ahead``; the same bits either way).
DRAW_AHEAD = True


def step_threads(n_samples, nmodes, rank, num_threads):
    """Threads worth the compiled step loop, up to ``num_threads``, for steps of ``n_samples``
    samples: a step of few samples runs on fewer threads (two barriers a step cost more than
    the shares save).  The steps' results do not depend on the thread count."""
    n = max(1, int(num_threads))
    if n == 1 or n_samples <= 0:
        return 1
    if MIN_SAMPLES_PER_THREAD is not None:
        return max(1, min(n, int(n_samples) // MIN_SAMPLES_PER_THREAD))
    return threads_for_gcp_steps(n_samples, nmodes, rank, n)


def run_steps(T, state, weights, factors, loss, seed, first_draw, n_steps, optimizer, lower,
              active=None, out=None, deadline=None, clock=None, num_threads=1,
              draw_ahead=False):
    """``n_steps`` stochastic steps of a built-in loss in one compiled call
    (``_gcp.run_steps``), from the optimiser's update rule, moments and parameters: the same
    bits as :func:`sampled_gradient` then ``optimizer.step`` step by step.  ``draw_ahead``:
    steps on one thread have a second thread draw their samples ahead (the same bits).
    Advances the optimiser's step counter by the steps done.  Returns ``(grads, steps_done,
    timed_out)``."""
    N = len(factors)
    act = np.ones(N, dtype=np.int8) if active is None else np.asarray(active, dtype=np.int8)
    if out is None:
        out = [np.zeros_like(f, dtype=np.float64) for f in factors]
    _check_float64(factors, "GCP factor matrices")
    moments = optimizer.moments
    _check_float64([a for arrs in moments for a in arrs], "the optimiser's moments")
    _check_float64(out, "the gradients (out)")
    lam = np.ascontiguousarray(weights, dtype=np.float64)
    p = optimizer.parameters()
    code, param = loss_code(loss)
    done, timed_out = _gcp.run_steps(
        state.grad_sampler, np.uint64(seed), int(first_draw), int(n_steps), code, param, lam,
        list(factors), list(out), act,
        _gcp.SOLVER_CODES[optimizer.rule], list(moments[0]) if moments else None,
        list(moments[1]) if len(moments) > 1 else None, float(p["lr"]),
        int(optimizer.t) + 1, float(p.get("beta1", 0.0)), float(p.get("beta2", 0.0)),
        float(p.get("epsilon", 0.0)), float(lower), num_threads,
        work=_workspace(state, N, lam), deadline=deadline, clock=clock,
        draw_ahead=bool(draw_ahead))
    optimizer.advance(done)
    return out, int(done), bool(timed_out)


def _check_float64(arrays, what):
    for a in arrays:
        if not (isinstance(a, np.ndarray) and a.flags.c_contiguous and a.dtype == np.float64):
            raise ValueError(f"{what} must be C-contiguous float64 arrays")


def explicit_gradient(sample, weights, factors, loss, out=None, active=None, with_loss=False,
                      num_threads=1):
    """The fused gradient over an explicit sample ``(subs, x, w, corr)``."""
    N = len(factors)
    facs, lam, act, out = _gradient_args(weights, factors, active, out)
    subs = np.ascontiguousarray(sample[0], dtype=np.int64).reshape(-1, N)
    x = np.ascontiguousarray(sample[1], dtype=np.float64)
    w = np.ascontiguousarray(sample[2], dtype=np.float64)
    corr = np.ascontiguousarray(sample[3], dtype=np.int8)
    if subs.shape[0] == 0:
        for k in range(N):
            if act[k]:
                out[k][...] = 0
        return out, (0.0 if with_loss else None)
    code, param = loss_code(loss)
    if code >= 0:
        f = _gcp.gradient(None, 0, code, param, lam, facs, out, act,
                          bool(with_loss), num_threads, xsubs=subs, xvals=x, xw=w, xcorr=corr)
        return out, (float(f) if with_loss else None)
    m = _model_values(subs, lam, facs, num_threads)
    y = _custom_weights(loss, x, w, corr, m)
    _gcp.gradient(None, 0, -1, 0.0, lam, facs, out, act, False, num_threads, xsubs=subs,
                  xvals=x, xw=w, xcorr=corr, xy=y)
    f = None
    if with_loss:
        f = float(np.sum(_custom_weights(loss, x, w, corr, m, deriv=False)))
    return out, f


def _workspace(state, N, lam):
    n = int(state.grad_sampler.n_samples)
    block = max(1, min(_gcp.default_block(N, len(lam)), n))
    need = _gcp.workspace_size(N, len(lam), block)
    if state.work is None or state.work.shape[0] < need:
        state.work = np.empty(need)
    return state.work


def sample_loss(subs, x, w, corr, weights, factors, loss, num_threads=1):
    """Σ w (f(x, m) − corr f(0, m)) over an explicit sample."""
    if np.shape(subs)[0] == 0:
        return 0.0
    facs = [np.ascontiguousarray(f, dtype=np.float64) for f in factors]
    lam = np.ascontiguousarray(weights, dtype=np.float64)
    code, param = loss_code(loss)
    if code >= 0:
        return float(_gcp.loss_sum(None, 0, code, param, lam, facs,
                                   num_threads, xsubs=subs, xvals=x, xw=w, xcorr=corr))
    m = _model_values(subs, lam, facs, num_threads)
    return float(np.sum(_custom_weights(loss, x, w, corr, m, deriv=False)))


def loss_estimate(T, state, weights, factors, loss, num_threads=1):
    subs, x, w, corr = state.loss_sample
    return sample_loss(subs, x, w, corr, weights, factors, loss, num_threads)


# ------------------------------------------------------------------ optimiser steps
#: the compiled element-wise update of each rule of gcp_plan.UPDATE_RULES, called with the flat
#: factor, gradient and moments, the coefficients of the step, ``lower`` and the threads
#: (Adam's step and guard are passed as its rate with bias corrections 1: the same bits)
_UPDATES = {
    "sgd": lambda u, g, mom, c, lower, nt: _gcp.sgd_step(u, g, c[0], lower, nt),
    "adagrad": lambda u, g, mom, c, lower, nt: _gcp.adagrad_step(u, g, mom[0], c[0], c[1],
                                                                 lower, nt),
    "adam": lambda u, g, mom, c, lower, nt: _gcp.adam_step(u, g, mom[0], mom[1], c[2], c[0],
                                                           c[1], c[3], 1.0, 1.0, lower, nt),
}


def optimizer_update(rule, factors, grads, moments, coefficients, lower, active=None,
                     num_threads=1):
    """:meth:`GcpKernels.optimizer_update` on host arrays (arguments checked there)."""
    update = _UPDATES[rule]
    for k, (U, G) in enumerate(zip(factors, grads)):
        if active is not None and not active[k]:
            continue
        mom = [arrs[k] for arrs in moments]
        _check_float64([U] + mom, "GCP factor matrices and the optimiser's moments")
        update(U.reshape(-1), np.ascontiguousarray(G, dtype=np.float64).reshape(-1),
               [m.reshape(-1) for m in mom], coefficients, lower, num_threads)
    return factors


class CpuGcpKernels(GcpKernels):
    """``backend.gcp`` of the CPU backend: the functions above on the kernels' threads."""

    def _setup(self, T, sampler, n_grad, n_loss, loss_seed, zero_subs):
        return setup(T, sampler, n_grad, n_loss, loss_seed, zero_subs, get_num_threads())

    def _sampled_gradient(self, T, state, weights, factors, loss, seed, step, out, active,
                          with_loss):
        return sampled_gradient(T, state, weights, factors, loss, seed, step, out, active,
                                with_loss, get_num_threads())

    def _loss_estimate(self, T, state, weights, factors, loss):
        return loss_estimate(T, state, weights, factors, loss, get_num_threads())

    def _full_loss_grad(self, T, weights, factors, loss, mask, modes, need_grad):
        return full_loss_grad(T, weights, factors, loss, mask, modes, need_grad)

    def _sample_gradient(self, sample, weights, factors, loss, out, active, with_loss):
        return explicit_gradient(sample, weights, factors, loss, out, active, with_loss,
                                 get_num_threads())

    def _sample_loss(self, sample, weights, factors, loss):
        return sample_loss(*sample, weights, factors, loss, get_num_threads())

    def _optimizer_update(self, rule, factors, grads, moments, coefficients, lower, active):
        return optimizer_update(rule, factors, grads, moments, coefficients, lower, active,
                                get_num_threads())

    def _steps(self, T, state, weights, factors, loss, seed, first_draw, n_steps, optimizer,
               lower, active, out, deadline, clock):
        if loss_code(loss)[0] < 0:   # a user-defined loss: NumPy at every step
            return self._stepwise(T, state, weights, factors, loss, seed, first_draw,
                                  n_steps, optimizer, lower, active, out, deadline, clock)
        # one call runs many steps with two barriers each: the CPUs other programs leave free
        # are looked at again for every call (threads_for_load), and a step of few samples
        # runs on fewer threads (its barriers would cost more than the shares save)
        free = threads_for_load(get_num_threads())
        n = step_threads(state.grad_sampler.n_samples, len(factors),
                         int(factors[0].shape[1]), free)
        # steps too small to share: a second thread draws their samples ahead, when a CPU is
        # free now (looked at for every call: on a CPU that another program keeps busy it
        # would take the time of the thread computing the steps)
        ahead = DRAW_AHEAD and n == 1 and free > 1 and cpu_left_free()
        return run_steps(T, state, weights, factors, loss, seed, first_draw, n_steps,
                         optimizer, lower, active, out, deadline, clock, n, ahead)


# ---------------------------------------------------------------------- thread costs

class _CalibrationSgd:
    """The least of an optimiser that :func:`.gcp_ops.run_steps` needs: plain SGD steps of a
    tiny learning rate (the calibration's factors stay finite)."""
    rule, moments, t = "sgd", [], 0

    @staticmethod
    def parameters():
        return {"lr": 1e-9}

    def advance(self, n):
        self.t += n


def _gcp_calibration():
    """A function running ``steps`` GCP steps (Poisson loss, SGD, stratified samples: 512
    nonzeros and 512 zeros a step) on a 3-way tensor of rank 8 on the threads it is given;
    and the samples of a step."""
    from ...tensor import SparseTensor
    from .formats import build_format
    rng = np.random.default_rng(0)
    shape, R, nnz = (64, 64, 64), 8, 8 * parallel_costs._PART
    subs = np.unique(rng.integers(0, 64, size=(int(nnz * 1.1), 3)), axis=0)[:nnz]
    T = build_format(SparseTensor(subs, rng.integers(1, 5, len(subs)).astype(float), shape),
                     "coo")
    state = setup(T, "stratified", (512, 512), (16, 16), 0)
    factors = [rng.random((n, R)) + 0.1 for n in shape]
    out = [np.zeros_like(f) for f in factors]
    weights = np.ones(R)

    def run(t, steps):
        run_steps(T, state, weights, factors, _POISSON, 1, 0, steps, _CalibrationSgd(), 0.0,
                  out=out, num_threads=t)
    return run, sum(state.n_grad)


class _Poisson:
    """The Poisson loss as the GCP kernels know it (code and parameter of the loss table)."""
    def __init__(self):
        from ..._loss_table import LOSS_TABLE
        self.code = next(code for name, code, *_ in LOSS_TABLE if name == "poisson")
        self.param = 0.0


_POISSON = None


def gcp_step_costs(t):
    """``(seconds per sample on one thread, seconds a step on t threads takes beyond a t-th
    of its one-thread time)`` of GCP's compiled step loop (3 modes, rank 8), measured at
    first use for this ``t``, then kept.  The loop runs all its steps in one parallel region,
    so the second is what a step's two barriers and the uneven shares cost, not a region's
    start."""
    global _POISSON
    t = int(t)
    key = ("gcp", t)
    costs = parallel_costs._COSTS
    cost = costs.get(key)
    if cost is None:
        with parallel_costs._LOCK:
            if _POISSON is None:
                _POISSON = _Poisson()
            run, ns = _gcp_calibration()
            steps = 16
            run(1, 2)
            run(t, 2)
            one, many = [], []
            seconds = parallel_costs._seconds
            for _ in range(parallel_costs.RUNS // 2):
                one.append(seconds(lambda: run(1, steps)) / steps)
                many.append(seconds(lambda: run(t, steps)) / steps)
            one = float(np.percentile(one, parallel_costs.PERCENTILE))
            many = float(np.percentile(many, parallel_costs.PERCENTILE))
            cost = costs[key] = (one / ns, max(0.0, many - one / t))
    return cost


def threads_for_gcp_steps(n_samples, nmodes, rank, num_threads):
    """Threads worth GCP steps of ``n_samples`` samples over ``nmodes`` modes at ``rank``:
    the most, up to ``num_threads`` (and the powers of two below it), whose shares of a step
    each take at least :data:`~.parallel_costs.SHARE_OVER_START` times what a step on that
    many threads costs beyond them (:func:`gcp_step_costs`; a sample's work scaled from the
    calibration's 3 modes and rank 8 by ``nmodes² rank``).  Decisions are kept."""
    key = ("gcp", int(n_samples), int(nmodes), int(rank), int(num_threads))
    decisions = parallel_costs._COSTS.setdefault("decisions", {})
    if key in decisions:
        return decisions[key]
    n = int(num_threads)
    choice = 1
    if n > 1:
        scale = max(1.0, (nmodes * nmodes * rank) / (3 * 3 * 8))
        candidates = sorted({n} | {1 << k for k in range(1, n.bit_length()) if (1 << k) < n},
                            reverse=True)
        for t in candidates:
            per_sample, extra = gcp_step_costs(t)
            if n_samples * per_sample * scale / t >= parallel_costs.SHARE_OVER_START * extra:
                choice = t
                break
    decisions[key] = choice
    return choice
