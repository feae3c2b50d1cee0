"""Where one iteration of a distributed fit spends its time: the calls of the distributed
backend, its process's backend and its MPI channel, timed one by one.

:func:`record` wraps, on the instances of one fit (nothing changes for other objects), the
kernel-interface methods of a :class:`~sktensor_fast.distributed.backend.DistributedBackend`
(sparse kernels, gathers of factor rows with their download and upload, dense steps), its
CP-APR and GCP primitives and the collectives of its channel.  Every wrapped call waits for the
device's queue before it starts and before it ends, so that a kernel's time is charged to the
call that enqueued it: the waits serialise what the fit would overlap, so the sum of the
events is an upper bound of the iteration's time (the benchmark reports both).  Each event
gets its *exclusive* time: its own time less that of the wrapped calls inside it (a sparse
kernel's gathers of the other factors are events of their own).
"""
import time
from collections import defaultdict

#: methods of the distributed backend, of its ``apr`` and ``gcp`` objects and of its channel
BACKEND = ("_mttkrp", "_phi", "_full", "_gather_device", "_download", "_upload", "_take_rows",
           "als_update", "als_start", "als_finish", "gram",
           "matmul_small", "column_norms", "scale_columns", "inner", "_poisson_data_term",
           "_model_zero_count")
APR = ("_shift_inadmissible", "_kkt_violation", "_multiply_", "_mu_rows_", "_row_solve")
GCP = ("_sampled_gradient", "_loss_estimate", "_optimizer_update")
CHANNEL = ("allgather_rows", "sum", "sum_large", "isum", "max", "max_and_sum", "bcast",
           "allgather")
#: the calls that start a mode's work (their ``mode`` argument is the mode), and their events
MODE_CALLS = ("_mttkrp", "_phi", "_row_solve")
MODE_EVENTS = ("mttkrp", "phi", "apr.row_solve")


class Recorder:
    """The events of the wrapped calls: ``(name, mode, start, exclusive seconds)``."""

    def __init__(self, sync):
        self.sync = sync
        self.events = []
        self._stack = []

    def wrap(self, obj, name, label):
        fn = getattr(obj, name)
        rec = self

        def timed(*args, **kwargs):
            mode = None
            if name in MODE_CALLS:
                mode = args[2] if len(args) > 2 else kwargs.get("mode")
            rec.sync()
            t0 = time.perf_counter()
            rec._stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                rec.sync()
                total = time.perf_counter() - t0
                inner = rec._stack.pop()
                if rec._stack:
                    rec._stack[-1] += total
                rec.events.append((label, mode, t0, total - inner))
        setattr(obj, name, timed)
        return fn

    def iterations(self):
        """The events split at every top-level call on mode 0 (an outer iteration starts
        with its mode-0 kernel), in start order."""
        evs = sorted(self.events, key=lambda e: e[2])
        its, cur = [], []
        for e in evs:
            if e[0] in MODE_EVENTS and e[1] == 0 and any(
                    c[0] in MODE_EVENTS and c[1] not in (None, 0) for c in cur):
                its.append(cur)
                cur = []
            cur.append(e)
        if cur:
            its.append(cur)
        return its


def record(dist, sync=True):
    """Wrap the calls of the distributed backend ``dist`` (its instances only); returns
    ``(recorder, undo)``.  ``sync`` False: no waits for the device around the calls, so
    that each event is the host's own time in the call (a wait for the device inside it
    included) and the fit runs as it does untimed, but for the timers."""
    local = dist.local
    queue = getattr(local, "queue", None)
    sync = queue.finish if queue is not None and sync else (lambda: None)
    rec = Recorder(sync)
    undo = []
    for obj, names, prefix in ((dist, BACKEND, ""), (dist.apr, APR, "apr."),
                               (dist.gcp, GCP, "gcp."), (dist.channel, CHANNEL, "mpi.")):
        for name in names:
            if hasattr(obj, name):
                rec.wrap(obj, name, prefix + name.lstrip("_"))
                undo.append((obj, name))

    def restore():
        for obj, name in undo:
            obj.__dict__.pop(name, None)
    return rec, restore


def summary(events):
    """Per (name, mode): calls and milliseconds (exclusive), and the total."""
    agg = defaultdict(lambda: [0, 0.0])
    for name, mode, _, dt in events:
        a = agg[(name, mode)]
        a[0] += 1
        a[1] += dt * 1e3
    rows = [{"event": n, "mode": m, "calls": c, "ms": ms} for (n, m), (c, ms) in agg.items()]
    rows.sort(key=lambda r: -r["ms"])
    return rows


def by_mode(events):
    """The iteration mode by mode: the events from each mode's first kernel call to the next
    mode's, grouped by name (milliseconds, exclusive)."""
    out, mode = [], None
    cur = defaultdict(float)
    for name, m, _, dt in sorted(events, key=lambda e: e[2]):
        if name in MODE_EVENTS and m is not None and m != mode:
            if mode is not None or cur:
                out.append({"mode": mode, "ms": dict(cur)})
            mode, cur = m, defaultdict(float)
        cur[name] += dt * 1e3
    out.append({"mode": mode, "ms": dict(cur)})
    return out
