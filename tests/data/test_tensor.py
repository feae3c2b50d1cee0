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


def test_astype_checks_values_and_keeps_labels():
    """astype takes float32 / float64 only; a value too large for float32 is an error (it
    became inf), values that round to 0 are dropped with a warning, as the constructor does;
    labels and mode names stay."""
    X = SparseTensor(np.array([[0, 0], [1, 1], [1, 0]]), np.array([1e300, 1.0, 1e-300]),
                     (2, 2))
    X.labels, X.mode_names = [["a", "b"], ["c", "d"]], ["row", "col"]
    with pytest.raises(TypeError, match="float32 or float64, got int32"):
        X.astype(np.int32)
    with pytest.raises(ValueError, match=r"1e\+300 .* too large for float32"):
        SparseTensor(np.array([[0, 0], [1, 1]]), np.array([1e300, 1.0]), (2, 2)).astype(
            np.float32)
    Y = SparseTensor(np.array([[1, 1], [1, 0]]), np.array([1.0, 1e-300]), (2, 2))
    Y.labels, Y.mode_names = X.labels, X.mode_names
    with pytest.warns(UserWarning, match="too small for float32 round to 0"):
        Z = Y.astype(np.float32)
    assert Z.nnz == 1 and Z.vals.tolist() == [1.0] and Z.dtype == np.float32
    assert Z.labels == X.labels and Z.mode_names == X.mode_names
    assert X.astype(np.float64) == X


def test_boolean_flags_refuse_other_values(tmp_path):
    """A flag given a string or a number is refused with its name (``"no"`` is true: it
    used to turn the flag on); NumPy's booleans are taken."""
    from sktensor_fast import KruskalTensor, describe_components, load_tensor, save_tensor
    subs, vals = np.array([[0, 0], [0, 0]]), np.array([1.0, 2.0])
    with pytest.raises(TypeError, match="sum_duplicates must be True or False, got 'no'"):
        SparseTensor(subs, vals, (2, 2), sum_duplicates="no")
    with pytest.raises(TypeError, match="copy must be True or False, got 0"):
        SparseTensor(subs, vals, (2, 2), copy=0)
    X = SparseTensor(subs, vals, (2, 2), sum_duplicates=np.True_)
    path = tmp_path / "x.sktf"
    save_tensor(path, X)
    for flag in ("mmap", "with_labels", "verify"):
        with pytest.raises(TypeError, match=f"{flag} must be True or False, got 'no'"):
            load_tensor(path, **{flag: "no"})
    assert load_tensor(path, verify=np.False_) == X
    from sktensor_fast import load_tns, save_tns
    save_tns(tmp_path / "x.tns", X)
    with pytest.raises(TypeError, match="with_labels must be True or False, got 'no'"):
        load_tns(tmp_path / "x.tns", with_labels="no")
    K = KruskalTensor(np.ones(1), [np.ones((2, 1))] * 2)
    with pytest.raises(TypeError, match="legend must be True or False"):
        describe_components(K, legend="no")


def test_converters_name_what_they_take():
    with pytest.raises(TypeError, match="from_scipy takes a scipy.sparse matrix or array, "
                                        "got ndarray"):
        SparseTensor.from_scipy(np.ones((2, 2)))
    with pytest.raises(TypeError, match="from_sparse takes a pydata sparse.COO array, got list"):
        SparseTensor.from_sparse([1, 2])
    with pytest.raises(TypeError, match="from_pyttb takes a pyttb sptensor, got int"):
        SparseTensor.from_pyttb(42)


