"""The compiled passes that build canonical tensors, parse and format text (sktensor_fast._native)."""
import io

import numpy as np
import pytest

from sktensor_fast import SparseTensor
from sktensor_fast._native import _construct, _tns, canonical, text
from sktensor_fast._native.canonical import CanonicalError, canonical_coo


def reference(subs, vals, shape):
    """Canonical form by NumPy: a stable lexsort, runs summed (short runs: in input order),
    zeros dropped."""
    subs = np.asarray(subs, dtype=np.int64).reshape(-1, len(shape))
    vals = np.asarray(vals)
    if len(vals) == 0:
        return subs, vals
    order = np.lexsort(subs.T[::-1])
    s, v = subs[order], vals[order]
    start = np.concatenate(([True], np.any(s[1:] != s[:-1], axis=1)))
    idx = np.flatnonzero(start)
    s, v = s[idx], np.add.reduceat(v, idx)
    keep = v != 0
    return s[keep], v[keep]


@pytest.mark.parametrize("shape", [(7, 5, 9), (1, 1, 3), (300, 2, 700), (1,), (5000,),
                                   (3, 4, 5, 6, 7)])
@pytest.mark.parametrize("n", [0, 1, 17, 5000, 70000])
def test_canonical_against_reference(shape, n):
    rng = np.random.default_rng(n + len(shape))
    subs = np.column_stack([rng.integers(0, s, n) for s in shape]).reshape(n, len(shape))
    vals = rng.integers(-1, 3, n).astype(np.float64)
    want_s, want_v = reference(subs, vals, shape)
    got = [canonical_coo(subs, vals, shape, num_threads=t) for t in (1, 2, 3)]
    for s, v, info in got:
        np.testing.assert_array_equal(s, want_s)
        np.testing.assert_array_equal(v, want_v)
        assert s.dtype == np.int64 and s.flags.c_contiguous


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint16, np.uint32, np.uint64])
def test_canonical_index_dtypes(dtype):
    subs = np.array([[3, 1], [0, 2], [3, 1]], dtype=dtype)
    s, v, info = canonical_coo(subs, np.array([1.0, 2.0, 3.0]), (4, 3))
    np.testing.assert_array_equal(s, [[0, 2], [3, 1]])
    np.testing.assert_array_equal(v, [2.0, 4.0])
    assert info["summed"] and not info["sorted"]


def test_canonical_float32_and_skewed_buckets():
    # one heavy first-mode row: its bucket is sorted by all threads together
    rng = np.random.default_rng(1)
    n = 600_000
    subs = np.column_stack([np.where(rng.random(n) < 0.6, 5, rng.integers(0, 64, n)),
                            rng.integers(0, 1 << 20, n)])
    vals = rng.integers(1, 4, n).astype(np.float32)
    ref = SparseTensor(subs, vals, (64, 1 << 20))
    for t in (1, 2, 4):
        s, v, _ = canonical_coo(subs, vals, (64, 1 << 20), num_threads=t)
        assert v.dtype == np.float32
        np.testing.assert_array_equal(s, ref.subs)
        np.testing.assert_array_equal(v, ref.vals)


def test_canonical_sorted_input_is_not_copied():
    subs = np.array([[0, 1], [1, 0], [1, 2]], dtype=np.int64)
    vals = np.array([1.0, 2.0, 3.0])
    s, v, info = canonical_coo(subs, vals, (2, 3))
    assert s is subs and v is vals and info["sorted"]


def test_canonical_sums_in_input_order():
    # 1e16 + 1 + 1 differs from 1 + 1 + 1e16: the order of the input decides
    subs = np.zeros((3, 1), np.int64)
    s, v, _ = canonical_coo(subs, np.array([1e16, 1.0, 1.0]), (1,))
    assert v[0] == (1e16 + 1.0) + 1.0
    s, v, _ = canonical_coo(subs, np.array([1.0, 1.0, 1e16]), (1,))
    assert v[0] == (1.0 + 1.0) + 1e16


