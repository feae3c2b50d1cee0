"""Synthetic sparse tensors with Zipf-skewed coordinates, shaped like FROSTT tensors."""
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from sktensor_fast import SparseTensor

#: shapes and nonzero counts of FROSTT tensors (frostt.io)
FROSTT = {
    "uber": ((183, 24, 1140, 1717), 3_309_490),
    "nips": ((2482, 2862, 14036, 17), 3_101_609),
    "chicago": ((6186, 24, 77, 32), 5_330_673),
    "nell2": ((12092, 9184, 28818), 76_879_419),
    "enron": ((6066, 5699, 244268, 1176), 54_202_099),
}


def zipf_indices(n, size, rng, a=1.2):
    """``size`` indices in [0, n) with P(i) ∝ 1/(rank i)^a, heavy indices scattered."""
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** a
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    u = rng.random(size)
    perm = rng.permutation(n)
    out = np.empty(size, dtype=np.int64)
    guide = _guide_table(cdf) if n >= 64 else None

    def piece(lo):
        # the search and the gather of a slice (NumPy releases the GIL in both)
        hi = min(size, lo + _PIECE)
        idx = (np.searchsorted(cdf, u[lo:hi], side="right") if guide is None
               else _search_right(cdf, guide, u[lo:hi]))
        np.minimum(idx, n - 1, out=idx)
        np.take(perm, idx, out=out[lo:hi])

    starts = range(0, size, _PIECE)
    if _THREADS > 1 and size > _PIECE:
        with ThreadPoolExecutor(_THREADS) as pool:
            list(pool.map(piece, starts))
    else:
        for lo in starts:
            piece(lo)
    return out


#: bins of the guide table per entry of the CDF (:func:`_guide_table`)
_GUIDE_BINS = 16


def _guide_table(cdf):
    """``g[k] = searchsorted(cdf, k / K, "right")`` for the ``K + 1`` bin edges ``k / K`` of
    [0, 1], ``K`` = :data:`_GUIDE_BINS` x ``len(cdf)``."""
    K = _GUIDE_BINS * len(cdf)
    return np.searchsorted(cdf, np.arange(K + 1, dtype=np.float64) / K, side="right")


def _search_right(cdf, guide, u):
    """``np.searchsorted(cdf, u, "right")`` for ``u`` in [0, 1), through the guide table: where
    the bins around ``u``'s (one more on each side, against the rounding of ``u * K``) hold no
    entry of the CDF, the answer is the table's; the few others are searched."""
    K = len(guide) - 1
    b = (u * K).astype(np.int64)
    np.clip(b, 0, K - 1, out=b)
    lo = guide[np.maximum(b - 1, 0)]
    hi = guide[np.minimum(b + 2, K)]
    todo = np.flatnonzero(lo != hi)
    if todo.size:
        lo[todo] = np.searchsorted(cdf, u[todo], side="right")
    return lo


#: slices of :func:`zipf_indices`' searches, done on this many threads (the same draws: the
#: uniforms and the permutation are drawn first, in the order they always were)
_PIECE = 1 << 20
_THREADS = os.cpu_count() or 1


#: a folder where :func:`synthetic_tensor` keeps the tensors it generates and reads them back
#: (the same arrays; several benchmarks of one job on a large tensor generate it once)
CACHE_ENV = "SKTF_SYNTH_CACHE"

#: the generators of :func:`synthetic_tensor`: ``"numpy"`` (NumPy's generator, the tensors
#: the benchmarks always had) and ``"compiled"`` (the threaded passes of
#: ``sktensor_fast._native._synth``: other tensors of the same distribution, built in a
#: fraction of the time and memory at hundreds of millions of nonzeros)
METHODS = ("numpy", "compiled")

#: names the default method of :func:`synthetic_tensor` when set
METHOD_ENV = "SKTF_SYNTH_METHOD"


def default_method():
    """The method :func:`synthetic_tensor` uses when none is given: ``SKTF_SYNTH_METHOD`` when
    set (and not empty), else ``"numpy"``."""
    raw = os.environ.get(METHOD_ENV, "").strip()
    if not raw:
        return "numpy"
    if raw.lower() not in METHODS:
        raise ValueError(f"{METHOD_ENV}={raw!r} names no generator: use one of "
                         f"{', '.join(METHODS)}")
    return raw.lower()


