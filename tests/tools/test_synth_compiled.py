"""The compiled generator of the benchmarks' synthetic Zipf tensors (``benchmarks/synth.py``,
``method="compiled"``, and its passes in ``sktensor_fast._native._synth``), and the NumPy
method left as it was."""
import hashlib
import sys

import numpy as np
import pytest

from _reference import ROOT  # noqa: E402 - the repository root

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import synth  # noqa: E402
from sktensor_fast._native import _construct, _synth  # noqa: E402

NELL2 = (12092, 9184, 28818)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    """Neither a method nor a cache folder from the environment of the test run."""
    monkeypatch.delenv(synth.METHOD_ENV, raising=False)
    monkeypatch.delenv(synth.CACHE_ENV, raising=False)


def _digest(X):
    return hashlib.sha256(np.ascontiguousarray(X.subs, dtype=np.int64).tobytes()
                          + np.ascontiguousarray(X.vals).tobytes()).hexdigest()[:16]


def _linear(X):
    return np.ravel_multi_index(tuple(X.subs.T), X.shape).astype(np.int64)


# ------------------------------------------------------------------ the NumPy method
#: These digests pin the NumPy generator's output: they are what the code gave before the
#: compiled method was added, so the benchmarks' tensors (and caches) stay the same.
NUMPY_PINNED = [
    (((60, 50, 40), 3000, 5, 1.2, np.float64, True), "51af4559e293e652", 3000),
    (((183, 24, 1140, 1717), 2000, 1, 1.1, np.float32, False), "d16db1f8d257573e", 1972),
    (((70, 300), 2500, 2, 1.2, np.float64, True), "a9d761f2575ca743", 2500),
]


@pytest.mark.parametrize("args,digest,nnz", NUMPY_PINNED)
def test_numpy_method_is_unchanged(args, digest, nnz, monkeypatch):
    shape, n, seed, a, dtype, exact = args
    for method in (None, "numpy"):
        X = synth.synthetic_tensor(shape, n, seed=seed, a=a, dtype=dtype, exact=exact,
                                   method=method)
        assert X.nnz == nnz and X.vals.dtype == dtype
        assert _digest(X) == digest
    monkeypatch.setenv(synth.METHOD_ENV, "numpy")
    X = synth.synthetic_tensor(shape, n, seed=seed, a=a, dtype=dtype, exact=exact)
    assert _digest(X) == digest


def test_environment_picks_the_default_method(monkeypatch):
    monkeypatch.setenv(synth.METHOD_ENV, "compiled")
    assert synth.default_method() == "compiled"
    a = synth.synthetic_tensor((40, 30, 20), 800, seed=4)
    b = synth.synthetic_tensor((40, 30, 20), 800, seed=4, method="compiled")
    c = synth.synthetic_tensor((40, 30, 20), 800, seed=4, method="numpy")
    assert _digest(a) == _digest(b) != _digest(c)
    monkeypatch.setenv(synth.METHOD_ENV, "")
    assert synth.default_method() == "numpy"
    monkeypatch.setenv(synth.METHOD_ENV, "fortran")
    with pytest.raises(ValueError, match="SKTF_SYNTH_METHOD='fortran' names no generator"):
        synth.synthetic_tensor((4, 3), 5)


def test_cache_file_names_the_compiled_method(tmp_path, monkeypatch):
    monkeypatch.setenv(synth.CACHE_ENV, str(tmp_path))
    a = synth.synthetic_tensor((30, 20, 10), 500, seed=3, method="numpy")
    b = synth.synthetic_tensor((30, 20, 10), 500, seed=3, method="compiled")
    names = sorted(p.name for p in tmp_path.iterdir())
    # the NumPy tensors keep the names of the caches made before the compiled method
    assert names == ["synth_30_20_10_500_3_1.2_<f8_1.npz",
                     "synth_30_20_10_500_3_1.2_<f8_1_compiled.npz"]
    a2 = synth.synthetic_tensor((30, 20, 10), 500, seed=3, method="numpy")
    b2 = synth.synthetic_tensor((30, 20, 10), 500, seed=3, method="compiled")
    assert _digest(a2) == _digest(a) and _digest(b2) == _digest(b)
    assert len(list(tmp_path.iterdir())) == 2


