"""A sparse tensor spread over the processes of an MPI job, owner-computes per mode.

Partition
---------
For every mode ``n`` the rows ``0 .. I_n - 1`` are cut into ``P`` contiguous blocks holding
about ``nnz / P`` nonzeros each (the cut is placed where the running count of nonzeros per
row crosses ``k * nnz / P``), and process ``p`` *owns* block ``p``.  It keeps, for every mode,
a copy of the nonzeros whose mode-``n`` coordinate falls in its block (coordinates of mode
``n`` shifted to start at 0).  Consequences:

- the MTTKRP / CP-APR Φ rows of mode ``n`` that process ``p`` computes are complete (every
  nonzero of those rows is local): no partial result is ever reduced;
- after a mode's factor rows are updated, each process sends its rows to the others once
  (one ``Allgatherv`` of ``I_n x R`` values per mode);
- CP-APR's row subproblems (``pdnr``/``pqnr``) and its multiplicative inner iterations are
  local to the owner of the rows;
- memory: each nonzero is stored once per mode, ``N`` copies across the job (a rank holds
  about ``N * nnz / P`` nonzeros), and every process keeps the full factor matrices.

The choice and its measured cost are in ``doc/scaling.md``.
"""
import os

import numpy as np

from .. import _threads
from .._native import _construct, _hostcopy
from ..tensor import SparseTensor
from ._mpi import Channel, agree_on_errors, get_comm, install_abort_hook

__all__ = ["DistributedTensor", "scatter", "load_tns", "balanced_blocks"]


def balanced_blocks(counts, nparts):
    """Row boundaries (length ``nparts + 1``) of contiguous blocks of about equal nonzeros.

    ``counts[i]`` is the number of nonzeros of row ``i``.  Cut ``k`` is put at the row
    boundary whose running count is nearest to ``k * total / nparts``; when there are at
    least ``nparts`` rows every block gets one row at least.
    """
    counts = np.asarray(counts, dtype=np.int64)
    I = counts.shape[0]
    prefix = np.zeros(I + 1, dtype=np.int64)
    np.cumsum(counts, out=prefix[1:])
    total = int(prefix[-1])
    bounds = np.zeros(nparts + 1, dtype=np.int64)
    bounds[-1] = I
    for k in range(1, nparts):
        t = total * k / nparts
        hi = int(np.searchsorted(prefix, t, side="left"))
        hi = min(hi, I)
        lo = max(hi - 1, 0)
        b = lo if abs(prefix[lo] - t) <= abs(prefix[hi] - t) else hi
        if total == 0:
            b = (I * k) // nparts
        bounds[k] = b
    bounds = np.maximum.accumulate(bounds)
    if I >= nparts:   # every block non-empty: room for the blocks before and after each cut
        for k in range(1, nparts):
            bounds[k] = min(max(bounds[k], bounds[k - 1] + 1), I - (nparts - k))
    return bounds


def _owner(bounds, coords):
    """Process owning each coordinate (``bounds`` as from :func:`balanced_blocks`): a table of
    the owner of every row, read at the coordinates (a gather instead of a search each)."""
    bounds = np.asarray(bounds, dtype=np.int64)
    table = np.repeat(np.arange(bounds.size - 1, dtype=np.int64), np.diff(bounds))
    return table[coords]


