"""The OpenCL backend: the same primitives as the CPU backend, run by PyOpenCL kernels.

The tensor is uploaded once by :meth:`OpenCLBackend.prepare` (:mod:`.tensor`): int32
coordinates, the values and the order of the nonzeros by every other mode; the copies of the
nonzeros sorted by each mode, in the chunk-interleaved order the MTTKRP / Φ kernels read, are
built from them on the device, so the kernels read the nonzeros of a mode contiguously and
reduce runs of equal output rows in registers.  Factor matrices live on the device as
``pyopencl.array.Array``; only R x R matrices, length-R vectors and scalars cross to the host
during a fit.

The backend is put together from modules with one job each: :mod:`.device` (which device,
and whether its compiler works), :mod:`.program` (building programs, the program cache),
:mod:`.accumulate` (MTTKRP / Φ / model values and their launch geometry), :mod:`.dense`
(the small dense steps), :mod:`.apr` and :mod:`.gcp_ops` (``backend.apr``, ``backend.gcp``),
:mod:`.tensor` and :mod:`.streamed` (resident and streamed device tensors).  This module holds
the settings, data placement and the program cache.
"""
import collections
import threading

import numpy as np

from ..base import Backend
from ..options import OpenCLOptions
from . import gcp_ops, streamed
from .accumulate import SparseKernels
from .apr import OpenCLAprKernels
from .dense import DenseSteps
from .device import DeviceUnusableError, NoDeviceError, probe_device, select_device
from .program import KernelBuildError, ProgramCache, build_program, header, kernel_source
from .tensor import OpenCLTensor, import_cl

__all__ = ["OpenCLBackend", "OpenCLTensor", "NoDeviceError", "DeviceUnusableError",
           "KernelBuildError", "probe_device", "select_device", "build_program",
           "OpenCLAprKernels"]


class _HostBuffer(np.ndarray):
    """A host array in mapped page-locked memory, holding the OpenCL buffer it maps."""
    buffer = None


class _Done:
    """The event of a transfer of nothing."""

    def wait(self):
        pass


