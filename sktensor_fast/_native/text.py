"""Streaming FROSTT text I/O on top of the compiled parser and formatter of :mod:`._tns`.

Reading: the file (or its decompressed stream) is read in blocks of whole lines by a second
thread while the compiled parser works on the block before, so decompression and parsing
overlap and at most two blocks of text are held.  The coordinates and values go straight into
arrays that grow in place (``ndarray.resize``: the C library's ``realloc``, which moves pages
rather than bytes) and are cut to size at the end.  A bad line stops the parse; it is then read
again here to say what is wrong with it.

Writing: rows are formatted in parallel into a buffer while a second thread writes (and, for
compressed output, compresses) the buffer before.  Compressed output is a sequence of
independently compressed members (gzip, bzip2 and xz all define a file as such a sequence),
each compressed by its own thread.
"""
import bz2
import concurrent.futures
import gzip
import io
import lzma
import mmap
import os
import zlib

import numpy as np

from .. import _threads
from . import _tns

__all__ = ["read_tns", "write_tns", "load_arrays", "open_text", "BLOCK_BYTES", "TextError"]

#: Bytes of text parsed at a time (two such blocks are held: one parsed, one being read).
BLOCK_BYTES = 1 << 25

_UTF8_BOM = b"\xef\xbb\xbf"

#: Exceptions of the decompressors that mean "this file is damaged or cut short".
_READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)


class TextError(ValueError):
    """A problem with the content of a text file, with its file name and line number."""


# ---------------------------------------------------------------------------------- reading
def _fill(stream, buf, start):
    """Read into ``buf[start:]`` until it is full or the stream ends; return bytes read."""
    view = memoryview(buf)
    total = 0
    end = len(buf)
    while start + total < end:
        got = stream.readinto(view[start + total:])
        if not got:
            break
        total += got
    return total


def _coord_problem(index_base):
    if index_base == 1:
        return "is not a positive integer"
    return f"is not an integer >= {index_base}"


def _as_int(tok):
    """Value of an integer written as a number (``12``, ``+12``, ``12.0``, ``1.2e1``), or
    None."""
    if "_" in tok:
        return None
    try:
        return int(tok)
    except ValueError:
        pass
    try:
        value = float(tok)
    except ValueError:
        return None
    if not np.isfinite(value) or not value.is_integer():
        return None
    return int(value)


def _as_float(tok):
    if "_" in tok:
        return None
    try:
        return float(tok)
    except ValueError:
        return None


def diagnose_line(line, ncols, first_line, index_base, shape, dtype):
    """What is wrong with one line of a ``.tns`` file (a message), or None."""
    tokens = line.split()
    if len(tokens) != ncols:
        return (f"expected {ncols} columns (as on line {first_line}) but found "
                f"{len(tokens)}")
    nmodes = ncols - 1
    for k, tok in enumerate(tokens[:nmodes]):
        value = _as_int(tok)
        if value is None:
            if _as_float(tok) is None:
                return f"{tok!r} is not a number"
            return f"coordinate {tok!r} in mode {k + 1} {_coord_problem(index_base)}"
        if value - index_base >= 2 ** 63 - 1:
            return (f"coordinate {tok!r} in mode {k + 1} is too large: a zero-based coordinate "
                    f"must be below 2**63 - 1")
        if value < index_base:
            return f"coordinate {tok!r} in mode {k + 1} {_coord_problem(index_base)}"
        if shape is not None and value - index_base >= shape[k]:
            return (f"coordinate {tok} in mode {k + 1} is beyond the mode length {shape[k]} "
                    f"given in `shape`")
    tok = tokens[nmodes]
    value = _as_float(tok)
    if value is None:
        return f"{tok!r} is not a number"
    if not np.isfinite(value):
        return f"value {tok!r} is not finite"
    with np.errstate(over="ignore"):
        too_large = dtype == np.float32 and np.isinf(np.float32(value))
    if too_large:
        return f"value {tok} is too large for {dtype.name}"
    return None


def _first_data_line(buf, start, end):
    """``(offset, text)`` of the first line of ``buf[start:end]`` that is neither blank nor a
    comment, or None."""
    pos = start
    while pos < end:
        nl = buf.find(b"\n", pos, end)
        stop = end if nl == -1 else nl
        text = bytes(buf[pos:stop]).strip()
        if text and not text.startswith(b"#"):
            return pos, bytes(buf[pos:stop]).decode("latin-1")
        pos = stop + 1
    return None