def _exchange(chan, subs, vals, dest):
    """Send nonzero ``i`` to process ``dest[i]`` (Alltoallv); returns what this process gets,
    grouped by sending process in rank order, each group in the sender's order."""
    comm, MPI, P = chan.comm, chan.MPI, chan.size
    N = subs.shape[1]
    # the nonzeros grouped by destination, each group in this process's order: a compiled
    # counting sort on the package's threads (one count per destination and thread)
    order = np.empty(dest.shape[0], dtype=np.int64)
    _construct.mode_order(np.ascontiguousarray(dest, dtype=np.int64).reshape(-1, 1), 0, P,
                          order, max(1, min(_threads.get_num_threads(), 1 << 20)))
    send_counts = np.bincount(dest, minlength=P).astype(np.int64)
    recv_counts = np.empty(P, dtype=np.int64)
    comm.Alltoall(send_counts, recv_counts)
    sdispl = np.zeros(P, dtype=np.int64)
    np.cumsum(send_counts[:-1], out=sdispl[1:])
    rdispl = np.zeros(P, dtype=np.int64)
    np.cumsum(recv_counts[:-1], out=rdispl[1:])
    n_in = int(recv_counts.sum())
    nt = _threads.get_num_threads()
    s_subs = np.empty((order.shape[0], N), dtype=np.int64)
    _hostcopy.take_rows(np.ascontiguousarray(subs, dtype=np.int64), order, s_subs, nt)
    r_subs = np.empty((n_in, N), dtype=np.int64)
    comm.Alltoallv([s_subs, send_counts * N, sdispl * N, MPI.INT64_T],
                   [r_subs, recv_counts * N, rdispl * N, MPI.INT64_T])
    del s_subs
    s_vals = np.empty(order.shape[0], dtype=vals.dtype)
    _hostcopy.take_rows(np.ascontiguousarray(vals).reshape(-1, 1), order,
                        s_vals.reshape(-1, 1), nt)
    r_vals = np.empty(n_in, dtype=vals.dtype)
    vt = MPI.DOUBLE if vals.dtype == np.float64 else MPI.FLOAT
    comm.Alltoallv([s_vals, send_counts, sdispl, vt], [r_vals, recv_counts, rdispl, vt])
    return r_subs, r_vals


def _canonical(subs, vals, shape, dtype):
    """Sorted, duplicates summed, zeros dropped (the SparseTensor rules)."""
    if subs.shape[0] == 0:
        return (np.zeros((0, len(shape)), dtype=np.int64), np.zeros(0, dtype=dtype))
    if 0 in shape:
        raise AssertionError("nonzeros in an empty block")  # pragma: no cover
    X = SparseTensor(subs, vals, shape, dtype=dtype, copy=False)
    return X.subs, X.vals


