"""Reading and writing sparse tensors in the FROSTT ``.tns`` text format.

A ``.tns`` file holds one nonzero a line: ``N`` whitespace-separated coordinates (1-based by
default) followed by the value.  Blank lines and lines whose first non-blank character is ``#``
are comments.  Files may be compressed with gzip (also bzip2 or xz); compression is recognised
from the first bytes of the file, so the suffix does not matter when reading.

Parsing is vectorised with NumPy: the text is read in blocks of whole lines, token boundaries are
found with array operations and plain integers and short decimals are decoded digit by digit on
whole arrays at once.  Only tokens that need it (exponents, very long mantissas, malformed text)
go through a slower path, so that well-formed files of tens of millions of lines load in seconds.
Every problem with the content is reported as a :class:`ValueError` naming its line.
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
import warnings
import zlib

import numpy as np

from .tensor import SparseTensor, _SumOverflowError, _check_shape, as_sparse_tensor

__all__ = ["load_tns", "save_tns", "read_labels", "write_labels"]

#: Bytes of text parsed at a time; bounds the memory used on top of the result.
_BLOCK_BYTES = 1 << 24
#: Nonzeros formatted and written at a time by :func:`save_tns`.
_WRITE_CHUNK = 1 << 20
#: Default limits of :func:`load_tns`: longest line (bytes) and most coordinates a line.
MAX_LINE_LENGTH = 1 << 20
MAX_MODES = 64
#: Largest zero-based coordinate + 1 (a mode length must fit in int64).
_COORD_LIMIT = 2 ** 63 - 1
# errors of the decompressors that are not OSError
_READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)

_GZIP_MAGIC = b"\x1f\x8b"
_BZ2_MAGIC = b"BZh"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_UTF8_BOM = b"\xef\xbb\xbf"

# longest token decoded by the vectorised path; longer ones take the slow path
_MAX_FAST_TOKEN = 20
# blank bytes put before a block so that 16-byte windows ending at a token stay inside it
_PAD = 16
# exact powers of ten (every one up to 1e22 is a double)
_POW10 = np.array([float(10 ** k) for k in range(23)])


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


def _blank_comment_lines(a, block, offset):
    """Overwrite the comment lines of ``block`` (copied at ``a[offset:]``) with spaces.

    Line breaks are kept, so line numbers do not change.
    """
    pos = block.find(b"#")
    while pos != -1:
        start = block.rfind(b"\n", 0, pos) + 1
        end = block.find(b"\n", pos)
        if end == -1:
            end = len(block)
        if not block[start:pos].strip():
            a[offset + start:offset + end] = 32
        pos = block.find(b"#", end)


def _decode_digits(words, ends, lengths):
    """Decode tokens made only of 1 to 16 ASCII digits, all at once.

    ``words[i]`` holds the eight bytes ``a[i:i + 8]`` as a little-endian integer, so
    ``words[end - 8]`` holds the last eight characters of a token.  The bytes that precede a
    short token are masked to zero (they then read as leading zeros) and the eight digits of a
    word are combined in three multiply-shift-mask steps: pairs, then groups of four, then all
    eight.  Tokens longer than eight digits add a second word for their leading digits.
    """
    low_len = np.minimum(lengths, 8)
    out = _combine8(words[ends - 8], low_len)
    high_len = lengths - low_len
    if high_len.shape[0] and high_len.max() > 0:
        big = np.flatnonzero(high_len)
        high = _combine8(words[ends[big] - 16], high_len[big])
        out[big] += high * np.uint64(10 ** 8)
    return out


def _combine8(x, length):
    x &= _KEEP_TOP[length]
    x &= np.uint64(0x0F0F0F0F0F0F0F0F)
    x *= np.uint64(10 * 2 ** 8 + 1)
    x >>= np.uint64(8)
    x &= np.uint64(0x00FF00FF00FF00FF)
    x *= np.uint64(100 * 2 ** 16 + 1)
    x >>= np.uint64(16)
    x &= np.uint64(0x0000FFFF0000FFFF)
    x *= np.uint64(10000 * 2 ** 32 + 1)
    x >>= np.uint64(32)
    return x


# mask keeping the top ``L`` bytes of a little-endian 64-bit word (the last L characters)
_KEEP_TOP = np.array([~((1 << (8 * (8 - L))) - 1) & 0xFFFFFFFFFFFFFFFF for L in range(9)],
                     dtype=np.uint64)


def _decode_simple(a, starts, ends):
    """Decode tokens of the form ``[+-]digits[.digits]`` (one dot at most).

    Returns ``(values, ok)``: ``ok`` flags the tokens decoded exactly, that is those with a
    sign, digits and at most one dot, and at most 15 significant digits (with a dot) or 16
    (without): then ``mantissa / 10**k`` is a single correctly rounded operation on exact
    operands, the same double as ``float(token)``.  ``a`` must extend at least
    ``_MAX_FAST_TOKEN`` bytes past every token.
    """
    n = starts.shape[0]
    lengths = ends - starts
    if n == 0:
        return np.zeros(0, np.float64), np.ones(0, bool)
    maxlen = int(min(lengths.max(), _MAX_FAST_TOKEN))
    mant = np.zeros(n, np.int64)
    ndig = np.zeros(n, np.int64)
    nfrac = np.zeros(n, np.int64)
    ndots = np.zeros(n, np.int64)
    bad = lengths > _MAX_FAST_TOKEN
    neg = np.zeros(n, bool)
    for j in range(maxlen):
        active = lengths > j
        ch = a[starts + j]
        d = ch - np.uint8(48)
        isdig = (d < 10) & active
        isdot = (ch == 46) & active
        nfrac += isdig & (ndots > 0)
        ndots += isdot
        ok_char = isdig | isdot
        if j == 0:
            neg = ch == 45
            ok_char |= neg | (ch == 43)
        bad |= active & ~ok_char
        mant = np.where(isdig, mant * 10 + d, mant)
        ndig += isdig
    ok = ~bad & (ndig >= 1) & (((ndots == 0) & (ndig <= 16)) | ((ndots == 1) & (ndig <= 15)))
    values = mant.astype(np.float64)
    has_dot = ndots > 0
    if has_dot.any():
        values = np.where(has_dot, values / _POW10[np.minimum(nfrac, 22)], values)
    values = np.where(neg, -values, values)
    return values, ok


def _token_text(a, s, e):
    return bytes(a[s:e]).decode("latin-1")


def _float_or_none(tok):
    if b"_" in tok:
        return None
    try:
        return float(tok)
    except ValueError:
        return None


def _int_or_none(tok):
    """Value of an integer written as a number (``12``, ``+12``, ``12.0``, ``1.2e1``)."""
    if b"_" in tok:
        return None
    try:
        return int(tok)
    except ValueError:
        pass
    value = _float_or_none(tok)
    if value is None or not np.isfinite(value) or not value.is_integer():
        return None
    return int(value)


class _BlockParser:
    """Turns blocks of whole lines into coordinates and values, checking everything."""

    def __init__(self, name, shape, index_base, dtype=np.float64, max_modes=None):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape = shape
        self.index_base = int(index_base)
        self.max_modes = max_modes
        self.underflows = 0  # nonzero values that round to 0 in ``dtype``
        self.ncols = None
        self.first_line = None
        self.lines_before = 0
        self.coords = []
        self.vals = []
        self.maxima = None

    def _where(self, line):
        return f"{self.name}, line {line}"

    def _coord_problem(self):
        if self.index_base == 1:
            return "is not a positive integer"
        return f"is not an integer >= {self.index_base}"

    def feed(self, block):
        nbytes = len(block)
        pad = _PAD
        # copy with blank margins: windows may then read before the first and after the last
        # token without bounds checks
        a = np.empty(pad + nbytes + _MAX_FAST_TOKEN, np.uint8)
        a[:pad] = 32
        a[pad:pad + nbytes] = np.frombuffer(block, dtype=np.uint8)
        a[pad + nbytes:] = 32
        if block.find(b"#") != -1:
            _blank_comment_lines(a, block, pad)
        offset = self.lines_before
        # ---- token boundaries -------------------------------------------------------
        ws = (a == 32) | ((a - np.uint8(9)) < 5)
        nonws = ~ws
        st = nonws.copy()
        st[1:] &= ws[:-1]
        tok_s = np.flatnonzero(st)
        del st
        en = nonws
        en[:-1] &= ws[1:]
        tok_e = np.flatnonzero(en) + 1
        del en, nonws
        ntok = tok_s.shape[0]
        if ntok == 0:
            # only blanks and comments: no per-line arrays needed
            self.lines_before += block.count(b"\n")
            return
        special_bytes = np.flatnonzero(((a - np.uint8(48)) > 9) & ~ws)
        del ws
        nl = np.flatnonzero(a == 10)
        self.lines_before += nl.shape[0]
        line_starts = np.concatenate(([pad], nl + 1))
        line_ends = np.append(nl, pad + nbytes)
        if line_starts[-1] >= pad + nbytes:
            line_starts = line_starts[:-1]
            line_ends = line_ends[:-1]
        nlines = line_starts.shape[0]
        errors = []
        if self.ncols is None:
            first = int(np.searchsorted(line_starts, tok_s[0], side="right")) - 1
            self.ncols = int(np.searchsorted(tok_s, line_ends[first])
                             - np.searchsorted(tok_s, line_starts[first]))
            self.first_line = offset + first + 1
            if self.ncols < 2:
                raise ValueError(
                    f"{self._where(self.first_line)}: found {self.ncols} column; a nonzero "
                    f"needs its coordinates followed by its value")
            if self.max_modes is not None and self.ncols - 1 > self.max_modes:
                raise ValueError(
                    f"{self._where(self.first_line)}: found {self.ncols - 1} coordinates, more "
                    f"than max_modes={self.max_modes} (pass a larger max_modes to load_tns if "
                    f"the tensor really has that many modes)")
            if self.shape is not None and self.ncols - 1 != len(self.shape):
                raise ValueError(
                    f"{self._where(self.first_line)}: found {self.ncols - 1} coordinates but "
                    f"`shape` {self.shape} has {len(self.shape)} modes")
        ncols = self.ncols
        nmodes = ncols - 1
        # ---- rows: lines with tokens, each of which must hold ncols tokens --------------
        S = E = None
        if ntok == nlines * ncols:
            # the usual case, no blank lines: check that tokens fall into lines as expected
            S = tok_s.reshape(nlines, ncols)
            E = tok_e.reshape(nlines, ncols)
            if np.all(S[:, 0] >= line_starts) and np.all(E[:, -1] <= line_ends):
                data_lines = np.arange(nlines)
                tok_index = None
            else:
                S = E = None
        if S is None:
            first_tok = np.searchsorted(tok_s, line_starts)
            counts = np.diff(np.append(first_tok, ntok))
            data_lines = np.flatnonzero(counts)
            wrong = np.flatnonzero(counts[data_lines] != ncols)
            if wrong.shape[0]:
                bad_line = int(data_lines[wrong[0]])
                errors.append((offset + bad_line + 1,
                               f"expected {ncols} columns (as on line {self.first_line}) but "
                               f"found {int(counts[bad_line])}"))
                data_lines = data_lines[:wrong[0]]
            tok_index = first_tok[data_lines][:, None] + np.arange(ncols)
            S = tok_s[tok_index]
            E = tok_e[tok_index]
        nrows = data_lines.shape[0]
        row_line = offset + data_lines + 1  # 1-based line number of every row
        # tokens holding anything but digits need the careful path
        if special_bytes.shape[0]:
            special = np.zeros(ntok, bool)
            special[np.searchsorted(tok_s, special_bytes, side="right") - 1] = True
            special = special.reshape(nlines, ncols) if tok_index is None else special[tok_index]
        else:
            special = None
        del tok_s, tok_e
        words = np.ndarray((a.shape[0] - 7,), dtype="<u8", buffer=a, strides=(1,))

        # ---- coordinates --------------------------------------------------------------
        cs = S[:, :nmodes].ravel()
        ce = E[:, :nmodes].ravel()
        clen = ce - cs
        slow = clen > 16
        if special is not None:
            slow |= special[:, :nmodes].ravel()
        coords = _decode_digits(words, ce, np.minimum(clen, 16)).view(np.int64)
        base = self.index_base
        coord_bad = np.zeros(coords.shape[0], bool)
        if slow.any():
            idx = np.flatnonzero(slow)
            v, ok = _decode_simple(a, cs[idx], ce[idx])
            ok &= (v == np.round(v)) & (np.abs(v) < 2.0 ** 53)
            coords[idx[ok]] = v[ok].astype(np.int64)
            for i in idx[~ok]:
                tok = bytes(a[cs[i]:ce[i]])
                value = _int_or_none(tok)
                if value is not None and value - base >= _COORD_LIMIT:
                    coords[i] = base
                    errors.append((int(row_line[i // nmodes]),
                                   f"coordinate {tok.decode('latin-1')!r} in mode "
                                   f"{i % nmodes + 1} is too large: a zero-based coordinate "
                                   f"must be below 2**63 - 1"))
                elif value is None or value < base:
                    coords[i] = base
                    if _float_or_none(tok) is None:
                        errors.append((int(row_line[i // nmodes]),
                                       f"{tok.decode('latin-1')!r} is not a number"))
                        break
                    coord_bad[i] = True
                else:
                    coords[i] = value
        coord_bad |= coords < base
        if coord_bad.any():
            i = int(np.flatnonzero(coord_bad)[0])
            errors.append((int(row_line[i // nmodes]),
                           f"coordinate {_token_text(a, cs[i], ce[i])!r} in mode "
                           f"{i % nmodes + 1} {self._coord_problem()}"))
        coords = coords.reshape(nrows, nmodes)
        if base:
            coords -= base
        if self.shape is not None and nrows:
            over = coords >= np.asarray(self.shape, dtype=np.int64)
            if over.any():
                r, k = np.argwhere(over)[0]
                errors.append((int(row_line[r]),
                               f"coordinate {_token_text(a, S[r, k], E[r, k])} in mode {k + 1} "
                               f"is beyond the mode length {self.shape[k]} given in `shape`"))
        # ---- values -------------------------------------------------------------------
        vs = np.ascontiguousarray(S[:, nmodes])
        ve = np.ascontiguousarray(E[:, nmodes])
        vlen = ve - vs
        slow = vlen > 16
        if special is not None:
            slow |= special[:, nmodes]
        vals = _decode_digits(words, ve, np.minimum(vlen, 16)).astype(np.float64)
        if slow.any():
            idx = np.flatnonzero(slow)
            v, ok = _decode_simple(a, vs[idx], ve[idx])
            vals[idx[ok]] = v[ok]
            idx = idx[~ok]
            if idx.shape[0]:
                parsed, err = _parse_floats(a, vs[idx], ve[idx])
                if err is not None:
                    i = int(idx[err])
                    errors.append((int(row_line[i]),
                                   f"{_token_text(a, vs[i], ve[i])!r} is not a number"))
                    idx, parsed = idx[:err], parsed[:err]  # the tokens read before it
                vals[idx] = parsed
                finite = np.isfinite(parsed)
                if not finite.all():
                    i = int(idx[np.flatnonzero(~finite)[0]])
                    errors.append((int(row_line[i]),
                                   f"value {_token_text(a, vs[i], ve[i])!r} is not finite"))
        if self.dtype != np.float64 and nrows:
            # a value rounds to the nearest float32: only what rounds to inf is too large.
            # Rows from the first error on may hold undecoded values: they are not checked.
            checked = nrows if not errors else int(np.searchsorted(row_line, min(errors)[0]))
            with np.errstate(over="ignore", under="ignore"):
                narrow = vals.astype(self.dtype)
            too_big = ~np.isfinite(narrow[:checked])
            if too_big.any():
                i = int(np.flatnonzero(too_big)[0])
                errors.append((int(row_line[i]),
                               f"value {_token_text(a, vs[i], ve[i])} is too large for "
                               f"{self.dtype.name}"))
            self.underflows += int(np.count_nonzero((narrow == 0) & (vals != 0)))
            vals = narrow
        if errors:
            line, msg = min(errors)
            raise ValueError(f"{self._where(line)}: {msg}")
        if nrows:
            self.coords.append(coords)
            self.vals.append(vals)
            mx = coords.max(axis=0)
            self.maxima = mx if self.maxima is None else np.maximum(self.maxima, mx)


def _parse_floats(a, starts, ends):
    """Parse general floating-point tokens.

    Returns ``(values, None)``, or ``(values, i)`` when token ``i`` is not a number (then only
    ``values[:i]`` are set).
    """
    lengths = ends - starts
    total = int(lengths.sum())
    # gather the tokens into one buffer separated by spaces and let NumPy parse it
    dest_start = np.cumsum(lengths + 1) - (lengths + 1)
    within = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    buf = np.full(total + lengths.shape[0], 32, np.uint8)
    buf[np.repeat(dest_start, lengths) + within] = a[np.repeat(starts, lengths) + within]
    text = buf.tobytes()
    if b"_" not in text:
        try:
            values = np.fromstring(text, dtype=np.float64, sep=" ")
        except ValueError:
            values = None
        if values is not None and values.shape[0] == lengths.shape[0]:
            return values, None
    # locate the offending token (rare path)
    values = np.empty(lengths.shape[0], np.float64)
    for i in range(lengths.shape[0]):
        v = _float_or_none(bytes(a[starts[i]:ends[i]]))
        if v is None:
            return values, i
        values[i] = v
    return values, None


# ---------------------------------------------------------------------------------- labels
@contextlib.contextmanager
def _atomic_output(path):
    """Write a file all at once: yield a binary file object for a temporary file next to
    ``path``; when the block completes, flush it to disk and rename it onto ``path``.

    On any exception (KeyboardInterrupt included) the temporary file is removed and ``path``,
    if it existed, is left as it was.  A symbolic link is written through, like ``open``.
    """
    target = os.path.realpath(os.fspath(path))
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
        warnings.warn(f"{name}: {report['underflows']} value(s) too small for {dtype.name} "
                      f"round to 0 and are dropped", UserWarning, stacklevel=2)
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


def _to_tensor(subs, vals, shape, dtype):
    """Build the tensor from checked coordinates (zero-based, inside ``shape``) and values.

    Files are usually written sorted, without repeated coordinates or zeros: that is checked
    on the linear index and the arrays are wrapped as they are; otherwise the constructor
    sorts, sums repeats and drops zeros.
    """
    size = 1
    for s in shape:
        size *= s
    if subs.shape[0] > 1 and size < 2 ** 62:
        lin = subs[:, 0].copy()
        for k in range(1, len(shape)):
            lin *= shape[k]
            lin += subs[:, k]
        canonical = bool(np.all(lin[1:] > lin[:-1]))
        del lin
        if canonical and np.all(vals != 0):
            return SparseTensor._from_canonical(subs, vals.astype(dtype, copy=False), shape)
    return SparseTensor(subs, vals, shape, dtype=dtype, copy=False)


# ---------------------------------------------------------------------------------- saving
def _int_digits(values, sign_column):
    """Right-aligned ASCII digits of int64 ``values`` as a uint8 matrix, padding bytes 0."""
    n = values.shape[0]
    neg = values < 0
    mag = np.abs(values).astype(np.uint64)
    top = int(mag.max()) if n else 0
    width = max(1, len(str(top)))
    out = np.zeros((n, width + (1 if sign_column else 0)), np.uint8)
    ndig = np.ones(n, np.int64)
    rest = mag.copy()
    for j in range(width - 1, -1, -1):
        col = j + (1 if sign_column else 0)
        digit = (rest % np.uint64(10)).astype(np.uint8)
        if j == width - 1:
            out[:, col] = digit + 48
        else:
            keep = rest > 0
            out[:, col] = np.where(keep, digit + 48, 0)
            ndig += keep
        rest //= np.uint64(10)
    if sign_column and neg.any():
        rows = np.flatnonzero(neg)
        out[rows, out.shape[1] - 1 - ndig[rows]] = 45
    return out


def _format_rows(subs, vals, integral, precision):
    """Bytes of the lines for the given nonzeros."""
    n = subs.shape[0]
    parts = []
    space = np.full((n, 1), 32, np.uint8)
    for k in range(subs.shape[1]):
        parts.append(_int_digits(subs[:, k] + 1, sign_column=False))
        parts.append(space)
    if integral:
        parts.append(_int_digits(vals.astype(np.int64), sign_column=True))
    else:
        if precision is None:
            text = _shortest_text(vals)
        else:
            text = np.char.mod(f"%.{int(precision)}g".encode(), vals.astype(np.float64))
        text = np.ascontiguousarray(text)
        parts.append(text.view(np.uint8).reshape(n, text.dtype.itemsize))
    parts.append(np.full((n, 1), 10, np.uint8))
    flat = np.concatenate(parts, axis=1).reshape(-1)
    return flat[flat != 0].tobytes()


def _shortest_text(vals):
    """Shortest text of every value that reads back (as a double, then rounded to the dtype
    of ``vals``) as the same value."""
    text = vals.astype("S")
    if vals.dtype != np.float64:
        # the shortest float32 text is exact when read as a float32, but the reader parses a
        # double first; where that double rounding differs, nine digits are always exact
        back = text.astype(np.float64).astype(vals.dtype)
        bad = np.flatnonzero(back != vals)
        if bad.shape[0]:
            nine = np.char.mod(b"%.9g", vals[bad].astype(np.float64))
            text = text.astype(f"S{max(text.dtype.itemsize, nine.dtype.itemsize)}")
            text[bad] = nine
    return text


def _compressed(f, name):
    """A compressing writer over the binary file ``f``, chosen by the suffix of ``name``."""
    lower = name.lower()
    if lower.endswith(".gz"):
        return gzip.GzipFile(filename=name, mode="wb", fileobj=f, compresslevel=6)
    if lower.endswith(".bz2"):
        return bz2.BZ2File(f, "wb")
    if lower.endswith(".xz"):
        return lzma.LZMAFile(f, "wb")
    return contextlib.nullcontext(f)


def save_tns(path, X, *, precision=None):
    """Write a sparse tensor in FROSTT ``.tns`` format (1-based coordinates, value last).

    Parameters
    ----------
    path : str, path-like or binary file object
        Destination; compressed with gzip when the name ends with ``.gz`` (``.bz2`` and
        ``.xz`` select bzip2 and xz).  A file is written whole or not at all: the text goes to
        a temporary file in the same folder, which replaces ``path`` only once complete (if
        writing fails or is interrupted, an existing ``path`` is left as it was).
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
