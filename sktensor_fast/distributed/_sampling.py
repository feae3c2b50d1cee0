"""GCP's samples, drawn by the processes that own them.

The CPU kernels draw sample ``j`` of a step from a counter-based generator (splitmix64's
finaliser applied to the step key and ``j``, see ``backends/cpu/_gcp.pyx``).  Here every
process evaluates the same generator for the sample numbers and keeps the samples whose data
it holds: a nonzero sample ``t`` (the ``t``-th nonzero in lexicographic order) belongs to the
process whose share of mode 0 holds it, a sample of the other entries to the owner of its
mode-0 coordinate, which alone can tell whether it hit a nonzero (and, for the stratified
sampler, reject it: the sample then moves on to its next coordinates, which may belong to
another process; those few are settled in rounds).  So the processes together draw exactly
the samples of a one-process fit, whatever their number.
"""
import numpy as np

from ..backends import gcp_plan
from ..backends.gcp_plan import linear_index

__all__ = ["step_key", "LocalShare", "draw_owned"]

# rejections of a stratified zero sample in a row before the zero of a uniform rank is taken
# instead: ``gcp_plan.MAX_ATTEMPTS``, as the kernels (read at every draw)


# the generator is the kernels' own (sktensor_fast/include/sktf_rng.h), through _numerics
def step_key(seed, step):
    """The generator key of step ``step`` of a run seeded with ``seed`` (as the kernels)."""
    from .._native import _numerics
    return _numerics.step_key(seed, step)


def _sample_keys(key, j):
    from .._native import _numerics
    return _numerics.sample_keys(key, np.ascontiguousarray(j, dtype=np.int64))


def _rand_below(skey, c, n):
    """Uniform integers in [0, n) from the c-th random word of the sample keys ``skey``."""
    from .._native import _numerics
    return _numerics.rand_below(np.ascontiguousarray(skey, dtype=np.uint64), int(c), int(n))


