"""The binary container: save_tensor / load_tensor round trips and every refused file."""
import struct

import numpy as np
import pytest

from sktensor_fast import SparseTensor, load_tensor, save_tensor
from sktensor_fast.binary import FORMAT_VERSION

from _container import resigned


def tensor(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return SparseTensor(rng.integers(0, 20, (300, 3)), rng.standard_normal(300), (20, 20, 20),
                        dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mmap", [False, True])
def test_round_trip(tmp_path, dtype, mmap):
    X = tensor(dtype)
    path = tmp_path / "x.sktf"
    save_tensor(path, X, labels=[[f"a{i}" for i in range(25)], None, list("abcdefghijklmnopqrst")])
    Y, labels = load_tensor(path, mmap=mmap, with_labels=True)
    assert Y == X and Y.dtype == dtype
    assert labels[0] == [f"a{i}" for i in range(20)] and labels[1] is None
    assert load_tensor(path) == X
    assert not [p for p in tmp_path.iterdir() if p.name != "x.sktf"]   # no temporary left


def test_empty_tensor_and_no_labels(tmp_path):
    X = SparseTensor(np.zeros((0, 2), np.int64), np.zeros(0), (3, 4))
    save_tensor(tmp_path / "e.sktf", X)
    Y, labels = load_tensor(tmp_path / "e.sktf", with_labels=True)
    assert Y == X and labels == [None, None]


def _header(path):
    raw = path.read_bytes()
    _, version, hlen, crc = struct.unpack("<8sIII4x", raw[:24])
    return raw, hlen


def test_refused_files(tmp_path):
    X = tensor()
    path = tmp_path / "x.sktf"
    save_tensor(path, X, labels=[None, None, [str(i) for i in range(20)]])
    raw, hlen = _header(path)
    bad = tmp_path / "bad.sktf"

    bad.write_bytes(b"1 1 1\n")
    with pytest.raises(ValueError, match="not a sktensor_fast binary tensor file"):
        load_tensor(bad)
    bad.write_bytes(raw[:8] + struct.pack("<I", FORMAT_VERSION + 1) + raw[12:])
    with pytest.raises(ValueError, match=f"format version {FORMAT_VERSION + 1}"):
        load_tensor(bad)
    header = bytearray(raw)
    header[30] ^= 1
    bad.write_bytes(bytes(header))
    with pytest.raises(ValueError, match="header does not match its checksum"):
        load_tensor(bad)
    bad.write_bytes(raw[:len(raw) - 100])
    with pytest.raises(ValueError, match="truncated"):
        load_tensor(bad)
    labels_at = raw.rindex(b'"2"')
    corrupt = bytearray(raw)
    corrupt[labels_at + 1] = ord("9")
    bad.write_bytes(bytes(corrupt))
    with pytest.raises(ValueError, match="labels do not match their checksum"):
        load_tensor(bad, with_labels=True)


@pytest.mark.parametrize("problem, match", [("order", "not after the row before"),
                                            ("range", "outside the shape"),
                                            ("value", "zero or not finite")])
def test_arrays_are_checked(tmp_path, problem, match):
    X = tensor()
    path = tmp_path / "x.sktf"
    save_tensor(path, X)
    raw = bytearray(path.read_bytes())
    subs_at = raw.index(X.subs.astype("<i8").tobytes()[:64])
    vals_at = raw.index(X.vals.astype("<f8").tobytes()[:64])
    if problem == "order":      # swap the first two rows
        a, b = raw[subs_at:subs_at + 24], raw[subs_at + 24:subs_at + 48]
        raw[subs_at:subs_at + 48] = b + a
    elif problem == "range":
        raw[subs_at + 8:subs_at + 16] = struct.pack("<q", 20)
    else:
        raw[vals_at + 8:vals_at + 16] = struct.pack("<d", np.nan)
    path.write_bytes(resigned(bytes(raw)))      # checksums that match: the arrays are checked
    for mmap in (False, True):
        with pytest.raises(ValueError, match=match):
            load_tensor(path, mmap=mmap)


def test_bad_labels_argument(tmp_path):
    with pytest.raises(ValueError, match="labels has 1 entries"):
        save_tensor(tmp_path / "x.sktf", tensor(), labels=[None])
    with pytest.raises(ValueError, match="mode 2 has 3 entries"):
        save_tensor(tmp_path / "x.sktf", tensor(), labels=[None, ["a", "b", "c"], None])
    assert not list(tmp_path.iterdir())          # nothing written


def test_read_rows_shares(tmp_path):
    # the shares the distributed loader reads: together the file, each checked alone, errors
    # naming the row of the file
    from sktensor_fast.binary import read_rows
    X = tensor(seed=3)
    path = tmp_path / "x.sktf"
    save_tensor(path, X)
    parts = [read_rows(path, 3, p) for p in range(3)]
    assert all(p[0] == X.shape and p[1] == X.nnz for p in parts)
    assert [len(p[2]) for p in parts] == [X.nnz * (p + 1) // 3 - X.nnz * p // 3
                                         for p in range(3)]
    assert np.array_equal(np.concatenate([p[2] for p in parts]), X.subs)
    assert np.array_equal(np.concatenate([p[3] for p in parts]), X.vals)
    raw = bytearray(path.read_bytes())
    vals_at = raw.index(X.vals.astype("<f8").tobytes()[:64])
    row = X.nnz - 5                                  # in the last share
    raw[vals_at + 8 * row:vals_at + 8 * row + 8] = struct.pack("<d", 0.0)
    path.write_bytes(resigned(bytes(raw)))
    assert len(read_rows(path, 3, 0)[2]) == X.nnz // 3        # the other shares are fine
    with pytest.raises(ValueError, match=f"value {row} is zero"):
        read_rows(path, 3, 2)


# ------------------------------------------------------------------- a file replaced meanwhile
def _two_versions():
    X1, X2 = tensor(seed=1), tensor(seed=2)
    assert X1.nnz == X2.nnz and X1 != X2      # the same layout, other arrays
    return X1, X2


@pytest.mark.parametrize("verify", [True, False])
def test_mmap_maps_the_file_whose_header_it_read(tmp_path, monkeypatch, verify):
    from sktensor_fast import binary
    X1, X2 = _two_versions()
    path = tmp_path / "x.sktf"
    save_tensor(path, X1)
    read_header = binary._read_header

    def then_replaced(f, name):
        hdr = read_header(f, name)
        save_tensor(path, X2)            # a writer replaces the file between header and map
        return hdr
    monkeypatch.setattr(binary, "_read_header", then_replaced)
    for mmap in (True, False):
        save_tensor(path, X1)
        Y = load_tensor(path, mmap=mmap, verify=verify)
        assert Y == X1, "coordinates and values of two versions mixed"
    monkeypatch.undo()
    assert load_tensor(path) == X2


def test_read_rows_tells_versions_apart(tmp_path):
    # the distributed loader compares what read_rows returns on every process
    from sktensor_fast.binary import read_rows
    X1, X2 = _two_versions()
    path = tmp_path / "x.sktf"
    save_tensor(path, X1)
    first = read_rows(path, 2, 0)
    assert read_rows(path, 2, 1)[4] == first[4]
    save_tensor(path, X2)
    assert read_rows(path, 2, 1)[4] != first[4]


# ------------------------------------------------------------------------------- checksums
@pytest.mark.parametrize("section", ["subs", "vals"])
def test_every_bit_of_the_arrays_is_checked(tmp_path, section):
    X = tensor()
    path = tmp_path / "x.sktf"
    save_tensor(path, X)
    good = path.read_bytes()
    arr = X.subs.astype("<i8") if section == "subs" else X.vals.astype("<f8")
    at = good.index(arr.tobytes()[:64])
    rng = np.random.default_rng(0)
    what = {"subs": "coordinates", "vals": "values"}[section]
    for bit in rng.choice(arr.nbytes * 8, 20, replace=False):
        raw = bytearray(good)
        raw[at + bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(raw))
        for mmap in (False, True):
            with pytest.raises(ValueError, match=f"x.sktf is corrupt: its {what} do not match"):
                load_tensor(path, mmap=mmap)
    # verify=False skips the checksums: a flip of a value's low bit then loads
    raw = bytearray(good)
    raw[good.index(X.vals.astype("<f8").tobytes()[:64])] ^= 1
    path.write_bytes(bytes(raw))
    assert load_tensor(path, mmap=True, verify=False).nnz == X.nnz


def test_mmap_maps_and_the_default_reads(tmp_path):
    """mmap=True maps the file's arrays; the default reads them into memory."""
    def mapped(a):
        while a is not None:
            if isinstance(a, np.memmap):
                return True
            a = a.base
        return False

    X = tensor(seed=4)
    save_tensor(tmp_path / "x.sktf", X)
    Y, Z = load_tensor(tmp_path / "x.sktf", mmap=True), load_tensor(tmp_path / "x.sktf")
    assert Y == X == Z
    assert mapped(Y.vals) and mapped(Y.subs)
    assert not mapped(Z.vals) and not mapped(Z.subs)


def test_read_rows_reads_every_row_by_default(tmp_path):
    from sktensor_fast.binary import read_rows
    X = tensor(seed=2)
    save_tensor(tmp_path / "x.sktf", X)
    shape, nnz, subs, vals, _ = read_rows(tmp_path / "x.sktf")
    assert (shape, nnz) == (X.shape, X.nnz)
    assert np.array_equal(subs, X.subs) and np.array_equal(vals, X.vals)


def test_identity_of_a_rewritten_file(tmp_path):
    """Format 2: the identity is the header (its checksums cover the data), so the same
    tensor saved again (a new inode) reads as the same file; other data as another."""
    from sktensor_fast.binary import read_rows
    path = tmp_path / "x.sktf"
    save_tensor(path, tensor(seed=1))
    before = read_rows(path)[4]
    ino = path.stat().st_ino
    save_tensor(path, tensor(seed=1))
    assert path.stat().st_ino != ino
    assert read_rows(path)[4] == before
    save_tensor(path, tensor(seed=2))
    assert read_rows(path)[4] != before


def test_copies_cover_a_section_exactly_once():
    from sktensor_fast.binary import _chunks
    assert _chunks(10, 25, 8) == [(10, 8), (18, 8), (26, 8), (34, 1)]
    assert _chunks(0, 16, 8) == [(0, 8), (8, 8)] and _chunks(5, 0, 8) == []


def test_short_writes_and_reads_are_resumed(tmp_path, monkeypatch):
    """os.pwrite / os.preadv may move fewer bytes than asked (above 2 GiB on Linux, on some
    file systems): the rest is written / read where they stopped."""
    import os
    pwrite, preadv = os.pwrite, os.preadv

    def short_pwrite(fd, data, offset):
        return pwrite(fd, bytes(data[:100]), offset)

    def short_preadv(fd, buffers, offset):
        return preadv(fd, [memoryview(buffers[0])[:100]], offset)

    X = tensor(seed=5)
    monkeypatch.setattr(os, "pwrite", short_pwrite)
    save_tensor(tmp_path / "x.sktf", X)
    save_tensor(tmp_path / "ref.sktf", X)
    monkeypatch.setattr(os, "preadv", short_preadv)
    assert load_tensor(tmp_path / "x.sktf") == X
    monkeypatch.undo()
    assert load_tensor(tmp_path / "x.sktf") == X


def test_shares_check_the_blocks_they_read(tmp_path, monkeypatch):
    # small checksum blocks: a share reads the parts of its first and last block outside it
    from sktensor_fast import binary
    from sktensor_fast.binary import read_rows
    monkeypatch.setattr(binary, "_CRC_BLOCK", 256)
    X = tensor(seed=3)
    path = tmp_path / "x.sktf"
    save_tensor(path, X)
    assert len(_meta(path)["sections"]["subs"]["crc32"]) == -(-X.nnz * 24 // 256)
    parts = [read_rows(path, 7, p) for p in range(7)]
    assert np.array_equal(np.concatenate([p[2] for p in parts]), X.subs)
    assert np.array_equal(np.concatenate([p[3] for p in parts]), X.vals)
    assert load_tensor(path) == X and load_tensor(path, mmap=True) == X
    raw = bytearray(path.read_bytes())
    vals_at = raw.index(X.vals.astype("<f8").tobytes()[:64])
    row = X.nnz - 5                                  # in the last share
    raw[vals_at + 8 * row] ^= 4
    path.write_bytes(bytes(raw))
    assert len(read_rows(path, 7, 0)[2]) == X.nnz // 7
    with pytest.raises(ValueError, match="its values do not match their checksum"):
        read_rows(path, 7, 6)


def _meta(path):
    import json
    raw = path.read_bytes()
    hlen = struct.unpack("<I", raw[12:16])[0]
    return json.loads(raw[24:24 + hlen])


def test_version_1_files_are_read(tmp_path):
    from _container import version1
    X = tensor(np.float32)
    labels = [None, [f"b{i}" for i in range(20)], None]
    path = tmp_path / "old.sktf"
    path.write_bytes(version1(X, labels))
    for mmap in (False, True):
        Y, got = load_tensor(path, mmap=mmap, with_labels=True)
        assert Y == X and Y.dtype == np.float32 and got == labels and Y.labels == labels
    path.write_bytes(version1(X))
    assert load_tensor(path) == X


# ------------------------------------------------------------------------- labels and names
def test_labels_and_mode_names_are_kept(tmp_path):
    X = tensor()
    labels = [[f"a{i}" for i in range(20)], None, [f"c{i}" for i in range(20)]]
    X.labels, X.mode_names = labels, ["user", "item", "day"]
    path = tmp_path / "x.sktf"
    save_tensor(path, X)                              # the tensor's own
    for mmap in (False, True):
        Y, got = load_tensor(path, mmap=mmap, with_labels=True)
        assert got == labels and Y.labels == labels and Y.mode_names == ["user", "item", "day"]
    given = [None, [f"b{i}" for i in range(25)], None]
    save_tensor(path, X, labels=given, mode_names=["u", "i", "d"])   # passed explicitly
    Y = load_tensor(path)
    assert Y.labels == [None, given[1][:20], None] and Y.mode_names == ["u", "i", "d"]
    with pytest.raises(ValueError, match="mode_names has 2 entries"):
        save_tensor(path, X, mode_names=["a", "b"])
    Z = load_tensor(path)
    assert Z.labels == Y.labels                      # the refused save changed nothing
    save_tensor(path, tensor())
    Y, got = load_tensor(path, with_labels=True)
    assert got == [None] * 3 and Y.labels is None and Y.mode_names is None


# ------------------------------------------------------------------------ crafted headers
def _crafted():
    """(edit of the header, fragment of the message): every header is signed, so only the
    checks of its content can refuse it."""
    def setk(key, value):
        return lambda m: m.__setitem__(key, value)

    def sec(name, key, value):
        return lambda m: m["sections"][name].__setitem__(key, value)
    return [
        (setk("shape", [3, 4, -3]), "shape"),
        (setk("shape", []), "shape"),
        (setk("shape", [3, 4.5, 2]), "shape"),
        (setk("shape", [2 ** 63, 20, 20]), "shape"),
        (setk("shape", "abc"), "shape"),
        (setk("shape", [True, 20, 20]), "shape"),
        (setk("nnz", -1), "nonzeros"),
        (setk("nnz", 1e400), "nonzeros"),
        (setk("nnz", 10 ** 12), "does not fit the header"),
        (_huge, "truncated: it has .* bytes, its header announces 32000016777216"),
        (setk("dtype", "<c16"), "dtype"),
        (setk("dtype", "object"), "dtype"),
        (setk("dtype", ["<f8"]), "dtype"),
        (setk("file_bytes", 10 ** 15), "truncated"),
        (setk("file_bytes", -5), "file_bytes"),
        (setk("mode_names", ["a"]), "mode_names"),
        (setk("mode_names", 7), "mode_names"),
        (setk("crc_block", 0), "crc_block"),
        (setk("crc_block", 2 ** 40), "crc_block"),
        (setk("sections", []), "sections"),
        (lambda m: m.pop("sections"), "no sections"),
        (lambda m: m.pop("shape"), "no shape"),
        (lambda m: m["sections"].pop("vals"), "values"),
        (lambda m: m["sections"].__setitem__("labels", None), "labels"),
        (setk("version", 1), "format version 1"),
        (sec("subs", "offset", 7), "does not fit"),
        (sec("subs", "offset", 2 ** 70), "offset"),
        (sec("vals", "offset", 0), "outside"),
        (sec("vals", "offset", 4160), "overlap"),
        (sec("vals", "nbytes", "2400"), "offset and length"),
        (sec("vals", "crc32", [1, 2]), "checksums"),
        (sec("vals", "crc32", [-1]), "checksums"),
        (sec("labels", "nbytes", 10 ** 9), "outside"),
        (sec("labels", "offset", -64), "offset"),
    ]


def _huge(meta):
    # 10**12 nonzeros, every size consistent: refused by the size of the file, not by an
    # allocation of 32 TB
    n, B = 10 ** 12, 2 ** 30
    sec = meta["sections"]
    sec["subs"].update(offset=2 ** 24, nbytes=24 * n, crc32=[0] * -(-24 * n // B))
    sec["vals"].update(offset=2 ** 24 + 24 * n, nbytes=8 * n, crc32=[0] * -(-8 * n // B))
    sec.pop("labels")
    meta.update(nnz=n, crc_block=B, file_bytes=sec["vals"]["offset"] + 8 * n)


@pytest.mark.parametrize("edit, match", _crafted())
def test_crafted_headers(tmp_path, edit, match):
    from _container import split, with_header
    X = tensor()
    path = tmp_path / "x.sktf"
    save_tensor(path, X, labels=[None, None, [str(i) for i in range(20)]])
    _, meta, raw = split(path.read_bytes())
    edit(meta)
    bad = tmp_path / "bad.sktf"
    bad.write_bytes(with_header(raw, meta))
    for mmap in (False, True):
        with pytest.raises(ValueError, match=match) as info:
            load_tensor(bad, mmap=mmap, with_labels=True)
        assert str(bad) in str(info.value)


def test_crafted_headers_outside_the_object(tmp_path):
    from _container import split, with_header
    path = tmp_path / "x.sktf"
    save_tensor(path, tensor())
    _, meta, raw = split(path.read_bytes())
    for header, match in (([1, 2], "not a JSON object"), ("x", "not a JSON object"),
                          (None, "not a JSON object")):
        path.write_bytes(with_header(raw, header))
        with pytest.raises(ValueError, match=match):
            load_tensor(path)
    # a header length past the end of the file: refused before anything is read
    path.write_bytes(raw[:12] + struct.pack("<I", 2 ** 32 - 1) + raw[16:])
    with pytest.raises(ValueError, match="truncated"):
        load_tensor(path)
    # deeply nested JSON with a valid checksum
    import zlib
    deep = b"[" * 100_000 + b"]" * 100_000
    path.write_bytes(raw[:8] + struct.pack("<III4x", FORMAT_VERSION, len(deep),
                                           zlib.crc32(deep)) + deep)
    with pytest.raises(ValueError, match="unreadable header"):
        load_tensor(path)
    # labels that are not lists of strings as long as the mode, with matching checksums
    save_tensor(path, tensor(), labels=[None, None, [str(i) for i in range(20)]])
    _, meta, raw = split(path.read_bytes())
    sec = meta["sections"]["labels"]
    for bad in (b'{"a": 1}', b'[null, null, ["1"]]', b'[null, null, [1, 2]]', b'[null]',
                b'\xff\xfe'):
        bad = bad.ljust(sec["nbytes"], b" ") if len(bad) <= sec["nbytes"] else bad
        edited = bytearray(raw)
        edited[sec["offset"]:sec["offset"] + sec["nbytes"]] = bad[:sec["nbytes"]]
        from _container import resigned
        path.write_bytes(resigned(bytes(edited)))
        with pytest.raises(ValueError, match="x.sktf is corrupt: .*labels"):
            load_tensor(path)
