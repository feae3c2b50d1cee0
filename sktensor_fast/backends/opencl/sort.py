"""The order of a tensor's nonzeros by one mode, computed on the OpenCL device.

:func:`enqueue_mode_orders` sorts the device's int32 coordinates of every mode after the first
with a stable least-significant-digit radix sort (``kernels/sort.cl``): per pass a count of the
digits of every tile of consecutive keys, a prefix sum of those counts and a stable scatter.
The result equals ``np.argsort(subs[:, mode], kind="stable")`` exactly.  A pass sorts one digit
of ``RADIX_BITS`` bits at most; a mode of length ``L`` takes ``ceil(bits(L - 1) / RADIX_BITS)``
passes, the digit narrowed so that the passes share the bits evenly (but not below
``MIN_BITS``, so that few programs are built).

:func:`device_argsort` sorts a host array of keys the same way (tests, benchmarks).
"""

import numpy as np

__all__ = ["enqueue_mode_orders", "device_argsort", "sort_config", "usable", "RADIX_BITS"]

#: most bits of a digit (one pass each), 1 to 8
RADIX_BITS = 6

#: fewest bits of a digit (unless RADIX_BITS is less): short modes share one program
MIN_BITS = 4

#: (work-items per group, keys per work-item) for each digit width: the tile of keys, its
#: positions and the group's digit counts (16-bit, one per digit and work-item) in local
#: memory: 4 bits: 2 x 16.5 KiB + 8 KiB; 5 and 6 bits: 2 x 8.3 KiB + 8 / 16 KiB; 7 and 8
#: bits: 2 x 4.1 KiB + 16 / 32 KiB
_CONFIG = {1: (256, 16), 2: (256, 16), 3: (256, 16), 4: (256, 16), 5: (128, 16),
           6: (128, 16), 7: (64, 16), 8: (64, 16)}


def _local_bytes(bits, wg, per_item):
    tile = wg * per_item
    pad = tile + (tile - 1) // 32
    return 2 * 4 * pad + 2 * (1 << bits) * wg + 4 * wg + 2 * 4 * (1 << bits)


