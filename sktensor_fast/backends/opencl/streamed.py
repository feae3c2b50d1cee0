"""Tensors larger than the device's memory (or a set cap) streamed through it in blocks.

A resident :class:`~sktensor_fast.backends.opencl.tensor.OpenCLTensor` keeps the nonzeros on the
device once per mode.  When that does not fit (the device's memory, or the cap set by
``SKTENSOR_FAST_OCL_MAX_TENSOR_BYTES`` / ``OpenCLBackend(max_tensor_bytes=...)``), ``prepare``
returns a :class:`StreamedTensor` instead, in the spirit of BLCO's out-of-memory mode:

- on the host, per mode, the nonzeros sorted by that mode (the order of the resident copies),
  cut into blocks of at most ``block_nnz`` nonzeros; a cut falls on a row boundary unless one
  row alone holds more than a block.  A block keeps the tensor's coordinates and is stored in
  the order the MTTKRP / Φ kernels read (chunk-interleaved for the ``lanes`` and ``wide``
  layouts), so the backend's kernels read it as a tensor of the full shape whose nonzeros lie
  in the rows ``r0:r1``;
- the block size: when one mode's nonzeros fit within the cap, a block is a whole mode (a
  cap of a quarter of the resident need holds one mode of a 3-way tensor): MTTKRP / Φ then run
  as on the resident tensor, one launch per call, on one upload of the mode.  Otherwise
  ``block_nnz`` is about an eighth of the cap;
- on the device, ``K`` slots of ``block_nnz`` nonzeros (all the tensor memory used: the cap
  bounds ``K * block_nnz * (4 * N + itemsize)``; with blocks an eighth of the cap ``K`` is 8
  unless the cap is tiny).  A pass over the blocks of a mode uses the blocks
  already on the device and uploads the others on a second command queue, so that uploads
  overlap the kernels of earlier blocks (events order the upload into a slot after the kernel
  that last read it).  When a mode has at most ``K`` blocks they all stay on the device until
  another mode needs the slots: CP-APR's inner iterations, which compute Φ of one mode again
  and again, then upload the mode once per outer iteration.  A mode with more blocks keeps its
  first ``K - 2`` on the device and streams the rest through the two other slots alternately
  (double buffering);
- MTTKRP / Φ of mode ``n``: the output is zeroed once, then every block's kernel writes the
  rows of its nonzeros into it directly (no scratch rows and no copies of ``B``); a row cut
  between two blocks keeps the earlier blocks' partial sum in a one-row carry that is added
  back after the next block's kernel.  The Poisson data term and the model values go through
  the mode-0 blocks the same way.

- the host blocks: in page-locked memory (OpenCL buffers allocated with
  ``CL_MEM_ALLOC_HOST_PTR``), which the device copies at the bus's speed, when they fit beside
  the cap in the device's memory: NVIDIA's driver backs every such buffer with as much device
  memory (15 GiB of them took 15.4 GB of an H100's).  Larger ones stay in plain memory and go
  to the device through the backend's two page-locked staging buffers, the host filling one
  while the device copies the other (on an H100: 50 GB/s from page-locked memory, 6.6 GB/s
  from plain memory copied directly).

Streaming serves CP-ALS and CP-APR's multiplicative updates (``solver="mu"``).  The CP-APR
Newton solvers and GCP read the nonzeros in other ways and raise ``NotImplementedError`` on a
streamed tensor.
"""
import os

import numpy as np

from ... import _threads
from ..._native import _hostcopy
from .tensor import (DeviceTensor, _copy_fill, describe, host_orders, import_cl, narrow_subs,
                     staging)

__all__ = ["StreamedTensor", "ENV_MAX_TENSOR_BYTES", "parse_max_bytes", "resident_bytes",
           "plan_streaming", "pin_host_blocks"]

