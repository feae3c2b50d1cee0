"""The OpenCL backend: the same primitives as the CPU backend, run by PyOpenCL kernels.

The tensor is uploaded once by :meth:`OpenCLBackend.prepare` (:mod:`.tensor`): int32
coordinates, the values and the order of the nonzeros by every other mode; the copies of the
nonzeros sorted by each mode, in the chunk-interleaved order the MTTKRP / Φ kernels read, are
built from them on the device, so the kernels read the nonzeros of a mode contiguously and
reduce runs of equal output rows in registers.  Factor matrices live on the device as
``pyopencl.array.Array``; only R x R matrices, length-R vectors and scalars cross to the host
during a fit.
"""
import contextlib
import os
import sys
import tempfile

import numpy as np

from ..base import AprKernels, Backend
from ..options import OpenCLOptions
from . import cpapr_rows, gcp_ops, streamed
from .program import (WHAT_TO_DO, KernelBuildError, _compiler_message, _device_label, build_program,
                      kernel_source, logger)
from .tensor import INSTALL_HINT, OpenCLTensor, import_cl
from ..._warnings import warn as _warn

__all__ = ["OpenCLBackend", "OpenCLTensor", "NoDeviceError", "DeviceUnusableError",
           "KernelBuildError", "probe_device", "build_program"]



class NoDeviceError(RuntimeError):
    """No usable OpenCL device matches the requested ``device`` string.

    Raised when an estimator with ``device="gpu"``, ``"opencl"`` or ``"opencl:P:D"`` finds no
    such device (the message lists the platforms and devices that PyOpenCL sees and how to
    install a driver).

    Examples
    --------
    >>> from sktensor_fast import CPALS
    >>> from sktensor_fast.backends.opencl import NoDeviceError
    >>> from sktensor_fast.datasets import load_flights_routes
    >>> X = load_flights_routes().tensor
    >>> try:
    ...     CPALS(device="opencl:99:0").fit(X)
    ... except NoDeviceError as exc:
    ...     print("no such device")
    ... except ImportError:             # PyOpenCL is not installed
    ...     print("no such device")
    no such device
    """


class DeviceUnusableError(NoDeviceError):
    """An OpenCL device exists but its compiler cannot build a small test program.

    Raised when the device is selected (``device="gpu"``, ``"opencl"`` or ``"opencl:P:D"``), so
    that a broken OpenCL installation fails once, with the compiler's own message, instead of
    at every kernel.  A subclass of :class:`NoDeviceError`.

    Examples
    --------
    >>> from sktensor_fast.backends.opencl import DeviceUnusableError, NoDeviceError
    >>> issubclass(DeviceUnusableError, NoDeviceError)
    True
    >>> from sktensor_fast import list_devices
    >>> unusable = [d["device"] for d in list_devices() if d["usable"] is False]
    """


_PROBE_SRC = """
__kernel void sktensor_fast_probe(__global float* a, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        a[i] = 2.0f * a[i] + 1.0f;
}
"""

#: probe_device's results: {device key: None (usable) or the compiler's message}
_PROBED = {}


def _device_key(dev):
    try:
        return (dev.platform.name, dev.name, dev.driver_version, int(dev.int_ptr))
    except Exception:  # pragma: no cover
        return id(dev)


@contextlib.contextmanager
def _stderr_collected():
    """Collect what is written to the process's standard error (file descriptor 2) inside the
    block: some OpenCL compilers (PoCL's clang) print their diagnostics there themselves, in
    addition to the build log that the error message quotes.  Yields a dict whose ``"text"``
    holds it after the block; where descriptor 2 cannot be redirected, nothing is collected."""
    out = {"text": ""}
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield out
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out["text"] = tmp.read().decode("utf-8", "replace")


