"""The OpenCL implementation of the GCP primitives of :class:`~sktensor_fast.backends.Backend`.

Everything of a stochastic fit stays on the device: the tensor (uploaded once by ``prepare``),
its sorted linear indices and their bucket table (built on the device by :func:`setup`), the
list of observed zeros of a mask (uploaded once by :func:`setup`), the fixed loss sample, the
factors, the gradients and the optimiser's moments.  Per step only the step key (a scalar) and
the weights (a length-R vector) go to the device; the loss estimate brings back one partial sum
per 1024 samples.

One gradient step (kernels of ``kernels/gcp.cl``):

1. ``gcp_draw``: sample j of step key K, drawn with the CPU's counter-based generator (the same
   64-bit integer arithmetic, ported bit for bit), so the sample of (seed, step) is the CPU's
   sample, whatever the work-group size or the order in which work-items run;
2. ``gcp_terms``: model value, weighted loss derivative y_j and, for every active mode k, the
   sort key ``(i_k(j) << 32) | j``;
3. a bitonic sort of the keys of every active mode;
4. ``gcp_scatter``: one work-item per (column, run of equal rows) adds the run's contributions
   in increasing sample order.  No atomics: the gradient is deterministic, and each row is the
   sum of its contributions in the order of the CPU kernel (which adds them in sample order
   too), with products formed in the CPU's order.  For the same (seed, step) the gradient
   therefore equals the CPU's up to the last bits of the device's ``exp`` / ``log`` / ``pow``
   (exactly, for losses without them, e.g. Gaussian).

User-defined losses (``loss.code < 0``) take a fallback: the sample and its model values are
computed on the device, the derivative is evaluated by NumPy on the host (the sample crosses
to the host and the weighted derivatives back, per step), and steps 2-4 run as above.

``full_loss_grad`` (exact loss and gradient for L-BFGS-B, only for tensors small enough to be
dense) runs on the host, with the NumPy code of ../gcp_dense.py: the nonzeros are downloaded
once per tensor and cached.
"""

import numpy as np

from .. import gcp_plan
from ..base import GcpKernels
from ..gcp_dense import full_loss_grad as _host_full_loss_grad
from ..gcp_plan import GcpState, bucket_layout, check_loss, loss_code, sampler_plan
from .tensor import DeviceTensor, OpenCLTensor

__all__ = ["OpenCLGcpKernels", "OpenCLGcpState", "step_key", "setup", "sampled_gradient",
           "loss_estimate", "full_loss_grad", "optimizer_update", "draw"]

# where the stratified sampler's zeros come from (the list of all zeros, computed from the
# linear indices, or rejection) and how many rejections it tries is decided as on the CPU
# (``zero_list_mode`` and ``MAX_ATTEMPTS`` of backends/gcp_plan.py), so that both draw the
# same entries
#: samples per partial sum of a loss (the CPU's LOSS_CHUNK: the same order of additions)
_LOSS_CHUNK = 1024
#: the sort keys hold the sample number in 32 bits
_MAX_SAMPLES = 2 ** 31


# ------------------------------------------------------------------ generator keys
def step_key(seed, step):
    """The generator key of step ``step`` of a run seeded with ``seed`` (``sktf_mix_seed`` of
    ``sktensor_fast/include/sktf_rng.h``, the function the CPU kernels call too)."""
    from ..._native import _numerics
    return _numerics.step_key(seed, step)


# ------------------------------------------------------------------ device-side checks
def _check_tensor(be, T):
    if isinstance(T, DeviceTensor):
        T.require_resident("GCP")
    if not isinstance(T, OpenCLTensor):
        raise TypeError(f"expected a tensor prepared by this OpenCL backend "
                        f"(backend.prepare(X)), got {type(T).__name__}")
    if T.subs[0].context != be.ctx:
        raise ValueError("the tensor was prepared for another OpenCL context")


def _check_state(be, T, state):
    if not isinstance(state, OpenCLGcpState):
        raise TypeError(f"expected the state returned by backend.gcp.setup, got {type(state).__name__}")
    if state.T is not T:
        raise ValueError("the GCP state was set up for another tensor (call backend.gcp.setup with "
                         "this tensor)")
    if state.backend is not be:
        raise ValueError("the GCP state was set up by another backend")


def _weights(weights, R):
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (R,):
        raise ValueError(f"weights have shape {w.shape}, expected ({R},)")
    return w