def test_canonical_errors():
    with pytest.raises(CanonicalError, match="negative coordinate \\(-1\\) in mode 1"):
        canonical_coo(np.array([[0, 0], [0, -1]]), np.ones(2), (2, 2))
    with pytest.raises(CanonicalError, match="coordinate 2 in mode 0, outside the shape"):
        canonical_coo(np.array([[0, 0], [2, 1]]), np.ones(2), (2, 2))
    with pytest.raises(CanonicalError, match="first at position 1"):
        canonical_coo(np.array([[0, 0], [1, 1]]), np.array([1.0, np.nan]), (2, 2))
    with pytest.raises(CanonicalError, match="repeated"):
        canonical_coo(np.array([[1, 1], [1, 1]]), np.ones(2), (2, 2), sum_duplicates=False)
    big = np.finfo(np.float64).max
    with pytest.raises(CanonicalError, match=r"coordinate \(1, 0\) add up"):
        canonical_coo(np.array([[1, 0], [0, 0], [1, 0]]), np.array([big, 1.0, big]), (2, 2))
    # too wide for a 64-bit key: the caller sorts another way
    assert canonical_coo(np.zeros((1, 3), np.int64), np.ones(1), (2 ** 30,) * 3) is None


def _both_paths(subs, vals, shape, threads=(1, 2, 3), **kw):
    """canonical_coo (the caller keeps the coordinates: the keys are packed again while
    scattered) and canonical_from of a copy nobody else holds (the scan keeps the keys), at
    several thread counts."""
    from sktensor_fast._native.canonical import canonical_from
    out = []
    for t in threads:
        out.append(canonical_coo(subs, vals, shape, num_threads=t, **kw))
        out.append(canonical_from([subs.copy(), vals], shape, num_threads=t, **kw))
    return out


@pytest.mark.parametrize("shape", [(50, 40, 30), (300, 200), (7, 9, 11, 13), (400,)])
def test_canonical_parallel_decode_with_repeats_and_zeros(shape):
    # enough rows for the decoding rounds in parallel; repeats and zero sums move the rows
    # of every bucket down, and input zeros are dropped
    rng = np.random.default_rng(len(shape))
    n = 300_000
    subs = np.column_stack([rng.integers(0, s, n) for s in shape])
    vals = rng.integers(-2, 3, n).astype(np.float64)
    want_s, want_v = reference(subs, vals, shape)
    for s, v, info in _both_paths(subs, vals, shape):
        np.testing.assert_array_equal(s, want_s)
        np.testing.assert_array_equal(v, want_v)
        # the result was shrunk in place: its own arrays, no larger buffer behind them
        assert s.base is None and v.base is None and s.flags.c_contiguous
        assert info["summed"] and info["zeros"] > 0


@pytest.mark.parametrize("width", [4, 5, 7, 8, 10, 11])
def test_sort_into_digit_widths(width):
    # every digit width of the bucket sorts, odd bucket sizes, keys of 61 bits
    rng = np.random.default_rng(width)
    shape = (1 << 20, 3, (1 << 39) - 7)
    n = 40_001
    subs = np.column_stack([rng.integers(0, s, n) for s in shape])
    subs[::97] = subs[5]                              # repeats
    vals = rng.integers(-3, 4, n) * 0.5               # exact sums in any order
    want_s, want_v = reference(subs, vals, shape)
    bits, shifts, masks = canonical._layout(shape)
    for top in (1, 9, 12):
        low = sum(bits) - top
        for t in (1, 2):
            hist = np.zeros((_construct.num_blocks(n, t), 1 << top), np.int64)
            rep = _construct.scan(subs, vals, list(shape), shifts, hist, low, None, t)
            assert rep["order"] == 0 and rep["bad_row"] == -1
            os_, ov = np.empty((n, 3), np.int64), np.empty(n)
            res = _construct.sort_into(subs, shifts, vals, hist, low, shifts, masks, os_, ov,
                                       max_digit=width, num_threads=t)
            np.testing.assert_array_equal(os_[:res["nnz"]], want_s)
            np.testing.assert_array_equal(ov[:res["nnz"]], want_v)


