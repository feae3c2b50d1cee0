"""Files of the binary container (sktensor_fast.binary) taken apart and put together again by
the tests: a header edited and signed again (so that only the checks after the header's CRC
see the edit), every checksum recomputed after an edit of the arrays, and files of format
version 1 as sktensor_fast wrote them before the arrays had checksums."""
import json
import struct
import zlib

import numpy as np

PREFIX = struct.Struct("<8sIII4x")
MAGIC = b"SKTFTNS\0"


def split(raw):
    """``(version, meta, raw)`` of the bytes of a file."""
    _, version, hlen, _ = PREFIX.unpack(raw[:PREFIX.size])
    return version, json.loads(raw[PREFIX.size:PREFIX.size + hlen]), raw


def with_header(raw, meta, version=None, resign_sections=False):
    """The bytes ``raw`` with the header ``meta`` (any JSON value) written in place of the old
    one and signed; with ``resign_sections``, the CRC-32 lists of the sections recomputed from
    the bytes of ``raw`` first.  The new header is padded with spaces to the old length when
    shorter and may run into the data when longer (the file then moves nothing)."""
    _, old_version, hlen, _ = PREFIX.unpack(raw[:PREFIX.size])
    version = old_version if version is None else version
    if resign_sections:
        B = meta["crc_block"]
        for sec in meta["sections"].values():
            data = raw[sec["offset"]:sec["offset"] + sec["nbytes"]]
            sec["crc32"] = [zlib.crc32(data[a:a + B]) for a in range(0, len(data), B)]
    header = json.dumps(meta).encode("utf-8")
    if len(header) < hlen:
        header += b" " * (hlen - len(header))
    out = bytearray(raw)
    end = PREFIX.size + len(header)
    if end > len(out):
        out.extend(bytes(end - len(out)))
    out[:end] = PREFIX.pack(MAGIC, version, len(header), zlib.crc32(header)) + header
    return bytes(out)


def resigned(raw):
    """``raw`` (edited in its arrays) with every checksum made to match again."""
    version, meta, raw = split(raw)
    return with_header(raw, meta, resign_sections=True)


def version1(X, labels=None):
    """The bytes of ``X`` (and ``labels``) in format version 1."""
    subs = np.ascontiguousarray(X.subs, "<i8").tobytes()
    vals = np.ascontiguousarray(X.vals, X.vals.dtype.newbyteorder("<")).tobytes()
    start = 4160
    vals_at = -(-(start + len(subs)) // 64) * 64
    pos = -(-(vals_at + len(vals)) // 64) * 64
    sections = {"subs": {"offset": start, "nbytes": len(subs)},
                "vals": {"offset": vals_at, "nbytes": len(vals)}}
    lab = None
    if labels is not None:
        lab = json.dumps(labels).encode("utf-8")
        sections["labels"] = {"offset": pos, "nbytes": len(lab), "crc32": zlib.crc32(lab)}
        pos += len(lab)
    meta = {"format": "sktensor_fast sparse tensor", "version": 1, "shape": list(X.shape),
            "nnz": X.nnz, "dtype": np.dtype(X.vals.dtype).newbyteorder("<").str,
            "sections": sections, "file_bytes": pos}
    header = json.dumps(meta).encode("utf-8")
    out = bytearray(pos)
    out[:PREFIX.size + len(header)] = PREFIX.pack(MAGIC, 1, len(header),
                                                  zlib.crc32(header)) + header
    out[start:start + len(subs)] = subs
    out[vals_at:vals_at + len(vals)] = vals
    if lab is not None:
        out[sections["labels"]["offset"]:pos] = lab
    return bytes(out)
