"""Reading and writing sparse tensors in the FROSTT ``.tns`` text format.

A ``.tns`` file holds one nonzero a line: ``N`` whitespace-separated coordinates (1-based by
default) followed by the value.  Blank lines and lines whose first non-blank character is ``#``
are comments.  Files may be compressed with gzip (also bzip2 or xz); compression is recognised
from the first bytes of the file, so the suffix does not matter when reading.

Reading and writing run the compiled, multithreaded parser and formatter of
:mod:`sktensor_fast._native.text`: plain files are parsed in place through a memory map,
compressed files and file objects in blocks of whole lines read (and decompressed) ahead by a
second thread; the sorted tensor is built by the compiled passes of
:mod:`sktensor_fast._native.canonical`.  Every problem with the content is reported as a
:class:`ValueError` naming its file and line.
"""
import bz2
import contextlib
import glob
import gzip
import io
import lzma
import numbers
import os
import secrets
import stat

import numpy as np

from .tensor import SparseTensor, _SumOverflowError, _check_shape, as_sparse_tensor
from ._warnings import warn as _warn

__all__ = ["load_tns", "save_tns", "read_labels", "write_labels"]

#: Bytes of text parsed at a time; bounds the memory used on top of the result.
_BLOCK_BYTES = 1 << 24
#: Default limits of :func:`load_tns`: longest line (bytes) and most coordinates a line.
MAX_LINE_LENGTH = 1 << 20
MAX_MODES = 64

_GZIP_MAGIC = b"\x1f\x8b"
_BZ2_MAGIC = b"BZh"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_UTF8_BOM = b"\xef\xbb\xbf"


# ---------------------------------------------------------------------------------- helpers
class _FileObjectReader(io.RawIOBase):
    """Raw binary reads from a user's file object (binary or text), as they are consumed."""

    def __init__(self, f):
        self._f = f
        self._pending = b""

    def readable(self):
        return True

    def _fill(self, n):
        while len(self._pending) < n:
            chunk = self._f.read(max(n - len(self._pending), 1 << 16))
            if not chunk:
                break
            if isinstance(chunk, str):
                chunk = chunk.encode("utf-8")
            self._pending += bytes(chunk)

    def peek(self, n):
        self._fill(n)
        return self._pending[:n]

    def readinto(self, b):
        if not self._pending:
            self._fill(min(len(b), 1 << 24))
        k = min(len(b), len(self._pending))
        b[:k] = self._pending[:k]
        self._pending = self._pending[k:]
        return k


def _open_binary(path):
    """Return ``(readable binary stream, name)`` with decompression applied.

    Nothing is read ahead beyond a few bytes: the caller reads the stream in blocks.
    """
    if hasattr(path, "read"):
        # the caller's object is wrapped, not closed; compressed data is inflated as it is read
        raw = _FileObjectReader(path)
        head = raw.peek(6)
        name = str(getattr(path, "name", "<stream>"))
        source = io.BufferedReader(raw)
        if head.startswith(_GZIP_MAGIC):
            return gzip.GzipFile(fileobj=source, mode="rb"), name
        if head.startswith(_BZ2_MAGIC):
            return bz2.BZ2File(source, "rb"), name
        if head.startswith(_XZ_MAGIC):
            return lzma.LZMAFile(source, "rb"), name
        return source, name
    name = os.fspath(path)
    with open(name, "rb") as f:
        head = f.read(6)
    if head.startswith(_GZIP_MAGIC):
        return gzip.open(name, "rb"), name
    if head.startswith(_BZ2_MAGIC):
        return bz2.open(name, "rb"), name
    if head.startswith(_XZ_MAGIC):
        return lzma.open(name, "rb"), name
    return open(name, "rb"), name