class DistributedTensor:
    """This process's part of a sparse tensor spread over an MPI communicator.

    Built collectively by :func:`scatter` or :func:`load_tns`; pass it to ``fit`` of
    :class:`~sktensor_fast.CPALS`, :class:`~sktensor_fast.CPAPR` or
    :class:`~sktensor_fast.GCP`, called on every process, which then runs the distributed
    backend.  Every process sees the same global attributes (``shape``, ``nnz``, ``norm()``);
    the nonzeros are in ``local[n]``: the copy of mode ``n``, holding the nonzeros whose
    mode-``n`` coordinate lies in this process's row block ``bounds[n][rank]:bounds[n][rank+1]``
    (mode-``n`` coordinates shifted to start at 0, the other modes global).

    Attributes
    ----------
    comm : mpi4py communicator
    shape : tuple of int
    nnz : int
        Nonzeros of the whole tensor.
    dtype : numpy.dtype
    bounds : list of ndarray
        Per mode, the ``P + 1`` row boundaries of the blocks owned by the processes.
    local : list of SparseTensor
        Per mode, this process's copy (see above).
    """

    def __init__(self, comm, shape, dtype, local, bounds, _stats=None):
        self.comm = comm
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.local = local
        self.bounds = bounds
        self.rank = comm.Get_rank()
        self.nprocs = comm.Get_size()
        self._chan = Channel(comm)
        if _stats is None:
            # the global quantities, agreed once here (afterwards nothing is collective until
            # a fit)
            counts = self._chan.isum(np.array([t.nnz for t in local], dtype=np.int64),
                                     kind="setup")
            if np.any(counts != counts[0]):   # pragma: no cover - a bug, not a user error
                raise AssertionError(f"the per-mode copies hold different numbers of "
                                     f"nonzeros: {counts.tolist()}")
            v = local[0].vals.astype(np.float64, copy=False)
            _stats = (int(counts[0]), self._chan.sum(float(np.dot(v, v)), kind="setup"),
                      self._chan.sum(float(v.sum()), kind="setup"),
                      self._chan.max(float(np.max(np.abs(v))) if v.size else 0.0,
                                     kind="setup"))
        self.nnz, self.norm_sq, self._sum, self._max_abs = _stats
        self._prepared = {}
        install_abort_hook()

    # ------------------------------------------------------------------ global properties
    # ndim, size and density from shape and nnz, as for a SparseTensor
    ndim = SparseTensor.ndim
    size = SparseTensor.size
    density = SparseTensor.density

    def norm(self):
        """Frobenius norm of the whole tensor."""
        return float(np.sqrt(self.norm_sq))

    def sum(self):
        return float(self._sum)

    def max_abs(self):
        """Largest magnitude of a value of the whole tensor (0.0 without nonzeros)."""
        return float(self._max_abs)

    def scaled(self, s):
        """The tensor with every value divided by the power of two ``s`` (a new
        DistributedTensor on the same processes and partition; collective: its norm is
        summed again)."""
        s = float(s)
        local = [SparseTensor._from_canonical(
            t.subs, (t.vals.astype(np.float64) / s).astype(t.vals.dtype), t.shape)
            for t in self.local]
        return DistributedTensor(self.comm, self.shape, self.dtype, local, self.bounds)

    def block(self, mode):
        """(first, stop) rows of ``mode`` owned by this process."""
        b = self.bounds[mode]
        return int(b[self.rank]), int(b[self.rank + 1])

    @property
    def local_nnz(self):
        """Nonzeros of this process's share (of each copy)."""
        return [t.nnz for t in self.local]

    @property
    def nbytes(self):
        """Bytes of this process's copies."""
        return sum(t.subs.nbytes + t.vals.nbytes for t in self.local)

    def __repr__(self):
        return (f"DistributedTensor(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype.name}, "
                f"process {self.rank} of {self.nprocs}, local nnz per mode {self.local_nnz})")

    def gather(self, root=0):
        """The whole tensor as a :class:`SparseTensor` on process ``root`` (None elsewhere).

        Meant for checks on small tensors: the root then holds every nonzero.
        """
        t = self.local[0]
        lo, _ = self.block(0)
        subs = t.subs.copy()
        subs[:, 0] += lo
        parts = self.comm.gather((subs, t.vals), root=root)
        if self.rank != root:
            return None
        return SparseTensor._from_canonical(np.concatenate([p[0] for p in parts]),
                                            np.concatenate([p[1] for p in parts]), self.shape)

    def _local_rank(self):
        """Rank among the processes of this host (collective on first use)."""
        if getattr(self, "_host_rank", None) is None:
            MPI = self._chan.MPI
            node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
            self._host_rank = node.Get_rank()
            node.Free()
        return self._host_rank

    def comm_counters(self, reset=False):
        """What this process received and how long it spent in MPI, per kind of operation,
        since the tensor was built or last reset: {kind: (calls, bytes, seconds)}.  Kinds:
        ``rows`` (factor rows gathered from their owners), ``reduce`` (sums, maxima and
        counts of the fits), ``check`` (agreement checks), ``setup`` (building)."""
        snap = self._chan.snapshot()
        if reset:
            self._chan.reset()
        return snap

    # ------------------------------------------------------------------ estimator protocol
    def _sktf_validate(self, estimator, reset):
        """The estimator's input checks, run on every process's share; all agree."""
        from ._protocol import validate
        return validate(self, estimator, reset)

    def _sktf_backend(self, estimator):
        """The distributed backend for ``estimator`` (checks that every process agrees)."""
        from ._protocol import backend_for
        return backend_for(self, estimator)


#: bytes per row of a mode that building the layout takes on every process at once: the
#: rows' nonzero counts, their running sums and the table of each row's owner (int64 each)
ROW_TABLE_BYTES = 24


def _check_row_tables(comm, shape):
    """MemoryError on every process where the per-row tables of the largest mode exceed the
    host memory available to a process (the layout counts the nonzeros of every row)."""
    from .._memory import available_bytes
    with agree_on_errors(comm):
        rows = max(int(s) for s in shape)
        need, room = ROW_TABLE_BYTES * rows, available_bytes()
        if room is not None and need > room:
            gib = 2.0 ** 30
            raise MemoryError(
                f"a DistributedTensor of shape {tuple(int(s) for s in shape)} cannot be laid "
                f"out: each process counts the nonzeros of every row of each mode, "
                f"{need / gib:.1f} GiB for the {rows} rows of the longest mode, but "
                f"{room / gib:.1f} GiB are available. Check the shape (a mode that long "
                f"would also need factor matrices of that many rows on every process)")