# ------------------------------------------------------------------ the compiled method
@pytest.mark.parametrize("exact", [True, False])
def test_compiled_tensor_is_the_same_for_any_number_of_threads(exact, monkeypatch):
    # 300,000 draws and more: several blocks of the passes on 2 and 3 threads
    digests = set()
    for threads in (1, 2, 3):
        monkeypatch.setattr(synth, "_THREADS", threads)
        X = synth.synthetic_tensor(NELL2, 300_000, seed=11, dtype=np.float32, exact=exact,
                                   method="compiled")
        digests.add(_digest(X))
    assert len(digests) == 1


def test_compiled_exact_tensor():
    shape = (183, 24, 1140, 1717)
    X = synth.synthetic_tensor(shape, 50_000, seed=2, method="compiled")
    assert X.shape == shape and X.nnz == 50_000
    assert X.subs.dtype == np.int64 and X.vals.dtype == np.float64
    assert np.all(X.subs >= 0) and np.all(X.subs < np.array(shape))
    assert np.all(np.diff(_linear(X)) > 0)        # sorted, distinct
    assert set(np.unique(X.vals)) == {1.0, 2.0, 3.0, 4.0}
    counts = np.bincount(X.vals.astype(np.int64), minlength=5)[1:]
    assert np.all(np.abs(counts / X.nnz - 0.25) < 0.01)
    # the arrays are the tensor's own, read-only
    assert not X.subs.flags.writeable and not X.vals.flags.writeable
    # other seeds, other tensors
    Y = synth.synthetic_tensor(shape, 50_000, seed=3, method="compiled")
    assert _digest(X) != _digest(Y)


def test_compiled_tensor_needing_several_rounds():
    # a small shape and skewed modes: the first round finds far fewer than nnz distinct
    shape = (40, 30, 20)
    X = synth.synthetic_tensor(shape, 6000, seed=1, a=1.5, method="compiled")
    assert X.nnz == 6000 and np.all(np.diff(_linear(X)) > 0)
    assert np.all(X.subs < np.array(shape))
    # more than half the shape: repeated coordinates summed, as the NumPy method does
    Y = synth.synthetic_tensor((10, 10), 80, seed=1, method="compiled")
    assert Y.nnz < 80 and Y.vals.sum() >= 80 and np.all(np.diff(_linear(Y)) > 0)


def test_compiled_summed_tensor():
    X = synth.synthetic_tensor(NELL2, 100_000, seed=5, exact=False, method="compiled")
    assert 50_000 < X.nnz < 100_000
    assert np.all(np.diff(_linear(X)) > 0)
    # every draw adds a count 1..4
    assert 100_000 <= X.vals.sum() <= 400_000
    assert np.all(X.vals == np.round(X.vals)) and X.vals.min() >= 1
    assert abs(X.vals.sum() / 100_000 - 2.5) < 0.05


def test_compiled_draws_are_zipf_skewed():
    """The most frequent index of a mode gets about its Zipf share of the draws, and the
    exact tensors are about as skewed as the NumPy method's (the same rounds)."""
    tables = synth._zipf_tables(NELL2, 1.2)
    perms = synth._permutations(NELL2, np.random.default_rng(0))
    lin = np.empty(200_000, dtype=np.int64)
    _synth.draw_linear(lin, 0, 0, perms=perms, num_threads=2, **tables)
    coords = np.unravel_index(lin, NELL2)
    for k, n in enumerate(NELL2):
        p = 1.0 / np.arange(1, n + 1) ** 1.2
        counts = np.bincount(coords[k], minlength=n)
        top = int(np.argmax(counts))
        assert top == perms[tables["cdf_starts"][k]]      # the heaviest index, permuted
        assert abs(counts[top] / lin.size - p[0] / p.sum()) < 0.01
    for exact in (True, False):
        shares = []
        for method in ("numpy", "compiled"):
            X = synth.synthetic_tensor(NELL2, 100_000, seed=1, method=method, exact=exact)
            shares.append(np.bincount(X.subs[:, 0]).max() / X.nnz)
        assert 0.8 < shares[1] / shares[0] < 1.25, shares