def _iter_blocks(stream, block_bytes, max_line_length=None, name="<stream>"):
    """Yield chunks of ``stream`` that each end at a line break (the last one may not).

    A line longer than ``max_line_length`` bytes (line break excluded) raises ValueError, so
    that the memory used is bounded by ``block_bytes + max_line_length`` whatever the text.
    """
    limit = max_line_length
    leftover = b""
    lines_done = 0  # line breaks in the chunks yielded so far
    first = True

    def too_long(line):
        return ValueError(f"{name}, line {line}: the line is longer than {limit} bytes "
                          f"(the max_line_length of load_tns)")

    while True:
        chunk = stream.read(block_bytes)
        if first:
            if chunk.startswith(_UTF8_BOM):
                chunk = chunk[len(_UTF8_BOM):]
            first = False
        if not chunk:
            if leftover:
                yield leftover
            return
        buf = leftover + chunk if leftover else chunk
        cut = buf.rfind(b"\n")
        if limit is not None and cut != -1:
            # every complete line: jump from line start to the last break within reach
            pos = 0
            while pos <= cut:
                r = buf.rfind(b"\n", pos, min(pos + limit + 1, cut + 1))
                if r == -1:
                    if pos:  # the lines before it first: an error there comes first
                        yield buf[:pos]
                    raise too_long(lines_done + buf.count(b"\n", 0, pos) + 1)
                pos = r + 1
        if cut == -1:
            leftover = buf
        else:
            yield buf[:cut + 1]
            lines_done += buf.count(b"\n", 0, cut + 1)
            leftover = buf[cut + 1:]
        if limit is not None and len(leftover) > limit:
            raise too_long(lines_done + 1)



# ---------------------------------------------------------------------------------- labels
@contextlib.contextmanager
def _atomic_output(path):
    """The writing policy of every saver (:func:`save_tns`, :func:`write_labels`,
    :func:`~sktensor_fast.save_tensor`, :func:`~sktensor_fast.save_model`): yield a binary
    file object through which ``path`` is written, as ``open(path, "wb")`` would write it but
    never half-way.

    - A regular file (or a new one) is written under a temporary name in its own folder, then
      flushed to disk and renamed onto ``path`` when the block completes; on any exception
      (KeyboardInterrupt included) the temporary file is removed and an existing ``path`` is
      left as it was.
    - Permissions are those ``open()`` gives: a new file gets ``0o666`` less the umask, an
      existing file keeps its mode.
    - A symbolic link is followed: its target is written (through a temporary file in the
      target's folder), the link stays.
    - A character device or a FIFO (``/dev/null``, a named pipe) is written directly, never
      replaced by a regular file; a folder, a block device or a socket is refused with an
      ``OSError`` naming the path.
    """
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode            # follows links, as open() does
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
            with open(path, "wb") as f:
                yield f
                f.flush()
            return
        kind = ("a folder" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        cls = IsADirectoryError if stat.S_ISDIR(mode) else OSError
        raise cls(f"cannot write {path}: it is {kind} (write to a regular file, a character "
                  f"device or a FIFO)")
    target = os.path.realpath(path)
    directory, base = os.path.split(target)
    while True:
        tmp = os.path.join(directory, f".{base}.{secrets.token_hex(4)}.tmp")
        try:
            # 0o666 less the umask, as open() would create it
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                         0o666)
            break
        except FileExistsError:
            continue
        except OSError as exc:          # named after the file asked for, not the temporary
            raise type(exc)(exc.errno, exc.strerror, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        try:
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))  # keep the old file's mode
        except FileNotFoundError:
            pass
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # make the rename itself durable (not possible on every platform)
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _map_files(directory, ndim):
    found = []
    for k in range(1, ndim + 1):
        pattern = os.path.join(glob.escape(directory), f"mode-{k}-*.map")
        matches = sorted(glob.glob(pattern))
        if len(matches) > 1:
            raise ValueError(f"several label files for mode {k} in {directory}: "
                             f"{', '.join(os.path.basename(m) for m in matches)}")
        found.append(matches[0] if matches else None)
    return found


