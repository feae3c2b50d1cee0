"""The distributed backend: each process's own backend (CPU kernels or its GPU), wrapped.

The algorithms of ``decomposition/`` call the kernel interface of
:class:`~sktensor_fast.backends.base.Backend` as on one device.  Here every call is collective
(every process makes the same calls in the same order) and answers with what one device would
answer:

- a factor matrix is a :class:`DArray`: every process keeps the whole ``I x R`` matrix, and
  after an update only the rows this process owns are current until the next operation that
  needs all rows, which first gathers the rows from their owners (one ``Allgatherv`` per mode
  and outer iteration);
- MTTKRP and CP-APR's Φ of mode ``n`` are computed by each process for the rows it owns, from
  its copy of those rows' nonzeros, so they are complete and never reduced;
- column norms and Gram matrices of a factor whose rows were just updated are summed from
  each process's rows (R or R x R values), so that the dense steps cost ``I_n / P`` rows per
  process and the rows are gathered only when a kernel needs them (once per mode); on a
  whole factor they are computed as on one device.  Every sum over processes (these, the
  inner products with a partial result, the Poisson data term, GCP's gradients) adds the
  partial sums in rank order, so all processes get the same bits; maxima and counts are
  exact.

The process's own backend does the arithmetic (``local``).  The algorithms see only the
kernel interface of :mod:`sktensor_fast.backends.base` (with ``backend.apr`` and
``backend.gcp``), which this class implements method by method; nothing else of the local
backend shows through.
"""
import zlib

import numpy as np

from ..backends.base import AprKernels, Backend, GcpKernels
from ..backends.gcp_plan import GcpState, sampler_plan, zero_list_mode

__all__ = ["DistributedBackend", "DArray", "PreparedDistributed"]


class _Layout:
    """Row blocks of one mode: process ``p`` owns rows ``bounds[p]:bounds[p + 1]``."""

    def __init__(self, bounds, rank):
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.counts = np.diff(self.bounds)
        self.displs = np.ascontiguousarray(self.bounds[:-1])
        self.lo = int(self.bounds[rank])
        self.hi = int(self.bounds[rank + 1])
        self.rows = self.hi - self.lo
        #: one process owns every row: its rows are the whole array (decided alike on every
        #: process, since the gathers it skips are collective)
        self.whole = len(self.bounds) == 2


class PreparedDistributed:
    """A :class:`DistributedTensor` laid out by the process's backend: one prepared copy per
    mode (None where this process owns no row of the mode).

    The copy of mode ``n`` serves that mode's kernels only (MTTKRP, Φ, the row solvers; mode
    0's also the sums over the nonzeros), so it is stored with mode ``n`` first: sorted by
    its rows, which the kernels then read in order (COO's fastest case, without the
    permutation COO needs for a later mode).  Under ``format="auto"`` the copies are COO:
    on a share restricted to a block of rows ALTO's mode-agnostic order gains nothing and was
    measured slower (a NELL-2-shaped share of 1.6M nonzeros, one thread: 13 ms for a COO
    MTTKRP of its mode against 21-25 ms for ALTO).  :meth:`mode_first` orders the factors
    alike."""

    name = "distributed"

    def __init__(self, Xd, local_backend, format):
        from ..tensor import SparseTensor
        self.source = Xd
        self.shape = Xd.shape
        self.ndim = Xd.ndim
        self.nnz = Xd.nnz
        self.dtype = Xd.dtype
        self.norm_sq = Xd.norm_sq
        self.layouts = [_Layout(b, Xd.rank) for b in Xd.bounds]
        if format == "auto" and "coo" in local_backend.formats:
            format = "coo"
        self._backend, self._format = local_backend, format
        self._pieces = {}
        self.local = [None if t.shape[n] == 0 else self._prepare_copy(t, n)
                      for n, t in enumerate(Xd.local)]
        notes = {getattr(t, "note", None) for t in self.local if t is not None}
        notes.discard(None)
        self.note = "; ".join(sorted(notes)) or None
        kinds = sorted({type(t).__name__ for t in self.local if t is not None})
        self.format_names = kinds

    def _prepare_copy(self, t, n):
        """The process's backend's copy of ``t`` (nonzeros of mode ``n``'s own rows), stored
        with mode ``n`` first."""
        from ..tensor import SparseTensor
        if n > 0:
            order = self._order(n)
            t = SparseTensor(t.subs[:, order], t.vals, tuple(t.shape[k] for k in order),
                             dtype=t.dtype)
        # the kernels of the copy's first mode only (the others are never asked for): on a
        # GPU one device copy instead of one per mode
        return self._backend.prepare(t, self._format, modes=(0,))

    @property
    def nbytes(self):
        return sum(int(getattr(t, "nbytes", 0)) for t in self.local if t is not None) + \
            sum(int(getattr(t, "nbytes", 0)) for p in self._pieces.values() if p is not None
                for t in p)

    def pieces(self, mode, k):
        """The copy of ``mode`` cut in two by mode ``k``'s rows: ``(own, other)``, the
        nonzeros whose mode-``k`` row this process owns (mode-``k`` coordinates shifted by
        the block's first row, so that the kernels read that factor's own rows alone) and
        the rest; both stored as the copy is.  None where the cut gains nothing (a piece
        without nonzeros, a copy streamed through the device) or where the process's
        backend has no room for a second copy of the mode (``tensor_room``).  Built at the
        first call and kept."""
        key = (mode, k)
        if key in self._pieces:
            return self._pieces[key]
        self._pieces[key] = None
        whole = self.local[mode]
        room = getattr(self._backend, "tensor_room", None)
        if whole is None or getattr(whole, "streamed", False) or room is None \
                or self.nbytes + int(getattr(whole, "nbytes", 0)) > room():
            return None
        from ..tensor import SparseTensor
        t = self.source.local[mode]
        L = self.layouts[k]
        col = t.subs[:, k]
        own = (col >= L.lo) & (col < L.hi)
        n_own = int(np.count_nonzero(own))
        if n_own == 0 or n_own == t.nnz:
            return None
        parts = []
        try:
            for sel, shift in ((own, True), (~own, False)):
                subs = t.subs[sel]
                shape = list(t.shape)
                if shift:
                    # the rows of one block, shifted alike: still in the copy's order
                    subs[:, k] -= L.lo
                    shape[k] = L.rows
                piece = SparseTensor._from_canonical(subs, t.vals[sel], tuple(shape))
                parts.append(self._prepare_copy(piece, mode))
        except MemoryError:
            # the device could not hold them after all: the whole copy serves
            return None
        if any(getattr(p, "streamed", False) for p in parts):
            return None
        self._pieces[key] = tuple(parts)
        return self._pieces[key]

    def _order(self, mode):
        return [mode] + [k for k in range(self.ndim) if k != mode]

    def mode_first(self, factors, mode):
        """``factors`` in the order of the modes of the copy of ``mode`` (``mode`` first)."""
        return factors if mode == 0 else [factors[k] for k in self._order(mode)]