def probe_device(dev):
    """Whether the OpenCL device ``dev`` can compile kernels: ``None`` when a small test
    program builds, else the compiler's message.

    The test program is built once per device and process (the result is cached), so that
    :func:`sktensor_fast.list_devices` and device selection can tell a working device from one
    whose compiler fails (for example PoCL with an LLVM that does not know the host CPU).  What
    the compiler prints to the process's standard error meanwhile (PoCL's "1 error
    generated.") is kept off the terminal and logged at DEBUG level on the
    ``sktensor_fast.opencl`` logger: the message returned quotes the build log.

    Parameters
    ----------
    dev : pyopencl.Device
        The device.

    Returns
    -------
    str or None
        ``None`` when the device works, else why not.
    """
    key = _device_key(dev)
    if key in _PROBED:
        return _PROBED[key]
    cl = import_cl()
    with _stderr_collected() as printed:
        try:
            ctx = cl.Context([dev])
            prog = build_program(ctx, _PROBE_SRC, what="a test program")
            cl.Kernel(prog, "sktensor_fast_probe")
            err = None
        except KernelBuildError as exc:
            err = _compiler_message(exc.__cause__)
        except cl.Error as exc:
            err = f"{type(exc).__name__}: {exc}".strip()
    if printed["text"].strip():
        logger.debug("the compiler of %s printed while building the test program:\n%s",
                     _device_label(dev), printed["text"])
    _PROBED[key] = err
    return err


def _unusable(dev, err):
    return DeviceUnusableError(
        f"the OpenCL device {_device_label(dev)} cannot compile kernels; its compiler said: "
        f"{err}. {WHAT_TO_DO}")


def _platform_summary(cl):
    try:
        plats = cl.get_platforms()
    except Exception as exc:  # no ICD loader / no platform
        return f"no OpenCL platform could be listed ({exc})"
    if not plats:
        return "no OpenCL platform is installed"
    parts = []
    for p, plat in enumerate(plats):
        try:
            devs = [f"{d}: {dev.name} [{cl.device_type.to_string(dev.type)}]"
                    for d, dev in enumerate(plat.get_devices())]
        except Exception:
            devs = []
        parts.append(f"platform {p} '{plat.name}': " + (", ".join(devs) or "no devices"))
    return "; ".join(parts)


def select_device(selector):
    """Pick a ``pyopencl.Device`` for ``'gpu'``, ``'opencl'`` or a (platform, device) pair."""
    cl = import_cl()
    try:
        plats = cl.get_platforms()
    except Exception:
        plats = []
    if isinstance(selector, tuple):
        p, d = selector
        if p >= len(plats):
            raise NoDeviceError(f"OpenCL platform index {p} is out of range: "
                                f"{_platform_summary(cl)}. {INSTALL_HINT}")
        devs = plats[p].get_devices()
        if d >= len(devs):
            raise NoDeviceError(f"OpenCL device index {d} is out of range for platform {p} "
                                f"'{plats[p].name}' ({len(devs)} device(s)): {_platform_summary(cl)}")
        err = probe_device(devs[d])
        if err is not None:
            raise _unusable(devs[d], err)
        return devs[d]
    want_gpu = selector == "gpu"
    broken = []
    for plat in plats:
        try:
            devs = plat.get_devices(device_type=cl.device_type.GPU if want_gpu
                                    else cl.device_type.ALL)
        except Exception:
            continue
        for dev in devs:
            err = probe_device(dev)
            if err is None:
                if broken:
                    _warn(
                        f"device={selector!r}: skipped the OpenCL device(s) "
                        f"{', '.join(_device_label(b) for b, _ in broken)} whose compiler cannot "
                        f"build kernels; using {_device_label(dev)}", RuntimeWarning)
                return dev
            broken.append((dev, err))
    if len(broken) == 1:
        raise _unusable(*broken[0])
    if broken:
        raise DeviceUnusableError(
            f"device={selector!r}: no OpenCL device can compile kernels: " + "; ".join(
                f"{_device_label(dev)}: {err}" for dev, err in broken) + f". {WHAT_TO_DO}")
    if want_gpu and _any_device(cl, plats):
        # OpenCL works here, only without a GPU: name what can run instead
        raise NoDeviceError(f"device='gpu': no OpenCL GPU found; the OpenCL devices here are "
                            f"{_platform_summary(cl)}. Use device='opencl' to run on the first "
                            f"of them, or device='cpu' (the default) for the compiled CPU "
                            f"kernels.")
    what = "GPU" if want_gpu else "device"
    raise NoDeviceError(f"device={selector!r}: no OpenCL {what} found ({_platform_summary(cl)}). "
                        f"Use device='cpu' (the default), or: {INSTALL_HINT}")


def _any_device(cl, plats):
    for plat in plats:
        try:
            if plat.get_devices(device_type=cl.device_type.ALL):
                return True
        except Exception:
            continue
    return False


