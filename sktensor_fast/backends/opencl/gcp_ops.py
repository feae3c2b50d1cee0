"""The OpenCL implementation of the GCP primitives of :class:`~sktensor_fast.backends.Backend`.

Everything of a stochastic fit stays on the device: the tensor (uploaded once by ``prepare``),
its sorted linear indices and their bucket table (built on the device by :func:`setup`), the
list of observed zeros of a mask (uploaded once by :func:`setup`), the fixed loss sample, the
factors, the gradients and the optimiser's moments.  Per step only the step key (a scalar) and
the weights (a length-R vector) go to the device; the loss estimate brings back one partial sum
per 1024 samples.

One gradient step (kernels of ``kernels/gcp.cl``; those that take no rank, the set-up of the
sampler, materialised samples, sums of losses and the optimisers' steps one factor at a time,
are in ``kernels/gcp_setup.cl``, a program of their own):

1. ``gcp_draw_terms``: sample j of step key K, drawn with the CPU's counter-based generator (the
   same 64-bit integer arithmetic, ported bit for bit), so the sample of (seed, step) is the
   CPU's sample, whatever the work-group size or the order in which work-items run; then its
   model value and weighted loss derivative y_j;
2. ``gcp_sort_pass`` (one launch per pass, all active modes at once): a stable radix sort of
   the samples by their row of each active mode, :data:`GCP_SORT_BITS` bits of the row per
   pass at most (one pass for modes of up to 256 rows, two up to 65536, three up to 2**24);
   before it ``gcp_sort_count`` counts the pass's digits in each tile of samples (a local
   histogram per tile, no global atomics), and ``gcp_sort_scan`` turns those counts into
   where every tile's samples go (prefix sums over the tiles, one work-group per digit: each
   tile of the pass reads its offsets instead of adding up the counts of every tile before
   it), so a pass is three launches;
3. ``gcp_run_sums`` and ``gcp_run_join``: one work-item per (four columns, segment of
   :data:`RUN_SEGMENT` consecutive sorted positions) adds the contributions of the segment's
   runs of equal rows in increasing sample order, each column on its own; a run that spans segments is added in
   pieces, one per segment, which ``gcp_run_join`` then adds in segment order.  No atomics:
   the gradient is deterministic (the same on every device and in every run).  A row whose
   samples lie in one segment is the sum of its contributions in the order of the CPU kernel
   (which adds them in sample order too), with products formed in the CPU's order; a row with
   more samples (a heavy row of a skewed mode) is that sum regrouped by segments, which
   differs from the CPU's in the last bits.  A heavy row is thus summed by many work-items:
   one work-item per row made the step as slow as the longest row (on an H100, 2.3 of
   2.6 ms of a step with 120,000 samples on a Zipf-skewed NELL-2-shaped tensor).  The
   segment in which a run over several segments ends writes its number to a table by row,
   where the work-item that owns the run (the segment where it starts) reads it.

With the backend option ``gcp_reduction='atomic'`` (:class:`~sktensor_fast.OpenCLOptions`,
``SKTENSOR_FAST_OCL_GCP_REDUCTION=atomic``) steps 2 and 3 are replaced by
``gcp_scatter_atomic``, which adds every contribution into its row atomically: on NVIDIA
devices with the hardware's floating-point reduction (PTX ``red.global.add``, see
:data:`PTX_ATOMICS`), elsewhere with a compare-and-swap loop.  Fewer launches, but the order of
the additions is the device's schedule, so gradients (and fits) are not bitwise reproducible
from run to run; they agree with the deterministic path to rounding.  On an H100 a step took
0.129 ms against 0.196 at 20M nonzeros, but 0.357 against 0.366 at NELL-2's size, whose 22
million adds a step take about as long as the sort and sums they replace.

:meth:`OpenCLGcpKernels.steps` (``run_steps``) runs many steps with no host round trip: per
step, the kernels above then ``gcp_update_all`` (the optimiser's step on every active factor,
moments on the device), each launch enqueued with its arguments set once per call (only the
step's key and number change per step).

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

__all__ = ["OpenCLGcpKernels", "OpenCLGcpState", "ExplicitSampleState", "step_key", "setup",
           "sampled_gradient", "loss_estimate", "sample_gradient", "sample_loss",
           "full_loss_grad", "optimizer_update", "draw"]

# where the stratified sampler's zeros come from (the list of all zeros, computed from the
# linear indices, or rejection) and how many rejections it tries is decided as on the CPU
# (``zero_list_mode`` and ``MAX_ATTEMPTS`` of backends/gcp_plan.py), so that both draw the
# same entries
#: samples per partial sum of a loss (the CPU's LOSS_CHUNK: the same order of additions)
_LOSS_CHUNK = 1024
#: the sort carries sample numbers in 32 bits
_MAX_SAMPLES = 2 ** 31
#: most bits of a row that one pass of the row sort handles (fewer where the device's local
#: memory is too small for the digit counts of a tile)
GCP_SORT_BITS = 8
#: work-items of a group of the row sort, and samples per work-item (a tile of 1024 samples)
_SORT_WG, _SORT_PER = 64, 16
#: work-items of a group of ``gcp_sort_scan`` (at most; fewer where the device allows fewer;
#: 256 made the scans of a 76.9M-nonzero tensor's steps slower on an H100: 0.075 against 0.052 ms)
_SCAN_WG = 64
#: sorted positions per work-item of ``gcp_run_sums`` (a run of equal rows longer than this,
#: or across a boundary, is summed in pieces and joined by ``gcp_run_join``).  Device time of
#: the sums and the join per step on an H100 (76.9M nonzeros, R = 16): 20 -> 0.077 + 0.037 ms,
#: 24 -> 0.072 + 0.033, 28 -> 0.079 + 0.031, 32 -> 0.083 + 0.025
RUN_SEGMENT = 24
#: sorted positions whose contributions a work-item of ``gcp_run_sums`` reads before adding
#: them (GCP_RUN_AHEAD; read when a program is built).  Device time of the sums per step on an
#: H200 (76.9M nonzeros, R = 16): 1 -> 0.092 ms, 2 -> 0.105, 4 -> 0.110, 8 -> 0.146, 16 -> 0.205
#: (the registers of a longer read-ahead cost more than its loads in flight gain)
RUN_AHEAD = 1
#: ``gcp_run_sums`` as a pipeline over its positions (GCP_RUN_PIPE; RUN_AHEAD is then not
#: used): the rows of a position are read while the coordinates and y of the next and the
#: row and sample number of the one after are, instead of the three in a chain
PIPELINE_SUMS = True
#: options added to the build of the GCP program (experiments: e.g. NVIDIA's
#: ``-cl-nv-maxrregcount=64``)
EXTRA_BUILD_OPTIONS = ()
#: registers per work-item the GCP program may use on NVIDIA devices (their OpenCL
#: compiler's ``-cl-nv-maxrregcount``; None: the compiler's choice).  It bounds
#: ``gcp_draw_terms`` (the sampler, the model value and the loss in one kernel), which
#: otherwise takes more, at a cost in work-items resident per multiprocessor; on an H100 at
#: NELL-2's size (76.9M nonzeros, R = 16) its device time per step went 0.100 -> 0.093 ms
#: with 96, and 0.095 with 64, where ``gcp_run_sums`` then lost more (0.085 -> 0.102)
NVIDIA_MAX_REGISTERS = 96
#: ``gcp_draw_terms`` forms its samples' model values with R / 4 work-items per sample
#: (GCP_DRAW_LANES of gcp.cl) where the rank is compiled in, a multiple of four and at most
#: :data:`DRAW_LANES_MAX_RANK` (its local memory: the group's products, 8 (R + 1) bytes a
#: sample in fp64); the same bits as one work-item per sample
DRAW_LANES = True
DRAW_LANES_MAX_RANK = 32
#: ``run_steps`` with a deadline compares the clock with it every this many steps (waiting for
#: the device to finish the steps enqueued so far)
DEADLINE_CHECK_STEPS = 16
#: on NVIDIA devices the atomic scatter adds with the hardware's floating-point reduction
#: (inline PTX ``red.global.add``, which NVIDIA's OpenCL compiler accepts) instead of a
#: compare-and-swap loop on the 64-bit word (which took 7.2 ms a step at 20M nonzeros)
PTX_ATOMICS = True
#: the settings of ``gcp_reduction`` (an OpenCLOptions option)
REDUCTIONS = ("deterministic", "atomic")
#: the optimiser's rules as gcp_update_all numbers them
_RULE_CODES = {"sgd": 0, "adagrad": 1, "adam": 2}


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
        raise TypeError(f"expected the state returned by backend.gcp.setup, got "
                        f"{type(state).__name__}")
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
    return _factors_as(be, factors, weights, T.dtype)


def _factors_as(be, factors, weights, dt):
    """The factors as C-contiguous device arrays of ``dt``, the weights, the rank."""
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
            out.append(f if f.dtype == dt else f.astype(dt))
        else:
            a = np.asarray(f)
            if a.dtype.kind not in "fiub":
                raise TypeError(f"factor {k} must hold real numbers, got dtype {a.dtype}")
            out.append(be.asarray(np.ascontiguousarray(a, dtype=dt)))
    return out, lam, R


# ------------------------------------------------------------------ programs
def _sort_local_bytes(bits, wg, per):
    """Local memory of ``gcp_sort_pass``: the tile's rows and samples, the digit counts of
    every work-item (16 bits), the group's scan and two tables of the digits."""
    tile = wg * per
    pad = tile + (tile - 1) // 32
    return 2 * 4 * pad + 2 * ((1 << bits) * wg + 2 * wg) + 4 * wg + 2 * 4 * (1 << bits)


