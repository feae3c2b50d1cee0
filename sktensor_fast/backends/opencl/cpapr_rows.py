"""CP-APR's row subproblem solvers (PDN-R, PQN-R) and row-wise MU step on an OpenCL device.

The kernels are in ``kernels/cpapr_rows.cl``; they port ``backends/cpu/_cpapr.pyx`` operation
for operation, one work-item per row of the mode.  A row's nonzeros are its run in the
tensor's copy sorted by the mode (``OpenCLTensor.subs[mode]``, ``vals[mode]``); the run
offsets are built on the device once per mode and kept on the tensor object.  Khatri-Rao rows
are formed on the fly from the factor rows.  Per-row scratch lives in global memory, in
batches of rows sized to a fixed budget, and is kept on the backend between calls.

Like the CPU solver, the solvers compute in double precision whenever the device has it
(float32 data and factors are converted on reading); devices without fp64 compute in float.

The generic arguments are checked by ``AprKernels`` (backends/base.py), the device-specific
ones here, before a kernel runs.  ``backend.apr`` of :class:`OpenCLBackend` delegates
``row_solve`` and ``mu_rows_`` to :func:`row_solve` and :func:`mu_rows`.
"""

import numpy as np

from .tensor import DeviceTensor, OpenCLTensor

__all__ = ["row_solve", "mu_rows", "MAX_RANK", "METHODS"]

#: Largest rank the row solver kernels accept (per-row scratch grows as rank²).
MAX_RANK = 256

#: Row solvers and their kernel codes.
METHODS = {"pdnr": 0, "pqnr": 1}

#: Most bytes of per-row scratch one batch of rows may use (less on small devices).
SCRATCH_BUDGET = 256 << 20

#: Work-group size of the reduction kernel (a power of two, at most RED_WG of the .cl file).
_RED_WG = 256

#: Work-group size of the per-row and per-nonzero kernels.
_LAUNCH_WG = 64


def _real_dtype(backend):
    """The dtype of the row solvers' arithmetic: float64 where the device has it."""
    return np.float64 if backend.fp64 else np.float32


def _kernel(backend, dtype, nmodes, name):
    """Kernel ``name`` of cpapr_rows.cl for the data type and number of modes (None: only the
    mode-independent kernels), from the backend's program cache."""
    def source():
        extra = ["#define REAL_T double", "#define REAL_FP64 1"] if backend.fp64 else \
            ["#define REAL_T float"]
        return backend._header(dtype, nmodes, extra=extra) + backend._source("cpapr_rows.cl")
    options = [] if backend.fp64 else ["-cl-single-precision-constant"]
    return backend.kernel(("cpapr_rows", np.dtype(dtype).str, nmodes), name, source, options,
                          what="the CP-APR row solvers")