def _build(comm, subs, vals, shape, dtype):
    """Collective: redistribute the nonzeros each process holds (any order, repeats allowed)
    to the owners of every mode, and wrap the result."""
    _check_row_tables(comm, shape)
    chan = Channel(comm)
    P = chan.size
    N = len(shape)
    bounds, local = [], []
    for n in range(N):
        counts = np.bincount(subs[:, n], minlength=shape[n]).astype(np.int64)
        comm.Allreduce(chan.MPI.IN_PLACE, counts, op=chan.MPI.SUM)
        b = balanced_blocks(counts, P)
        del counts
        bounds.append(b)
        lo, hi = int(b[chan.rank]), int(b[chan.rank + 1])
        if P > 1:
            r_subs, r_vals = _exchange(chan, subs, vals, _owner(b, subs[:, n]))
            r_subs[:, n] -= lo
            # received arrays of this process's own: shared by the copy when already in
            # order, not copied again
            r_subs.flags.writeable = r_vals.flags.writeable = False
        else:
            r_subs, r_vals = subs, vals     # one block of every row (lo = 0): nothing moves
        lshape = tuple(hi - lo if k == n else s for k, s in enumerate(shape))
        ls, lv = _canonical(r_subs, r_vals, lshape, dtype)
        local.append(SparseTensor._from_canonical(ls, lv, lshape))
    return DistributedTensor(comm, shape, dtype, local, bounds)


# ---------------------------------------------------------------------------------- scatter
def scatter(X, comm=None):
    """Spread the tensor ``X`` of process 0 over the processes of ``comm`` (collective).

    Parameters
    ----------
    X : SparseTensor (or anything ``as_sparse_tensor`` accepts) on process 0
        Ignored on the other processes (pass None there).
    comm : mpi4py communicator, default ``MPI.COMM_WORLD``

    Returns
    -------
    DistributedTensor
        This process's part: process 0 first sends every process an equal share of the
        nonzeros, then the shares are exchanged so that each process owns, per mode, the
        nonzeros of a block of rows (balanced by nonzeros).

    Examples
    --------
    Run with ``mpiexec -n 2 python script.py``::

        from sktensor_fast import CPALS, load_tns
        from sktensor_fast.distributed import scatter
        X = load_tns("x.tns") if MPI.COMM_WORLD.rank == 0 else None
        Xd = scatter(X)
        model = CPALS(rank=8, random_state=0).fit(Xd)   # the same model on every process
    """
    from ..tensor import as_sparse_tensor
    comm = get_comm(comm)
    chan = Channel(comm)
    root = 0
    meta = None
    with agree_on_errors(comm):
        if chan.rank == root:
            if X is None:
                raise ValueError("scatter: X is None on process 0, which must hold the tensor")
            X = as_sparse_tensor(X)
            meta = (X.shape, X.dtype.str, X.nnz)
    shape, dtype, nnz = comm.bcast(meta, root=root)
    dtype = np.dtype(dtype)
    N = len(shape)
    share = np.array([nnz * (p + 1) // chan.size - nnz * p // chan.size
                      for p in range(chan.size)], dtype=np.int64)
    displ = np.zeros(chan.size, dtype=np.int64)
    np.cumsum(share[:-1], out=displ[1:])
    n_mine = int(share[chan.rank])
    subs = np.empty((n_mine, N), dtype=np.int64)
    vals = np.empty(n_mine, dtype=dtype)
    vt = chan.MPI.DOUBLE if dtype == np.float64 else chan.MPI.FLOAT
    if chan.rank == root:
        comm.Scatterv([np.ascontiguousarray(X.subs), share * N, displ * N, chan.MPI.INT64_T],
                      [subs, chan.MPI.INT64_T], root=root)
        comm.Scatterv([np.ascontiguousarray(X.vals), share, displ, vt], [vals, vt], root=root)
    else:
        comm.Scatterv(None, [subs, chan.MPI.INT64_T], root=root)
        comm.Scatterv(None, [vals, vt], root=root)
    return _build(comm, subs, vals, shape, dtype)