def test_sort_into_rejects_inconsistent_arrays():
    subs = np.zeros((10, 2), np.int64)
    hist = np.zeros((1, 4), np.int64)
    hist[0, 0] = 10
    with pytest.raises(ValueError, match="inconsistent"):
        _construct.sort_into(subs, [1, 0], np.ones(10), hist, 1, [1, 0], [1, 1],
                             np.empty((9, 2), np.int64), np.empty(10))
    with pytest.raises(ValueError, match="histogram"):
        _construct.sort_into(subs, [1, 0], np.ones(10), np.zeros((1, 4), np.int64), 1,
                             [1, 0], [1, 1], np.empty((10, 2), np.int64), np.empty(10))
    with pytest.raises(ValueError, match="max_digit"):
        _construct.sort_into(subs, [1, 0], np.ones(10), hist, 1, [1, 0], [1, 1],
                             np.empty((10, 2), np.int64), np.empty(10), max_digit=3)
    # counts that do not describe the keys: an error, no write outside the arrays
    bad = np.column_stack([np.arange(10) % 4, np.arange(10) % 2])
    for h, shift in (([[10, 0, 0, 0]], 1), ([[3, 3, 3, 1]], 1), ([[10, 0]], 0)):
        with pytest.raises(ValueError, match="do not match the histogram"):
            _construct.sort_into(bad, [1, 0], np.ones(10), np.array(h, np.int64), shift,
                                 [1, 0], [3, 1], np.empty((10, 2), np.int64), np.empty(10))


@pytest.mark.parametrize("shape", [(1 << 32, 1 << 32), (1, 1 << 32, 1 << 32),
                                   ((1 << 63) - 1,), (3, 1 << 62)])
def test_canonical_keys_at_the_limits(shape):
    # packed keys of 63 and 64 bits, the largest coordinates, a mode without a field
    rng = np.random.default_rng(11)
    n = 5000
    hi = np.array(shape, dtype=np.uint64) - 1
    subs = np.column_stack([rng.integers(0, s, n, dtype=np.int64) if s > 1
                            else np.zeros(n, np.int64) for s in shape])
    subs[:40] = hi.astype(np.int64)                    # the largest key, repeated
    subs[40:80] = 0                                    # the smallest
    vals = rng.integers(1, 4, n).astype(np.float64)
    want_s, want_v = reference(subs, vals, shape)
    for s, v, _ in _both_paths(subs, vals, shape, threads=(1, 2)):
        np.testing.assert_array_equal(s, want_s)
        np.testing.assert_array_equal(v, want_v)
    assert want_s[-1].tolist() == hi.astype(np.int64).tolist()
    sub8 = subs.astype(np.uint64)
    for s, v, _ in _both_paths(sub8, vals, shape, threads=(1, 2)):
        np.testing.assert_array_equal(s, want_s)


def test_canonical_sorted_input_with_repeats_and_zeros():
    rng = np.random.default_rng(12)
    shape = (100, 100, 100)
    subs = np.column_stack([rng.integers(0, s, 200_000) for s in shape])
    subs = subs[np.lexsort(subs.T[::-1])]
    vals = rng.integers(0, 3, len(subs)).astype(np.float64)
    want_s, want_v = reference(subs, vals, shape)
    for s, v, info in _both_paths(subs, vals, shape):
        assert info["sorted"]
        np.testing.assert_array_equal(s, want_s)
        np.testing.assert_array_equal(v, want_v)
    # strictly increasing without zeros: the input itself comes back
    u = np.ascontiguousarray(want_s)
    s, v, info = canonical_coo(u, want_v, shape)
    assert s is u and v is want_v and info["sorted"]


