"""ALTO: the nonzeros in the order of one linearised, bit-interleaved index.

Layout
------
Mode ``n`` of length ``I_n`` needs ``b_n = ⌈log₂ I_n⌉`` bits (0 for a mode of length 1).  The
linear index of a nonzero is built by dealing those bits round-robin, from the least
significant end: level ``l`` takes bit ``l`` of every mode that still has one, the shortest of
those modes in the lowest position.  The modes that keep bits longest are the longest modes, so
they own the most significant bits.  Sorting by this index orders the nonzeros along a
recursive halving of the index space, longest mode first (ALTO, Helal et al., ICS'21): nonzeros
close in the tensor are close in memory for every mode at once, and a run of consecutive
nonzeros spans a small interval of each long mode.

A total of at most 64 bits is stored as one ``uint64`` per nonzero, at most 128 bits as two
(``lin[:, 0]`` the high word, ``lin[:, 1]`` the low one).  A wider tensor cannot use ALTO:
``format="alto"`` raises ``ValueError`` and ``format="auto"`` keeps COO.

A coordinate is recovered with one PEXT per mode and word on CPUs with a fast BMI2 PEXT, else
with a precomputed table of (shift, mask) groups per mode (``backends/cpu/_alto.pyx``).

Partitions and conflict resolution
----------------------------------
The sorted nonzeros are cut into ``P`` partitions of equal nonzero counts.  ``P`` depends on the
number of nonzeros only (:func:`default_partitions`), never on the machine, the thread setting
or the CPU affinity: one partition per ``PART_NNZ`` = 2¹⁴ nonzeros up to 64 partitions, then
one per 2¹⁷ nonzeros up to ``MAX_PARTS`` = 512 (so 64 partitions from 1M to 8.4M nonzeros, the
count earlier versions used on machines of up to 16 cores).  For each partition the interval
``[min, max]`` of its coordinates in every mode is recorded at build time.  Partitions are handed to the
threads dynamically, so a thread that the operating system holds back delays no other.

The MTTKRP / Φ of mode ``n`` updates output rows that several partitions may share.  Two ways to
resolve this, chosen per mode (``conflict="auto"``) by the reuse ``nnz / I_n``:

* ``"buffer"`` (high reuse): each partition accumulates into a private buffer over its own row
  interval of mode ``n``; a parallel loop over output rows then adds the buffers, in partition
  order.  Extra traffic: ``Σ_p (interval_p) · R`` values zeroed, written and merged, small when
  rows are reused a lot.
* ``"compact"`` (low reuse): a partition adds straight into the output the rows that no other
  partition touches; the rows it shares with another partition go to its own compact buffer
  (one entry per such row), and a parallel loop over output rows adds those buffers in
  partition order.  The plan (which rows each partition shares, and per nonzero its row's
  entry in the compact buffer: 4 bytes) is built once per mode, on first use.

In both, every output row is the sum of its partitions' contributions in partition order, each
in nonzero order: the result is bitwise the same for every thread count, affinity and schedule.
(Earlier versions resolved low-reuse modes with atomic adds, whose order varies from run to run.)

The switch is at ``REUSE_THRESHOLD`` = 8 nonzeros per row: from there up the buffers beat the
atomic path that the compact one replaced, on uniform and on skewed coordinates; below it the
gain is small or negative and the buffers would take more memory than the tensor's own index
(``doc/guide/tuning.rst``, "ALTO: buffers or compact path").  The buffer path is also skipped
when its buffers would hold more than ``MAX_BUFFER_ROWS_PER_NNZ`` · nnz rows (memory:
``buffer_rows · R`` values, kept between calls).

Nor is it used where the buffers overlap: when they hold at least ``BUFFER_OVERLAP`` = 4 times
the rows of the mode and the compact buffers at most ``COMPACT_SHARE`` = 1/4 of the rows the
private ones would (counted in the same pass that flags the shared rows, before any plan is
built).  That is the mark of power-law coordinates whose heavy rows are spread over the mode:
each partition then holds nonzeros in rows all over the mode, so every partition's interval
spans most of it, while only the rows of many nonzeros are shared.  On such a tensor (2M
nonzeros, 20000³, Pareto(1.2) coordinates, R = 16) the private buffers held 20-30 times the
output and their zeroing and merging took a third of the MTTKRP; the compact path's MTTKRP is
1.5× faster on one thread (``benchmarks/experiments/bench_skewed.py``).  On uniform and on Zipf
coordinates of FROSTT shapes the buffers overlap less or share most of their rows, and stay.
Both paths add the same numbers in the same order, so the choice changes no bit of a result.

Choosing ALTO (``format="auto"``)
---------------------------------
``build_format(X, "auto")`` uses ALTO when the index fits in 128 bits and ``X`` has at least
``AUTO_ALTO_MIN_NNZ`` = 100 000 nonzeros (:mod:`sktensor_fast.backends.cpu.formats`): on FROSTT-shaped tensors
an MTTKRP sweep over all modes is 2.6–4.4× faster than with COO and building ALTO costs about
one such sweep (``doc/guide/tuning.rst``, "ALTO from 100,000 nonzeros").

Memory
------
Per nonzero, ALTO's own arrays hold 8 or 16 bytes of index and one value.  ``subs`` and ``vals``
(original, lexicographic order) are the arrays of the :class:`~sktensor_fast.SparseTensor` the
format was built from, not copies: kernels that work on coordinates (model values, CP-APR's row
solvers, GCP's samplers) keep using them, and they cost no memory beyond what the caller
already holds.  The per-mode permutations of COO (``perms``, ``row_ptr``, ``linear_index``) are
built only when such a kernel asks for them, through a COO view sharing ``subs`` and ``vals``.
"""
import numpy as np