def synthetic_tensor(shape, nnz, seed=0, a=1.2, dtype=np.float64, exact=True, method=None):
    """A sparse tensor of the given shape with ``nnz`` distinct nonzeros (about ``nnz`` when
    ``exact`` is False: repeated coordinates are summed).  Values are counts 1..4.  With the
    environment variable ``SKTF_SYNTH_CACHE`` naming a folder, the coordinates and values are
    kept there and read back by the next call with the same arguments.

    ``method`` picks the generator (:data:`METHODS`; default :func:`default_method`, that is
    ``SKTF_SYNTH_METHOD`` or ``"numpy"``).  Both draw every coordinate of mode ``k`` from the
    same Zipf(``a``) law over ``shape[k]`` indices with the heavy indices scattered, in the
    same rounds (so their tensors are alike in size and skew), but they draw different
    tensors for one seed.  ``"compiled"`` (the threaded passes of
    ``sktensor_fast._native._synth`` on :data:`_THREADS` threads) gives the same tensor for
    any number of threads; it needs a nonnegative integer seed and a shape of fewer than
    2**62 entries.  Its cached tensors are kept under names of their own."""
    method = default_method() if method is None else method
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}, got "
                         f"{method!r}")
    generate = _generate if method == "numpy" else _generate_compiled
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        return generate(shape, nnz, seed, a, dtype, exact)
    parts = [*shape, nnz, seed, a, np.dtype(dtype).str, int(exact)]
    if method != "numpy":  # the NumPy tensors keep the names they always had
        parts.append(method)
    key = "_".join(map(str, parts))
    path = os.path.join(folder, f"synth_{key}.npz")
    if os.path.exists(path):
        with np.load(path) as z:
            subs, vals = z["subs"], z["vals"]
        # read-only arrays are shared by the tensor, not copied again
        subs.flags.writeable = False
        vals.flags.writeable = False
        return SparseTensor(subs, vals, shape, dtype=dtype, copy=False)
    X = generate(shape, nnz, seed, a, dtype, exact)
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp.npz"
    np.savez(tmp, subs=X.subs, vals=X.vals)
    os.replace(tmp, path)
    return X


def _sorted(lin):
    """The nonnegative int64 array ``lin`` in increasing order: by the package's compiled,
    threaded radix sort of construction for large arrays (the same result as ``np.sort``,
    several times faster on many cores), else by NumPy."""
    if lin.size < (1 << 20):
        lin.sort()
        return lin
    from sktensor_fast._native import _construct
    n = lin.size
    nbits = max(1, int(lin.max()).bit_length())
    keys = lin.view(np.uint64)
    scratch = np.empty(n, dtype=np.uint64)
    # values carried along (float32 zeros: the least traffic); only the keys are used
    vals, vals1, vals2 = (np.zeros(n, dtype=np.float32) for _ in range(3))
    which, _ = _construct.radix_sort(keys, vals, scratch, vals1, vals2, nbits, _THREADS)
    return (keys if which == 0 else scratch).view(np.int64)


def _generate(shape, nnz, seed, a, dtype, exact):
    rng = np.random.default_rng(seed)
    total = 1
    for s in shape:
        total *= int(s)
    if exact and total < 2 ** 62 and nnz <= total // 2:
        lin = np.zeros(0, dtype=np.int64)
        factor = 1.3
        while lin.size < nnz:
            need = int((nnz - lin.size) * factor) + 1024
            new = np.zeros(need, dtype=np.int64)
            for s in shape:
                new *= s
                new += zipf_indices(s, need, rng, a)
            lin = _sorted(np.concatenate([lin, new]))
            lin = lin[np.concatenate(([True], lin[1:] != lin[:-1]))]
            factor *= 2
        if lin.size > nnz:  # drop a random subset, keeping the sorted order
            keep = _sorted(rng.permutation(lin.size)[:nnz])
            lin = lin[keep]
        subs = np.empty((nnz, len(shape)), dtype=np.int64)
        for k in range(len(shape) - 1, -1, -1):
            subs[:, k] = lin % shape[k]
            lin //= shape[k]
    else:
        subs = np.stack([zipf_indices(s, nnz, rng, a) for s in shape], axis=1)
    vals = rng.integers(1, 5, size=subs.shape[0]).astype(dtype)
    return SparseTensor(subs, vals, shape, dtype=dtype, copy=False)


# ---------------------------------------------------------------- the compiled generator
#: bins of the compiled generator's guide tables per index of a mode (fewer than
#: :data:`_GUIDE_BINS`: a compiled scan of a few entries costs less than the cache misses of
#: a larger table)
_COMPILED_GUIDE_BINS = 4

#: the compiled generator draws linear indices below 2**62 (int64)
_COMPILED_MAX_BITS = 62

#: bits of the priority histogram that finds which distinct keys an exact tensor keeps
_PRIORITY_BITS = 16

#: rounds of draws (each with twice the factor of the one before) after which the compiled
#: generator gives up finding ``nnz`` distinct coordinates
_MAX_ROUNDS = 16