def test_compiled_bad_arguments():
    cases = [
        (dict(shape=(10, 0, 3)), "shape must hold integers in"),
        (dict(shape=(10, 2.5)), "shape must hold integers in"),
        (dict(shape=()), "at least one mode"),
        (dict(shape=(2 ** 31, 2)), "shape must hold integers in"),
        (dict(shape=(2 ** 30, 2 ** 30, 2 ** 3)), "fewer than 2\\*\\*62 entries"),
        (dict(nnz=-1), "nnz must be an integer >= 0"),
        (dict(nnz=10.0), "nnz must be an integer >= 0"),
        (dict(seed=-2), "seed must be an integer >= 0"),
        (dict(a=float("nan")), "a must be finite"),
        (dict(a="steep"), "a must be a real number"),
        (dict(dtype=np.int32), "dtype must be float32 or float64"),
    ]
    for kw, message in cases:
        args = dict(shape=(10, 20), nnz=50, seed=0, a=1.2, dtype=np.float64)
        args.update(kw)
        with pytest.raises(ValueError, match=message):
            synth.synthetic_tensor(args.pop("shape"), args.pop("nnz"), method="compiled",
                                   **args)
    with pytest.raises(ValueError, match="method must be one of 'numpy', 'compiled'"):
        synth.synthetic_tensor((4, 3), 5, method="cython")
    # a law that puts every draw of a round on one index (another one every round): nnz
    # distinct coordinates cannot be found
    with pytest.raises(ValueError, match="found only [0-9]+ distinct coordinates in"):
        synth.synthetic_tensor((50,), 20, a=80.0, method="compiled")
    X = synth.synthetic_tensor((10, 20), 0, method="compiled")
    assert X.nnz == 0 and X.shape == (10, 20)


# ------------------------------------------------------------------ the compiled passes
def test_draws_depend_on_the_draw_number_only():
    shape = (300, 200, 100)
    tables = synth._zipf_tables(shape, 1.1)
    perms = synth._permutations(shape, np.random.default_rng(3))
    whole = np.empty(150_000, dtype=np.int64)
    _synth.draw_linear(whole, 9, 1000, perms=perms, num_threads=1, **tables)
    parts = np.empty_like(whole)
    _synth.draw_linear(parts[:70_001], 9, 1000, perms=perms, num_threads=2, **tables)
    _synth.draw_linear(parts[70_001:], 9, 71_001, perms=perms, num_threads=3, **tables)
    assert np.array_equal(whole, parts)
    assert whole.min() >= 0 and whole.max() < np.prod(shape)
    other = np.empty_like(whole)
    _synth.draw_linear(other, 10, 1000, perms=perms, num_threads=2, **tables)
    assert np.mean(other == whole) < 0.2
    with pytest.raises(ValueError, match="guide_starts need 4 entries"):
        bad = dict(tables, guide_starts=tables["guide_starts"][:-1])
        _synth.draw_linear(whole, 9, 0, perms=perms, **bad)
    wrong = perms.copy()
    wrong[300] = 200       # mode 1 has 200 indices
    with pytest.raises(ValueError, match="mode 1's permutation holds 200, outside"):
        _synth.draw_linear(whole, 9, 0, perms=wrong, **tables)


def test_guide_table_inverse_is_searchsorted():
    rng = np.random.default_rng(8)
    for n in (1, 2, 64, 183, 5000):
        for a in (0.5, 1.2, 3.0):
            cdf = np.cumsum(1.0 / np.arange(1, n + 1, dtype=np.float64) ** a)
            cdf /= cdf[-1]
            K = synth._COMPILED_GUIDE_BINS * n
            edges = np.arange(K, dtype=np.float64) / K
            guide = np.searchsorted(cdf, np.append(edges, 1.0), side="right").astype(np.int32)
            inner = cdf[cdf < 1]
            u = np.concatenate([rng.random(5000), edges, np.nextafter(edges, 1),
                                np.nextafter(edges[1:], 0), inner, np.nextafter(inner, 0),
                                [np.nextafter(1.0, 0)]])
            expected = np.minimum(np.searchsorted(cdf, u, side="right"), n - 1)
            assert np.array_equal(_synth.zipf_codes(cdf, guide, u), expected)
    with pytest.raises(ValueError, match="outside \\[0, 1\\)"):
        _synth.zipf_codes(cdf, guide, np.array([1.0]))


@pytest.mark.parametrize("n", [0, 1, 2, 1000, 200_003])
def test_radix_sort_is_numpys(n):
    rng = np.random.default_rng(n)
    for nbits, high in ((42, 3 * 10 ** 12), (10, 1000), (1, 2), (62, 2 ** 62 - 1)):
        x = rng.integers(0, high, n, dtype=np.int64).view(np.uint64)
        for threads in (1, 3):
            keys = x.copy()
            scratch = np.empty(n + 5, dtype=np.uint64)
            which = _construct.radix_sort_keys(keys, scratch, nbits, threads)
            got = keys if which == 0 else scratch[:n]
            assert np.array_equal(got, np.sort(x))
    with pytest.raises(ValueError, match="scratch has 1 entries"):
        _construct.radix_sort_keys(np.zeros(3, np.uint64), np.zeros(1, np.uint64), 8)


