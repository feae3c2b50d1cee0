"""CPU kernels against plain NumPy references."""
import numpy as np
import pytest

from sktensor_fast.backends import get_backend
from sktensor_fast.backends.cpu import num_threads
from sktensor_fast.backends.cpu.formats import CooFormat, partition_pointers

from _reference import mttkrp_ref, phi_ref, random_sparse

SHAPES = [(40, 7), (30, 20, 10), (12, 5, 9, 7), (6, 5, 4, 3, 5)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rank", [1, 3, 16, 64])
@pytest.mark.parametrize("threads", [1, 2])
def test_mttkrp_matches_numpy(shape, rank, threads):
    rng = np.random.default_rng(hash((shape, rank)) % 2**32)
    X = random_sparse(shape, 3000, rng)
    T = CooFormat(X)
    factors = [rng.standard_normal((s, rank)) for s in shape]
    be = get_backend("cpu")
    with num_threads(threads):
        for mode in range(len(shape)):
            got = be.mttkrp(T, factors, mode)
            np.testing.assert_allclose(got, mttkrp_ref(X, factors, mode), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_mttkrp_float32(threads):
    rng = np.random.default_rng(1)
    X = random_sparse((50, 40, 30), 5000, rng, dtype=np.float32)
    assert X.dtype == np.float32
    T = CooFormat(X)
    factors = [rng.standard_normal((s, 8)).astype(np.float32) for s in X.shape]
    be = get_backend("cpu")
    with num_threads(threads):
        for mode in range(3):
            got = be.mttkrp(T, factors, mode)
            assert got.dtype == np.float32
            ref = mttkrp_ref(X, [f.astype(np.float64) for f in factors], mode)
            np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4 * np.abs(ref).max())


def test_mttkrp_many_partitions_and_heavy_rows():
    """More nonzeros than one partition holds; a single row carries most of them."""
    rng = np.random.default_rng(2)
    n = 60000
    subs = np.stack([np.where(rng.random(n) < 0.7, 3, rng.integers(0, 50, n)),
                     rng.integers(0, 40, n), rng.integers(0, 30, n)], axis=1)
    from sktensor_fast import SparseTensor
    X = SparseTensor(subs, rng.random(n), (50, 40, 30))
    T = CooFormat(X)
    assert len(T.part_ptr) > 3
    factors = [rng.random((s, 5)) for s in X.shape]
    be = get_backend("cpu")
    for threads in (1, 2):
        with num_threads(threads):
            for mode in range(3):
                np.testing.assert_allclose(be.mttkrp(T, factors, mode),
                                           mttkrp_ref(X, factors, mode), rtol=1e-11)


def test_results_identical_across_thread_counts():
    rng = np.random.default_rng(3)
    X = random_sparse((300, 200, 100), 50000, rng)
    T = CooFormat(X)
    factors = [rng.random((s, 10)) for s in X.shape]
    be = get_backend("cpu")
    outs = []
    for threads in (1, 2):
        with num_threads(threads):
            outs.append([be.mttkrp(T, factors, m) for m in range(3)])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rank", [1, 4, 33])
@pytest.mark.parametrize("threads", [1, 2])
def test_phi_matches_numpy(shape, rank, threads):
    rng = np.random.default_rng(7 + rank)
    X = random_sparse(shape, 2500, rng, counts=True)
    T = CooFormat(X)
    factors = [rng.random((s, rank)) for s in shape]
    be = get_backend("cpu")
    with num_threads(threads):
        for mode in range(len(shape)):
            B = rng.random((shape[mode], rank))
            B[0] = 0.0  # forces the eps floor for the nonzeros of row 0
            got = be.phi(T, factors, mode, B, 1e-10)
            np.testing.assert_allclose(got, phi_ref(X, factors, mode, B, 1e-10), rtol=1e-11)


def test_model_values():
    rng = np.random.default_rng(4)
    X = random_sparse((20, 10, 8), 500, rng)
    T = CooFormat(X)
    factors = [rng.random((s, 3)) for s in X.shape]
    w = rng.random(3)
    got = get_backend("cpu").model_values(T, w, factors)
    ref = np.einsum("r,nr,nr,nr->n", w, *(f[X.subs[:, k]] for k, f in enumerate(factors)))
    np.testing.assert_allclose(got, ref, rtol=1e-13)


def test_partition_pointers():
    assert partition_pointers(0).tolist() == [0]
    p = partition_pointers(10)
    assert p[0] == 0 and p[-1] == 10
    p = partition_pointers(10**7)
    assert p[-1] == 10**7 and np.all(np.diff(p) > 0) and len(p) - 1 <= 4096


def test_useful_threads(monkeypatch):
    from sktensor_fast.backends.cpu.formats import coo
    monkeypatch.setattr(coo, "MIN_NNZ_PER_THREAD", 16384)
    assert coo.useful_threads(10, 8) == 1
    assert coo.useful_threads(10**7, 8) == 8
    assert coo.useful_threads(3 * coo.MIN_NNZ_PER_THREAD, 8) == 3


@pytest.mark.parametrize("device", ["cpu", "opencl"])
def test_bad_kernel_arguments_raise_before_compiled_code(device):
    if device == "opencl":
        pytest.importorskip("pyopencl")
        try:
            be = get_backend("opencl")
        except Exception as exc:
            pytest.skip(str(exc))
    else:
        be = get_backend("cpu")
    rng = np.random.default_rng(0)
    X = random_sparse((20, 10, 8), 300, rng)
    T = be.prepare(X)
    f = [rng.random((s, 3)) for s in X.shape]
    with pytest.raises(ValueError, match="factor 1 has 9 rows"):
        be.mttkrp(T, [f[0], rng.random((9, 3)), f[2]], 0)
    with pytest.raises(ValueError, match="2 factor matrices"):
        be.mttkrp(T, f[:2], 0)
    with pytest.raises(ValueError, match="columns"):
        be.mttkrp(T, [f[0], f[1], rng.random((8, 4))], 0)
    with pytest.raises(ValueError, match="B has shape"):
        be.phi(T, f, 1, rng.random((3, 3)), 1e-10)
    with pytest.raises(ValueError, match="mode 5"):
        be.mttkrp(T, f, 5)
    with pytest.raises(ValueError, match="weights"):
        be.model_values(T, np.ones(2), f)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n,length", [(0, 5), (1, 1), (1000, 7), (5000, 70000), (20000, 300)])
def test_mode_order_is_the_stable_order(threads, n, length):
    """The parallel counting sort gives NumPy's stable argsort, for any thread count, from a
    strided column of the coordinates as well."""
    from sktensor_fast.backends.cpu.formats.coo import mode_order
    rng = np.random.default_rng(n + length)
    subs = rng.zipf(1.3, size=(n, 3)) % length
    ref = np.argsort(subs[:, 1], kind="stable")
    got = mode_order(subs[:, 1], length, num_threads=threads)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [0, 1, 700, 5000])
