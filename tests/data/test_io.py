import gzip
import io
import time

import numpy as np
import pytest

from sktensor_fast import io as tns_io
from sktensor_fast.io import load_tns, read_labels, save_tns, write_labels
from sktensor_fast.tensor import SparseTensor


def random_tensor(shape=(5, 7, 3), nnz=40, seed=0, integral=False):
    rng = np.random.default_rng(seed)
    subs = np.column_stack([rng.integers(0, s, nnz) for s in shape])
    vals = rng.integers(1, 50, nnz).astype(float) if integral else rng.standard_normal(nnz)
    return SparseTensor(subs, vals, shape)


def load_text(text, **kwargs):
    return load_tns(io.BytesIO(text.encode()), **kwargs)


def reference_parse(text, index_base=1):
    """Slow, obvious parser used to check the vectorised one."""
    subs, vals = [], []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        *coords, value = line.split()
        subs.append([int(c) - index_base for c in coords])
        vals.append(float(value))
    return np.array(subs, dtype=np.int64), np.array(vals)


# ---------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("name", ["x.tns", "x.tns.gz", "x.tns.bz2", "x.tns.xz"])
@pytest.mark.parametrize("integral", [False, True])
def test_roundtrip(tmp_path, name, integral):
    X = random_tensor(integral=integral)
    path = tmp_path / name
    save_tns(path, X)
    Y = load_tns(path, shape=X.shape)
    assert Y == X  # exact: values are written with round-trip precision
    if name.endswith(".gz"):
        assert path.read_bytes()[:2] == b"\x1f\x8b"
        text = gzip.decompress(path.read_bytes()).decode()
    elif name.endswith(".tns"):
        text = path.read_text()
    else:
        return
    assert len(text.splitlines()) == X.nnz
    if integral:
        assert "." not in text


def test_roundtrip_str_path_and_stream(tmp_path):
    X = random_tensor(seed=1)
    save_tns(str(tmp_path / "a.tns"), X)
    assert load_tns(str(tmp_path / "a.tns"), shape=X.shape) == X
    buf = io.BytesIO()
    save_tns(buf, X)
    assert load_tns(io.BytesIO(buf.getvalue()), shape=X.shape) == X


def test_open_text_of_a_file_object_inflates_what_is_compressed():
    import bz2
    import lzma
    from sktensor_fast._native import text
    data = b"1 2 3 1.5\n2 2 2 2.5\n"
    for packer in (bytes, gzip.compress, bz2.compress, lzma.compress):
        stream, name, size, exact = text.open_text(io.BytesIO(packer(data)))
        assert stream.read() == data and (size, exact) == (len(data), True)


def test_utf8_bom_of_a_file_skipped(tmp_path):
    """A byte-order mark opening a file is skipped, not the first coordinate's digits."""
    path = tmp_path / "bom.tns"
    path.write_bytes(b"\xef\xbb\xbf12 1 1 1.5\n3 2 2 2.5\n")
    for src in (path, str(path), io.BytesIO(path.read_bytes())):
        X = load_tns(src)
        assert X.subs.tolist() == [[2, 1, 1], [11, 0, 0]] and X.vals.tolist() == [2.5, 1.5]


@pytest.mark.parametrize("name", ["", "a/b", "a\\b", "a\nb", " a", "a "])
def test_write_labels_refuses_names_unfit_for_a_file_name(tmp_path, name):
    with pytest.raises(ValueError, match="cannot be used in a file name"):
        write_labels(tmp_path, [["x"]], names=[name])
    assert list(tmp_path.iterdir()) == []


def test_stream_longer_than_one_read(monkeypatch):
    """A file object read in many blocks, more than its first read ahead (64 KiB; binary and
    text): every line is read."""
    monkeypatch.setattr(tns_io, "_BLOCK_BYTES", 1 << 12)
    rng = np.random.default_rng(2)
    subs = np.unique(rng.integers(0, 300, (12000, 3)), axis=0)
    X = SparseTensor(subs, rng.integers(1, 9, subs.shape[0]).astype(float), (300, 300, 300))
    buf = io.BytesIO()
    save_tns(buf, X)
    assert len(buf.getvalue()) > 2 * (1 << 16)
    assert load_tns(io.BytesIO(buf.getvalue()), shape=X.shape) == X
    assert load_tns(io.StringIO(buf.getvalue().decode()), shape=X.shape) == X