def _draw_local_bytes(wg, R, N, dtype):
    """Local memory of ``gcp_draw_terms`` with GCP_DRAW_LANES: the group's products (R + 1
    entries a sample) and coordinates (at most 8 bytes each)."""
    return wg * (R + 1) * np.dtype(dtype).itemsize + wg * N * 8


def sort_config(be):
    """``(bits per pass, work-items per group, samples per work-item)`` of the row sort on
    ``be``'s device: at most :data:`GCP_SORT_BITS` bits, fewer where its local memory is too
    small."""
    cfg = getattr(be, "_gcp_sort_config", None)
    if cfg is None:
        wg = _SORT_WG
        while wg > max(1, int(be.max_wg)):
            wg //= 2
        local = int(be.device.local_mem_size)
        bits = GCP_SORT_BITS
        while bits > 1 and _sort_local_bytes(bits, wg, _SORT_PER) > local:
            bits -= 1
        cfg = (bits, wg, _SORT_PER)
        be._gcp_sort_config = cfg
    return cfg


def scan_wg(be):
    """Work-items of a group of ``gcp_sort_scan`` on ``be``'s device: :data:`_SCAN_WG`, or the
    largest power of two the device allows below it."""
    wg = getattr(be, "_gcp_scan_wg", None)
    if wg is None:
        wg = _SCAN_WG
        while wg > max(1, int(be.max_wg)):
            wg //= 2
        be._gcp_scan_wg = wg
    return wg


def atomics_supported(be, dtype):
    """Whether ``be``'s device can run the atomic gradient scatter for ``dtype`` (float64
    needs the extension ``cl_khr_int64_base_atomics``)."""
    if np.dtype(dtype) != np.float64:
        return True
    return "cl_khr_int64_base_atomics" in be.device.extensions


