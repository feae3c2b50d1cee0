"""A binary container for sparse tensors: :func:`save_tensor` and :func:`load_tensor`.

Text (``.tns``) is the exchange format; this one is for reloading the same tensor fast.  A file
holds the canonical arrays of a :class:`~sktensor_fast.SparseTensor` as they are in memory, so
reading it is a copy (or a memory map) plus one parallel check, with no parsing and no sort.

Layout (every number little-endian)::

    bytes 0-7     magic b"SKTFTNS\\0"
    bytes 8-11    format version (uint32), currently 2
    bytes 12-15   length H of the header (uint32)
    bytes 16-19   CRC-32 of the header
    bytes 20-23   zero
    bytes 24-     the header: UTF-8 JSON with the shape, the number of nonzeros, the value
                  dtype, the mode names, and the offset, length and checksums of every
                  section
    ...           the sections, each starting at a multiple of 64 bytes: the coordinates
                  (nnz x N int64, row-major), the values (float32 or float64) and, when
                  given, the labels (UTF-8 JSON: one list of strings, or null, per mode)

Every section carries one CRC-32 per ``crc_block`` bytes (4 MiB; the header says), so that
the blocks are checked in parallel and a reader of part of the file (the distributed loader)
checks the blocks it reads.  Version 1 files (checksums on the header and the labels only)
are still read.

A file from an unknown format version, a file cut short, a header that does not describe a
tensor (a shape, a size or an offset out of range or out of the file), a section that does
not match its checksum, and arrays that do not form a canonical tensor (a coordinate outside
the shape, a zero or non-finite value, rows out of order) are all refused with a
``ValueError`` naming the file.  The check of the arrays is what the compiled kernels rely
on; it reads every byte once, in parallel.
"""
import concurrent.futures
import json
import os
import stat
import struct
import types
import zlib

import numpy as np

from . import _threads
from .tensor import SparseTensor, _attach_labels, as_sparse_tensor

__all__ = ["save_tensor", "load_tensor", "FORMAT_VERSION", "MAGIC"]

MAGIC = b"SKTFTNS\0"
#: Version of the layout written by :func:`save_tensor`; :func:`load_tensor` reads it and
#: version 1 (without checksums of the arrays).
FORMAT_VERSION = 2
_READS = (1, 2)
_PREFIX = struct.Struct("<8sIII4x")
_ALIGN = 64
#: Bytes copied by one task of the parallel reads and writes.
_CHUNK = 1 << 26
#: Bytes covered by one CRC-32 of a section (written in the header).
_CRC_BLOCK = 1 << 22
_INT64_MAX = 2 ** 63 - 1
_WHAT = {"subs": "coordinates", "vals": "values", "labels": "labels"}