@pytest.mark.parametrize("n", [3, 100_000, 700_000])
def test_canonical_all_duplicates(n):
    # one coordinate throughout: one bucket (sorted by all threads together when large),
    # the sum in input order
    subs = np.tile(np.array([[3, 1, 4]]), (n, 1))
    vals = np.ones(n)
    vals[0] = 2.0 ** 53                  # 2**53 + 1 + 1 ... rounds differently in another order
    want = vals[0]
    for v1 in vals[1:]:
        want += v1
    for s, v, info in _both_paths(subs, vals, (5, 2, 7)):
        np.testing.assert_array_equal(s, [[3, 1, 4]])
        assert v.tolist() == [want] and info["summed"]
    zeros = np.zeros(n)
    for s, v, info in _both_paths(subs, zeros, (5, 2, 7), threads=(1, 2)):
        assert s.shape == (0, 3) and v.shape == (0,)
    with pytest.raises(CanonicalError, match="repeated"):
        canonical_coo(subs, vals, (5, 2, 7), sum_duplicates=False, num_threads=2)


def test_canonical_overflow_in_a_large_bucket():
    n = 400_000
    subs = np.zeros((n, 2), np.int64)
    subs[:, 1] = np.arange(n) % 1000
    vals = np.ones(n)
    vals[[7, 1007]] = np.finfo(np.float64).max          # coordinate (0, 7), twice
    for t in (1, 2):
        with pytest.raises(CanonicalError, match=r"coordinate \(0, 7\) add up") as exc:
            canonical_coo(subs, vals, (1, 1000), num_threads=t)
        assert exc.value.coord == (0, 7)


def test_fresh_array_and_page_size_choice(monkeypatch):
    import sys
    assert _construct.small_pages(np.empty(1 << 22)) == (1 if sys.platform.startswith("linux")
                                                         else 0)
    assert _construct.small_pages(np.empty(0)) == 0
    assert _construct.small_pages(np.empty((10, 10))[:, ::2]) == 0      # not contiguous
    assert isinstance(canonical._free_page_reporting(), bool)
    rng = np.random.default_rng(13)
    subs = rng.integers(0, 60, (400_000, 3))
    vals = rng.integers(1, 3, 400_000).astype(np.float64)
    got = []
    for env, want in (("0", True), ("1", False), (" Auto ", canonical._free_page_reporting())):
        monkeypatch.setenv(canonical.HUGE_PAGES_ENV, env)
        assert canonical.base_pages() is want
        a = canonical.fresh_array((1 << 20, 3), np.int64)        # 24 MiB
        assert a.shape == (1 << 20, 3) and a.dtype == np.int64 and a.flags.c_contiguous
        got.append(canonical_coo(subs, vals, (60, 60, 60), num_threads=2))
    for s, v, _ in got[1:]:
        np.testing.assert_array_equal(s, got[0][0])
        np.testing.assert_array_equal(v, got[0][1])
    monkeypatch.setenv(canonical.HUGE_PAGES_ENV, "sometimes")
    with pytest.warns(RuntimeWarning, match="SKTENSOR_FAST_HUGE_PAGES='sometimes'"):
        assert canonical.base_pages() is canonical._free_page_reporting()


def test_mode_order_and_narrow():
    rng = np.random.default_rng(2)
    subs = rng.integers(0, 50, (100_000, 3))
    for dtype in (np.int32, np.int64):
        out = np.empty(len(subs), dtype=dtype)
        _construct.mode_order(subs, 1, 50, out, 3)
        np.testing.assert_array_equal(out, np.argsort(subs[:, 1], kind="stable"))
    nar = np.empty(subs.shape, np.int32)
    _construct.narrow(subs, nar, 2)
    np.testing.assert_array_equal(nar, subs)


