import numpy as np
import pytest

from sktensor_fast.kruskal import KruskalTensor
from sktensor_fast.tensor import SparseTensor


def random_ktensor(shape=(4, 5, 3), rank=3, seed=0, signed=True):
    rng = np.random.default_rng(seed)
    draw = rng.standard_normal if signed else rng.random
    return KruskalTensor(rng.uniform(0.5, 2.0, rank) * (rng.choice([-1, 1], rank) if signed
                                                        else 1),
                         [draw((s, rank)) for s in shape])


def dense_reference(K):
    """Entry by entry, straight from the definition."""
    out = np.zeros(K.shape)
    for idx in np.ndindex(*K.shape):
        terms = K.weights.copy()
        for n, i in enumerate(idx):
            terms = terms * K.factors[n][i]
        out[idx] = terms.sum()
    return out


# ---------------------------------------------------------------------------- construction
def test_construction_and_properties():
    K = random_ktensor()
    assert K.shape == (4, 5, 3) and K.ndim == 3 and K.rank == 3
    assert K.dtype == np.float64
    assert all(f.dtype == np.float64 for f in K.factors)
    assert "KruskalTensor(shape=(4, 5, 3), rank=3" in repr(K)
    ones = KruskalTensor(None, [np.ones((2, 4)), np.ones((3, 4))])
    np.testing.assert_array_equal(ones.weights, np.ones(4))


def test_dtypes():
    f32 = [np.ones((2, 2), np.float32), np.ones((3, 2), np.float32)]
    assert KruskalTensor(None, f32).dtype == np.float32
    assert KruskalTensor(np.ones(2, np.float32), f32).dtype == np.float32
    assert KruskalTensor(np.ones(2), f32).dtype == np.float64
    ints = KruskalTensor([1, 2], [np.ones((2, 2), int)])
    assert ints.dtype == np.float64 and ints.factors[0].dtype == np.float64


def test_inputs_are_copied():
    A = np.ones((2, 1))
    w = np.ones(1)
    K = KruskalTensor(w, [A])
    A[0, 0] = 5
    w[0] = 3
    assert K.factors[0][0, 0] == 1 and K.weights[0] == 1


@pytest.mark.parametrize("weights, factors, exc, match", [
    (None, [], ValueError, "at least one factor"),
    (None, [np.ones((2, 2)), np.ones((3, 3))], ValueError, "has 3 columns"),
    (None, [np.ones(3)], ValueError, "must be 2-D"),
    (None, [np.ones((2, 0))], ValueError, "rank >= 1"),
    (None, [np.ones((0, 2))], ValueError, "no rows"),
    (np.ones(3), [np.ones((2, 2))], ValueError, r"weights must have shape \(2,\)"),
    (None, [np.array([[1.0, np.nan]])], ValueError, "NaN or infinite"),
    ([1.0, np.inf], [np.ones((2, 2))], ValueError, "NaN or infinite"),
    (None, [np.array([["a"]])], TypeError, "real numbers"),
    (None, np.ones((2, 2)), TypeError, "list of 2-D factor matrices"),
])
def test_validation(weights, factors, exc, match):
    with pytest.raises(exc, match=match):
        KruskalTensor(weights, factors)


