"""Property-based tests of the data layer: the SparseTensor constructor, the ``.tns`` parser and
save -> load round trips, model files of save_model (bit flips, truncation, crafted JSON and
arrays) and SparseTensor.from_dataframe, on arbitrary input.

Every input either gives a tensor that keeps the invariants the kernels rely on (sorted, unique,
in range, finite, nonzero, read-only) and the right content, or a ValueError / TypeError (naming
the file and line for the parser) -- never another exception.  Files of the binary container
with flipped bits, cut short or with crafted (and signed) headers give the tensor saved or a
ValueError / OSError naming the file; so does a damaged model file (the saved model or an
error).  The example counts keep the module to a few seconds; set SKTENSOR_FUZZ_EXAMPLES
(e.g. 5000) for a deeper search.
"""
import gzip
import io
import math
import os
import warnings
from unittest import mock

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from sktensor_fast import io as tns_io  # noqa: E402
from sktensor_fast.io import load_tns, save_tns  # noqa: E402
from sktensor_fast.tensor import SparseTensor  # noqa: E402

FUZZ = settings(max_examples=int(os.environ.get("SKTENSOR_FUZZ_EXAMPLES", 150)), deadline=None,
                derandomize="SKTENSOR_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
INT64_MAX = 2 ** 63 - 1


def assert_invariants(X):
    assert isinstance(X.shape, tuple) and len(X.shape) >= 1
    assert all(type(s) is int and 1 <= s <= INT64_MAX for s in X.shape)
    assert X.subs.dtype == np.int64 and X.subs.shape == (X.nnz, X.ndim)
    assert X.vals.dtype in (np.float32, np.float64) and X.vals.shape == (X.nnz,)
    assert not X.subs.flags.writeable and not X.vals.flags.writeable
    assert X.subs.flags.c_contiguous and X.vals.flags.c_contiguous
    if X.nnz:
        assert X.subs.min() >= 0
        assert all(int(m) < s for m, s in zip(X.subs.max(axis=0), X.shape))
        assert np.all(np.isfinite(X.vals)) and np.all(X.vals != 0)
        keys = [tuple(r) for r in X.subs.tolist()]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)


def grouped(subs, vals):
    """Values of every coordinate, in input order."""
    groups = {}
    for key, v in zip(map(tuple, subs), vals):
        groups.setdefault(key, []).append(v)
    return groups


# ------------------------------------------------------------------------- (a) constructor
_ELEMENTS = {
    "i": st.integers(-3, 9) | st.sampled_from([2 ** 62, INT64_MAX, -2 ** 63]),
    "u": st.integers(0, 9) | st.sampled_from([2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1]),
    "f": st.integers(-2, 9).map(float) | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.5, 1e20, 2.0 ** 63, -0.0, 1e-300, 3.5e38, 1e308]),
    "b": st.booleans(),
}


def numeric_array(shape, kinds):
    def build(dtype):
        return hnp.arrays(dtype, shape, elements=_ELEMENTS[dtype.kind].filter(
            lambda x, dt=dtype: _fits(x, dt)))
    return st.sampled_from(kinds).map(np.dtype).flatmap(build)


def _fits(x, dtype):
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min <= x <= info.max
    if dtype.kind == "f" and dtype.itemsize < 8 and math.isfinite(x):
        return abs(x) <= float(np.finfo(dtype).max)
    return True