def test_value_stats():
    v = np.array([1.0, 2.5, -1.0, 0.0, 1.0])
    st = _construct.value_stats(v, 2)
    assert (st["nonint"], st["negative"], st["nonbinary"]) == (1, 1, 2)
    assert (st["first_nonint"], st["first_negative"], st["first_nonbinary"]) == (1, 2, 1)
    assert st["sum"] == 3.5 and st["sum_sq"] == 9.25 and st["max_abs"] == 2.5
    assert _construct.value_stats(np.zeros(0), 2)["max_abs"] == 0.0
    big = np.random.default_rng(3).random(300_000) - 0.5
    big[200_000] = -7.0            # in a later block than the first, negative
    sums = {(_construct.value_stats(big, t)["sum"]) for t in (1, 2, 4)}
    assert len(sums) == 1          # blocks of a fixed size: the same sum for any thread count
    for t in (1, 2, 4):
        assert _construct.value_stats(big, t)["max_abs"] == 7.0
        assert _construct.value_stats(big.astype(np.float32), t)["max_abs"] == 7.0


def test_cp_als_reads_the_values_once_per_tensor(monkeypatch):
    """The largest magnitude that CP-ALS's scaling needs comes from the pass over the values
    kept with the tensor: a second fit (and a score) make no pass of their own."""
    from sktensor_fast import CPALS, SparseTensor
    from sktensor_fast._native import _construct as construct
    calls = []
    real = construct.value_stats
    monkeypatch.setattr(construct, "value_stats", lambda *a: calls.append(1) or real(*a))
    X = SparseTensor([[0, 0], [1, 1], [1, 0]], [1.0, 2.0, 3.0])
    est = CPALS(rank=1, random_state=0, max_iter=3).fit(X)
    CPALS(rank=1, random_state=1, max_iter=3).fit(X)
    est.score(X)
    assert len(calls) == 1


def test_check_canonical():
    subs = np.array([[0, 1], [1, 0]], np.int64)
    assert _construct.check_canonical(subs, np.array([1.0, 2.0]), (2, 2)) == (-1, None)
    assert _construct.check_canonical(subs[::-1].copy(), np.ones(2), (2, 2)) == (1, "order")
    assert _construct.check_canonical(subs, np.array([1.0, 0.0]), (2, 2)) == (1, "value")
    assert _construct.check_canonical(subs, np.ones(2), (1, 2)) == (1, "range")


# ------------------------------------------------------------------------------- text
def test_parse_threads_and_blocks_agree():
    rng = np.random.default_rng(4)
    n = 3_000
    subs = rng.integers(1, 1000, (n, 3))
    vals = np.round(rng.standard_normal(n), 3)
    lines = [f"{a} {b}\t{c}  {float(v)!r}" for (a, b, c), v in zip(subs, vals)]
    lines[10:10] = ["# comment", "", "   "]
    data = ("\n".join(lines) + "\n").encode()
    results = []
    for t in (1, 2, 4):
        for block in (256, 1 << 20):
            got = text.read_tns(io.BytesIO(data), "x", None, 1, np.float64, block_bytes=block,
                                num_threads=t)
            results.append(got)
            np.testing.assert_array_equal(got["subs"], subs - 1)
            np.testing.assert_array_equal(got["vals"], vals)
            assert got["lines"] == n + 3
    # segments of the compiled parser: a block large enough for several threads
    many = data * 100
    one = text.read_tns(io.BytesIO(many), "x", None, 1, np.float64, num_threads=1)
    four = text.read_tns(io.BytesIO(many), "x", None, 1, np.float64, num_threads=4)
    np.testing.assert_array_equal(one["subs"], four["subs"])
    np.testing.assert_array_equal(one["vals"], four["vals"])


def test_parse_error_in_later_segment_names_its_line():
    good = b"".join(b"%d 1 1\n" % i for i in range(1, 200_000))
    with pytest.raises(text.TextError, match="x, line 200000: 'oops' is not a number"):
        text.read_tns(io.BytesIO(good + b"1 1 oops\n" + good), "x", None, 1, np.float64,
                      num_threads=4)