class DArray:
    """A backend array of the distributed backend (see the module notes).

    ``full`` is the process's whole array (a local-backend array), ``part`` the rows of
    ``layout`` this process owns; ``full_ok`` / ``part_ok`` say which is current.  On the CPU,
    ``part`` is a view into ``full``.
    """

    __slots__ = ("shape", "dtype", "full", "part", "layout", "full_ok", "part_ok", "view")

    def __init__(self, shape, dtype):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.full = None
        self.part = None
        self.layout = None
        self.full_ok = False
        self.part_ok = False
        self.view = False

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __repr__(self):
        state = "all rows" if self.full_ok else "own rows"
        return f"DArray(shape={self.shape}, dtype={self.dtype.name}, {state})"


def _crc(a):
    a = np.ascontiguousarray(a)
    return zlib.crc32(a.view(np.uint8).reshape(-1)) if a.size else 0


class DistributedGcpState(GcpState):
    """The :class:`~sktensor_fast.backends.gcp_plan.GcpState` of one process: its share for
    drawing, the sampler plans, its part of the fixed loss sample."""

    def __init__(self, share, plan_grad, plan_loss, loss_sample, n_entries, sampler,
                 zero_list):
        super().__init__(sampler, (plan_grad[0], plan_grad[1]), (plan_loss[0], plan_loss[1]),
                         n_entries, loss_sample, np.float64)
        self.share = share
        self.plan_grad = plan_grad
        self.plan_loss = plan_loss
        self.zero_list = zero_list
        self.work = None


class _DistALS:
    """An update of :meth:`DistributedBackend.als_start`: of the process's backend
    (``local``, its own pending update), or of the own rows with their partials in flight."""

    def __init__(self, local=None, U=None, handle=None, first=False, col_scale=None):
        self.local, self.U, self.handle = local, U, handle
        self.first, self.col_scale = first, col_scale

    @property
    def ready(self):
        return self.local.ready if self.local is not None else self.handle is None