@st.composite
def junk_inputs(draw):
    nnz = draw(st.integers(0, 6))
    ndim = draw(st.integers(0, 4))
    subs_shape = draw(st.sampled_from([(nnz, ndim), (nnz + 1, ndim), (nnz,), (nnz, ndim, 1)]))
    kind = draw(st.sampled_from(["num", "object", "str", "list"]))
    if kind == "num":
        subs = draw(numeric_array(subs_shape, ["int8", "int64", "uint64", "float32", "float64",
                                               "bool"]))
    elif kind == "object":
        subs = np.array(draw(st.lists(st.integers(-2, 2 ** 70) | st.none(), min_size=nnz * ndim,
                                      max_size=nnz * ndim)), dtype=object)
        subs = subs.reshape(nnz, ndim) if subs.size or ndim else subs
    elif kind == "str":
        subs = np.full(subs_shape, "1")
    else:
        subs = draw(st.lists(st.lists(st.integers(-1, 5), min_size=ndim, max_size=ndim),
                             min_size=nnz, max_size=nnz))
    vals_n = draw(st.sampled_from([nnz, nnz, nnz + 1, max(nnz - 1, 0)]))
    vkind = draw(st.sampled_from(["num", "num", "object", "complex", "str", "2d"]))
    if vkind == "num":
        vals = draw(numeric_array((vals_n,), ["int64", "uint64", "float16", "float32",
                                              "float64", "bool"]))
    elif vkind == "object":
        vals = np.array(draw(st.lists(st.integers(-10, 10) | st.sampled_from([10 ** 400, None]),
                                      min_size=vals_n, max_size=vals_n)), dtype=object)
    elif vkind == "complex":
        vals = np.ones(vals_n, complex)
    elif vkind == "str":
        vals = np.array(draw(st.lists(st.sampled_from(["1", "x", "1e400"]), min_size=vals_n,
                                      max_size=vals_n)), dtype=str)
    else:
        vals = np.ones((vals_n, draw(st.integers(1, 2))))
    length = st.integers(-1, 12) | st.sampled_from([2 ** 63 - 1, 2 ** 63, 2 ** 70])
    shape = draw(st.none() | st.lists(length, min_size=0, max_size=5).map(tuple)
                 | length | st.sampled_from([(2.0, 3.0), (2.5, 3), (True, 2), "ab", (np.nan, 1),
                                             (np.inf, 1)]))
    dtype = draw(st.sampled_from([None, np.float32, np.float64, np.int64, "junk"]))
    return subs, vals, shape, dtype, draw(st.booleans()), draw(st.booleans())


@FUZZ
@given(junk_inputs())
def test_constructor_on_arbitrary_input(args):
    subs, vals, shape, dtype, copy, sum_duplicates = args
    subs_before = np.array(subs, copy=True) if isinstance(subs, np.ndarray) else None
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no unchecked overflow or invalid cast
        warnings.simplefilter("ignore", UserWarning)  # values rounding to 0 in float32
        try:
            X = SparseTensor(subs, vals, shape, dtype=dtype, copy=copy,
                             sum_duplicates=sum_duplicates)
        except (ValueError, TypeError) as exc:
            assert str(exc)
            return
    assert_invariants(X)
    if subs_before is not None:  # the caller's arrays are never changed
        assert np.array_equal(subs, subs_before, equal_nan=subs.dtype.kind == "f")
        assert subs.flags.writeable
    # the content: every coordinate given, with the sum of its values
    given_subs = np.asarray(subs).reshape(-1, X.ndim).astype(np.int64)
    v = np.asarray(vals).reshape(-1)
    if v.dtype.kind not in "iufb":
        v = v.astype(np.float64)
    v = v.astype(X.dtype)
    groups = grouped(given_subs.tolist(), v.astype(np.float64).tolist())
    got = dict(zip(map(tuple, X.subs.tolist()), X.vals.tolist()))
    assert set(got) <= set(groups)
    eps = float(np.finfo(X.dtype).eps)
    for key, parts in groups.items():
        assert abs(got.get(key, 0.0) - math.fsum(parts)) <= 8 * eps * math.fsum(map(abs, parts))


@st.composite
def valid_inputs(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4) | st.sampled_from([2 ** 40, INT64_MAX]),
                                min_size=ndim, max_size=ndim)))
    nnz = draw(st.integers(0, 12))
    subs = [[draw(st.integers(0, min(s, 3) - 1) | st.just(s - 1)) for s in shape]
            for _ in range(nnz)]
    vals = draw(st.lists(st.integers(-5, 5), min_size=nnz, max_size=nnz))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    return np.array(subs, dtype=np.int64).reshape(nnz, ndim), np.array(vals, dtype), shape


