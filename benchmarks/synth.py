"""Synthetic sparse tensors with Zipf-skewed coordinates, shaped like FROSTT tensors."""
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from sktensor_fast import SparseTensor

#: shapes and nonzero counts of FROSTT tensors (frostt.io)
FROSTT = {
    "uber": ((183, 24, 1140, 1717), 3_309_490),
    "nips": ((2482, 2862, 14036, 17), 3_101_609),
    "chicago": ((6186, 24, 77, 32), 5_330_673),
    "nell2": ((12092, 9184, 28818), 76_879_419),
    "enron": ((6066, 5699, 244268, 1176), 54_202_099),
}


def zipf_indices(n, size, rng, a=1.2):
    """``size`` indices in [0, n) with P(i) ∝ 1/(rank i)^a, heavy indices scattered."""
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** a
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    u = rng.random(size)
    perm = rng.permutation(n)
    out = np.empty(size, dtype=np.int64)
    guide = _guide_table(cdf) if n >= 64 else None

    def piece(lo):
        # the search and the gather of a slice (NumPy releases the GIL in both)
        hi = min(size, lo + _PIECE)
        idx = (np.searchsorted(cdf, u[lo:hi], side="right") if guide is None
               else _search_right(cdf, guide, u[lo:hi]))
        np.minimum(idx, n - 1, out=idx)
        np.take(perm, idx, out=out[lo:hi])

    starts = range(0, size, _PIECE)
    if _THREADS > 1 and size > _PIECE:
        with ThreadPoolExecutor(_THREADS) as pool:
            list(pool.map(piece, starts))
    else:
        for lo in starts:
            piece(lo)
    return out


#: bins of the guide table per entry of the CDF (:func:`_guide_table`)
_GUIDE_BINS = 16


def _guide_table(cdf):
    """``g[k] = searchsorted(cdf, k / K, "right")`` for the ``K + 1`` bin edges ``k / K`` of
    [0, 1], ``K`` = :data:`_GUIDE_BINS` x ``len(cdf)``."""
    K = _GUIDE_BINS * len(cdf)
    return np.searchsorted(cdf, np.arange(K + 1, dtype=np.float64) / K, side="right")


def _search_right(cdf, guide, u):
    """``np.searchsorted(cdf, u, "right")`` for ``u`` in [0, 1), through the guide table: where
    the bins around ``u``'s (one more on each side, against the rounding of ``u * K``) hold no
    entry of the CDF, the answer is the table's; the few others are searched."""
    K = len(guide) - 1
    b = (u * K).astype(np.int64)
    np.clip(b, 0, K - 1, out=b)
    lo = guide[np.maximum(b - 1, 0)]
    hi = guide[np.minimum(b + 2, K)]
    todo = np.flatnonzero(lo != hi)
    if todo.size:
        lo[todo] = np.searchsorted(cdf, u[todo], side="right")
    return lo


#: slices of :func:`zipf_indices`' searches, done on this many threads (the same draws: the
#: uniforms and the permutation are drawn first, in the order they always were)
_PIECE = 1 << 20
_THREADS = os.cpu_count() or 1


#: a folder where :func:`synthetic_tensor` keeps the tensors it generates and reads them back
#: (the same arrays; several benchmarks of one job on a large tensor generate it once)
CACHE_ENV = "SKTF_SYNTH_CACHE"


def synthetic_tensor(shape, nnz, seed=0, a=1.2, dtype=np.float64, exact=True):
    """A sparse tensor of the given shape with ``nnz`` distinct nonzeros (about ``nnz`` when
    ``exact`` is False: repeated coordinates are summed).  Values are counts 1..4.  With the
    environment variable ``SKTF_SYNTH_CACHE`` naming a folder, the coordinates and values are
    kept there and read back by the next call with the same arguments."""
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        return _generate(shape, nnz, seed, a, dtype, exact)
    key = "_".join(map(str, [*shape, nnz, seed, a, np.dtype(dtype).str, int(exact)]))
    path = os.path.join(folder, f"synth_{key}.npz")
    if os.path.exists(path):
        with np.load(path) as z:
            return SparseTensor(z["subs"], z["vals"], shape, dtype=dtype, copy=False)
    X = _generate(shape, nnz, seed, a, dtype, exact)
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp.npz"
    np.savez(tmp, subs=X.subs, vals=X.vals)
    os.replace(tmp, path)
    return X


def _sorted(lin):
    """The nonnegative int64 array ``lin`` in increasing order: by the package's compiled,
    threaded radix sort of construction for large arrays (the same result as ``np.sort``,
    several times faster on many cores), else by NumPy."""
    if lin.size < (1 << 20):
        lin.sort()
        return lin
    from sktensor_fast._native import _construct
    n = lin.size
    nbits = max(1, int(lin.max()).bit_length())
    keys = lin.view(np.uint64)
    scratch = np.empty(n, dtype=np.uint64)
    # values carried along (float32 zeros: the least traffic); only the keys are used
    vals, vals1, vals2 = (np.zeros(n, dtype=np.float32) for _ in range(3))
    which, _ = _construct.radix_sort(keys, vals, scratch, vals1, vals2, nbits, _THREADS)
    return (keys if which == 0 else scratch).view(np.int64)


def _generate(shape, nnz, seed, a, dtype, exact):
    rng = np.random.default_rng(seed)
    total = 1
    for s in shape:
        total *= int(s)
    if exact and total < 2 ** 62 and nnz <= total // 2:
        lin = np.zeros(0, dtype=np.int64)
        factor = 1.3
        while lin.size < nnz:
            need = int((nnz - lin.size) * factor) + 1024
            new = np.zeros(need, dtype=np.int64)
            for s in shape:
                new *= s
                new += zipf_indices(s, need, rng, a)
            lin = _sorted(np.concatenate([lin, new]))
            lin = lin[np.concatenate(([True], lin[1:] != lin[:-1]))]
            factor *= 2
        if lin.size > nnz:  # drop a random subset, keeping the sorted order
            keep = _sorted(rng.permutation(lin.size)[:nnz])
            lin = lin[keep]
        subs = np.empty((nnz, len(shape)), dtype=np.int64)
        for k in range(len(shape) - 1, -1, -1):
            subs[:, k] = lin % shape[k]
            lin //= shape[k]
    else:
        subs = np.stack([zipf_indices(s, nnz, rng, a) for s in shape], axis=1)
    vals = rng.integers(1, 5, size=subs.shape[0]).astype(dtype)
    return SparseTensor(subs, vals, shape, dtype=dtype, copy=False)


def scaled(name, max_nnz):
    """FROSTT shape ``name`` with its nonzero count capped at ``max_nnz``."""
    shape, nnz = FROSTT[name]
    return shape, min(nnz, max_nnz)