class DistributedBackend(Backend):
    """Kernel interface over MPI processes, each running its own ``local`` backend.

    Obtained by ``fit`` on a :class:`~sktensor_fast.distributed.DistributedTensor` (one per
    tensor and local backend).  ``channel`` counts the bytes this process receives and the
    time it spends in MPI (:meth:`DistributedTensor.comm_counters`).
    """

    name = "distributed"

    def __init__(self, local, channel):
        self.local = local
        self.channel = channel
        self.host = local.name == "cpu"

    @classmethod
    def wrap(cls, local, Xd):
        cache = Xd.__dict__.setdefault("_backends", {})
        key = id(local)
        if key not in cache:
            cache[key] = (local, cls(local, Xd._chan))
        return cache[key][1]

    # ------------------------------------------------------------------ array states
    def _new(self, shape, dtype, full=None, part=None, layout=None):
        a = DArray(shape, dtype)
        a.full, a.part, a.layout = full, part, layout
        a.full_ok = full is not None
        return a

    def _alloc_part(self, a, layout):
        """Storage for ``a``'s rows of ``layout`` (contents undefined); returns it."""
        if a.layout is not layout or a.part is None:
            if self.host:
                if a.full is None or a.full.shape != a.shape:
                    a.full = np.empty(a.shape, dtype=a.dtype)
                    a.full_ok = False
                a.part = a.full[layout.lo:layout.hi]
                a.view = True
            else:
                make = getattr(self.local, "empty", self.local.zeros)
                a.part = make((layout.rows,) + a.shape[1:], a.dtype)
                a.view = False
            a.layout = layout
            a.part_ok = False
        return a.part

    def _wrote_part(self, a):
        a.part_ok = True
        a.full_ok = False

    def _wrote_full(self, a):
        a.full_ok = True
        a.part_ok = bool(a.view and a.part is not None)

    def _full(self, a):
        """The whole array of ``a``, gathering the rows of their owners first if needed."""
        if not isinstance(a, DArray):
            return a
        if a.full_ok:
            return a.full
        L = a.layout
        if L.whole and a.part is not None:
            # nothing to gather: the own rows are the array (no copy through the host)
            a.full, a.view = a.part, True
        elif self.host:
            if a.full is None or not a.view:
                full = np.empty(a.shape, dtype=a.dtype)
                full[L.lo:L.hi] = a.part
                a.full, a.part, a.view = full, full[L.lo:L.hi], True
            self.channel.allgather_rows(a.full, L.counts, L.displs)
        else:
            self._gather_device(a)
        a.full_ok = True
        return a.full

    def _gather_device(self, a, started=None, wait=True, into=None):
        """Gather the rows of the device array ``a`` (own rows current): the own rows down
        into a host buffer kept for the shape (page-locked on a GPU), the others' rows from
        them; the others' rows up, the own ones copied on the device.  ``started``: the
        download already enqueued (:meth:`_download_start`); ``wait`` False: the uploads
        left in flight where the process's backend can; ``into``: the device array of
        ``a``'s shape to gather into (where the backend uploads around its own rows)."""
        L = a.layout
        if started is None:
            h = self._host_buffer(a.shape, a.dtype)
            self._download(a.part, h[L.lo:L.hi])
        else:
            h, event = started
            event.wait()
        self.channel.allgather_rows(h, L.counts, L.displs)
        around = getattr(self.local, "upload_around", None)
        if around is None:
            a.full = self._upload(h)
        elif into is not None:
            a.full = around(h, a.part, L.lo, L.hi, wait=wait, out=into)
        elif wait:
            a.full = around(h, a.part, L.lo, L.hi)
        else:
            a.full = around(h, a.part, L.lo, L.hi, wait=False)
        a.full_ok = True
        return a.full

    def _download_start(self, a):
        """Enqueue the download of ``a``'s own rows into its host buffer; ``(buffer,
        event)`` for :meth:`_gather_device`."""
        L = a.layout
        h = self._host_buffer(a.shape, a.dtype)
        return h, self.local.download_start(a.part, h[L.lo:L.hi])

    def _host_buffer(self, shape, dtype):
        """A host array of ``shape`` kept for the row exchanges of device arrays (one per
        shape and dtype: the exchanges of a fit take turns with it)."""
        key = (tuple(shape), np.dtype(dtype).str)
        bufs = self.__dict__.setdefault("_host_bufs", {})
        h = bufs.get(key)
        if h is None:
            make = getattr(self.local, "host_buffer", None)
            h = make(shape, dtype) if make is not None else np.empty(shape, dtype=dtype)
            bufs[key] = h
        return h

    def _download(self, a, out):
        down = getattr(self.local, "download_into", None)
        if down is not None:
            down(a, out)
        else:
            out[...] = self.local.to_numpy(a)

    def _upload(self, h):
        up = getattr(self.local, "upload_from", None)
        return up(h) if up is not None else self.local.asarray(h.copy())

    def _take_rows(self, full, L):
        """Rows ``L.lo:L.hi`` of a whole device array, copied on the device where the
        process's backend can."""
        take = getattr(self.local, "take_rows", None)
        if take is not None:
            return take(full, L.lo, L.hi)
        return self.local.asarray(self.local.to_numpy(full)[L.lo:L.hi])

    def _part(self, a, layout):
        """The current rows of ``layout`` of ``a`` (gathering first if ``a`` holds the rows of
        another layout)."""
        if a.layout is layout and a.part_ok:
            return a.part
        if not a.full_ok:
            self._full(a)
        if self.host:
            a.part = a.full[layout.lo:layout.hi]
            a.view = True
        elif layout.whole:
            a.part, a.view = a.full, True
        else:
            a.part = self._take_rows(a.full, layout)
            a.view = False
        a.layout = layout
        a.part_ok = True
        return a.part

    def _any_rows(self, a, R, dtype):
        """Something of R columns to stand for the factor of the mode being computed (the
        kernels do not read it)."""
        if isinstance(a, DArray):
            if a.full_ok:
                return a.full
            if a.part_ok:
                return a.part
        return self.local.zeros((1, R), dtype)

    def _darray(self, a):
        return a if isinstance(a, DArray) else self.asarray(a)

    def _layout_of(self, *arrays):
        """The layout of the first operand holding only its own rows, or None when every
        operand is whole."""
        for a in arrays:
            if isinstance(a, DArray) and not a.full_ok:
                return a.layout
        return None

    def compute_scope(self):
        """The process's backend's settings for a whole fit (e.g. single-threaded BLAS)."""
        return self.local.compute_scope()

    # ------------------------------------------------------------------ data placement
    def storage_format(self, format="auto", needs=()):
        """What the process's backend builds (every process prepares its share with it)."""
        return self.local.storage_format(format, needs)

    def prepare(self, X, format="auto", modes=None):
        if not isinstance(getattr(X, "_prepared", None), dict) or not hasattr(X, "comm"):
            raise TypeError(f"the distributed backend prepares a DistributedTensor, got "
                            f"{type(X).__name__}")
        self.kernel_modes(X.ndim, modes)   # every process's copies serve every mode
        key = (id(self.local), format)
        if key not in X._prepared:
            X._prepared[key] = PreparedDistributed(X, self.local, format)
        return X._prepared[key]

    def asarray(self, a, dtype=None):
        if isinstance(a, DArray):
            if dtype is None or np.dtype(dtype) == a.dtype:
                return a
            full = self.local.asarray(self.local.to_numpy(self._full(a)), dtype=dtype)
            return self._new(a.shape, dtype, full=full)
        if not isinstance(a, np.ndarray) and hasattr(self.local, "to_numpy"):
            try:
                a = self.local.to_numpy(a)
            except Exception:
                pass
        h = np.ascontiguousarray(a, dtype=dtype)
        # a replicated array must be the same on every process (an initial guess drawn with
        # different seeds would silently give every process a different model)
        mine = (h.shape, h.dtype.str, _crc(h))
        everyone = self.channel.allgather(mine, kind="check")
        if any(e != mine for e in everyone):
            bad = [r for r, e in enumerate(everyone) if e != everyone[0]]
            raise ValueError(
                f"the processes hold different values for an array of shape {h.shape} that "
                f"must be the same everywhere (processes {bad} differ from process 0): give "
                f"every process the same init (or the same int random_state)")
        return self._new(h.shape, h.dtype, full=self.local.asarray(h))

    def to_numpy(self, a):
        if isinstance(a, DArray):
            return np.asarray(self.local.to_numpy(self._full(a)))
        return np.asarray(self.local.to_numpy(a))

    def to_numpy_transient(self, arrays):
        full = [self._full(a) if isinstance(a, DArray) else a for a in arrays]
        return [np.asarray(h) for h in self.local.to_numpy_transient(full)]

    def zeros(self, shape, dtype):
        return self._new(shape, dtype, full=self.local.zeros(shape, dtype))

    def copy(self, a):
        if not isinstance(a, DArray):
            return self.local.copy(a)
        b = DArray(a.shape, a.dtype)
        b.layout, b.full_ok, b.part_ok = a.layout, a.full_ok, a.part_ok
        if a.full is not None:
            b.full = self.local.copy(a.full)
        if a.part is not None:
            if a.view and b.full is not None:
                b.part, b.view = b.full[a.layout.lo:a.layout.hi], True
            else:
                b.part = self.local.copy(a.part)
        return b

    # ------------------------------------------------------------------ sparse kernels
    # The public methods of Backend, AprKernels and GcpKernels check the arguments once; the
    # ``_``-prefixed implementations here hand the process's part to the implementations of
    # the process's backend (the same arguments, laid out by rows: nothing to check again).
    def _mode_call(self, T, factors, mode, B=None):
        """Whole factors for the modes other than ``mode``, and the layout of ``mode``."""
        R = int(factors[0].shape[1])
        factors = [self._darray(f) for f in factors]
        L = T.layouts[mode]
        if B is not None:
            B = self._darray(B)
            Bp = self._part(B, L)
        facs = [self._full(f) if k != mode else None for k, f in enumerate(factors)]
        facs[mode] = Bp if B is not None else self._any_rows(factors[mode], R, T.dtype)
        return R, L, facs, (Bp if B is not None else None)

    def _out(self, out, T, mode, R, L):
        if not isinstance(out, DArray) or out.shape != (T.shape[mode], R) \
                or out.dtype != T.dtype:
            out = DArray((T.shape[mode], R), T.dtype)
        return out, self._alloc_part(out, L)

    #: on a device, a MTTKRP that needs the rows of a factor just updated (CP-ALS's next
    #: mode) runs the nonzeros of this process's own rows of that factor while the others'
    #: rows are exchanged (:meth:`_mttkrp_overlapped`).  Off: on two H100s it gave CP-ALS
    #: iterations of 3.6 to 6.6 ms from one job to the next against 4.7 to 6.2 ms without it;
    #: with the MTTKRP prepared before the exchange, faster on one host with two H200s (3.6
    #: against 3.8-4.7 ms) and slower on one with four (5.5 against 4.4 ms on two GPUs),
    #: one job each; and it keeps a second copy of each mode's nonzeros on the device
    #: (``doc/guide/tuning.rst``, "CP-ALS's MTTKRP beside the rows exchange").  A switch for
    #: the benchmarks (``bench_distributed.py --overlap``).
    _OVERLAP_GATHER = False

    def _overlap_plan(self, T, factors, mode):
        """``(factors, k, pieces)`` where :meth:`_mttkrp_overlapped` applies: on a device
        backend that starts downloads and adds arrays, one factor ``k`` other than ``mode``
        with only its own rows current (the others whole) and :meth:`PreparedDistributed.pieces`
        of ``(mode, k)``.  Whether it applies may differ between processes (their pieces):
        either way the rows of ``k`` are gathered once, in the same collective call."""
        if self.host or not self._OVERLAP_GATHER or T.local[mode] is None \
                or not hasattr(self.local, "download_start") or not hasattr(self.local, "add_"):
            return None
        facs = [self._darray(f) for f in factors]
        behind = [k for k, f in enumerate(facs) if k != mode and not f.full_ok]
        if len(behind) != 1:
            return None
        k = behind[0]
        A = facs[k]
        if not A.part_ok or A.layout is not T.layouts[k] or A.layout.whole:
            return None
        pieces = T.pieces(mode, k)
        return None if pieces is None else (facs, k, pieces)

    def _mttkrp_overlapped(self, T, factors, mode, out, k, pieces):
        """MTTKRP of ``mode`` as the sum of its two pieces: the nonzeros of this process's
        own rows of factor ``k`` (read from those rows, ``A.part``) enqueued between the
        start of the download of those rows and the exchange with the other processes, the
        rest after the exchange has brought every row.  The device computes while the host
        waits for the other processes; the sum differs from the whole copy's in rounding
        only."""
        R = int(factors[0].shape[1])
        L = T.layouts[mode]
        A = factors[k]
        started = self._download_start(A)
        own, other = pieces
        facs = [A.part if j == k else (None if j == mode else f.full)
                for j, f in enumerate(factors)]
        facs[mode] = self._any_rows(factors[mode], R, T.dtype)
        out, dst = self._out(out, T, mode, R, L)
        res = self.local._mttkrp(own, T.mode_first(facs, mode), 0, dst)
        if res is not dst:
            out.part, out.view = res, False
        facs[k] = self._gather_device(A, started, wait=False)
        rest = self.local._mttkrp(other, T.mode_first(facs, mode), 0, None)
        self.local.add_(out.part, rest)
        self._wrote_part(out)
        return out

    #: on a device, a MTTKRP that needs the rows of one factor just updated (CP-ALS's next
    #: mode) is prepared before that factor's rows are exchanged: the download of the own
    #: rows is started, the host's work for the launch done while it runs, and only then the
    #: exchange, the uploads (without waiting) and the kernel's enqueue
    #: (:meth:`_mttkrp_gathered`).  The device then idles for the exchange alone
    #: (``doc/guide/tuning.rst``, "CP-ALS's MTTKRP prepared before the rows exchange").
    _PREPARE_BEFORE_GATHER = True

    def _gather_plan(self, T, factors, mode):
        """``(factors, k)`` where :meth:`_mttkrp_gathered` applies: a device backend that
        starts downloads, uploads into a given array and prepares a MTTKRP ahead
        (``mttkrp_after``); one factor ``k`` other than ``mode`` with only its own rows
        current, the others whole.  The same on every process (the arrays' states are)."""
        if self.host or not self._PREPARE_BEFORE_GATHER or not all(
                hasattr(self.local, m) for m in ("mttkrp_after", "download_start",
                                                 "upload_around", "empty")):
            return None
        facs = [self._darray(f) for f in factors]
        behind = [k for k, f in enumerate(facs) if k != mode and not f.full_ok]
        if len(behind) != 1:
            return None
        A = facs[behind[0]]
        if not A.part_ok or A.layout is None or A.layout.whole:
            return None
        return facs, behind[0]

    def _mttkrp_gathered(self, T, facs, k, mode, out):
        """MTTKRP of ``mode`` whose factor ``k`` holds only its own rows: the download of
        those rows enqueued first, the process's backend then prepares the launch and calls
        back just before enqueueing the kernel; the call back waits for the download,
        exchanges the rows with the other processes and enqueues the uploads into the whole
        factor's new device array (collective: called exactly once on every process, also
        by a process without nonzeros in the mode)."""
        R = int(facs[0].shape[1])
        L = T.layouts[mode]
        A = facs[k]
        started = self._download_start(A)
        full = self.local.empty(A.shape, A.dtype)
        args = [full if j == k else (None if j == mode else f.full)
                for j, f in enumerate(facs)]
        args[mode] = self._any_rows(facs[mode], R, T.dtype)
        out, dst = self._out(out, T, mode, R, L)
        pending = [started]

        def gather():
            if pending:
                self._gather_device(A, pending.pop(), wait=False, into=full)

        if T.local[mode] is not None:
            res = self.local.mttkrp_after(T.local[mode], T.mode_first(args, mode), 0, dst,
                                          gather)
            if res is not dst:
                out.part, out.view = res, False
        gather()
        self._wrote_part(out)
        return out

    def _mttkrp(self, T, factors, mode, out):
        plan = self._overlap_plan(T, factors, mode)
        if plan is not None:
            facs, k, pieces = plan
            return self._mttkrp_overlapped(T, facs, mode, out, k, pieces)
        plan = self._gather_plan(T, factors, mode)
        if plan is not None:
            facs, k = plan
            return self._mttkrp_gathered(T, facs, k, mode, out)
        R, L, facs, _ = self._mode_call(T, factors, mode)
        out, dst = self._out(out, T, mode, R, L)
        if T.local[mode] is not None:
            res = self.local._mttkrp(T.local[mode], T.mode_first(facs, mode), 0, dst)
            if res is not dst:     # a backend that ignored ``out``
                out.part, out.view = res, False
        self._wrote_part(out)
        return out

    def _phi(self, T, factors, mode, B, eps, out):
        R, L, facs, Bp = self._mode_call(T, factors, mode, B=B)
        out, dst = self._out(out, T, mode, R, L)
        if T.local[mode] is not None:
            res = self.local._phi(T.local[mode], T.mode_first(facs, mode), 0, Bp, eps, dst)
            if res is not dst:
                out.part, out.view = res, False
        self._wrote_part(out)
        return out

    def _model_values(self, T, weights, factors):
        raise NotImplementedError("the model values at every nonzero of a distributed tensor "
                                  "would gather the whole tensor; use model_zero_count or "
                                  "poisson_data_term")

    def _mode0_call(self, T, factors):
        """The whole factors with mode 0 cut to this process's rows (its copy of mode 0);
        collective (the rows of a factor may first be gathered)."""
        facs = [self._full(self._darray(f)) for f in factors]
        if T.local[0] is not None:
            facs[0] = self._rows(facs[0], T.layouts[0])
        return facs

    def _model_zero_count(self, T, weights, factors):
        facs = self._mode0_call(T, factors)
        n = 0
        if T.local[0] is not None and T.local[0].nnz:
            n = int(self.local._model_zero_count(T.local[0], weights, facs))
        return self.channel.isum(n)

    def _poisson_data_term(self, T, weights, factors, eps):
        facs = self._mode0_call(T, factors)
        part = 0.0
        if T.local[0] is not None:
            part = float(self.local._poisson_data_term(T.local[0], weights, facs, eps))
        return self.channel.sum(part)

    def _rows(self, full, L):
        if self.host or L.whole:
            return full[L.lo:L.hi] if self.host else full
        return self._take_rows(full, L)

    # ------------------------------------------------------------------ small dense steps
    def gram(self, A):
        A = self._darray(A)
        if A.full_ok:
            return self.local.gram(A.full)
        # only the own rows are current: Σ_p A_pᵀ A_p, added in rank order (R x R values)
        return self.channel.sum(np.asarray(self.local.gram(A.part), dtype=np.float64))

    def matmul_small(self, A, M):
        A = self._darray(A)
        if A.full_ok:
            res = self.local.matmul_small(A.full, M)
            return self._new(tuple(res.shape), res.dtype, full=res)
        L = A.layout
        res = self.local.matmul_small(A.part, M)
        out = DArray((A.shape[0], res.shape[1]), res.dtype)
        if self.host:
            dst = self._alloc_part(out, L)
            dst[...] = res
        else:
            out.part, out.layout, out.view = res, L, False
        self._wrote_part(out)
        return out

    @staticmethod
    def _whole(M):
        """Whether this process holds the whole of ``M`` (current)."""
        return M.full_ok or (M.layout is not None and M.layout.whole and M.part_ok)

    def als_update(self, M, grams, mode, first=False):
        """CP-ALS's update (:meth:`Backend.als_update`): :meth:`als_start` and
        :meth:`als_finish` at once (the interface's steps where neither applies)."""
        M = self._darray(M)
        if not (self._whole(M) or hasattr(self.local, "als_partials_begin")):
            return super().als_update(M, grams, mode, first)
        U, pending = self.als_start(M, grams, mode, first)
        weights, G, _, _ = self.als_finish(pending)
        return U, weights, G

    def als_start(self, M, grams, mode, first=False, col_scale=None, inner=False):
        """:meth:`Backend.als_start`: by the process's backend when this process holds the
        whole matrix; else on the own rows, whose column statistics, Gram matrix (and inner
        products with ``M``) the process's backend enqueues without waiting where it can
        (``als_partials_begin``).  :meth:`als_finish` then reduces them over the processes
        (one MPI call) and scales the columns of every copy of the factor: the next MTTKRP,
        enqueued in between, may have gathered its rows unscaled."""
        M = self._darray(M)
        if self._whole(M):
            U, p = self.local.als_start(M.full if M.full_ok else M.part, grams, mode, first,
                                        col_scale, inner)
            return self._new(tuple(U.shape), U.dtype, full=U), _DistALS(local=p)
        begin = getattr(self.local, "als_partials_begin", None)
        if begin is None:
            return super().als_start(M, grams, mode, first, col_scale, inner)
        from ..backends.gram import als_matrix
        U = self.matmul_small(M, als_matrix(grams, mode, col_scale))
        handle = begin(U.part, first, self._part(M, U.layout) if inner else None)
        return U, _DistALS(U=U, handle=handle, first=first, col_scale=col_scale)

    def als_finish(self, pending):
        p = pending
        if not isinstance(p, _DistALS):       # the interface's update, done at once
            return super().als_finish(p)
        if p.local is not None:
            return self.local.als_finish(p.local)
        from ..backends.gram import als_inner, als_weights
        stat, G, ip = self.local.als_partials_end(p.handle)
        R = G.shape[0]
        rest = [G.reshape(-1)] + ([] if ip is None else [ip])
        if p.first:
            both = self.channel.sum(np.concatenate([stat] + rest))
            stat, rest = both[:R], both[R:]
        else:
            stat, rest = self.channel.max_and_sum(stat, np.concatenate(rest))
        G, ip = rest[:R * R].reshape(R, R), (rest[R * R:] if ip is not None else None)
        weights, scale = als_weights(stat, p.first)
        U = p.U
        # every current copy: the own rows, and the whole factor if a MTTKRP gathered it
        # (the same rows, scaled alike); a part that is the whole array is scaled once
        copies = [U.part] if U.part_ok else []
        if U.full_ok and not (U.part_ok and U.view):
            copies.append(U.full)
        many = getattr(self.local, "scale_columns_of", None)
        if many is not None:
            many(copies, scale)
        else:
            for c in copies:
                self.local.scale_columns(c, scale)
        p.U = p.handle = None
        return weights, G * scale[:, None] * scale[None, :], scale, \
            als_inner(ip, scale, p.col_scale)

    def column_norms(self, A, ord=2):
        A = self._darray(A)
        if A.full_ok:
            return self.local.column_norms(A.full, ord)
        part = np.asarray(self.local.column_norms(A.part, ord), dtype=np.float64)
        if ord == np.inf:
            return self.channel.max(part)
        if ord == 1:
            return self.channel.sum(part)
        if ord == 2:
            return np.sqrt(self.channel.sum(part * part))
        return self.local.column_norms(self._full(A), ord)

    def scale_columns(self, A, s):
        if A.full_ok:
            self.local.scale_columns(A.full, s)
            self._wrote_full(A)
        else:
            self.local.scale_columns(A.part, s)
            self._wrote_part(A)
        return A

    def inner(self, A, B):
        A, B = self._darray(A), self._darray(B)
        L = self._layout_of(A, B)
        if L is None:
            return self.local.inner(A.full, B.full)
        part = self.local.inner(self._part(A, L), self._part(B, L))
        return self.channel.sum(np.asarray(part, dtype=np.float64))

    # ------------------------------------------------------------------ CP-APR and GCP
    def _make_apr_kernels(self):
        return _DistAprKernels(self)

    def _make_gcp_kernels(self):
        return _DistGcpKernels(self)

    # ------------------------------------------------------------------ decisions
    def decide(self, flag):
        """Process 0's decision, on every process (e.g. a time limit read from its clock)."""
        return bool(self.channel.bcast(bool(flag), kind="reduce"))

    def info(self):
        return {"name": self.name, "processes": self.channel.size,
                "local": self.local.info()}