@FUZZ
@given(valid_inputs())
def test_constructor_on_valid_input(args):
    subs, vals, shape = args
    X = SparseTensor(subs, vals, shape)
    assert_invariants(X)
    assert X.shape == shape and X.dtype == vals.dtype
    expected = {k: sum(p) for k, p in grouped(subs.tolist(), vals.tolist()).items()}
    assert dict(zip(map(tuple, X.subs.tolist()), X.vals.tolist())) == {
        k: v for k, v in expected.items() if v != 0}


# ------------------------------------------------------------------------- (b) .tns parser
_WS = [b" ", b"  ", b"\t", b"\x0b", b"\x0c", b"\r", b" \t "]
_ODD_TOKENS = [b"nan", b"inf", b"-inf", b"Infinity", b"1e400", b"-1e400", b"1e-400", b"0", b"-0",
               b"+1", b"1.", b".5", b"1e3", b"1.5e1", b"0x10", b"1_0", b"#", b"abc", b"--1",
               b"3.4028235e38", b"3.40282357e38", b"1e-46", b"-1e-50", b"1.7976931348623157e308",
               b"99999999999999999999", b"9223372036854775807", b"9223372036854775808",
               b"00000000000000000001", b"1.0000000000000001", b"\xff", b"\xc3\xa9", b"1\x00",
               b"\xef\xbb\xbf1", b"nan(1)", b"1e", b"+", b".", b"1,5", b"12345678901234567.5"]
_small = st.integers(0, 4).map(lambda i: b"%d" % i)
_value = (st.integers(-3, 3).map(lambda i: b"%d" % i)
          | st.floats(allow_nan=False, allow_infinity=False).map(lambda x: repr(x).encode())
          | st.floats(-1e6, 1e6).map(lambda x: b"%.4f" % x)
          | st.floats(-1e6, 1e6).map(lambda x: b"%.3e" % x))
_token = _small | _value | st.sampled_from(_ODD_TOKENS) | st.integers(0, 2 ** 64).map(
    lambda i: b"%d" % i)


@st.composite
def tns_texts(draw):
    """Mostly well-formed files (so that the success path is exercised), with damage."""
    ncols = draw(st.integers(1, 4))
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["data"] * 6 + ["blank", "comment", "junk", "short"]))
        if kind == "data":
            toks = [draw(_small) for _ in range(ncols - 1)] + [draw(_value)]
            if draw(st.integers(0, 9)) == 0:  # damage one token
                toks[draw(st.integers(0, ncols - 1))] = draw(_token)
        elif kind == "blank":
            lines.append(draw(st.sampled_from([b"", b" ", b"\t\r", b" " * 40])))
            continue
        elif kind == "comment":
            lines.append(draw(st.sampled_from([b"", b"  "])) + b"#" + draw(st.binary(max_size=8)
                                                                          ).replace(b"\n", b""))
            continue
        elif kind == "junk":
            toks = draw(st.lists(_token, min_size=1, max_size=ncols + 1))
        else:
            toks = [draw(_small) for _ in range(max(ncols - 1, 1))]
        seps = [draw(st.sampled_from(_WS)) for _ in toks]
        line = draw(st.sampled_from([b"", b" ", b"\t"]))
        line += b"".join(t + s for t, s in zip(toks, seps))[:-len(seps[-1])]
        lines.append(line + draw(st.sampled_from([b"", b" ", b"\r"])))
    text = b"\n".join(lines) + draw(st.sampled_from([b"", b"\n"]))
    if draw(st.integers(0, 9)) == 0:
        text = b"\xef\xbb\xbf" + text
    return text, ncols


def _ref_int(tok):
    if b"_" in tok:
        return None
    try:
        s = tok.decode("ascii")
    except UnicodeDecodeError:
        return None
    try:
        return int(s)
    except ValueError:
        pass
    try:
        f = float(s)
    except ValueError:
        return None
    return int(f) if math.isfinite(f) and f.is_integer() else None


