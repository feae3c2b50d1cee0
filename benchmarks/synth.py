"""Synthetic sparse tensors with Zipf-skewed coordinates, shaped like FROSTT tensors."""
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
    idx = np.searchsorted(cdf, rng.random(size), side="right")
    np.minimum(idx, n - 1, out=idx)
    return rng.permutation(n)[idx]


def synthetic_tensor(shape, nnz, seed=0, a=1.2, dtype=np.float64):
    """A sparse tensor of the given shape with about ``nnz`` nonzeros (duplicates summed)."""
    rng = np.random.default_rng(seed)
    subs = np.stack([zipf_indices(s, nnz, rng, a) for s in shape], axis=1)
    vals = rng.integers(1, 5, size=nnz).astype(dtype)
    return SparseTensor(subs, vals, shape, dtype=dtype, copy=False)


def scaled(name, max_nnz):
    """FROSTT shape ``name`` with its nonzero count capped at ``max_nnz``."""
    shape, nnz = FROSTT[name]
    return shape, min(nnz, max_nnz)