def _check_compiled_args(shape, nnz, seed, a, dtype):
    """The arguments of the compiled generator, checked: (shape, nnz, seed, a, dtype, the
    number of entries of the shape)."""
    try:
        shape = tuple(shape)
    except TypeError:
        raise ValueError(f"shape must be a sequence of mode lengths, got {shape!r}") from None
    if not shape:
        raise ValueError("shape must have at least one mode")
    for s in shape:
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) \
                or not 1 <= s < 2 ** 31:
            raise ValueError(f"shape must hold integers in [1, 2**31) for the compiled "
                             f"generator, got {shape!r}")
    shape = tuple(int(s) for s in shape)
    if isinstance(nnz, (bool, np.bool_)) or not isinstance(nnz, (int, np.integer)) or nnz < 0:
        raise ValueError(f"nnz must be an integer >= 0, got {nnz!r}")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) \
            or seed < 0:
        raise ValueError(f"seed must be an integer >= 0 for the compiled generator, got "
                         f"{seed!r}")
    try:
        a = float(a)
    except (TypeError, ValueError):
        raise ValueError(f"a must be a real number, got {a!r}") from None
    if not np.isfinite(a):
        raise ValueError(f"a must be finite, got {a!r}")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}") from None
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    total = 1
    for s in shape:
        total *= s
    if total >= 1 << _COMPILED_MAX_BITS:
        raise ValueError(f"the compiled generator needs a shape of fewer than "
                         f"2**{_COMPILED_MAX_BITS} entries (linear indices in int64); "
                         f"{shape!r} has {total}: use method='numpy'")
    return shape, int(nnz), int(seed), a, dtype, total


def _zipf_tables(shape, a):
    """The distribution tables of :func:`sktensor_fast._native._synth.draw_linear`: every
    mode's CDF of P(i) ∝ 1/(rank i)^a and guide table, concatenated, and the row-major
    strides, as a dict of its keyword arguments (the permutations aside)."""
    cdfs, guides = [], []
    for n in shape:
        p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** a
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        K = _COMPILED_GUIDE_BINS * n
        cdfs.append(cdf)
        guides.append(np.searchsorted(cdf, np.arange(K + 1, dtype=np.float64) / K,
                                      side="right").astype(np.int32))
    strides = np.ones(len(shape), dtype=np.int64)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]

    def starts(parts):
        return np.cumsum([0] + [len(x) for x in parts], dtype=np.int64)

    return dict(cdfs=np.concatenate(cdfs), cdf_starts=starts(cdfs),
                guides=np.concatenate(guides), guide_starts=starts(guides), strides=strides)


def _permutations(shape, rng):
    """One permutation of the indices of every mode (``rng.permutation``, mode after mode),
    concatenated as int32: where the heavy indices of a round of draws lie."""
    return np.concatenate([rng.permutation(n).astype(np.int32) for n in shape])


def _fresh(shape, dtype):
    """An uninitialised array that a compiled pass writes from scratch, in the pages the
    package's construction uses for such arrays (``SKTENSOR_FAST_HUGE_PAGES``)."""
    from sktensor_fast._native.canonical import fresh_array
    return fresh_array(shape, dtype)


def _sorted_pair(buf, nbits, nt):
    """The int64 array ``buf`` of nonnegative keys below ``2**nbits``, sorted: ``(sorted,
    other)``, ``buf`` and a scratch buffer of its size in some order."""
    from sktensor_fast._native import _construct
    scratch = _fresh(buf.shape, buf.dtype)
    which = _construct.radix_sort_keys(buf.view(np.uint64), scratch.view(np.uint64), nbits,
                                       nt)
    return (buf, scratch) if which == 0 else (scratch, buf)


def _shrunk(arr, n):
    """``arr[:n]`` of an array of our own, its tail given back to the allocator."""
    arr.resize(n, refcheck=False)
    return arr


def _keep_threshold(keys, nnz, seed, nt):
    """(priority, key) of the ``nnz``-th smallest pair (priority(x), x) over the distinct
    values ``x`` of the sorted array ``keys``: the pairs up to it are the ``nnz`` kept."""
    from sktensor_fast._native import _synth
    hist = _synth.priority_histogram(keys, seed, _PRIORITY_BITS, nt)
    cum = np.cumsum(hist)
    bucket = int(np.searchsorted(cum, nnz, side="left"))
    before = int(cum[bucket - 1]) if bucket else 0
    prios, members = _synth.priority_members(keys, seed, bucket, _PRIORITY_BITS, nt)
    order = np.lexsort((members, prios))
    last = order[nnz - before - 1]
    return int(prios[last]), int(members[last])