def _factors(be, T, factors, weights):
    """Factors as device arrays of the tensor's dtype (host arrays are uploaded, device
    arrays of another dtype converted on the device; shapes checked by GcpKernels)."""
    import pyopencl.array as cla
    R = int(factors[0].shape[1])
    lam = _weights(weights, R)
    out = []
    for k, f in enumerate(factors):
        if isinstance(f, cla.Array):
            if f.context != be.ctx:
                raise ValueError(f"factor {k} lives in another OpenCL context")
            if not f.flags.c_contiguous:
                raise ValueError(f"factor {k} must be C-contiguous")
            out.append(f if f.dtype == T.dtype else f.astype(T.dtype))
        else:
            a = np.asarray(f)
            if a.dtype.kind not in "fiub":
                raise TypeError(f"factor {k} must hold real numbers, got dtype {a.dtype}")
            out.append(be.asarray(np.ascontiguousarray(a, dtype=T.dtype)))
    return out, lam, R


# ------------------------------------------------------------------ programs
def _kernel(be, dtype, N, name):
    def source():
        params = ", ".join(f"__global VAL_T* G{k}" for k in range(N))
        names = ", ".join(f"G{k}" for k in range(N))
        extra = [f"#define GRAD_PARAMS {params}",
                 f"#define GRAD_ARRAY __global VAL_T* G[NMODES] = {{{names}}};"]
        return be._header(dtype, N, extra=extra) + be._source("gcp.cl")
    opts = [] if np.dtype(dtype) == np.float64 else ["-cl-single-precision-constant"]
    return be.kernel(("gcp", np.dtype(dtype).str, N), name, source, opts, what="the GCP kernels")


def _buf(be, a):
    """The buffer of a device array, or a one-word placeholder for an empty one."""
    if a is not None and a.size:
        return a.data
    ph = getattr(be, "_gcp_placeholder", None)
    if ph is None:
        import pyopencl.array as cla
        ph = cla.zeros(be.queue, (2,), np.int64)
        be._gcp_placeholder = ph
    return ph.data


def _to_device(be, a):
    """Upload a host array of any dtype (backend.asarray takes floating point only)."""
    import pyopencl.array as cla
    return cla.to_device(be.queue, np.ascontiguousarray(a))