from ...._threads import get_num_threads
from .coo import CooFormat, useful_threads
from .fibers import fibers_of

try:
    from .. import _alto, _kernels
except ImportError:  # pragma: no cover - not built: CpuBackend() says so
    _alto = _kernels = None

__all__ = ["AltoFormat", "alto_bits", "alto_layout", "alto_support", "MAX_BITS",
           "REUSE_THRESHOLD"]

#: Widest linear index supported (two 64-bit words).
MAX_BITS = 128

#: Reuse (nonzeros per row of the target mode) from which the private-buffer path is used.
REUSE_THRESHOLD = 8.0

#: Partitioning (by the nonzero count only): one partition per PART_NNZ nonzeros up to
#: MIN_PART_CAP partitions, then one per LARGE_PART_NNZ up to MAX_PARTS.
PART_NNZ = 2 ** 14
MIN_PART_CAP = 64
LARGE_PART_NNZ = 2 ** 17
MAX_PARTS = 512

#: The buffer path is not used when its buffers would hold more rows than this times nnz.
MAX_BUFFER_ROWS_PER_NNZ = 0.5

#: ... nor when its buffers hold at least BUFFER_OVERLAP times the rows of the mode while the
#: compact path's buffers would hold at most COMPACT_SHARE of their rows (power-law
#: coordinates: every partition's interval spans most of the mode, few rows are shared).
BUFFER_OVERLAP = 4.0
COMPACT_SHARE = 0.25

#: Copies ("lanes") of every partition's private buffer on the buffer path when the copies
#: of the largest one take at most LANE_BYTES: consecutive nonzeros add into different
#: copies, so that a small output (a tiny mode), whose rows come back every few nonzeros, does
#: not wait for the previous update of a row to reach the cache before the next one.  Off
#: (1): in the package they measured within the noise, and with lanes the buffer path adds
#: in another order than the compact path, which the choice between the two (power-law
#: coordinates) relies on giving the same bits.  The kernels keep the option (tests set it).
LANES = 1
LANE_BYTES = 32 * 1024

#: Private buffers alive at once, in entries per nonzero (8 bytes per nonzero in float64, a
#: quarter of the COO tensor's 32): the buffer path runs its partitions in waves that fit, each
#: wave at least as many partitions as threads.
BUFFER_ENTRIES_PER_NNZ = 1.0