def test_distinct_passes():
    rng = np.random.default_rng(4)
    keys = np.sort(rng.integers(0, 80_000, 200_000))
    distinct = np.unique(keys)
    other = np.sort(rng.integers(0, 200_000, 100_000))
    union = np.union1d(keys, other)
    for threads in (1, 2, 5):
        assert _synth.count_unique(keys, threads) == distinct.size
        out = np.full(distinct.size + 3, -1, dtype=np.int64)
        assert _synth.compact(keys, out, 0, None, threads) == distinct.size
        assert np.array_equal(out[:distinct.size], distinct) and np.all(out[-3:] == -1)
        assert _synth.merge_unique(keys, other, None, threads) == union.size
        merged = np.empty(union.size, dtype=np.int64)
        _synth.merge_unique(other, keys, merged, threads)
        assert np.array_equal(merged, union)
    assert _synth.merge_unique(keys[:0], other[:0]) == 0
    with pytest.raises(ValueError, match="dst has room for 5 values"):
        _synth.compact(keys, np.empty(5, dtype=np.int64))
    with pytest.raises(ValueError, match="dst overlaps src"):
        _synth.compact(keys, keys[10:])
    with pytest.raises(ValueError, match="out overlaps an input"):
        _synth.merge_unique(keys, other, keys)


def test_kept_subset_is_the_smallest_priorities():
    """The exact tensors keep the nnz distinct indices of smallest (priority, index)."""
    rng = np.random.default_rng(6)
    keys = np.sort(rng.integers(0, 10 ** 9, 250_000))
    distinct = np.unique(keys)
    hist = _synth.priority_histogram(keys, 17, 16, 3)
    assert hist.sum() == distinct.size and hist.size == 1 << 16
    prio = np.array([_synth.stream_key(17, _synth.STREAM_PRIORITY)], dtype=np.uint64)
    from sktensor_fast._native import _numerics
    p = _numerics.sample_keys(int(prio[0]), distinct)
    assert np.array_equal(np.bincount((p >> np.uint64(48)).astype(np.int64),
                                      minlength=1 << 16), hist)
    nnz = 123_456
    threshold = synth._keep_threshold(keys, nnz, 17, 2)
    kept = np.empty(nnz, dtype=np.int64)
    assert _synth.compact(keys, kept, 17, threshold, 2) == nnz
    expected = np.sort(distinct[np.lexsort((distinct, p))[:nnz]])
    assert np.array_equal(kept, expected)


def test_split_and_values():
    shape = np.array([7, 1, 13, 5], dtype=np.int64)
    rng = np.random.default_rng(1)
    lin = rng.integers(0, int(np.prod(shape)), 100_000)
    for threads in (1, 4):
        subs = np.empty((lin.size, 4), dtype=np.int64)
        _synth.split_linear(lin, subs, shape, threads)
        assert np.array_equal(subs, np.stack(np.unravel_index(lin, tuple(shape)), axis=1))
    with pytest.raises(ValueError, match="outside the shape"):
        _synth.split_linear(np.array([int(np.prod(shape))]), np.empty((1, 4), np.int64), shape)
    with pytest.raises(ValueError, match="subs must have shape"):
        _synth.split_linear(lin, np.empty((5, 4), np.int64), shape)
    for dtype in (np.float32, np.float64):
        whole = np.empty(150_000, dtype=dtype)
        _synth.draw_values(whole, 3, 0, 3)
        parts = np.empty_like(whole)
        _synth.draw_values(parts[:1000], 3, 0, 1)
        _synth.draw_values(parts[1000:], 3, 1000, 2)
        assert np.array_equal(whole, parts) and set(np.unique(whole)) == {1, 2, 3, 4}
    # summed values: the first count of a position is draw_values' own
    keys = np.array([2, 2, 2, 5, 9, 9], dtype=np.int64)
    summed = np.empty(3)
    _synth.summed_values(keys, summed, 3, 1)
    assert summed[1] == whole[1] and summed[0] >= 3 and summed[2] >= 2
    with pytest.raises(ValueError, match="out has 2 entries, keys 3 distinct"):
        _synth.summed_values(keys, np.empty(2), 3)