def _size(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


# ------------------------------------------------------------------ state
class _Sampler:
    """Device-side parameters of one sampler (the ``sp`` array of
    ``sktensor_fast/include/sktf_gcp_sample.h``, ``SKTF_GCP_*`` order, and its weights)."""

    def __init__(self, src, kind, p, q, explicit, implicit, zsubs, nz):
        self.src = src
        nnz = src.nnz
        p, q, wp, wq, zmode, include_nz, correct = sampler_plan(kind, nnz, nz, p, q)
        self.p, self.q, self.wp, self.wq = int(p), int(q), float(wp), float(wq)
        self.n_samples = self.p + self.q
        nzero = src.size - nnz if src.lin is not None else 0
        sp = np.array([nnz, nz if explicit else 0, int(explicit), self.p, self.q, zmode,
                       int(include_nz), int(correct), int(src.lin is not None),
                       int(src.bucket is not None), src.bshift, int(implicit),
                       int(gcp_plan.MAX_ATTEMPTS), nzero], dtype=np.int64)
        self.sp = _to_device(src.be, sp)
        self.zsubs = zsubs

    def args(self, key, ns):
        s, be = self.src, self.src.be
        dt = np.dtype(s.T.dtype).type
        return [np.uint64(key), np.int64(ns), self.sp.data, s.shape.data, s.strides.data,
                _buf(be, s.T.subs[0]), _buf(be, s.T.vals[0]), _buf(be, s.lin),
                _buf(be, s.bucket), _buf(be, self.zsubs), dt(self.wp), dt(self.wq)]


class _Source:
    """The tensor's search structures on the device: linear indices and bucket table."""

    def __init__(self, be, T):
        import pyopencl.array as cla
        self.be, self.T = be, T
        N = T.ndim
        self.nnz = int(T.nnz)
        size = _size(T.shape)
        self.size = size
        self.shape = _to_device(be, np.array(T.shape, dtype=np.int64))
        strides = [0] * N
        s = 1
        for k in range(N - 1, -1, -1):
            strides[k] = s
            s *= int(T.shape[k])
        has_lin = size < 2 ** 63
        self.strides = _to_device(be, np.array(strides if has_lin else [0] * N,
                                                dtype=np.int64))
        self.lin = self.bucket = None
        self.bshift = 0
        nnz = self.nnz
        if nnz > 1:
            bad = cla.zeros(be.queue, (1,), np.int32)
            be.launch(_kernel(be, T.dtype, N, "gcp_check_order"), (nnz - 1,), np.int64(nnz),
                      T.subs[0].data, bad.data)
            if int(bad.get()[0]):
                raise ValueError("GCP needs the nonzeros in lexicographic order without "
                                 "duplicates")
        if has_lin and nnz:
            self.lin = cla.empty(be.queue, (nnz,), np.int64)
            be.launch(_kernel(be, T.dtype, N, "gcp_linear_index"), (nnz,), np.int64(nnz),
                      T.subs[0].data, self.strides.data, self.lin.data)
            layout = bucket_layout(size, nnz)   # as the CPU's: about one nonzero per bucket
            if layout is not None:
                shift, nb = layout
                self.bucket = cla.empty(be.queue, (nb + 1,), np.int64)
                self.bshift = shift
                be.launch(_kernel(be, T.dtype, N, "gcp_bucket"), (nb + 1,), np.int64(nb),
                          np.int64(nnz), np.int32(shift), self.lin.data, self.bucket.data)


class OpenCLGcpState(GcpState):
    """The :class:`~sktensor_fast.backends.gcp_plan.GcpState` of the OpenCL backend: its
    samplers' device parameters, the device arrays of the fixed loss sample, and the buffers
    of a step.  ``dtype`` is the tensor's."""

    def __init__(self, be, T, src, grad_sampler, loss_sample, n_grad, n_loss, n_entries,
                 sampler):
        super().__init__(sampler, n_grad, n_loss, n_entries, loss_sample, T.dtype)
        self.backend, self.T, self.src = be, T, src
        self.grad_sampler = grad_sampler
        self._work = None
        self._active = {}
        self._lam = (None, None)

    def __repr__(self):
        return super().__repr__()[:-1] + ", device)"

    def active_buffer(self, act):
        buf = self._active.get(act)
        if buf is None:
            buf = _to_device(self.backend, np.array(act, dtype=np.int32))
            self._active[act] = buf
        return buf

    def lam_buffer(self, lam):
        key = lam.tobytes()
        if self._lam[0] != key:
            self._lam = (key, self.backend.asarray(lam.astype(self.dtype)))
        return self._lam[1]

    def work(self, ns, npad):
        """Buffers of one gradient step (kept between steps)."""
        import pyopencl.array as cla
        if self._work is None:
            q, N, dt = self.backend.queue, self.T.ndim, self.dtype
            nch = -(-ns // _LOSS_CHUNK)
            self._work = {
                "subs": cla.empty(q, (ns, N), np.int32), "x": cla.empty(q, (ns,), dt),
                "w": cla.empty(q, (ns,), dt), "corr": cla.empty(q, (ns,), np.int8),
                "m": cla.empty(q, (ns,), dt), "y": cla.empty(q, (ns,), dt),
                "f": cla.empty(q, (ns,), dt), "keys": cla.empty(q, (N, npad), np.uint64),
                "part": cla.empty(q, (nch,), dt)}
        return self._work


def setup(be, T, sampler, n_grad, n_loss, loss_seed, zero_subs=None):
    """The state of :meth:`GcpKernels.setup` (arguments checked there)."""
    _check_tensor(be, T)
    if sum(n_grad) >= _MAX_SAMPLES or sum(n_loss) >= _MAX_SAMPLES:
        raise ValueError(f"at most {_MAX_SAMPLES - 1} samples per draw on an OpenCL device")
    nnz = int(T.nnz)
    size = _size(T.shape)
    zdev = None
    if zero_subs is not None:
        z = np.ascontiguousarray(zero_subs, dtype=np.int32)
        nz = int(z.shape[0])
        n_entries = nnz + nz
        zdev = _to_device(be, z) if nz else None
        grad_list = loss_list = (True, False)
    else:
        nz = size - nnz
        n_entries = size
        dense = gcp_plan.zero_list_mode(size, nnz, size < 2 ** 63)
        grad_list = (True, True) if dense and sampler == "stratified" else (False, False)
        loss_list = (True, True) if dense else (False, False)
    if n_entries == 0:
        raise ValueError("GCP needs at least one (observed) entry: the tensor has none")
    src = _Source(be, T)
    grad = _Sampler(src, sampler, n_grad[0], n_grad[1], grad_list[0], grad_list[1], zdev, nz)
    # the loss is always estimated on a stratified sample (GenTen, pyttb)
    ls = _Sampler(src, "stratified", n_loss[0], n_loss[1], loss_list[0], loss_list[1], zdev, nz)
    sample = draw(be, T, ls, step_key(loss_seed, 0))
    return OpenCLGcpState(be, T, src, grad, sample, (grad.p, grad.q), (ls.p, ls.q), n_entries,
                          sampler)


def draw(be, T, sampler, key, out=None):
    """Materialise the sample of ``sampler`` at step key ``key`` on the device: a dict of
    device arrays ``subs`` (n x N int32), ``x``, ``w``, ``corr`` (int8) and ``n``."""
    import pyopencl.array as cla
    ns = sampler.n_samples
    N = T.ndim
    if out is None:
        q = be.queue
        m = max(ns, 1)
        out = {"subs": cla.empty(q, (m, N), np.int32), "x": cla.empty(q, (m,), T.dtype),
               "w": cla.empty(q, (m,), T.dtype), "corr": cla.empty(q, (m,), np.int8)}
    out["n"] = ns
    if ns:
        be.launch(_kernel(be, T.dtype, N, "gcp_draw"), (ns,), *sampler.args(key, ns),
                  out["subs"].data, out["x"].data, out["w"].data, out["corr"].data)
    return out


# ------------------------------------------------------------------ losses on the host
def _host_weights(loss, x, w, corr, m, deriv=True):
    """w (g(x, m) - corr g(0, m)) with g the loss (or its derivative), in NumPy."""
    fn = loss.deriv if deriv else loss.value
    y = np.array(fn(x, m), dtype=np.float64, copy=True)
    c = corr.astype(bool)
    if c.any():
        y[c] -= fn(np.zeros(int(c.sum())), m[c])
    return w * y


def _sum_chunks(be, T, f, ns, part, chunk=_LOSS_CHUNK):
    """Σ f in the CPU's order: partial sums of ``chunk`` samples, added in order on the host
    (the loss estimate sums chunks of 1024 samples, the sampled loss of a gradient step all
    samples in one sequence)."""
    nch = -(-ns // chunk)
    be.launch(_kernel(be, T.dtype, T.ndim, "gcp_chunk_sums"), (nch,), np.int64(ns),
              np.int64(chunk), f.data, part.data)
    total = 0.0
    for v in part.get()[:nch].tolist():
        total += v
    return total


# ------------------------------------------------------------------ primitives
def _sort_keys(be, T, keys, npad, act_buf):
    """Bitonic sort of every active mode's row of ``keys`` (npad a power of two >= 2)."""
    N = T.ndim
    L = 1
    while 2 * L < min(512, 2 * be.max_wg) and 2 * L < npad:
        L *= 2
    L = min(L, npad // 2)
    B = 2 * L
    loc = _kernel(be, T.dtype, N, "gcp_sort_local")
    glob = _kernel(be, T.dtype, N, "gcp_sort_global")
    lmem = be.cl.LocalMemory(8 * B)
    g = (npad // 2, N)
    loc(be.queue, g, (L, 1), np.int64(npad), act_buf.data, keys.data, np.int64(0), lmem)
    k = 2 * B
    while k <= npad:
        j = k // 2
        while j >= B:
            glob(be.queue, g, (min(L, 64), 1), np.int64(npad), act_buf.data, keys.data,
                 np.int64(k), np.int64(j))
            j //= 2
        loc(be.queue, g, (L, 1), np.int64(npad), act_buf.data, keys.data, np.int64(k), lmem)
        k *= 2


def sampled_gradient(be, T, state, weights, factors, loss, seed, step, out=None, active=None,
                     with_loss=False):
    import pyopencl.array as cla
    _check_tensor(be, T)
    _check_state(be, T, state)
    facs, lam, R = _factors(be, T, factors, weights)
    code, param = loss_code(check_loss(loss))
    N = T.ndim
    act = tuple(active)
    dt = state.dtype
    if out is None:
        out = [be.zeros((T.shape[k], R), dt) for k in range(N)]
    else:
        if len(out) != N:
            raise ValueError(f"out has {len(out)} arrays for {N} modes")
        for k, g in enumerate(out):
            if not isinstance(g, cla.Array) or g.context != be.ctx:
                raise TypeError(f"out[{k}] must be a device array of this backend")
            if tuple(g.shape) != (T.shape[k], R) or g.dtype != dt or not g.flags.c_contiguous:
                raise ValueError(f"out[{k}] must be a C-contiguous {dt} array of shape "
                                 f"({T.shape[k]}, {R}), got {g.dtype} {tuple(g.shape)}")
    for k in range(N):
        if act[k]:
            be.fill_zero(out[k])
    gs = state.grad_sampler
    ns = gs.n_samples
    if ns == 0 or R == 0 or not any(act) and not with_loss:
        return out, (0.0 if with_loss else None)
    npad = 2
    while npad < ns:
        npad *= 2
    work = state.work(ns, npad)
    lam_d = state.lam_buffer(lam)
    act_buf = state.active_buffer(act)
    key = step_key(seed, step + 1)
    draw(be, T, gs, key, out=work)
    want = bool(with_loss) and code >= 0
    be.launch(_kernel(be, T.dtype, N, "gcp_terms"), (npad,), np.int64(ns), np.int64(npad),
              np.int32(R), np.int32(code), dt.type(param), lam_d.data,
              *[_buf(be, f) for f in facs], work["subs"].data, work["x"].data, work["w"].data,
              work["corr"].data, act_buf.data, np.int32(want), work["m"].data, work["y"].data,
              work["f"].data, work["keys"].data)
    f = None
    if code < 0:  # user-defined loss: its derivative in NumPy on the host
        x = work["x"].get()[:ns].astype(np.float64)
        w = work["w"].get()[:ns].astype(np.float64)
        corr = work["corr"].get()[:ns]
        m = work["m"].get()[:ns].astype(np.float64)
        y = _host_weights(loss, x, w, corr, m)
        work["y"][:ns].set(np.ascontiguousarray(y, dtype=dt))
        if with_loss:
            f = float(np.sum(_host_weights(loss, x, w, corr, m, deriv=False)))
    elif with_loss:
        f = _sum_chunks(be, T, work["f"], ns, work["part"], chunk=ns)
    if any(act):
        _sort_keys(be, T, work["keys"], npad, act_buf)
        be.launch(_kernel(be, T.dtype, N, "gcp_scatter"), (R, ns, N), np.int64(ns),
                  np.int64(npad), np.int32(R), lam_d.data, *[_buf(be, f_) for f_ in facs],
                  work["subs"].data, work["y"].data, work["keys"].data, act_buf.data, *[_buf(be, g) for g in out])
    return out, f


def loss_estimate(be, T, state, weights, factors, loss):
    import pyopencl.array as cla
    _check_tensor(be, T)
    _check_state(be, T, state)
    facs, lam, R = _factors(be, T, factors, weights)
    code, param = loss_code(check_loss(loss))
    s = state.loss_sample
    ns = s["n"]
    if ns == 0:
        return 0.0
    dt = state.dtype
    if "m" not in s:
        q = be.queue
        s["m"] = cla.empty(q, (ns,), dt)
        s["f"] = cla.empty(q, (ns,), dt)
        s["part"] = cla.empty(q, (-(-ns // _LOSS_CHUNK),), dt)
    lam_d = state.lam_buffer(lam)
    be.launch(_kernel(be, T.dtype, T.ndim, "gcp_sample_loss"), (ns,), np.int64(ns), np.int32(R),
              np.int32(code), dt.type(param), _buf(be, lam_d), *[_buf(be, f) for f in facs],
              s["subs"].data, s["x"].data, s["w"].data, s["corr"].data, s["m"].data, s["f"].data)
    if code < 0:
        x = s["x"].get()[:ns].astype(np.float64)
        w = s["w"].get()[:ns].astype(np.float64)
        m = s["m"].get()[:ns].astype(np.float64)
        return float(np.sum(_host_weights(loss, x, w, s["corr"].get()[:ns], m, deriv=False)))
    return _sum_chunks(be, T, s["f"], ns, s["part"])


# ------------------------------------------------------------------ exact loss and gradient
class _HostNonzeros:
    """The nonzeros of a device tensor, downloaded once (for the dense exact loss)."""

    def __init__(self, T):
        self.shape = tuple(T.shape)
        self.ndim = len(self.shape)
        self.nnz = int(T.nnz)
        self.subs = T.subs[0].get().astype(np.int64) if self.nnz else \
            np.zeros((0, self.ndim), np.int64)
        self.vals = T.vals[0].get().astype(np.float64) if self.nnz else np.zeros(0)


def full_loss_grad(be, T, weights, factors, loss, mask=None, modes=None, need_grad=True):
    """Exact loss and gradient, computed on the HOST with the NumPy code of gcp_dense.

    Only for tensors small enough to be dense (the estimator checks ``GCP_DENSE_LIMIT``
    first): the nonzeros are downloaded once per tensor (cached on ``T``), the factors at
    every call, and the gradients are uploaded as device arrays of the factors' dtype.
    """
    _check_tensor(be, T)
    lam = _weights(weights, int(factors[0].shape[1]))
    host = T.__dict__.get("_gcp_host")
    if host is None:
        host = _HostNonzeros(T)
        T._gcp_host = host
    facs = [np.asarray(be.to_numpy(f), dtype=np.float64) for f in factors]
    F, G = _host_full_loss_grad(host, lam, facs, loss, mask, modes, need_grad)
    if G is not None:
        dt = getattr(factors[0], "dtype", np.float64)
        G = [None if g is None else be.asarray(np.ascontiguousarray(g, dtype=dt)) for g in G]
    return F, G


# ------------------------------------------------------------------ optimiser steps
def _device_matrices(be, arrays, name):
    import pyopencl.array as cla
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"{name} must be a list of device arrays")
    for k, a in enumerate(arrays):
        if not isinstance(a, cla.Array) or a.context != be.ctx:
            raise TypeError(f"{name}[{k}] must be a device array of this OpenCL backend "
                            f"(backend.asarray), got {type(a).__name__}")
        if a.ndim != 2 or not a.flags.c_contiguous:
            raise ValueError(f"{name}[{k}] must be a C-contiguous matrix")
        if a.dtype not in (np.float32, np.float64):
            raise TypeError(f"{name}[{k}] must be float32 or float64, got {a.dtype}")


def optimizer_update(be, rule, factors, grads, moments, coefficients, lower, active):
    """One step on device arrays (arguments checked by :meth:`GcpKernels.optimizer_update`;
    here that they are this backend's device arrays of one dtype): kernel ``gcp_<rule>`` of
    gcp.cl per active factor, taking the factor, its gradient, its moments, the step's
    coefficients and ``lower``."""
    _device_matrices(be, factors, "factors")
    _device_matrices(be, grads, "grads")
    for arrs, name in zip(moments, gcp_plan.UPDATE_RULES[rule][0]):
        _device_matrices(be, arrs, f"moment {name!r}")
    N = len(factors)
    for k in range(N):
        if not active[k]:
            continue
        U = factors[k]
        for a in [grads[k]] + [arrs[k] for arrs in moments]:
            if a.shape != U.shape or a.dtype != U.dtype:
                raise ValueError(f"mode {k}: gradient and moments must have the factor's shape "
                                 f"{U.shape} and dtype {U.dtype}, got {a.shape} {a.dtype}")
    for k in range(N):
        U = factors[k]
        if not active[k] or U.size == 0:
            continue
        dt = U.dtype.type
        be.launch(_kernel(be, U.dtype, N, "gcp_" + rule), (U.size,), np.int64(U.size), U.data,
                  grads[k].data, *[arrs[k].data for arrs in moments],
                  *[dt(c) for c in coefficients], dt(lower))
    return factors


class OpenCLGcpKernels(GcpKernels):
    """``backend.gcp`` of the OpenCL backend: the functions above on its device."""

    def _setup(self, T, sampler, n_grad, n_loss, loss_seed, zero_subs):
        return setup(self.backend, T, sampler, n_grad, n_loss, loss_seed, zero_subs)

    def _sampled_gradient(self, T, state, weights, factors, loss, seed, step, out, active,
                          with_loss):
        return sampled_gradient(self.backend, T, state, weights, factors, loss, seed, step,
                                out, active, with_loss)

    def _loss_estimate(self, T, state, weights, factors, loss):
        return loss_estimate(self.backend, T, state, weights, factors, loss)

    def _full_loss_grad(self, T, weights, factors, loss, mask, modes, need_grad):
        return full_loss_grad(self.backend, T, weights, factors, loss, mask, modes, need_grad)

    def _optimizer_update(self, rule, factors, grads, moments, coefficients, lower, active):
        return optimizer_update(self.backend, rule, factors, grads, moments, coefficients,
                                lower, active)
