"""The specialised 3- to 5-way kernels (ALTO and COO Φ / MTTKRP, model values and the Poisson
data term) against NumPy references, and the general kernels (6 modes) next to them."""
import numpy as np
import pytest

from sktensor_fast import SparseTensor, num_threads
from sktensor_fast.backends import get_backend
from sktensor_fast.backends.cpu import _alto
from sktensor_fast.backends.cpu.formats import AltoFormat, CooFormat

from _reference import mttkrp_ref, phi_ref, random_sparse

DECODERS = ["generic"] + (["pext"] if _alto.pext_available() else [])
RANKS = [1, 5, 8, 16, 17, 32, 33]
# 3-way (one-word and two-word ALTO index), 4-way (both), 5-way, and 6-way (general kernels)
SHAPES = [(40, 7, 300), pytest.param((2 ** 22, 2 ** 21, 2 ** 22), marks=pytest.mark.slow),
          (12, 5, 9, 7),
          (2 ** 17, 2 ** 16, 2 ** 16, 2 ** 16), (6, 5, 9, 7, 4), (3, 4, 2, 5, 3, 2)]


@pytest.fixture(params=DECODERS)
def decoder(request):
    old = _alto.set_decoder(request.param)
    yield request.param
    _alto.set_decoder(old)


def _close(got, ref, rtol, rows=None):
    """max |got - ref| <= rtol max |ref|; with ``rows``, every other row of both is zero and
    only those rows are compared (cheap for outputs of millions of rows)."""
    if rows is not None:
        assert np.count_nonzero(got) == np.count_nonzero(got[rows])
        assert np.count_nonzero(ref) == np.count_nonzero(ref[rows])
        got, ref = got[rows], ref[rows]
    scale = max(np.abs(ref).max(), 1e-300)
    assert np.abs(got - ref).max() <= rtol * scale, np.abs(got - ref).max() / scale