class _Grow:
    """Coordinate and value arrays that grow in place."""

    def __init__(self, nmodes, dtype, capacity):
        capacity = max(int(capacity), 1024)
        self.subs = np.empty((capacity, nmodes), dtype=np.int64)
        self.vals = np.empty(capacity, dtype=dtype)

    def reserve(self, rows):
        cap = self.subs.shape[0]
        if rows > cap:
            new = max(rows, cap + cap // 2)
            self.subs.resize((new, self.subs.shape[1]), refcheck=False)
            self.vals.resize(new, refcheck=False)

    def finish(self, rows):
        self.subs.resize((rows, self.subs.shape[1]), refcheck=False)
        self.vals.resize(rows, refcheck=False)
        return self.subs, self.vals


def _stream_blocks(stream, size, state):
    """Blocks of whole lines ``(buffer, view, start, stop, last)`` read from ``stream`` by a second
    thread one block ahead; ``state["lines"]`` (lines before the block, kept by the consumer)
    names the line of a read error."""
    bufs = [bytearray(size), bytearray(size)]
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sktensor-read")
    future = pool.submit(_fill, stream, bufs[0], 0)
    cur = 0
    carry = 0                    # bytes carried over at the start of bufs[cur]
    first = True
    try:
        while True:
            try:
                got = future.result()
            except _READ_ERRORS as exc:
                if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
                    raise
                raise TextError(f"{state['name']}, line {state['lines'] + 1}: cannot read the "
                                f"file: {exc}") from exc
            future = None
            buf = bufs[cur]
            n = carry + got
            eof = n < len(buf)
            if first:
                # the mark is skipped in the first block, also when that block grows
                first = False
                lead = 3 if buf[:3] == _UTF8_BOM else 0
            start = lead
            if eof:
                cut = n
            else:
                cut = buf.rfind(b"\n", start, n) + 1
                if cut == 0:
                    limit = state.get("limit")
                    if limit is not None and n - start > limit:
                        raise TextError(_too_long(state["name"], state["lines"] + 1, limit))
                    # a line longer than the block: make the block larger and read on
                    buf.extend(bytes(len(buf)))
                    carry = n
                    future = pool.submit(_fill, stream, buf, carry)
                    continue
            tail = n - cut
            other = bufs[1 - cur]
            if len(other) < max(len(buf), tail):
                other.extend(bytes(max(len(buf), tail) - len(other)))
            if tail:
                other[:tail] = buf[cut:n]
            if not eof:
                future = pool.submit(_fill, stream, other, tail)
            view = memoryview(buf)
            try:
                yield buf, view, start, cut, eof
            finally:
                view.release()
            lead = 0
            if eof:
                return
            cur = 1 - cur
            carry = tail
    finally:
        if future is not None:
            try:
                future.result()
            except Exception:  # the error that matters is the one being raised
                pass
        pool.shutdown(wait=True)


def _too_long(name, line, limit):
    return (f"{name}, line {line}: the line is longer than {limit} bytes (the max_line_length "
            f"of load_tns)")


def _mapped_blocks(mm, size):
    """Blocks of whole lines of a memory-mapped file: no copy, the parser threads read the
    pages (from the page cache) themselves."""
    n = len(mm)
    start = 3 if mm[:3] == _UTF8_BOM else 0
    view = memoryview(mm)
    try:
        while True:
            stop = min(start + size, n)
            if stop < n:
                cut = mm.rfind(b"\n", start, stop) + 1
                if cut == 0:
                    nl = mm.find(b"\n", stop)
                    cut = n if nl == -1 else nl + 1
            else:
                cut = n
            yield mm, view, start, cut, cut >= n
            if cut >= n:
                return
            start = cut
    finally:
        view.release()


def read_tns(stream, name, shape=None, index_base=1, dtype=np.float64, *,
             block_bytes=None, size_hint=None, exact_size=False, num_threads=None,
             max_line_length=None, max_modes=None):
    """Parse a ``.tns`` stream into coordinates and values (file order).

    Parameters
    ----------
    stream : binary stream with ``readinto``, or an ``mmap.mmap``
        The text, already decompressed (a memory map is parsed in place).
    name : str
        File name for the messages.
    shape : tuple of int, optional
        Mode lengths to check the coordinates against.
    index_base : int
        Value of the first index in the file.
    dtype : float32 or float64
        Value dtype.
    block_bytes : int, optional
        Bytes per block (default :data:`BLOCK_BYTES`).
    size_hint : int, optional
        Bytes the text will have (e.g. the file size): sizes the arrays from the first block.
    exact_size : bool, default=False
        ``size_hint`` is exact (an uncompressed file): buffers need not be larger.
    num_threads : int, optional
        Threads of the parser (default: the package's setting).
    max_line_length : int, optional
        Longest line accepted (bytes, line break excluded); a longer one is an error, and no
        buffer grows beyond a block and such a line.
    max_modes : int, optional
        Most coordinates a line may hold.

    Returns
    -------
    dict
        ``subs`` (int64, zero-based, rows x modes; None when the file has no data line),
        ``vals``, ``maxima`` (largest coordinate per mode), ``order`` (2: rows strictly
        increase, 1: some repeat, 0: unsorted), ``zeros`` (zero values), ``underflows``
        (values not 0 in the text that round to 0 in ``dtype``), ``lines``.

    Raises
    ------
    TextError
        ``"{name}, line {n}: ..."`` for the first bad line, or when the stream cannot be read
        (a damaged or truncated compressed file).
    """
    dtype = np.dtype(dtype)
    nt = _threads.get_num_threads() if num_threads is None else max(1, int(num_threads))
    size = int(block_bytes or BLOCK_BYTES)
    if isinstance(stream, mmap.mmap):
        size_hint = len(stream)
        blocks = _mapped_blocks(stream, size)
    else:
        if size_hint and exact_size:
            size = max(1, min(size, int(size_hint) + 1))   # a small file needs no large buffers
        state = {"name": name, "lines": 0, "limit": max_line_length}
        blocks = _stream_blocks(stream, size, state)
    shape_arr = None if shape is None else np.asarray(shape, dtype=np.int64)
    lines_before = 0
    ncols = first_line = None
    out = None
    rows = 0
    order = 2
    zeros = 0
    underflows = 0
    maxima = None
    last_row = None
    limit = -1 if max_line_length is None else int(max_line_length)
    try:
        for buf, view, start, cut, eof in blocks:
            nl, bad = _tns.line_stats(view, start, cut, limit, nt)
            # lines before a line over the limit are read first: an error there comes first
            end = cut if bad < 0 else start + bad
            if ncols is None:
                found = _first_data_line(buf, start, end)
                if found is not None:
                    off, text = found
                    first_line = lines_before + _tns.count_newlines(view, start, off) + 1
                    ncols = len(text.split())
                    where = f"{name}, line {first_line}"
                    if ncols < 2:
                        raise TextError(f"{where}: found {ncols} column; a nonzero needs its "
                                        f"coordinates followed by its value")
                    if max_modes is not None and ncols - 1 > max_modes:
                        raise TextError(f"{where}: found {ncols - 1} coordinates, more than "
                                        f"max_modes={max_modes} (pass a larger max_modes to "
                                        f"load_tns if the tensor really has that many modes)")
                    if shape is not None and ncols - 1 != len(shape):
                        raise TextError(f"{where}: found {ncols - 1} coordinates but `shape` "
                                        f"{tuple(shape)} has {len(shape)} modes")
                    hint = None
                    if size_hint:
                        per_line = max((cut - off) / max(nl, 1), 1.0)
                        hint = int(size_hint / per_line * 1.02) + 1024
                    out = _Grow(ncols - 1, dtype, hint or (nl + 1))
            if ncols is not None and end > start:
                out.reserve(rows + nl + 1)
                rep = _tns.parse(view[start:end], end - start, ncols, index_base, shape_arr,
                                 out.subs, out.vals, rows, nt)
                if rep["error"] >= 0:
                    off = start + rep["error"]
                    line_no = lines_before + _tns.count_newlines(view, start, off) + 1
                    stop = buf.find(b"\n", off, end)
                    text = bytes(buf[off:end if stop == -1 else stop]).decode("latin-1")
                    msg = diagnose_line(text, ncols, first_line, index_base, shape, dtype)
                    raise TextError(f"{name}, line {line_no}: "
                                    f"{msg or 'cannot be read as a nonzero'}")
                got_rows = rep["rows"]
                if got_rows:
                    if last_row is not None and order:
                        c = _tns.compare_rows(out.subs[rows], last_row)
                        if c < 0:
                            order = 0
                        elif c == 0:
                            order = min(order, 1)
                    order = min(order, rep["order"])
                    zeros += rep["zeros"]
                    underflows += rep["underflows"]
                    maxima = rep["maxima"] if maxima is None else np.maximum(maxima,
                                                                             rep["maxima"])
                    rows += got_rows
                    last_row = out.subs[rows - 1].copy()
            if bad >= 0:
                line_no = lines_before + _tns.count_newlines(view, start, start + bad) + 1
                raise TextError(_too_long(name, line_no, max_line_length))
            lines_before += nl
            if not isinstance(stream, mmap.mmap):
                state["lines"] = lines_before
            if eof:
                if cut > start and bytes(buf[cut - 1:cut]) != b"\n":
                    lines_before += 1
    finally:
        blocks.close()
    if out is None:
        return {"subs": None, "vals": None, "maxima": None, "order": 2, "zeros": 0,
                "underflows": 0, "lines": lines_before}
    subs, vals = out.finish(rows)
    return {"subs": subs, "vals": vals, "maxima": maxima, "order": order, "zeros": zeros,
            "underflows": underflows, "lines": lines_before}


# ---------------------------------------------------------------------------------- files
_GZIP_MAGIC = b"\x1f\x8b"
_BZ2_MAGIC = b"BZh"
_XZ_MAGIC = b"\xfd7zXZ\x00"


def _decompress(raw):
    if raw.startswith(_GZIP_MAGIC):
        return gzip.decompress(raw)
    if raw.startswith(_BZ2_MAGIC):
        return bz2.decompress(raw)
    if raw.startswith(_XZ_MAGIC):
        return lzma.decompress(raw)
    return raw


def open_text(path):
    """``(binary stream, name, size hint or None, whether the hint is exact)`` for a path or a
    binary file object.

    Compression is recognised from the first bytes.  A file object is read whole (and
    decompressed in memory), as it may not support seeking.
    """
    if hasattr(path, "read"):
        raw = path.read()
        if isinstance(raw, str):
            raw = raw.encode("utf-8")
        name = str(getattr(path, "name", "<stream>"))
        try:
            data = _decompress(bytes(raw))
        except _READ_ERRORS as exc:
            raise TextError(f"{name}, line 1: cannot read the file: {exc}") from exc
        return io.BytesIO(data), name, len(data), True
    name = os.fspath(path)
    f = open(name, "rb", buffering=0)
    try:
        head = f.read(6)
        f.seek(0)
        size = os.fstat(f.fileno()).st_size
        if head.startswith(_GZIP_MAGIC):
            hint = None
            if size >= 18:
                f.seek(size - 4)
                # bounded: a multi-member file states its last member's size only
                hint = min(int.from_bytes(f.read(4), "little"), 32 * size) or None
                f.seek(0)
            # the last member's size modulo 2**32: a hint for the arrays only
            return (gzip.GzipFile(fileobj=io.BufferedReader(f, 1 << 20), mode="rb"), name,
                    hint, False)
        if head.startswith(_BZ2_MAGIC):
            return bz2.BZ2File(io.BufferedReader(f, 1 << 20), "rb"), name, None, False
        if head.startswith(_XZ_MAGIC):
            return lzma.LZMAFile(io.BufferedReader(f, 1 << 20), "rb"), name, None, False
        return f, name, size, True
    except BaseException:
        f.close()
        raise


def load_arrays(path, shape=None, *, index_base=1, dtype=np.float64, block_bytes=None,
                num_threads=None, max_line_length=None, max_modes=None, opened=None,
                report=None):
    """Read a ``.tns`` file into the canonical arrays of a tensor.

    Returns ``(subs, vals, shape, canonical)``: sorted, duplicate-free coordinates, nonzero
    values and the shape (``shape`` as given, or one past the largest coordinate of every
    mode); ``subs`` is None when the file holds no data line.  ``canonical`` is False when the
    tensor is too wide for the compiled sort (:data:`.canonical.MAX_KEY_BITS`): then the
    arrays are in file order and still need sorting.

    ``opened``: ``(binary stream, name, size hint, exact)`` to read instead of opening
    ``path`` with :func:`open_text` (the stream is closed here).  ``report``: a dict that
    receives ``underflows`` (values that round to 0 in ``dtype``) and ``lines``.
    Errors of the canonical form (:class:`.canonical.CanonicalError`) pass through.
    """
    from .canonical import canonical_from
    stream, name, hint, exact = open_text(path) if opened is None else opened
    mm = None
    if exact and hint and isinstance(stream, io.FileIO):
        try:
            # parse the page cache in place: no copy of the text, every thread reads its part
            mm = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            mm = None
    try:
        got = read_tns(stream if mm is None else mm, name, shape, index_base, dtype,
                       block_bytes=block_bytes, size_hint=hint, exact_size=exact,
                       num_threads=num_threads, max_line_length=max_line_length,
                       max_modes=max_modes)
    finally:
        if mm is not None:
            mm.close()
        # closing the decompressor does not close the file under it
        inner = getattr(stream, "fileobj", None) or getattr(stream, "_fp", None)
        stream.close()
        if inner is not None and hasattr(inner, "close"):
            inner.close()
    if report is not None:
        report.update(underflows=got["underflows"], lines=got["lines"])
    if got["subs"] is None:
        return None, None, shape, True
    if shape is None:
        shape = tuple(int(m) + 1 for m in got["maxima"])
    if got["order"] == 2 and got["zeros"] == 0:
        # every coordinate was checked by the parser and the rows are in order
        return got["subs"], got["vals"], tuple(shape), True
    arrays = [got.pop("subs"), got.pop("vals")]
    res = canonical_from(arrays, shape, num_threads=num_threads)
    if res is None:
        return arrays[0], arrays[1], tuple(shape), False
    return res[0], res[1], tuple(shape), True


# ---------------------------------------------------------------------------------- writing
#: Rows formatted per buffer (two buffers: one formatted while the other is written).
WRITE_ROWS = 1 << 19

_COMPRESSORS = {
    "gzip": lambda data, level: gzip.compress(data, compresslevel=level, mtime=0),
    "bz2": lambda data, level: bz2.compress(data, compresslevel=level),
    "xz": lambda data, level: lzma.compress(data, preset=level),
}
_DEFAULT_LEVEL = {"gzip": 6, "bz2": 9, "xz": 6}


def write_tns(f, subs, vals, *, mode, precision=17, compression=None, level=None,
              num_threads=None):
    """Write rows as FROSTT text to the binary file ``f``.

    Parameters
    ----------
    f : binary file
        Destination (written in order; not closed).
    subs, vals : ndarray
        Zero-based int64 coordinates (rows x modes) and float32/float64 values.
    mode : {"int", "g", "shortest"}
        Values as integers (the caller checked that they are), with ``%.{precision}g``, or with
        the shortest of ``%.15g``/``%.16g``/``%.17g`` that reads back as the same number.
    compression : {None, "gzip", "bz2", "xz"}
        Compress every buffer as one member of a multi-member file, in parallel.
    num_threads : int, optional
        Threads of the formatter and the compressors.
    """
    nt = _threads.get_num_threads() if num_threads is None else max(1, int(num_threads))
    code = {"int": 0, "g": 1, "shortest": 2}[mode]
    subs = np.ascontiguousarray(subs, dtype=np.int64)
    vals = np.ascontiguousarray(vals)
    n, N = subs.shape
    if n == 0:
        return
    rows = min(WRITE_ROWS, n)
    rmax = _tns.row_bytes_max(N)
    bufs = [np.empty(rows * rmax, dtype=np.uint8), np.empty(rows * rmax, dtype=np.uint8)]
    if compression is None:
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sktensor-write")
        writes = [None, None]
        try:
            for i, lo in enumerate(range(0, n, rows)):
                hi = min(lo + rows, n)
                if writes[i % 2] is not None:
                    writes[i % 2].result()    # the buffer about to be reused is written
                buf = bufs[i % 2]
                used = _tns.format_rows(subs, vals, lo, hi, code, int(precision), buf, nt)
                # one writer thread: the buffers are written in order
                writes[i % 2] = pool.submit(f.write, memoryview(buf)[:used])
            for w in writes:
                if w is not None:
                    w.result()
        finally:
            pool.shutdown(wait=True)
        return
    compress = _COMPRESSORS[compression]
    level = _DEFAULT_LEVEL[compression] if level is None else int(level)
    workers = max(1, nt)
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="sktensor-zip")
    try:
        queue = []
        buf = bufs[0]
        for lo in range(0, n, rows):
            hi = min(lo + rows, n)
            used = _tns.format_rows(subs, vals, lo, hi, code, int(precision), buf, nt)
            queue.append(pool.submit(compress, bytes(memoryview(buf)[:used]), level))
            # write finished members in order, keeping about one member per thread in flight
            while queue and (queue[0].done() or len(queue) > workers):
                f.write(queue.pop(0).result())
        for fut in queue:
            f.write(fut.result())
    finally:
        pool.shutdown(wait=True)
