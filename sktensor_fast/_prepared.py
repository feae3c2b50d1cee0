"""Prepared tensors (a CPU storage format or a device copy), built once and kept with the tensor.

A :class:`~sktensor_fast.SparseTensor` cannot change after it is built, so what a backend
makes of it can be kept as long as the tensor lives: :func:`prepared` returns the prepared
tensor for ``(backend, format, dtype)``, building it at the first request.  ``fit`` (every
``n_init`` start), ``transform``, ``score`` and later fits of the same tensor share it.  The
cache is keyed by the tensor's identity and emptied by a ``weakref.finalize`` when the tensor is
released, which releases the prepared copies (and their device memory) with it.

Cross-validation selects mode-0 slices anew for every candidate (``X[train]``), so a selected
tensor is registered with the tensor it came from (:func:`register_selection`, called by
``SparseTensor.__getitem__``): its prepared forms are kept with that parent, under the digest
of the selection, and the next selection of the same slices finds them.  Those entries are
bounded (:data:`SELECTION_BYTES`, least recently used first out) and leave with the parent.

A prepared tensor is used by one fit at a time: a second thread asking for one in use gets a
private one built for it (the CPU formats keep scratch space between calls).

:func:`value_stats` keeps one compiled pass over the values per tensor (the counts and binary
checks of the estimators, sums).
"""
import contextlib
import hashlib
import threading
import weakref

import numpy as np

from . import _threads

__all__ = ["prepared", "register_selection", "value_stats", "attach", "cache_info",
           "SELECTION_BYTES"]

#: Prepared selections kept per parent tensor, in multiples of the parent's own bytes
#: (coordinates and values): the train and test folds of a 5-fold cross-validation hold 5 times
#: the parent's nonzeros, and a prepared copy up to twice their bytes.
SELECTION_BYTES = 12.0

_LOCK = threading.Lock()
_CACHE = {}          # id(tensor) -> _Entry
_SELECTED = {}       # id(selected tensor) -> (weakref to the parent, digest of the selection)


class _Slot:
    __slots__ = ("T", "lock", "nbytes", "used")

    def __init__(self):
        self.T = None
        self.lock = threading.Lock()
        self.nbytes = 0
        self.used = 0


class _Entry:
    """What is kept for one tensor: its slots, its selections' slots, its value statistics."""

    def __init__(self, nbytes):
        self.slots = {}
        self.nbytes = nbytes
        self.stats = None
        self.clock = 0


def _entry(X, nbytes=None):
    key = id(X)
    with _LOCK:
        entry = _CACHE.get(key)
        if entry is None:
            if nbytes is None:
                nbytes = X.subs.nbytes + X.vals.nbytes
            entry = _CACHE[key] = _Entry(int(nbytes))
            weakref.finalize(X, _forget, key)
        return entry


def _forget(key):
    with _LOCK:
        _CACHE.pop(key, None)
        _SELECTED.pop(key, None)


def register_selection(child, parent, selection):
    """Record that ``child`` holds the mode-0 slices ``selection`` (int array) of ``parent``."""
    parent_key = _SELECTED.get(id(parent))
    digest = hashlib.blake2b(np.ascontiguousarray(selection, dtype=np.int64).tobytes(),
                             digest_size=16).hexdigest()
    if parent_key is not None:
        # a selection of a selection: keep it with the first tensor, under both digests
        root, first = parent_key
        if root() is not None:
            parent, digest = root(), first + "/" + digest
    with _LOCK:
        _SELECTED[id(child)] = (weakref.ref(parent), digest)
    weakref.finalize(child, _forget, id(child))


def _owner(X):
    """``(tensor whose entry holds X's slots, digest or None)``."""
    sel = _SELECTED.get(id(X))
    if sel is not None:
        parent = sel[0]()
        if parent is not None:
            return parent, sel[1]
    return X, None