def _tensor(shape, nnz, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = random_sparse(shape, nnz, rng, skew=1.5, dtype=dtype, counts=True)
    if max(shape) > 10 ** 4:
        # few distinct coordinates in the huge modes: rows repeat as in the small shapes
        subs = X.subs % np.array([min(s, 500) for s in shape])
        subs = subs * np.array([s // min(s, 500) for s in shape])
        X = SparseTensor(subs, X.vals, shape, dtype=dtype)
    return X, rng


def _loglik_ref(X, w, factors, eps):
    m = np.einsum("r,nr->n", w, np.prod([f[X.subs[:, k]] for k, f in enumerate(factors)],
                                        axis=0))
    x = X.vals.astype(np.float64)
    nz = x != 0
    return float(np.sum(x[nz] * np.log(np.maximum(m[nz], eps))))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fmt", ["coo", "alto-buffer", "alto-compact"])
def test_phi_mttkrp_loglik_vs_numpy(shape, fmt, decoder):
    huge = sum(shape) > 10 ** 7
    if fmt == "coo" and decoder != "generic":
        pytest.skip("COO has no index decoder")
    if huge and fmt != "alto-buffer":
        # 10.5M factor rows: only where a two-word index reaches the 3-way kernel
        pytest.skip("the 3-way two-word shape is for ALTO's buffer path")
    X, rng = _tensor(shape, 2500, len(shape))
    if fmt == "coo":
        T = CooFormat(X)
    else:
        T = AltoFormat(X, n_partitions=6, conflict=fmt.split("-")[1])
    be = get_backend("cpu")
    for rank in ([2] if huge else RANKS):
        factors = [rng.random((s, rank)) + 0.1 for s in shape]
        w = rng.random(rank) + 0.5
        ll_ref = _loglik_ref(X, w, factors, 1e-10)
        for mode in range(len(shape)):
            B = rng.random((shape[mode], rank))
            B[X.subs[0, mode]] = 0.0                          # the eps floor
            rows = np.unique(X.subs[:, mode])
            ref_m = mttkrp_ref(X, factors, mode)
            ref_p = phi_ref(X, factors, mode, B, 1e-10)
            got = []
            for threads in (1, 2):
                with num_threads(threads):
                    got_m = be.mttkrp(T, factors, mode)
                    got_p = be.phi(T, factors, mode, B, 1e-10)
                _close(got_m, ref_m, 1e-12, rows)
                _close(got_p, ref_p, 1e-12, rows)
                got.append((got_m, got_p))
            # bitwise the same for 1 and 2 threads (every format and conflict path)
            np.testing.assert_array_equal(got[0][0], got[1][0])
            np.testing.assert_array_equal(got[0][1], got[1][1])
            del got, ref_m, ref_p, B
        lls = []
        for threads in (1, 2):
            with num_threads(threads):
                lls.append(be.poisson_data_term(T, w, factors, 1e-10))
        assert lls[0] == pytest.approx(ll_ref, rel=1e-12)
        assert lls[0] == lls[1]


@pytest.mark.parametrize("shape", [(50, 40, 30), (20, 15, 10, 8), (9, 8, 7, 6, 5)])
@pytest.mark.parametrize("fmt", ["coo", "alto"])
@pytest.mark.parametrize("rank", [3, 16])
def test_float32(shape, fmt, rank):
    X, rng = _tensor(shape, 4000, rank, dtype=np.float32)
    T = CooFormat(X) if fmt == "coo" else AltoFormat(X, n_partitions=5)
    X64 = SparseTensor(X.subs, X.vals.astype(np.float64), X.shape)
    factors = [(rng.random((s, rank)) + 0.1).astype(np.float32) for s in X.shape]
    f64 = [f.astype(np.float64) for f in factors]
    be = get_backend("cpu")
    with num_threads(2):
        for mode in range(len(shape)):
            B = (rng.random((X.shape[mode], rank)) + 0.1).astype(np.float32)
            got = be.phi(T, factors, mode, B, 1e-10)
            assert got.dtype == np.float32
            _close(got, phi_ref(X64, f64, mode, B.astype(np.float64), 1e-10), 2e-5)
            _close(be.mttkrp(T, factors, mode), mttkrp_ref(X64, f64, mode), 2e-5)
        w = np.ones(rank, dtype=np.float32)
        assert be.poisson_data_term(T, w, factors, 1e-10) == pytest.approx(
            _loglik_ref(X64, np.ones(rank), f64, 1e-10), rel=1e-4)


def test_zero_values_and_model_floor():
    """Explicit zeros contribute nothing; a zero model value is floored at eps."""
    subs = np.array([[0, 0, 0], [1, 1, 1], [1, 2, 0], [1, 2, 0]])
    X = SparseTensor(subs, np.array([0.0, 2.0, 1.0, 3.0]), (2, 3, 2))
    factors = [np.ones((2, 8)), np.ones((3, 8)), np.ones((2, 8))]
    factors[1][2] = 0.0                                       # model value 0 at (1, 2, 0)
    be = get_backend("cpu")
    ref = _loglik_ref(X, np.ones(8), factors, 1e-10)
    for T in (CooFormat(X), AltoFormat(X, n_partitions=2)):
        assert be.poisson_data_term(T, np.ones(8), factors, 1e-10) == pytest.approx(ref,
                                                                                      rel=1e-14)


def test_prefetch_distance_does_not_change_results():
    X, rng = _tensor((300, 200, 100), 20000, 5)
    T = AltoFormat(X, conflict="buffer")
    factors = [rng.random((s, 16)) for s in X.shape]
    be = get_backend("cpu")
    old = _alto._set_prefetch_distance(0)
    try:
        ref = [be.phi(T, factors, m, factors[m], 1e-10) for m in range(3)]
        ll = be.poisson_data_term(T, np.ones(16), factors, 1e-10)
        _alto._set_prefetch_distance(3)
        for m in range(3):
            np.testing.assert_array_equal(be.phi(T, factors, m, factors[m], 1e-10), ref[m])
        assert be.poisson_data_term(T, np.ones(16), factors, 1e-10) == ll
    finally:
        _alto._set_prefetch_distance(old)


@pytest.mark.parametrize("shape", [(7, 6, 5), (6, 5, 4, 3), (6, 5, 9, 7, 4)])
def test_coo_small_rank_kernels_in_and_out_of_cache(shape, monkeypatch):
    """Ranks 1..16 of 3- to 5-way tensors run kernels of their own rank when the factors stay
    in cache (compiled for AVX2 and FMA too), the prefetching kernels otherwise: all agree
    with NumPy, and each gives the same bits on 1 and 2 threads."""
    from sktensor_fast.backends.cpu import _kernels
    X, rng = _tensor(shape, 3000, len(shape))
    T = CooFormat(X)
    be = get_backend("cpu")
    assert _kernels.factors_cached(sum(shape) * 16 * 8)
    for rank in range(1, 18):
        factors = [rng.random((s, rank)) + 0.1 for s in shape]
        for mode in range(len(shape)):
            B = rng.random((shape[mode], rank)) + 0.1
            ref_m = mttkrp_ref(X, factors, mode)
            ref_p = phi_ref(X, factors, mode, B, 1e-10)
            # 0: nothing stays in cache; SIMD_LEVEL 2: the AVX2 instances where the CPU has it
            for cache, simd in ((_kernels.CACHE_BYTES, 1), (_kernels.CACHE_BYTES, 2), (0, 1)):
                if simd > _kernels.SIMD_LEVEL:
                    continue
                monkeypatch.setattr(_kernels, "CACHE_BYTES", cache)
                monkeypatch.setattr(_kernels, "SIMD_LEVEL", simd)
                got = []
                for threads in (1, 2):
                    with num_threads(threads):
                        got.append((be.mttkrp(T, factors, mode),
                                    be.phi(T, factors, mode, B, 1e-10)))
                _close(got[0][0], ref_m, 1e-12)
                _close(got[0][1], ref_p, 1e-12)
                np.testing.assert_array_equal(got[0][0], got[1][0])
                np.testing.assert_array_equal(got[0][1], got[1][1])