# ---------------------------------------------------------------------------- invariants kept
def assert_canonical(X):
    """The invariants the compiled kernels rely on."""
    assert X.subs.dtype == np.int64 and X.subs.shape == (X.nnz, X.ndim)
    assert X.vals.dtype in (np.float32, np.float64) and X.vals.shape == (X.nnz,)
    assert not X.subs.flags.writeable and not X.vals.flags.writeable
    assert X.subs.flags.c_contiguous and X.vals.flags.c_contiguous
    if X.nnz:
        assert X.subs.min() >= 0 and np.all(X.subs.max(axis=0) < np.array(X.shape))
        assert np.all(np.isfinite(X.vals)) and np.all(X.vals != 0)
        d = np.diff(X.subs, axis=0)
        # strictly increasing in lexicographic order: the first nonzero difference is positive
        first = np.argmax(d != 0, axis=1)
        assert np.all(d[np.arange(d.shape[0]), first] > 0)


def test_data_cannot_be_changed_after_validation():
    X = SparseTensor([[0, 1, 2], [1, 0, 0]], [3.0, 4.0], shape=(2, 2, 3))
    with pytest.raises(ValueError, match="read-only"):
        X.subs[0, 1] = 10 ** 9
    with pytest.raises(ValueError, match="read-only"):
        X.vals[0] = np.nan
    with pytest.raises(ValueError, match="read-only"):
        X.subs.sort(axis=0)
    for name, value in [("subs", np.zeros((2, 3), np.int64)), ("vals", np.ones(2)),
                        ("shape", (1, 1, 1)), ("nnz", 5), ("ndim", 2)]:
        with pytest.raises(AttributeError):
            setattr(X, name, value)
    assert_canonical(X)
    assert X.shape == (2, 2, 3) and X.subs.tolist() == [[0, 1, 2], [1, 0, 0]]


def test_caller_arrays_stay_writeable_with_copy_false():
    subs = np.array([[0, 1], [1, 0]], dtype=np.int64)
    vals = np.array([1.0, 2.0])
    X = SparseTensor(subs, vals, copy=False)
    assert subs.flags.writeable and vals.flags.writeable
    subs[0, 0] = 1  # the caller's array is still theirs to write
    assert_canonical(X)


def test_derived_tensors_keep_the_invariants():
    import copy
    import pickle
    X = SparseTensor.from_dense(random_dense((5, 4, 3), seed=4))
    for Y in [X.copy(), X.astype(np.float32), X[[3, 0, 3]], X[1:], X[2], copy.copy(X),
              copy.deepcopy(X), pickle.loads(pickle.dumps(X))]:
        assert_canonical(Y)
    Y = pickle.loads(pickle.dumps(X))
    assert Y == X and Y.dtype == X.dtype


def test_unpickled_tensor_is_validated():
    import pickle
    X = SparseTensor([[0, 1], [1, 0]], [1.0, 2.0])
    state = X.__getstate__()
    state["subs"] = np.array([[0, 1], [5, 0]])  # a corrupted or hand-made pickle
    Y = SparseTensor.__new__(SparseTensor)
    with pytest.raises(ValueError, match="outside the shape"):
        Y.__setstate__(state)
    state = X.__getstate__()
    state["subs"] = np.array([[0, 1], [0, 1]])
    with pytest.raises(ValueError, match="repeated coordinates"):
        SparseTensor.__new__(SparseTensor).__setstate__(state)
    # the state of an older pickle (plain attributes) is accepted and validated
    Z = SparseTensor.__new__(SparseTensor)
    Z.__setstate__({"subs": np.array([[1, 0], [0, 1]]), "vals": np.array([2.0, 1.0]),
                    "shape": (2, 2)})
    assert Z == X
    assert_canonical(pickle.loads(pickle.dumps(Z)))


CRASH_SCRIPT = """
import sys
import numpy as np
from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor
rng = np.random.default_rng(0)
X = SparseTensor(rng.integers(0, 5, (60, 3)), rng.integers(1, 4, 60), (5, 5, 5))
est = {"cpals": CPALS(rank=2, max_iter=3), "cpapr": CPAPR(rank=2, max_iter=2),
       "gcp": GCP(rank=2, loss="poisson", max_iter=2)}[sys.argv[1]]
attacks = {
    "subs": lambda: X.subs.__setitem__((0, 1), 10 ** 9),
    "reorder": lambda: X.subs.__setitem__(slice(None), X.subs[::-1].copy()),
    "vals": lambda: X.vals.__setitem__(0, -1.0),
    "shape": lambda: setattr(X, "shape", (1, 1, 1)),
}
for name, attack in attacks.items():
    try:
        attack()
    except (ValueError, AttributeError) as exc:
        print(name, type(exc).__name__, exc)
    else:
        print(name, "accepted")
est.random_state = 0
est.fit(X)
print("fit ok", X.shape, X.nnz)
"""


