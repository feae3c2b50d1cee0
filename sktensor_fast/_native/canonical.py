"""The canonical form of a COO tensor, built by the compiled passes of :mod:`._construct`.

:func:`canonical_coo` is what :class:`~sktensor_fast.SparseTensor` and
:func:`~sktensor_fast.load_tns` call once the dtypes are settled: it checks every coordinate
against the shape and every value for finiteness, sorts the rows (only when they are not
sorted already), adds up repeated coordinates and drops zeros, without copying arrays that are
already in their final form.
"""
import functools
import glob
import os
import sys

import numpy as np

from .. import _threads
from . import _construct
from .._warnings import warn as _warn

__all__ = ["canonical_coo", "canonical_from", "key_bits", "fresh_array", "base_pages",
           "CanonicalError", "MAX_KEY_BITS"]

#: Widest packed key the compiled passes sort; wider tensors take NumPy's lexsort.
MAX_KEY_BITS = 64

_INDEX_DTYPES = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8,
                                            np.uint16, np.uint32, np.uint64))


class CanonicalError(ValueError):
    """A problem with the data found while building the canonical form.

    ``kind`` is ``"coordinate"`` (``row`` holds a coordinate outside the shape), ``"value"``
    (``row`` holds a NaN or infinite value), ``"repeated"`` (repeated coordinates while
    ``sum_duplicates`` is False) or ``"overflow"`` (the values at coordinate ``coord`` add up
    beyond the dtype's range).
    """

    def __init__(self, kind, message, row=None, coord=None):
        super().__init__(message)
        self.kind = kind
        self.row = row
        self.coord = coord


def key_bits(shape):
    """Bits of every mode's field in the packed key: ``ceil(log2 I_k)`` (0 for length 1)."""
    return [max(int(s) - 1, 0).bit_length() for s in shape]


def _layout(shape):
    bits = key_bits(shape)
    # a mode of length 1 has no field (and no shift: a shift by 64 is undefined in C)
    shifts = [sum(bits[k + 1:]) if bits[k] else 0 for k in range(len(bits))]
    masks = [(1 << b) - 1 for b in bits]
    return bits, shifts, masks


def canonical_coo(subs, vals, shape, *, sum_duplicates=True, num_threads=None):
    """See :func:`canonical_from` (this form leaves the arrays to the caller)."""
    return canonical_from([subs, vals], shape, sum_duplicates=sum_duplicates,
                          num_threads=num_threads)


def canonical_from(arrays, shape, *, sum_duplicates=True, num_threads=None):
    """Sorted, checked, duplicate-free coordinates and values.

    Parameters
    ----------
    arrays : list ``[subs, vals]``
        ``subs``, an ndarray of an integer dtype of shape (nnz, N), holds the coordinates
        (copied only when not C-contiguous); ``vals``, float32 or float64 of shape (nnz,), the
        values in the dtype of the result.  The list is emptied: the arrays are released as
        soon as they are no longer needed, unless the caller holds them too.
    shape : tuple of int
        Mode lengths (already checked to be positive).
    sum_duplicates : bool, default=True
        Add up repeated coordinates; False makes them an error.
    num_threads : int, optional
        Threads of the compiled passes (default: the package's setting).

    Returns
    -------
    subs : int64 ndarray (nnz_out, N), C-contiguous
        The input array itself when it was int64, C-contiguous and already canonical.
    vals : ndarray (nnz_out,)
        Likewise.
    info : dict
        ``sorted`` (the input was in order), ``summed`` (repeated coordinates were added
        up), ``zeros`` (entries dropped because they or their sums were 0).

    Returns None when the packed key would need more than :data:`MAX_KEY_BITS` bits; the
    caller then sorts another way.

    Raises
    ------
    CanonicalError
        For a coordinate outside the shape, a value that is not finite, a repeated coordinate
        with ``sum_duplicates=False`` or a sum that overflows.
    """
    bits, shifts, masks = _layout(shape)
    if sum(bits) > MAX_KEY_BITS:
        return None
    subs, vals = arrays
    del arrays[:]
    if subs.dtype not in _INDEX_DTYPES:
        raise TypeError(f"canonical_coo: coordinates of dtype {subs.dtype} are not supported")
    if vals.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"canonical_coo: values of dtype {vals.dtype} are not supported")
    nt = _threads.get_num_threads() if num_threads is None else max(1, int(num_threads))
    subs = np.ascontiguousarray(subs)
    vals = np.ascontiguousarray(vals)
    n, N = subs.shape
    nbits = sum(bits)
    top = _top_digit(n, nbits)
    low = nbits - top
    hist = np.zeros((_construct.num_blocks(n, nt), 1 << top), dtype=np.int64)
    # Coordinates nobody else holds (a parser's, a converted copy) are let go before the
    # result is allocated: the scan keeps their keys (8 bytes a row) instead.  Otherwise the
    # keys are packed again from the coordinates while they are scattered.
    keys = fresh_array(n, np.uint64) if n and sys.getrefcount(subs) <= 2 else None
    rep = _construct.scan(subs, vals, list(shape), shifts, hist, low, keys, nt)
    if rep["bad_row"] >= 0:
        raise _coordinate_error(subs, shape, rep["bad_row"])
    if rep["bad_val"] >= 0:
        bad = rep["bad_val"]
        raise CanonicalError("value", f"vals holds NaN or infinite values (first at position "
                                      f"{bad})", row=bad)
    info = {"sorted": rep["order"] > 0, "summed": False, "zeros": 0}
    if rep["order"] == 2 and rep["zeros"] == 0:
        return subs.astype(np.int64, copy=False), vals, info
    if keys is not None:
        del subs
        src, src_shifts = keys.reshape(n, 1), [0]
        del keys
    else:
        src, src_shifts = subs, shifts
        del subs
    out_subs = fresh_array((n, N), np.int64)
    out_vals = fresh_array(n, vals.dtype)
    out = _construct.sort_into(src, src_shifts, vals, hist, low, shifts, masks, out_subs,
                               out_vals, stop_on_dup=not sum_duplicates,
                               base_pages=base_pages(), num_threads=nt)
    del src, vals, hist
    if out["overflow"] >= 0:
        key = out["overflow_key"]
        coord = tuple((key >> s) & m for s, m in zip(shifts, masks))
        raise CanonicalError("overflow", f"the values repeated at coordinate {coord} add up to "
                                         f"more than the largest {out_vals.dtype.name}",
                             coord=coord)
    if out["dup"] and not sum_duplicates:
        raise CanonicalError("repeated", "subs holds repeated coordinates")
    nnz = out["nnz"]
    if nnz < n:
        # shrink in place (realloc): the rows past nnz were scratch
        out_subs.resize((nnz, N), refcheck=False)
        out_vals.resize(nnz, refcheck=False)
    info["summed"] = bool(out["dup"])
    info["zeros"] = out["zeros"]
    return out_subs, out_vals, info