def _read_map(path):
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{path}, line {line}: the label file is not valid UTF-8 "
                         f"({exc.reason} at byte {exc.start})") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_labels(directory, shape):
    """Read the ``mode-{k}-*.map`` label files of a directory.

    Parameters
    ----------
    directory : str or path-like
        Folder holding the map files (usually the folder of the ``.tns`` file).
    shape : tuple of int
        Mode lengths; a map with fewer lines than its mode is an error, extra lines are dropped.

    Returns
    -------
    labels : list
        One entry per mode: the list of label strings (line ``j`` of the map names index
        ``j``), or None when the mode has no map file.

    Examples
    --------
    >>> import os, tempfile
    >>> from sktensor_fast.io import read_labels
    >>> d = tempfile.mkdtemp()
    >>> with open(os.path.join(d, "mode-1-city.map"), "w") as f:
    ...     _ = f.write("Paris\\nRome\\n")
    >>> read_labels(d, (2, 3))
    [['Paris', 'Rome'], None]
    """
    directory = os.fspath(directory)
    shape = _check_shape(shape)
    labels = []
    for k, path in enumerate(_map_files(directory, len(shape))):
        if path is None:
            labels.append(None)
            continue
        names = _read_map(path)
        if len(names) < shape[k]:
            raise ValueError(f"label file {path} has {len(names)} lines but mode {k + 1} has "
                             f"length {shape[k]}")
        labels.append(names[:shape[k]])
    return labels


def write_labels(directory, labels, names=None):
    """Write one ``mode-{k}-{name}.map`` file per mode with labels.

    Parameters
    ----------
    directory : str or path-like
        Destination folder (created if needed).
    labels : sequence
        One entry per mode: a sequence of strings, or None to write no file for that mode.
    names : sequence of str, optional
        Mode names used in the file names; ``"mode{k}"`` by default.

    Returns
    -------
    paths : list of str
        The files written.

    Examples
    --------
    >>> import tempfile
    >>> from sktensor_fast.io import write_labels, read_labels
    >>> d = tempfile.mkdtemp()
    >>> _ = write_labels(d, [["a", "b"], None], names=["letter", "unused"])
    >>> read_labels(d, (2, 1))
    [['a', 'b'], None]
    """
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    labels = list(labels)
    if names is None:
        names = [f"mode{k + 1}" for k in range(len(labels))]
    names = list(names)
    if len(names) != len(labels):
        raise ValueError(f"got {len(names)} mode names for {len(labels)} modes")
    paths = []
    for k, (lab, name) in enumerate(zip(labels, names)):
        if lab is None:
            continue
        name = str(name)
        if not name or any(c in name for c in "/\\\n") or name != name.strip():
            raise ValueError(f"mode name {name!r} cannot be used in a file name")
        lab = [str(x) for x in lab]
        bad = [x for x in lab if "\n" in x or "\r" in x]
        if bad:
            raise ValueError(f"label {bad[0]!r} of mode {k + 1} holds a line break")
        path = os.path.join(directory, f"mode-{k + 1}-{name}.map")
        try:
            data = "".join(x + "\n" for x in lab).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"a label of mode {k + 1} cannot be written in UTF-8: "
                             f"{exc.reason}") from None
        with _atomic_output(path) as f:
            f.write(data)
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------- loading
def _check_tns_args(shape, index_base, dtype):
    """``shape`` (None or checked), ``index_base`` (a nonnegative int) and ``dtype`` (float32
    or float64) of a .tns reader, checked; ValueError / TypeError naming the argument."""
    if shape is not None:
        shape = _check_shape(shape)
    if isinstance(index_base, bool) or int(index_base) != index_base or index_base < 0:
        raise ValueError(f"index_base must be a nonnegative integer, got {index_base!r}")
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"dtype must be float32 or float64, got {dtype}")
    return shape, int(index_base), dtype