def _launch(backend, knl, n, *args):
    """Run ``knl`` on ``n`` work-items (the kernels ignore the padding) with one fixed
    work-group size, so that the device compiles each kernel once."""
    wg = min(_LAUNCH_WG, backend.max_wg)
    knl(backend.queue, (-(-n // wg) * wg,), (wg,), *args)


def _buffer(backend, name, nbytes):
    """A device buffer of at least ``nbytes`` kept on the backend for reuse."""
    cache = backend.__dict__.setdefault("_apr_rows_bufs", {})
    nbytes = max(int(nbytes), 8)
    buf = cache.get(name)
    if buf is None or buf.size < nbytes:
        cache.pop(name, None)
        if nbytes > int(backend.device.max_mem_alloc_size):
            raise MemoryError(
                f"CP-APR row solver: a scratch buffer of {nbytes / 2**20:.1f} MiB exceeds the "
                f"largest allocation of '{backend.device.name.strip()}' "
                f"({int(backend.device.max_mem_alloc_size) / 2**20:.1f} MiB); use device='cpu'")
        try:
            buf = backend.cl.Buffer(backend.ctx, backend.cl.mem_flags.READ_WRITE, nbytes)
        except backend.cl.Error as exc:
            raise MemoryError(f"CP-APR row solver: cannot allocate {nbytes / 2**20:.1f} MiB "
                              f"on '{backend.device.name.strip()}': {exc}") from exc
        cache[name] = buf
    return buf


def row_pointers(backend, T, mode):
    """(I + 1) int64 device array: row i of ``mode`` owns positions ``ptr[i]:ptr[i+1]`` of the
    mode-sorted nonzeros.  Built on the device once per mode, cached on ``T``."""
    import pyopencl.array as cla
    cache = T.__dict__.setdefault("_apr_row_ptr", {})
    ptr = cache.get(mode)
    if ptr is None:
        I = T.shape[mode]
        ptr = cla.empty(backend.queue, (I + 1,), np.int64)
        if T.nnz == 0:
            backend.fill_zero(ptr)
        else:
            _launch(backend, _kernel(backend, T.dtype, T.ndim, "row_pointers"), T.nnz + 1,
                    np.int64(T.nnz), np.int64(I), np.int32(mode), T.subs[mode].data, ptr.data)
        cache[mode] = ptr
    return ptr


def _reduce(backend, dtype, nmodes, n, use_kkt, kkt, inner, changed):
    """(max kkt, sum inner, sum changed) over ``n`` rows, reduced on the device and read
    back in one transfer."""
    import pyopencl.array as cla
    out = cla.empty(backend.queue, (3,), np.uint64)
    wg = 1
    while wg * 2 <= min(_RED_WG, backend.max_wg):
        wg *= 2
    _kernel(backend, dtype, nmodes, "reduce_rows")(backend.queue, (wg,), (wg,), np.int64(n),
                                                   np.int32(use_kkt), kkt, inner, changed,
                                                   out.data)
    h = out.get()
    if backend.fp64:
        k = float(h[:1].view(np.float64)[0])
    else:
        k = float(h[:1].astype(np.uint32).view(np.float32)[0])
    return k, int(h[1]), int(h[2])


# ---------------------------------------------------------------------- argument checks
def _check_tensor(backend, T):
    if isinstance(T, DeviceTensor):
        T.require_resident("CPAPR's Newton row solvers (pdnr, pqnr)")
    if not isinstance(T, OpenCLTensor):
        raise TypeError(f"the OpenCL CP-APR row solver needs a tensor prepared by this backend "
                        f"(backend.prepare(X)), got {type(T).__name__}")


def _device_array(backend, a, dtype, what):
    """``a`` as a C-contiguous device array of ``dtype`` (a copy when it is not one)."""
    import pyopencl.array as cla
    if isinstance(a, cla.Array):
        if a.dtype not in (np.float32, np.float64):
            raise TypeError(f"{what} must hold float32 or float64, got {a.dtype}")
        if not a.flags.c_contiguous:
            raise ValueError(f"{what} must be a C-contiguous device array")
        if a.dtype == dtype:
            return a
        # another precision (rare): through the host, not pyopencl's astype kernel, whose
        # build NVIDIA's compiler reports with a CompilerWarning nobody can act on
        return backend.asarray(a.get().astype(dtype))
    h = np.asarray(a)
    if h.dtype.kind not in "fiub":
        raise TypeError(f"{what} must be a real array, got dtype {h.dtype}")
    return backend.asarray(np.ascontiguousarray(h, dtype=dtype))


# ---------------------------------------------------------------------- the solvers
def row_solve(backend, T, factors, mode, B, method, params):
    """``backend.apr.row_solve`` on the device (arguments checked by ``AprKernels``, see
    ``backends/base.py``)."""
    import pyopencl.array as cla
    _check_tensor(backend, T)
    if not isinstance(B, (cla.Array, np.ndarray)):
        raise TypeError(f"B must be a NumPy or device array (updated in place), got "
                        f"{type(B).__name__}")
    p = params
    R = int(B.shape[1])
    if R > MAX_RANK:
        raise ValueError(f"rank {R} exceeds the largest rank of the OpenCL CP-APR row solvers "
                         f"({MAX_RANK}); use device='cpu'")
    dtype = np.dtype(T.dtype)
    I = T.shape[mode]
    is_dev = isinstance(B, cla.Array)
    if is_dev and B.dtype not in (np.float32, np.float64):
        raise TypeError(f"B must hold float32 or float64, got {B.dtype}")
    work = _device_array(backend, B, dtype, "B")
    facs = [work if k == mode else _device_array(backend, f, dtype, f"factor {k}")
            for k, f in enumerate(factors)]
    real = _real_dtype(backend)
    rsize = np.dtype(real).itemsize
    mem = p["lbfgs_mem"]
    pdnr = METHODS[method] == 0
    per_row = 9 * R + (2 * R * R if pdnr else 2 * mem * R + 2 * mem)
    if pdnr and T.nnz * rsize > int(backend.device.max_mem_alloc_size):
        raise MemoryError(f"CP-APR row solver: the per-nonzero scratch ({T.nnz} values) exceeds "
                          f"the largest allocation of '{backend.device.name.strip()}'; use "
                          f"device='cpu'")
    result = {"kkt": 0.0, "n_inner": 0, "n_changed": 0}
    if I == 0 or R == 0:
        return result
    if T.nnz == 0:
        # no data at all: every row's optimum is zero
        backend.fill_zero(work)
    else:
        budget = min(SCRATCH_BUDGET, int(backend.device.max_mem_alloc_size) // 2,
                     int(backend.device.global_mem_size) // 8)
        nb = int(max(1, min(I, budget // (per_row * rsize))))
        ptr = row_pointers(backend, T, mode)
        wbuf = _buffer(backend, "work", nb * per_row * rsize)
        ibuf = _buffer(backend, "iwork", nb * R * 4 if pdnr else 4)
        ubuf = _buffer(backend, "ups", T.nnz * rsize if pdnr else rsize)
        # the scratch is filled and used within one kernel, so it is shared between calls; the
        # per-row results live until the reduction, so they are this call's own
        kbuf = cla.empty(backend.queue, (I,), real).data
        nbuf = cla.empty(backend.queue, (I,), np.int32).data
        cbuf = cla.empty(backend.queue, (I,), np.int32).data
        knl = _kernel(backend, dtype, T.ndim, "apr_rows")
        fixed = [np.int32(R), np.int32(mode), ptr.data, T.subs[mode].data, T.vals[mode].data]
        fixed += [f.data for f in facs]
        fixed += [work.data, real(p["tol"]), np.int32(p["max_inner"]), real(p["eps_div_zero"]),
                  real(p["eps_active"]), real(p["mu0"]), np.int32(mem), wbuf, ibuf, ubuf, kbuf,
                  nbuf, cbuf]
        for row0 in range(0, I, nb):
            n = min(nb, I - row0)
            _launch(backend, knl, n, np.int32(METHODS[method]), np.int64(row0), np.int64(n),
                    np.int64(nb), *fixed)
        k, s_inner, s_changed = _reduce(backend, dtype, T.ndim, I, 1, kbuf, nbuf, cbuf)
        result = {"kkt": k, "n_inner": s_inner, "n_changed": s_changed}
    if work is not B:
        if is_dev:      # B of another dtype than the data: convert back (through the host)
            backend.cl.enqueue_copy(backend.queue, B.data,
                                    np.ascontiguousarray(work.get(), dtype=B.dtype))
        else:
            B[...] = work.get()
    return result


def mu_rows(backend, B, Phi, tol):
    """``backend.apr.mu_rows_`` on the device: a row-wise KKT check and update kernel and a
    count reduction; returns the number of updated rows (arguments checked by
    ``AprKernels``)."""
    import pyopencl.array as cla
    if isinstance(B, np.ndarray):
        # a host B: solved on the device, written back in place
        if B.dtype not in (np.float32, np.float64):
            raise TypeError(f"B must hold float32 or float64, got {B.dtype}")
        Bd = backend.asarray(np.ascontiguousarray(B))
        n = mu_rows(backend, Bd, Phi, tol)
        B[...] = Bd.get()
        return n
    if not isinstance(B, cla.Array):
        raise TypeError(f"B must be a NumPy or device array, got {type(B).__name__}")
    if B.dtype not in (np.float32, np.float64):
        raise TypeError(f"B must hold float32 or float64, got {B.dtype}")
    if not B.flags.c_contiguous:
        raise ValueError("B must be a C-contiguous device array")
    Phi = _device_array(backend, Phi, B.dtype, "Phi")
    I, R = (int(s) for s in B.shape)
    if B.size == 0:
        return 0
    flags = cla.empty(backend.queue, (I,), np.int32).data
    _launch(backend, _kernel(backend, B.dtype, None, "apr_mu_rows"), I, np.int64(I),
            np.int32(R), B.data, Phi.data, B.dtype.type(tol), flags)
    return _reduce(backend, B.dtype, None, I, 0, flags, flags, flags)[2]