def _aligned(n):
    return -(-n // _ALIGN) * _ALIGN


def _chunks(offset, nbytes, size=_CHUNK):
    return [(offset + a, min(size, nbytes - a)) for a in range(0, nbytes, size)]


def _check_labels(labels, shape):
    if labels is None:
        return None
    labels = list(labels)
    if len(labels) != len(shape):
        raise ValueError(f"labels has {len(labels)} entries for a tensor with {len(shape)} "
                         f"modes")
    out = []
    for k, lab in enumerate(labels):
        if lab is None:
            out.append(None)
            continue
        lab = [str(x) for x in lab]
        if len(lab) < shape[k]:
            raise ValueError(f"labels of mode {k + 1} has {len(lab)} entries but the mode has "
                             f"length {shape[k]}")
        out.append(lab[:shape[k]])
    return out


def _crcs(raw, block):
    """CRC-32 of every ``block`` bytes of the buffer ``raw``, computed in parallel (zlib lets
    go of the GIL)."""
    out = [0] * -(-len(raw) // block)
    jobs = list(enumerate(_chunks(0, len(raw), block)))

    def one(job):
        i, (off, n) = job
        out[i] = zlib.crc32(raw[off:off + n])
    _parallel(one, jobs)
    return out


def save_tensor(path, X, *, labels=None, mode_names=None):
    """Write a sparse tensor (and its labels and mode names) to a binary file that
    :func:`load_tensor` reads back.

    Parameters
    ----------
    path : str or path-like
        Destination, written as every saver of the package writes (see "Writing files" in
        the documentation): a regular file under a temporary name in its folder, then renamed,
        so a reader never sees it half-written; the mode ``open()`` would give; a symbolic
        link written through; a character device or a FIFO written directly.
    X : SparseTensor or convertible (see :func:`~sktensor_fast.tensor.as_sparse_tensor`)
        The tensor.
    labels : list, optional
        One entry per mode: a list of at least ``shape[k]`` strings (other values are written
        as their ``str()``), or None.  By default the tensor's own ``X.labels``.
    mode_names : list of str, optional
        One name per mode; by default the tensor's own ``X.mode_names``.

    Examples
    --------
    >>> import os, tempfile
    >>> from sktensor_fast import SparseTensor
    >>> from sktensor_fast.binary import save_tensor, load_tensor
    >>> X = SparseTensor([[0, 1], [2, 0]], [1.5, 2.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "x.sktf")
    >>> save_tensor(path, X, labels=[["a", "b", "c"], None], mode_names=["row", "col"])
    >>> Y, labels = load_tensor(path, with_labels=True)
    >>> Y == X, labels, Y.mode_names
    (True, [['a', 'b', 'c'], None], ['row', 'col'])
    """
    X = as_sparse_tensor(X)
    labels = _check_labels(labels if labels is not None else getattr(X, "labels", None),
                           X.shape)
    mode_names = mode_names if mode_names is not None else getattr(X, "mode_names", None)
    if mode_names is not None:
        mode_names = [str(m) for m in mode_names]
        if len(mode_names) != X.ndim:
            raise ValueError(f"mode_names has {len(mode_names)} entries for a tensor with "
                             f"{X.ndim} modes")
    subs = np.ascontiguousarray(X.subs, dtype="<i8")
    vals = np.ascontiguousarray(X.vals, dtype=X.vals.dtype.newbyteorder("<"))
    raws = {"subs": memoryview(subs.reshape(-1).view(np.uint8)),
            "vals": memoryview(vals.reshape(-1).view(np.uint8))}
    if labels is not None:
        raws["labels"] = memoryview(json.dumps(labels).encode("utf-8"))
    block = _CRC_BLOCK
    crcs = {key: _crcs(raw, block) for key, raw in raws.items()}
    # the header's length depends on the offsets it lists: lay out with room to spare
    start = _aligned(_PREFIX.size + 4096)
    while True:
        pos = start
        sections = {}
        for key, raw in raws.items():
            sections[key] = {"offset": pos, "nbytes": len(raw), "crc32": crcs[key]}
            pos = _aligned(pos + len(raw)) if key != "labels" else pos + len(raw)
        meta = {"format": "sktensor_fast sparse tensor", "version": FORMAT_VERSION,
                "shape": list(X.shape), "nnz": X.nnz, "dtype": vals.dtype.str,
                "mode_names": mode_names, "crc_block": block, "sections": sections,
                "file_bytes": pos}
        header = json.dumps(meta).encode("utf-8")
        if _PREFIX.size + len(header) <= start:
            break
        start = _aligned(_PREFIX.size + 2 * len(header))
    head = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header), zlib.crc32(header)) + header
    from .io import _atomic_output
    with _atomic_output(path) as f:
        fd = f.fileno()
        if stat.S_ISREG(os.fstat(fd).st_mode):
            # a regular file: sized once, the arrays written by parallel positioned writes
            os.ftruncate(fd, meta["file_bytes"])
            _pwrite_all(fd, head, 0)
            jobs = []
            for key, raw in raws.items():
                for off, n in _chunks(0, len(raw)):
                    jobs.append((raw[off:off + n], sections[key]["offset"] + off))
            _parallel(lambda job: _pwrite_all(fd, *job), jobs)
        else:
            # a character device or a FIFO: written in order
            f.write(head)
            at = len(head)
            for key, raw in raws.items():
                f.write(bytes(sections[key]["offset"] - at))
                f.write(raw)
                at = sections[key]["offset"] + len(raw)
            f.write(bytes(meta["file_bytes"] - at))


