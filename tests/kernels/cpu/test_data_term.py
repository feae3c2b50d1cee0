"""The Poisson data term Σ x log(max(m, eps)) of the CPU formats (COO, ALTO, fibers) and the
vectorised logarithm it takes in blocks (include/sktf_log.h): the logarithm against the C
library's over the whole range of doubles, every instance the CPU runs; the data term against
NumPy on every format, decoder, number of modes, rank class and value type; the same bits on
every thread count."""
import math

import numpy as np
import pytest

from sktensor_fast import SparseTensor, num_threads
from sktensor_fast.backends import get_backend
from sktensor_fast.backends.cpu import _alto, _fiber, _kernels
from sktensor_fast.backends.cpu.formats import AltoFormat, CooFormat
from sktensor_fast.backends.cpu.formats import fibers as fib_mod

from _reference import random_sparse

LEVELS = _kernels.log_levels()
MODULES = (_kernels, _alto, _fiber)
TINY = np.finfo(np.float64).tiny                  # DBL_MIN, the smallest normal double


def _libm_log(v):
    """The C library's log of every entry (``math.log`` calls it), with its IEEE results for
    zero, negative, infinite and NaN arguments."""
    out = np.empty(len(v))
    for i, x in enumerate(v.tolist()):
        if x > 0 and x != math.inf:
            out[i] = math.log(x)
        elif x == 0:
            out[i] = -math.inf
        elif x == math.inf:
            out[i] = math.inf
        else:
            out[i] = math.nan
    return out


def _ulps(a, b):
    """Distance in units in the last place between doubles a and b (both finite)."""
    def key(x):
        i = x.view(np.int64)
        return np.where(i < 0, np.int64(-2 ** 63) - i, i)
    return np.abs(key(a).astype(object) - key(b).astype(object)).astype(np.float64)


def _arguments(rng):
    """Positive doubles over the whole range: every exponent uniformly, the neighbourhood of
    1 (where log is small), of sqrt(1/2) and sqrt(2) (the ends of the reduced interval),
    powers of two and their neighbours, the clamps the kernels use (1e-10, 1e-300, DBL_MIN)
    and the largest doubles."""
    parts = [
        # random bit patterns of all positive normal doubles
        rng.integers(0x0010000000000000, 0x7FF0000000000000, 200_000,
                     dtype=np.int64).view(np.float64),
        1.0 + rng.uniform(-1e-3, 1e-3, 20_000),
        1.0 + rng.uniform(-1e-12, 1e-12, 5_000),
        rng.uniform(0.5, 2.0, 50_000),
        rng.uniform(1e-3, 1e6, 50_000),                       # model values of count data
    ]
    edges = [math.sqrt(0.5), math.sqrt(2.0), 1.0, 2.0, 0.5, 1e-10, 1e-300, TINY,
             np.finfo(np.float64).max, 1e300, 1e-308]
    edges += [2.0 ** k for k in range(-1022, 1024, 7)]
    near = []
    for e in edges:
        x = np.float64(e)
        for _ in range(4):
            near.append(x)
            x = np.nextafter(x, np.inf) if x < np.finfo(np.float64).max else x
        x = np.float64(e)
        for _ in range(4):
            x = np.nextafter(x, 0.0)
            near.append(x)
    parts.append(np.array(near, dtype=np.float64))
    v = np.concatenate(parts)
    return v[(v >= TINY) & np.isfinite(v)]


@pytest.mark.parametrize("level", LEVELS)
def test_log_within_one_ulp_of_libm(level):
    rng = np.random.default_rng(level)
    v = _arguments(rng)
    got = _kernels.log_array(v, level)
    ref = _libm_log(v)
    assert np.all(np.isfinite(got))
    d = _ulps(got, ref)
    assert d.max() <= 1, (d.max(), v[np.argmax(d)])
    assert np.mean(d > 0) < 0.05                          # mostly correctly rounded
    # exact where the result is exact
    ones = _kernels.log_array(np.array([1.0, 2.0 ** 10]), level)
    assert ones[0] == 0.0 and ones[1] == 10 * math.log(2.0)