class LocalShare:
    """What a process needs to draw its samples: its nonzeros of mode 0 (global coordinates,
    lexicographic order), their global position, its mode-0 rows, and the global sizes.

    ``zeros_before``: zeros (entries that are not nonzeros) of the processes before this one,
    in linear-index order (its rows' entries follow theirs)."""

    def __init__(self, subs, vals, first, lo0, hi0, shape, nnz, zeros_before=0):
        self.subs = subs
        self.vals = np.ascontiguousarray(vals, dtype=np.float64)
        self.first = int(first)
        self.lo0, self.hi0 = int(lo0), int(hi0)
        self.shape = tuple(int(s) for s in shape)
        self.nnz = int(nnz)
        size = 1
        for s in self.shape:
            size *= s
        self.size = size
        self.nzero = size - self.nnz
        self.linear = size < 2 ** 63
        self.zeros_before = int(zeros_before)
        if self.linear:
            self.strides = np.array([int(np.prod(self.shape[k + 1:], dtype=object))
                                     for k in range(len(self.shape))], dtype=np.int64)
            self.lin = linear_index(subs, self.shape)
            self.first_entry = self.lo0 * int(self.strides[0])
            self.my_zeros = (self.hi0 - self.lo0) * int(self.strides[0]) - subs.shape[0]
            # zeros before local nonzero j, counted from this process's first entry
            self.gaps = self.lin - self.first_entry - np.arange(subs.shape[0], dtype=np.int64)

    def zeros_here(self, t):
        """Which global zero ranks ``t`` (0-based, linear-index order) lie in this process's
        rows."""
        return (t >= self.zeros_before) & (t < self.zeros_before + self.my_zeros)

    def zero_coords(self, t):
        """Coordinates of the zeros of global ranks ``t`` (all in this process's rows), as the
        kernels' ``_zero_coords``."""
        tl = t - self.zeros_before
        e = self.first_entry + tl + np.searchsorted(self.gaps, tl, side="right")
        return (e[:, None] // self.strides[None, :]) % np.asarray(self.shape, dtype=np.int64)

    def find(self, idx):
        """Positions of coordinate rows ``idx`` (all in this process's mode-0 rows) among the
        local nonzeros, -1 when absent."""
        out = np.full(idx.shape[0], -1, dtype=np.int64)
        if idx.shape[0] == 0 or self.subs.shape[0] == 0:
            return out
        if self.linear:
            from .._native import _numerics
            from .._threads import get_num_threads
            pos = _numerics.find_sorted(self.lin, linear_index(idx, self.shape),
                                        get_num_threads())
            hit = pos >= 0
        else:
            rows = [tuple(r) for r in self.subs.tolist()]
            table = {r: i for i, r in enumerate(rows)}
            pos = np.array([table.get(tuple(r), -1) for r in idx.tolist()], dtype=np.int64)
            hit = pos >= 0
        out[hit] = pos[hit]
        return out


def draw_owned(chan, share, key, plan, zero_list=False):
    """This process's samples of a draw: ``(j, subs, x, w, corr)`` sorted by sample number.

    ``plan`` is ``(p, q, wp, wq, zmode, include_nz, correct)`` as from
    ``backends.cpu.gcp_ops.sampler_plan`` (sampling of all entries, no mask).  ``zero_list``:
    the stratified sampler takes its zeros from the list of all zeros (dense tensors) instead
    of by rejection.  Collective when there are samples of the other entries (rejections are
    settled in rounds).
    """
    p, q, wp, wq, zmode, include_nz, correct = plan
    N = len(share.shape)
    js, subs, xs, ws, cs = [], [], [], [], []

    def add_zeros(jz, t):
        mine = share.zeros_here(t)
        js.append(jz[mine])
        subs.append(share.zero_coords(t[mine]).astype(np.int64).reshape(-1, N))
        xs.append(np.zeros(int(mine.sum())))
        ws.append(np.full(int(mine.sum()), wq))
        cs.append(np.zeros(int(mine.sum()), dtype=np.int8))
    # ---- samples of the nonzeros
    if p:
        j = np.arange(p, dtype=np.int64)
        t = _rand_below(_sample_keys(key, j), 0, share.nnz)
        t -= share.first
        mine = (t >= 0) & (t < share.subs.shape[0])
        t = t[mine]
        js.append(j[mine])
        subs.append(share.subs[t])
        xs.append(share.vals[t])
        ws.append(np.full(t.shape[0], wp))
        cs.append(np.full(t.shape[0], 1 if correct else 0, dtype=np.int8))
    # ---- samples of the other entries
    if q and zero_list and zmode == 2:
        jz = np.arange(p, p + q, dtype=np.int64)
        add_zeros(jz, _rand_below(_sample_keys(key, jz), 0, share.nzero))
    elif q:
        pending = np.arange(p, p + q, dtype=np.int64)
        skey = _sample_keys(key, pending)
        attempt = -1
        while True:
            attempt += 1
            idx = np.empty((pending.shape[0], N), dtype=np.int64)
            for k in range(N):
                idx[:, k] = _rand_below(skey, attempt * N + k, share.shape[k])
            mine = (idx[:, 0] >= share.lo0) & (idx[:, 0] < share.hi0)
            pj, pidx = pending[mine], idx[mine]
            x = np.zeros(pj.shape[0])
            keep = np.ones(pj.shape[0], dtype=bool)
            if zmode != 0:
                pos = share.find(pidx)
                hit = pos >= 0
                if zmode == 1:
                    x[hit] = share.vals[pos[hit]]
                else:
                    keep = ~hit
            js.append(pj[keep])
            subs.append(pidx[keep])
            xs.append(x[keep])
            ws.append(np.full(int(keep.sum()), wq))
            cs.append(np.zeros(int(keep.sum()), dtype=np.int8))
            if zmode != 2:
                break
            rejected = pj[~keep]
            everyone = chan.allgather(rejected, kind="reduce") if chan.size > 1 else [rejected]
            rejected = np.sort(np.concatenate(everyone))
            if rejected.shape[0] == 0:
                break
            back = np.searchsorted(pending, rejected)
            pending, skey = rejected, skey[back]
            if attempt + 1 >= gcp_plan.MAX_ATTEMPTS and share.linear:
                # rejection keeps failing: the zero of a uniform rank, as the kernels do
                add_zeros(pending, _rand_below(skey, (attempt + 1) * N, share.nzero))
                break
    if not js:
        return (np.zeros(0, np.int64), np.zeros((0, N), np.int64), np.zeros(0), np.zeros(0),
                np.zeros(0, np.int8))
    j = np.concatenate(js)
    order = np.argsort(j, kind="stable")
    return (j[order], np.ascontiguousarray(np.concatenate(subs)[order], dtype=np.int64),
            np.ascontiguousarray(np.concatenate(xs)[order]),
            np.ascontiguousarray(np.concatenate(ws)[order]),
            np.ascontiguousarray(np.concatenate(cs)[order]))