def test_dense_steps_on_own_threads(dtype, rows):
    """A @ M and AᵀA of the CPU backend (backends/cpu/_dense.pyx): NumPy's values, the Gram
    matrix exactly symmetric and bitwise the same for any thread count."""
    from sktensor_fast.backends.cpu import _dense
    rng = np.random.default_rng(rows)
    A = rng.random((rows, 7)).astype(dtype)
    M = rng.random((7, 5)).astype(dtype)
    out = np.empty((rows, 5), dtype)
    np.testing.assert_allclose(_dense.matmul_small(A, M, out, 2), A @ M, rtol=1e-5)
    grams = [_dense.gram(A, t) for t in (1, 2, 3)]
    ref = A.astype(np.float64).T @ A.astype(np.float64)
    np.testing.assert_allclose(grams[0], ref, rtol=1e-12, atol=1e-12)
    for G in grams:
        assert G.dtype == np.float64 and np.array_equal(G, G.T)
        assert np.array_equal(G, grams[0])
    wide = rng.random((50, 200))           # wider than the stack accumulator: NumPy
    np.testing.assert_allclose(_dense.gram(wide, 2), wide.T @ wide, rtol=1e-12)
    np.testing.assert_allclose(_dense.matmul_small(wide, rng.random((200, 150)),
                                                   np.empty((50, 150)), 2).shape, (50, 150))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_instances_same_bits_with_and_without_avx2(dtype):
    """The rank-1..16 instances of the dense steps built for AVX2 (no FMA) and for the
    baseline: A @ M, AᵀA and the whole CP-ALS update give the same bits, and the
    product agrees with NumPy."""
    from sktensor_fast.backends.cpu import _dense
    rng = np.random.default_rng(11)
    old = _dense._use_avx2()
    try:
        for rank in (1, 3, 8, 16):
            M, grams = _als_case(rng, 1500, rank, dtype)
            Y = rng.standard_normal((rank, rank)).astype(dtype)
            outs = []
            for on in (False, True):
                _dense._use_avx2(on)
                U = np.empty_like(M)
                G = np.empty((rank, rank))
                w = np.empty(rank)
                assert _dense.als_update(M, grams, 1, False, U, G, w, 2) == 0
                outs.append([_dense.matmul_small(M, Y, np.empty_like(M), 2),
                             _dense.gram(M, 2), U, G, w])
            for a, b in zip(*outs):
                assert a.tobytes() == b.tobytes()
            np.testing.assert_allclose(outs[0][0], M.astype(np.float64) @ Y,
                                       rtol=1e-4 if dtype == np.float32 else 1e-12,
                                       atol=1e-4 if dtype == np.float32 else 1e-12)
    finally:
        _dense._use_avx2(old)