def _ref_float(tok):
    if b"_" in tok:
        return None
    try:
        return float(tok.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


def reference_load(text, shape, index_base, dtype, max_line_length, max_modes):
    """Slow, obvious reading of the format.

    Returns ``("line", n)`` for the first bad line, ``("empty",)`` for a file without
    nonzeros, or ``("ok", groups, shape, underflows, overflow)``: the values of every
    coordinate, and whether their sum may (None) or must (True) exceed the dtype's range.
    """
    if text.startswith(b"\xef\xbb\xbf"):
        text = text[3:]
    lines = text.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    ncols = None
    rows = []
    underflows = 0
    big = float(np.finfo(dtype).max)
    for n, line in enumerate(lines, 1):
        if max_line_length is not None and len(line) > max_line_length:
            return ("line", n)
        toks = line.split()
        if not toks or toks[0].startswith(b"#"):
            continue
        if ncols is None:
            ncols = len(toks)
            if ncols < 2 or (max_modes is not None and ncols - 1 > max_modes) or (
                    shape is not None and ncols - 1 != len(shape)):
                return ("line", n)
        if len(toks) != ncols:
            return ("line", n)
        coords = []
        for k, tok in enumerate(toks[:-1]):
            c = _ref_int(tok)
            if c is None or c < index_base or c - index_base >= INT64_MAX:
                return ("line", n)
            c -= index_base
            if shape is not None and c >= shape[k]:
                return ("line", n)
            coords.append(c)
        v = _ref_float(toks[-1])
        if v is None or not math.isfinite(v):
            return ("line", n)
        with np.errstate(over="ignore", under="ignore"):
            w = float(np.array(v, dtype=dtype))
        if not math.isfinite(w):
            return ("line", n)
        underflows += w == 0 and v != 0
        rows.append((tuple(coords), w))
    if ncols is None and shape is None:
        return ("empty",)
    groups = {}
    for key, w in rows:
        groups.setdefault(key, []).append(w)
    if shape is None:
        shape = tuple(max(key[k] for key in groups) + 1 for k in range(ncols - 1))
    overflow = False
    for parts in groups.values():
        if abs(math.fsum(parts)) > big:
            overflow = True
        elif math.fsum(map(abs, parts)) > big and overflow is False:
            overflow = None  # some order of summation may overflow
    return ("ok", groups, shape, underflows, overflow)


class NamedBytes(io.BytesIO):
    name = "fuzz.tns"


@FUZZ
@given(tns_texts(), st.data())
def test_parser_on_arbitrary_text(case, data):
    text, ncols = case
    shape = data.draw(st.none() | st.just(tuple([3] * max(ncols - 1, 1))), "shape")
    index_base = data.draw(st.sampled_from([1, 1, 0]), "index_base")
    dtype = data.draw(st.sampled_from([np.float64, np.float32]), "dtype")
    max_line_length = data.draw(st.sampled_from([tns_io.MAX_LINE_LENGTH, None, 12, 30]),
                                "max_line_length")
    max_modes = data.draw(st.sampled_from([64, 2, None]), "max_modes")
    block = data.draw(st.sampled_from([1 << 24, 5, 17]), "block")
    packed = gzip.compress(text) if data.draw(st.booleans(), "gzip") else text
    expected = reference_load(text, shape, index_base, dtype, max_line_length, max_modes)
    with mock.patch.object(tns_io, "_BLOCK_BYTES", block), warnings.catch_warnings(record=True) \
            as caught:
        warnings.simplefilter("always")
        try:
            X = load_tns(NamedBytes(packed), shape, index_base=index_base, dtype=dtype,
                         max_line_length=max_line_length, max_modes=max_modes)
        except ValueError as exc:
            msg = str(exc)
            if expected[0] == "line":
                assert msg.startswith(f"fuzz.tns, line {expected[1]}: "), (msg, expected)
            elif expected[0] == "empty":
                assert msg.startswith("fuzz.tns holds no nonzeros"), msg
            else:
                assert expected[4] is not False, (msg, expected)  # only an overflowing sum
                assert msg.startswith("fuzz.tns: the values repeated at coordinate"), msg
            return
    assert expected[0] == "ok", expected
    _, groups, ref_shape, underflows, overflow = expected
    assert overflow is not True
    assert_invariants(X)
    assert X.shape == ref_shape and X.dtype == dtype
    got = dict(zip(map(tuple, X.subs.tolist()), X.vals.tolist()))
    assert set(got) <= set(groups)
    eps = float(np.finfo(dtype).eps)
    for key, parts in groups.items():
        assert abs(got.get(key, 0.0) - math.fsum(parts)) <= 8 * eps * math.fsum(map(abs, parts))
    warned = [w for w in caught if "round to 0" in str(w.message)]
    if underflows:
        assert len(warned) == 1 and str(warned[0].message).startswith(
            f"fuzz.tns: {underflows} value(s) too small for float32")
    else:
        assert not warned
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]