def test_saved_text_format(tmp_path):
    X = SparseTensor([[0, 2, 1], [3, 0, 0]], [2.0, -7.0], shape=(4, 3, 2))
    save_tns(tmp_path / "i.tns", X)
    assert (tmp_path / "i.tns").read_text() == "1 3 2 2\n4 1 1 -7\n"
    Y = SparseTensor([[0, 0], [1, 1]], [0.1, 1 / 3])
    save_tns(tmp_path / "f.tns", Y)
    assert (tmp_path / "f.tns").read_text() == "1 1 0.1\n2 2 0.3333333333333333\n"
    save_tns(tmp_path / "p.tns", Y, precision=3)
    assert (tmp_path / "p.tns").read_text() == "1 1 0.1\n2 2 0.333\n"
    with pytest.raises(ValueError, match="precision"):
        save_tns(tmp_path / "q.tns", Y, precision=0)


def test_save_accepts_dense(tmp_path):
    D = np.zeros((2, 3))
    D[1, 2] = 4
    save_tns(tmp_path / "d.tns", D)
    assert (tmp_path / "d.tns").read_text() == "2 3 4\n"


def test_gzip_detected_by_content(tmp_path):
    X = random_tensor(seed=2)
    save_tns(tmp_path / "x.tns.gz", X)
    (tmp_path / "x.tns.gz").rename(tmp_path / "renamed.txt")
    assert load_tns(tmp_path / "renamed.txt", shape=X.shape) == X


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "x.tns.gz"
    path.write_bytes(gzip.compress(b"1 1 1\n" * 1000)[:-30])
    with pytest.raises(ValueError, match="cannot read the file"):
        load_tns(path)


def test_float32(tmp_path):
    X = random_tensor(seed=3)
    save_tns(tmp_path / "x.tns", X)
    Y = load_tns(tmp_path / "x.tns", shape=X.shape, dtype=np.float32)
    assert Y.dtype == np.float32
    np.testing.assert_array_equal(Y.vals, X.vals.astype(np.float32))


# ---------------------------------------------------------------------------- parsing
def test_comments_blank_lines_and_whitespace():
    text = ("# a FROSTT file\n"
            "\n"
            "   # indented comment\n"
            "1 2 3 1.5\r\n"
            "\t2  1\t1   -2\n"
            "   \n"
            "#1 1 1 1\n"
            "3 3 3 +4e-1")  # no final line break
    X = load_text(text)
    assert X.shape == (3, 3, 3)
    np.testing.assert_array_equal(X.subs, [[0, 1, 2], [1, 0, 0], [2, 2, 2]])
    np.testing.assert_array_equal(X.vals, [1.5, -2.0, 0.4])


def test_shape_given_vs_inferred():
    text = "1 2 5\n3 1 1\n"
    assert load_text(text).shape == (3, 2)
    X = load_text(text, shape=(10, 4))
    assert X.shape == (10, 4)
    np.testing.assert_array_equal(X.to_dense()[:3, :2], [[0, 5], [0, 0], [1, 0]])


def test_index_base_zero():
    X = load_text("0 0 1\n2 1 2\n", index_base=0)
    assert X.shape == (3, 2)
    np.testing.assert_array_equal(X.subs, [[0, 0], [2, 1]])


def test_duplicates_summed_and_zeros_dropped():
    X = load_text("1 1 2\n2 2 0\n1 1 3\n2 1 1\n")
    np.testing.assert_array_equal(X.subs, [[0, 0], [1, 0]])
    np.testing.assert_array_equal(X.vals, [5.0, 1.0])
    assert X.shape == (2, 2)


def test_unsorted_file():
    X = load_text("3 1 1\n1 2 2\n2 2 3\n")
    np.testing.assert_array_equal(X.subs, [[0, 1], [1, 1], [2, 0]])
    np.testing.assert_array_equal(X.vals, [2.0, 3.0, 1.0])