#: environment variable: the default cap of the device memory a tensor may use, in bytes
#: (suffixes K, M, G for powers of 1024); a tensor whose resident copies need more is streamed
ENV_MAX_TENSOR_BYTES = "SKTENSOR_FAST_OCL_MAX_TENSOR_BYTES"

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_max_bytes(value, what="max_tensor_bytes"):
    """A byte count from an int or a string such as ``"3000000"``, ``"1.5e9"``, ``"512M"``,
    ``"2G"`` (None stays None).  Raises ValueError naming ``what`` otherwise."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{what} must be a number of bytes, got {value!r}")
    if isinstance(value, (int, np.integer)):
        n = int(value)
    else:
        text = str(value).strip().upper().removesuffix("B").removesuffix("I")
        mult = _SUFFIX.get(text[-1:], None) if text[-1:].isalpha() else 1
        if mult is None:
            raise ValueError(f"{what} must be a number of bytes (optionally with K, M or G), "
                             f"got {value!r}")
        num = text[:-1] if text[-1:].isalpha() else text
        try:
            n = int(float(num) * mult)
        except ValueError:
            raise ValueError(f"{what} must be a number of bytes (optionally with K, M or G), "
                             f"got {value!r}") from None
    if n <= 0:
        raise ValueError(f"{what} must be positive, got {value!r}")
    return n


def default_max_bytes():
    """The cap given by the environment (None when unset)."""
    return parse_max_bytes(os.environ.get(ENV_MAX_TENSOR_BYTES) or None, ENV_MAX_TENSOR_BYTES)


def _chunk_of(backend, nnz=None):
    """Nonzeros per chunk of the copies the backend's layout reads (0: mode-sorted); for a
    tensor of ``nnz`` nonzeros, the chunk its resident copies would have (the same sums)."""
    if backend.layout == "lanes":
        return int(backend.chunk if nnz is None else backend.lanes_chunk(nnz))
    if backend.layout == "wide":
        return int(backend.wide_chunk if nnz is None else backend.wide_chunk_of(nnz))
    return 0


def resident_bytes(backend, X, ncopies=None):
    """Device bytes of the resident tensor: the uploaded nonzeros, their orders by the other
    modes and one copy for the kernels per mode (``ncopies`` of them: all modes when None)
    (the estimate ``prepare`` checks)."""
    row = X.ndim * 4 + X.vals.itemsize
    chunk = _chunk_of(backend, X.nnz) or backend.lanes_chunk(X.nnz)
    ncopies = X.ndim if ncopies is None else int(ncopies)
    return X.nnz * row + (X.ndim - 1) * X.nnz * 4 + ncopies * (X.nnz + chunk) * row


def plan_streaming(backend, X, modes=None):
    """The cap to stream ``X`` under, or None when the resident tensor fits: the backend's
    ``max_tensor_bytes`` when set, else half the device's memory when the resident copies
    (of ``modes``: all when None) need more than 90% of it or one copy is larger than the
    largest allocation."""
    if X.nnz == 0:
        return None
    cap = getattr(backend, "max_tensor_bytes", None)
    need = resident_bytes(backend, X, None if modes is None else len(modes))
    if cap is not None:
        return cap if need > cap else None
    total = int(backend.device.global_mem_size)
    per_copy = (X.nnz + (_chunk_of(backend, X.nnz) or backend.lanes_chunk(X.nnz))) * X.ndim * 4
    if need > 0.9 * total or per_copy > int(backend.device.max_mem_alloc_size):
        return total // 2
    return None


class _Rows:
    """``T.subs[m]`` / ``T.vals[m]`` of a block view: the slot arrays for its one mode."""

    def __init__(self, mode, arr):
        self.mode, self.arr = mode, arr

    def __getitem__(self, mode):
        if mode != self.mode:     # pragma: no cover - the kernels ask for the block's mode
            raise KeyError(mode)
        return self.arr


class _BlockView(DeviceTensor):
    """One uploaded block presented as a tensor of ``T``'s shape whose nonzeros are the
    block's (what the backend's MTTKRP / Φ / model-value kernels read; they write only the
    rows ``r0:r1`` the block holds)."""

    def __init__(self, T, blk, slot, nnz):
        self.backend = T.backend
        self.shape = T.shape
        self.ndim = T.ndim
        self.nnz = nnz
        self.dtype = T.dtype
        self.idx_dtype = T.idx_dtype
        self.chunk = T.chunk
        subs, vals = slot
        self.subs = _Rows(blk.mode, subs)
        self.vals = _Rows(blk.mode, vals)
        self._slot = slot

    def interleaved_copy(self, mode, chunk):
        if chunk != self.chunk:   # pragma: no cover - the layout changed after prepare
            raise RuntimeError(f"the streamed tensor was laid out for chunks of {self.chunk} "
                               f"nonzeros, the kernel asks for {chunk}: prepare it again")
        return self._slot


class _HostBlock:
    __slots__ = ("mode", "r0", "r1", "nnz", "padded", "subs", "vals", "shared")

    @property
    def rows(self):
        return self.r1 - self.r0


def pin_host_blocks(is_gpu, host_bytes, device_bytes, cap, share):
    """Whether host blocks of ``host_bytes`` in all are page-locked by default: on a GPU, when
    they fit within ``share`` of the device memory that a tensor capped at ``cap`` leaves (a
    driver may back page-locked OpenCL buffers with as much device memory)."""
    return bool(is_gpu) and host_bytes <= share * (device_bytes - cap)


class _OrderedCoords:
    """Coordinates of one mode in a mode's order, read where asked (``coords[i]`` is
    ``subs[order[i], mode]``) instead of gathered whole: cutting blocks reads a few."""

    def __init__(self, subs, order, mode):
        self.subs, self.order, self.mode = subs, order, mode
        self.shape = (subs.shape[0],)

    def __getitem__(self, i):
        return self.subs[i if self.order is None else self.order[i], self.mode]


def _block_cuts(coords, block_nnz):
    """(start, stop) of consecutive blocks over the sorted ``coords`` (an array or anything
    indexed by position with a ``shape``): at most ``block_nnz`` each, cut at the start of a
    row unless the row alone fills a block."""
    n = coords.shape[0]
    cuts = []
    start = 0
    while start < n:
        stop = min(start + block_nnz, n)
        if stop < n:
            row = coords[stop]
            lo, hi = start, stop     # the first position in start:stop + 1 of ``row``
            while lo < hi:
                mid = (lo + hi) // 2
                if coords[mid] < row:
                    lo = mid + 1
                else:
                    hi = mid
            if lo > start:
                stop = lo
        cuts.append((start, stop))
        start = stop
    return cuts


class StreamedTensor(DeviceTensor):
    """A sparse tensor kept on the host and streamed through an OpenCL device in blocks.

    Built by ``OpenCLBackend.prepare`` when the resident copies would need more than the
    device memory allowed for the tensor (see the module notes).

    Attributes
    ----------
    shape, ndim, nnz, dtype, norm_sq, idx_dtype
        As for the resident tensor.
    cap : int
        The device bytes the tensor may use.
    block_nnz : int
        Nonzeros per device slot.
    nslots : int
        Device slots (``nslots * block_nnz`` nonzeros fit within ``cap``).
    blocks : list of list
        Per mode, the host blocks (rows ``r0:r1``, ``nnz``).
    """

    streamed = True

    #: slots the cap is divided into (fewer when the cap holds fewer blocks of one chunk)
    SLOTS = 8

    #: host blocks in page-locked memory (buffers allocated with CL_MEM_ALLOC_HOST_PTR and
    #: mapped once), which GPU drivers copy asynchronously; None: on GPU devices only, and only
    #: when they fit within :data:`PINNED_SHARE` of the device memory the cap leaves (NVIDIA's
    #: driver backs every such buffer with as much device memory: 15 GiB of page-locked host
    #: buffers took 15.4 GB of an H100's memory)
    PINNED = None
    PINNED_SHARE = 0.8
    #: blocks in plain memory uploaded through the backend's two page-locked staging buffers
    #: (a compiled parallel copy into one while the device copies the other); None: on GPUs
    STAGED = None
    #: bytes of each staging buffer (the resident tensor's upload uses the same)
    STAGE_BYTES = 32 << 20

    def __init__(self, backend, X, cap, modes=None):
        cl = import_cl()
        import pyopencl.array as cla
        describe(self, backend, X)
        self.cap = int(cap)
        self.chunk = _chunk_of(backend, self.nnz)
        row = self.ndim * 4 + self.dtype.itemsize
        step = self.chunk or 1
        if self.cap < 2 * step * row:
            raise ValueError(
                f"max_tensor_bytes={self.cap} is too small to stream the tensor: two blocks of "
                f"{step} nonzeros (one chunk) need {2 * step * row} bytes on the device")
        max_alloc = int(backend.device.max_mem_alloc_size)
        largest = max(max_alloc // (self.ndim * 4) // step * step, step)
        whole = -(-self.nnz // step) * step          # one mode's nonzeros, padded
        if whole * row <= self.cap and whole <= largest:
            # a whole mode fits: one block per mode, as many modes on the device as the cap
            # holds (CP-APR's inner iterations then run the resident kernels on one upload)
            block = whole
        else:
            block = min(max(self.cap // (self.SLOTS * row) // step * step, step), largest)
        self.block_nnz = int(min(block, whole))
        #: the modes whose blocks are kept (MTTKRP / Φ of the others raise)
        self.modes = tuple(range(self.ndim)) if modes is None else tuple(sorted(set(modes)))
        self._cl = cl
        self._pinned = (bool(self.PINNED) if self.PINNED is not None else
                        pin_host_blocks(backend.is_gpu, len(self.modes) * whole * row,
                                        int(backend.device.global_mem_size), self.cap,
                                        self.PINNED_SHARE))
        self._staged = backend.is_gpu if self.STAGED is None else bool(self.STAGED)
        self._maps = []
        nt = _threads.get_num_threads()
        subs32 = narrow_subs(X, nt)
        vals = np.ascontiguousarray(X.vals)
        orders = host_orders(subs32, self.shape, nt)
        self.blocks = []
        for mode in range(self.ndim):
            if mode not in self.modes:
                self.blocks.append(None)
                continue
            order = orders[mode]
            mode_blocks = []
            for start, stop in _block_cuts(_OrderedCoords(subs32, order, mode),
                                           self.block_nnz):
                blk = self._host_block(mode, subs32, vals, order, start, stop, nt)
                # a row cut between this block and the one before (a row alone fills a block)
                blk.shared = bool(mode_blocks) and mode_blocks[-1].r1 - 1 == blk.r0
                mode_blocks.append(blk)
            self.blocks.append(mode_blocks)
        del subs32, orders
        q = backend.queue
        n_slot = self.block_nnz
        # two slots at least when a mode has more blocks than slots (double buffering)
        least = 1 if max(self.nblocks) <= 1 else 2
        K = max(least, min(self.cap // (n_slot * row), sum(self.nblocks)))
        self._slots = [(cla.empty(q, (n_slot, self.ndim), self.idx_dtype),
                        cla.empty(q, (n_slot,), self.dtype)) for _ in range(K)]
        # uploads run on their own queue, so that they overlap the kernels of other slots
        self._tq = cl.CommandQueue(backend.ctx)
        self._done = [None] * K        # per slot: the end of the last kernel that read it
        self._holder = [None] * K      # per slot: the (mode, block) it holds
        self._last_use = [0] * K
        self._clock = 0
        #: blocks uploaded (and their bytes) since the tensor was built
        self.uploads = 0
        self.upload_bytes = 0

    def _host_block(self, mode, subs32, vals, order, start, stop, num_threads):
        """Nonzeros ``start:stop`` of the mode's order as a host block, gathered and stored
        in the order the kernels read (a compiled threaded pass, which also zeroes the
        padding)."""
        b = _HostBlock()
        b.mode = mode
        b.nnz = int(stop - start)
        first, last = (start, stop - 1) if order is None else (order[start], order[stop - 1])
        b.r0 = int(subs32[first, mode])
        b.r1 = int(subs32[last, mode]) + 1
        b.padded = -(-b.nnz // self.chunk) * self.chunk if self.chunk else b.nnz
        hs = self._host_array((b.padded, self.ndim), np.int32)
        hv = self._host_array((b.padded,), self.dtype)
        _hostcopy.interleave_block(subs32, vals, order, start, stop, self.chunk, hs, hv,
                                   num_threads)
        b.subs, b.vals = hs, hv
        return b

    def _host_array(self, shape, dtype):
        """A host array (its contents are written by the caller), page-locked when
        ``_pinned`` (plain memory if the driver refuses)."""
        if self._pinned:
            cl = self._cl
            nbytes = max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1)
            try:
                buf = cl.Buffer(self.backend.ctx,
                                cl.mem_flags.READ_ONLY | cl.mem_flags.ALLOC_HOST_PTR, nbytes)
                arr, _ = cl.enqueue_map_buffer(self.backend.queue, buf,
                                               cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                               shape, dtype, is_blocking=True)
                self._maps.append(buf)
                return arr
            except cl.Error:
                self._pinned = False
        return np.empty(shape, dtype=dtype)

    # ------------------------------------------------------------------ properties
    @property
    def nblocks(self):
        """Blocks per mode."""
        return [0 if b is None else len(b) for b in self.blocks]

    @property
    def nslots(self):
        return len(self._slots)

    @property
    def nbytes(self):
        """Device bytes of the slots (the tensor's device memory)."""
        return sum(s.nbytes + v.nbytes for s, v in self._slots)

    @property
    def staged(self):
        """Whether plain host blocks go to the device through page-locked staging buffers."""
        return self._staged and not self._pinned

    @property
    def pinned(self):
        """Whether the host blocks are page-locked."""
        return self._pinned

    @property
    def host_nbytes(self):
        return sum(b.subs.nbytes + b.vals.nbytes for bl in self.blocks if bl is not None
                   for b in bl)

    def require_resident(self, what):
        raise NotImplementedError(
            f"{what} on a tensor streamed through the OpenCL device (its resident copies need "
            f"more than max_tensor_bytes={self.cap}): streaming serves CPALS and CPAPR with "
            f"solver='mu'. Raise {ENV_MAX_TENSOR_BYTES} (or the backend's max_tensor_bytes) "
            f"or use device='cpu'")

    @property
    def subs(self):
        self.require_resident("reading the nonzeros by mode (CPAPR's Newton solvers, GCP)")

    @property
    def vals(self):
        self.require_resident("reading the nonzeros by mode (CPAPR's Newton solvers, GCP)")

    @property
    def orders(self):
        self.require_resident("reading the nonzeros by mode (CPAPR's Newton solvers, GCP)")

    def interleaved_copy(self, mode, chunk):
        self.require_resident("a resident copy of the nonzeros")

    sorted_copy = interleaved_copy

    def __repr__(self):
        return (f"StreamedTensor(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype.name}, "
                f"blocks per mode {self.nblocks} of up to {self.block_nnz} nonzeros, "
                f"device='{self.backend.device.name.strip()}')")

    # ------------------------------------------------------------------ streaming
    def _plan(self, mode):
        """Slot of every block of ``mode`` for one pass, and whether it must be uploaded."""
        if self.blocks[mode] is None:
            raise RuntimeError(f"the streamed tensor was prepared for the kernels of modes "
                               f"{list(self.modes)} only, not of mode {mode}")
        blocks = self.blocks[mode]
        B, K = len(blocks), len(self._slots)
        keep = B if B <= K else K - 2
        where = {h: s for s, h in enumerate(self._holder) if h is not None}
        slots = [None] * B
        for b in range(keep):
            slots[b] = where.get((mode, b))
        taken = {s for s in slots if s is not None}
        # free slots first, then the least recently used
        free = sorted((s for s in range(len(self._slots)) if s not in taken),
                      key=lambda s: (self._holder[s] is not None, self._last_use[s]))
        free = iter(free)
        for b in range(keep):
            if slots[b] is None:
                slots[b] = next(free)
        if B > keep:
            pair = (next(free), next(free))
            for b in range(keep, B):
                slots[b] = pair[(b - keep) % 2]
        # a block is on the device when its slot holds it and no earlier block of this pass
        # is put there first
        first = {}
        for b, s in enumerate(slots):
            first.setdefault(s, b)
        upload = [first[slots[b]] != b or self._holder[slots[b]] != (mode, b)
                  for b in range(B)]
        return slots, upload

    def _upload(self, mode, b, s):
        cl = self._cl
        blk = self.blocks[mode][b]
        wait = [self._done[s]] if self._done[s] is not None else None
        subs, vals = self._slots[s]
        st = (staging(self.backend, self.STAGE_BYTES)
              if self._staged and not self._pinned else None)
        if st is None:
            ev = [cl.enqueue_copy(self._tq, subs.data, blk.subs, is_blocking=False,
                                  wait_for=wait),
                  cl.enqueue_copy(self._tq, vals.data, blk.vals, is_blocking=False,
                                  wait_for=wait)]
        else:
            # through the staging buffers: the host fills one while the device copies the
            # other, once the kernel that last read the slot is done
            if wait:
                cl.wait_for_events(wait)
            with st.lock:
                ev = [e for e in (
                    st.upload(self._tq, subs.data, blk.padded, 4 * self.ndim,
                              _copy_fill(blk.subs)),
                    st.upload(self._tq, vals.data, blk.padded, self.dtype.itemsize,
                              _copy_fill(blk.vals))) if e is not None]
        self._tq.flush()
        self._holder[s] = (mode, b)
        self.uploads += 1
        self.upload_bytes += blk.subs.nbytes + blk.vals.nbytes
        return ev

    def _stream(self, mode):
        """Yield (host block, device view) for every block of ``mode``; the view's data are on
        the device when the backend's queue reaches the next command."""
        cl = self._cl
        q = self.backend.queue
        blocks = self.blocks[mode]
        slots, upload = self._plan(mode)
        pending = {}
        first_use = {}
        for b, s in enumerate(slots):
            first_use.setdefault(s, b)
        # uploads into slots that no earlier block of this pass reads: all at once
        for b, s in enumerate(slots):
            if upload[b] and first_use[s] == b:
                pending[b] = self._upload(mode, b, s)
        # the next block of this pass reading the slot of block b
        next_same, seen = [None] * len(slots), {}
        for b in range(len(slots) - 1, -1, -1):
            next_same[b] = seen.get(slots[b])
            seen[slots[b]] = b
        for b, blk in enumerate(blocks):
            s = slots[b]
            ev = pending.pop(b, None)
            if ev is not None:
                cl.enqueue_barrier(q, wait_for=ev)
            yield blk, _BlockView(self, blk, self._slots[s], blk.padded)
            self._done[s] = cl.enqueue_marker(q)
            self._clock += 1
            self._last_use[s] = self._clock
            q.flush()
            nxt = next_same[b]
            if nxt is not None and upload[nxt]:
                # the next block of this pass that reads slot s, now that it is free
                pending[nxt] = self._upload(mode, nxt, s)

    def _rows_copy(self, A, r0, r1):
        """Rows ``r0:r1`` of the device array ``A`` as a new (pooled) device array."""
        be = self.backend
        import pyopencl.array as cla
        R = int(A.shape[1])
        out = cla.empty(be.queue, (r1 - r0, R), A.dtype, allocator=be.allocator)
        if out.nbytes:
            self._cl.enqueue_copy(be.queue, out.data, A.data, byte_count=out.nbytes,
                                  src_offset=r0 * R * A.dtype.itemsize)
        return out

    def accumulate(self, factors, mode, B, eps, out, before=None):
        """MTTKRP (``B`` None) or Φ of ``mode``, block by block, into ``out``; ``before``
        called before the first block's kernels are enqueued."""
        be = self.backend
        be.check_factors(self, factors, mode, B=B, out=out)
        facs = [be.asarray(f, dtype=self.dtype) for f in factors]
        R = int(facs[0].shape[1])
        if out is None:
            out = be.zeros((self.shape[mode], R), self.dtype)
        else:
            be.fill_zero(out)
        if before is not None:
            before()
        if R == 0:
            return out
        Bd = None if B is None else be.asarray(B, dtype=self.dtype)
        add = be.dense_kernel(self.dtype, "add_into")
        for blk, view in self._stream(mode):
            # the kernels write the rows of the block's nonzeros straight into ``out``; a row
            # the block shares with the one before gets that block's partial sum added back
            carry = self._rows_copy(out, blk.r0, blk.r0 + 1) if blk.shared else None
            # the kernels read entries 0 .. nnz - 1 of the (chunk-interleaved) order
            view.nnz = blk.nnz
            be._launch_accumulate(view, facs, mode, Bd, eps, out, zero=False)
            if carry is not None:
                be.launch(add, (R,), np.int64(R), np.int64(blk.r0 * R), out.data, carry.data)
        return out

    def _mode0_blocks(self, factors):
        be = self.backend
        facs = [be.asarray(f, dtype=self.dtype) for f in factors]
        for blk, view in self._stream(0):
            yield blk, view, facs

    def model_values(self, weights, factors):
        """Model values at the nonzeros (a host array, in the tensor's order)."""
        self.backend.check_factors(self, factors, weights=weights)
        parts = []
        for blk, view, local in self._mode0_blocks(factors):
            m = self.backend.to_numpy(self.backend.model_values(view, weights, local))
            if self.chunk:   # entry k of chunk c at k * nchunks + c: back in order
                m = m.reshape(self.chunk, blk.padded // self.chunk).T.ravel()
            parts.append(m[:blk.nnz])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=self.dtype)

    def poisson_data_term(self, weights, factors, eps=0.0):
        """Σ x log(max(m, eps)) over the nonzeros, summed block by block (padding entries
        have x = 0 and add nothing)."""
        self.backend.check_factors(self, factors, weights=weights)
        total = 0.0
        for blk, view, local in self._mode0_blocks(factors):
            total += float(self.backend.poisson_data_term(view, weights, local, eps))
        return total
