"""The writing policy shared by every saver (save_tns, save_tensor, save_model): a regular file
replaced whole through a temporary file, the mode open() would give, symbolic links followed,
character devices and FIFOs written directly (never replaced by a regular file)."""
import os
import stat

import numpy as np
import pytest

from sktensor_fast import CPALS, SparseTensor, load_model, load_tensor, load_tns, save_model, \
    save_tensor, save_tns

X = SparseTensor([[0, 1, 0], [1, 0, 2], [2, 2, 1]], [1.0, 2.5, 3.0], (3, 3, 3))


def _model():
    return CPALS(rank=1, random_state=0, max_iter=3, tol=0).fit(X)


def _save(kind, path):
    if kind == "tns":
        save_tns(path, X)
    elif kind == "tensor":
        save_tensor(path, X)
    else:
        save_model(_MODEL, path)


def _check(kind, path):
    if kind == "tns":
        assert load_tns(path, shape=X.shape) == X
    elif kind == "tensor":
        assert load_tensor(path) == X
    else:
        assert np.array_equal(load_model(path).factors_[0], _MODEL.factors_[0])


_MODEL = None
SAVERS = ["tns", "tensor", "model"]


@pytest.fixture(autouse=True)
def model():
    global _MODEL
    if _MODEL is None:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _MODEL = _model()


@pytest.mark.parametrize("kind", SAVERS)
def test_permissions_as_open_gives(tmp_path, kind):
    old = os.umask(0o027)
    try:
        path = tmp_path / "new"
        _save(kind, path)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640      # 0o666 less the umask
        for mode in (0o644, 0o600, 0o604):
            os.chmod(path, mode)
            _save(kind, path)
            assert stat.S_IMODE(os.stat(path).st_mode) == mode    # an existing file's mode
        _check(kind, path)
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]   # no temporary left


@pytest.mark.parametrize("kind", SAVERS)
def test_symlinks_are_followed(tmp_path, kind):
    (tmp_path / "data").mkdir()
    (tmp_path / "links").mkdir()
    target = tmp_path / "data" / "target"
    link = tmp_path / "links" / "link"
    link.symlink_to(target)                      # dangling: the target is created
    for _ in range(2):
        _save(kind, link)
        assert link.is_symlink() and os.readlink(link) == str(target)
        assert target.is_file() and not target.is_symlink()
        _check(kind, target)
    assert [p.name for p in (tmp_path / "links").iterdir()] == ["link"]
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["target"]


def _read_all(fd):
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("kind", SAVERS)
def test_fifo_written_directly(tmp_path, kind):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    # a reader is there before the save (the files are smaller than the pipe's buffer)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        _save(kind, fifo)
        data = _read_all(fd)
    finally:
        os.close(fd)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced"
    assert data
    copy = tmp_path / "copy"
    copy.write_bytes(data)
    _check(kind, copy)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "pipe"]


@pytest.mark.parametrize("kind", SAVERS)
def test_character_device_written_directly(tmp_path, kind):
    null = tmp_path / "null"
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))   # a /dev/null of our own
        with open(null, "wb") as f:
            f.write(b"x")
    except OSError as exc:
        pytest.skip(f"cannot create a character device here: {exc}")
    _save(kind, null)
    assert stat.S_ISCHR(os.stat(null).st_mode), "the device was replaced by a regular file"
    assert [p.name for p in tmp_path.iterdir()] == ["null"]


@pytest.mark.parametrize("kind", SAVERS)
def test_folder_refused(tmp_path, kind):
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError, match="cannot write .*d: it is a folder"):
        _save(kind, tmp_path / "d")
    assert [p.name for p in tmp_path.iterdir()] == ["d"]


@pytest.mark.parametrize("kind", SAVERS)
def test_missing_folder_named(tmp_path, kind):
    path = tmp_path / "no" / "such" / "x"
    with pytest.raises(FileNotFoundError, match=f"No such file or directory: '{path}'"):
        _save(kind, path)