def from_parts(subs, vals, shape, comm=None, dtype=None):
    """A :class:`DistributedTensor` of the nonzeros every process holds (collective).

    Every process passes its own nonzeros, in any order: the tensor is their union, with
    repeated coordinates (on one process or several) summed, as ``SparseTensor`` sums them.
    Use it where each process reads or generates its own part of the data; the nonzeros are
    then sent to their owners as :func:`scatter` sends them.

    Parameters
    ----------
    subs : array_like of int, shape (n, len(shape))
        This process's coordinates (0-based); ``n`` may be 0.
    vals : array_like of float, shape (n,)
        Their values.
    shape : tuple of int
        The tensor's shape, the same on every process.
    comm : mpi4py communicator, default ``MPI.COMM_WORLD``
    dtype : {float64, float32}, optional
        The tensor's dtype, the same on every process (default: float64, or float32 where
        ``vals`` is float32 on every process).

    Returns
    -------
    DistributedTensor

    Raises
    ------
    ValueError, TypeError
        On every process, when any process's part is not a valid set of nonzeros of
        ``shape`` (the message of ``SparseTensor`` and the process that found it), or when the
        processes pass different shapes or dtypes.

    Examples
    --------
    Run with ``mpiexec -n 2 python script.py``::

        from mpi4py import MPI
        from sktensor_fast.distributed import from_parts
        r = MPI.COMM_WORLD.rank
        Xd = from_parts([[r, 0, 0], [r, 1, 2]], [1.0, 2.0], (2, 2, 3))
    """
    comm = get_comm(comm)
    meta = None
    with agree_on_errors(comm):
        shape_t = tuple(int(x) for x in shape)
        if dtype is None:
            v = np.asarray(vals)
            dt = np.float32 if v.dtype == np.float32 else np.float64
        else:
            dt = np.dtype(dtype).type
        subs = np.asarray(subs)
        if subs.size == 0:       # a process without nonzeros
            subs = subs.reshape(0, len(shape_t)).astype(np.int64)
        # every check of SparseTensor on this process's part (and its repeats summed)
        part = SparseTensor(subs, vals, shape_t, dtype=dt)
        meta = (shape_t, np.dtype(part.dtype).str)
    metas = comm.allgather(meta)
    with agree_on_errors(comm):
        if dtype is None and len({m[1] for m in metas}) > 1:
            metas = [(m[0], np.dtype(np.float64).str) for m in metas]
        if len({m[0] for m in metas}) > 1:
            raise ValueError(f"from_parts: the processes passed different shapes: "
                             f"{[m[0] for m in metas]}")
        if len({m[1] for m in metas}) > 1:
            raise ValueError(f"from_parts: the processes passed different dtypes: "
                             f"{[np.dtype(m[1]).name for m in metas]}")
    dt = np.dtype(metas[0][1])
    return _build(comm, np.ascontiguousarray(part.subs, dtype=np.int64),
                  np.ascontiguousarray(part.vals, dtype=dt), shape_t, dt)


# ---------------------------------------------------------------------------------- reading
def _line_start_after(f, pos):
    """Offset of the first line that starts at or after byte ``pos`` of the open file."""
    if pos == 0:
        return 0
    f.seek(pos - 1)
    while True:
        chunk = f.read(1 << 16)
        if not chunk:
            return f.tell()
        k = chunk.find(b"\n")
        if k != -1:
            return f.tell() - len(chunk) + k + 1


def _range_blocks(f, start, stop, block_bytes):
    """Blocks of whole lines covering bytes ``start:stop`` of the open file."""
    f.seek(start)
    left = stop - start
    leftover = b""
    while left > 0:
        chunk = f.read(min(block_bytes, left))
        if not chunk:
            break
        left -= len(chunk)
        buf = leftover + chunk if leftover else chunk
        cut = buf.rfind(b"\n")
        if cut == -1 or left == 0:
            leftover = buf
            continue
        yield buf[:cut + 1]
        leftover = buf[cut + 1:]
    if leftover:
        yield leftover