def load_tns(path, shape=None, *, with_labels=False, dtype=np.float64, index_base=1,
             max_line_length=MAX_LINE_LENGTH, max_modes=MAX_MODES):
    """Load a sparse tensor from a FROSTT ``.tns`` file (plain or compressed).

    Parameters
    ----------
    path : str, path-like or binary file object
        The file.  gzip (``.tns.gz``), bzip2 and xz compression are recognised from the
        content.
    shape : tuple of int, optional
        Mode lengths.  Inferred as the largest coordinate of every mode when omitted (and, with
        ``with_labels=True``, extended to the length of a longer label file).
    with_labels : bool, default=False
        Also read the ``mode-{k}-*.map`` label files next to the tensor file.
    dtype : {np.float64, np.float32}, default=np.float64
        Value dtype of the result.
    index_base : int, default=1
        Value of the first index in the file (1 for FROSTT; 0 for zero-based files).
    max_line_length : int or None, default=1048576
        Longest line accepted, in bytes (line break excluded); None for no limit.  With a
        limit, the memory used while reading is bounded whatever the file holds.
    max_modes : int or None, default=64
        Most coordinates a line may hold; None for no limit.

    Returns
    -------
    X : SparseTensor
        The tensor; repeated coordinates are summed and zero values dropped.
    labels : list
        Only with ``with_labels=True``: one entry per mode, a list of label strings or None
        for a mode without a map file (see :func:`read_labels`).

    Raises
    ------
    ValueError
        With the file name and line number, when a line has a different number of columns than
        the first data line, a token is not a number, a coordinate is not an integer
        ``>= index_base`` or lies beyond ``shape``, a value is not finite (or too large for
        ``dtype``), a line is longer than ``max_line_length`` or holds more than ``max_modes``
        coordinates; with the file name and the coordinate, when repeated coordinates sum past
        the range of ``dtype``; also when the file holds no nonzeros and ``shape`` is not
        given, or a label file is too short or not UTF-8.

    Warns
    -----
    UserWarning
        With ``dtype=np.float32``, when values too small for float32 round to 0: they are
        dropped, as the constructor of :class:`SparseTensor` drops zeros.

    Examples
    --------
    >>> import os, tempfile
    >>> from sktensor_fast.io import load_tns, save_tns
    >>> from sktensor_fast.tensor import SparseTensor
    >>> path = os.path.join(tempfile.mkdtemp(), "x.tns")
    >>> save_tns(path, SparseTensor([[0, 1], [2, 0]], [1.5, 2.0]))
    >>> print(open(path).read(), end="")
    1 2 1.5
    3 1 2.0
    >>> load_tns(path)
    SparseTensor(shape=(3, 2), nnz=2, dtype=float64, density=0.333)
    """
    inferred = shape is None
    shape, index_base, dtype = _check_tns_args(shape, index_base, dtype)
    from .backends.checks import check_bool
    with_labels = check_bool(with_labels, "with_labels")
    if with_labels and hasattr(path, "read"):
        raise TypeError("with_labels=True needs a file path to locate the label files")
    for arg, value in (("max_line_length", max_line_length), ("max_modes", max_modes)):
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, numbers.Integral) or value < 1):
            raise ValueError(f"{arg} must be a positive integer or None, got {value!r}")
    from ._native import text
    from ._native.canonical import CanonicalError
    if hasattr(path, "read"):
        # a file object is read as it goes (and inflated as it is read), never whole
        stream, name = _open_binary(path)
        opened = (stream, name, None, False)
    else:
        opened = text.open_text(path)
        name = opened[1]
    report = {}
    try:
        subs, vals, shape_read, canonical = text.load_arrays(
            None, shape, index_base=int(index_base), dtype=dtype, block_bytes=_BLOCK_BYTES,
            max_line_length=max_line_length, max_modes=max_modes, opened=opened,
            report=report)
    except CanonicalError as exc:
        if exc.kind != "overflow":
            raise
        raise _SumOverflowError(exc.coord, dtype, int(index_base), f"{name}: ") from None
    if report.get("underflows"):
        _warn(f"{name}: {report['underflows']} value(s) too small for {dtype.name} "
              f"round to 0 and are dropped", UserWarning)
    if subs is None:
        if shape is None:
            raise ValueError(f"{name} holds no nonzeros; pass `shape` to load an empty tensor")
        subs = np.zeros((0, len(shape)), np.int64)
        vals = np.zeros(0, dtype)
    shape = tuple(shape_read) if shape is None else shape
    labels = None
    if with_labels:
        directory = os.path.dirname(os.path.abspath(os.fspath(path)))
        if inferred:
            # a label file may name indices that hold no nonzero: it sets the mode length
            grown = list(shape)
            for k, p in enumerate(_map_files(directory, len(shape))):
                if p is not None:
                    grown[k] = max(grown[k], len(_read_map(p)))
            shape = tuple(grown)
        labels = read_labels(directory, shape)
    if canonical:
        # checked, sorted, summed and free of zeros by the compiled passes
        X = SparseTensor._from_canonical(subs, vals, shape)
    else:
        # wider than the compiled sort handles: the constructor sorts
        try:
            X = SparseTensor(subs, vals, shape, dtype=dtype, copy=False)
        except _SumOverflowError as exc:
            raise _SumOverflowError(exc.coord, exc.dtype, index_base, f"{name}: ") from None
    return (X, labels) if with_labels else X