def sort_config(backend, length, max_bits=None):
    """``(digit bits, work-group size, keys per work-item, passes)`` of the sort of keys in
    ``[0, length)`` on ``backend``'s device, or None when no digit width fits the device's
    local memory and work-group size (then the host sorts)."""
    max_bits = RADIX_BITS if max_bits is None else int(max_bits)
    if not 1 <= max_bits <= 8:
        raise ValueError(f"RADIX_BITS must be between 1 and 8, got {max_bits}")
    bits = (int(length) - 1).bit_length() if length > 1 else 0
    if bits == 0:
        return (0, 0, 0, 0)
    local = int(backend.device.local_mem_size)
    max_wg = int(backend.max_wg)
    for top in range(max_bits, 0, -1):
        passes = -(-bits // top)
        digit = max(-(-bits // passes), min(MIN_BITS, top))
        wg, per_item = _CONFIG[digit]
        while wg > max_wg or _local_bytes(digit, wg, per_item) > local:
            if per_item > 4:
                per_item //= 2
            elif wg > 16:
                wg //= 2
            else:
                break
        if wg <= max_wg and _local_bytes(digit, wg, per_item) <= local:
            return digit, wg, per_item, passes
    return None


def usable(backend, shape, max_bits=None):
    """Whether the device can sort the nonzeros by every mode of ``shape`` after the first:
    a digit width fits its local memory, and the compiled kernels run work-groups of the
    size they were built for (builds the programs, cached)."""
    cl = backend.cl
    for length in shape[1:]:
        cfg = sort_config(backend, length, max_bits)
        if cfg is None:
            return False
        bits, wg, per_item, passes = cfg
        if not passes:
            continue
        for name, knl in _program(backend, bits, wg, per_item).items():
            if name in ("scan_add", "order_iota"):
                continue
            most = knl.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                           backend.device)
            if int(most) < wg:
                return False
    return True


def _program(backend, bits, wg, per_item):
    """The kernels of sort.cl for the digit width, work-group size and items per work-item,
    by name, from the backend's program cache."""
    def source():
        from .program import kernel_source
        return (f"#define RADIX_BITS {bits}\n#define WG {wg}\n#define PER_ITEM {per_item}\n"
                + kernel_source("sort.cl"))
    return {name: backend.kernel(("sort", bits, wg, per_item), name, source,
                                 what="the radix sort (sort.cl)")
            for name in ("radix_count", "scan_blocks", "scan_add", "radix_scatter",
                         "order_iota")}


def _enqueue_scan(cl, q, knl, data, n, tile, wg, scratch, wait_for):
    """Exclusive prefix sum of ``data[0:n]`` (int32, in place) by tiles of ``tile``."""
    nb = -(-n // tile)
    sums = scratch.pop()
    ev = knl["scan_blocks"](q, (nb * wg,), (wg,), np.int64(n), data, sums, wait_for=wait_for)
    if nb > 1:
        ev = _enqueue_scan(cl, q, knl, sums, nb, tile, wg, scratch, [ev])
        ev = knl["scan_add"](q, (_round_up(n, 256),), None, np.int64(n), data, sums)
    return ev


def _round_up(n, m):
    return -(-n // m) * m


class _Scratch:
    """Device scratch of the sorts of one tensor, allocated for the largest mode and kept
    until all its sorts are enqueued (released by the driver once they finish)."""

    def __init__(self, backend, n, configs):
        cl = backend.cl
        ctx = backend.ctx
        self.tmp_pos = self.keys = None
        most = max((c[3] for c in configs), default=0)
        if most >= 2:
            self.tmp_pos = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * n)
            self.keys = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * n)
                         for _ in range(min(most - 1, 2))]
        # digit counts and the block sums of every level of their prefix sum
        self.counts, self.levels = None, []
        size = 0
        level_sizes = []
        for bits, wg, per_item, passes in configs:
            if not passes:
                continue
            tile = wg * per_item
            m = (1 << bits) * (-(-n // tile))
            size = max(size, m)
            sizes = []
            while True:
                m = -(-m // tile)
                sizes.append(m)
                if m <= 1:
                    break
            for k, s in enumerate(sizes):
                if k < len(level_sizes):
                    level_sizes[k] = max(level_sizes[k], s)
                else:
                    level_sizes.append(s)
        if size:
            self.counts = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * size)
            self.levels = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * max(s, 1))
                           for s in level_sizes]


def enqueue_mode_orders(backend, queue, subs, n, shape, orders, wait_for=None, max_bits=None,
                        modes=None):
    """Enqueue on ``queue`` the stable orders of the ``n`` nonzeros by every mode after the
    first.

    Parameters
    ----------
    backend : OpenCLBackend
        Its context builds the kernels.
    queue : pyopencl.CommandQueue
        The queue the sorts run on (in order).
    subs : pyopencl.Buffer
        The ``n x len(shape)`` int32 coordinates, row-major.
    n : int
        Nonzeros (less than 2**31).
    shape : tuple of int
        The tensor's shape; coordinates of mode ``m`` are in ``[0, shape[m])``.
    orders : list
        ``orders[m]`` (``m >= 1``): a device buffer of ``n`` int32 for the order by mode ``m``.
    wait_for : list of pyopencl.Event, optional
        Events the first kernel waits for (the upload of ``subs``).
    max_bits : int, optional
        Most bits of a digit (:data:`RADIX_BITS` by default).
    modes : sequence of int, optional
        The modes to sort (every mode after the first by default).

    Returns
    -------
    event : pyopencl.Event or None
        The last kernel's event (None when nothing was enqueued).
    scratch : object
        The sorts' device scratch: drop it after ``event`` (a driver that frees memory only
        when the kernels using it are done may otherwise hold it while more is allocated).
    """
    cl = backend.cl
    if n >= 2 ** 31:
        raise ValueError(f"the device sort handles fewer than 2**31 nonzeros, got {n}")
    ndim = len(shape)
    modes = list(range(1, ndim)) if modes is None else [int(m) for m in modes]
    configs = [sort_config(backend, shape[m], max_bits) for m in modes]
    if any(c is None for c in configs):
        raise ValueError(f"the device '{backend.device.name.strip()}' has too little local "
                         f"memory for the radix sort; sort the orders on the host")
    if n == 0 or not modes:
        return None, None
    scratch = _Scratch(backend, n, configs)
    ev = None
    wait = list(wait_for) if wait_for else None
    for mode, (bits, wg, per_item, passes) in zip(modes, configs):
        out = orders[mode]
        if passes == 0:
            knl = _program(backend, 1, 64, 1)["order_iota"]
            ev = knl(queue, (_round_up(n, 256),), None, np.int64(n), out, wait_for=wait)
            wait = None
            continue
        knl = _program(backend, bits, wg, per_item)
        tile = wg * per_item
        ntiles = -(-n // tile)
        for p in range(passes):
            last = p == passes - 1
            pos_out = out if (passes - 1 - p) % 2 == 0 else scratch.tmp_pos
            if p == 0:
                keys_in, stride, offset, pos_in = subs, ndim, mode, out
            else:
                keys_in, stride, offset = scratch.keys[(p - 1) % 2], 1, 0
                pos_in = out if (passes - p) % 2 == 0 else scratch.tmp_pos
            keys_out = subs if last else scratch.keys[p % 2]
            shift = np.int32(p * bits)
            knl["radix_count"](queue, (ntiles * wg,), (wg,), np.int64(n), np.int32(stride),
                               np.int32(offset), shift, np.int32(ntiles), keys_in,
                               scratch.counts, wait_for=wait)
            wait = None
            _enqueue_scan(cl, queue, knl, scratch.counts, (1 << bits) * ntiles, tile, wg,
                          list(reversed(scratch.levels)), None)
            ev = knl["radix_scatter"](queue, (ntiles * wg,), (wg,), np.int64(n),
                                      np.int32(stride), np.int32(offset), shift,
                                      np.int32(ntiles), np.int32(p == 0), np.int32(not last),
                                      keys_in, pos_in, scratch.counts, keys_out, pos_out)
    return ev, scratch


def device_argsort(backend, keys, length=None, max_bits=None):
    """``np.argsort(keys, kind="stable")`` as int32, computed by the device's radix sort.

    Parameters
    ----------
    backend : OpenCLBackend
        The device.
    keys : array of int
        Keys in ``[0, length)``.
    length : int, optional
        One more than the largest possible key (``keys.max() + 1`` by default).
    max_bits : int, optional
        Most bits of a digit (:data:`RADIX_BITS` by default).

    Returns
    -------
    numpy.ndarray
        The int32 stable order of ``keys``.
    """
    cl = backend.cl
    keys = np.asarray(keys)
    if keys.ndim != 1:
        raise ValueError(f"keys must be one-dimensional, got shape {keys.shape}")
    n = keys.shape[0]
    if length is None:
        length = int(keys.max()) + 1 if n else 1
    if n and (keys.min() < 0 or keys.max() >= length):
        raise ValueError(f"keys must lie in [0, {length})")
    # two columns: a mode 0 that is never sorted and the keys as mode 1
    subs = np.zeros((n, 2), dtype=np.int32)
    subs[:, 1] = keys
    q = backend.queue
    mf = cl.mem_flags
    d_subs = cl.Buffer(backend.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=subs) if n else None
    out = cl.Buffer(backend.ctx, mf.READ_WRITE, max(4 * n, 4))
    enqueue_mode_orders(backend, q, d_subs, n, (1, int(length)), [None, out],
                        max_bits=max_bits)
    res = np.empty(n, dtype=np.int32)
    if n:
        cl.enqueue_copy(q, res, out)
    q.finish()
    return res