def _file_name(comm, path, reader):
    """``os.fspath(path)`` on every process (collective), or the same error on every
    process: a file object, which the other processes cannot read."""
    with agree_on_errors(comm):
        if hasattr(path, "read"):
            raise TypeError(f"sktensor_fast.distributed.{reader} needs a file path that every "
                            f"process can open, not a file object")
        return os.fspath(path)


def _same_everywhere(comm, args, reader, what):
    """Collective: a ValueError on every process unless every process passed ``args``."""
    everyone = comm.allgather(args)
    with agree_on_errors(comm):
        if any(a != everyone[0] for a in everyone):
            bad = next(r for r, a in enumerate(everyone) if a != everyone[0])
            raise ValueError(f"{reader} was called with different {what} on process 0 "
                             f"{everyone[0]} and process {bad} {everyone[bad]}; every process "
                             f"must pass the same {what}")


def load_tns(path, comm=None, shape=None, *, dtype=np.float64, index_base=1):
    """Read a FROSTT ``.tns`` file in parallel into a :class:`DistributedTensor` (collective).

    Every process reads its own byte range of the file (the ranges are split at line breaks,
    so each line is read by exactly one process), parses it with the checks of
    :func:`sktensor_fast.load_tns`, and the nonzeros are then sent to their owners (see the
    module notes).  A compressed file cannot be split by bytes: every process then
    decompresses the whole stream and parses one block of lines in ``P``.

    Parameters
    ----------
    path : str or path-like
        The same file on every process (a shared file system).
    comm : mpi4py communicator, default ``MPI.COMM_WORLD``
    shape, dtype, index_base
        As for :func:`sktensor_fast.load_tns`.

    Returns
    -------
    DistributedTensor

    Raises
    ------
    FileNotFoundError, PermissionError, ValueError
        On every process when the file is missing or unreadable on any process, or when any
        line is malformed (the message names the file and the line, and the process that
        found it); also when the processes were given different arguments.
    """
    from .. import io as _io
    from .._native import text
    comm = get_comm(comm)
    chan = Channel(comm)
    P, rank = chan.size, chan.rank
    name = _file_name(comm, path, "load_tns")
    with agree_on_errors(comm):
        shape, index_base, dtype = _io._check_tns_args(shape, index_base, dtype)
        args = (os.path.abspath(name), shape, dtype.str, index_base)
    _same_everywhere(comm, args, "load_tns", "arguments (path, shape, dtype and index_base)")
    parser = None
    lines_in_range = 0
    with agree_on_errors(comm):
        stream, name = _io._open_binary(name)
        parser = text.TnsParser(name, shape, int(index_base), dtype)
        try:
            compressed = not isinstance(stream, __import__("io").BufferedReader)
            if compressed:
                # the stream cannot be split: every process reads it all, parses 1 block in P
                lines_before = 0
                for b, block in enumerate(_io._iter_blocks(stream, _io._BLOCK_BYTES)):
                    if b % P == rank:
                        parser.lines_before = lines_before
                        parser.feed_bytes(block)
                    lines_before += block.count(b"\n")
                lines_in_range = None
            else:
                size = os.fstat(stream.fileno()).st_size
                start = _line_start_after(stream, size * rank // P)
                stop = _line_start_after(stream, size * (rank + 1) // P)
                for block in _range_blocks(stream, start, stop, _io._BLOCK_BYTES):
                    if start == 0 and parser.lines_before == 0 and \
                            block.startswith(_io._UTF8_BOM):
                        block = block[len(_io._UTF8_BOM):]
                    parser.feed_bytes(block)
                lines_in_range = parser.lines_before
        except (OSError, EOFError) as exc:
            if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
                raise
            raise ValueError(f"{name}: cannot read the file: {exc}") from exc
        except ValueError as exc:
            # line numbers of a split read count from the start of this process's range
            parser.error = exc
        finally:
            stream.close()
    # global line numbers: lines in the ranges of the processes before this one
    counts = comm.allgather(lines_in_range)
    offset = 0 if counts[0] is None else sum(counts[:rank])
    with agree_on_errors(comm):
        err = getattr(parser, "error", None)
        if err is not None:
            raise ValueError(_shift_line(str(err), name, offset)) from None
    # every process must have found the same number of columns
    ncols = comm.allgather((parser.ncols, None if parser.first_line is None
                            else parser.first_line + offset))
    found = [(r, c, line) for r, (c, line) in enumerate(ncols) if c is not None]
    with agree_on_errors(comm):
        if not found:
            if shape is None:
                raise ValueError(f"{name} holds no nonzeros; pass `shape` to load an empty "
                                 f"tensor")
        elif any(c != found[0][1] for _, c, _ in found):
            r, c, line = next(f for f in found if f[1] != found[0][1])
            raise ValueError(f"{name}, line {line}: expected {found[0][1]} columns (as on line "
                             f"{found[0][2]}) but found {c}")
    N = len(shape) if shape is not None else found[0][1] - 1
    got = parser.result()
    if got["subs"] is not None:
        subs, vals = got["subs"], got["vals"]
    else:
        subs = np.zeros((0, N), dtype=np.int64)
        vals = np.zeros(0, dtype=np.float64)
    if shape is None:
        mx = np.full(N, -1, dtype=np.int64) if parser.maxima is None else \
            np.asarray(parser.maxima, dtype=np.int64)
        comm.Allreduce(chan.MPI.IN_PLACE, mx, op=chan.MPI.MAX)
        shape = tuple(int(m) + 1 for m in mx)
    return _build(comm, subs, vals.astype(dtype, copy=False), shape, dtype)


def load_tensor(path, comm=None):
    """Read a binary tensor file (:func:`sktensor_fast.save_tensor`) in parallel into a
    :class:`DistributedTensor` (collective).

    Every process reads an equal share of the nonzeros (its byte ranges of the coordinates and
    the values, by parallel reads) and checks it as :func:`sktensor_fast.load_tensor` checks
    the whole file; the processes then check that their shares follow each other in order,
    and the nonzeros are sent to their owners (see the module notes).  No process reads more
    than its share (and the rest of the checksum blocks it lies in).  Every process reads its
    share through one open of the file and the processes check that they read the same
    version of it: a file replaced meanwhile is refused, never mixed.

    Parameters
    ----------
    path : str or path-like
        The same file on every process (a shared file system).
    comm : mpi4py communicator, default ``MPI.COMM_WORLD``

    Returns
    -------
    DistributedTensor

    Raises
    ------
    FileNotFoundError, PermissionError, ValueError
        On every process when the file is missing or unreadable on any process, is not such a
        file, was written by an unknown format version, is truncated or corrupt, was replaced
        while it was read, or when the processes were given different paths.
    """
    from .. import binary
    comm = get_comm(comm)
    chan = Channel(comm)
    P, rank = chan.size, chan.rank
    name = _file_name(comm, path, "load_tensor")
    _same_everywhere(comm, os.path.abspath(name), "load_tensor", "paths")
    with agree_on_errors(comm):
        shape, nnz, subs, vals, ident = binary.read_rows(name, P, rank)
    # every process read through its own open of the path: all must have read one version
    idents = comm.allgather(ident)
    with agree_on_errors(comm):
        if any(i != idents[0] for i in idents):
            raise ValueError(f"{name} was replaced while the processes read it (they read "
                             f"different versions of the file); load it again")
    # the shares must follow each other: the last row of one before the first of the next
    ends = comm.allgather((tuple(subs[0]), tuple(subs[-1])) if len(subs) else None)
    with agree_on_errors(comm):
        prev = None
        for r, e in enumerate(ends):
            if e is None:
                continue
            if prev is not None and not prev < e[0]:
                raise ValueError(f"{name} is corrupt: row {nnz * r // P} is not after the row "
                                 f"before it; a file written by save_tensor() never is")
            prev = e[1]
    return _build(comm, subs, vals, shape, vals.dtype)


def _shift_line(msg, name, offset):
    import re
    prefix = f"{name}, line "
    if msg.startswith(prefix):
        m = re.match(r"(\d+):", msg[len(prefix):])
        if m:
            line = int(m.group(1)) + offset
            return f"{prefix}{line}{msg[len(prefix) + len(m.group(1)):]}"
    return msg