def _reduction(be, dtype):
    """The backend's ``gcp_reduction`` setting, checked against the device."""
    mode = getattr(be, "gcp_reduction", "deterministic")
    if mode == "atomic" and not atomics_supported(be, dtype):
        raise ValueError(f"gcp_reduction='atomic' needs 64-bit atomics "
                         f"(cl_khr_int64_base_atomics) for {np.dtype(dtype)} data, which "
                         f"'{be.device.name.strip()}' lacks; use the default "
                         f"gcp_reduction='deterministic'")
    return mode


def _program_parts(be, dtype, N, R=None):
    """(key, source, options) of the GCP program; ``R``: the rank of the factors the
    kernels will see, compiled in where the backend compiles ranks in
    (``OpenCLBackend.fixed_rank``; the program is then one per rank)."""
    bits, wg, per = sort_config(be)
    rank = be.fixed_rank(R) if R is not None and hasattr(be, "fixed_rank") else None
    swg = scan_wg(be)

    def source():
        def params(prefix, const=""):
            return ", ".join(f"__global {const}VAL_T* {prefix}{k}" for k in range(N))

        def array(name, prefix, const=""):
            names = ", ".join(f"{prefix}{k}" for k in range(N))
            return f"__global {const}VAL_T* {name}[NMODES] = {{{names}}};"

        upd = ", ".join([params("U"), params("G", "const "), params("H"), params("MA"),
                         params("MB")])
        cases = " ".join(f"case {k}: gcp_update_entry(rule, c, lower, i, U{k}, G{k}, H{k}, "
                         f"MA{k}, MB{k}); break;" for k in range(N))
        extra = [f"#define GRAD_PARAMS {params('G')}",
                 f"#define GRAD_ARRAY {array('G', 'G')}",
                 f"#define UPDATE_PARAMS {upd}",
                 f"#define UPDATE_SWITCH switch (k) {{ {cases} }}",
                 f"#define GCP_SORT_BITS {bits}", f"#define GCP_SORT_WG {wg}",
                 f"#define GCP_SORT_PER {per}", f"#define GCP_SCAN_WG {swg}",
                 f"#define GCP_RUN_AHEAD {RUN_AHEAD}"]
        if rank is not None:
            extra.append(f"#define FIXED_RANK {rank}")
        if lanes:
            extra += ["#define GCP_DRAW_LANES 1", f"#define GCP_DRAW_WG {draw_wg}"]
        if pipe:
            extra.append("#define GCP_RUN_PIPE 1")
        if atomics_supported(be, dtype):
            extra.append("#define GCP_ATOMIC_SCATTER 1")
        if ptx:
            extra.append("#define GCP_PTX_ATOMIC 1")
        return be._header(dtype, N, extra=extra) + be._source("gcp.cl")
    opts = [] if np.dtype(dtype) == np.float64 else ["-cl-single-precision-constant"]
    if NVIDIA_MAX_REGISTERS and getattr(be, "is_nvidia", False):
        opts.append(f"-cl-nv-maxrregcount={int(NVIDIA_MAX_REGISTERS)}")
    opts += list(EXTRA_BUILD_OPTIONS)
    pipe = bool(PIPELINE_SUMS)
    draw_wg = be.geometry((1,))[1][0]   # the work-group of the draw's launches
    lanes = bool(DRAW_LANES and rank is not None and rank % 4 == 0
                 and 0 < rank <= DRAW_LANES_MAX_RANK
                 and _draw_local_bytes(draw_wg, rank, N, dtype)
                 <= int(be.device.local_mem_size))
    ptx = bool(PTX_ATOMICS and getattr(be, "is_nvidia", False)
               and getattr(be, "gcp_reduction", "deterministic") == "atomic")
    key = ("gcp", np.dtype(dtype).str, N, bits, wg, per, swg, RUN_AHEAD, ptx)
    if not pipe:
        key += ("no_pipe",)
    if opts:
        key += ("options",) + tuple(opts)
    if rank is not None:
        key += ("rank", rank)
    if lanes:
        key += ("draw_lanes", draw_wg)
    return key, source, opts


#: the kernels of ``kernels/gcp_setup.cl``: they take no rank, and come from a small program
#: of their own, so that a fit whose step's kernels are built for its rank does not build
#: every kernel twice (on an H100 the program of the step's kernels took 1.2-1.9 s to build)
_SETUP_KERNELS = frozenset({"gcp_draw", "gcp_chunk_sums", "gcp_linear_index", "gcp_bucket",
                            "gcp_check_order", "gcp_adam", "gcp_adagrad", "gcp_sgd"})


def _setup_program_parts(be, dtype, N):
    """(key, source, options) of the program of :data:`_SETUP_KERNELS`."""
    def source():
        return be._header(dtype, N) + be._source("gcp_setup.cl")
    opts = [] if np.dtype(dtype) == np.float64 else ["-cl-single-precision-constant"]
    return ("gcp_setup", np.dtype(dtype).str, N) + tuple(opts), source, opts


def _parts(be, dtype, N, name, R):
    if name in _SETUP_KERNELS:
        return _setup_program_parts(be, dtype, N)
    return _program_parts(be, dtype, N, R)


def _kernel(be, dtype, N, name, R=None):
    """The backend's shared kernel ``name``; ``R``: the rank it is launched with (see
    :func:`_program_parts`), None for the kernels that take none."""
    key, source, opts = _parts(be, dtype, N, name, R)
    return be.kernel(key, name, source, opts, what="the GCP kernels")


def _new_kernel(be, dtype, N, name, R=None):
    """A kernel object of its own (not the backend's shared one): its arguments, set once,
    stay until they are set again."""
    key, source, opts = _parts(be, dtype, N, name, R)
    return be.programs.new_kernel(key, name, source, opts, what="the GCP kernels")


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


