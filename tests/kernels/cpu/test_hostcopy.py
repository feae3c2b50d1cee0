"""The compiled host copies of the OpenCL backend (``_native/_hostcopy.pyx``) against NumPy:
the same bytes for any number of threads."""
import numpy as np
import pytest

from sktensor_fast._native import _hostcopy


def _reference(subs, vals, order, start, stop, chunk):
    """The block by NumPy: entry j of the block at (j % chunk) * nchunks + j // chunk."""
    idx = np.arange(start, stop) if order is None else order[start:stop]
    n = stop - start
    if not chunk:
        return subs[idx].copy(), vals[idx].copy()
    nchunks = -(-n // chunk)
    hs = np.zeros((nchunks * chunk, subs.shape[1]), dtype=subs.dtype)
    hv = np.zeros(nchunks * chunk, dtype=vals.dtype)
    j = np.arange(n)
    pos = (j % chunk) * nchunks + j // chunk
    hs[pos] = subs[idx]
    hv[pos] = vals[idx]
    return hs, hv


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("chunk", [0, 1, 8, 256])
@pytest.mark.parametrize("with_order", [False, True])
def test_interleave_block_equals_numpy(dtype, chunk, with_order):
    rng = np.random.default_rng(3)
    nnz, N = 5000, 3
    subs = rng.integers(0, 1000, (nnz, N)).astype(np.int32)
    vals = rng.random(nnz).astype(dtype)
    order = rng.permutation(nnz).astype(np.int32) if with_order else None
    for start, stop in [(0, nnz), (17, 4093), (100, 101), (300, 300)]:
        want_s, want_v = _reference(subs, vals, order, start, stop, chunk)
        for threads in (1, 2, 5):
            # garbage first: the padding must be written, not left as it was
            hs = np.full(want_s.shape, -7, dtype=np.int32)
            hv = np.full(want_v.shape, np.nan, dtype=dtype)
            _hostcopy.interleave_block(subs, vals, order, start, stop, chunk, hs, hv, threads)
            assert np.array_equal(hs, want_s), (start, stop, threads)
            assert np.array_equal(hv, want_v), (start, stop, threads)


def test_interleave_block_refuses_what_does_not_fit():
    subs = np.zeros((10, 3), dtype=np.int32)
    vals = np.zeros(10)
    hs, hv = np.empty((16, 3), dtype=np.int32), np.empty(16)
    with pytest.raises(ValueError, match="needs"):
        _hostcopy.interleave_block(subs, vals, None, 0, 10, 4, hs[:12], hv, 1)
    with pytest.raises(ValueError, match="past 10 nonzeros"):
        _hostcopy.interleave_block(subs, vals, None, 0, 11, 8, hs, hv, 1)
    with pytest.raises(ValueError, match="past an order"):
        _hostcopy.interleave_block(subs, vals, np.arange(5, dtype=np.int32), 0, 8, 8, hs[:8],
                                   hv[:8], 1)
    with pytest.raises(ValueError, match="outside the nonzeros"):
        _hostcopy.interleave_block(subs, vals, np.full(10, 10, dtype=np.int32), 0, 10, 8, hs,
                                   hv, 2)
    with pytest.raises(ValueError, match="coordinate rows"):
        _hostcopy.interleave_block(subs, vals[:9], None, 0, 9, 0, hs[:9], hv[:9], 1)


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.float64])
def test_take_rows_is_numpys(dtype):
    rng = np.random.default_rng(4)
    src = rng.integers(-50, 50, (3000, 3)).astype(dtype)
    for order in (rng.integers(0, 3000, 5000), np.arange(3000)[::-1], np.zeros(0, np.int64)):
        order = np.ascontiguousarray(order, dtype=np.int64)
        for threads in (1, 3):
            out = np.full((order.size, 3), 7, dtype=dtype)
            _hostcopy.take_rows(src, order, out, threads)
            assert np.array_equal(out, src[order])
    col = src[:, :1].copy()
    out = np.empty((10, 1), dtype=dtype)
    _hostcopy.take_rows(col, np.arange(10, dtype=np.int64), out, 2)
    assert np.array_equal(out, col[:10])
    with pytest.raises(ValueError, match="outside the source"):
        _hostcopy.take_rows(src, np.array([0, 3000], dtype=np.int64), np.empty((2, 3), dtype), 2)
    with pytest.raises(ValueError, match="the output is"):
        _hostcopy.take_rows(src, np.array([0, 1], dtype=np.int64), np.empty((3, 3), dtype), 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_sumsq_has_numpys_bits(dtype):
    """The squares added row after row: the bits of np.linalg.norm(f, axis=0) ** 2 before its
    root (a pairwise or reordered sum differs in the last bits at this length)."""
    rng = np.random.default_rng(3)
    f = (rng.standard_normal((20011, 7)) * np.logspace(-3, 3, 7)).astype(dtype)
    out = np.full(7, np.nan, dtype=dtype)
    _hostcopy.column_sumsq(f, out)
    assert np.sqrt(out).tobytes() == np.linalg.norm(f, axis=0).tobytes()
    with pytest.raises(ValueError, match="7 columns, 6 outputs"):
        _hostcopy.column_sumsq(f, out[:6])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_argmax_abs_is_numpys(dtype):
    rng = np.random.default_rng(4)
    f = np.round(rng.standard_normal((3001, 9)), 1).astype(dtype)   # many ties
    f[:, 0] = 0.0                                       # all equal: row 0
    f[[5, 9], 1] = np.nan                               # the first NaN wins
    f[0, 2] = np.nan
    f[[7, 100], 3], f[50, 3] = -50, 50                  # ties of magnitude, either sign
    f[-1, 4] = -1e6                                     # the last row
    idx = np.full(9, -1, dtype=np.int64)
    _hostcopy.column_argmax_abs(f, idx)
    np.testing.assert_array_equal(idx, np.argmax(np.abs(f), axis=0))
    assert idx[1] == 5 and idx[2] == 0 and idx[3] == 7 and idx[4] == 3000
    with pytest.raises(ValueError, match="9 columns, 8 outputs"):
        _hostcopy.column_argmax_abs(f, idx[:8])
    empty = np.empty((0, 3), dtype=dtype)
    idx = np.full(3, -1, dtype=np.int64)
    _hostcopy.column_argmax_abs(empty, idx)   # NumPy refuses an empty argmax; here rows 0
    np.testing.assert_array_equal(idx, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 3, 4])