@pytest.mark.parametrize("level", LEVELS)
def test_log_special_arguments_take_libm(level):
    """Subnormal, zero, negative, infinite and NaN arguments give the C library's results
    (the patched entries of a block), also in the middle of a block of ordinary values."""
    special = np.array([5e-324, 1e-310, 2.2e-308, TINY * 0.5, 0.0, -0.0, -1.0, -1e-300,
                        np.inf, -np.inf, np.nan])
    v = np.full(1000, 3.5)
    v[::97][:len(special)] = special
    got = _kernels.log_array(v, level)
    ref = _libm_log(v)
    np.testing.assert_array_equal(got, ref)              # equal, NaN where NaN
    sub = v[(v > 0) & (v < TINY)]
    assert len(sub) >= 3 and np.all(np.isfinite(_kernels.log_array(sub, level)))


def test_log_levels_checked():
    with pytest.raises(ValueError, match="level"):
        _kernels.log_array(np.ones(3), max(LEVELS) + 1)
    with pytest.raises(ValueError, match="level"):
        _kernels.log_array(np.ones(3), -2)
    assert _kernels.log_array(np.ones(0)).shape == (0,)


# ------------------------------------------------------------------------- the data term
def _reference(X, w, factors, eps):
    """(Σ x log(max(m, eps)), Σ |x log(max(m, eps))|) over the nonzeros with x != 0, m in
    float64 by NumPy."""
    f64 = [np.asarray(f, dtype=np.float64) for f in factors]
    m = np.asarray(w, dtype=np.float64) * np.prod([f[X.subs[:, k]] for k, f in enumerate(f64)],
                                                  axis=0)
    m = m.sum(axis=1)
    x = X.vals.astype(np.float64)
    nz = x != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        t = x[nz] * np.log(np.maximum(m[nz], eps))
    return float(np.sum(t)), float(np.sum(np.abs(t)))


def _tiny_tensor(rng, shape=(12, 150, 9), dtype=np.float64):
    """Counts on nearly every entry of a tensor with two tiny modes: the fibers' case (some
    entries explicit zeros, some missing)."""
    dense = (rng.poisson(3.0, size=shape) + 1).astype(dtype)
    dense[rng.random(shape) > 0.9] = 0
    X = SparseTensor.from_dense(dense)
    vals = X.vals.copy()
    vals[::37] = 0                                        # explicit zeros: no contribution
    return SparseTensor(X.subs, vals, X.shape, dtype=dtype)


def _formats(X, fibers):
    """(name, prepared tensor) of every CPU layout of X: COO and ALTO on their own kernels,
    and over fibers where X qualifies."""
    out = []
    if fibers:
        out += [("coo+fibers", CooFormat(X)), ("alto+fibers", AltoFormat(X))]
        assert all(T.fibers() is not None for _, T in out)
    old = fib_mod.USE_FIBERS
    fib_mod.USE_FIBERS = False
    try:
        out += [("coo", CooFormat(X)), ("alto", AltoFormat(X, n_partitions=5))]
        assert all(T.fibers() is None for _, T in out[-2:])
    finally:
        fib_mod.USE_FIBERS = old
    return out


@pytest.fixture(params=["generic"] + (["pext"] if _alto.pext_available() else []))
def decoder(request):
    old = _alto.set_decoder(request.param)
    yield request.param
    _alto.set_decoder(old)


CASES = [((40, 7, 300), 6000, False), ((12, 5, 9, 7), 3000, False),
         ((2 ** 17, 2 ** 16, 2 ** 16, 2 ** 16), 3000, False),      # two-word ALTO index
         ((6, 5, 9, 7, 4), 3000, False), ((3, 4, 2, 5, 3, 2), 600, False),
         ("tiny", None, True)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "tiny" if c[0] == "tiny" else
                         "x".join(map(str, c[0])))