def _pwrite_all(fd, data, offset):
    while len(data):
        n = os.pwrite(fd, data, offset)
        data = data[n:]
        offset += n


def _pread_into(fd, view, offset):
    while len(view):
        n = os.preadv(fd, [view], offset)
        if n <= 0:
            raise EOFError("the file ends early")
        view = view[n:]
        offset += n


def _parallel(fn, jobs):
    nt = max(1, min(_threads.get_num_threads(), len(jobs)))
    if nt == 1:
        for job in jobs:
            fn(job)
        return
    with concurrent.futures.ThreadPoolExecutor(nt, thread_name_prefix="sktensor-io") as pool:
        for fut in [pool.submit(fn, job) for job in jobs]:
            fut.result()


def _is_int(x, lo=0, hi=_INT64_MAX):
    return isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi


def _read_header(f, name):
    """The header of the open file ``f``, checked against itself and the size of the file:
    a namespace with ``version``, ``shape``, ``nnz``, ``dtype``, ``sections``,
    ``mode_names``, ``crc_block``, ``crc`` (of the header) and ``size`` (of the file).
    Nothing of the size the header announces is allocated before it is known to be in the
    file; every problem is one ValueError naming the file."""
    size = os.fstat(f.fileno()).st_size
    raw = f.read(_PREFIX.size)
    if len(raw) < _PREFIX.size or not raw.startswith(MAGIC):
        raise ValueError(f"{name} is not a sktensor_fast binary tensor file (no "
                         f"{MAGIC[:-1].decode()} signature at its start)")
    magic, version, hlen, hcrc = _PREFIX.unpack(raw)
    if version not in _READS:
        raise ValueError(f"{name} was written in binary format version {version}; this "
                         f"sktensor_fast reads versions {', '.join(map(str, _READS))} only "
                         f"(re-create the file with save_tensor(), e.g. from the .tns text)")
    if hlen > size - _PREFIX.size:
        raise ValueError(f"{name} is truncated: it has {size} bytes, its header alone "
                         f"announces {_PREFIX.size + hlen}")
    header = f.read(hlen)
    if len(header) != hlen or zlib.crc32(header) != hcrc:
        raise ValueError(f"{name} is corrupt: its header does not match its checksum")

    def corrupt(what):
        return ValueError(f"{name} is corrupt: {what}")
    try:
        meta = json.loads(header.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise corrupt(f"unreadable header ({exc})") from None
    if not isinstance(meta, dict):
        raise corrupt("the header is not a JSON object")
    if meta.get("version") != version:
        # the version at the start is outside the header's checksum: the header repeats it
        raise corrupt(f"the header is of format version {meta.get('version')!r}, the start "
                      f"of the file says {version}")
    missing = [k for k in ("shape", "nnz", "dtype", "sections", "file_bytes") if k not in meta]
    if missing:
        raise corrupt(f"the header has no {', '.join(missing)}")
    shape, nnz, dtype_str = meta["shape"], meta["nnz"], meta["dtype"]
    if not isinstance(shape, list) or not shape or not all(_is_int(s, 1) for s in shape):
        raise corrupt(f"shape {shape!r} is not a list of mode lengths from 1 to 2**63 - 1")
    shape = tuple(shape)
    N = len(shape)
    if not _is_int(nnz):
        raise corrupt(f"the number of nonzeros {nnz!r} is not a nonnegative integer")
    if dtype_str not in ("<f4", "<f8"):
        raise corrupt(f"unknown value dtype {dtype_str!r}")
    dtype = np.dtype(dtype_str)
    file_bytes = meta["file_bytes"]
    data_start = _PREFIX.size + hlen
    if not _is_int(file_bytes, data_start):
        raise corrupt(f"file_bytes {file_bytes!r} is not a size after the header")
    mode_names = meta.get("mode_names")
    if mode_names is not None and not (isinstance(mode_names, list) and len(mode_names) == N
                                       and all(isinstance(m, str) for m in mode_names)):
        raise corrupt(f"mode_names is not a list of {N} strings")
    crc_block = meta.get("crc_block") if version >= 2 else None
    if version >= 2 and not _is_int(crc_block, _ALIGN, 1 << 30):
        raise corrupt(f"crc_block {crc_block!r} is not a size from {_ALIGN} to 2**30")
    sections = meta["sections"]
    if not isinstance(sections, dict):
        raise corrupt("the sections are not a JSON object")
    expect = {"subs": nnz * N * 8, "vals": nnz * dtype.itemsize, "labels": None}
    spans = []
    for key, nbytes in expect.items():
        if key == "labels" and key not in sections:
            continue
        sec = sections.get(key)
        if not isinstance(sec, dict) or not _is_int(sec.get("offset")) \
                or not _is_int(sec.get("nbytes")):
            raise corrupt(f"the header has no valid offset and length of the {_WHAT[key]}")
        off, n = sec["offset"], sec["nbytes"]
        if nbytes is not None and (n != nbytes or off % _ALIGN):
            raise corrupt(f"the {_WHAT[key]} section does not fit the header (shape "
                          f"{shape}, {nnz} nonzeros of {dtype.name})")
        if off < data_start or off + n > file_bytes:
            raise corrupt(f"the {_WHAT[key]} section (bytes {off} to {off + n}) lies outside "
                          f"the data of the file (bytes {data_start} to {file_bytes})")
        crc = sec.get("crc32")
        if version >= 2:
            if not (isinstance(crc, list) and len(crc) == -(-n // crc_block)
                    and all(_is_int(c, 0, 2 ** 32 - 1) for c in crc)):
                raise corrupt(f"the checksums of the {_WHAT[key]} do not fit its length")
        elif key == "labels" and not _is_int(crc, 0, 2 ** 32 - 1):
            raise corrupt("the checksum of the labels is not a CRC-32")
        spans.append((off, off + n, key))
    spans.sort()
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
        if begin < end:
            raise corrupt(f"the {_WHAT[a]} and {_WHAT[b]} sections overlap")
    if size < file_bytes:
        raise ValueError(f"{name} is truncated: it has {size} bytes, its header announces "
                         f"{file_bytes}")
    return types.SimpleNamespace(version=version, shape=shape, nnz=nnz, dtype=dtype,
                                 sections=sections, mode_names=mode_names,
                                 crc_block=crc_block, crc=hcrc, size=size)


def _verify(fd, name, hdr, key, view, lo):
    """Check the CRC-32 of every block of section ``key`` that ``view`` (bytes ``lo`` onwards
    of the section) touches, reading from ``fd`` the parts of those blocks outside ``view``.
    A ValueError naming the file at the first block that does not match."""
    if hdr.version < 2:
        return
    sec = hdr.sections[key]
    B, n, off = hdr.crc_block, sec["nbytes"], sec["offset"]
    hi = lo + len(view)
    blocks = range(lo // B, -(-hi // B)) if hi > lo else range(0)
    bad = []

    def one(b):
        a, z = b * B, min((b + 1) * B, n)
        crc = 0
        if a < lo:
            crc = zlib.crc32(os.pread(fd, lo - a, off + a), crc)
        crc = zlib.crc32(view[max(a, lo) - lo:min(z, hi) - lo], crc)
        if z > hi:
            crc = zlib.crc32(os.pread(fd, z - hi, off + hi), crc)
        if crc != sec["crc32"][b]:
            bad.append(b)
    _parallel(one, list(blocks))
    if bad:
        b = min(bad)
        raise ValueError(f"{name} is corrupt: its {_WHAT[key]} do not match their checksum "
                         f"(bytes {b * B} to {min((b + 1) * B, n)} of the section)")


def _read_rows(f, name, hdr, start, stop, verify=True):
    """Nonzeros ``start:stop`` of the open file ``f`` (header ``hdr`` already read), copied by
    parallel reads, with the checksums of the blocks they lie in checked."""
    N = len(hdr.shape)
    n = stop - start
    subs = np.empty((n, N), dtype="<i8")
    vals = np.empty(n, dtype=hdr.dtype)
    jobs, views = [], []
    for key, arr, row in (("subs", subs, N * 8), ("vals", vals, hdr.dtype.itemsize)):
        raw = memoryview(arr.reshape(-1).view(np.uint8))
        views.append((key, raw, start * row))
        for off, nb in _chunks(0, n * row):
            jobs.append((raw[off:off + nb], hdr.sections[key]["offset"] + start * row + off))
    try:
        _parallel(lambda job: _pread_into(f.fileno(), *job), jobs)
        if verify:
            for key, raw, lo in views:
                _verify(f.fileno(), name, hdr, key, raw, lo)
    except EOFError:
        raise ValueError(f"{name} is truncated") from None
    return subs, vals


def _checked(name, subs, vals, shape, first_row=0):
    """The arrays in native byte order, after the parallel check that they form a canonical
    tensor (rows ``first_row`` onwards of the file); a ValueError naming ``name`` if not."""
    from ._native import _construct
    native = subs.dtype.newbyteorder("=")
    if subs.dtype != native:  # pragma: no cover - big-endian machines
        subs = subs.astype(np.int64)
        vals = vals.astype(vals.dtype.newbyteorder("="))
    row, problem = _construct.check_canonical(subs, vals, shape, _threads.get_num_threads())
    if row >= 0:
        row += first_row
        what = {"range": f"coordinate row {row} lies outside the shape {shape}",
                "value": f"value {row} is zero or not finite",
                "order": f"row {row} is not after the row before it"}[problem]
        raise ValueError(f"{name} is corrupt: {what}; a file written by save_tensor() never is")
    return subs, vals


def _identity(f, hdr):
    """What tells this version of the file from another: the header (whose checksums cover
    every section in format 2) and the size; for version 1 also the inode and the time of
    the last change."""
    ident = (hdr.version, hdr.crc, hdr.size)
    if hdr.version < 2:
        st = os.fstat(f.fileno())
        ident += (st.st_ino, st.st_mtime_ns)
    return ident


def read_rows(path, nparts=1, part=0):
    """Nonzeros of a file written by :func:`save_tensor`, for readers that take one share of
    it each (the distributed loader): ``(shape, nnz, subs, vals, identity)`` with the rows
    ``nnz * part // nparts`` up to ``nnz * (part + 1) // nparts``, read in parallel through
    one open of the file and checked as :func:`load_tensor` checks the whole file (the
    checksums of the blocks the share lies in, then the canonical form).  ``identity`` is
    the same for readers of the same version of the file; readers that got different ones
    read a file replaced in between."""
    name = os.fspath(path)
    with open(name, "rb") as f:
        hdr = _read_header(f, name)
        start, stop = hdr.nnz * part // nparts, hdr.nnz * (part + 1) // nparts
        subs, vals = _read_rows(f, name, hdr, start, stop)
        ident = _identity(f, hdr)
    subs, vals = _checked(name, subs, vals, hdr.shape, start)
    return hdr.shape, hdr.nnz, subs, vals, ident


def _read_labels(f, name, hdr):
    sec = hdr.sections["labels"]
    raw = os.pread(f.fileno(), sec["nbytes"], sec["offset"])
    if len(raw) != sec["nbytes"]:
        raise ValueError(f"{name} is truncated")
    if hdr.version >= 2:
        _verify(f.fileno(), name, hdr, "labels", memoryview(raw), 0)
    elif zlib.crc32(raw) != sec["crc32"]:
        raise ValueError(f"{name} is corrupt: its labels do not match their checksum")
    try:
        labels = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{name} is corrupt: unreadable labels ({exc})") from None
    shape = hdr.shape
    if not isinstance(labels, list) or len(labels) != len(shape) or not all(
            lab is None or (isinstance(lab, list) and len(lab) == shape[k]
                            and all(isinstance(x, str) for x in lab))
            for k, lab in enumerate(labels)):
        raise ValueError(f"{name} is corrupt: the labels are not one list of strings (as "
                         f"long as the mode) or null per mode")
    return labels


def load_tensor(path, *, mmap=False, with_labels=False, verify=True):
    """Read a tensor written by :func:`save_tensor`.

    The tensor gets the labels and mode names saved with it (``X.labels``,
    ``X.mode_names``).

    Parameters
    ----------
    path : str or path-like
        The file.
    mmap : bool, default=False
        Map the file into memory instead of reading it: nothing is copied and pages are read
        when touched (the checks read them once).  The map is of the file opened to read the
        header, so a file replaced meanwhile (as :func:`save_tensor` replaces files) does not
        mix with it; the file must not be changed in place while the tensor is in use.
    with_labels : bool, default=False
        Also return the labels (None per mode without labels; all None when none were saved).
    verify : bool, default=True
        Check the coordinates and the values against their checksums (about 4 GB/s a
        thread, in parallel).  ``False`` skips this (with ``mmap=True``, where a load then
        touches the arrays once, for the check of the canonical form); the header and the
        labels are always checked.

    Returns
    -------
    X : SparseTensor
    labels : list
        Only with ``with_labels=True``.

    Raises
    ------
    ValueError
        When the file is not such a file, was written by an unknown format version, is
        truncated or corrupt (a header that does not describe a tensor in the file, a
        section that does not match its checksum), or its arrays do not form a canonical
        tensor; the message names the file.

    Examples
    --------
    >>> import os, tempfile
    >>> from sktensor_fast import load_tensor, save_tensor
    >>> from sktensor_fast.datasets import load_flights_routes
    >>> X = load_flights_routes().tensor
    >>> path = os.path.join(tempfile.mkdtemp(), "flights.sktf")
    >>> save_tensor(path, X)
    >>> Y = load_tensor(path, mmap=True)          # the arrays stay in the file until read
    >>> Y.shape == X.shape and Y.nnz == X.nnz and Y == X
    True
    >>> Y.mode_names == X.mode_names
    True
    """
    from .backends.checks import check_bool
    mmap, with_labels = check_bool(mmap, "mmap"), check_bool(with_labels, "with_labels")
    verify = check_bool(verify, "verify")
    name = os.fspath(path)
    with open(name, "rb") as f:
        hdr = _read_header(f, name)
        shape, nnz, dtype, N = hdr.shape, hdr.nnz, hdr.dtype, len(hdr.shape)
        if mmap:
            # the descriptor that gave the header is mapped, not the path opened again
            subs = np.memmap(f, dtype="<i8", mode="r", offset=hdr.sections["subs"]["offset"],
                             shape=(nnz, N)) if nnz else np.zeros((0, N), "<i8")
            vals = np.memmap(f, dtype=dtype, mode="r", offset=hdr.sections["vals"]["offset"],
                             shape=(nnz,)) if nnz else np.zeros(0, dtype)
            if verify:
                for key, arr in (("subs", subs), ("vals", vals)):
                    _verify(f.fileno(), name, hdr, key,
                            memoryview(np.asarray(arr).reshape(-1).view(np.uint8)), 0)
        else:
            subs, vals = _read_rows(f, name, hdr, 0, nnz, verify)
        labels = _read_labels(f, name, hdr) if "labels" in hdr.sections else None
    subs, vals = _checked(name, subs, vals, shape)
    X = SparseTensor._from_canonical(subs, vals, shape)
    _attach_labels(X, labels, hdr.mode_names)
    if with_labels:
        return X, labels if labels is not None else [None] * N
    return X