def test_format_rows_modes():
    subs = np.array([[0, 4], [12, 0]], np.int64)
    buf = np.empty(2 * _tns.row_bytes_max(2), np.uint8)
    n = _tns.format_rows(subs, np.array([3.0, -70.0]), 0, 2, 0, 0, buf, 2)
    assert bytes(buf[:n]) == b"1 5 3\n13 1 -70\n"
    n = _tns.format_rows(subs, np.array([0.1, 1 / 3]), 0, 2, 2, 0, buf, 2)
    assert bytes(buf[:n]) == b"1 5 0.1\n13 1 0.3333333333333333\n"
    n = _tns.format_rows(subs, np.array([0.1, 1 / 3]), 0, 2, 1, 3, buf, 2)
    assert bytes(buf[:n]) == b"1 5 0.1\n13 1 0.333\n"


@pytest.mark.parametrize("compression", [None, "gzip", "bz2", "xz"])
def test_write_then_read(tmp_path, compression, monkeypatch):
    monkeypatch.setattr(text, "WRITE_ROWS", 1000)     # several buffers / members
    rng = np.random.default_rng(5)
    X = SparseTensor(rng.integers(0, 30, (5000, 3)), rng.standard_normal(5000), (30, 30, 30))
    path = tmp_path / "x.tns"
    with open(path, "wb") as f:
        text.write_tns(f, X.subs, X.vals, mode="shortest", compression=compression,
                       num_threads=2)
    subs, vals, shape, canonical = text.load_arrays(path, X.shape, block_bytes=4096)
    assert canonical and shape == X.shape
    np.testing.assert_array_equal(subs, X.subs)
    np.testing.assert_array_equal(vals, X.vals)


def test_truncated_compressed_file_names_the_line(tmp_path):
    import gzip
    path = tmp_path / "x.tns.gz"
    path.write_bytes(gzip.compress(b"1 1 1\n" * 100_000)[:-100])
    with pytest.raises(text.TextError, match=r"x\.tns\.gz, line \d+: cannot read the file"):
        text.load_arrays(path, block_bytes=1 << 16)


def test_mapped_file_blocks_and_errors(tmp_path):
    """A plain file is parsed in place (memory map), block by block: long lines, a missing
    final line break, and the line number of an error far into the file."""
    lines = [f"{i % 7 + 1} {i % 5 + 1} {i}" for i in range(1, 3000)]
    lines[1500] = "3 3 " + "1" * 300 + ".5"         # longer than a block
    path = tmp_path / "x.tns"
    path.write_text("\n".join(lines))
    got = text.load_arrays(path, block_bytes=256)
    ref = text.read_tns(io.BytesIO(path.read_bytes()), "x", None, 1, np.float64)
    s, v, shape, canonical = got
    assert canonical and shape == (7, 5)
    X = SparseTensor(ref["subs"], ref["vals"], shape)
    np.testing.assert_array_equal(s, X.subs)
    np.testing.assert_array_equal(v, X.vals)
    lines[2900] = "1 1 x"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(text.TextError, match=r"x\.tns, line 2901: 'x' is not a number"):
        text.load_arrays(path, block_bytes=256)


def test_float32_values_shortest_text_round_trips():
    v = np.random.default_rng(7).standard_normal(20_000).astype(np.float32)
    subs = np.arange(len(v), dtype=np.int64).reshape(-1, 1)
    buf = np.empty(len(v) * _tns.row_bytes_max(1), np.uint8)
    n = _tns.format_rows(subs, v, 0, len(v), 2, 0, buf, 2)
    got = text.read_tns(io.BytesIO(bytes(buf[:n])), "x", None, 1, np.float32)
    np.testing.assert_array_equal(got["vals"], v)
    # as short as NumPy's shortest float32 text
    assert n - sum(len(str(i + 1)) + 2 for i in range(len(v))) == sum(
        len(x) for x in v.astype("S"))