def _als_case(rng, rows, rank, dtype, singular=False):
    factors = [rng.random((n, rank)) for n in (6, rows, 9, 5)]
    if singular and rank > 1:
        for k in (0, 2, 3):                               # two equal columns: Y singular
            factors[k][:, -1] = factors[k][:, 0]
    grams = [f.T @ f for f in factors]
    if singular and rank > 1:
        Y = grams[0] * grams[2] * grams[3]
        assert np.linalg.eigvalsh(Y)[0] < 1e-12 * np.linalg.eigvalsh(Y)[-1]
    M = rng.random((rows, rank)).astype(dtype)
    return M, grams


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rank", [1, 2, 5, 8, 16, 17, 40])
@pytest.mark.parametrize("rows", [0, 3, 700])
@pytest.mark.parametrize("singular", [False, True])
def test_als_update_compiled_matches_numpy_steps(dtype, rank, rows, singular):
    """The CPU backend's one-call CP-ALS update (Cholesky or Jacobi, compiled steps) against
    the NumPy steps of the base class (LAPACK's eigh): the same factor, weights and Gram
    matrix to rounding, the Gram matrix exactly symmetric, the same bits on any thread
    count."""
    from sktensor_fast.backends.base import Backend
    be = get_backend("cpu")
    rng = np.random.default_rng(rank + rows)
    M, grams = _als_case(rng, rows, rank, dtype, singular)
    tol = 1e-4 if dtype == np.float32 else 1e-9
    for first in (True, False):
        ref = Backend.als_update(be, M.copy(), grams, 1, first)
        outs = []
        for threads in (1, 2):
            with num_threads(threads):
                outs.append(be.als_update(M, grams, 1, first))
        U, w, G = outs[0]
        assert U.dtype == dtype and U.shape == M.shape and w.dtype == np.float64
        scale = max(np.abs(ref[0]).max(), 1.0) if rows else 1.0
        np.testing.assert_allclose(U, ref[0], rtol=0, atol=tol * scale)
        np.testing.assert_allclose(w, ref[1], rtol=tol)
        np.testing.assert_allclose(G, ref[2], rtol=0, atol=tol * max(np.abs(ref[2]).max(), 1))
        assert np.array_equal(G, G.T)
        for a, b in zip(outs[0], outs[1]):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("cond", [1e3, 1e11, 1e17])