@pytest.mark.parametrize("R", [3, 8, 16, 32, 40])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_data_term_vs_numpy_and_threads(case, R, dtype, decoder, monkeypatch):
    """Every format's data term agrees with NumPy's (1e-13 of Σ |x log m| in float64) and is
    the same on 1, 2 and 3 threads (fixed chunks; several per thread)."""
    monkeypatch.setattr(fib_mod, "CHUNK_NNZ", 500)
    shape, nnz, fibers = case
    rng = np.random.default_rng(R)
    if shape == "tiny":
        X = _tiny_tensor(rng, dtype=dtype)
    else:
        X = random_sparse(shape, nnz, rng, skew=1.5, dtype=dtype, counts=True)
        if max(shape) > 10 ** 4:
            subs = X.subs % 500 * (np.array(shape) // 500)
            X = SparseTensor(subs, X.vals, shape, dtype=dtype)
    factors = [(rng.random((s, R)) + 0.05).astype(dtype) for s in X.shape]
    factors[0][1] = 0                                     # model values below eps: clamped
    w = (rng.random(R) + 0.5).astype(dtype)
    eps = 1e-10
    ref, scale = _reference(X, w, factors, eps)
    be = get_backend("cpu")
    tol = 1e-13 if dtype == np.float64 else 1e-5
    for name, T in _formats(X, fibers):
        got = []
        for threads in (1, 2, 3):
            with num_threads(threads):
                got.append(be.poisson_data_term(T, w, factors, eps))
        assert got[0] == got[1] == got[2], name
        assert abs(got[0] - ref) <= tol * scale, (name, got[0], ref)


@pytest.mark.parametrize("level", LEVELS)
def test_data_term_every_log_instance(level):
    """The data term of every format with each instance of the logarithm the CPU runs:
    within 1e-14 of Σ |x log m| of NumPy's, and of the other instances."""
    rng = np.random.default_rng(11)
    X = _tiny_tensor(rng, shape=(30, 400, 20))
    factors = [rng.random((s, 8)) + 0.01 for s in X.shape]
    w = np.ones(8)
    ref, scale = _reference(X, w, factors, 1e-10)
    be = get_backend("cpu")
    old = [m._set_log_level(-1) for m in MODULES]
    try:
        for m in MODULES:
            assert m._set_log_level(level) == level
        for name, T in _formats(X, True):
            got = be.poisson_data_term(T, w, factors, 1e-10)
            assert abs(got - ref) <= 1e-14 * scale, (name, level)
    finally:
        for m, lv in zip(MODULES, old):
            m._set_log_level(lv)


def test_data_term_zero_and_subnormal_model_values():
    """eps = 0: a nonzero where the model is zero makes the data term -inf on every format,
    and subnormal model values are summed as x log m of the C library."""
    rng = np.random.default_rng(12)
    X = _tiny_tensor(rng)
    be = get_backend("cpu")
    factors = [rng.random((s, 4)) + 0.1 for s in X.shape]
    zero = [f.copy() for f in factors]
    zero[0][3] = 0
    tiny = [f.copy() for f in factors]
    tiny[0][3] *= 1e-310 / tiny[0][3].sum()              # subnormal model values on a slice
    for name, T in _formats(X, True):
        assert be.poisson_data_term(T, np.ones(4), zero, 0.0) == -np.inf, name
        ref, scale = _reference(X, np.ones(4), tiny, 0.0)
        assert np.isfinite(ref)
        got = be.poisson_data_term(T, np.ones(4), tiny, 0.0)
        assert abs(got - ref) <= 1e-12 * scale, (name, got, ref)
        nan = [f.copy() for f in factors]
        nan[1][0, 0] = np.nan
        assert np.isnan(be.poisson_data_term(T, np.ones(4), nan, 1e-10)), name
