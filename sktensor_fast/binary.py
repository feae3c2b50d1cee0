"""A binary container for sparse tensors: :func:`save_tensor` and :func:`load_tensor`.

Text (``.tns``) is the exchange format; this one is for reloading the same tensor fast.  A file
holds the canonical arrays of a :class:`~sktensor_fast.SparseTensor` as they are in memory, so
reading it is a copy (or a memory map) plus one parallel check, with no parsing and no sort.

Layout (every number little-endian)::

    bytes 0-7     magic b"SKTFTNS\\0"
    bytes 8-11    format version (uint32), currently 1
    bytes 12-15   length H of the header (uint32)
    bytes 16-19   CRC-32 of the header
    bytes 20-23   zero
    bytes 24-     the header: UTF-8 JSON with the shape, the number of nonzeros, the value
                  dtype, and the offset and length of every section
    ...           the sections, each starting at a multiple of 64 bytes: the coordinates
                  (nnz x N int64, row-major), the values (float32 or float64) and, when
                  given, the labels (UTF-8 JSON: one list of strings, or null, per mode,
                  with its own CRC-32)

A file from another format version, a file cut short, a header or label section whose CRC does
not match, and arrays that do not form a canonical tensor (a coordinate outside the shape, a zero
or non-finite value, rows out of order) are all refused with a ``ValueError`` naming the file.
The check of the arrays is what the compiled kernels rely on; it reads every byte once, in
parallel.
"""
import concurrent.futures
import json
import os
import struct
import tempfile
import zlib

import numpy as np

from . import _threads
from .tensor import SparseTensor, as_sparse_tensor

__all__ = ["save_tensor", "load_tensor", "FORMAT_VERSION", "MAGIC"]

MAGIC = b"SKTFTNS\0"
#: Version of the layout written by :func:`save_tensor`; :func:`load_tensor` reads this version
#: only.
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sIII4x")
_ALIGN = 64
#: Bytes copied by one task of the parallel reads and writes.
_CHUNK = 1 << 26


def _aligned(n):
    return -(-n // _ALIGN) * _ALIGN


def _chunks(offset, nbytes):
    return [(offset + a, min(_CHUNK, nbytes - a)) for a in range(0, nbytes, _CHUNK)]


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


def save_tensor(path, X, *, labels=None):
    """Write a sparse tensor (and its labels) to a binary file that :func:`load_tensor` reads
    back.

    Parameters
    ----------
    path : str or path-like
        Destination.  The file is written under a temporary name in the same folder and then
        renamed, so a reader never sees it half-written.
    X : SparseTensor or convertible (see :func:`~sktensor_fast.tensor.as_sparse_tensor`)
        The tensor.
    labels : list, optional
        One entry per mode: a list of at least ``shape[k]`` strings, or None.

    Examples
    --------
    >>> import os, tempfile
    >>> from sktensor_fast import SparseTensor
    >>> from sktensor_fast.binary import save_tensor, load_tensor
    >>> X = SparseTensor([[0, 1], [2, 0]], [1.5, 2.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "x.sktf")
    >>> save_tensor(path, X, labels=[["a", "b", "c"], None])
    >>> Y, labels = load_tensor(path, with_labels=True)
    >>> Y == X, labels
    (True, [['a', 'b', 'c'], None])
    """
    X = as_sparse_tensor(X)
    labels = _check_labels(labels, X.shape)
    subs = np.ascontiguousarray(X.subs, dtype="<i8")
    vals = np.ascontiguousarray(X.vals, dtype=X.vals.dtype.newbyteorder("<"))
    sections = {}
    # the header's length depends on the offsets it lists: lay out with room to spare
    label_bytes = None if labels is None else json.dumps(labels).encode("utf-8")
    header = None
    start = _aligned(_PREFIX.size + 4096)
    while True:
        pos = start
        sections["subs"] = {"offset": pos, "nbytes": subs.nbytes}
        pos = _aligned(pos + subs.nbytes)
        sections["vals"] = {"offset": pos, "nbytes": vals.nbytes}
        pos = _aligned(pos + vals.nbytes)
        if label_bytes is not None:
            sections["labels"] = {"offset": pos, "nbytes": len(label_bytes),
                                  "crc32": zlib.crc32(label_bytes)}
            pos = pos + len(label_bytes)
        meta = {"format": "sktensor_fast sparse tensor", "version": FORMAT_VERSION,
                "shape": list(X.shape), "nnz": X.nnz, "dtype": vals.dtype.str,
                "sections": sections, "file_bytes": pos}
        header = json.dumps(meta).encode("utf-8")
        if _PREFIX.size + len(header) <= start:
            break
        start = _aligned(_PREFIX.size + 2 * len(header))
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header), zlib.crc32(header))
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".sktf-", suffix=".tmp", dir=folder)
    try:
        os.ftruncate(fd, meta["file_bytes"])
        os.pwrite(fd, prefix + header, 0)
        jobs = []
        for arr, sec in ((subs, sections["subs"]), (vals, sections["vals"])):
            raw = memoryview(arr.reshape(-1).view(np.uint8))
            for off, n in _chunks(0, sec["nbytes"]):
                jobs.append((raw[off:off + n], sec["offset"] + off))
        _parallel(lambda job: _pwrite_all(fd, *job), jobs)
        if label_bytes is not None:
            os.pwrite(fd, label_bytes, sections["labels"]["offset"])
        os.fsync(fd)
        os.close(fd)
        fd = None
        os.replace(tmp, path)
    except BaseException:
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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