def test_als_update_paths_by_condition(cond):
    """The three paths of the compiled inverse, on Y of a given condition number: Cholesky
    (below 1e10), Jacobi rotations inverting (1e11), the pseudo-inverse (a smallest
    eigenvalue 1e-17 of the largest, cut): each gives what the NumPy steps give (LAPACK's
    eigh)."""
    from sktensor_fast.backends.base import Backend
    be = get_backend("cpu")
    rng = np.random.default_rng(1)
    Q = np.linalg.qr(rng.standard_normal((6, 6)))[0]
    spectrum = (np.geomspace(1.0, 1.0 / cond, 6) if cond < 1e12
                else np.append(np.geomspace(1.0, 0.1, 5), 0.0))      # 0: computed as ~1e-17
    Y = (Q * spectrum) @ Q.T
    Y = (Y + Y.T) / 2
    grams = [np.eye(6), Y]                      # the update of mode 0 inverts Y itself
    M = rng.random((40, 6))
    ref = Backend.als_update(be, M.copy(), grams, 0, True)
    got = be.als_update(M, grams, 0, True)
    if cond < 1e12:          # both solve U diag(w) Y = M (an explicit inverse: eps cond)
        for U, w, _ in (got, ref):
            assert np.abs((U * w) @ Y - M).max() <= 1e-14 * cond * np.abs(M).max()
        tol = 1e-12 * cond   # the forward error: eps times the condition number
    else:                    # the pseudo-inverse of the well-conditioned rest
        tol = 1e-10
    np.testing.assert_allclose(got[0], ref[0], rtol=0, atol=tol * np.abs(ref[0]).max())
    np.testing.assert_allclose(got[1], ref[1], rtol=tol)


def test_als_update_nonfinite_gram_raises():
    be = get_backend("cpu")
    rng = np.random.default_rng(0)
    M, grams = _als_case(rng, 10, 4, np.float64)
    grams[2][1, 1] = np.nan
    with pytest.raises(FloatingPointError, match="NaN or infinite"):
        be.als_update(M, grams, 1)
    grams[2][1, 1] = np.inf
    with pytest.raises(FloatingPointError, match="NaN or infinite"):
        be.als_update(M, grams, 0)
    assert np.all(np.isfinite(be.als_update(M, grams, 2)[0]))   # the bad Gram is skipped


def test_coo_permutations_of_the_modes_asked_for():
    """prepare(X, "coo", modes=...) orders the nonzeros by those modes now, the others when a
    kernel first asks (the distributed backend asks for the first mode of each share): the
    same orders, the same results, fewer bytes until then."""
    rng = np.random.default_rng(6)
    X = random_sparse((30, 20, 10), 800, rng, counts=True)
    be = get_backend("cpu")
    full = be.prepare(X, "coo")
    one = be.prepare(X, "coo", modes=(0,))
    assert len(one.perms.built()) == 1 and one.nbytes < full.nbytes
    f = [rng.random((s, 3)) for s in X.shape]
    for mode in range(3):
        np.testing.assert_array_equal(be.mttkrp(one, f, mode), be.mttkrp(full, f, mode))
        np.testing.assert_array_equal(one.perms[mode], full.perms[mode])
    assert one.nbytes == full.nbytes and len(one.perms) == 3
    np.testing.assert_array_equal(full.perms[2], np.argsort(X.subs[:, 2], kind="stable"))
    with pytest.raises(IndexError):
        one.perms[3]