# ---------------------------------------------------------------------------- dense and values
@pytest.mark.parametrize("shape", [(4,), (3, 5), (4, 5, 3), (2, 3, 2, 4)])
def test_full_matches_definition(shape):
    K = random_ktensor(shape=shape, rank=2, seed=1)
    np.testing.assert_allclose(K.full(), dense_reference(K), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(K.to_dense(), K.full())


def test_full_size_limit():
    K = KruskalTensor(None, [np.ones((1000, 1))] * 3)
    with pytest.raises(ValueError, match="more than the limit"):
        K.full(limit=10 ** 6)
    big = KruskalTensor(None, [np.ones((10 ** 5, 1))] * 3)
    with pytest.raises(ValueError, match="more than the limit"):
        big.full()


def test_values_at():
    K = random_ktensor(seed=2)
    D = K.full()
    subs = np.array(list(np.ndindex(*K.shape)))
    np.testing.assert_allclose(K.values_at(subs), D.reshape(-1), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(K.values_at([[3, 4, 2], [0, 0, 0]]), [D[3, 4, 2], D[0, 0, 0]])
    assert K.values_at(np.zeros((0, 3), np.int64)).shape == (0,)
    with pytest.raises(ValueError, match="outside the shape"):
        K.values_at([[4, 0, 0]])
    with pytest.raises(ValueError, match="outside the shape"):
        K.values_at([[0, -1, 0]])
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        K.values_at([[0, 0]])


def test_values_at_chunked(monkeypatch):
    from sktensor_fast import kruskal
    monkeypatch.setattr(kruskal, "_CHUNK_ENTRIES", 7)
    K = random_ktensor(seed=3)
    subs = np.array(list(np.ndindex(*K.shape)))
    np.testing.assert_allclose(K.values_at(subs), K.full().reshape(-1), rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------- normal forms
def test_normalize():
    K = random_ktensor(seed=4)
    N = K.normalize()
    np.testing.assert_allclose(N.full(), K.full(), rtol=1e-12, atol=1e-12)
    for f in N.factors:
        np.testing.assert_allclose(np.linalg.norm(f, axis=0), 1.0)
    assert np.all(N.weights >= 0)
    # the original is unchanged
    assert K.weights is not N.weights and np.any(K.weights < 0)


@pytest.mark.parametrize("ord", [1, np.inf])
def test_normalize_other_norms(ord):
    K = random_ktensor(seed=5)
    N = K.normalize(ord=ord)
    np.testing.assert_allclose(N.full(), K.full(), rtol=1e-12, atol=1e-12)
    for f in N.factors:
        np.testing.assert_allclose(np.linalg.norm(f, ord=ord, axis=0), 1.0)


def test_normalize_flags_are_booleans():
    """A string for ``sort`` / ``signs`` is refused (``signs="no"`` used to fix the signs)."""
    K = KruskalTensor(np.ones(2), [np.ones((3, 2)), -np.ones((4, 2))])
    with pytest.raises(TypeError, match="signs must be True or False, got 'no'"):
        K.normalize(signs="no")
    with pytest.raises(TypeError, match="sort must be True or False, got 1"):
        K.normalize(sort=1)
    assert np.array_equal(K.normalize(signs=np.False_).factors[1], K.normalize().factors[1])


def test_normalize_zero_column():
    A = np.array([[1.0, 0.0], [2.0, 0.0]])
    B = np.array([[3.0, 1.0]])
    N = KruskalTensor([1.0, 4.0], [A, B]).normalize()
    assert N.weights[1] == 0
    np.testing.assert_array_equal(N.factors[0][:, 1], [0.0, 0.0])
    assert np.all(np.isfinite(N.factors[1]))


def test_normalize_sort_and_arrange():
    K = random_ktensor(seed=6, rank=4)
    S = K.normalize(sort=True)
    assert np.all(np.diff(S.weights) <= 0)
    np.testing.assert_allclose(S.full(), K.full(), rtol=1e-12, atol=1e-12)
    A = K.arrange()
    np.testing.assert_allclose(A.weights, S.weights)
    np.testing.assert_allclose(A.full(), K.full(), rtol=1e-12, atol=1e-12)
    P = K.arrange([2, 0, 3, 1], normalize=False)
    np.testing.assert_array_equal(P.weights, K.weights[[2, 0, 3, 1]])
    np.testing.assert_array_equal(P.factors[1], K.factors[1][:, [2, 0, 3, 1]])
    np.testing.assert_allclose(P.full(), K.full(), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="permutation"):
        K.arrange([0, 0, 1, 2])


def test_copy():
    K = random_ktensor(seed=7)
    C = K.copy()
    C.factors[0][0, 0] += 1
    C.weights[0] += 1
    assert C.factors[0][0, 0] != K.factors[0][0, 0] and C.weights[0] != K.weights[0]


# ---------------------------------------------------------------------------- norms, products
def test_norm():
    K = random_ktensor(seed=8)
    assert K.norm() == pytest.approx(np.linalg.norm(K.full()), rel=1e-12)


def test_innerprod():
    K = random_ktensor(seed=9)
    L = random_ktensor(seed=10, rank=2)
    D = K.full()
    E = L.full()
    assert K.innerprod(L) == pytest.approx(np.sum(D * E), rel=1e-10)
    assert K.innerprod(K) == pytest.approx(K.norm() ** 2, rel=1e-10)
    assert K.innerprod(E) == pytest.approx(np.sum(D * E), rel=1e-10)
    rng = np.random.default_rng(0)
    S = SparseTensor.from_dense(np.where(rng.random(K.shape) < 0.3, E, 0))
    assert K.innerprod(S) == pytest.approx(np.sum(D * S.to_dense()), rel=1e-10)
    empty = SparseTensor(np.zeros((0, 3), np.int64), np.zeros(0), K.shape)
    assert K.innerprod(empty) == 0.0
    with pytest.raises(ValueError, match="shapes differ"):
        K.innerprod(np.zeros((4, 5)))


def test_innerprod_one_mode():
    K = KruskalTensor([2.0], [np.array([[1.0], [3.0]])])
    assert K.innerprod(np.array([1.0, 1.0])) == 8.0


# ---------------------------------------------------------------------------- score
def test_score_of_permuted_rescaled_copy_is_one():
    K = random_ktensor(seed=11, rank=4)
    perm = np.array([2, 0, 3, 1])
    # rescale columns across modes (weights unchanged overall) and flip pairs of signs
    scales = [np.array([2.0, 0.5, 1.0, -1.0]), np.array([0.5, 2.0, 1.0, -1.0]),
              np.array([1.0, 1.0, 1.0, 1.0])]
    other = KruskalTensor(K.weights[perm], [f[:, perm] * s for f, s in zip(K.factors, scales)])
    np.testing.assert_allclose(other.full(), K.full(), atol=1e-12)
    fms, match = K.score(other)
    assert fms == pytest.approx(1.0, abs=1e-12)
    # component r of K is component match[r] of other
    np.testing.assert_array_equal(perm[match], np.arange(4))
    assert match.dtype.kind == "i"


def test_score_below_one_for_different_models():
    K = random_ktensor(seed=12)
    L = random_ktensor(seed=13)
    fms, _ = K.score(L)
    assert 0 <= fms < 0.9
    # same factors, different weights: only the weight penalty lowers the score
    M = KruskalTensor(K.weights * np.array([1.0, 2.0, 1.0]), K.factors)
    fms, perm = K.score(M)
    assert fms == pytest.approx((1 + 0.5 + 1) / 3)
    np.testing.assert_array_equal(perm, [0, 1, 2])
    fms, _ = K.score(M, weight_penalty=False)
    assert fms == pytest.approx(1.0)


def test_score_fewer_components():
    K = random_ktensor(seed=14, rank=4)
    sub = KruskalTensor(K.weights[[3, 1]], [f[:, [3, 1]] for f in K.factors])
    fms, perm = sub.score(K)
    assert fms == pytest.approx(1.0)
    np.testing.assert_array_equal(perm, [3, 1])
    with pytest.raises(ValueError, match="call other.score"):
        K.score(sub)
    with pytest.raises(ValueError, match="shapes differ"):
        K.score(random_ktensor(shape=(4, 5, 2)))
    with pytest.raises(TypeError, match="KruskalTensor"):
        K.score(K.full())


def test_score_optimal_not_greedy():
    # congruences |a_r . b_s| = [[0.9, 0.6], [0.4, 0.0]]: greedy matching takes the best pair
    # (0, 0) first and ends with (0.9 + 0.0) / 2; the optimal matching gives (0.6 + 0.4) / 2.
    A = np.eye(3)[:, :2]
    B = np.array([[0.9, 0.6], [0.4, 0.0], [np.sqrt(0.03), 0.8]])
    one = np.ones((1, 2))
    K = KruskalTensor(None, [A, one])
    L = KruskalTensor(None, [B, one])
    fms, perm = K.score(L, weight_penalty=False)
    np.testing.assert_array_equal(perm, [1, 0])
    assert fms == pytest.approx(0.5)


def test_score_matches_pyttb():
    pyttb = pytest.importorskip("pyttb")
    rng = np.random.default_rng(15)
    shape = (6, 5, 4)
    # well separated components (orthonormal columns), so that pyttb's greedy matching is
    # optimal too
    K = KruskalTensor([3.0, 2.0, 1.0],
                      [np.linalg.qr(rng.standard_normal((s, 3)))[0] for s in shape])
    # a perturbed, permuted copy with one more (small) component
    perm = np.array([1, 2, 0])
    factors = [np.column_stack([f[:, perm] + 0.1 * rng.standard_normal((f.shape[0], 3)),
                                rng.standard_normal(f.shape[0])]) for f in K.factors]
    L = KruskalTensor(np.append(K.weights[perm] * 1.2, 0.5), factors)
    ours, our_perm = K.score(L)
    theirs, _, _, their_perm = L.to_pyttb().score(K.to_pyttb())
    assert 0.5 < ours < 0.99
    assert ours == pytest.approx(theirs, rel=1e-12)
    np.testing.assert_array_equal(our_perm, their_perm[:K.rank])
    np.testing.assert_array_equal(our_perm, [2, 0, 1])
    ours_nw, _ = K.score(L, weight_penalty=False)
    theirs_nw = L.to_pyttb().score(K.to_pyttb(), weight_penalty=False)[0]
    assert ours_nw == pytest.approx(theirs_nw, rel=1e-12)


# ---------------------------------------------------------------------------- pyttb
def test_pyttb_roundtrip():
    pyttb = pytest.importorskip("pyttb")
    K = random_ktensor(seed=16)
    T = K.to_pyttb()
    assert isinstance(T, pyttb.ktensor)
    np.testing.assert_allclose(np.asarray(T.full().data), K.full(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(T.norm(), K.norm(), rtol=1e-12)
    back = KruskalTensor.from_pyttb(T)
    np.testing.assert_array_equal(back.weights, K.weights)
    for a, b in zip(back.factors, K.factors):
        np.testing.assert_array_equal(a, b)


def _normalize_reference(weights, factors):
    """normalize(sort=True, signs=True) written the plain NumPy way (arg-max across the rows of
    the whole matrix, a fancy-indexed column permutation)."""
    w = np.asarray(weights, dtype=np.float64).copy()
    fs = []
    for f in factors:
        norms = np.linalg.norm(f, ord=2, axis=0)
        fs.append(f / np.where(norms > 0, norms, 1).astype(f.dtype))
        w = w * norms
    neg = w < 0
    w[neg] = -w[neg]
    fs[0][:, neg] = -fs[0][:, neg]
    for f in fs[:-1]:
        if f.shape[0]:
            s = np.sign(f[np.argmax(np.abs(f), axis=0), np.arange(f.shape[1])])
            s[s == 0] = 1
            f *= s[None, :]
            fs[-1] *= s[None, :]
    order = np.argsort(-w, kind="stable")
    return w[order], [np.ascontiguousarray(f[:, order]) for f in fs]


def test_normalize_sorted_signed_equals_the_plain_numpy_way():
    """The column-by-column arg-max and the np.take permutation give the same bits as the
    plain NumPy formulation, with ties, a zero column, a NaN and negative weights."""
    rng = np.random.default_rng(5)
    F = [np.round(rng.standard_normal((s, 6)), 1) for s in (40, 7, 300)]   # ties in |f|
    F[0][:, 2] = 0.0
    F[1][3, 4] = np.nan
    w = rng.standard_normal(6)
    K = KruskalTensor._wrap(w, [f.copy() for f in F])   # the estimators' way (NaN allowed)
    N = K.normalize(sort=True, signs=True)
    rw, rf = _normalize_reference(w, [f.copy() for f in F])
    assert N.weights.tobytes() == rw.tobytes()
    for a, b in zip(N.factors, rf):
        assert a.flags.c_contiguous and a.tobytes() == b.tobytes()