# ------------------------------------------------------------------------- (c) round trips
_f64 = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True).filter(bool)
_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False).filter(bool)


@st.composite
def valid_tensors(draw):
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 6) | st.integers(1, INT64_MAX),
                                min_size=ndim, max_size=ndim)))
    # distinct coordinates: summing repeated extreme values could overflow
    subs = draw(st.lists(st.tuples(*[st.integers(0, s - 1) for s in shape]), max_size=20,
                         unique=True))
    nnz = len(subs)
    values = _f64 if dtype == np.float64 else _f32
    if draw(st.booleans()):
        values = st.integers(-1000, 1000).filter(bool).map(float) | values
    vals = draw(st.lists(values, min_size=nnz, max_size=nnz))
    return SparseTensor(np.array(subs, np.int64).reshape(nnz, ndim),
                        np.array(vals, dtype=dtype), shape, sum_duplicates=True)


@FUZZ
@given(valid_tensors(), st.sampled_from(["stream", "x.tns", "x.tns.gz"]))
def test_save_load_round_trip_is_exact(tmp_path_factory, X, where):
    if where == "stream":
        buf = io.BytesIO()
        save_tns(buf, X)
        src = io.BytesIO(buf.getvalue())
    else:
        src = tmp_path_factory.mktemp("rt") / where
        save_tns(src, X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Y = load_tns(src, shape=X.shape, dtype=X.dtype)
    assert_invariants(Y)
    assert Y == X and Y.dtype == X.dtype
    assert np.array_equal(Y.vals.view(np.uint8), X.vals.view(np.uint8))  # bit for bit
    if X.nnz and where == "stream":
        # without `shape` the largest coordinates give the mode lengths
        Z = load_tns(io.BytesIO(buf.getvalue()), dtype=X.dtype)
        assert Z.shape == tuple(int(m) + 1 for m in X.subs.max(axis=0))
        assert np.array_equal(Z.subs, X.subs) and np.array_equal(Z.vals, X.vals)


# ------------------------------------------------------------------ (d) the binary container
_LABEL = st.text(max_size=4)


@st.composite
def saved_tensors(draw):
    """A valid tensor, with labels and mode names or not, and the bytes save_tensor wrote."""
    X = draw(valid_tensors())
    labels = mode_names = None
    if draw(st.booleans()):
        labels = [draw(st.none() | st.lists(_LABEL, min_size=min(s, 4), max_size=min(s, 4)))
                  if s <= 4 else None for s in X.shape]
        mode_names = draw(st.none() | st.lists(_LABEL, min_size=X.ndim, max_size=X.ndim))
    return X, labels, mode_names


def _container_file(tmp_path_factory, case):
    from sktensor_fast.binary import save_tensor
    X, labels, mode_names = case
    path = tmp_path_factory.mktemp("sktf") / "x.sktf"
    save_tensor(path, X, labels=labels, mode_names=mode_names)
    return path, path.read_bytes()


def _load_identical_or_refused(path, case, mmap):
    """Load ``path``: the tensor saved (bit for bit, with its labels and mode names), or a
    ValueError / OSError naming the file."""
    from sktensor_fast.binary import load_tensor
    X, labels, mode_names = case
    try:
        Y, got = load_tensor(path, mmap=mmap, with_labels=True)
    except (ValueError, OSError) as exc:
        assert str(path) in str(exc), exc
        return None
    assert_invariants(Y)
    assert Y.shape == X.shape and Y.dtype == X.dtype
    assert np.array_equal(Y.subs, X.subs)
    assert np.array_equal(Y.vals.view(np.uint8), X.vals.view(np.uint8))
    assert got == (labels or [None] * X.ndim) and Y.mode_names == mode_names
    return Y


# a file a case: a third of the examples of the other tests keeps the section to a few seconds
CONTAINER_FUZZ = settings(FUZZ, max_examples=max(1, FUZZ.max_examples // 3))


@CONTAINER_FUZZ
@given(saved_tensors(), st.lists(st.integers(0, 2 ** 40), min_size=1, max_size=3),
       st.booleans())
def test_container_round_trip_and_bit_flips(tmp_path_factory, case, bits, mmap):
    path, raw = _container_file(tmp_path_factory, case)
    assert _load_identical_or_refused(path, case, mmap) is not None      # the round trip
    flipped = bytearray(raw)
    for bit in bits:
        bit %= 8 * len(raw)
        flipped[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(flipped))
    _load_identical_or_refused(path, case, mmap)


@CONTAINER_FUZZ
@given(saved_tensors(), st.integers(0, 2 ** 40), st.booleans())
def test_container_truncated(tmp_path_factory, case, cut, mmap):
    path, raw = _container_file(tmp_path_factory, case)
    path.write_bytes(raw[:cut % len(raw)])
    assert _load_identical_or_refused(path, case, mmap) is None


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats() | st.text(max_size=4)
    | st.integers(-2 ** 70, 2 ** 70)
    | st.sampled_from([0, 1, -1, 2, 3, 24, 64, 4096, 4160, 2 ** 22, 2 ** 31, 2 ** 32, 2 ** 63,
                       2 ** 64, "<f8", "<f4", "<i8", "|b1"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=6)


def _places(obj, at=()):
    """Every place in a JSON document: the path of keys and indices to it."""
    yield at
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _places(v, at + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _places(v, at + (i,))


@CONTAINER_FUZZ
@given(saved_tensors(), st.data(), st.booleans())
def test_container_crafted_headers(tmp_path_factory, case, data, mmap):
    # a header edited and signed again: only the checks of its content stand between it and
    # the kernels.  A header that still describes a tensor in the file may load (with the
    # shape or names it now says); anything else is one ValueError / OSError naming the file.
    from _container import split, with_header
    from sktensor_fast.binary import load_tensor
    path, raw = _container_file(tmp_path_factory, case)
    version, meta, raw = split(raw)
    for _ in range(data.draw(st.integers(1, 3))):
        places = list(_places(meta))
        at = data.draw(st.sampled_from(places))
        new = data.draw(_JSON_VALUES | st.integers(-3, 3).map(
            lambda d, at=at: _get(meta, at) + d if type(_get(meta, at)) is int else None))
        if not at:
            meta = new
            continue
        parent = _get(meta, at[:-1])
        if data.draw(st.booleans()) and isinstance(parent, dict):
            parent.pop(at[-1])
        else:
            parent[at[-1]] = new
    version = data.draw(st.sampled_from([version, version, 1, 2, 3, 0, 2 ** 32 - 1]))
    path.write_bytes(with_header(raw, meta, version=version))
    try:
        Y = load_tensor(path, mmap=mmap, with_labels=True)[0]
    except (ValueError, OSError) as exc:
        assert str(path) in str(exc), exc
        return
    assert_invariants(Y)
    assert list(Y.shape) == meta["shape"] and Y.nnz == meta["nnz"]


def _get(obj, at):
    for k in at:
        obj = obj[k]
    return obj


# ------------------------------------------------------------------------- (e) model files
def _model_bases(tmp_dir):
    """A few model files written by save_model (CPALS; GCP with a stored mask and a loss
    object; CPAPR with labels): (path, fitted estimator, a tensor of its shape)."""
    from sktensor_fast import CPALS, CPAPR, GCP, save_model
    from sktensor_fast.decomposition.losses import get_loss
    rng = np.random.default_rng(0)
    D = rng.poisson(1.5, (4, 3, 2)).astype(float)
    X = SparseTensor.from_dense(D)
    mask = np.ones(D.shape, dtype=bool)
    mask[0, 0] = False
    models = [CPALS(rank=2, random_state=0, max_iter=3),
              GCP(rank=2, loss=get_loss("huber", 0.5), mask=mask, solver="lbfgsb",
                  random_state=0, max_iter=3),
              CPAPR(rank=2, random_state=0, max_iter=3)]
    out = []
    for k, est in enumerate(models):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X)
        labels = [[f"i{j}" for j in range(s)] for s in X.shape] if k == 2 else None
        path = save_model(est, os.path.join(tmp_dir, f"base{k}.npz"), labels=labels,
                          mode_names=["a", "b", "c"] if k == 2 else None)
        out.append((path, est, X))
    return out


@pytest.fixture(scope="module")
def model_bases(tmp_path_factory):
    return _model_bases(str(tmp_path_factory.mktemp("models")))


def _same_model(a, b):
    assert type(a) is type(b)
    assert np.array_equal(a.weights_, b.weights_)
    assert all(np.array_equal(x, y) for x, y in zip(a.factors_, b.factors_))
    assert a.tensor_shape_ == b.tensor_shape_


def _load_or_refuse(path):
    """load_model's answer: the estimator, or None after a ValueError / OSError naming the
    file (anything else fails the test)."""
    from sktensor_fast import load_model
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return load_model(path)
    except (ValueError, OSError) as exc:
        assert os.path.basename(path) in str(exc), exc
        assert "pickle" not in str(exc).lower(), exc
        return None


@FUZZ
@given(st.integers(0, 2), st.lists(st.tuples(st.floats(0, 1, exclude_max=True),
                                             st.integers(0, 7)), min_size=1, max_size=4),
       st.floats(0, 1) | st.none())
def test_model_file_with_flipped_bits_or_cut(model_bases, tmp_path_factory, which, flips, cut):
    """A damaged model file loads as the saved model (a flip where nothing is read) or is a
    ValueError / OSError naming the file: never another model, never another exception."""
    path, est, X = model_bases[which]
    data = bytearray(open(path, "rb").read())
    for where, bit in flips:
        data[int(where * len(data))] ^= 1 << bit
    if cut is not None:
        data = data[:int(cut * len(data))]
    bad = str(tmp_path_factory.mktemp("flip") / "damaged.npz")
    with open(bad, "wb") as f:
        f.write(bytes(data))
    again = _load_or_refuse(bad)
    if again is not None:
        _same_model(again, est)
        assert again.get_params()["rank"] == est.get_params()["rank"]
        np.testing.assert_array_equal(again.transform(X), est.transform(X))


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10 ** 12) | st.floats()
    | st.text(max_size=4) | st.sampled_from(["gaussian", "huber", "mask", "float", "nan"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=4) | st.sampled_from(["float", "builtin_loss", "user_loss", "mask"]),
        inner, max_size=3),
    max_leaves=6)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


@FUZZ
@given(st.integers(0, 2), st.data())
def test_model_file_with_crafted_json(model_bases, tmp_path_factory, which, data):
    """Any JSON document in place of the saved one: a model whose arrays agree with what the
    document says, or a ValueError naming the file."""
    import json
    path, est, X = model_bases[which]
    with np.load(path, allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    meta = json.loads(str(entries["meta"]))
    target = data.draw(st.sampled_from(sorted(_paths(meta), key=repr)))
    value = data.draw(_json)
    if not target:
        meta = value
    else:
        parent = meta
        for k in target[:-1]:
            parent = parent[k]
        if isinstance(parent, dict) and data.draw(st.booleans()):
            del parent[target[-1]]
        else:
            parent[target[-1]] = value
    entries["meta"] = np.array(json.dumps(meta))
    bad = str(tmp_path_factory.mktemp("json") / "crafted.npz")
    np.savez(bad, **entries)
    again = _load_or_refuse(bad)
    if again is not None:
        shape = again.tensor_shape_
        R = again.get_params()["rank"]
        assert isinstance(shape, tuple) and all(type(s) is int and s >= 1 for s in shape)
        assert [f.shape for f in again.factors_] == [(s, R) for s in shape]
        assert again.weights_.shape == (R,)
        for f in [again.weights_, *again.factors_]:
            assert f.dtype == np.float64 and np.all(np.isfinite(f))
        labels = again.labels_
        assert labels is None or all(lab is None or len(lab) == s
                                     for lab, s in zip(labels, shape))
        again._validate_params()


@FUZZ
@given(st.integers(0, 2), st.sampled_from(["factor_0", "factor_1", "weights", "loss_history",
                                           "mask", "meta"]),
       hnp.arrays(st.sampled_from([np.float64, np.float32, np.int64, np.bool_, np.dtype("<U3"),
                                   np.dtype(">f8"), np.complex128]),
                  hnp.array_shapes(min_dims=0, max_dims=3, max_side=5)))
def test_model_file_with_other_arrays(model_bases, tmp_path_factory, which, name, array):
    path, est, X = model_bases[which]
    with np.load(path, allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    entries[name] = array
    bad = str(tmp_path_factory.mktemp("arrays") / "other.npz")
    np.savez(bad, **entries)
    again = _load_or_refuse(bad)
    if again is not None:
        R = est.get_params()["rank"]
        assert [f.shape for f in again.factors_] == [(s, R) for s in est.tensor_shape_]
        assert again.weights_.shape == (R,) and again.loss_history_.ndim == 1


# ------------------------------------------------------------------------- (f) from_dataframe
_columns = {
    "int": st.lists(st.integers(-3, 3), min_size=0, max_size=6),
    "float": st.lists(st.sampled_from([0.5, 1.0, -2.0, np.nan, np.inf]), max_size=6),
    "str": st.lists(st.sampled_from(["a", "b", "c", None]), max_size=6),
    "bool": st.lists(st.booleans(), max_size=6),
    "complex": st.lists(st.sampled_from([1 + 1j, 2 + 0j, 0j]), max_size=6),
    "mixed": st.lists(st.sampled_from([1, "x", 2.5, None]), max_size=6),
    "list": st.lists(st.just([1]), max_size=6),
}


@st.composite
def frames(draw):
    pd = pytest.importorskip("pandas")
    n = draw(st.integers(0, 6))
    kinds = draw(st.lists(st.sampled_from(sorted(_columns)), min_size=1, max_size=4))
    cols, names = [], []
    for k in kinds:
        vals = draw(_columns[k].filter(lambda v: True))
        vals = (vals * (n // max(len(vals), 1) + 1))[:n] if vals else [None] * n
        if k == "str" and draw(st.booleans()):
            vals = pd.Categorical(vals, categories=["c", "a", "b", "z"])
        cols.append(vals)
        names.append(draw(st.sampled_from(["p", "q", "r", "s"])))   # names may repeat
    df = pd.DataFrame(dict(enumerate(cols)))
    df.columns = names
    modes = draw(st.lists(st.sampled_from(names + ["nope"]), min_size=1, max_size=3))
    values = draw(st.none() | st.sampled_from(names))
    return df, modes, values


@FUZZ
@given(frames())
def test_from_dataframe_on_arbitrary_frames(case):
    """A counted (summed) tensor whose labels give its shape, or a ValueError / TypeError."""
    df, modes, values = case
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            X, labels = SparseTensor.from_dataframe(df, modes, values=values)
    except (ValueError, TypeError) as exc:
        assert str(exc)
        return
    assert_invariants(X)
    assert X.shape == tuple(len(lab) for lab in labels) and X.mode_names == list(modes)
    complete = df[modes].notna().all(axis=1).to_numpy()
    assert complete.any()
    if values is None:
        assert X.vals.sum() == complete.sum()          # every complete row counted once
    else:
        assert not np.iscomplexobj(X.vals)
        expect = df[values].to_numpy()[complete].astype(np.float64).sum()
        assert np.isclose(X.vals.sum(), expect)