class OpenCLBackend(SparseKernels, DenseSteps, Backend):
    """Kernels written in OpenCL C, run through PyOpenCL on any vendor's device."""

    name = "opencl"

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
        self.programs = ProgramCache(self.ctx)
        self._transient = threading.local()   # to_numpy_transient's buffer, one per thread
        self.is_nvidia = "NVIDIA" in (self.device.vendor or "").upper()
        # PoCL's CPU devices cannot build kernels with 8-wide vectors of doubles (its compiler
        # target changes their ABI: the program builds without the kernel, and PoCL later
        # ends the process), so vec=8 is refused there for float64 (cp_kernel)
        self.double8 = not ((self.device.type & cl.device_type.CPU) and "Portable Computing"
                            in (self.device.platform.name or ""))
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
        # nonzeros per work-item; None: by the tensor's size (lanes_chunk; doc/guide/
        # tuning.rst, "OpenCL nonzeros per work-item")
        self._chunk = options.chunk
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
        # how GCP's sampled gradient adds its contributions into the rows (gcp_ops.py):
        # "deterministic" (sorted by row, in sample order: the CPU's sums) or "atomic"
        # (compare-and-swap loops: fewer launches, not bitwise reproducible)
        self.gcp_reduction = options.gcp_reduction or "deterministic"
        self.requested_options = options

    @property
    def options(self):
        """The settings in force, as an :class:`OpenCLOptions` (the device's defaults filled
        in)."""
        return OpenCLOptions(layout=self.layout, chunk=self.chunk, vec=self.vec,
                             phi=self.phi_variant, wide_chunk=self.wide_chunk,
                             wide_group=self.wide_group, max_tensor_bytes=self.max_tensor_bytes,
                             gcp_reduction=self.gcp_reduction)

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

    # ------------------------------------------------------------------ programs
    def _header(self, dtype, nmodes=None, idx="int", extra=(), factor_t="VAL_T"):
        return header(dtype, nmodes, idx, extra, factor_t)

    def _source(self, name):
        return kernel_source("common.cl", name)

    def kernel(self, key, name, source, options=(), what="kernels"):
        """Kernel ``name`` of the program named ``key``, built from ``source()`` with build
        ``options`` at its first use and kept (:class:`~.program.ProgramCache`): every kernel
        the backend and its parts (``apr``, ``gcp``, the sort, the device tensors) launch
        comes from here."""
        return self.programs.kernel(key, name, source, options, what)

    #: work-items per work-group of the element-wise and small dense kernels
    LAUNCH_WG = 64

    def geometry(self, size):
        """(global, local) sizes for a kernel over the index space ``size`` (1 to 3 dims) whose
        work-items outside ``size`` return at once.  The work-group size is fixed (first
        dimension: the next power of two of its extent, up to :attr:`LAUNCH_WG`; the next one
        takes the rest): left to the driver, it follows the global size, and a compiler that
        specialises kernels on it (PoCL) builds each kernel again for every tensor shape.
        Kept per size (the host's work for it is a good part of a small launch's)."""
        wg = max(1, min(self.LAUNCH_WG, self.max_wg))
        key = (tuple(size), wg)
        cache = self.__dict__.setdefault("_geometries", {})
        got = cache.get(key)
        if got is not None:
            return got
        size = tuple(int(n) for n in size)
        if len(size) == 1:
            local = (wg,)
        else:
            l0 = 1
            while l0 < size[0] and 2 * l0 <= wg:
                l0 *= 2
            local = (l0, max(1, wg // l0)) + (1,) * (len(size) - 2)
        glob = tuple(max(1, -(-n // l)) * l for n, l in zip(size, local))
        if len(cache) > 4096:
            cache.clear()
        cache[key] = glob, local
        return glob, local

    def launch(self, knl, size, *args, queue=None, wait_for=None):
        """Enqueue ``knl`` over ``size`` (see :meth:`geometry`) with arguments ``args``."""
        glob, local = self.geometry(size)
        return knl(queue or self.queue, glob, local, *args, wait_for=wait_for)

    # ------------------------------------------------------------------ device copies
    #: nonzeros per work-item of the "lanes" kernels by default (:attr:`chunk`)
    DEFAULT_CHUNK = 256
    #: ... and on a GPU for a tensor of fewer than FILL_CHUNKS chunks of DEFAULT_CHUNK per
    #: compute unit: more work-items where the default ones would leave the device part idle
    SMALL_CHUNK = 128
    FILL_CHUNKS = 1024

    @property
    def chunk(self):
        """Nonzeros per work-item of the "lanes" kernels: the ``chunk`` option, else
        :attr:`DEFAULT_CHUNK` (a resident tensor on a GPU may take :meth:`lanes_chunk`'s)."""
        return self._chunk or self.DEFAULT_CHUNK

    @chunk.setter
    def chunk(self, value):
        self._chunk = value

    def lanes_chunk(self, nnz):
        """Nonzeros per work-item of the "lanes" kernels over a resident tensor of ``nnz``
        nonzeros: the ``chunk`` option where it is set; on a GPU, :attr:`SMALL_CHUNK` for a
        tensor with fewer than :attr:`FILL_CHUNKS` default chunks per compute unit (Uber's 3.3M
        nonzeros on an H100: the kernel 0.18 -> 0.12 ms a mode; NELL-2's 76.9M keep 256, within
        1 % of 128 there); :attr:`DEFAULT_CHUNK` otherwise.  Never more than ``nnz`` (at
        least 1): a chunk option larger than the tensor would only add empty steps to every
        work-item and padding to every copy."""
        if self._chunk is not None or not self.is_gpu:
            return min(self.chunk, max(1, int(nnz)))
        if int(nnz) // self.DEFAULT_CHUNK >= self.FILL_CHUNKS * int(self.device.max_compute_units):
            return self.DEFAULT_CHUNK
        return self.SMALL_CHUNK

    def wide_chunk_of(self, nnz):
        """Nonzeros per work-item of the "wide" kernel over a tensor of ``nnz`` nonzeros: the
        ``wide_chunk`` option (default 64), never more than ``nnz`` (at least 1)."""
        return min(int(self.wide_chunk), max(1, int(nnz)))

    def _interleave_plan(self, ndim, nnz=0):
        """(mode, chunk) of the chunk-interleaved copies the layout reads, built at prepare
        (for a tensor of ``nnz`` nonzeros)."""
        if self.layout == "lanes":
            return [(m, self.lanes_chunk(nnz)) for m in range(ndim)]
        if self.layout == "wide":
            return [(m, self.wide_chunk_of(nnz)) for m in range(ndim)]
        return []

    def _check_memory(self, X, copies=None):
        idx = 4
        # the uploaded tensor and the orders of the other modes, then the copies the kernels
        # read: chunk-interleaved ("lanes", "wide") or mode-sorted ("lanes-sorted"), one per
        # mode asked for
        row = X.ndim * idx + X.vals.itemsize
        chunk = (self.wide_chunk_of(X.nnz) if self.layout == "wide"
                 else self.lanes_chunk(X.nnz))
        copies = X.ndim if copies is None else int(copies)
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

    def prepare(self, X, format="auto", modes=None):
        self.storage_format(format)
        self._check_dtype(X.dtype)
        self.index_dtype(X.shape)
        modes = self.kernel_modes(X.ndim, modes)
        cap = streamed.plan_streaming(self, X, modes)
        if cap is not None:
            return streamed.StreamedTensor(self, X, cap, modes)
        self._check_memory(X, len(modes))
        try:
            T = OpenCLTensor(self, X, interleave=[
                (m, c) for m, c in self._interleave_plan(X.ndim, X.nnz) if m in modes])
            if self.layout == "lanes-sorted":
                for m in range(1, X.ndim):
                    if m in modes:
                        T.sorted_copy(m)
            return T
        except self.cl.MemoryError as exc:
            raise MemoryError(f"out of device memory while uploading a tensor with {X.nnz} "
                              f"nonzeros to '{self.device.name}': {exc}") from exc

    stream_windows = True

    def stream_window(self, history, X, T, format="auto"):
        """The window of a ``partial_fit`` update built on the device from the history kept
        there and the uploaded batch (:mod:`.window`)."""
        from . import window
        return window.stream_window(self, history, X, T, self.storage_format(format))

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

    def empty(self, shape, dtype):
        """A device array of ``shape``, contents undefined (to be written in full)."""
        return self._empty(shape, self._check_dtype(dtype))

    def zeros(self, shape, dtype):
        import pyopencl.array as cla
        a = cla.empty(self.queue, shape, dtype=self._check_dtype(dtype), allocator=self.allocator)
        return self.fill_zero(a)

    # --- rows of device matrices (the distributed backend's exchanges of factor rows) ---
    def take_rows(self, a, lo, hi):
        """Rows ``lo:hi`` of the C-contiguous device matrix ``a``, copied on the device into
        a new array."""
        import pyopencl.array as cla
        lo, hi = int(lo), int(hi)
        if not 0 <= lo <= hi <= int(a.shape[0]):
            raise ValueError(f"rows {lo}:{hi} of a matrix of {a.shape[0]} rows")
        out = cla.empty(self.queue, (hi - lo,) + tuple(a.shape[1:]), dtype=a.dtype,
                        allocator=self.allocator)
        if out.nbytes:
            row = a.nbytes // max(int(a.shape[0]), 1)
            self.cl.enqueue_copy(self.queue, out.data, a.data, byte_count=out.nbytes,
                                 src_offset=lo * row)
        return out

    def host_buffer(self, shape, dtype):
        """An uninitialised host array that transfers read and write at the bus's speed
        (page-locked: a ``CL_MEM_ALLOC_HOST_PTR`` buffer, mapped; plain memory if the driver
        refuses).  The caller keeps it for reuse."""
        cl = self.cl
        nbytes = max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1)
        if self.is_gpu:
            try:
                buf = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR,
                                nbytes)
                arr, _ = cl.enqueue_map_buffer(self.queue, buf,
                                               cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                               tuple(shape), dtype, is_blocking=True)
                out = arr.view(_HostBuffer)
                out.buffer = buf          # the mapped memory lives as long as the array
                return out
            except (cl.Error, AttributeError):
                pass
        return np.empty(shape, dtype=dtype)

    #: the most bytes :meth:`to_numpy_transient` keeps a page-locked buffer for (per thread;
    #: NVIDIA's driver backs page-locked memory with as much device memory)
    TRANSIENT_MAX = 64 << 20

    def to_numpy_transient(self, arrays):
        """Host copies of device arrays in a page-locked buffer kept for the next call of the
        calling thread (see :meth:`Backend.to_numpy_transient`).

        A download into new host memory costs NVIDIA's driver several times the copy: the
        three factor matrices of a NELL-2-sized model (6.4 MB) took 5.5-5.9 ms into new
        arrays and 0.85 ms into kept ones (H100).  Above :attr:`TRANSIENT_MAX` bytes in all,
        or for arrays that are not contiguous device arrays, this is :meth:`to_numpy`.
        """
        import pyopencl.array as cla
        sizes = [-(-int(a.nbytes) // 64) * 64 for a in arrays
                 if isinstance(a, cla.Array) and a.flags.c_contiguous]
        total = sum(sizes)
        if len(sizes) != len(arrays) or total > self.TRANSIENT_MAX:
            return [self.to_numpy(a) for a in arrays]
        local = self._transient
        buf = getattr(local, "buffer", None)
        if buf is None or buf.nbytes < total:
            buf = local.buffer = self.host_buffer((max(total, 1),), np.uint8)
        base = np.asarray(buf)   # a plain ndarray view (its base keeps the mapping alive)
        out, events, off = [], [], 0
        for a, size in zip(arrays, sizes):
            view = base[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
            if a.nbytes:
                events.append(self.cl.enqueue_copy(self.queue, view, a.data,
                                                   is_blocking=False))
            out.append(view)
            off += size
        if events:
            self.cl.wait_for_events(events)
        return out

    def download_into(self, a, out):
        """Copy the device array ``a`` into the C-contiguous host array ``out`` (its size);
        returns when the copy is done."""
        if a.nbytes != out.nbytes:
            raise ValueError(f"{a.nbytes} device bytes into a host array of {out.nbytes}")
        if out.nbytes:
            self.cl.enqueue_copy(self.queue, out, a.data, is_blocking=True)
        return out

    def download_start(self, a, out):
        """Enqueue the copy of the device array ``a`` into the C-contiguous host array ``out``
        (its size) without waiting; returns the transfer's event (``.wait()`` for it).  The
        caller keeps ``out`` alive until then."""
        if a.nbytes != out.nbytes:
            raise ValueError(f"{a.nbytes} device bytes into a host array of {out.nbytes}")
        if not out.nbytes:
            return _Done()
        return self.cl.enqueue_copy(self.queue, out, a.data, is_blocking=False)

    def add_(self, A, B):
        """``A += B`` for device arrays of one shape and dtype (enqueued); returns ``A``."""
        if tuple(A.shape) != tuple(B.shape) or A.dtype != B.dtype:
            raise ValueError(f"adding an array of shape {tuple(B.shape)} ({B.dtype}) to one "
                             f"of shape {tuple(A.shape)} ({A.dtype})")
        n = int(np.prod(A.shape))
        if n:
            self.launch(self.dense_kernel(A.dtype, "add_into"), (n,), np.int64(n),
                        np.int64(0), A.data, B.data)
        return A

    def tensor_room(self):
        """Bytes of device memory the resident tensors may take together: the
        ``max_tensor_bytes`` cap where set, else 90 % of the device's memory (the bound
        :func:`~.streamed.plan_streaming` streams a single tensor above)."""
        if self.max_tensor_bytes is not None:
            return int(self.max_tensor_bytes)
        return int(0.9 * int(self.device.global_mem_size))

    def upload_from(self, host, dtype=None):
        """A new device array holding the C-contiguous host array ``host``."""
        import pyopencl.array as cla
        out = cla.empty(self.queue, host.shape, dtype=host.dtype, allocator=self.allocator)
        if out.nbytes:
            self.cl.enqueue_copy(self.queue, out.data, host, is_blocking=True)
        return out

    def upload_around(self, host, part, lo, hi, wait=True, out=None):
        """A new device matrix (or ``out``, a device array of ``host``'s shape and dtype)
        holding ``host`` (C-contiguous) but for its rows ``lo:hi``,
        which come from the device matrix ``part`` (those rows already on the device: copied
        there, not uploaded again).  Returns when the uploads are done; with ``wait`` False
        at once, the uploads in flight (kept with the small ones, :meth:`_upload_async`):
        ``host`` must then not change before a later transfer of the queue has waited."""
        import pyopencl.array as cla
        lo, hi = int(lo), int(hi)
        n = int(host.shape[0])
        if not 0 <= lo <= hi <= n or tuple(part.shape) != (hi - lo,) + tuple(host.shape[1:]):
            raise ValueError(f"rows {lo}:{hi} of {n} from a device matrix of shape "
                             f"{tuple(part.shape)}")
        if part.dtype != host.dtype:
            raise TypeError(f"device rows of {part.dtype} for a host matrix of {host.dtype}")
        if out is None:
            out = cla.empty(self.queue, host.shape, dtype=host.dtype, allocator=self.allocator)
        elif tuple(out.shape) != tuple(host.shape) or out.dtype != host.dtype \
                or not out.flags.c_contiguous:
            raise ValueError(f"a device array of shape {tuple(out.shape)} ({out.dtype}) to "
                             f"hold a host matrix of shape {host.shape} ({host.dtype})")
        row = host.nbytes // max(n, 1)
        if part.nbytes:
            self.cl.enqueue_copy(self.queue, out.data, part.data, byte_count=part.nbytes,
                                 dst_offset=lo * row)
        ev = []
        if lo:
            ev.append(self.cl.enqueue_copy(self.queue, out.data, host[:lo],
                                           is_blocking=False))
        if hi < n:
            ev.append(self.cl.enqueue_copy(self.queue, out.data, host[hi:],
                                           dst_offset=hi * row, is_blocking=False))
        if ev and wait:
            self.cl.wait_for_events(ev)
        elif ev:
            pending = self.__dict__.setdefault("_pending_uploads", collections.deque())
            pending.extend(ev)
            while len(pending) > self.PENDING_UPLOADS:
                pending.popleft()
        return out

    # --- CP-APR primitives: backend.apr (apr.py; the row solvers are in cpapr_rows.py) ---
    def _make_apr_kernels(self):
        return OpenCLAprKernels(self)

    # --- GCP primitives: backend.gcp (gcp_ops.py; the kernels are in kernels/gcp.cl) -----
    def _make_gcp_kernels(self):
        return gcp_ops.OpenCLGcpKernels(self)

    def info(self):
        d = self.device
        return {"name": self.name, "device": d.name.strip(), "platform": d.platform.name.strip(),
                "fp64": self.fp64, "gpu": self.is_gpu, "options": self.options.set_options(),
                "vec_per_kernel": self.vec or dict(self.VEC)}

