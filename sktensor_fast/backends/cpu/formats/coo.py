"""COO with one permutation per mode (GenTen's permuted layout).

For mode ``n`` the nonzeros are visited in the order ``perm[n]`` (stable sort by the mode-``n``
coordinate), so that nonzeros updating the same output row are adjacent and a kernel can
accumulate each row's run privately.  Mode 0 needs no permutation because
:class:`~sktensor_fast.SparseTensor` keeps its nonzeros sorted lexicographically.
"""
import numpy as np

from ...._native import _construct
from ...._threads import get_num_threads
from ...gcp_plan import linear_index
from .. import parallel_costs
from .fibers import fibers_of

try:
    from .. import _kernels
except ImportError:  # pragma: no cover - not built: CpuBackend() says so
    _kernels = None

#: Nonzeros per partition: independent of the thread count, so results are reproducible.
MIN_PART = 2048
MAX_PARTS = 4096


#: Counting sorts keep one count per key and thread: at most this many counts in all.
COUNTING_SORT_MAX_COUNTS = 1 << 25


def mode_order(coords, length, num_threads=None):
    """Stable order of the nonzeros by one mode's coordinates (int64 indices).

    A parallel counting sort in the compiled kernels (linear time, the threads of the CPU
    kernels) when the mode is not much longer than the number of nonzeros; otherwise NumPy's
    stable argsort, which sorts keys of 16 bits or less with a radix sort.
    """
    coords = np.asarray(coords)
    n = coords.shape[0]
    if 0 < length <= max(4 * n, 1 << 16) and length <= COUNTING_SORT_MAX_COUNTS:
        nt = get_num_threads() if num_threads is None else int(num_threads)
        nt = max(1, min(useful_threads(n, nt), COUNTING_SORT_MAX_COUNTS // length))
        col = np.ascontiguousarray(coords, dtype=np.int64).reshape(n, 1)
        out = np.empty(n, dtype=np.int64)
        _construct.mode_order(col, 0, int(length), out, nt)
        return out
    if length <= 1 << 16:
        return np.argsort(coords.astype(np.uint16), kind="stable").astype(np.int64)
    return np.argsort(coords, kind="stable").astype(np.int64)


#: Nonzeros a thread must have at least before another thread runs; None (the default): as
#: many as the measured costs of this machine say (:mod:`..parallel_costs`).
MIN_NNZ_PER_THREAD = None


def useful_threads(nnz, num_threads, rank=8):
    """Threads worth using, up to ``num_threads``, for a kernel over ``nnz`` nonzeros at
    ``rank``: small tensors run on fewer threads, since a parallel region costs microseconds.
    With :data:`MIN_NNZ_PER_THREAD` None, each thread's share of the work (the measured time
    of a nonzero of the MTTKRP, times ``rank / 8`` above rank 8) must take
    :data:`~..parallel_costs.SHARE_OVER_START` times what starting the threads costs; else
    one thread per ``MIN_NNZ_PER_THREAD`` nonzeros.  The kernels' partitions do not depend on
    the thread count, so neither do their results."""
    n = max(1, int(num_threads))
    if n == 1 or nnz <= 0:
        return 1
    if MIN_NNZ_PER_THREAD is not None:
        return max(1, min(n, nnz // MIN_NNZ_PER_THREAD))
    return parallel_costs.threads_for_nonzeros(nnz, n, rank)


def partition_pointers(nnz, min_part=MIN_PART, max_parts=MAX_PARTS):
    """Boundaries of equal-size partitions of ``nnz`` items (length nparts + 1)."""
    if nnz == 0:
        return np.zeros(1, dtype=np.int64)
    size = max(min_part, -(-nnz // max_parts))
    nparts = -(-nnz // size)
    ptr = np.arange(nparts + 1, dtype=np.int64) * size
    ptr[-1] = nnz
    return ptr


class _ModePerms:
    """``perms[n]``: the stable order of the nonzeros by mode ``n`` (empty for mode 0, the
    identity), built when first asked for; the modes given at construction are built then."""

    def __init__(self, T, modes):
        self._T = T
        self._built = {0: np.zeros(0, dtype=np.int64)}
        for n in modes:
            self[n]

    def __len__(self):
        return self._T.ndim

    def __getitem__(self, n):
        n = int(n)
        if not 0 <= n < self._T.ndim:
            raise IndexError(f"mode {n} of a {self._T.ndim}-way tensor")
        got = self._built.get(n)
        if got is None:
            got = self._built[n] = mode_order(self._T.subs[:, n], self._T.shape[n])
        return got

    def __iter__(self):
        return (self[n] for n in range(len(self)))

    def built(self):
        """The permutations built so far."""
        return list(self._built.values())


class CooFormat:
    """A sparse tensor laid out for the COO kernels.

    Attributes
    ----------
    subs : (nnz, N) int64, C-contiguous, lexicographically sorted.
    vals : (nnz,) float32/float64.
    perms : sequence of N int64 arrays; ``perms[0]`` is empty (identity).  Those of the modes
        given (all by default) are built with the format, the others when first asked for.
    part_ptr : partition boundaries shared by every mode.
    """

    name = "coo"

    def __init__(self, X, modes=None):
        self.shape = tuple(X.shape)
        self.ndim = X.ndim
        self.nnz = X.nnz
        self.dtype = X.dtype
        self.subs = np.ascontiguousarray(X.subs, dtype=np.int64)
        self.vals = np.ascontiguousarray(X.vals)
        self.perms = _ModePerms(self, range(self.ndim) if modes is None else modes)
        self.part_ptr = partition_pointers(self.nnz)
        with np.errstate(over="ignore"):   # inf past 1.3e154: the fits rescale such data
            self.norm_sq = float(np.dot(self.vals.astype(np.float64),
                                        self.vals.astype(np.float64)))

    def row_ptr(self, mode):
        """(I_mode + 1) offsets: the nonzeros of row ``i`` of the mode-``mode`` unfolding are
        ``perms[mode][ptr[i]:ptr[i + 1]]`` (``ptr[i]:ptr[i + 1]`` for mode 0).  Built on first
        use and cached."""
        cache = self.__dict__.setdefault("_row_ptr", {})
        if mode not in cache:
            counts = np.bincount(self.subs[:, mode], minlength=self.shape[mode])
            ptr = np.zeros(self.shape[mode] + 1, dtype=np.int64)
            np.cumsum(counts, out=ptr[1:])
            cache[mode] = ptr
        return cache[mode]

    def linear_index(self):
        """Sorted int64 linear indices of the nonzeros (mode 0 slowest, i.e. in the order of
        ``subs``), or ``None`` when the product of the shape does not fit in int64.  Used by
        GCP's samplers to decide whether a coordinate is a nonzero.  Built on first use and
        cached."""
        if "_linear_index" not in self.__dict__:
            self._linear_index = linear_index(self.subs, self.shape)
        return self._linear_index

    @property
    def nbytes(self):
        n = (self.subs.nbytes + self.vals.nbytes + sum(p.nbytes for p in self.perms.built())
             + self.part_ptr.nbytes)
        if self.__dict__.get("_fibers") is not None:
            n += self._fibers.nbytes
        return n

    def poisson_data_term(self, weights, factors, eps, num_threads):
        """Σ x log(max(m, eps)) over the nonzeros, m the model values (formed on the fly;
        over the fibers where MTTKRP and Φ use them)."""
        nt = useful_threads(self.nnz, num_threads, len(weights))
        fibers = self.fibers()
        if fibers is not None:
            return fibers.poisson_data_term(weights, factors, eps, nt)
        return _kernels.poisson_data_term(self.subs, self.vals, weights, factors, float(eps),
                                          nt)

    def fibers(self):
        """The :class:`.fibers.TinyFibers` of this tensor when it has two tiny modes and long
        fibers (:func:`.fibers.fiber_modes`), which MTTKRP and Φ then use; else None.  Built
        on first use and kept."""
        return fibers_of(self)

    def accumulate_plan(self, factors, mode, out, B, eps, num_threads):
        """:meth:`accumulate` with these arguments bound, as a callable, where the fibers run
        it (:meth:`.fibers.TinyFibers.accumulate_plan`); else None."""
        fibers = self.fibers()
        if fibers is None:
            return None
        return fibers.accumulate_plan(factors, mode, out, B, eps,
                                      useful_threads(self.nnz, num_threads, out.shape[1]))

    def accumulate(self, factors, mode, out, B, eps, num_threads):
        """Run the CPU MTTKRP (``B is None``) or Φ kernel for ``mode`` into ``out``."""
        fibers = self.fibers()
        if fibers is not None:
            return fibers.accumulate(factors, mode, out, B, eps,
                                     useful_threads(self.nnz, num_threads, out.shape[1]))
        _kernels.sorted_accumulate(self.subs, self.vals, self.perms[mode], self.part_ptr,
                                   factors, int(mode), out, B, eps,
                                   useful_threads(self.nnz, num_threads, out.shape[1]))
        return out
