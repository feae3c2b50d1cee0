"""COO with one permutation per mode (GenTen's permuted layout).

For mode ``n`` the nonzeros are visited in the order ``perm[n]`` (stable sort by the mode-``n``
coordinate), so that nonzeros updating the same output row are adjacent and a kernel can
accumulate each row's run privately.  Mode 0 needs no permutation because
:class:`~sktensor_fast.SparseTensor` keeps its nonzeros sorted lexicographically.
"""
import numpy as np

#: Nonzeros per partition: independent of the thread count, so results are reproducible.
MIN_PART = 2048
MAX_PARTS = 4096


def partition_pointers(nnz, min_part=MIN_PART, max_parts=MAX_PARTS):
    """Boundaries of equal-size partitions of ``nnz`` items (length nparts + 1)."""
    if nnz == 0:
        return np.zeros(1, dtype=np.int64)
    size = max(min_part, -(-nnz // max_parts))
    nparts = -(-nnz // size)
    ptr = np.arange(nparts + 1, dtype=np.int64) * size
    ptr[-1] = nnz
    return ptr


class CooFormat:
    """A sparse tensor laid out for the COO kernels.

    Attributes
    ----------
    subs : (nnz, N) int64, C-contiguous, lexicographically sorted.
    vals : (nnz,) float32/float64.
    perms : list of N int64 arrays; ``perms[0]`` is empty (identity).
    part_ptr : partition boundaries shared by every mode.
    """

    name = "coo"

    def __init__(self, X):
        self.shape = tuple(X.shape)
        self.ndim = X.ndim
        self.nnz = X.nnz
        self.dtype = X.dtype
        self.subs = np.ascontiguousarray(X.subs, dtype=np.int64)
        self.vals = np.ascontiguousarray(X.vals)
        self.perms = [np.zeros(0, dtype=np.int64)]
        for n in range(1, self.ndim):
            self.perms.append(np.argsort(self.subs[:, n], kind="stable").astype(np.int64))
        self.part_ptr = partition_pointers(self.nnz)
        self.norm_sq = float(np.dot(self.vals.astype(np.float64), self.vals.astype(np.float64)))

    @property
    def nbytes(self):
        return (self.subs.nbytes + self.vals.nbytes + sum(p.nbytes for p in self.perms)
                + self.part_ptr.nbytes)

    def accumulate(self, factors, mode, out, B, eps, num_threads):
        """Run the CPU MTTKRP (``B is None``) or Φ kernel for ``mode`` into ``out``."""
        from ..backends.cpu import _kernels
        _kernels.sorted_accumulate(self.subs, self.vals, self.perms[mode], self.part_ptr,
                                   factors, int(mode), out, B, eps, int(num_threads))
        return out