@pytest.mark.parametrize("token, expected", [
    ("7", 7.0), ("-7", -7.0), ("+7", 7.0), ("0.5", 0.5), (".5", 0.5), ("5.", 5.0),
    ("-0.001", -0.001), ("1e3", 1000.0), ("-2.5E-2", -0.025), ("1234567890123456", 1234567890123456.0),
    ("0.12345678901234567", 0.12345678901234567), ("123456789012345678901", 1.2345678901234568e20),
    ("00012", 12.0), ("3.141592653589793", 3.141592653589793),
])
def test_value_tokens(token, expected):
    X = load_text(f"1 1 {token}\n")
    assert X.vals[0] == expected


def test_decimal_values_exact():
    # the vectorised decimal path must give the same doubles as float()
    rng = np.random.default_rng(4)
    n = 3000
    digits = rng.integers(1, 16, n)
    tokens = []
    for d in digits:
        s = "".join(rng.choice(list("0123456789"), d))
        dot = rng.integers(0, d + 1)
        sign = rng.choice(["", "-", "+"])
        tokens.append(sign + s[:dot] + "." + s[dot:])
    text = "".join(f"{i + 1} {t}\n" for i, t in enumerate(tokens))
    X = load_text(text, shape=(n,))
    expected = np.array([float(t) for t in tokens])
    dense = np.zeros(n)
    dense[X.subs[:, 0]] = X.vals
    np.testing.assert_array_equal(dense, expected)


def test_coordinate_tokens():
    # whole numbers written as floats are accepted; long integers take the slow path
    X = load_text("2.0 1 1\n1e0 +3 2\n")
    np.testing.assert_array_equal(X.subs, [[0, 2], [1, 0]])
    Y = load_text("12345678901234567 1 1\n")
    assert Y.shape == (12345678901234567, 1)