@pytest.mark.parametrize("method", ["cpals", "cpapr", "gcp"])
def test_changing_a_tensor_cannot_crash_a_fit(method):
    """Writing an out-of-range coordinate or a wrong shape once segfaulted the kernels."""
    import subprocess
    import sys
    from pathlib import Path

    import sktensor_fast
    root = str(Path(sktensor_fast.__file__).resolve().parents[1])
    from _reference import checkout_env
    env = checkout_env()
    r = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, method], capture_output=True,
                       text=True, timeout=300, cwd=root, env=env)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    out = r.stdout
    assert "subs ValueError assignment destination is read-only" in out
    assert "reorder ValueError assignment destination is read-only" in out
    assert "vals ValueError assignment destination is read-only" in out
    assert "shape AttributeError" in out
    assert "fit ok (5, 5, 5)" in out


# ---------------------------------------------------------------------------- value ranges
@pytest.mark.parametrize("dtype, big", [(np.float64, 1e308), (np.float32, 3e38)])
def test_repeated_coordinates_whose_sum_overflows(dtype, big):
    with pytest.raises(ValueError, match=r"coordinate \(0, 1\).*largest " + np.dtype(dtype).name):
        SparseTensor([[0, 1], [1, 0], [0, 1]], np.array([big, 1.0, big], dtype=dtype))
    # a sum that stays in range is fine
    X = SparseTensor([[0, 1], [0, 1]], np.array([big, -big / 2], dtype=dtype))
    assert X.vals.tolist() == [np.array(big / 2, dtype=dtype).item()]


@pytest.mark.parametrize("shape", [(1, 1), (2 ** 40, 2 ** 40)])   # compiled sort, lexsort
def test_float32_repeats_summed_in_float64(shape):
    # in float32, 2**24 + 1 rounds back to 2**24: a sum kept in float32 never moves
    vals = np.array([2.0 ** 24] + [1.0] * 4, dtype=np.float32)
    X = SparseTensor(np.zeros((5, 2), int), vals, shape=shape)
    assert X.vals.dtype == np.float32 and X.vals.tolist() == [2.0 ** 24 + 4]
    # many small repeats: the float64 sum rounded once
    n = 100_000
    X = SparseTensor(np.zeros((n, 2), int), np.full(n, 0.1), shape=shape, dtype=np.float32)
    assert X.vals[0] == np.float32(n * np.float64(np.float32(0.1)))
    assert X.vals[0] == np.float32(10_000.0)
    # a float64 sum still too large for float32 is refused
    with pytest.raises(ValueError, match="largest float32"):
        SparseTensor(np.zeros((2, 2), int), np.array([3e38, 3e38], np.float32), shape=shape)


def test_float32_from_dataframe_sums_in_float64():
    pd = pytest.importorskip("pandas")
    n = 100_000
    df = pd.DataFrame({"a": np.zeros(n, int), "v": np.full(n, 0.1)})
    X, _ = SparseTensor.from_dataframe(df, ["a"], values="v", dtype=np.float32)
    assert X.vals.dtype == np.float32 and X.vals[0] == np.float32(10_000.0)
    X, _ = SparseTensor.from_dataframe(pd.DataFrame({"a": np.zeros(n, int)}), ["a"],
                                       dtype=np.float32)
    assert X.vals.tolist() == [float(n)]


