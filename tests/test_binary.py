"""The binary container: save_tensor / load_tensor round trips and every refused file."""
import struct

import numpy as np
import pytest

from sktensor_fast import SparseTensor, load_tensor, save_tensor
from sktensor_fast.binary import FORMAT_VERSION


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
    path.write_bytes(bytes(raw))
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
    path.write_bytes(bytes(raw))
    assert len(read_rows(path, 3, 0)[2]) == X.nnz // 3        # the other shares are fine
    with pytest.raises(ValueError, match=f"value {row} is zero"):
        read_rows(path, 3, 2)
