import numpy as np
import pytest
import scipy.sparse as sp

from sktensor_fast.tensor import SparseTensor, as_sparse_tensor


def random_dense(shape, density=0.3, seed=0):
    rng = np.random.default_rng(seed)
    D = rng.standard_normal(shape)
    D[rng.random(shape) > density] = 0
    return D


# ---------------------------------------------------------------------------- construction
def test_from_subs_vals_shape():
    X = SparseTensor([[0, 1, 2], [1, 0, 0]], [3.0, 4.0], shape=(2, 2, 3))
    assert X.shape == (2, 2, 3)
    assert X.ndim == 3 and X.nnz == 2
    assert X.subs.dtype == np.int64 and X.vals.dtype == np.float64
    D = np.zeros((2, 2, 3))
    D[0, 1, 2] = 3
    D[1, 0, 0] = 4
    np.testing.assert_array_equal(X.to_dense(), D)
    assert X.norm() == pytest.approx(5.0)


def test_shape_inferred():
    X = SparseTensor([[0, 4], [2, 1]], [1.0, 2.0])
    assert X.shape == (3, 5)


def test_sorted_lexicographically():
    subs = np.array([[1, 0], [0, 2], [0, 1], [1, 1]])
    X = SparseTensor(subs, [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(X.subs, [[0, 1], [0, 2], [1, 0], [1, 1]])
    np.testing.assert_array_equal(X.vals, [3.0, 2.0, 1.0, 4.0])


def test_duplicates_summed_and_zeros_dropped():
    X = SparseTensor([[0, 0], [1, 1], [0, 0], [1, 0], [1, 0]], [1.0, 0.0, 2.0, 5.0, -5.0],
                     shape=(2, 2))
    assert X.nnz == 1
    np.testing.assert_array_equal(X.subs, [[0, 0]])
    np.testing.assert_array_equal(X.vals, [3.0])


def test_dtypes():
    X = SparseTensor(np.array([[0, 1]], dtype=np.int32), np.array([2], dtype=np.int64))
    assert X.subs.dtype == np.int64
    assert X.vals.dtype == np.float64
    Y = SparseTensor([[0, 1]], np.array([2], dtype=np.float32))
    assert Y.vals.dtype == np.float32
    Z = SparseTensor([[0, 1]], [2.0], dtype=np.float32)
    assert Z.dtype == np.float32
    # float coordinates that are whole numbers are accepted
    W = SparseTensor(np.array([[0.0, 1.0]]), [2.0])
    assert W.subs.dtype == np.int64


def test_copy_does_not_alias():
    subs = np.array([[0, 1]])
    vals = np.array([2.0])
    X = SparseTensor(subs, vals)
    subs[0, 0] = 5
    vals[0] = 7
    np.testing.assert_array_equal(X.subs, [[0, 1]])
    np.testing.assert_array_equal(X.vals, [2.0])


def test_from_dense_roundtrip():
    D = random_dense((4, 5, 3))
    X = SparseTensor.from_dense(D)
    assert X.nnz == np.count_nonzero(D)
    np.testing.assert_array_equal(X.to_dense(), D)
    Y = as_sparse_tensor(D)
    assert Y == X
    assert as_sparse_tensor(D.astype(np.float32)).dtype == np.float32
    assert as_sparse_tensor(D.tolist()) == X


def test_as_sparse_tensor_returns_same_object():
    X = SparseTensor([[0, 1]], [2.0])
    assert as_sparse_tensor(X) is X
    assert as_sparse_tensor(X, dtype=np.float32).dtype == np.float32


def test_scipy_roundtrip():
    M = sp.random(6, 7, density=0.3, format="csr", random_state=0)
    X = as_sparse_tensor(M)
    assert X.shape == (6, 7)
    np.testing.assert_array_equal(X.to_dense(), M.toarray())
    back = X.to_scipy()
    assert sp.issparse(back) and back.format == "csr"
    np.testing.assert_array_equal(back.toarray(), M.toarray())
    assert X.to_scipy("coo").format == "coo"
    assert SparseTensor.from_scipy(M.tocsc()) == X


def test_to_scipy_needs_two_modes():
    X = SparseTensor([[0, 1, 2]], [1.0])
    with pytest.raises(ValueError, match="2-way"):
        X.to_scipy()


def test_pydata_sparse_roundtrip():
    sparse = pytest.importorskip("sparse")
    D = random_dense((3, 4, 5), seed=1)
    S = sparse.COO.from_numpy(D)
    X = as_sparse_tensor(S)
    np.testing.assert_array_equal(X.to_dense(), D)
    back = X.to_sparse()
    assert isinstance(back, sparse.COO)
    np.testing.assert_array_equal(back.todense(), D)
    # other pydata formats go through COO
    assert as_sparse_tensor(sparse.GCXS.from_numpy(D)) == X


def test_pyttb_roundtrip():
    pyttb = pytest.importorskip("pyttb")
    D = random_dense((3, 4, 2), seed=2)
    X = SparseTensor.from_dense(D)
    T = X.to_pyttb()
    assert isinstance(T, pyttb.sptensor)
    assert tuple(T.shape) == X.shape
    np.testing.assert_allclose(T.full().data, D)
    assert as_sparse_tensor(T) == X
    assert SparseTensor.from_pyttb(T) == X
    # a dense pyttb tensor converts as well
    assert as_sparse_tensor(pyttb.tensor(D)) == X


def test_empty_tensor_needs_shape():
    X = SparseTensor(np.zeros((0, 3), np.int64), np.zeros(0), shape=(2, 3, 4))
    assert X.nnz == 0 and X.shape == (2, 3, 4)
    assert X.norm() == 0.0
    np.testing.assert_array_equal(X.to_dense(), np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="shape must be given"):
        SparseTensor(np.zeros((0, 3), np.int64), np.zeros(0))


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values(bad):
    with pytest.raises(ValueError, match="NaN or infinite"):
        SparseTensor([[0, 0], [1, 1]], [1.0, bad])


def test_negative_coordinate():
    with pytest.raises(ValueError, match="negative coordinate"):
        SparseTensor([[0, -1]], [1.0], shape=(2, 2))


def test_coordinate_out_of_range():
    with pytest.raises(ValueError, match="outside the shape"):
        SparseTensor([[0, 2]], [1.0], shape=(2, 2))


def test_non_integer_coordinates():
    with pytest.raises(ValueError, match="non-integer"):
        SparseTensor(np.array([[0.5, 1.0]]), [1.0])


def test_nan_coordinates():
    with pytest.raises(ValueError, match="NaN or infinite coordinates"):
        SparseTensor(np.array([[np.nan, 1.0]]), [1.0])


def test_string_coordinates():
    with pytest.raises(TypeError, match="integer coordinates"):
        SparseTensor(np.array([["a", "b"]]), [1.0])


def test_subs_vals_length_mismatch():
    with pytest.raises(ValueError, match="rows but vals has"):
        SparseTensor([[0, 0], [1, 1]], [1.0])


def test_subs_columns_vs_shape():
    with pytest.raises(ValueError, match="columns but shape"):
        SparseTensor([[0, 0]], [1.0], shape=(2, 2, 2))


def test_bad_shape():
    with pytest.raises(ValueError, match="length >= 1"):
        SparseTensor([[0, 0]], [1.0], shape=(2, 0))
    with pytest.raises(TypeError, match="shape must hold integers"):
        SparseTensor([[0, 0]], [1.0], shape=(2, 1.5))


def test_complex_values():
    with pytest.raises((TypeError, ValueError), match="[Cc]omplex"):
        SparseTensor([[0, 0]], [1.0 + 2.0j])


def test_to_dense_too_large():
    X = SparseTensor([[0, 0, 0]], [1.0], shape=(10 ** 6, 10 ** 6, 10 ** 6))
    with pytest.raises(ValueError, match="more than the limit"):
        X.to_dense()
    Y = SparseTensor([[0, 0]], [1.0], shape=(100, 100))
    with pytest.raises(ValueError, match="more than the limit of 50"):
        Y.to_dense(limit=50)
    assert Y.to_dense(limit=None).shape == (100, 100)


def test_as_sparse_tensor_rejects_1d():
    with pytest.raises(ValueError, match="at least 2 modes"):
        as_sparse_tensor(np.arange(5.0))


def test_as_sparse_tensor_rejects_junk():
    with pytest.raises(TypeError, match="must be a tensor"):
        as_sparse_tensor("abc")
    with pytest.raises(TypeError, match="must be a tensor"):
        as_sparse_tensor(None)
    with pytest.raises(ValueError, match="must hold numbers"):
        as_sparse_tensor(np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(ValueError, match="NaN or infinity"):
        as_sparse_tensor(np.array([[1.0, np.nan], [0.0, 1.0]]))


# ---------------------------------------------------------------------------- indexing
@pytest.fixture
def pair():
    D = random_dense((6, 4, 3), density=0.4, seed=3)
    return SparseTensor.from_dense(D), D


def check_same(Y, expected):
    assert isinstance(Y, SparseTensor)
    assert Y.shape == expected.shape
    np.testing.assert_array_equal(Y.to_dense(), expected)
    # the result is canonical: sorted, without duplicates
    lin = np.ravel_multi_index(tuple(Y.subs.T), Y.shape)
    assert np.all(np.diff(lin) > 0)


def test_index_int_array(pair):
    X, D = pair
    idx = np.array([4, 0, 2])
    check_same(X[idx], D[idx])


def test_index_repeated(pair):
    X, D = pair
    idx = np.array([1, 1, 5, 1, 0])
    check_same(X[idx], D[idx])
    check_same(X[[3, 3]], D[[3, 3]])


def test_index_negative(pair):
    X, D = pair
    check_same(X[np.array([-1, 0, -6])], D[[-1, 0, -6]])
    check_same(X[-2], D[-2:-1])


def test_index_bool_mask(pair):
    X, D = pair
    mask = np.array([True, False, True, True, False, False])
    check_same(X[mask], D[mask])
    with pytest.raises(IndexError, match="boolean index"):
        X[np.array([True, False])]


def test_index_with_ellipsis(pair):
    X, D = pair
    idx = np.array([5, 2])
    check_same(X[idx, ...], D[idx])
    check_same(X[idx, :], D[idx])
    with pytest.raises(IndexError, match="mode 0 only"):
        X[idx, 0]


def test_index_slices(pair):
    X, D = pair
    check_same(X[1:4], D[1:4])
    check_same(X[::-2], D[::-2])
    check_same(X[:], D)


def test_index_int(pair):
    X, D = pair
    check_same(X[3], D[3:4])
    with pytest.raises(IndexError, match="out of range"):
        X[6]
    with pytest.raises(IndexError, match="out of range"):
        X[np.array([0, 7])]


def test_index_empty(pair):
    X, D = pair
    Y = X[np.array([], dtype=np.int64)]
    assert Y.shape == (0, 4, 3) and Y.nnz == 0


# ---------------------------------------------------------------------------- misc
def test_norm_sum_copy(pair):
    X, D = pair
    assert X.norm() == pytest.approx(np.linalg.norm(D))
    assert X.sum() == pytest.approx(D.sum())
    Y = X.copy()
    assert Y == X and Y.vals is not X.vals
    Z = X.astype(np.float32)
    assert Z.dtype == np.float32 and Z.nnz == X.nnz
    assert len(X) == 6
    assert X.size == 72 and X.density == pytest.approx(X.nnz / 72)
    assert "SparseTensor(shape=(6, 4, 3)" in repr(X)


# ---------------------------------------------------------------------------- mode order, labels
def test_transpose_moves_modes_and_labels():
    rng = np.random.default_rng(0)
    D = rng.poisson(0.5, (4, 3, 5)).astype(float)
    X = SparseTensor.from_dense(D)
    for axes in [(1, 0, 2), (2, 0, 1), (0, 1, 2), (-1, 0, 1)]:
        np.testing.assert_array_equal(X.transpose(axes).to_dense(), np.transpose(D, axes))
    np.testing.assert_array_equal(X.T.to_dense(), D.T)
    assert X.T.labels is None and X.T.dtype == X.dtype
    from sktensor_fast.tensor import _attach_labels
    _attach_labels(X, [list("abcd"), None, list("vwxyz")], ["p", "q", "r"])
    Y = X.transpose((2, 0, 1))
    assert Y.labels == [list("vwxyz"), list("abcd"), None] and Y.mode_names == ["r", "p", "q"]
    assert X.transpose((2, 0, 1)).transpose((1, 2, 0)) == X
    for bad, err in [((0, 1), ValueError), ((0, 0, 1), ValueError), ((0, 1, 3), ValueError),
                     ((0.0, 1, 2), TypeError), ("abc", TypeError)]:
        with pytest.raises(err, match="axes|integer"):
            X.transpose(bad)


def test_any_mode_can_be_the_sample_mode():
    """Destinations as samples: 105 slices for cross-validation instead of 3 origins."""
    from sktensor_fast import CPALS
    from sktensor_fast.datasets import load_flights_routes
    X = load_flights_routes().tensor.transpose((1, 0, 2, 3, 4))
    assert X.shape == (105, 3, 16, 20, 7) and X.mode_names[0] == "dest"
    assert X.labels[0][:2] == ["ABQ", "ACK"]
    W = CPALS(rank=3, max_iter=5, random_state=0).fit_transform(X)
    assert W.shape == (105, 3)


def test_from_dataframe_counts_rows_and_orders_labels():
    pd = pytest.importorskip("pandas")
    days = pd.Categorical(["Tue", "Mon", "Tue", "Sun", "Mon"],
                          categories=["Mon", "Tue", "Wed", "Sun"], ordered=True)
    df = pd.DataFrame({"who": ["b", "a", "b", "a", "a"], "day": days,
                       "n": [1.5, 2.0, 0.5, 1.0, 4.0],
                       "when": pd.to_datetime(["2024-03-02", "2024-01-05", "2024-03-02",
                                               "2023-12-31", "2024-01-05"])})
    X, labels = SparseTensor.from_dataframe(df, ["who", "day"])
    assert labels == [["a", "b"], ["Mon", "Tue", "Wed", "Sun"]]     # category order kept
    assert X.labels == labels and X.mode_names == ["who", "day"]
    np.testing.assert_array_equal(X.to_dense(), [[2, 0, 0, 1], [0, 2, 0, 0]])
    S, _ = SparseTensor.from_dataframe(df, ["who", "day"], values="n")
    np.testing.assert_array_equal(S.to_dense(), [[6, 0, 0, 1], [0, 2, 0, 0]])
    T, lab = SparseTensor.from_dataframe(df, ["when"])
    assert lab[0] == sorted(lab[0]) and T.to_dense().tolist() == [1, 2, 2]
    with pytest.warns(UserWarning, match="1 row"):
        Y, lab = SparseTensor.from_dataframe(pd.DataFrame({"a": ["x", None, "y"]}), ["a"])
    assert Y.sum() == 2 and lab == [["x", "y"]]
    with pytest.raises(ValueError, match="no column"):
        SparseTensor.from_dataframe(df, ["who", "nope"])
    with pytest.raises(ValueError, match="numeric"):
        SparseTensor.from_dataframe(df, ["day"], values="who")
    with pytest.raises(TypeError, match="DataFrame"):
        SparseTensor.from_dataframe({"who": [1]}, ["who"])