def test_arrange_columns_is_numpys_take_divide_and_argmax(dtype, threads):
    """The normal form's pass: NumPy's bits for any thread count, the first of tied peaks even
    when a later block of rows holds an equal one, the first NaN even in a later block."""
    rng = np.random.default_rng(6)
    I, C = 20000, 6
    f = np.round(rng.standard_normal((I, C)), 1).astype(dtype)
    f[[100, 15000], 1] = 9.0                    # tie across blocks: row 100
    f[[19000], 2], f[[300], 2] = -9.5, 9.5      # tie of magnitude, either sign: row 300
    f[17000, 3], f[18000, 3] = np.nan, np.nan   # NaN only in a late block: row 17000
    f[:, 4] = 0.0
    order = np.array([3, 0, 5, 1, 2, 4, 1], dtype=np.int64)   # a column taken twice
    scale = (rng.random(7) + 0.5).astype(dtype)
    negate = np.array([0, 1, 0, 0, 1, 0, 1], dtype=np.uint8)
    out = np.full((I, 7), np.nan, dtype=dtype)
    idx = np.full(7, -1, dtype=np.int64)
    _hostcopy.arrange_columns(f, order, scale, negate, out, idx, threads)
    want = np.take(f, order, axis=1)
    np.divide(want, scale, out=want)
    want[:, negate.astype(bool)] *= -1
    assert out.tobytes() == want.tobytes()
    np.testing.assert_array_equal(idx, np.argmax(np.abs(want), axis=0))
    assert idx[6] == 100 and idx[4] == 300 and idx[0] == 17000 and idx[5] == 0
    with pytest.raises(ValueError, match="column 6 of a matrix of 6"):
        _hostcopy.arrange_columns(f, order + 1, scale, negate, out, idx, threads)
    with pytest.raises(ValueError, match="shapes"):
        _hostcopy.arrange_columns(f, order, scale[:6], negate, out, idx, threads)