class _DistAprKernels(AprKernels):
    """``backend.apr`` of the distributed backend (arguments checked by AprKernels): each
    element-wise step on the rows this process holds current (reduced over the processes
    where it returns a number), the row solvers on the rows it owns."""

    def _pair(self, A, B):
        be = self.backend
        L = be._layout_of(A, B)
        if L is None:
            return None, A.full, B.full
        return L, be._part(A, L), be._part(B, L)

    def _wrote(self, L, A, changed=True):
        """Mark ``A`` written (all rows when ``L`` is None, else this process's rows)."""
        if L is None:
            self.backend._wrote_full(A)
        elif changed:
            self.backend._wrote_part(A)

    def _shift_inadmissible(self, A, Phi, kappa_tol, kappa):
        L, a, p = self._pair(A, Phi)
        n = self.backend.local.apr._shift_inadmissible(a, p, kappa_tol, kappa)
        if L is not None:
            n = self.backend.channel.isum(int(n))
        self._wrote(L, A, n)
        return n

    def _kkt_violation(self, B, Phi):
        L, b, p = self._pair(B, Phi)
        v = float(self.backend.local.apr._kkt_violation(b, p))
        return v if L is None else self.backend.channel.max(v)

    def _multiply_(self, B, Phi):
        L, b, p = self._pair(B, Phi)
        self.backend.local.apr._multiply_(b, p)
        self._wrote(L, B)
        return B

    def _mu_rows_(self, B, Phi, tol):
        L, b, p = self._pair(B, Phi)
        n = self.backend.local.apr._mu_rows_(b, p, tol)
        if L is not None:
            n = self.backend.channel.isum(int(n))
        self._wrote(L, B, n)
        return n

    def _row_solve(self, T, factors, mode, B, method, params):
        be = self.backend
        R, L, facs, Bp = be._mode_call(T, factors, mode, B=B)
        res = {"kkt": 0.0, "n_inner": 0, "n_changed": 0}
        if T.local[mode] is not None:
            res = be.local.apr._row_solve(T.local[mode], T.mode_first(facs, mode), 0, Bp,
                                          method, params)
        out = {"kkt": be.channel.max(float(res["kkt"])),
               "n_inner": be.channel.isum(int(res["n_inner"])),
               "n_changed": be.channel.isum(int(res["n_changed"]))}
        be._wrote_part(B)
        return out


