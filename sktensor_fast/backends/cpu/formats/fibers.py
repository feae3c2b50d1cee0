"""Fibers of a 3-way tensor with two tiny modes: MTTKRP and CP-APR's Φ read one factor row
per nonzero.

A count tensor such as (hour x weekday x place) has two modes of a few dozen rows and one long
one, and often holds nearly every one of its entries.  Its nonzeros are sorted by (a, b, c),
``a`` the longest mode (the root), ``b`` the shorter of the other two and ``c`` the remaining
one (the leaf); a fiber is a run of nonzeros with the same (a, b), and stores (a, b) once,
each of its nonzeros only its value and its leaf coordinate.  The kernels
(``backends/cpu/_fiber.pyx``, ``include/sktf_fiber.h``) then read the rows of ``a`` and ``b``
once per fiber and one row of ``c`` per nonzero, and form the product of the fiber's rows once;
for the output ``a`` or ``b`` a fiber's nonzeros are summed in registers and added to the
output once per fiber (SPLATT's CSF, for the case where it pays most).  Against ALTO, whose
nonzeros each decode three coordinates, load three rows and multiply two, this halves the work
of a nonzero.

Used by the COO and ALTO formats for MTTKRP and Φ (the other kernels keep theirs) when the
tensor qualifies (:func:`fiber_modes`): 3 modes, the two short ones of at most
:data:`TINY_ROWS` rows, and fibers of at least :data:`MIN_FIBER_NNZ` nonzeros on average.

Determinism: the fibers are cut into chunks of about :data:`CHUNK_NNZ` nonzeros (a function
of the data only); each chunk adds into a private buffer over its own row interval of the
output mode, and the buffers are added in chunk order, so the result is bitwise the same for
every thread count.  Memory: per nonzero a 4-byte leaf coordinate and a copy of its value; per
fiber 8 bytes of offset and 8 of coordinates.
"""
import numpy as np

try:
    from .. import _fiber
except ImportError:  # pragma: no cover - not built: CpuBackend() says so
    _fiber = None

__all__ = ["TinyFibers", "fiber_modes", "USE_FIBERS", "TINY_ROWS", "MIN_FIBER_NNZ",
           "CHUNK_NNZ"]

#: The formats run MTTKRP and Φ over fibers where :func:`fiber_modes` says so when True.
USE_FIBERS = True

#: The two short modes may have at most this many rows each (this and the next two values:
#: doc/guide/tuning.rst, "Fibers for two tiny modes").
TINY_ROWS = 256
#: Nonzeros per fiber, on average, from which the fibers are used (nnz / (I_a I_b) at least
#: this, a bound of the mean that needs no sort).
MIN_FIBER_NNZ = 8
#: Nonzeros per chunk of fibers (chunks end at fiber ends).
CHUNK_NNZ = 1 << 14


def fiber_modes(shape, nnz):
    """``(a, b, c)`` (root, middle, leaf) when a tensor of this shape and ``nnz`` nonzeros is
    worth the fiber kernels (and :data:`USE_FIBERS` is on), else None."""
    shape = tuple(int(s) for s in shape)
    if not USE_FIBERS or len(shape) != 3 or nnz <= 0 or min(shape) < 1:
        return None
    a = max(range(3), key=lambda n: (shape[n], -n))
    b, c = sorted((n for n in range(3) if n != a), key=lambda n: (shape[n], n))
    if shape[c] > TINY_ROWS or shape[a] * shape[b] * MIN_FIBER_NNZ > nnz:
        return None
    return a, b, c