CONFLICTS = ("auto", "buffer", "compact")


def alto_bits(shape):
    """Index bits of every mode: ``⌈log₂ I_n⌉`` (0 for a mode of length 1)."""
    return [max(int(s) - 1, 0).bit_length() for s in shape]


def alto_support(shape):
    """``(True, "")`` when ALTO can store a tensor of this shape, else ``(False, reason)``."""
    total = sum(alto_bits(shape))
    if total > MAX_BITS:
        return False, (f"ALTO needs {total} index bits for shape {tuple(int(s) for s in shape)} "
                       f"(the sum of ceil(log2 I_n)), more than the {MAX_BITS} it supports")
    return True, ""


def alto_layout(shape):
    """Positions of the coordinate bits in the linear index.

    Returns a list ``pos`` with ``pos[n][l]`` the index bit that holds bit ``l`` of the
    mode-``n`` coordinate.  Bits are dealt level by level from the least significant end; in
    each level the shortest mode comes first (lowest), ties broken by the higher mode number.
    """
    bits = alto_bits(shape)
    order = sorted(range(len(shape)), key=lambda n: (int(shape[n]), -n))
    pos = [[] for _ in shape]
    p = 0
    for level in range(max(bits, default=0)):
        for n in order:
            if bits[n] > level:
                pos[n].append(p)
                p += 1
    return pos