class _DistGcpKernels(GcpKernels):
    """``backend.gcp`` of the distributed backend (arguments checked by GcpKernels).

    Every process keeps the whole factors and the optimiser's moments; each draws the
    samples of the one-process draw whose data it owns (_sampling.py), computes their
    gradient with its backend, and the gradients are summed in rank order, so that the
    optimiser steps are the same on every process."""

    def _setup(self, T, sampler, n_grad, n_loss, loss_seed, zero_subs):
        from ._sampling import LocalShare, draw_owned, step_key
        if zero_subs is not None:
            raise NotImplementedError("GCP on a DistributedTensor samples every entry; a mask "
                                      "(an explicit list of zeros) is not available")
        chan = self.backend.channel
        if chan.size == 1 and T.local[0] is not None and T.layouts[0].whole:
            # one process: the process's backend on its copy of mode 0, the whole tensor in
            # lexicographic order (the one-process fit's samples, drawn and reduced where the
            # backend draws them: on a device, whole epochs with no host round trip)
            return self.backend.local.gcp.setup(T.local[0], sampler, n_grad, n_loss,
                                                loss_seed)
        n_entries = T.source.size
        Xd = T.source
        t0 = Xd.local[0]
        lo0, hi0 = Xd.block(0)
        subs = t0.subs.copy()
        subs[:, 0] += lo0
        counts = chan.allgather(int(t0.nnz), kind="setup")
        rank = chan.rank
        share = LocalShare(subs, t0.vals, sum(counts[:rank]), lo0, hi0, T.shape, T.nnz)
        if share.linear:
            # zeros of the processes before this one: their rows' entries less their nonzeros
            stride0 = int(share.strides[0])
            share.zeros_before = sum(int(Xd.bounds[0][r + 1] - Xd.bounds[0][r]) * stride0
                                     - counts[r] for r in range(rank))
        # dense tensors: the stratified sampler takes its zeros from the list of all zeros
        zero_list = zero_list_mode(n_entries, T.nnz, share.linear)
        n_zero = n_entries - T.nnz
        plan_g = sampler_plan(sampler, T.nnz, n_zero, n_grad[0], n_grad[1])
        plan_l = sampler_plan("stratified", T.nnz, n_zero, n_loss[0], n_loss[1])
        loss_sample = draw_owned(chan, share, step_key(loss_seed, 0), plan_l,
                                 zero_list=zero_list)[1:]
        return DistributedGcpState(share, plan_g, plan_l, loss_sample, n_entries, sampler,
                                   zero_list)

    def _whole(self, arrays):
        be = self.backend
        return [be._full(be._darray(a)) for a in arrays]

    # ---- one process: the process's backend on the whole tensor (see _setup)
    @staticmethod
    def _whole_tensor(state):
        return not isinstance(state, DistributedGcpState)

    def _local_out(self, out):
        if out is None:
            return None
        return [self.backend._full(o) if isinstance(o, DArray) else o for o in out]

    def _wrap(self, arrays):
        be = self.backend
        return [be._new(tuple(a.shape), a.dtype, full=a) for a in arrays]

    def _steps(self, T, state, weights, factors, loss, seed, first_draw, n_steps, optimizer,
               lower, active, out, deadline, clock):
        if not self._whole_tensor(state):
            return super()._steps(T, state, weights, factors, loss, seed, first_draw, n_steps,
                                  optimizer, lower, active, out, deadline, clock)
        import copy
        be = self.backend
        # the optimiser with the moments as the process's backend arrays (updated in place)
        local_opt = copy.copy(optimizer)
        local_opt.moments = tuple(self._whole(arrs) for arrs in optimizer.moments)
        grads, done, timed_out = be.local.gcp._steps(
            T.local[0], state, weights, self._whole(factors), loss, seed, first_draw, n_steps,
            local_opt, lower, active, self._local_out(out), deadline, clock)
        optimizer.t = local_opt.t
        for a in list(factors) + [a for arrs in optimizer.moments for a in arrs]:
            if isinstance(a, DArray):
                be._wrote_full(a)
        return self._wrap(grads), done, timed_out

    def _sampled_gradient(self, T, state, weights, factors, loss, seed, step, out, active,
                          with_loss):
        from ._sampling import draw_owned, step_key
        be = self.backend
        if self._whole_tensor(state):
            g, f = be.local.gcp._sampled_gradient(T.local[0], state, weights,
                                                  self._whole(factors), loss, seed, step,
                                                  self._local_out(out), active, with_loss)
            return self._wrap(g), f
        N = len(factors)
        sample = draw_owned(be.channel, state.share, step_key(seed, step + 1),
                            state.plan_grad, zero_list=state.zero_list)[1:]
        facs = self._whole(factors)
        if state.work is None:
            state.work = [be.local.zeros(tuple(f.shape), np.float64) for f in facs]
        g, f = be.local.gcp._sample_gradient(sample, weights, facs, loss, state.work, active,
                                             with_loss)
        state.work = g
        modes = [k for k in range(N) if active[k]]
        flat = np.concatenate([np.asarray(be.local.to_numpy(g[k])).reshape(-1)
                               for k in modes]) if modes else np.zeros(0)
        total = be.channel.sum_large(flat)
        out = [None] * N if out is None else list(out)
        at = 0
        for k in range(N):
            shape = tuple(facs[k].shape)
            if not active[k]:
                if out[k] is None:
                    out[k] = be.zeros(shape, np.float64)
                continue
            size = int(np.prod(shape))
            vals = total[at:at + size].reshape(shape)
            at += size
            if isinstance(out[k], DArray) and be.host and out[k].full is not None \
                    and out[k].shape == shape:
                out[k].full[...] = vals
                be._wrote_full(out[k])
            else:
                out[k] = be._new(shape, np.float64, full=be.local.asarray(vals))
        if with_loss:
            f = be.channel.sum(float(f))
        return out, f

    def _loss_estimate(self, T, state, weights, factors, loss):
        be = self.backend
        if self._whole_tensor(state):
            return be.local.gcp._loss_estimate(T.local[0], state, weights,
                                               self._whole(factors), loss)
        part = be.local.gcp._sample_loss(state.loss_sample, weights, self._whole(factors),
                                         loss)
        return be.channel.sum(float(part))

    def _full_loss_grad(self, T, weights, factors, loss, mask, modes, need_grad):
        # each process: the exact loss and gradient over the dense slab of its mode-0 rows
        # (its copy of mode 0); losses and the other modes' gradients summed in rank order,
        # the mode-0 gradient rows gathered from their owners
        if mask is not None:
            raise NotImplementedError("GCP on a DistributedTensor: a mask is not available")
        be = self.backend
        N = T.ndim
        L = T.layouts[0]
        modes = list(range(N)) if modes is None else list(modes)
        facs = be._mode0_call(T, factors)     # collective: on every process
        F, G = 0.0, None
        if T.local[0] is not None:
            F, G = be.local.gcp._full_loss_grad(T.local[0], weights, facs, loss, None, modes,
                                                need_grad)
        F = be.channel.sum(float(F))
        if not need_grad:
            return F, None
        grads = [None] * N
        R = len(weights)
        for k in modes:
            shape = (T.shape[k], R)
            g = np.zeros((L.rows if k == 0 else shape[0], R)) if G is None else \
                np.asarray(be.local.to_numpy(G[k]), dtype=np.float64)
            if k == 0:
                full = np.zeros(shape)
                full[L.lo:L.hi] = g
                be.channel.allgather_rows(full, L.counts, L.displs)
            else:
                full = be.channel.sum_large(g).reshape(shape)
            grads[k] = be._new(shape, np.float64, full=be.local.asarray(full))
        return F, grads

    def _optimizer_update(self, rule, factors, grads, moments, coefficients, lower, active):
        # every process keeps the whole factors and moments: the same update everywhere
        be = self.backend
        be.local.gcp._optimizer_update(rule, self._whole(factors),
                                       [be._full(g) for g in grads],
                                       tuple(self._whole(arrs) for arrs in moments),
                                       coefficients, lower, active)
        for k, f in enumerate(factors):
            if active[k]:
                for a in [f] + [arrs[k] for arrs in moments]:
                    if isinstance(a, DArray):
                        be._wrote_full(a)
        return factors