class OpenCLBackend(Backend):
    """Kernels written in OpenCL C, run through PyOpenCL on any vendor's device."""

    name = "opencl"

    #: columns per lane of the MTTKRP / Φ kernel (kernels/cp.cl): one vector load of VEC
    #: entries per factor row and lane; the largest of 8, 4, 2, 1 that divides the rank and is
    #: at most this.  Fastest on an H200 at R = 16 (doc/guide/tuning.rst, "OpenCL columns per
    #: lane"): 4 for both kernels
    #: over the chunk-interleaved copies ("lanes"), 2 for the fp64 MTTKRP over the mode-sorted
    #: ones ("lanes-sorted").  The environment variable SKTENSOR_FAST_OCL_VEC (or the attribute
    #: ``vec``) sets all.
    VEC = {"mttkrp": 4, "mttkrp_fp32": 4, "phi": 4, "mttkrp_sorted": 2}

    #: Experimental switches of the lanes MTTKRP / Φ kernel, not options: no default turns
    #: them off, and only the benchmarks do (``benchmarks/bench_opencl.py --off32s 0 1
    #: --prefetches 0 1`` sets these attributes on a backend).  ``off32``: 32-bit offsets where
    #: every offset fits (64-bit ones otherwise, as they must be); ``prefetch``: the next
    #: nonzero's coordinates loaded one step ahead.  On an H200 at R = 16, fp64, interleaved
    #: copies, chunk 256 (ms per mode; doc/guide/tuning.rst, "32-bit offsets"): neither 2.03 /
    #: 3.00, off32 only 2.45 / 2.64, prefetch only 2.07-2.26 / 2.75, both 1.86-1.88 /
    #: 2.51-2.54 (MTTKRP / Φ).
    off32 = True
    prefetch = True

    #: values of the ``layout`` setting (SKTENSOR_FAST_OCL_LAYOUT)
    LAYOUTS = ("lanes", "lanes-sorted", "wide")

    def __init__(self, selector="opencl", options=None, max_tensor_bytes=None):
        cl = import_cl()
        self.cl = cl
        self.device = select_device(selector)
        self.ctx = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.ctx)
        # device arrays of the backend come from a pool: the kernels' scratch (boundary lists,
        # partial sums) and the small per-iteration arrays reuse freed blocks instead of asking
        # the driver for fresh memory on every call
        import pyopencl.tools as clt
        self.allocator = clt.MemoryPool(clt.ImmediateAllocator(self.queue))
        self.fp64 = bool(self.device.double_fp_config)
        self.is_gpu = bool(self.device.type & cl.device_type.GPU)
        self.max_wg = int(self.device.max_work_group_size)
        self._knls = {}
        self._progs = {}
        self.is_nvidia = "NVIDIA" in (self.device.vendor or "").upper()
        options = OpenCLOptions() if options is None else options
        if max_tensor_bytes is not None:
            options = options.updated(OpenCLOptions(max_tensor_bytes=max_tensor_bytes))
        self._apply_options(options)
        self.name = f"opencl:{self.device.name.strip()}"

    def _apply_options(self, options):
        """Set the kernels' settings from an :class:`OpenCLOptions` (``None`` fields: the
        device's defaults)."""
        if not isinstance(options, OpenCLOptions):
            raise TypeError(f"options must be an OpenCLOptions, got {type(options).__name__}")
        # nonzeros per work-item; 256 was the fastest of 64/128/256 on an H200, 128 of 8..512
        # on an H100 (doc/guide/tuning.rst, "OpenCL nonzeros per work-item")
        self.chunk = options.chunk or 256
        # columns per lane: None is the per-kernel default VEC
        self.vec = options.vec
        # how Φ forms <B[row], π>: "shuffle" (a register butterfly across the lanes of a warp,
        # NVIDIA devices: PTX shfl.sync) or "local" (lanes share π through local memory, one
        # barrier per nonzero).  A third way, every lane recomputing the whole dot (no
        # barriers), measured slower and was removed (doc/guide/tuning.rst, "Φ's dot product")
        self.phi_variant = options.phi or ("shuffle" if self.is_nvidia else "local")
        if self.phi_variant == "shuffle" and not self.is_nvidia:
            raise ValueError(f"OpenCL option phi='shuffle' needs an NVIDIA device, not "
                             f"'{self.device.name.strip()}' ({self.device.vendor.strip()}); "
                             f"use 'local'")
        # how MTTKRP / Φ spread a chunk of nonzeros over work-items and read them: "lanes"
        # (R / VEC work-items per chunk, VEC columns each, over a chunk-interleaved copy of each
        # mode, built at its first use), "lanes-sorted" (the same over the mode-sorted copies:
        # no second copy, slower loads), "wide" (one work-item per chunk holds whole rows, for
        # ranks up to WIDE_MAX_RANK, over the chunk-interleaved copy: no exchange between
        # lanes, the fastest on CPU devices)
        self.layout = options.layout or ("lanes" if self.is_gpu else "wide")
        self.wide_chunk = options.wide_chunk or 64
        self.wide_group = options.wide_group or 128
        # device bytes a tensor may use; one whose resident copies need more is streamed
        # through the device in blocks (streamed.py); None: only what does not fit
        self.max_tensor_bytes = options.max_tensor_bytes
        self.requested_options = options

    @property
    def options(self):
        """The settings in force, as an :class:`OpenCLOptions` (the device's defaults filled
        in)."""
        return OpenCLOptions(layout=self.layout, chunk=self.chunk, vec=self.vec,
                             phi=self.phi_variant, wide_chunk=self.wide_chunk,
                             wide_group=self.wide_group, max_tensor_bytes=self.max_tensor_bytes)

    # ------------------------------------------------------------------ helpers
    def _check_dtype(self, dtype):
        dtype = np.dtype(dtype)
        if dtype == np.float64 and not self.fp64:
            raise ValueError(f"the OpenCL device '{self.device.name}' has no double precision "
                             f"(fp64); convert the tensor to float32 "
                             f"(X.astype(np.float32)) to run on it")
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"OpenCL kernels support float32 and float64, got {dtype}")
        return dtype

    def index_dtype(self, shape):
        if max(shape) >= 2 ** 31 - 1:
            raise ValueError(f"a mode of length {max(shape)} exceeds the 32-bit coordinates of "
                             f"the OpenCL kernels (at most {2 ** 31 - 2}); use device='cpu'")
        return np.int32

    def _header(self, dtype, nmodes=None, idx="int", extra=()):
        lines = []
        if np.dtype(dtype) == np.float64:
            lines += ["#define USE_FP64 1", "#define VAL_T double"]
        else:
            lines += ["#define VAL_T float"]
        lines.append(f"#define IDX_T {idx}")
        if nmodes is not None:
            lines.append(f"#define NMODES {nmodes}")
            params = ", ".join(f"__global const VAL_T* F{k}" for k in range(nmodes))
            names = ", ".join(f"F{k}" for k in range(nmodes))
            lines.append(f"#define FACTOR_PARAMS {params}")
            lines.append(f"#define FACTOR_ARRAY __global const VAL_T* F[NMODES] = {{{names}}};")
        lines += list(extra)
        return "\n".join(lines) + "\n"

    def _source(self, name):
        return kernel_source("common.cl", name)

    def _kernel(self, dtype, nmodes, phi, name, vec=1, rank=None, interleaved=False,
                off32=False, prefetch=False):
        """Compiled kernel ``name`` of cp.cl (or dense.cl when ``nmodes`` is None), cached;
        ``vec`` columns per lane in cp.cl's accumulate (per vector in accumulate_wide, which
        needs the compile-time ``rank``); ``interleaved``: accumulate reads the
        chunk-interleaved copy; ``off32``: accumulate's offsets fit in int; ``prefetch``:
        accumulate loads a step's coordinates during the step before."""
        key = (np.dtype(dtype).str, nmodes, phi, name, vec, rank, interleaved, off32, prefetch)
        knl = self._knls.get(key)
        if knl is None:
            if nmodes is None:
                src = self._header(dtype) + self._source("dense.cl")
            else:
                extra = []
                if phi:
                    extra.append("#define PHI 1")
                if phi == "shuffle":
                    extra.append("#define PHI_SHUFFLE_NV 1")
                if vec > 1:
                    vt = "double" if np.dtype(dtype) == np.float64 else "float"
                    extra += [f"#define VEC {vec}", f"#define VEC_T {vt}{vec}"]
                if rank is not None:
                    extra.append(f"#define RANK {rank}")
                if interleaved:
                    extra.append("#define INTERLEAVED 1")
                if off32:
                    extra.append("#define OFF_T int")
                if prefetch:
                    extra.append("#define PREFETCH 1")

                src = self._header(dtype, nmodes, extra=extra) + self._source("cp.cl")
            pkey = (np.dtype(dtype).str, nmodes, phi, vec, rank, interleaved, off32, prefetch)
            prog = self._progs.get(pkey)
            if prog is None:
                prog = build_program(self.ctx, src, what=f"{'dense.cl' if nmodes is None else 'cp.cl'} "
                                     f"(for {name})")
                self._progs[pkey] = prog
            knl = self.cl.Kernel(prog, name)
            self._knls[key] = knl
        return knl

    def _interleave_plan(self, ndim):
        """(mode, chunk) of the chunk-interleaved copies the layout reads, built at prepare."""
        if self.layout == "lanes":
            return [(m, self.chunk) for m in range(ndim)]
        if self.layout == "wide":
            return [(m, self.wide_chunk) for m in range(ndim)]
        return []

    def _check_memory(self, X):
        idx = 4
        # the uploaded tensor and the orders of the other modes, then the copies the kernels
        # read: chunk-interleaved ("lanes", "wide") or mode-sorted ("lanes-sorted")
        row = X.ndim * idx + X.vals.itemsize
        chunk = self.wide_chunk if self.layout == "wide" else self.chunk
        copies = X.ndim if self.layout == "lanes-sorted" else X.ndim
        need = (X.nnz * row + (X.ndim - 1) * X.nnz * 4
                + copies * (X.nnz + chunk) * row)
        total = int(self.device.global_mem_size)
        max_alloc = int(self.device.max_mem_alloc_size)
        per_copy = (X.nnz + chunk) * X.ndim * idx
        if need > 0.9 * total or per_copy > max_alloc:
            raise MemoryError(
                f"the tensor needs {need / 2**30:.2f} GiB on the device (the uploaded nonzeros, "
                f"their orders and {copies} copies of {X.nnz} nonzeros for the kernels; one "
                f"coordinate array is {per_copy / 2**30:.2f} GiB) but '{self.device.name}' has "
                f"{total / 2**30:.2f} GiB with at most {max_alloc / 2**30:.2f} GiB per "
                f"allocation")

    # ------------------------------------------------------------------ data placement
    #: the device tensor is always coordinates and values with the orders of every mode (COO);
    #: how the kernels read it is the ``layout`` option, not the format
    formats = ("auto", "coo")

    def storage_format(self, format="auto", needs=()):
        """``"auto"`` and ``"coo"`` both mean the device's COO tensor (returned as ``"coo"``);
        ``"alto"`` (a CPU format) is refused."""
        if format not in self.formats:
            raise ValueError(f"format={format!r} has no meaning on OpenCL devices: the device "
                             f"tensor is COO (coordinates and values with the orders of every "
                             f"mode; the kernels' memory layout is the 'layout' option of "
                             f"OpenCLOptions); use format='auto' or 'coo'")
        return "coo"

    def prepare(self, X, format="auto"):
        self.storage_format(format)
        self._check_dtype(X.dtype)
        self.index_dtype(X.shape)
        cap = streamed.plan_streaming(self, X)
        if cap is not None:
            return streamed.StreamedTensor(self, X, cap)
        self._check_memory(X)
        try:
            T = OpenCLTensor(self, X, interleave=self._interleave_plan(X.ndim))
            if self.layout == "lanes-sorted":
                for m in range(1, X.ndim):
                    T.sorted_copy(m)
            return T
        except self.cl.MemoryError as exc:
            raise MemoryError(f"out of device memory while uploading a tensor with {X.nnz} "
                              f"nonzeros to '{self.device.name}': {exc}") from exc

    def asarray(self, a, dtype=None):
        import pyopencl.array as cla
        if isinstance(a, cla.Array):
            if dtype is None or a.dtype == dtype:
                return a
            # another precision: through the host rather than pyopencl's astype kernel,
            # whose build NVIDIA's compiler reports with a CompilerWarning
            a = a.get()
        arr = np.ascontiguousarray(a, dtype=dtype)
        self._check_dtype(arr.dtype)
        return cla.to_device(self.queue, arr, allocator=self.allocator)

    def to_numpy(self, a):
        import pyopencl.array as cla
        if isinstance(a, cla.Array):
            return a.get()
        return np.asarray(a)

    def zeros(self, shape, dtype):
        import pyopencl.array as cla
        a = cla.empty(self.queue, shape, dtype=self._check_dtype(dtype), allocator=self.allocator)
        return self.fill_zero(a)

    # ------------------------------------------------------------------ sparse kernels
    def _launch_accumulate(self, T, factors, mode, B, eps, out, zero=True):
        """MTTKRP (``B`` None) or Φ of ``mode`` into ``out``; the kernels write the rows of
        ``T``'s nonzeros only, the others are zeroed first unless ``zero`` is False."""
        if getattr(T, "streamed", False):
            return T.accumulate(factors, mode, B, eps, out)
        facs = [self.asarray(f, dtype=T.dtype) for f in factors]
        R = int(facs[0].shape[1])
        I = T.shape[mode]
        if out is None:
            out = self.zeros((I, R), T.dtype)
        elif zero:
            self.fill_zero(out)
        if T.nnz == 0 or R == 0:
            return out
        RP = 1                      # lanes per row in the boundary reduction: one per column
        while RP < R:
            RP *= 2
        RP = min(RP, self.max_wg)
        if RP < R:
            raise ValueError(f"rank {R} exceeds the device's work-group size {self.max_wg}")
        if self.layout == "wide" and R <= self.WIDE_MAX_RANK:
            return self._launch_wide(T, facs, mode, B, eps, out, R, RP)
        kind = "phi" if B is not None else (
            "mttkrp_fp32" if np.dtype(T.dtype) == np.float32 else "mttkrp")
        sorted_kind = kind + "_sorted"
        vec = self.vec or self.VEC[sorted_kind if self.layout == "lanes-sorted"
                                   and sorted_kind in self.VEC else kind]
        while R % vec:
            vec //= 2
        RV = 1                      # lanes per nonzero in the kernel: vec columns each
        while RV < R // vec:
            RV *= 2
        variant = False
        if B is not None:
            # the butterfly stays inside one warp of 32 lanes
            variant = "local" if self.phi_variant == "shuffle" and RV > 32 else self.phi_variant
        interleaved = self.layout == "lanes"
        if interleaved:
            subs, vals = self._interleaved(T, mode, self.chunk)
        else:
            subs, vals = T.subs[mode], T.vals[mode]
        LG = max(1, min(self.group_size, self.max_wg) // RV)
        nchunks = -(-T.nnz // self.chunk)
        # 32-bit offsets where every one fits: positions x modes, factor and output rows x R,
        # boundary slots x R
        limit = 2 ** 31 - 1
        off32 = self.off32 and max(nchunks * self.chunk * T.ndim, max(T.shape) * R,
                                   (2 * nchunks + 2) * R) < limit
        knl = self._kernel(T.dtype, T.ndim, variant, "accumulate", vec, interleaved=interleaved,
                           off32=off32, prefetch=self.prefetch)
        ngroups = -(-nchunks // LG)
        gsize = (RV, ngroups * LG)
        lsize = (RV, LG)
        dt = np.dtype(T.dtype).type
        bnd_row, bnd_val = self._boundary_buffers(nchunks, R, T.dtype)
        args = [np.int64(T.nnz), np.int32(R), np.int32(mode), np.int32(self.chunk),
                np.int64(nchunks), subs.data, vals.data] + [f.data for f in facs]
        if B is not None:
            Bd = self.asarray(B, dtype=T.dtype)
            args += [Bd.data, dt(eps), out.data, bnd_row, bnd_val,
                     self.cl.LocalMemory(2 * RV * LG * np.dtype(T.dtype).itemsize)]
        else:
            args += [out.data, dt(0), out.data, bnd_row, bnd_val]  # B unused
        knl(self.queue, gsize, lsize, *args)
        self._reduce_boundaries(bnd_row, bnd_val, 2 * nchunks, R, RP, T.dtype, out)
        return out

    #: work-items per work-group of the lanes MTTKRP / Φ kernel (RP lanes x LG chunks); on an
    #: H200 at R = 16, 64 and 128 were 7% faster than 256-1024 (doc/guide/tuning.rst, "OpenCL
    #: work-group size")
    group_size = 128

    #: largest rank that the wide kernel serves (its registers hold 2-3 rows per work-item)
    WIDE_MAX_RANK = 16

    def _interleaved(self, T, mode, chunk):
        """The chunk-interleaved copy of the nonzeros sorted by ``mode`` (kept on ``T``)."""
        return T.interleaved_copy(mode, chunk)

    def _launch_wide(self, T, facs, mode, B, eps, out, R, RP):
        """MTTKRP / Φ by cp.cl's accumulate_wide: one work-item per chunk of nonzeros, whole
        rows in registers, over the chunk-interleaved copy of the mode."""
        vec = self.vec or 4
        while R % vec:
            vec //= 2
        chunk = self.wide_chunk
        phi = "wide" if B is not None else False
        subs, vals = self._interleaved(T, mode, chunk)
        knl = self._kernel(T.dtype, T.ndim, phi, "accumulate_wide", vec, rank=R)
        nchunks = -(-T.nnz // chunk)
        LG = min(self.wide_group, self.max_wg)
        bnd_row, bnd_val = self._boundary_buffers(nchunks, R, T.dtype)
        dt = np.dtype(T.dtype).type
        Bd = out if B is None else self.asarray(B, dtype=T.dtype)  # B unused by MTTKRP
        knl(self.queue, (-(-nchunks // LG) * LG,), (LG,), np.int64(T.nnz), np.int64(nchunks),
            np.int32(mode), np.int32(chunk), subs.data, vals.data, *[f.data for f in facs],
            Bd.data, dt(eps), out.data, bnd_row, bnd_val)
        self._reduce_boundaries(bnd_row, bnd_val, 2 * nchunks, R, RP, T.dtype, out)
        return out

    #: entries of the boundary list per work-item at the reduction levels
    LEVEL_CHUNK = 16

    def _boundary_buffers(self, nchunks, R, dtype):
        """Raw pooled buffers for a boundary list of 2 * nchunks (row, R values) entries (no
        Array objects: their bookkeeping costs more host time than the small kernels)."""
        n = max(2 * nchunks, 1)
        return (self.allocator(8 * n), self.allocator(n * R * np.dtype(dtype).itemsize))

    def fill_zero(self, a):
        """a[...] = 0 for a backend array, enqueued without pyopencl.array's event bookkeeping
        (``Array.fill`` records an event per call and waits on old ones every few calls)."""
        if a.nbytes:
            self.cl.enqueue_fill_buffer(self.queue, a.data, np.zeros(1, dtype=a.dtype), 0,
                                        a.nbytes)
        return a

    def _reduce_boundaries(self, rows, vals, n, R, RP, dtype, out):
        """Fold the sorted (row, partial sum) boundary list into ``out``, level by level."""
        knl = self._kernel(dtype, None, False, "reduce_level")
        while True:
            chunk = self.LEVEL_CHUNK
            nch = -(-n // chunk)
            final = nch == 1
            LG = max(1, min(256, self.max_wg) // RP)
            ngroups = -(-nch // LG)
            if final:
                nrows, nvals = rows, vals  # unused
            else:
                nrows, nvals = self._boundary_buffers(nch, R, dtype)
            knl(self.queue, (RP, ngroups * LG), (RP, LG), np.int64(n), np.int32(R),
                np.int32(chunk), np.int32(final), rows, vals, out.data, nrows, nvals)
            if final:
                return out
            rows, vals, n = nrows, nvals, 2 * nch

    def _mttkrp(self, T, factors, mode, out):
        return self._launch_accumulate(T, factors, mode, None, 0.0, out)

    def _phi(self, T, factors, mode, B, eps, out):
        return self._launch_accumulate(T, factors, mode, B, eps, out)

    def _model_values(self, T, weights, factors):
        if getattr(T, "streamed", False):
            return T.model_values(weights, factors)
        facs = [self.asarray(f, dtype=T.dtype) for f in factors]
        w = self.asarray(np.asarray(weights), dtype=T.dtype)
        out = self.zeros((T.nnz,), T.dtype)
        if T.nnz:
            knl = self._kernel(T.dtype, T.ndim, False, "kruskal_values")
            knl(self.queue, (T.nnz,), None, np.int64(T.nnz),
                                np.int32(w.shape[0]), T.subs[0].data, w.data,
                                *[f.data for f in facs], out.data)
        return out

    # ------------------------------------------------------------------ small dense steps
    def _blocks(self, I):
        nblocks = int(min(max(1, I // 64), 256))
        return nblocks, -(-I // nblocks)

    def _finish(self, partial, nblocks, K, op, dtype):
        out = self.zeros((K,), dtype)
        self._kernel(dtype, None, False, "finish_partial")(self.queue, (K,), None, np.int32(nblocks), np.int32(K), np.int32(op),
                            partial.data, out.data)
        return out.get().astype(np.float64)

    def _cross(self, A, C):
        I, R = A.shape
        nblocks, rpb = self._blocks(I)
        partial = self.zeros((nblocks, R * R), A.dtype)
        if I:
            self._kernel(A.dtype, None, False, "cross_partial")(self.queue, (R * R, nblocks), None, np.int64(I), np.int32(R),
                               np.int64(rpb), A.data, C.data, partial.data)
        return self._finish(partial, nblocks, R * R, 0, A.dtype).reshape(R, R)

    def gram(self, A):
        return self._cross(A, A)

    def _column(self, A, C, op):
        I, R = A.shape
        nblocks, rpb = self._blocks(I)
        partial = self.zeros((nblocks, R), A.dtype)
        if I:
            self._kernel(A.dtype, None, False, "column_partial")(self.queue, (R, nblocks), None, np.int64(I), np.int32(R),
                                np.int64(rpb), np.int32(op), A.data, C.data, partial.data)
        return self._finish(partial, nblocks, R, op, A.dtype)

    def column_norms(self, A, ord=2):
        if ord == 2:
            return np.sqrt(self._column(A, A, 0))
        if ord == np.inf:
            return self._column(A, A, 1)
        if ord == 1:
            return self._column(A, A, 2)
        raise ValueError(f"unsupported norm order {ord!r} (1, 2 or inf)")

    def inner(self, A, B):
        return self._column(A, B, 0)

    def matmul_small(self, A, M):
        I, R = A.shape
        M = np.ascontiguousarray(M, dtype=A.dtype)
        Q = M.shape[1]
        out = self.zeros((I, Q), A.dtype)
        if I:
            Md = self.asarray(M)
            self._kernel(A.dtype, None, False, "matmul_small")(
                self.queue, (Q, I), None, np.int64(I), np.int32(R), np.int32(Q), A.data, Md.data,
                out.data)
        return out

    def scale_columns(self, A, s):
        I, R = A.shape
        if I:
            sd = self.asarray(np.asarray(s), dtype=A.dtype)
            self._kernel(A.dtype, None, False, "scale_columns")(
                self.queue, (R, I), None, np.int64(I), np.int32(R), A.data, sd.data)
        return A

    # --- CP-APR primitives ------------------------------------------------------------
    def _vec_reduce(self, op, A, C, p, n):
        """Reduce ``n`` entries with kernel ``vec_partial`` (sum for ops 0/2, max for 1)."""
        G = int(min(max(1, n), 16384 if self.is_gpu else 256))
        partial = self.zeros((G,), A.dtype)
        self._kernel(A.dtype, None, False, "vec_partial")(
            self.queue, (G,), None, np.int64(n), np.int32(op), A.data, C.data,
            A.dtype.type(p), partial.data)
        part = partial.get().astype(np.float64)
        return float(part.max() if op == 1 else part.sum())

    def _make_apr_kernels(self):
        return OpenCLAprKernels(self)

    def _poisson_data_term(self, T, weights, factors, eps):
        if getattr(T, "streamed", False):
            return T.poisson_data_term(weights, factors, eps)
        if T.nnz == 0:
            return 0.0
        m = self._model_values(T, weights, factors)
        # T.vals[0] is in the order of T.subs[0], the order model_values uses
        return self._vec_reduce(0, T.vals[0], m, eps, T.nnz)

    # --- GCP primitives: backend.gcp (gcp_ops.py; the kernels are in kernels/gcp.cl) -----
    def _make_gcp_kernels(self):
        return gcp_ops.OpenCLGcpKernels(self)

    def info(self):
        d = self.device
        return {"name": self.name, "device": d.name.strip(), "platform": d.platform.name.strip(),
                "fp64": self.fp64, "gpu": self.is_gpu, "options": self.options.set_options(),
                "vec_per_kernel": self.vec or dict(self.VEC)}


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
            be._kernel(A.dtype, None, False, "apr_shift")(
                be.queue, (n,), None, np.int64(n), A.data, Phi.data, A.dtype.type(kappa_tol),
                A.dtype.type(kappa))
        return count

    def _kkt_violation(self, B, Phi):
        if B.size == 0:
            return 0.0
        return self.backend._vec_reduce(1, B, Phi, 0.0, B.size)

    def _multiply_(self, B, Phi):
        be = self.backend
        if B.size:
            be._kernel(B.dtype, None, False, "multiply_inplace")(
                be.queue, (B.size,), None, np.int64(B.size), B.data, Phi.data)
        return B

    def _mu_rows_(self, B, Phi, tol):
        return cpapr_rows.mu_rows(self.backend, B, Phi, tol)

    def _row_solve(self, T, factors, mode, B, method, params):
        return cpapr_rows.row_solve(self.backend, T, factors, mode, B, method, params)