def _evict(entry, limit=None, everything=False):
    """Drop least recently used slots not in use: selections beyond the entry's budget, or
    (``everything``) every one, the tensor's own too."""
    if limit is None:
        limit = SELECTION_BYTES * max(entry.nbytes, 1)
    sel = [(s.used, k) for k, s in entry.slots.items()
           if (everything or k[-1] is not None) and s.T is not None]
    total = sum(entry.slots[k].nbytes for _, k in sel)
    for _, k in sorted(sel):
        if total <= limit:
            break
        slot = entry.slots[k]
        if slot.lock.acquire(blocking=False):
            try:
                total -= slot.nbytes
                del entry.slots[k]
            finally:
                slot.lock.release()


@contextlib.contextmanager
def prepared(backend, X, format="auto"):
    """Context manager yielding ``backend.prepare(X, format)``, built once per tensor (or
    selection of a tensor), backend, format and dtype, and kept while the tensor lives.

    Only a :class:`~sktensor_fast.SparseTensor` is cached (it cannot change); anything else a
    backend accepts (a distributed tensor's share) is prepared at every call."""
    if not getattr(X, "_immutable", False):
        yield backend.prepare(X, format)
        return
    owner, digest = _owner(X)
    entry = _entry(owner)
    key = (backend, str(format), np.dtype(X.dtype).str, digest)
    with _LOCK:
        slot = entry.slots.get(key)
        if slot is None:
            slot = entry.slots[key] = _Slot()
        entry.clock += 1
        slot.used = entry.clock
    if not slot.lock.acquire(blocking=False):
        # in use by another thread: build a private one
        yield backend.prepare(X, format)
        return
    try:
        if slot.T is None:
            try:
                slot.T = backend.prepare(X, format)
            except MemoryError:
                # make room by dropping what is kept and not in use, then try once more
                with _LOCK:
                    _evict(entry, limit=0, everything=True)
                slot.T = backend.prepare(X, format)
            slot.nbytes = int(getattr(slot.T, "nbytes", 0) or 0)
            if digest is not None:
                with _LOCK:
                    _evict(entry)
        yield slot.T
    finally:
        slot.lock.release()


def attach(X, backend, format, T, stats=None, nbytes=None):
    """Keep ``T``, built elsewhere, as what :func:`prepared` gives for ``X`` on ``backend``
    in ``format``, and ``stats`` as its :func:`value_stats`: for a tensor whose nonzeros are
    not on the host (``partial_fit``'s window built on a device), whose prepared form and
    statistics cannot be made from host arrays.

    Parameters
    ----------
    X : object
        The tensor (weakly referenced; what is kept leaves with it).
    backend : Backend
        The backend ``T`` belongs to.
    format : str
        The storage format, as :func:`prepared` is asked for it.
    T : object
        The prepared tensor.
    stats : dict, optional
        The value statistics, as :func:`value_stats` returns them.
    nbytes : int, optional
        Bytes of the tensor's nonzeros (by default those of ``X.subs`` and ``X.vals``).
    """
    entry = _entry(X, nbytes)
    key = (backend, str(format), np.dtype(X.dtype).str, None)
    with _LOCK:
        slot = entry.slots.get(key)
        if slot is None:
            slot = entry.slots[key] = _Slot()
        slot.T = T
        slot.nbytes = int(getattr(T, "nbytes", 0) or 0)
        if stats is not None:
            entry.stats = dict(stats)


def value_stats(X):
    """One compiled pass over the values of ``X`` (kept with the tensor): ``nonint``,
    ``negative``, ``nonbinary`` (counts, and ``first_*`` positions), ``sum`` and ``sum_sq``."""
    from ._native import _construct
    entry = _entry(X)
    if entry.stats is None:
        entry.stats = _construct.value_stats(np.ascontiguousarray(X.vals),
                                             _threads.get_num_threads())
    return entry.stats


def cache_info(X):
    """What is kept for ``X``: a list of ``(backend name, format, dtype, selection, bytes)``."""
    owner, _ = _owner(X)
    entry = _CACHE.get(id(owner))
    if entry is None:
        return []
    return [(getattr(k[0], "name", str(k[0])), k[1], k[2], k[3], s.nbytes)
            for k, s in entry.slots.items() if s.T is not None]