def _distinct_sorted(shape, nnz, seed, tables, nbits, nt):
    """``nnz`` distinct linear indices in increasing order (int64 array).

    The rounds of draws are those of the NumPy method: about ``1.3 nnz`` draws, then, while
    fewer than ``nnz`` distinct indices were drawn, ``(nnz - distinct) * factor`` more from
    the next draw numbers with ``factor`` doubling every round (so the two methods keep about
    as many indices, and as skewed, for one set of arguments).  A round is drawn in batches of
    at most ``1.3 nnz`` draws (the memory of one batch); each batch is sorted, made distinct
    and merged into the distinct indices so far.  Of the distinct indices of the last round,
    the ``nnz`` whose pair (priority, index) is smallest are kept: a pseudo-random subset that
    depends on the seed and the indices only.

    Like the NumPy method's, every round scatters the heavy indices of each mode by a
    permutation of its own (``default_rng(seed).permutation``, round after round, mode after
    mode)."""
    from sktensor_fast._native import _synth
    rng = np.random.default_rng(seed)
    have, count, drawn, factor = None, 0, 0, 1.3
    cap = int(1.3 * nnz) + 1024
    for _ in range(_MAX_ROUNDS):
        left = int((nnz - count) * factor) + 1024
        perms = _permutations(shape, rng)
        while left > 0:
            size = min(left, cap)
            buf = _fresh(size, np.int64)
            _synth.draw_linear(buf, seed, drawn, perms=perms, num_threads=nt, **tables)
            drawn += size
            left -= size
            srt, other = _sorted_pair(buf, nbits, nt)
            del buf
            fresh = _synth.compact(srt, other, seed, None, nt)
            del srt
            other = _shrunk(other, fresh)
            if have is None:
                have = other
            else:
                merged = _fresh(_synth.merge_unique(have, other, None, nt), np.int64)
                _synth.merge_unique(have, other, merged, nt)
                have = merged
                del merged
            del other
        count = have.size
        if count >= nnz:
            break
        factor *= 2
    else:
        raise ValueError(f"the compiled generator found only {count} distinct coordinates in "
                         f"{drawn} draws, fewer than nnz={nnz}: ask for fewer nonzeros, a "
                         f"smaller exponent a, or exact=False")
    if count == nnz:
        return have
    threshold = _keep_threshold(have, nnz, seed, nt)
    lin = _fresh(nnz, np.int64)
    kept = _synth.compact(have, lin, seed, threshold, nt)
    if kept != nnz:
        raise RuntimeError(f"the compiled generator kept {kept} coordinates, not {nnz}")
    return lin


def _generate_compiled(shape, nnz, seed, a, dtype, exact):
    """:func:`synthetic_tensor` by the compiled passes of ``sktensor_fast._native._synth``
    on :data:`_THREADS` threads (the same tensor for any number)."""
    from sktensor_fast._native import _synth
    shape, nnz, seed, a, dtype, total = _check_compiled_args(shape, nnz, seed, a, dtype)
    nt = max(1, int(_THREADS))
    N = len(shape)
    if nnz == 0:
        return SparseTensor(np.zeros((0, N), dtype=np.int64), np.zeros(0, dtype=dtype), shape,
                            dtype=dtype, copy=False)
    tables = _zipf_tables(shape, a)
    nbits = max(1, (total - 1).bit_length())
    if exact and nnz <= total // 2:
        lin = _distinct_sorted(shape, nnz, seed, tables, nbits, nt)
        vals = None
    else:
        # nnz draws; the values of repeated coordinates are summed
        buf = _fresh(nnz, np.int64)
        perms = _permutations(shape, np.random.default_rng(seed))
        _synth.draw_linear(buf, seed, 0, perms=perms, num_threads=nt, **tables)
        srt, lin = _sorted_pair(buf, nbits, nt)
        del buf
        distinct = _synth.count_unique(srt, nt)
        vals = _fresh(distinct, dtype)
        _synth.summed_values(srt, vals, seed, nt)
        _synth.compact(srt, lin, seed, None, nt)
        del srt
        lin = _shrunk(lin, distinct)
    subs = _fresh((lin.size, N), np.int64)
    _synth.split_linear(lin, subs, np.asarray(shape, dtype=np.int64), nt)
    del lin
    if vals is None:
        vals = _fresh(subs.shape[0], dtype)
        _synth.draw_values(vals, seed, 0, nt)
    # read-only arrays are shared by the tensor, not copied
    subs.flags.writeable = False
    vals.flags.writeable = False
    return SparseTensor(subs, vals, shape, dtype=dtype, copy=False)


def scaled(name, max_nnz):
    """FROSTT shape ``name`` with its nonzero count capped at ``max_nnz``."""
    shape, nnz = FROSTT[name]
    return shape, min(nnz, max_nnz)