def _read_header(f, name):
    size = os.fstat(f.fileno()).st_size
    raw = f.read(_PREFIX.size)
    if len(raw) < _PREFIX.size or not raw.startswith(MAGIC):
        raise ValueError(f"{name} is not a sktensor_fast binary tensor file (no "
                         f"{MAGIC[:-1].decode()} signature at its start)")
    magic, version, hlen, hcrc = _PREFIX.unpack(raw)
    if version != FORMAT_VERSION:
        raise ValueError(f"{name} was written in binary format version {version}; this "
                         f"sktensor_fast reads version {FORMAT_VERSION} only (re-create the "
                         f"file with save_tensor(), e.g. from the .tns text)")
    header = f.read(hlen)
    if len(header) != hlen or zlib.crc32(header) != hcrc:
        raise ValueError(f"{name} is corrupt: its header does not match its checksum")
    try:
        meta = json.loads(header.decode("utf-8"))
        shape = tuple(int(s) for s in meta["shape"])
        nnz = int(meta["nnz"])
        dtype = np.dtype(meta["dtype"])
        sections = meta["sections"]
        file_bytes = int(meta["file_bytes"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{name} is corrupt: unreadable header ({exc})") from None
    if dtype not in (np.dtype("<f4"), np.dtype("<f8")):
        raise ValueError(f"{name} is corrupt: unknown value dtype {dtype}")
    N = len(shape)
    expect = {"subs": nnz * N * 8, "vals": nnz * dtype.itemsize}
    for key, nbytes in expect.items():
        sec = sections.get(key)
        if sec is None or int(sec["nbytes"]) != nbytes or int(sec["offset"]) % _ALIGN:
            raise ValueError(f"{name} is corrupt: the {key} section does not fit the header")
    if size < file_bytes:
        raise ValueError(f"{name} is truncated: it has {size} bytes, its header announces "
                         f"{file_bytes}")
    return shape, nnz, dtype, sections


def _read_rows(f, name, shape, dtype, sections, start, stop):
    """Nonzeros ``start:stop`` of the open file ``f`` (header already read), copied by
    parallel reads."""
    N = len(shape)
    n = stop - start
    subs = np.empty((n, N), dtype="<i8")
    vals = np.empty(n, dtype=dtype)
    jobs = []
    for arr, sec, row in ((subs, sections["subs"], N * 8), (vals, sections["vals"],
                                                           dtype.itemsize)):
        raw = memoryview(arr.reshape(-1).view(np.uint8))
        for off, nb in _chunks(0, n * row):
            jobs.append((raw[off:off + nb], int(sec["offset"]) + start * row + off))
    try:
        _parallel(lambda job: _pread_into(f.fileno(), *job), jobs)
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


def read_rows(path, nparts=1, part=0):
    """Nonzeros of a file written by :func:`save_tensor`, for readers that take one share of
    it each (the distributed loader): ``(shape, nnz, subs, vals)`` with the rows
    ``nnz * part // nparts`` up to ``nnz * (part + 1) // nparts``, read in parallel and
    checked as :func:`load_tensor` checks the whole file."""
    name = os.fspath(path)
    with open(name, "rb") as f:
        shape, nnz, dtype, sections = _read_header(f, name)
        start, stop = nnz * part // nparts, nnz * (part + 1) // nparts
        subs, vals = _read_rows(f, name, shape, dtype, sections, start, stop)
    subs, vals = _checked(name, subs, vals, shape, start)
    return shape, nnz, subs, vals


def load_tensor(path, *, mmap=False, with_labels=False):
    """Read a tensor written by :func:`save_tensor`.

    Parameters
    ----------
    path : str or path-like
        The file.
    mmap : bool, default=False
        Map the file into memory instead of reading it: nothing is copied and pages are read
        when touched (the check reads them once).  The file must then not be changed in place
        while the tensor is in use (:func:`save_tensor` replaces files rather than rewriting them).
    with_labels : bool, default=False
        Also return the labels (None per mode without labels; all None when none were saved).

    Returns
    -------
    X : SparseTensor
    labels : list
        Only with ``with_labels=True``.

    Raises
    ------
    ValueError
        When the file is not such a file, was written by another format version, is truncated
        or corrupt, or its arrays do not form a canonical tensor.

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
    """
    name = os.fspath(path)
    with open(name, "rb") as f:
        shape, nnz, dtype, sections = _read_header(f, name)
        N = len(shape)
        if mmap:
            subs = np.memmap(name, dtype="<i8", mode="r", offset=sections["subs"]["offset"],
                             shape=(nnz, N)) if nnz else np.zeros((0, N), "<i8")
            vals = np.memmap(name, dtype=dtype, mode="r", offset=sections["vals"]["offset"],
                             shape=(nnz,)) if nnz else np.zeros(0, dtype)
        else:
            subs, vals = _read_rows(f, name, shape, dtype, sections, 0, nnz)
        labels = None
        if with_labels and "labels" in sections:
            sec = sections["labels"]
            f.seek(int(sec["offset"]))
            raw = f.read(int(sec["nbytes"]))
            if len(raw) != int(sec["nbytes"]) or zlib.crc32(raw) != int(sec["crc32"]):
                raise ValueError(f"{name} is corrupt: its labels do not match their checksum")
            labels = _check_labels(json.loads(raw.decode("utf-8")), shape)
    subs, vals = _checked(name, subs, vals, shape)
    X = SparseTensor._from_canonical(subs, vals, shape)
    if with_labels:
        return X, labels if labels is not None else [None] * N
    return X