# ---------------------------------------------------------------------------------- saving
def save_tns(path, X, *, precision=None):
    """Write a sparse tensor in FROSTT ``.tns`` format (1-based coordinates, value last).

    Parameters
    ----------
    path : str, path-like or binary file object
        Destination; compressed with gzip when the name ends with ``.gz`` (``.bz2`` and
        ``.xz`` select bzip2 and xz).  A file is written whole or not at all: the text goes to
        a temporary file in the same folder, which replaces ``path`` only once complete (if
        writing fails or is interrupted, an existing ``path`` is left as it was).  As every
        saver of the package: the mode ``open()`` would give, a symbolic link written
        through, a character device or a FIFO written directly.
    X : SparseTensor or convertible (see :func:`~sktensor_fast.tensor.as_sparse_tensor`)
        The tensor.
    precision : int, optional
        Significant digits of non-integral values (``%.{precision}g``).  By default values are
        written with the shortest text that reads back as the same floating-point number (the
        same float32 for a float32 tensor loaded with ``dtype=np.float32``), so that
        :func:`load_tns` gives back exactly the tensor saved.  When every value is an integer,
        values are written without decimals.

    Examples
    --------
    >>> import io
    >>> from sktensor_fast.io import save_tns
    >>> from sktensor_fast.tensor import SparseTensor
    >>> buf = io.BytesIO()
    >>> save_tns(buf, SparseTensor([[0, 0, 1], [1, 2, 0]], [0.1, 3.0]))
    >>> print(buf.getvalue().decode(), end="")
    1 1 2 0.1
    2 3 1 3.0
    """
    X = as_sparse_tensor(X)
    if precision is not None:
        if isinstance(precision, bool) or int(precision) != precision or not 1 <= precision <= 17:
            raise ValueError(f"precision must be an integer from 1 to 17, got {precision!r}")
    vals = X.vals
    integral = bool(X.nnz == 0 or (np.all(vals == np.round(vals))
                                   and float(np.abs(vals).max()) < 2.0 ** 53))

    from ._native import text
    mode = "int" if integral else ("shortest" if precision is None else "g")

    def write(f, compression=None):
        # formatted in parallel, one buffer while the one before is written (and compressed,
        # every buffer a member of a multi-member file, in parallel)
        text.write_tns(f, X.subs, vals, mode=mode, precision=precision or 17,
                       compression=compression)

    if hasattr(path, "write"):
        write(path)
        return
    name = os.fspath(path)
    lower = name.lower()
    compression = next((c for suffix, c in ((".gz", "gzip"), (".bz2", "bz2"), (".xz", "xz"))
                        if lower.endswith(suffix)), None)
    with _atomic_output(name) as raw:
        write(raw, compression)