class TinyFibers:
    """The fibers of a validated 3-way tensor (``subs``, ``vals``, ``shape``) along the modes
    ``(a, b, c)`` of :func:`fiber_modes`.

    Examples
    --------
    >>> import numpy as np
    >>> from sktensor_fast import SparseTensor
    >>> from sktensor_fast.backends.cpu.formats.fibers import TinyFibers, fiber_modes
    >>> X = SparseTensor.from_dense(np.ones((9, 10, 40)))
    >>> fiber_modes(X.shape, X.nnz)
    (2, 0, 1)
    >>> F = TinyFibers(X.subs, X.vals, X.shape, (2, 0, 1))
    >>> F.n_fibers, F.mean_fiber_nnz
    (360, 10.0)
    """

    def __init__(self, subs, vals, shape, modes):
        a, b, c = (int(m) for m in modes)
        self.modes = (a, b, c)
        self.shape = tuple(int(s) for s in shape)
        self.nnz = int(len(vals))
        Ib, Ic = self.shape[b], self.shape[c]
        key = (subs[:, a].astype(np.int64) * Ib + subs[:, b]) * Ic + subs[:, c]
        order = np.argsort(key, kind="stable")
        self.vals = np.ascontiguousarray(vals[order])
        self.leaf = np.ascontiguousarray(subs[order, c], dtype=np.int32)
        fib = key[order] // Ic                               # a * Ib + b of every nonzero
        starts = np.flatnonzero(np.r_[True, fib[1:] != fib[:-1]]) if self.nnz else \
            np.zeros(0, dtype=np.int64)
        self.fptr = np.append(starts, self.nnz).astype(np.int64)
        self.fa = np.ascontiguousarray(fib[starts] // Ib, dtype=np.int32)
        self.fb = np.ascontiguousarray(fib[starts] % Ib, dtype=np.int32)
        # chunks of about CHUNK_NNZ nonzeros, ending at fiber ends
        cuts = np.searchsorted(self.fptr, np.arange(0, self.nnz, CHUNK_NNZ), side="left")
        self.cptr = np.unique(np.append(cuts, len(starts))).astype(np.int64)
        nch = len(self.cptr) - 1
        # every chunk's row interval in each role (root, middle, leaf)
        self.lo = np.zeros((3, nch), dtype=np.int64)
        self.hi = np.zeros((3, nch), dtype=np.int64)
        if nch:
            f0 = self.cptr[:-1]
            self.lo[0] = self.fa[f0]
            self.hi[0] = self.fa[self.cptr[1:] - 1]
            self.lo[1] = np.minimum.reduceat(self.fb, f0)
            self.hi[1] = np.maximum.reduceat(self.fb, f0)
            n0 = self.fptr[f0]
            self.lo[2] = np.minimum.reduceat(self.leaf, n0)
            self.hi[2] = np.maximum.reduceat(self.leaf, n0)
        # rows of the chunks' buffers in each role, summed: a kernel call's buffer needs this
        # many rows (kept as Python ints: NumPy calls between two kernels cost tens of µs)
        self._buffer_rows = [int(r) for r in (self.hi - self.lo + 1).sum(axis=1)]
        self._work = None

    @property
    def n_fibers(self):
        return len(self.fptr) - 1

    @property
    def mean_fiber_nnz(self):
        return self.nnz / max(self.n_fibers, 1)

    @property
    def nbytes(self):
        return sum(x.nbytes for x in (self.vals, self.leaf, self.fptr, self.fa, self.fb,
                                      self.cptr, self.lo, self.hi))

    def accumulate(self, factors, mode, out, B, eps, num_threads):
        """MTTKRP (``B is None``) or Φ of ``mode`` into ``out`` (as the formats'
        ``accumulate``); the buffers are kept on this object between calls."""
        a, b, c = self.modes
        which = self.modes.index(int(mode))
        need = self._buffer_rows[which] * out.shape[1]
        if self._work is None or self._work.dtype != out.dtype or self._work.shape[0] < need:
            self._work = np.empty(max(need, 1), dtype=out.dtype)
        _fiber.accumulate(self.fptr, self.fa, self.fb, self.leaf, self.vals, self.cptr,
                          self.lo[which], self.hi[which], factors[a], factors[b], factors[c],
                          which, out, B, float(eps), int(num_threads), self._work)
        return out

    def accumulate_plan(self, factors, mode, out, B, eps, num_threads):
        """:meth:`accumulate` of these arguments as a callable with every array bound once
        (``_fiber.PhiPlan.run``): each call computes into ``out`` from the arrays' current
        contents and returns it."""
        a, b, c = self.modes
        which = self.modes.index(int(mode))
        need = self._buffer_rows[which] * out.shape[1]
        if self._work is None or self._work.dtype != out.dtype or self._work.shape[0] < need:
            self._work = np.empty(max(need, 1), dtype=out.dtype)
        return _fiber.PhiPlan(self.fptr, self.fa, self.fb, self.leaf, self.vals, self.cptr,
                              self.lo[which], self.hi[which], factors[a], factors[b],
                              factors[c], which, out, B, float(eps), int(num_threads),
                              self._work).run

    def poisson_data_term(self, weights, factors, eps, num_threads):
        """Σ x log(max(m, eps)) over the nonzeros, m the model values of ``weights`` and
        ``factors`` (as the formats' ``poisson_data_term``): per fiber the product of its
        weights and root and middle rows once, per nonzero its dot product with one leaf
        row."""
        a, b, c = self.modes
        return _fiber.poisson_data_term(self.fptr, self.fa, self.fb, self.leaf, self.vals,
                                        self.cptr, factors[a], factors[b], factors[c],
                                        weights, float(eps), int(num_threads))


def fibers_of(T):
    """The :class:`TinyFibers` of the prepared tensor ``T`` (its ``subs``, ``vals``, ``shape``
    and ``nnz``) when it has two tiny modes and long fibers (:func:`fiber_modes`); else None.
    Built on first use and kept on ``T``."""
    if "_fibers" not in T.__dict__:
        modes = fiber_modes(T.shape, T.nnz)
        T._fibers = None if modes is None else TinyFibers(T.subs, T.vals, T.shape, modes)
    return T._fibers