#: ``SKTENSOR_FAST_HUGE_PAGES``: "auto" (default), "1" (NumPy's choice: transparent huge pages
#: for arrays of 4 MiB or more) or "0" (base pages) for the arrays the construction allocates.
HUGE_PAGES_ENV = "SKTENSOR_FAST_HUGE_PAGES"

_WARNED = set()


def base_pages():
    """Whether :func:`fresh_array` asks for base-size pages instead of huge pages.

    ``SKTENSOR_FAST_HUGE_PAGES=0`` says yes, ``=1`` no; by default (``auto``) yes only under
    a virtio balloon that reports free pages to the host (Linux, feature bit 5 in
    ``/sys/bus/virtio/drivers/virtio_balloon/*/features``).  There, free 2 MiB blocks go back
    to the host about 2 s after they are freed, and a huge page needs one: on the 2-core KVM
    guest of the benchmarks the first touch of 160 MB took 20-30 ms in huge pages freed up to
    2 s before, 230-290 ms in huge pages freed 3 s or more before, and 75-100 ms in base pages
    either way; ``SparseTensor`` from 5M unsorted nonzeros (160 MB of result, right after
    NumPy's argsort) took 0.19-0.43 s in huge pages and 0.13-0.24 s in base pages.  Without
    such a balloon huge pages are the cheaper ones (no host takes their blocks back), so
    NumPy's choice stands (``doc/guide/tuning.rst``, "Huge pages under a balloon").  A bad
    value of the variable gives a ``RuntimeWarning`` and the default.
    """
    raw = os.environ.get(HUGE_PAGES_ENV, "auto").strip().lower()
    if raw in ("0", "1"):
        return raw == "0"
    if raw != "auto" and raw not in _WARNED:
        _WARNED.add(raw)
        _warn(f"ignoring {HUGE_PAGES_ENV}={raw!r}: use 0, 1 or auto", RuntimeWarning)
    return _free_page_reporting()


@functools.lru_cache(maxsize=None)
def _free_page_reporting():
    for dev in glob.glob("/sys/bus/virtio/drivers/virtio_balloon/virtio*"):
        try:
            with open(os.path.join(dev, "features")) as f:
                bits = f.read().strip()
        except OSError:
            continue
        if len(bits) > 5 and bits[5] == "1":        # VIRTIO_BALLOON_F_REPORTING
            return True
    return False


def fresh_array(shape, dtype):
    """``np.empty(shape, dtype)`` for an array the construction writes from scratch: in
    base-size pages where :func:`base_pages` says so (``madvise(MADV_NOHUGEPAGE)`` before its
    first touch), otherwise as NumPy allocates it."""
    out = np.empty(shape, dtype=dtype)
    if base_pages():
        _construct.small_pages(out)
    return out


def _top_digit(n, nbits):
    """Bits of the first (most significant) digit the keys are scattered by: buckets of a few
    thousand keys on average (sorted in cache), at most 2**12 of them."""
    if nbits == 0:
        return 0
    t = max(1, (max(n, 1) // 4096).bit_length())
    return min(t, 12, nbits)


def _coordinate_error(subs, shape, row):
    """The error for the first row with a coordinate outside the shape."""
    for k in range(subs.shape[1]):
        c = int(subs[row, k])
        if c < 0:
            return CanonicalError("coordinate", f"subs holds a negative coordinate ({c}) in mode "
                                                f"{k}", row=row)
        if c >= shape[k]:
            return CanonicalError("coordinate", f"subs holds coordinate {c} in mode {k}, outside "
                                                f"the shape {tuple(shape)} (mode {k} has length "
                                                f"{shape[k]})", row=row)
    raise AssertionError("no bad coordinate in the row reported")  # pragma: no cover