@pytest.mark.parametrize("block_bytes", [7, 64, 1000])
def test_against_reference_parser(monkeypatch, block_bytes):
    """Small blocks: lines, comments and tokens meet the block ends everywhere."""
    monkeypatch.setattr(tns_io, "_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(block_bytes)
    lines = []
    for _ in range(300):
        r = rng.random()
        if r < 0.05:
            lines.append("# comment " + "x" * int(rng.integers(0, 30)))
        elif r < 0.1:
            lines.append(" " * int(rng.integers(0, 3)))
        else:
            coords = [str(int(c)) for c in rng.integers(1, [9, 200, 12345])]
            value = rng.choice([str(int(rng.integers(-9, 1000))),
                                repr(float(rng.standard_normal())),
                                f"{rng.random():.4f}", f"{rng.random():.3e}"])
            sep = rng.choice([" ", "  ", "\t"])
            lines.append(sep.join(coords + [value]))
    text = "\n".join(lines) + rng.choice(["", "\n", "\r\n"])
    subs, vals = reference_parse(text)
    expected = SparseTensor(subs, vals, (9, 200, 12345))
    assert load_text(text, shape=(9, 200, 12345)) == expected


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize("text, match", [
    ("1 2 3\n1 2 3\n1 2\n", r"line 3: expected 3 columns \(as on line 1\) but found 2"),
    ("# c\n\n1 2 3\n1 2 3 4\n", r"line 4: expected 3 columns \(as on line 3\) but found 4"),
    ("1 2 3\nx 2 3\n", r"line 2: 'x' is not a number"),
    ("1 2 3\n1 2 abc\n", r"line 2: 'abc' is not a number"),
    ("1 2 3\n1 2 3.0.1\n", r"line 2: '3.0.1' is not a number"),
    ("1 2 3\n1 2 1,5\n", r"line 2: '1,5' is not a number"),
    ("1 2 3\n1 2 3\n0 2 3\n", r"line 3: coordinate '0' in mode 1 is not a positive integer"),
    ("1 2 3\n1 -2 3\n", r"line 2: coordinate '-2' in mode 2 is not a positive integer"),
    ("1 2 3\n1 2.5 3\n", r"line 2: coordinate '2.5' in mode 2 is not a positive integer"),
    ("1 2 3\n1 2 nan\n", r"line 2: value 'nan' is not finite"),
    ("1 2 3\n1 2 -inf\n", r"line 2: value '-inf' is not finite"),
    ("1 2 3\n1 2 1e999\n", r"line 2: value '1e999' is not finite"),
    ("7\n", r"line 1: found 1 column"),
])
def test_errors_name_the_line(text, match):
    with pytest.raises(ValueError, match=match):
        load_text(text)


def test_error_reports_earliest_line():
    with pytest.raises(ValueError, match="line 2: 'x' is not a number"):
        load_text("1 1 1\n1 1 x\n1 1\n")
    with pytest.raises(ValueError, match="line 2: coordinate '0'"):
        load_text("1 1 1\n0 1 1\n1 1 zz\n")


@pytest.mark.parametrize("text, kwargs, match", [
    # an error found later in the same block once hid these
    ("1 1\n1 nan\n1 abc\n", {}, "line 2: value 'nan' is not finite"),
    ("1 1\n1 3.5e38\n1\n", {"dtype": np.float32}, "line 2: value 3.5e38 is too large"),
    ("1 1\n1 3.5e38\n1 x\n", {"dtype": np.float32}, "line 2: value 3.5e38 is too large"),
    ("1\n1 1\n" + " " * 40 + "\n", {"max_line_length": 12}, "line 1: found 1 column"),
])
def test_earliest_error_wins_whatever_its_kind(text, kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_text(text, **kwargs)


def test_error_names_the_file(tmp_path):
    path = tmp_path / "bad.tns"
    path.write_text("1 1 1\n1 1\n")
    with pytest.raises(ValueError, match=r"bad\.tns, line 2"):
        load_tns(path)


def test_error_line_numbers_across_blocks(monkeypatch):
    monkeypatch.setattr(tns_io, "_BLOCK_BYTES", 16)
    text = "".join(f"{i} 1 1\n" for i in range(1, 50)) + "1 1 oops\n"
    with pytest.raises(ValueError, match="line 50: 'oops' is not a number"):
        load_text(text)


def test_coordinate_beyond_shape():
    with pytest.raises(ValueError, match=r"line 2: coordinate 4 in mode 2 is beyond the mode "
                                         r"length 3"):
        load_text("1 1 1\n1 4 1\n", shape=(2, 3))
    with pytest.raises(ValueError, match=r"line 1: found 2 coordinates but `shape`"):
        load_text("1 1 1\n", shape=(2, 3, 4))


def test_index_base_zero_rejects_negative():
    with pytest.raises(ValueError, match=r"line 1: coordinate '-1' in mode 1 is not an integer "
                                         r">= 0"):
        load_text("-1 0 1\n", index_base=0)


def test_empty_file():
    with pytest.raises(ValueError, match="no nonzeros"):
        load_text("")
    with pytest.raises(ValueError, match="no nonzeros"):
        load_text("# only a comment\n\n")
    X = load_text("# nothing\n", shape=(2, 3))
    assert X.shape == (2, 3) and X.nnz == 0


def test_float32_overflow():
    with pytest.raises(ValueError, match="line 2: value 1e39 is too large for float32"):
        load_text("1 1 1\n2 2 1e39\n", dtype=np.float32)
    assert load_text("1 1 1\n2 2 1e39\n").vals[1] == 1e39


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="float32 or float64"):
        load_text("1 1 1\n", dtype=np.int64)
    with pytest.raises(ValueError, match="index_base"):
        load_text("1 1 1\n", index_base=-1)
    with pytest.raises(TypeError, match="with_labels"):
        load_tns(io.BytesIO(b"1 1 1\n"), with_labels=True)
    with pytest.raises(FileNotFoundError):
        load_tns(tmp_path / "missing.tns")


# ---------------------------------------------------------------------------- labels
def write_maps(folder, maps):
    for name, lines in maps.items():
        (folder / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")


def test_labels_from_map_files(tmp_path):
    X = SparseTensor([[0, 1, 0], [2, 0, 1]], [1.0, 2.0], shape=(3, 2, 2))
    save_tns(tmp_path / "t.tns.gz", X)
    write_maps(tmp_path, {"mode-1-city.map": ["Paris", "Rome", "Zürich"],
                          "mode-3-year.map": ["2020", "2021"]})
    Y, labels = load_tns(tmp_path / "t.tns.gz", with_labels=True)
    assert Y == X
    assert labels == [["Paris", "Rome", "Zürich"], None, ["2020", "2021"]]


def test_longer_map_extends_inferred_shape(tmp_path):
    (tmp_path / "t.tns").write_text("1 1 1\n2 1 1\n")
    write_maps(tmp_path, {"mode-1-a.map": ["a", "b", "c", "d"]})
    X, labels = load_tns(tmp_path / "t.tns", with_labels=True)
    assert X.shape == (4, 1)
    assert labels == [["a", "b", "c", "d"], None]
    # with a given shape the extra labels are dropped
    X, labels = load_tns(tmp_path / "t.tns", shape=(3, 1), with_labels=True)
    assert labels == [["a", "b", "c"], None]


def test_short_map_is_an_error(tmp_path):
    (tmp_path / "t.tns").write_text("1 1 1\n3 1 1\n")
    write_maps(tmp_path, {"mode-1-a.map": ["a", "b"]})
    with pytest.raises(ValueError, match=r"mode-1-a\.map has 2 lines but mode 1 has length 3"):
        load_tns(tmp_path / "t.tns", with_labels=True)


def test_two_maps_for_one_mode(tmp_path):
    (tmp_path / "t.tns").write_text("1 1 1\n")
    write_maps(tmp_path, {"mode-1-a.map": ["a"], "mode-1-b.map": ["b"]})
    with pytest.raises(ValueError, match="several label files for mode 1"):
        load_tns(tmp_path / "t.tns", with_labels=True)


def test_map_with_crlf_and_blank_label(tmp_path):
    (tmp_path / "mode-1-x.map").write_bytes(b"a\r\n\r\nc\r\n")
    assert read_labels(tmp_path, (3,)) == [["a", "", "c"]]


def test_write_labels_roundtrip(tmp_path):
    paths = write_labels(tmp_path / "maps", [["x", "y"], None, ["p"]],
                         names=["letters", "none", "single"])
    assert [p.rsplit("/", 1)[-1] for p in paths] == ["mode-1-letters.map", "mode-3-single.map"]
    assert read_labels(tmp_path / "maps", (2, 5, 1)) == [["x", "y"], None, ["p"]]
    with pytest.raises(ValueError, match="line break"):
        write_labels(tmp_path, [["a\nb"]])
    with pytest.raises(ValueError, match="mode names"):
        write_labels(tmp_path, [["a"]], names=["a", "b"])


def test_shared_flights_routes(shared_data):
    X, labels = load_tns(shared_data / "flights-routes" / "tensor.tns.gz", with_labels=True)
    assert X.shape == (3, 105, 16, 20, 7)
    assert X.nnz == 15188
    assert X.sum() == 336776
    assert X.vals.max() == 106
    assert [len(lab) for lab in labels] == list(X.shape)
    assert labels[0] == ["EWR", "JFK", "LGA"]


def test_shared_mode_without_map(shared_data):
    X, labels = load_tns(shared_data / "rails-commits" / "tensor.tns.gz", with_labels=True)
    assert X.shape == (6682, 12971, 944)
    assert X.nnz == 148286 and X.sum() == 181363
    assert labels[0] is None
    assert len(labels[1]) == 12971 and len(labels[2]) == 944


# ---------------------------------------------------------------------------- writing safely
def interrupt_after(monkeypatch, calls, exc=KeyboardInterrupt):
    """Make the buffer formatter of save_tns raise on its call number ``calls``."""
    from sktensor_fast._native import text
    real = text._tns.format_rows
    seen = []

    def flaky(*args, **kwargs):
        seen.append(1)
        if len(seen) == calls:
            raise exc("interrupted while writing")
        return real(*args, **kwargs)

    monkeypatch.setattr(text, "WRITE_ROWS", 7)
    monkeypatch.setattr(text._tns, "format_rows", flaky)


@pytest.mark.parametrize("name", ["x.tns", "x.tns.gz", "x.tns.bz2", "x.tns.xz"])
@pytest.mark.parametrize("exc", [KeyboardInterrupt, OSError])
def test_interrupted_save_keeps_the_old_file(tmp_path, monkeypatch, name, exc):
    """Overwriting once truncated the file first: an interruption left a valid-looking prefix."""
    old = random_tensor(seed=11)
    path = tmp_path / name
    save_tns(path, old)
    before = path.read_bytes()
    interrupt_after(monkeypatch, 3, exc)
    with pytest.raises(exc, match="interrupted"):
        save_tns(path, random_tensor(nnz=60, seed=12))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file left
    assert load_tns(path, shape=old.shape) == old


def test_interrupted_first_save_leaves_nothing(tmp_path, monkeypatch):
    interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        save_tns(tmp_path / "new.tns.gz", random_tensor(seed=13))
    assert list(tmp_path.iterdir()) == []


def test_save_replaces_whole_file_keeping_its_mode(tmp_path, monkeypatch):
    from sktensor_fast._native import text
    monkeypatch.setattr(text, "WRITE_ROWS", 5)
    path = tmp_path / "x.tns.gz"
    save_tns(path, random_tensor(nnz=80, seed=14))
    path.chmod(0o640)
    X = random_tensor(nnz=30, seed=15)
    save_tns(path, X)
    assert load_tns(path, shape=X.shape) == X
    assert path.stat().st_mode & 0o777 == 0o640
    # several gzip members (one per buffer, compressed in parallel), none naming the
    # temporary file
    raw = path.read_bytes()
    assert gzip.GzipFile(path).read() and raw.count(b"\x1f\x8b\x08") >= 2
    assert b".tmp" not in raw
    # a link is written through, as open() does
    link = tmp_path / "link.tns"
    link.symlink_to(tmp_path / "target.tns")
    save_tns(link, X)
    assert link.is_symlink() and load_tns(tmp_path / "target.tns", shape=X.shape) == X
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.tns", "target.tns", "x.tns.gz"]


def test_interrupted_write_labels_keeps_the_old_map(tmp_path, monkeypatch):
    write_labels(tmp_path, [["a", "b"]], names=["x"])
    before = (tmp_path / "mode-1-x.map").read_bytes()

    def no_sync(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(tns_io.os, "fsync", no_sync)
    with pytest.raises(KeyboardInterrupt):
        write_labels(tmp_path, [["c", "d", "e"]], names=["x"])
    assert (tmp_path / "mode-1-x.map").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["mode-1-x.map"]


# ---------------------------------------------------------------------------- bounded reading
class EndlessStream:
    """A file object repeating ``unit`` for ever; fails the test if read far beyond ``cap``."""

    def __init__(self, unit, cap, head=b""):
        self.unit, self.cap, self.given, self.head = unit, cap, 0, head

    def read(self, n=-1):
        assert self.given <= self.cap, "the reader keeps reading a line that never ends"
        n = 1 << 16 if n is None or n < 0 else min(n, 1 << 16)
        out = self.head + (self.unit * (n // len(self.unit) + 1))[:n]
        self.head = b""
        self.given += len(out)
        return out


@pytest.mark.parametrize("unit", [b"1 ", b" ", b"\t\r", b"# comment "])
@pytest.mark.parametrize("head", [b"", b"1 1 1\n\n"])
def test_a_line_without_end_is_refused_in_bounded_memory(monkeypatch, unit, head):
    """512 MB of '1 1 1 ...' without a line break once took 17.5 GB."""
    monkeypatch.setattr(tns_io, "_BLOCK_BYTES", 1 << 16)
    src = EndlessStream(unit, 1 << 20, head)
    line = 1 + head.count(b"\n")
    with pytest.raises(ValueError, match=f"<stream>, line {line}: the line is longer than 4096 "
                                         f"bytes"):
        load_tns(src, max_line_length=4096)
    assert src.given <= 3 * (1 << 16)


def test_long_line_named_wherever_it_is(monkeypatch):
    text = "1 1 1\n" * 5 + "1 1 " + "0" * 200 + "1\n" + "1 1 1\n"
    for block in (16, 64, 1 << 24):
        monkeypatch.setattr(tns_io, "_BLOCK_BYTES", block)
        with pytest.raises(ValueError, match="line 6: the line is longer than 100 bytes"):
            load_text(text, max_line_length=100)
        assert load_text(text, max_line_length=205).vals.tolist() == [7.0]  # summed
    with pytest.raises(ValueError, match="line 3: the line is longer than 10 bytes"):
        load_text("1 1 1\n\n" + " " * 11 + "\n1 1 1\n", max_line_length=10)
    assert load_text("1 1 1\n" + " " * 10 + "\n", max_line_length=10).nnz == 1
    assert load_text("1 1 " + "0" * 100 + "1\n", max_line_length=None).nnz == 1


def test_whitespace_only_streams():
    for data in (b" " * 100000, b"\n" * 100000, b" \n\t" * 30000, gzip.compress(b"\n" * 10 ** 6)):
        with pytest.raises(ValueError, match="holds no nonzeros"):
            load_tns(io.BytesIO(data))
    with pytest.raises(ValueError, match="line 1: the line is longer than 1048576 bytes"):
        load_tns(io.BytesIO(gzip.compress(b" " * (4 << 20))))


def test_too_many_modes():
    line = " ".join(["1"] * 66) + "\n"
    with pytest.raises(ValueError, match="line 2: found 65 coordinates, more than max_modes=64"):
        load_text("# header\n" + line)
    assert load_text(line, max_modes=None).ndim == 65
    assert load_text(line, max_modes=65).ndim == 65
    with pytest.raises(ValueError, match="found 3 coordinates, more than max_modes=2"):
        load_text("1 1 1 1\n", max_modes=2)
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="must be a positive integer or None"):
            load_text("1 1 1\n", max_modes=bad)
        with pytest.raises(ValueError, match="must be a positive integer or None"):
            load_text("1 1 1\n", max_line_length=bad)


def test_streams_are_read_as_they_go():
    X = random_tensor(seed=16)
    buf = io.BytesIO()
    save_tns(buf, X)
    text = buf.getvalue()
    assert load_tns(io.StringIO(text.decode()), shape=X.shape) == X
    for packed in (gzip.compress(text), __import__("bz2").compress(text),
                   __import__("lzma").compress(text)):
        assert load_tns(io.BytesIO(packed), shape=X.shape) == X
    with pytest.raises(ValueError, match="cannot read the file"):
        load_tns(io.BytesIO(gzip.compress(text)[:-20]))


@pytest.mark.parametrize("damage", [slice(20, 40), slice(-8, None)])
@pytest.mark.parametrize("how", ["path", "stream"])
def test_damaged_compressed_data(tmp_path, damage, how):
    text = b"".join(b"%d 1 %d\n" % (i, i) for i in range(1, 3000))
    for packed in (gzip.compress(text), __import__("lzma").compress(text),
                   __import__("bz2").compress(text)):
        data = bytearray(packed)
        data[damage] = bytes(len(data[damage]))
        src = tmp_path / "x.bin"
        src.write_bytes(bytes(data))
        with pytest.raises(ValueError, match=r"cannot read the file|line \d+"):
            load_tns(src if how == "path" else io.BytesIO(bytes(data)))


# ---------------------------------------------------------------------------- exact round trips
def test_repeated_coordinates_summing_past_the_dtype():
    with pytest.raises(ValueError, match=r"<stream>: .*coordinate \(1, 2\) \(1-based\) add up "
                                         r"to more than the largest float64"):
        load_text("1 2 1e308\n2 1 1\n1 2 1e308\n")
    with pytest.raises(ValueError, match=r"coordinate \(0, 1\) \(zero-based\).*largest float32"):
        load_text("0 1 3e38\n0 1 3e38\n", dtype=np.float32, index_base=0)


def test_largest_coordinates_round_trip(tmp_path):
    top = 2 ** 63 - 2  # the largest zero-based coordinate (mode length 2**63 - 1)
    X = SparseTensor(np.array([[2 ** 62 - 1, 0], [top, 1]]), [1.5, 2.0],
                     shape=(2 ** 63 - 1, 2))
    save_tns(tmp_path / "x.tns", X)
    assert (tmp_path / "x.tns").read_text().splitlines()[1] == f"{top + 1} 2 2.0"
    assert load_tns(tmp_path / "x.tns") == X
    assert load_tns(tmp_path / "x.tns", shape=X.shape) == X
    with pytest.raises(ValueError, match=r"line 1: coordinate '9223372036854775808' in mode 1 "
                                         r"is too large"):
        load_text("9223372036854775808 1 1\n")
    with pytest.raises(ValueError, match=r"line 2: coordinate '1e20' in mode 2 is too large"):
        load_text("1 1 1\n1 1e20 1\n")
    with pytest.raises(ValueError, match=r"coordinate '9223372036854775807' in mode 1 is too"):
        load_text("9223372036854775807 1 1\n", index_base=0)


def test_float32_extremes_round_trip(tmp_path):
    f32 = np.finfo(np.float32)
    vals = np.array([f32.max, -f32.max, f32.tiny, f32.smallest_subnormal, 0.1, 1 / 3,
                     16777217.0, 1e-30], dtype=np.float32)
    X = SparseTensor(np.arange(8)[:, None] * [1, 1], vals, shape=(8, 8))
    save_tns(tmp_path / "x.tns", X)
    Y = load_tns(tmp_path / "x.tns", shape=X.shape, dtype=np.float32)
    assert Y == X and Y.dtype == np.float32
    np.testing.assert_array_equal(Y.vals.view(np.uint32), X.vals.view(np.uint32))
    # the shortest text is kept where it is exact
    assert (tmp_path / "x.tns").read_text().splitlines()[4] == "5 5 0.1"
    # the largest float32 is written as 3.4028235e+38, a little above it as a double
    assert load_text("1 1 3.4028235e+38\n", dtype=np.float32).vals[0] == f32.max
    with pytest.raises(ValueError, match="line 1: value 3.40282357e38 is too large for float32"):
        load_text("1 1 3.40282357e38\n", dtype=np.float32)


def test_float32_underflow_dropped_with_a_warning():
    with pytest.warns(UserWarning, match=r"<stream>: 2 value\(s\) too small for float32 round "
                                         r"to 0 and are dropped"):
        X = load_text("1 1 1e-50\n1 2 2\n2 1 -1e-46\n", dtype=np.float32)
    assert X.subs.tolist() == [[0, 1]] and X.vals.tolist() == [2.0] and X.shape == (2, 2)
    # float64 keeps them, explicit zeros are dropped silently in both
    assert load_text("1 1 1e-50\n1 2 0\n").nnz == 1


def test_map_file_not_utf8(tmp_path):
    (tmp_path / "mode-1-x.map").write_bytes(b"ok\nfine\nbad \xff\xfe here\n")
    with pytest.raises(ValueError, match=r"mode-1-x\.map, line 3: the label file is not valid "
                                         r"UTF-8"):
        read_labels(tmp_path, (3,))


# ---------------------------------------------------------------------------- speed
def test_load_one_million_lines_quickly(tmp_path):
    rng = np.random.default_rng(5)
    n = 1_000_000
    shape = (5000, 3000, 200)
    subs = np.column_stack([rng.integers(0, s, n) for s in shape])
    X = SparseTensor(subs, rng.integers(1, 20, n), shape)
    path = tmp_path / "big.tns"
    save_tns(path, X)
    start = time.perf_counter()
    Y = load_tns(path, shape=shape)
    elapsed = time.perf_counter() - start
    assert Y == X
    assert elapsed < 10, f"loading {X.nnz} lines took {elapsed:.1f} s"