def _codec_arrays(shape):
    """Masks for PEXT/PDEP and the (word, right shift, left shift, mask) groups per mode."""
    pos = alto_layout(shape)
    total = sum(len(p) for p in pos)
    words = 1 if total <= 64 else 2
    N = len(shape)
    mask_lo = np.zeros(N, dtype=np.uint64)
    mask_hi = np.zeros(N, dtype=np.uint64)
    lo_bits = np.zeros(N, dtype=np.int32)
    gptr = [0]
    gword, grs, gls, gmask = [], [], [], []
    for n, pn in enumerate(pos):
        groups = {}
        mlo = mhi = 0
        for level, p in enumerate(pn):
            word, q = (0, p) if p < 64 else (1, p - 64)
            if word == 0:
                mlo |= 1 << q
            else:
                mhi |= 1 << q
            rs, ls = (q - level, 0) if q >= level else (0, level - q)
            key = (word, rs, ls)
            groups[key] = groups.get(key, 0) | (1 << level)
        mask_lo[n] = mlo
        mask_hi[n] = mhi
        lo_bits[n] = bin(mlo).count("1")
        for (word, rs, ls), m in sorted(groups.items()):
            gword.append(word)
            grs.append(rs)
            gls.append(ls)
            gmask.append(m)
        gptr.append(len(gword))
    # table decoder: byte k of the index -> its bits moved to the mode-contiguous layout
    gbits = np.array([len(pn) for pn in pos], dtype=np.int32)
    goff = np.zeros(N, dtype=np.int32)
    if N:
        goff[1:] = np.cumsum(gbits)[:-1]
    nbytes = -(-total // 8)
    tab = np.zeros((nbytes, 256, words), dtype=np.uint64)
    byte_vals = np.arange(256, dtype=np.uint64)
    for n, pn in enumerate(pos):
        for level, p in enumerate(pn):
            g = int(goff[n]) + level
            bit = (byte_vals >> np.uint64(p % 8)) & np.uint64(1)
            tab[p // 8, :, g // 64] |= bit << np.uint64(g % 64)
    return dict(words=words, total=total, mask_lo=mask_lo, mask_hi=mask_hi, lo_bits=lo_bits,
                tab=tab, goff=goff, gbits=gbits,
                gptr=np.asarray(gptr, dtype=np.int32), gword=np.asarray(gword, dtype=np.int32),
                grs=np.asarray(grs, dtype=np.int32), gls=np.asarray(gls, dtype=np.int32),
                gmask=np.asarray(gmask, dtype=np.uint64))


def make_codec(shape):
    """The compiled codec of ``shape`` and its total bit count."""
    a = _codec_arrays(shape)
    codec = _alto.Codec(a["words"], a["mask_lo"], a["mask_hi"], a["lo_bits"], a["gptr"],
                        a["gword"], a["grs"], a["gls"], a["gmask"], a["tab"], a["goff"],
                        a["gbits"])
    return codec, a["total"]


def default_partitions(nnz):
    """Partition count for ``nnz`` nonzeros: a function of ``nnz`` alone (see the module
    docstring), so that results do not depend on the machine, the threads or the affinity."""
    nnz = int(nnz)
    if nnz <= 0:
        return 0
    small = min(-(-nnz // PART_NNZ), MIN_PART_CAP)
    large = min(-(-nnz // LARGE_PART_NNZ), MAX_PARTS)
    return int(min(nnz, max(small, large)))


class AltoFormat:
    """A sparse tensor in ALTO order for the CPU kernels.

    Parameters
    ----------
    X : SparseTensor
        Validated tensor (coordinates in range); its ``subs`` and ``vals`` are referenced, not
        copied.
    n_partitions : int, optional
        Number of equal-nonzero partitions (default: :func:`default_partitions`).
    conflict : {"auto", "buffer", "compact"}, default="auto"
        How output conflicts between partitions are resolved: per mode by reuse, or forced.
    num_threads : int, optional
        Threads for building (default: the CPU kernels' setting).

    Attributes
    ----------
    lin : (nnz,) or (nnz, 2) uint64
        Sorted linear indices (two words: high, low).
    sorted_vals : (nnz,) values in the order of ``lin``.
    parts : (P + 1,) int64 partition boundaries into ``lin``.
    part_min, part_max : (P, N) int64 coordinate interval of every partition in every mode.
    bits : int, total index bits; ``words`` : 1 or 2.
    subs, vals : the source tensor's coordinates and values (lexicographic order).

    Examples
    --------
    >>> import numpy as np
    >>> from sktensor_fast import SparseTensor
    >>> from sktensor_fast.backends.cpu.formats import AltoFormat
    >>> X = SparseTensor([[0, 1, 2], [3, 0, 1]], [1.0, 2.0], shape=(4, 2, 3))
    >>> T = AltoFormat(X)
    >>> T.bits, T.words
    (5, 1)
    >>> T.decode().tolist()
    [[0, 1, 2], [3, 0, 1]]
    """

    name = "alto"

    def __init__(self, X, *, n_partitions=None, conflict="auto", num_threads=None):
        ok, why = alto_support(X.shape)
        if not ok:
            raise ValueError(why + "; use format='coo' (format='auto' falls back to COO)")
        if conflict not in CONFLICTS:
            raise ValueError(f"conflict must be one of {CONFLICTS}, got {conflict!r}")
        if num_threads is None:
            num_threads = get_num_threads()
        nt = useful_threads(int(X.nnz), int(num_threads))
        self.shape = tuple(int(s) for s in X.shape)
        self.ndim = len(self.shape)
        self.nnz = int(X.nnz)
        self.dtype = X.dtype
        self.subs = np.ascontiguousarray(X.subs, dtype=np.int64)
        self.vals = np.ascontiguousarray(X.vals)
        with np.errstate(over="ignore"):   # inf past 1.3e154: the fits rescale such data
            self.norm_sq = float(np.dot(self.vals.astype(np.float64),
                                        self.vals.astype(np.float64)))
        self.conflict = conflict
        self.codec, self.bits = make_codec(self.shape)
        self.mode_bits = alto_bits(self.shape)
        self.words = self.codec.words
        # encode, then sort the indices carrying the values along (LSD radix sort)
        self.lin = self.codec.encode(self.subs, nt)
        self.sorted_vals = self.vals.copy()
        self.codec.sort(self.lin, self.sorted_vals, self.bits, nt)
        P = default_partitions(self.nnz) if n_partitions is None else int(n_partitions)
        if self.nnz > 0 and P < 1:
            raise ValueError(f"n_partitions must be positive, got {n_partitions!r}")
        P = min(P, self.nnz)
        self.parts = (np.arange(P + 1, dtype=np.int64) * self.nnz) // max(P, 1)
        self.part_min, self.part_max = self.codec.intervals(self.lin, self.parts, nt)
        self._shared = {}
        self._compact_entries = {}
        self._conflicts = {}
        self._plans = {}
        self._coo = None
        self._work = None

    # ------------------------------------------------------------------ properties
    @property
    def n_partitions(self):
        return len(self.parts) - 1

    @property
    def nbytes(self):
        """Bytes of ALTO's own arrays (``subs``/``vals`` belong to the source tensor)."""
        n = (self.lin.nbytes + self.sorted_vals.nbytes + self.parts.nbytes
             + self.part_min.nbytes + self.part_max.nbytes)
        n += sum(f.nbytes for f in self._shared.values())
        if self.__dict__.get("_fibers") is not None:
            n += self._fibers.nbytes
        n += sum(a.nbytes for plan in self._plans.values() for a in plan)
        if self._work is not None:
            n += self._work.nbytes
        return n

    def reuse(self, mode):
        """Nonzeros per row of ``mode``."""
        return self.nnz / max(self.shape[mode], 1)

    def buffer_rows(self, mode):
        """Rows of the private buffers of the buffer path for ``mode`` (all partitions)."""
        if self.n_partitions == 0:
            return 0
        d = self.part_max[:, mode] - self.part_min[:, mode] + 1
        return int(np.sum(np.maximum(d, 0)))

    def conflict_for(self, mode):
        """``"buffer"`` or ``"compact"``: how :meth:`accumulate` resolves conflicts for
        ``mode`` (a function of the data and the partitions only; decided once per mode).

        The buffer path needs a reuse of at least ``REUSE_THRESHOLD`` and buffers of at most
        ``MAX_BUFFER_ROWS_PER_NNZ`` · nnz rows.  It is also left for the compact path where its
        buffers overlap: when they hold ``BUFFER_OVERLAP`` times the rows of the mode or more
        and the compact buffers at most ``COMPACT_SHARE`` of their rows (see the module
        docstring).  Both paths give the same bits.
        """
        if self.conflict != "auto":
            return self.conflict
        mode = int(mode)
        if mode not in self._conflicts:
            rows = self.buffer_rows(mode)
            how = "compact"
            if (self.reuse(mode) >= REUSE_THRESHOLD
                    and rows <= MAX_BUFFER_ROWS_PER_NNZ * self.nnz):
                how = "buffer"
                if (rows >= BUFFER_OVERLAP * self.shape[mode]
                        and self.compact_rows(mode) <= COMPACT_SHARE * rows):
                    how = "compact"
            self._conflicts[mode] = how
        return self._conflicts[mode]

    def lanes_for(self, mode, R, conflict=None):
        """Copies of each partition's buffer for ``mode`` at rank ``R``: :data:`LANES` on the
        buffer path when they fit in :data:`LANE_BYTES` for the widest partition, else 1 (a
        function of the data, the partitions and R only, never of the threads)."""
        how = conflict or self.conflict_for(mode)
        if how != "buffer" or self.n_partitions == 0 or LANES <= 1:
            return 1
        span = int(np.max(self.part_max[:, mode] - self.part_min[:, mode] + 1))
        itemsize = np.dtype(self.dtype).itemsize
        return LANES if span * int(R) * itemsize * LANES <= LANE_BYTES else 1

    def rows_cached(self, R, mode=None):
        """Whether the factor rows a kernel at rank ``R`` reads (every mode's; for ``mode``,
        also B and the output of Φ) stay in a core's cache: the kernels then prefetch
        nothing (``_kernels.factors_cached``, the rule of the COO kernels)."""
        rows = sum(self.shape) + (self.shape[mode] if mode is not None else 0)
        return bool(_kernels.factors_cached(rows * int(R) * np.dtype(self.dtype).itemsize))

    def threads_for(self, num_threads, rank=8):
        """Threads worth running for one call at ``rank``: at most one per partition, and
        what :func:`.coo.useful_threads` says the work is worth."""
        return max(1, min(useful_threads(self.nnz, num_threads, rank), self.n_partitions))

    def shared_rows(self, mode):
        """uint8 flags over the rows of ``mode``: 1 where several partitions have nonzeros
        (one pass over the nonzeros, on first use; kept)."""
        if mode not in self._shared:
            flags, entries = self.codec.shared_rows(self.lin, self.parts, int(mode),
                                                    self.shape[mode])
            self._shared[mode] = flags
            self._compact_entries[mode] = entries
        return self._shared[mode]

    def compact_plan(self, mode):
        """The compact path's plan for ``mode`` (built on first use and kept): ``slot`` (int32
        per nonzero: its row's entry in its partition's compact buffer, -1 where the partition
        owns the row), ``rows`` (the shared rows of every partition, sorted per partition) and
        ``roff`` (partition offsets into ``rows``)."""
        if mode not in self._plans:
            self._plans[mode] = self.codec.compact_plan(
                self.lin, self.parts, int(mode), self.shared_rows(mode),
                int(self.mode_bits[mode]), self.threads_for(get_num_threads()))
        return self._plans[mode]

    def compact_rows(self, mode):
        """Entries of the compact buffers of ``mode`` (all partitions): over the rows that
        several partitions share, the number of partitions with nonzeros in each.  Counted by
        :meth:`shared_rows`, without building the plan."""
        self.shared_rows(mode)
        return int(self._compact_entries[mode])

    def decode(self, num_threads=1):
        """Coordinates (nnz, N) in ALTO order (a new array)."""
        return self.codec.decode(self.lin, int(num_threads))

    # ------------------------------------------------------------------ kernels
    def accumulate_plan(self, factors, mode, out, B, eps, num_threads):
        """:meth:`accumulate` with these arguments bound, as a callable, where the fibers run
        it (:meth:`.fibers.TinyFibers.accumulate_plan`); else None."""
        fibers = self.fibers() if self.conflict == "auto" else None
        if fibers is None:
            return None
        return fibers.accumulate_plan(factors, mode, out, B, eps,
                                      self.threads_for(num_threads, out.shape[1]))

    def accumulate(self, factors, mode, out, B, eps, num_threads, conflict=None, times=None):
        """Run the CPU MTTKRP (``B is None``) or Φ kernel for ``mode`` into ``out``.

        ``conflict`` (``"buffer"`` / ``"compact"``) overrides :meth:`conflict_for`.  At most
        :meth:`threads_for` threads run.  The buffers are kept on this object, so two calls on
        the same object must not run at the same time.  ``times``: an optional float64 array
        of ``4 + 2 * num_threads`` entries that receives the seconds of the kernel's phases
        (see ``_alto.accumulate``; for benchmarks).
        """
        how = conflict or self.conflict_for(mode)
        if how not in ("buffer", "compact"):
            raise ValueError(f"conflict must be 'buffer' or 'compact', got {how!r}")
        R = out.shape[1]
        nt = self.threads_for(num_threads, R)
        fibers = self.fibers() if conflict is None and self.conflict == "auto" else None
        if fibers is not None:
            return fibers.accumulate(factors, mode, out, B, eps, nt)
        plan = self.compact_plan(mode) if how == "compact" else None
        lanes = self.lanes_for(mode, R, how)
        waves, need = self.buffer_waves(mode, R, nt, how, lanes)
        work = self._work
        if need > 0 and (work is None or work.dtype != out.dtype or work.shape[0] < need):
            # kept between calls: the pages of a fresh allocation would fault every time
            work = self._work = np.empty(need, dtype=out.dtype)
        _alto.accumulate(self.codec, self.lin, self.sorted_vals, self.parts, self.part_min,
                         self.part_max, factors, int(mode), out, B, float(eps), nt,
                         how == "buffer", plan, work, waves, lanes,
                         self.rows_cached(R, mode), times)
        return out

    def buffer_waves(self, mode, R, num_threads, conflict="buffer", lanes=1):
        """Waves of the buffer (or compact) path for ``mode`` at rank ``R``: (boundaries into
        the partitions, buffer entries the largest wave needs).  Consecutive partitions are
        grouped while their buffers (``lanes`` copies each on the buffer path) fit in
        ``BUFFER_ENTRIES_PER_NNZ * nnz`` entries, and every wave but the last has at least
        ``num_threads`` partitions."""
        key = (int(mode), int(R), int(num_threads), conflict, int(lanes))
        cache = self.__dict__.setdefault("_waves", {})
        if key not in cache:
            if conflict == "compact":
                spans = np.diff(self.compact_plan(mode)[2]) * int(R)
            else:
                spans = (np.maximum(self.part_max[:, mode] - self.part_min[:, mode] + 1, 0)
                         * int(R) * int(lanes))
            cap = max(1, int(BUFFER_ENTRIES_PER_NNZ * self.nnz))
            bounds, start, size, need = [0], 0, 0, 0
            for p, sp in enumerate(spans.tolist()):
                if p - start >= max(1, num_threads) and size + sp > cap:
                    bounds.append(p)
                    need = max(need, size)
                    start, size = p, 0
                size += sp
            bounds.append(len(spans))
            cache[key] = (np.asarray(bounds, dtype=np.int64), max(need, size))
        return cache[key]

    def fibers(self):
        """The :class:`.fibers.TinyFibers` of this tensor when it has two tiny modes and long
        fibers (:func:`.fibers.fiber_modes`), which MTTKRP and Φ then use; else None.  Built
        on first use and kept."""
        return fibers_of(self)

    def kruskal_values(self, weights, factors, num_threads=1):
        """Model values at the nonzeros, in ALTO order (aligned with ``sorted_vals``)."""
        out = np.empty(self.nnz, dtype=self.dtype)
        w = np.ascontiguousarray(weights, dtype=self.dtype)
        facs = [np.ascontiguousarray(f, dtype=self.dtype) for f in factors]
        _alto.kruskal_values(self.codec, self.lin, w, facs, out,
                             self.threads_for(num_threads, len(w)), self.rows_cached(len(w)))
        return out

    def poisson_data_term(self, weights, factors, eps, num_threads=1):
        """Σ x log(max(m, eps)) over the nonzeros, m the model values (formed on the fly;
        over the fibers where MTTKRP and Φ use them)."""
        nt = self.threads_for(num_threads, len(weights))
        fibers = self.fibers() if self.conflict == "auto" else None
        if fibers is not None:
            return fibers.poisson_data_term(weights, factors, eps, nt)
        return _alto.poisson_data_term(self.codec, self.lin, self.sorted_vals, weights, factors,
                                       float(eps), nt, self.rows_cached(len(weights)))

    # ------------------------------------------------------------------ COO view
    def _coo_view(self):
        if self._coo is None:
            self._coo = CooFormat(self, modes=())  # shares subs and vals; perms when asked
        return self._coo

    @property
    def perms(self):
        """Per-mode permutations of ``subs`` (COO's, built on first use)."""
        return self._coo_view().perms

    def row_ptr(self, mode):
        """Row offsets of ``mode`` into ``perms[mode]`` (see :meth:`CooFormat.row_ptr`)."""
        return self._coo_view().row_ptr(mode)

    def linear_index(self):
        """Row-major linear indices in the order of ``subs`` (see
        :meth:`CooFormat.linear_index`); unrelated to the ALTO index ``lin``."""
        return self._coo_view().linear_index()

    def __repr__(self):
        return (f"AltoFormat(shape={self.shape}, nnz={self.nnz}, bits={self.bits}, "
                f"partitions={self.n_partitions})")