class _RowSort:
    """The row sort of one set of active modes: its passes, the digit width of every mode, the
    ping-pong buffers of (row, sample) pairs and the digit count table (each pass's region
    written whole by ``gcp_sort_count`` before the pass reads it).

    A mode of ``I`` rows needs ``bits(I - 1)`` bits; every active mode is sorted in the same
    number of passes, the most any of them needs, with its bits shared evenly between them."""

    def __init__(self, be, T, ns, act):
        import pyopencl.array as cla
        q = be.queue
        N = T.ndim
        bits, self.wg, per = sort_config(be)
        self.scan_wg = scan_wg(be)
        self.tile = self.wg * per
        self.bins = 1 << bits
        self.ntiles = -(-ns // self.tile)
        need = [(int(n) - 1).bit_length() for n in T.shape]
        self.npass = max([1] + [-(-b // bits) for b, a in zip(need, act) if a])
        self.dbits = _to_device(be, np.array([-(-b // self.npass) for b in need], np.int32))
        self.rows = [cla.empty(q, (N * ns,), np.int32) for _ in range(2)]
        self.idx = [cla.empty(q, (N * ns,), np.int32) for _ in range(2)]
        self.cnt = cla.empty(q, (self.npass * N * self.ntiles * self.bins,), np.int32)
        #: the digits' totals of the pass being placed (gcp_sort_scan writes them)
        self.tot = cla.empty(q, (N * self.bins,), np.int32)
        self.final = (self.npass - 1) % 2
        #: per mode and row, the segment where the row's run ends (written by gcp_run_sums
        #: for the runs over several segments, read by gcp_run_join), at offsets roff
        self.ends = cla.empty(q, (max(1, sum(int(n) for n in T.shape)),), np.int32)
        self.roff = _to_device(be, np.concatenate([[0], np.cumsum(T.shape)[:-1]])
                               .astype(np.int64))
        #: positions per segment of gcp_run_sums (a run over several is joined in pieces)
        self.seg = RUN_SEGMENT
        self.nseg = max(1, -(-ns // self.seg))
        self._part = None
        self.capacity = ns

    def resize(self, ns):
        """Sort ``ns`` samples (at most the ``ns`` it was built for) with the same buffers:
        the tiles, count regions and segments of ``ns``."""
        if ns > self.capacity:
            raise ValueError(f"{ns} samples for a row sort of {self.capacity}")
        self.ntiles = -(-ns // self.tile)
        self.nseg = max(1, -(-ns // self.seg))

    def partials(self, be, N, R, dtype):
        """gcp_run_sums' pieces of the runs that span segments (kept between steps)."""
        import pyopencl.array as cla
        n = 2 * N * self.nseg * max(R, 1)
        if self._part is None or self._part.size < n or self._part.dtype != dtype:
            self._part = cla.empty(be.queue, (n,), dtype)
        return self._part


def _work_buffers(be, N, dt, ns):
    """The device arrays of a step of ``ns`` samples: coordinates, values, weights, correction
    flags, model values, weighted derivatives and losses, and the loss's partial sums."""
    import pyopencl.array as cla
    q = be.queue
    ns = max(int(ns), 1)
    nch = -(-ns // _LOSS_CHUNK)
    return {"subs": cla.empty(q, (ns, N), np.int32), "x": cla.empty(q, (ns,), dt),
            "w": cla.empty(q, (ns,), dt), "corr": cla.empty(q, (ns,), np.int8),
            "m": cla.empty(q, (ns,), dt), "y": cla.empty(q, (ns,), dt),
            "f": cla.empty(q, (ns,), dt), "part": cla.empty(q, (nch,), dt)}


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
        self._sorts = {}
        self._lam = (None, None)
        self._spare = None
        self._kernels = {}
        self._offsets = {}

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

    def work(self, ns):
        """Buffers of one gradient step (kept between steps)."""
        if self._work is None:
            self._work = _work_buffers(self.backend, self.T.ndim, self.dtype, ns)
        return self._work

    def row_sort(self, act):
        """The :class:`_RowSort` of the active modes ``act`` (kept between steps)."""
        rs = self._sorts.get(act)
        if rs is None:
            rs = _RowSort(self.backend, self.T, self.grad_sampler.n_samples, act)
            self._sorts[act] = rs
        return rs

    def spare_gradients(self, R):
        """A second set of gradient matrices (the fused steps alternate between two)."""
        shapes = [(int(n), R) for n in self.T.shape]
        if self._spare is None or [tuple(g.shape) for g in self._spare] != shapes:
            self._spare = [self.backend.zeros(sh, self.dtype) for sh in shapes]
        return self._spare

    def offsets(self, R, align):
        """``(offsets, sizes, total)`` of ``gcp_update_all`` for factors of rank ``R``: the
        entries of every factor from an offset that is a multiple of ``align`` (device
        arrays), and the work-items in all."""
        got = self._offsets.get((R, align))
        if got is None:
            sizes = [int(n) * R for n in self.T.shape]
            offs = [0]
            for n in sizes:
                offs.append(offs[-1] + -(-n // align) * align)
            got = (_to_device(self.backend, np.array(offs, np.int64)),
                   _to_device(self.backend, np.array(sizes, np.int64)), offs[-1])
            self._offsets[(R, align)] = got
        return got

    def kernels(self, name, count, R=None):
        """``count`` kernel objects ``name`` of this state's own (see :func:`_new_kernel`),
        for factors of rank ``R``."""
        have = self._kernels.setdefault((name, R), [])
        while len(have) < count:
            have.append(_new_kernel(self.backend, self.dtype, self.T.ndim, name, R))
        return have[:count]


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
def _gradient_out(be, T, out, R, dt):
    """The gradient matrices: ``out`` checked, or new zero ones."""
    import pyopencl.array as cla
    N = T.ndim
    if out is None:
        return [be.zeros((T.shape[k], R), dt) for k in range(N)]
    if len(out) != N:
        raise ValueError(f"out has {len(out)} arrays for {N} modes")
    for k, g in enumerate(out):
        if not isinstance(g, cla.Array) or g.context != be.ctx:
            raise TypeError(f"out[{k}] must be a device array of this backend")
        if tuple(g.shape) != (T.shape[k], R) or g.dtype != dt or not g.flags.c_contiguous:
            raise ValueError(f"out[{k}] must be a C-contiguous {dt} array of shape "
                             f"({T.shape[k]}, {R}), got {g.dtype} {tuple(g.shape)}")
    return out


class _Step:
    """The arguments of the kernels of one gradient step (see the module's docstring), for
    the launches of :func:`sampled_gradient` and of :func:`run_steps`."""

    def __init__(self, be, T, state, facs, lam_d, act, R, code, param):
        self.be, self.T, self.state = be, T, state
        self.N, self.R, self.code = T.ndim, R, code
        self.dt = state.dtype
        self.param = self.dt.type(param)
        self.ns = state.grad_sampler.n_samples
        self.work = state.work(self.ns)
        self.act = act
        self.act_buf = state.active_buffer(act)
        self.lam = lam_d
        self.facs = [_buf(be, f) for f in facs]
        self.atomic = _reduction(be, self.dt) == "atomic"
        self.sort = None if self.atomic else state.row_sort(act)

    def kernel(self, name):
        """The backend's shared kernel ``name`` of the program of this step's rank."""
        return _kernel(self.be, self.dt, self.N, name, self.R)

    def draw_terms(self, key, want):
        w = self.work
        return [*self.state.grad_sampler.args(key, self.ns), np.int32(self.R),
                np.int32(self.code), self.param, self.lam.data, *self.facs, np.int32(want),
                w["subs"].data, w["y"].data, w["f"].data]

    def terms(self, want):
        w = self.work
        return [np.int64(self.ns), np.int32(self.R), np.int32(self.code), self.param,
                self.lam.data, *self.facs, w["subs"].data, w["x"].data, w["w"].data,
                w["corr"].data, np.int32(want), w["m"].data, w["y"].data, w["f"].data]

    def sort_count(self, p):
        """gcp_sort_count's arguments before pass ``p``."""
        rs, w = self.sort, self.work
        return [np.int64(self.ns), np.int32(rs.ntiles), np.int32(p), self.act_buf.data,
                rs.dbits.data, w["subs"].data, rs.rows[(p - 1) % 2].data, rs.cnt.data]

    def sort_scan(self, p):
        """gcp_sort_scan's arguments before pass ``p``."""
        rs = self.sort
        return [np.int32(rs.ntiles), np.int32(p), self.act_buf.data, rs.cnt.data,
                rs.tot.data]

    def sort_pass(self, p):
        rs, w = self.sort, self.work
        src = (p - 1) % 2
        return [np.int64(self.ns), np.int32(rs.ntiles), np.int32(p),
                self.act_buf.data, rs.dbits.data, w["subs"].data,
                rs.rows[src].data, rs.idx[src].data, rs.rows[p % 2].data, rs.idx[p % 2].data,
                rs.cnt.data, rs.tot.data]

    def scan_geometry(self):
        rs = self.sort
        return (rs.bins * rs.scan_wg, self.N), (rs.scan_wg, 1)

    def sort_geometry(self):
        rs = self.sort
        return (rs.ntiles * rs.wg, self.N), (rs.wg, 1)

    def sort_launches(self, kernels=None):
        """[(kernel, geometry)] of the row sort: the count, the scan and the pass, pass after
        pass;
        ``kernels``: a callable ``(name, count)`` -> kernel objects whose arguments are set
        here once (the backend's shared kernels with the arguments given at each launch
        otherwise, as ``(kernel, geometry, args)``)."""
        rs = self.sort
        if rs is None:
            return []
        out = []
        if kernels is None:
            for p in range(rs.npass):
                out.append((self.kernel("gcp_sort_count"), self.sort_geometry(),
                            self.sort_count(p)))
                out.append((self.kernel("gcp_sort_scan"), self.scan_geometry(),
                            self.sort_scan(p)))
                out.append((self.kernel("gcp_sort_pass"),
                            self.sort_geometry(), self.sort_pass(p)))
            return out
        counts = kernels("gcp_sort_count", rs.npass)
        scans = kernels("gcp_sort_scan", rs.npass)
        passes = kernels("gcp_sort_pass", rs.npass)
        for p in range(rs.npass):
            counts[p].set_args(*self.sort_count(p))
            scans[p].set_args(*self.sort_scan(p))
            passes[p].set_args(*self.sort_pass(p))
            out += [(counts[p], self.sort_geometry()), (scans[p], self.scan_geometry()),
                    (passes[p], self.sort_geometry())]
        return out

    def scatter(self, grads):
        """gcp_run_sums' arguments (gcp_scatter_atomic's when atomic)."""
        w = self.work
        head = [np.int64(self.ns), np.int32(self.R), self.lam.data, *self.facs,
                w["subs"].data, w["y"].data]
        gb = [_buf(self.be, g) for g in grads]
        if self.atomic:
            return head + [self.act_buf.data] + gb
        rs = self.sort
        part = rs.partials(self.be, self.N, self.R, self.dt)
        return head + [rs.rows[rs.final].data, rs.idx[rs.final].data, self.act_buf.data,
                       np.int32(rs.seg), part.data, rs.ends.data, rs.roff.data] + gb

    def scatter_name(self):
        return "gcp_scatter_atomic" if self.atomic else "gcp_run_sums"

    def scatter_size(self):
        """The index space of the scatter kernel: (columns, samples, modes) for the atomic
        one; (groups of four columns, segments, modes) for gcp_run_sums."""
        if self.atomic:
            return (self.R, self.ns, self.N)
        return (-(-self.R // 4), self.sort.nseg, self.N)

    def join_size(self):
        """The index space of gcp_run_join: (groups of four columns, segments, modes)."""
        return (-(-self.R // 4), self.sort.nseg, self.N)

    def reduce(self, grads):
        """Enqueue the passes of the row sort and the scatter (and join) into ``grads``, once
        the step's weighted derivatives are on the device."""
        be = self.be
        for knl, geometry, args in self.sort_launches():
            knl(be.queue, *geometry, *args)
        be.launch(self.kernel(self.scatter_name()), self.scatter_size(),
                  *self.scatter(grads))
        if not self.atomic:
            be.launch(self.kernel("gcp_run_join"), self.join_size(),
                      *self.join(grads))

    def join(self, grads):
        """gcp_run_join's arguments (None on the atomic path, which has no join)."""
        if self.atomic:
            return None
        rs = self.sort
        return [np.int64(self.ns), np.int32(self.R), rs.rows[rs.final].data,
                self.act_buf.data, np.int32(rs.seg),
                rs.partials(self.be, self.N, self.R, self.dt).data, rs.ends.data,
                rs.roff.data, *[_buf(self.be, g) for g in grads]]


def _enqueue(be, knl, geometry):
    return be.cl.enqueue_nd_range_kernel(be.queue, knl, *geometry)


def sampled_gradient(be, T, state, weights, factors, loss, seed, step, out=None, active=None,
                     with_loss=False):
    _check_tensor(be, T)
    _check_state(be, T, state)
    facs, lam, R = _factors(be, T, factors, weights)
    code, param = loss_code(check_loss(loss))
    N = T.ndim
    act = tuple(active)
    dt = state.dtype
    out = _gradient_out(be, T, out, R, dt)
    for k in range(N):
        if act[k]:
            be.fill_zero(out[k])
    ns = state.grad_sampler.n_samples
    if ns == 0 or R == 0 or not any(act) and not with_loss:
        return out, (0.0 if with_loss else None)
    st = _Step(be, T, state, facs, state.lam_buffer(lam), act, R, code, param)
    work = st.work
    key = step_key(seed, step + 1)
    want = bool(with_loss) and code >= 0
    f = None
    if code >= 0:
        be.launch(st.kernel("gcp_draw_terms"), (ns,), *st.draw_terms(key, want))
        if with_loss:
            f = _sum_chunks(be, T, work["f"], ns, work["part"], chunk=ns)
    else:  # user-defined loss: its derivative in NumPy on the host
        draw(be, T, state.grad_sampler, key, out=work)
        be.launch(st.kernel("gcp_terms"), (ns,), *st.terms(False))
        x = work["x"].get()[:ns].astype(np.float64)
        w = work["w"].get()[:ns].astype(np.float64)
        corr = work["corr"].get()[:ns]
        m = work["m"].get()[:ns].astype(np.float64)
        y = _host_weights(loss, x, w, corr, m)
        work["y"][:ns].set(np.ascontiguousarray(y, dtype=dt))
        if with_loss:
            f = float(np.sum(_host_weights(loss, x, w, corr, m, deriv=False)))
    st.reduce(out)
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
    be.launch(_kernel(be, T.dtype, T.ndim, "gcp_sample_loss", R), (ns,), np.int64(ns), np.int32(R),
              np.int32(code), dt.type(param), _buf(be, lam_d), *[_buf(be, f) for f in facs],
              s["subs"].data, s["x"].data, s["w"].data, s["corr"].data, s["m"].data, s["f"].data)
    if code < 0:
        x = s["x"].get()[:ns].astype(np.float64)
        w = s["w"].get()[:ns].astype(np.float64)
        m = s["m"].get()[:ns].astype(np.float64)
        return float(np.sum(_host_weights(loss, x, w, s["corr"].get()[:ns], m, deriv=False)))
    return _sum_chunks(be, T, s["f"], ns, s["part"])


# ------------------------------------------------------------------ explicit samples
class _Shape:
    """The shape of the factors an explicit sample indexes and their dtype (what a step's
    kernels need of a tensor)."""

    def __init__(self, shape, dtype):
        self.shape = tuple(int(n) for n in shape)
        self.ndim = len(self.shape)
        self.dtype = np.dtype(dtype)


class _SampleCount:
    def __init__(self):
        self.n_samples = 0


class ExplicitSampleState:
    """The device buffers of :func:`sample_gradient` and :func:`sample_loss` for factors of
    one shape and dtype, kept between calls (the distributed backend calls them at every
    step, each process with the part of the draw it owns, a count that varies from step to
    step): the buffers grow to the largest count seen (by a quarter more, in tiles of the row
    sort) and serve every smaller one.  Stands in for :class:`OpenCLGcpState` in
    :class:`_Step`."""

    def __init__(self, be, shape, dtype):
        self.backend = be
        self.T = _Shape(shape, dtype)
        self.dtype = np.dtype(dtype)
        self.grad_sampler = _SampleCount()
        self.capacity = 0
        self._work = None
        self._active = {}
        self._sorts = {}
        self._lam = (None, None)

    active_buffer = OpenCLGcpState.active_buffer
    lam_buffer = OpenCLGcpState.lam_buffer

    def take(self, ns):
        """Make the buffers ready for ``ns`` samples."""
        self.grad_sampler.n_samples = ns
        if ns > self.capacity:
            tile = _SORT_WG * _SORT_PER
            self.capacity = -(-(ns + ns // 4) // tile) * tile
            self._work = None
            self._sorts = {}
        for rs in self._sorts.values():
            rs.resize(ns)

    def work(self, ns):
        if self._work is None:
            self._work = _work_buffers(self.backend, self.T.ndim, self.dtype, self.capacity)
        return self._work

    def row_sort(self, act):
        rs = self._sorts.get(act)
        if rs is None:
            rs = _RowSort(self.backend, self.T, self.capacity, act)
            self._sorts[act] = rs
        rs.resize(self.grad_sampler.n_samples)
        return rs

    def upload(self, sample):
        """Copy the sample ``(subs, x, w, corr)`` (host arrays) into the work buffers."""
        subs, x, w, corr = sample
        ns = int(np.shape(x)[0])
        self.take(ns)
        work = self.work(ns)
        if ns:
            be, dt = self.backend, self.dtype
            for name, a in (("subs", np.asarray(subs).astype(np.int32)),
                            ("x", np.asarray(x, dtype=dt)), ("w", np.asarray(w, dtype=dt)),
                            ("corr", np.asarray(corr).astype(np.int8))):
                be.cl.enqueue_copy(be.queue, work[name].data, np.ascontiguousarray(a))
        return work, ns


def _explicit_state(be, factors):
    """The :class:`ExplicitSampleState` of factors of this shape and dtype on ``be``."""
    import pyopencl.array as cla
    f0 = factors[0]
    dt = np.dtype(f0.dtype) if isinstance(f0, cla.Array) and f0.dtype in (np.float32,
                                                                           np.float64) \
        else np.dtype(np.float64)
    key = (tuple(int(f.shape[0]) for f in factors), dt.str)
    cache = be.__dict__.setdefault("_gcp_explicit", {})
    st = cache.get(key)
    if st is None:
        if len(cache) >= 4:
            cache.clear()
        st = cache[key] = ExplicitSampleState(be, key[0], dt)
    return st


def sample_gradient(be, sample, weights, factors, loss, out=None, active=None,
                    with_loss=False):
    """:meth:`GcpKernels.sample_gradient` on the device: the sample is uploaded (its
    coordinates as 32-bit integers), then the kernels of a drawn step from its model values
    on (``gcp_terms``, the row sort, ``gcp_run_sums`` and ``gcp_run_join``, or the atomic
    scatter); the loss of the sample is summed in one sequence, as the CPU's."""
    import pyopencl.array as cla
    N = len(factors)
    st = _explicit_state(be, factors)
    dt = st.dtype
    facs, lam, R = _factors_as(be, factors, weights, dt)
    act = tuple(active) if active is not None else (True,) * N
    code, param = loss_code(check_loss(loss))
    if out is None or any(not isinstance(g, cla.Array) or g.context != be.ctx
                          or tuple(g.shape) != (st.T.shape[k], R) or g.dtype != dt
                          or not g.flags.c_contiguous for k, g in enumerate(out)):
        out = [be.zeros((st.T.shape[k], R), dt) for k in range(N)]
    for k in range(N):
        if act[k]:
            be.fill_zero(out[k])
    work, ns = st.upload(sample)
    if ns == 0 or R == 0 or not any(act) and not with_loss:
        return out, (0.0 if with_loss else None)
    step = _Step(be, st.T, st, facs, st.lam_buffer(lam), act, R, code, param)
    want = bool(with_loss) and code >= 0
    be.launch(step.kernel("gcp_terms"), (ns,), *step.terms(want))
    f = None
    if code < 0:   # a user-defined loss: its derivative in NumPy on the host
        x, w = sample[1], sample[2]
        corr = np.asarray(sample[3])
        m = work["m"].get()[:ns].astype(np.float64)
        y = _host_weights(loss, np.asarray(x, np.float64), np.asarray(w, np.float64), corr, m)
        be.cl.enqueue_copy(be.queue, work["y"].data, np.ascontiguousarray(y, dtype=dt))
        if with_loss:
            f = float(np.sum(_host_weights(loss, np.asarray(x, np.float64),
                                           np.asarray(w, np.float64), corr, m, deriv=False)))
    elif with_loss:
        f = _sum_chunks(be, st.T, work["f"], ns, work["part"], chunk=ns)
    step.reduce(out)
    return out, f


def sample_loss(be, sample, weights, factors, loss):
    """:meth:`GcpKernels.sample_loss` on the device: ``gcp_sample_loss`` over the uploaded
    sample, summed in chunks of 1024 samples as the CPU's."""
    N = len(factors)
    st = _explicit_state(be, factors)
    dt = st.dtype
    facs, lam, R = _factors_as(be, factors, weights, dt)
    code, param = loss_code(check_loss(loss))
    work, ns = st.upload(sample)
    if ns == 0:
        return 0.0
    be.launch(_kernel(be, dt, N, "gcp_sample_loss", R), (ns,), np.int64(ns), np.int32(R),
              np.int32(code), dt.type(param), _buf(be, st.lam_buffer(lam)),
              *[_buf(be, f) for f in facs], work["subs"].data, work["x"].data,
              work["w"].data, work["corr"].data, work["m"].data, work["f"].data)
    if code < 0:
        m = work["m"].get()[:ns].astype(np.float64)
        return float(np.sum(_host_weights(loss, np.asarray(sample[1], np.float64),
                                          np.asarray(sample[2], np.float64),
                                          np.asarray(sample[3]), m, deriv=False)))
    return _sum_chunks(be, st.T, work["f"], ns, work["part"])


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


def _device_factors_of(be, arrays, dt):
    """Whether ``arrays`` are C-contiguous device arrays of this backend of dtype ``dt``."""
    import pyopencl.array as cla
    return all(isinstance(a, cla.Array) and a.context == be.ctx and a.flags.c_contiguous
               and a.dtype == dt for a in arrays)


def run_steps(be, T, state, weights, factors, loss, seed, first_draw, n_steps, optimizer,
              lower, active, out=None, deadline=None, clock=None,
              check_every=DEADLINE_CHECK_STEPS):
    """``n_steps`` steps of :meth:`GcpKernels.steps` enqueued with no host round trip per step.

    Per step: ``gcp_draw_terms``, the passes of the row sort and ``gcp_run_sums`` (or
    ``gcp_scatter_atomic``), then ``gcp_update_all``: the optimiser's step on every active
    factor with the moments on the device, its coefficients (``optimizer.coefficients``, those
    of the stepwise path) uploaded for a block of steps at a time.  Each kernel object's
    arguments are set once per call; per step only the step's key and number are set.  The
    gradients alternate between ``out`` and a spare set kept in the state (the update of a
    step zeroes the other set for the next one); the last step's gradient ends in ``out``.
    The results are those of the stepwise path (the same kernels in the same order).

    With ``deadline``, the clock is compared with it only every ``check_every`` steps (and
    after the last), after waiting for the device to finish the steps enqueued so far: a fit
    with ``max_time`` may run up to ``check_every - 1`` steps past its deadline, and
    ``steps_done`` is then a multiple of ``check_every``.

    Returns ``(grads, steps_done, timed_out)``, or None when the steps must run one by one
    (a user-defined loss, no samples, rank 0, or factors / moments that are not this
    backend's device arrays of the state's dtype, for which the stepwise path raises).
    """
    code, param = loss_code(loss)
    dt = state.dtype
    R = int(factors[0].shape[1]) if factors else 0
    ns = state.grad_sampler.n_samples
    moments = [a for arrs in optimizer.moments for a in arrs]
    if (code < 0 or ns == 0 or R == 0 or n_steps == 0 or not any(active)
            or not _device_factors_of(be, list(factors) + moments, dt)):
        return None
    facs, lam, _ = _factors(be, T, factors, weights)
    out = _gradient_out(be, T, out, R, dt)
    N = T.ndim
    act = tuple(active)
    st = _Step(be, T, state, facs, state.lam_buffer(lam), act, R, code, param)
    spare = state.spare_gradients(R)
    grads = (out, spare)
    for k in range(N):
        if act[k]:
            be.fill_zero(out[k])

    # kernel objects of this state's own, their arguments set once here
    def kernels(name, count):
        return state.kernels(name, count, R)

    draw_k = kernels("gcp_draw_terms", 1)[0]
    draw_k.set_args(*st.draw_terms(0, False))
    draw_geo = be.geometry((ns,))
    launches = []
    launches += st.sort_launches(kernels)
    scatter = kernels(st.scatter_name(), 2)
    join = None if st.atomic else kernels("gcp_run_join", 2)
    for b in range(2):
        scatter[b].set_args(*st.scatter(grads[b]))
        if join is not None:
            join[b].set_args(*st.join(grads[b]))
    scatter_geo = be.geometry(st.scatter_size())
    join_geo = None if st.atomic else be.geometry(st.join_size())
    update_geo = be.geometry((1,))
    offs, sizes, total = state.offsets(R, update_geo[1][0])
    update = kernels("gcp_update_all", 2)
    update_geo = be.geometry((max(total, 1),))
    rule = optimizer.rule
    mom = list(optimizer.moments) + [[None] * N] * (2 - len(optimizer.moments))
    block = 4096
    t0 = int(optimizer.t)

    def upload_coefficients(s0):
        n = min(block, n_steps - s0)
        c = np.zeros((n, 4), dtype=dt)
        for s in range(n):
            coef = optimizer.coefficients(t0 + s0 + s + 1)
            c[s, :len(coef)] = coef
        coef_d = _to_device(be, c)
        for b in range(2):
            update[b].set_args(np.int64(total), offs.data, sizes.data, st.act_buf.data,
                               np.int32(_RULE_CODES[rule]), coef_d.data, np.int32(0),
                               dt.type(lower), *[_buf(be, u) for u in facs],
                               *[_buf(be, g) for g in grads[b]],
                               *[_buf(be, g) for g in grads[1 - b]],
                               *[_buf(be, a) for a in mom[0]], *[_buf(be, a) for a in mom[1]])
        return coef_d

    done, timed_out = 0, False
    coef_d = None
    for s in range(n_steps):
        if s % block == 0:
            coef_d = upload_coefficients(s)  # noqa: F841 (kept alive while the block runs)
        b = s % 2
        draw_k.set_arg(0, np.uint64(step_key(seed, first_draw + s + 1)))
        _enqueue(be, draw_k, draw_geo)
        for knl, geo in launches:
            _enqueue(be, knl, geo)
        _enqueue(be, scatter[b], scatter_geo)
        if join is not None:
            _enqueue(be, join[b], join_geo)
        update[b].set_arg(6, np.int32(s % block))
        _enqueue(be, update[b], update_geo)
        done = s + 1
        if deadline is not None and (done % check_every == 0 or done == n_steps):
            be.queue.finish()
            if be.decide(clock() > deadline):
                timed_out = True
                break
    if done % 2 == 0:   # the last gradient is in the spare set
        for k in range(N):
            if act[k] and out[k].nbytes:
                be.cl.enqueue_copy(be.queue, out[k].data, spare[k].data,
                                   byte_count=out[k].nbytes)
    optimizer.advance(done)
    return out, done, timed_out


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

    def _sample_gradient(self, sample, weights, factors, loss, out, active, with_loss):
        return sample_gradient(self.backend, sample, weights, factors, loss, out, active,
                               with_loss)

    def _sample_loss(self, sample, weights, factors, loss):
        return sample_loss(self.backend, sample, weights, factors, loss)

    def _optimizer_update(self, rule, factors, grads, moments, coefficients, lower, active):
        return optimizer_update(self.backend, rule, factors, grads, moments, coefficients,
                                lower, active)

    def _steps(self, T, state, weights, factors, loss, seed, first_draw, n_steps, optimizer,
               lower, active, out, deadline, clock):
        """The steps enqueued on the device with no host round trip per step
        (:func:`run_steps`); with a deadline the clock is read every
        :data:`DEADLINE_CHECK_STEPS` steps only.  A user-defined loss (its derivative is
        computed on the host) and factors that are not this backend's device arrays take
        the stepwise path."""
        be = self.backend
        _check_tensor(be, T)
        _check_state(be, T, state)
        res = run_steps(be, T, state, weights, factors, loss, seed, first_draw, n_steps,
                        optimizer, lower, active, out, deadline, clock)
        if res is None:
            return self._stepwise(T, state, weights, factors, loss, seed, first_draw,
                                  n_steps, optimizer, lower, active, out, deadline, clock)
        return res