def test_float_coordinates_too_large_for_int64():
    with pytest.raises(ValueError, match="coordinate 1e\\+20 in mode 1, too large for int64"):
        SparseTensor(np.array([[0.0, 1e20]]), [1.0])
    with pytest.raises(ValueError, match="in mode 0, too large for int64"):
        SparseTensor(np.array([[2.0 ** 63, 0.0]]), [1.0])
    with pytest.raises(ValueError, match=r"negative coordinate \(-1e\+20\) in mode 0"):
        SparseTensor(np.array([[-1e20, 0.0]]), [1.0], shape=(2, 2))
    with pytest.raises(ValueError, match="9223372036854775808 in mode 0, too large"):
        SparseTensor(np.array([[2 ** 63, 0]], dtype=np.uint64), [1.0])
    with pytest.raises(ValueError, match="longer than 2\\*\\*63 - 1"):
        SparseTensor([[0, 0]], [1.0], shape=(2 ** 63, 1))
    # the largest coordinate int64 can hold in a mode of the largest length
    top = 2 ** 63 - 2
    X = SparseTensor(np.array([[top, 0]]), [1.0], shape=(2 ** 63 - 1, 1))
    assert X.subs[0, 0] == top


def test_values_out_of_float32_range():
    with pytest.raises(ValueError, match="1e\\+300 .*too large for float32"):
        SparseTensor([[0, 0], [1, 1]], [1.0, 1e300], dtype=np.float32)
    with pytest.warns(UserWarning, match="1 value\\(s\\) too small for float32"):
        X = SparseTensor([[0, 0], [1, 1]], [1e-50, 2.0], dtype=np.float32)
    assert X.nnz == 1 and X.subs.tolist() == [[1, 1]]
    with pytest.raises(ValueError, match="too large for float64"):
        SparseTensor([[0, 0]], np.array([10 ** 400], dtype=object))


@pytest.mark.parametrize("fill", [5.0, np.nan, -1])
def test_pydata_sparse_fill_value_refused(fill):
    sparse = pytest.importorskip("sparse")
    S = sparse.COO(np.array([[0, 1], [1, 0]]), np.array([1.0, 2.0]), shape=(2, 2),
                   fill_value=fill)
    with pytest.raises(ValueError, match="fill_value"):
        as_sparse_tensor(S)
    with pytest.raises(ValueError, match="fill_value"):
        as_sparse_tensor(sparse.GCXS(S))
    ok = sparse.COO(np.array([[0, 1], [1, 0]]), np.array([1.0, 2.0]), shape=(2, 2))
    assert as_sparse_tensor(ok).sum() == 3.0


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


def test_from_dataframe_names_what_cannot_be_read():
    pd = pytest.importorskip("pandas")
    with pytest.raises(ValueError, match="df has no rows"):
        SparseTensor.from_dataframe(pd.DataFrame({"a": [], "b": []}), ["a", "b"])
    with pytest.raises(ValueError, match="every one of the 2 row.*missing value"):
        SparseTensor.from_dataframe(pd.DataFrame({"a": [np.nan, np.nan], "b": [1, 2]}),
                                    ["a", "b"])
    dup = pd.DataFrame([[1, 2, 3]], columns=["a", "a", "b"])
    for kw in (dict(columns=["a", "b"]), dict(columns=["b"], values="a")):
        with pytest.raises(ValueError, match="2 columns named 'a'"):
            SparseTensor.from_dataframe(dup, **kw)
    SparseTensor.from_dataframe(dup, ["b"])            # the duplicates are not read
    # complex values are refused as SparseTensor refuses them
    cplx = pd.DataFrame({"a": [1, 2], "v": [1 + 2j, 3 + 0j]})
    with pytest.raises(ValueError, match="Complex data not supported"):
        SparseTensor.from_dataframe(cplx, ["a"], values="v")
    with pytest.raises(ValueError, match="Complex data not supported"):
        SparseTensor([[0], [1]], cplx["v"].to_numpy())
    with pytest.raises(TypeError, match="column 'a'.*unhashable"):
        SparseTensor.from_dataframe(pd.DataFrame({"a": [[1], [2]], "b": [1, 2]}), ["a", "b"])
