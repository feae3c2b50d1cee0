"""Distributed CP-ALS / CP-APR over MPI processes: strong and weak scaling, bytes per iteration.

One command runs every configuration (each process count is an ``mpiexec`` job started from
here) and prints the tables of ``doc/scaling.md``::

    python benchmarks/bench_distributed.py                       # 1 -> 2 processes, CPU
    python benchmarks/bench_distributed.py --device gpu --shape nell2 --nnz 76879419 \\
        --threads 8 --out benchmarks/results/distributed_2gpu.json   # one GPU per process
    python benchmarks/bench_distributed.py --extrapolate         # the model only (no MPI)

For every process count P (``--procs``) and algorithm (``--algos``), on a synthetic tensor
with Zipf-skewed coordinates (``benchmarks/synth.py``): the wall time per iteration of a
distributed fit (process 0 builds the tensor and :func:`sktensor_fast.distributed.scatter`
spreads it; one warm-up fit of one iteration first), the bytes every process received per
iteration (counted by the distributed backend) against the model below, the seconds spent in
MPI, and the memory of each process's share.  With P = 1 the one-process fit without MPI is
timed too: speedups are against it.  Strong scaling keeps ``--nnz`` fixed; weak scaling
(``--weak``) gives each process ``--nnz`` nonzeros; with ``--stacked`` each process generates its
own part (a tensor of ``--shape``, seed = its rank) as its block of mode-0 rows of a tensor
``P`` times as tall, joined by :func:`sktensor_fast.distributed.from_parts`.  Every process runs ``--threads`` OpenMP
threads.  The collective micro-benchmark times, per mode, the ``Allgatherv`` of an
``I_n x R`` factor that owner-computes needs and the ``Allreduce`` of the same size that a
partition reducing partial MTTKRP rows would need.

Model of the bytes a process receives per outer iteration (owner-computes, fp64)::

    rows:    Σ_n (I_n - own_n) R 8            (mean over processes: (P-1)/P Σ_n I_n R 8)
    reduce:  CP-ALS: (P-1) 8 (N (R + R²) + R)   (column norms and Gram of the new rows, ⟨X, M⟩)
             CP-APR MU: (P-1) 8 (inner iterations + N + 1 + N R)
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.common import cpu_model, write_report  # noqa: E402
from benchmarks.synth import FROSTT, synthetic_tensor  # noqa: E402

#: FROSTT sizes used by the extrapolation (frostt.io)
LARGE = {
    "amazon": ((4_821_207, 1_774_269, 1_805_187), 1_741_809_018),
    "reddit-2015": ((8_211_298, 176_962, 8_116_559), 4_687_474_081),
}


# ---------------------------------------------------------------------------------- model
def bytes_model(shape, R, P, algo, n_inner=0, own=None):
    """Bytes one process receives per outer iteration (see the module notes).

    ``own``: rows this process owns per mode (default: the mean ``I_n / P``)."""
    N = len(shape)
    if algo == "gcp":
        # every step sums the processes' gradients of every factor: not modelled here
        return {"rows": None, "reduce": None, "total": None}
    if own is None:
        rows = sum(I * (P - 1) / P for I in shape)
    else:
        rows = sum(I - o for I, o in zip(shape, own))
    rows *= R * 8
    if algo == "cpals":
        red = (P - 1) * 8 * (N * (R + R * R) + R)
    else:
        red = (P - 1) * 8 * (n_inner + N + 1 + N * R)
    return {"rows": rows, "reduce": red, "total": rows + red}


def time_model(shape, nnz, R, P, algo, t_nnz, alpha, beta, t_row, n_inner_per_mode=10):
    """Seconds per outer iteration on P processes (owner-computes).

    ``t_nnz``: seconds per nonzero and mode of the process's kernel (MTTKRP or Φ); ``t_row``:
    seconds per factor row of the dense steps (Gram, norms, scaling: on the process's own rows,
    and for CP-APR's log-likelihood on the whole factors); ``alpha``, ``beta``: latency (s) and
    seconds per byte of a row exchange (ring Allgatherv: (P-1) steps of latency).
    """
    N = len(shape)
    kernels = (n_inner_per_mode if algo == "cpapr" else 1) * N
    dense_rows = sum(shape) / P + (sum(shape) if algo == "cpapr" else 0)
    compute = kernels * t_nnz * nnz / P + t_row * dense_rows
    comm = sum(alpha * (P - 1) * (P > 1) + beta * I * R * 8 * (P - 1) / P for I in shape)
    if algo == "cpapr":
        comm += alpha * np.log2(max(P, 2)) * (P > 1) * N * n_inner_per_mode
    return {"compute": compute, "comm": comm, "total": compute + comm}


def grid(shape, P):
    """SPLATT-style process grid (p_0, ..., p_{N-1}), prod = P (a power of two here): each
    factor 2 goes to the mode with the most rows per slab."""
    p = [1] * len(shape)
    left = P
    while left > 1:
        k = max(range(len(shape)), key=lambda n: shape[n] / p[n])
        f = 2 if left % 2 == 0 else left
        p[k] *= f
        left //= f
    return p


def medium_grained_comm(shape, R, P, algo, alpha, beta, n_inner_per_mode=10):
    """Model only (not implemented): seconds per outer iteration of communication with
    SPLATT's medium-grained grid.  The P / p_n processes sharing a slab of mode n reduce its
    partial rows (reduce-scatter) and gather the updated ones: about 2 (I_n / p_n) R 8 bytes
    each per mode, and CP-APR MU reduces Φ at every inner iteration."""
    p = grid(shape, P)
    total = 0.0
    for I, pn in zip(shape, p):
        q = P // pn
        if q == 1:
            continue
        rounds = (n_inner_per_mode if algo == "cpapr" else 1) + 1
        total += rounds * (alpha * np.log2(q) + beta * I / pn * R * 8 * (q - 1) / q)
    return total


def memory_model(shape, nnz, R, P):
    """Bytes per process: N copies of nnz/P nonzeros (COO: N int64 coordinates and a value;
    each copy is ordered by its own mode, so no permutation) plus the replicated factors (and
    a work copy of each)."""
    N = len(shape)
    per_nz = N * 8 + 8
    return {"tensor": N * per_nz * nnz / P, "factors": 2 * sum(shape) * R * 8}


def extrapolate(args, measured=None):
    """The model on the FROSTT Amazon and Reddit-2015 sizes, 16 to 1024 processes."""
    t_nnz = args.t_nnz
    rows = []
    for name, (shape, nnz) in LARGE.items():
        for algo in ("cpals", "cpapr"):
            one = time_model(shape, nnz, args.rank, 1, algo, t_nnz, args.alpha, args.beta,
                             args.t_row)["total"]
            for P in (16, 64, 256, 1024):
                t = time_model(shape, nnz, args.rank, P, algo, t_nnz, args.alpha, args.beta,
                               args.t_row)
                b = bytes_model(shape, args.rank, P, algo, n_inner=10 * len(shape))
                mem = memory_model(shape, nnz, args.rank, P)
                mg = medium_grained_comm(shape, args.rank, P, algo, args.alpha, args.beta)
                rows.append({"tensor": name, "algo": algo, "P": P, "grid_comm_s": mg,
                             "compute_s": t["compute"], "comm_s": t["comm"],
                             "iter_s": t["total"], "speedup_vs_1": one / t["total"],
                             "efficiency": one / t["total"] / P,
                             "MB_per_iter": b["total"] / 1e6,
                             "GB_per_process": (mem["tensor"] + mem["factors"]) / 1e9})
    return rows


# ---------------------------------------------------------------------------------- worker
def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker(cfg, out):
    from mpi4py import MPI
    from sktensor_fast import CPALS, CPAPR, GCP
    from sktensor_fast.distributed import scatter
    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    if cfg.get("pageable"):
        # the rows exchanges of device arrays through plain (pageable) host memory
        from sktensor_fast.backends.opencl.backend import OpenCLBackend
        OpenCLBackend.host_buffer = lambda self, shape, dtype: np.empty(shape, dtype)
    if cfg.get("overlap"):
        # CP-ALS's MTTKRP on a device begun beside the exchange of the rows it needs
        from sktensor_fast.distributed.backend import DistributedBackend
        DistributedBackend._OVERLAP_GATHER = True
    if cfg.get("gather_first"):
        # CP-ALS's MTTKRP on a device prepared only after the rows it needs have arrived
        from sktensor_fast.distributed.backend import DistributedBackend
        DistributedBackend._PREPARE_BEFORE_GATHER = False
    shape = tuple(cfg["shape"])
    nnz = cfg["nnz"] * (P if cfg["weak"] else 1)
    X = X1 = None
    t0 = time.perf_counter()
    if cfg.get("stacked") and cfg["weak"]:
        # every process its own part, stacked along mode 0; process 0's part is the reference
        from sktensor_fast.distributed import from_parts
        part = synthetic_tensor(shape, cfg["nnz"], seed=rank)
        X1 = part if rank == 0 and not cfg.get("no_serial") else None
        subs = np.array(part.subs, dtype=np.int64)
        subs[:, 0] += rank * shape[0]
        shape = (P * shape[0],) + tuple(shape[1:])
        t_gen = time.perf_counter() - t0
        comm.Barrier()
        t0 = time.perf_counter()
        Xd = from_parts(subs, part.vals, shape)
        del subs
    else:
        if rank == 0:
            X = synthetic_tensor(shape, nnz, seed=0)
            # the one-process reference: the same tensor (strong), or one process's share
            X1 = synthetic_tensor(shape, cfg["nnz"], seed=0) if cfg["weak"] and P > 1 else X
        t_gen = time.perf_counter() - t0
        comm.Barrier()
        t0 = time.perf_counter()
        Xd = scatter(X)
    comm.Barrier()
    t_scatter = time.perf_counter() - t0
    R = cfg["rank"]
    res = {"P": P, "nnz": Xd.nnz, "shape": list(shape), "t_generate": t_gen,
           "t_scatter": t_scatter, "fits": {}}
    own = [hi - lo for lo, hi in (Xd.block(n) for n in range(len(shape)))]

    def idle_until_rank0():
        # the other processes wait without spinning while process 0 fits alone
        req = comm.Ibarrier()
        while not req.Test():
            time.sleep(0.002)

    for algo in cfg["algos"]:
        Est = {"cpals": CPALS, "cpapr": CPAPR, "gcp": GCP}[algo]
        params = dict(rank=R, random_state=0, tol=0, device=cfg["device"])
        if algo == "cpapr":
            params["max_inner_iter"] = 10
        if algo == "gcp":
            # an iteration is an epoch of ``gcp_steps`` Adam steps (Poisson loss, the
            # default samples)
            params.update(loss="poisson", epoch_iters=cfg.get("gcp_steps", 100))
        # the time of an iteration is the difference between a fit of 1 + iters iterations
        # and one of 1 (so that building the formats, the start and the end cancel out);
        # the distributed fit and the one-process fit (process 0 alone, the others idle)
        # alternate, best of ``repeat`` each: on a shared machine both see the same load
        # warm-up: caches the copies (two iterations: CP-ALS's pieces of every mode too),
        # compiles kernels
        Est(max_iter=2, **params).fit(Xd)
        serial = not cfg.get("no_serial")
        if rank == 0 and serial:
            Est(max_iter=1, **params).fit(X1)
        idle_until_rank0()
        entry = {}

        from sktensor_fast.decomposition import fit_callback
        marks = []      # per repeat, when each iteration of the long fit was reported (ms)

        def timed_dist(n):
            seen = []
            comm.Barrier()
            t = time.perf_counter()
            with fit_callback(lambda p: seen.append(p.elapsed)):
                m_ = Est(max_iter=n, **params).fit(Xd)
            comm.Barrier()
            if n > 1:
                marks.append([round(1e3 * x, 3) for x in seen])
            return time.perf_counter() - t, m_

        def timed_one(n):
            if not serial:
                return None, None
            if rank != 0:
                idle_until_rank0()
                return None, None
            t = time.perf_counter()
            m_ = Est(max_iter=n, **params).fit(X1)
            t = time.perf_counter() - t
            idle_until_rank0()
            return t, m_

        d1 = dn = s1 = sn = np.inf
        m = m1 = None
        for _ in range(cfg["repeat"]):
            d1 = min(d1, timed_dist(1)[0])
            Xd.comm_counters(reset=True)
            t, m = timed_dist(1 + cfg["iters"])
            dn = min(dn, t)
            c = Xd.comm_counters()
            t, _ = timed_one(1)
            if t is not None:
                s1 = min(s1, t)
            t, m1 = timed_one(1 + cfg["iters"])
            if t is not None:
                sn = min(sn, t)
        t_iter = (dn - d1) / cfg["iters"]
        if rank == 0 and serial:
            entry["serial_iter_s"] = (sn - s1) / cfg["iters"]
            entry["serial_score"] = float(m1.loss_history_[-1])
        n_inner = int(getattr(m, "n_inner_iter_", 0)) // m.n_iter_
        per = {k: (v[1] / m.n_iter_, v[2] / m.n_iter_) for k, v in c.items()}
        entry.update({
            "iter_s": t_iter, "n_iter": m.n_iter_, "score": float(m.loss_history_[-1]),
            "n_inner_per_iter": n_inner,
            # this process's host clock at the end of each iteration of every repeat of the
            # long fit (ms since its iterations began): steady iterations or a few slow ones
            "iteration_marks_ms": marks,
            "bytes_per_iter": {k: v[0] for k, v in per.items()},
            "mpi_s_per_iter": {k: v[1] for k, v in per.items()},
            "model_bytes": bytes_model(shape, R, P, algo, n_inner, own),
        })
        if cfg.get("timeline"):
            entry["timeline"] = _timeline(comm, Xd, Est, params)
        if cfg.get("host_timeline"):
            entry["host_timeline"] = _timeline(comm, Xd, Est, params, sync=False)
        res["fits"][algo] = entry
    if cfg.get("kernel_check"):
        res["kernel_check"] = _kernel_check(comm, Xd, R, cfg["device"],
                                            phi="cpapr" in cfg["algos"])
    # collective micro-benchmark: what owner-computes moves vs a reduction of partial rows
    coll = []
    for n, I in enumerate(shape):
        full = np.random.default_rng(n).random((I, R))
        counts = np.diff(Xd.bounds[n]) * R
        displs = Xd.bounds[n][:-1] * R
        best_g = best_r = best_p = np.inf
        for _ in range(5):
            comm.Barrier()
            t = time.perf_counter()
            comm.Allgatherv(MPI.IN_PLACE, [full, counts, displs, MPI.DOUBLE])
            best_g = min(best_g, time.perf_counter() - t)
            comm.Barrier()
            t = time.perf_counter()
            Xd._chan.allgather_rows(full, np.diff(Xd.bounds[n]), Xd.bounds[n][:-1])
            best_p = min(best_p, time.perf_counter() - t)
            comm.Barrier()
            t = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, full, op=MPI.SUM)
            best_r = min(best_r, time.perf_counter() - t)
        coll.append({"mode": n, "rows": I, "MB": I * R * 8 / 1e6,
                     "allgatherv_s": best_g, "allreduce_s": best_r, "rows_exchange_s": best_p})
    res["collectives"] = coll
    res["own_rows"] = own
    res["local_nnz"] = Xd.local_nnz
    res["share_MB"] = Xd.nbytes / 1e6
    res["prepared_MB"] = sum(p.nbytes for p in Xd._prepared.values()) / 1e6
    res["max_rss_MB"] = _rss_mb()
    everyone = comm.gather(res, root=0)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(everyone, f)


def _cpu_list(cpus):
    """``{0, 1, 2, 5}`` as ``"0-2,5"``."""
    cpus, runs = sorted(cpus), []
    for c in cpus:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def _cpu_now():
    """The CPU this process's main thread last ran on (Linux), else None."""
    try:
        with open("/proc/thread-self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def _kernel_check(comm, Xd, R, device, phi=False, calls=20, rounds=3):
    """After the fits, in the same processes: the device this process used and the MTTKRP
    (with ``phi`` also CP-APR's Φ) of every mode on this process's own copy, timed alone
    (``calls`` launches, then the queue finished; best of ``rounds``), first with every
    process at once, then one process at a time.  Tells a job whose iterations are slow
    because a device's kernels are slow, or one process's share slower than the others', from
    one where the time goes elsewhere."""
    from sktensor_fast.distributed._protocol import _local_device
    out = {"host_rank": Xd._local_rank(), "device": _local_device(Xd, device),
           "cpus_allowed": _cpu_list(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
           else None, "cpu_now": _cpu_now()}
    for prep in Xd._prepared.values():
        be = prep._backend
        queue = getattr(be, "queue", None)
        finish = queue.finish if queue is not None else (lambda: None)
        copies = [(n, T) for n, T in enumerate(prep.local) if T is not None]
        facs = {n: [be.asarray(np.random.default_rng(k).random((s, R)) + 0.1)
                    for k, s in enumerate(T.shape)] for n, T in copies}
        kernels = {"": lambda T, F: be.mttkrp(T, F, 0)}
        if phi:
            kernels["phi_"] = lambda T, F: be.phi(T, F, 0, F[0], 1e-10)

        def timed(kernel):
            ms = []
            for n, T in copies:
                kernel(T, facs[n])
                finish()
                best = np.inf
                for _ in range(rounds):
                    t = time.perf_counter()
                    for _ in range(calls):
                        kernel(T, facs[n])
                    finish()
                    best = min(best, (time.perf_counter() - t) / calls)
                ms.append(round(best * 1e3, 4))
            return ms
        for prefix, kernel in kernels.items():
            comm.Barrier()
            out[prefix + "together_ms"] = timed(kernel)
            comm.Barrier()
            alone = None
            for r in range(comm.Get_size()):
                if r == comm.Get_rank():
                    alone = timed(kernel)
                comm.Barrier()
            out[prefix + "alone_ms"] = alone
        break
    return out


def _timeline(comm, Xd, Est, params, sync=True):
    """One fit of three iterations with every call of the distributed backend timed
    (``benchmarks/timeline.py``): the events of the second iteration, per name and mode by
    mode, and the fit's wall time with and without the timing."""
    import warnings
    from benchmarks import timeline
    (_, dist), = Xd._backends.values()

    def fit3():
        comm.Barrier()
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Est(max_iter=3, **params).fit(Xd)
        comm.Barrier()
        return time.perf_counter() - t

    plain = fit3()
    rec, restore = timeline.record(dist, sync)
    try:
        timed = fit3()
    finally:
        restore()
    its = rec.iterations()
    it = its[1] if len(its) > 2 else its[-1]
    wall = (its[2][0][2] - its[1][0][2]) * 1e3 if len(its) > 2 else None
    return {"fit_s": plain, "fit_timed_s": timed, "iterations_seen": len(its),
            "iteration_wall_ms": wall,
            "iteration_ms": sum(e[3] for e in it) * 1e3,
            "events": timeline.summary(it), "modes": timeline.by_mode(it)}


def print_timelines(jobs, algo, key="timeline"):
    """The second iteration's events on process 0 of every job, per name (ms, exclusive);
    ``key`` "host_timeline": those timed without waiting for the device, on every process."""
    for job in jobs:
        for r, proc in enumerate(job if key == "host_timeline" else job[:1]):
            _print_timeline(proc["fits"][algo].get(key), job[0]["P"], algo, r,
                            " without waiting for the device" if key == "host_timeline" else "")


def _print_timeline(tl, P, algo, proc, how):
    if not tl:
        return
    wall = tl.get("iteration_wall_ms")
    wall = "" if wall is None else f", iteration {wall:.2f} ms from start to start"
    print(f"\n#### {algo}, P = {P}: one iteration, every call timed{how} (process {proc}; sum "
          f"{tl['iteration_ms']:.2f} ms{wall}; fit of 3 iterations {tl['fit_s']:.3f} s, "
          f"{tl['fit_timed_s']:.3f} s timed)\n")
    print("| event | mode | calls | ms |")
    print("|---|---|---|---|")
    for r in tl["events"]:
        if r["ms"] >= 0.01:
            mode = "" if r["mode"] is None else r["mode"]
            print(f"| {r['event']} | {mode} | {r['calls']} | {r['ms']:.3f} |")
    print("\nmode by mode: " + "; ".join(
        f"mode {m['mode']}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(
            m["ms"].items(), key=lambda kv: -kv[1]) if v >= 0.05)
        for m in tl["modes"]))

# ---------------------------------------------------------------------------------- driver
def _mpiexec():
    cand = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return cand if os.path.exists(cand) else "mpiexec"


def run_job(P, cfg, tmp):
    out = os.path.join(tmp, f"job_P{P}_{'weak' if cfg['weak'] else 'strong'}.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(cfg["threads"]),
               OPENBLAS_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    cmd = [_mpiexec(), "-n", str(P), *cfg.get("mpiexec_args", []), sys.executable,
           os.path.abspath(__file__), "--worker", json.dumps(cfg), out]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    print(f"  P={P} ({'weak' if cfg['weak'] else 'strong'}): {time.perf_counter() - t0:.1f}s",
          flush=True)
    with open(out) as f:
        job = json.load(f)
    got = sorted({r["P"] for r in job})
    if len(job) != P or got != [P]:
        # every process alone (P = 1 each): mpi4py runs on another MPI than this mpiexec
        raise SystemExit(f"asked {_mpiexec()} for {P} processes; the job reported "
                         f"{len(job)} process(es) in a world of {got}: mpi4py and mpiexec "
                         f"belong to different MPI libraries (install mpi4py and mpich into "
                         f"this interpreter's site-packages); nothing reported for P={P}")
    return job


def summarise(jobs, algo):
    """Table rows for one algorithm: per P, the slowest process's time, the one-process fit
    timed in the same job (interleaved), bytes against the model."""
    rows = []
    for job in jobs:
        P = job[0]["P"]
        e0 = job[0]["fits"][algo]
        t = max(r["fits"][algo]["iter_s"] for r in job)
        got = [sum(r["fits"][algo]["bytes_per_iter"].get(k, 0.0) for k in ("rows", "reduce"))
               for r in job]
        model = [r["fits"][algo]["model_bytes"]["total"] for r in job]
        mpi = max(sum(r["fits"][algo]["mpi_s_per_iter"].get(k, 0.0) for k in ("rows", "reduce"))
                  for r in job)
        one = e0.get("serial_iter_s")
        rows.append({"P": P, "nnz": job[0]["nnz"], "iter_s": t, "serial_iter_s": one,
                     "speedup": one / t if one else None,
                     "MB_recv_per_iter": [g / 1e6 for g in got],
                     "MB_model_per_iter": [None if m is None else m / 1e6 for m in model],
                     "measured_over_model": None if None in model else max(
                         (g / m if m else 1.0) for g, m in zip(got, model)),
                     "mpi_s_per_iter": mpi, "score": e0["score"],
                     "share_MB": [r["share_MB"] for r in job],
                     "max_rss_MB": [r["max_rss_MB"] for r in job]})
    return rows


def spread(rows):
    """Per process count, over its jobs: the median, least and largest s/iter and speedup
    (jobs differ more than the repeats inside one job: each is a new pair of processes)."""
    out = []
    for P in sorted({r["P"] for r in rows}):
        mine = [r for r in rows if r["P"] == P]
        t = [r["iter_s"] for r in mine]
        sp = [r["speedup"] for r in mine if r["speedup"]]
        out.append({"P": P, "jobs": len(mine), "iter_s": t,
                    "iter_s_median": float(np.median(t)), "iter_s_min": min(t),
                    "iter_s_max": max(t),
                    "speedup_median": float(np.median(sp)) if sp else None,
                    "speedup_min": min(sp) if sp else None,
                    "speedup_max": max(sp) if sp else None})
    return out


def print_spread(rows, weak):
    word = "efficiency" if weak else "speedup"
    print(f"\nover the jobs: | P | jobs | s/iter median (least - largest) | {word} median "
          f"(least - largest) |")
    for r in rows:
        sp = ("" if r["speedup_median"] is None else
              f"{r['speedup_median']:.2f}x ({r['speedup_min']:.2f} - {r['speedup_max']:.2f})")
        print(f"| {r['P']} | {r['jobs']} | {r['iter_s_median']:.4f} ({r['iter_s_min']:.4f} - "
              f"{r['iter_s_max']:.4f}) | {sp} |")


def print_table(title, rows, weak):
    print(f"\n### {title}\n")
    print("| P | nnz | s/iter (slowest process) | one-process fit s/iter (same job) | "
          + ("efficiency" if weak else "speedup") + " | MB recv/iter per process "
          "(measured / model) | s in MPI/iter | share MB per process |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        one = f"{r['serial_iter_s']:.4f}" if r["serial_iter_s"] else ""
        sp = f"{r['speedup']:.2f}x" if r["speedup"] else ""
        mb = ", ".join(f"{g:.3f} / " + ("n/a" if m is None else f"{m:.3f}")
                       for g, m in zip(r["MB_recv_per_iter"], r["MB_model_per_iter"]))
        share = ", ".join(f"{m:.0f}" for m in r["share_MB"])
        print(f"| {r['P']} | {r['nnz']} | {r['iter_s']:.4f} | {one} | {sp} | {mb} | "
              f"{r['mpi_s_per_iter']:.5f} | {share} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", nargs=2, metavar=("CONFIG", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--shape", default="nell2",
                    help="a FROSTT name of benchmarks/synth.py or I,J,K (default nell2)")
    ap.add_argument("--nnz", type=int, default=3_200_000,
                    help="nonzeros (per process with --weak); default 3.2M")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many timings")
    ap.add_argument("--jobs", type=int, default=1,
                    help="run every process count this many times, in turns (a new mpiexec "
                         "job each), and print the median and spread over the jobs")
    ap.add_argument("--timeline", action="store_true",
                    help="also time every call of one iteration (benchmarks/timeline.py)")
    ap.add_argument("--pageable", action="store_true",
                    help="device fits: exchange factor rows through plain host memory instead "
                         "of page-locked buffers (for comparison)")
    ap.add_argument("--overlap", action="store_true",
                    help="device fits: CP-ALS's MTTKRP runs the nonzeros of the process's own "
                         "rows of the factor just updated while the other rows are exchanged "
                         "(DistributedBackend._OVERLAP_GATHER, off by default)")
    ap.add_argument("--gather-first", action="store_true",
                    help="device fits: CP-ALS's MTTKRP prepared only after the rows of the "
                         "factor just updated have been exchanged and uploaded "
                         "(DistributedBackend._PREPARE_BEFORE_GATHER off; for comparison)")
    ap.add_argument("--host-timeline", action="store_true",
                    help="also time every call of one iteration without waiting for the "
                         "device around them: where each process's host spends an iteration")
    ap.add_argument("--kernel-check", action="store_true",
                    help="after the fits, time each process's MTTKRP (and CP-APR's Φ with "
                         "cpapr among --algos) of every mode on its own copy, all processes "
                         "at once and one at a time (a slow device or a slow exchange?)")
    ap.add_argument("--mpiexec-args", default="",
                    help="more arguments of mpiexec, e.g. \"-bind-to socket -map-by socket\" "
                         "(MPICH's placement of the processes on the host's cores)")
    ap.add_argument("--gcp-steps", type=int, default=100,
                    help="GCP: Adam steps per epoch (an iteration of the tables)")
    ap.add_argument("--algos", nargs="+", default=["cpals", "cpapr"],
                    choices=["cpals", "cpapr", "gcp"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads per process")
    ap.add_argument("--weak", action="store_true", help="weak scaling only")
    ap.add_argument("--stacked", action="store_true",
                    help="weak scaling: process p generates its own part (a tensor of --shape "
                         "and --nnz, seed p) as rows p I_0 .. (p + 1) I_0 - 1 of mode 0, and "
                         "the parts are joined by from_parts (nothing is generated or sent by "
                         "process 0 alone; the one-process reference is part 0)")
    ap.add_argument("--strong", action="store_true", help="strong scaling only")
    ap.add_argument("--no-serial", action="store_true",
                    help="no one-process fit of the same tensor in each job (process 0 would "
                         "hold it beside its share: for tensors near a device's memory)")
    ap.add_argument("--out", default=None, help="JSON report (default: print only)")
    ap.add_argument("--extrapolate", action="store_true",
                    help="print the model for the Amazon and Reddit-2015 sizes and exit")
    ap.add_argument("--t-nnz", type=float, default=2e-3 / 76_879_419,
                    help="model: seconds per nonzero and mode of one process's kernel "
                         "(default: 2 ms for a NELL-2 mode on one H200)")
    ap.add_argument("--t-row", type=float, default=1e-9,
                    help="model: seconds per factor row of the replicated dense steps")
    ap.add_argument("--alpha", type=float, default=5e-6, help="model: latency per step (s)")
    ap.add_argument("--beta", type=float, default=1 / 12.5e9,
                    help="model: seconds per byte (default 100 Gb/s)")
    ap.add_argument("--show", metavar="JSON", help="print the tables of a saved report and exit")
    args = ap.parse_args(argv)
    for name in ("jobs", "iters", "repeat"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.show:
        with open(args.show) as f:
            rep = json.load(f)
        print(f"{rep['cpu']}, {rep['cores']} cores, {rep['date']}, loadavg before "
              f"{[round(x, 2) for x in rep['loadavg_before']]}, after "
              f"{[round(x, 2) for x in rep['loadavg_after']]}")
        for key, run in rep["runs"].items():
            for a, rows in run["tables"].items():
                print_table(f"{a} {key} scaling", rows, key == "weak")
                if run.get("spread"):
                    print_spread(run["spread"][a], key == "weak")
                print_timelines(run["jobs"], a)
            print("\n| P | mode | rows | MB | Allgatherv ms | Allreduce ms | rows exchange (used) ms |"
                  "\n|---|---|---|---|---|---|---|")
            for job in run["jobs"]:
                for c in job[0]["collectives"]:
                    if job[0]["P"] > 1:
                        print(f"| {job[0]['P']} | {c['mode']} | {c['rows']} | {c['MB']:.2f} | "
                              f"{c['allgatherv_s'] * 1e3:.3f} | {c['allreduce_s'] * 1e3:.3f} | "
                              f"{c.get('rows_exchange_s', float('nan')) * 1e3:.3f} |")
        return rep
    if args.worker:
        return worker(json.loads(args.worker[0]), args.worker[1])
    if args.extrapolate:
        rows = extrapolate(args)
        print(f"model: t_nnz={args.t_nnz:.3g} s, t_row={args.t_row:.3g} s, "
              f"alpha={args.alpha:.3g} s, beta={args.beta:.3g} s/B, R={args.rank}")
        print("| tensor | algo | P | compute s | comm s | s/iter | speedup vs 1 | efficiency |"
              " MB recv/iter | GB per process | comm s, medium-grained grid (model) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['tensor']} | {r['algo']} | {r['P']} | {r['compute_s']:.4f} | "
                  f"{r['comm_s']:.4f} | {r['iter_s']:.4f} | {r['speedup_vs_1']:.1f} | "
                  f"{r['efficiency']:.2f} | {r['MB_per_iter']:.0f} | "
                  f"{r['GB_per_process']:.1f} | {r['grid_comm_s']:.4f} |")
        return rows
    if "," in args.shape:
        shape = tuple(int(s) for s in args.shape.split(","))
    else:
        shape = FROSTT[args.shape][0]
    import tempfile
    tmp = tempfile.mkdtemp(prefix="bench_dist_")
    kinds = [False, True]
    if args.weak:
        kinds = [True]
    if args.strong:
        kinds = [False]
    load0 = os.getloadavg()
    report = {"benchmark": "distributed", "argv": sys.argv[1:], "cpu": cpu_model(),
              "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "loadavg_before": load0, "shape": shape, "rank": args.rank,
              "threads_per_process": args.threads, "device": args.device, "runs": {}}
    print(f"machine: {report['cpu']}, {report['cores']} cores, loadavg {load0}")
    for weak in kinds:
        cfg = {"shape": list(shape), "nnz": args.nnz, "rank": args.rank, "iters": args.iters,
               "repeat": args.repeat,
               "algos": args.algos, "device": args.device, "threads": args.threads,
               "weak": weak, "timeline": args.timeline, "gcp_steps": args.gcp_steps,
               "pageable": args.pageable, "stacked": args.stacked,
               "overlap": args.overlap, "gather_first": args.gather_first,
               "mpiexec_args": args.mpiexec_args.split(),
               "no_serial": args.no_serial, "kernel_check": args.kernel_check,
               "host_timeline": args.host_timeline}
        # --jobs N: every process count N times, in turns (a separate mpiexec each)
        jobs = [run_job(P, cfg, tmp) for _ in range(args.jobs) for P in args.procs]
        key = "weak" if weak else "strong"
        report["runs"][key] = {"jobs": jobs,
                               "tables": {a: summarise(jobs, a) for a in args.algos}}
        if args.jobs > 1:
            report["runs"][key]["spread"] = {a: spread(report["runs"][key]["tables"][a])
                                             for a in args.algos}
        for a in args.algos:
            print_table(f"{a} {key} scaling, shape {shape}, R={args.rank}, "
                        f"{args.threads} thread(s) per process, device {args.device}",
                        report["runs"][key]["tables"][a], weak)
            if args.jobs > 1:
                print_spread(report["runs"][key]["spread"][a], weak)
            print_timelines(jobs, a)
            print_timelines(jobs, a, "host_timeline")
        for job in jobs:
            for r, proc in enumerate(job):
                kc = proc.get("kernel_check")
                if kc:
                    fits = ", ".join(f"{a} {proc['fits'][a]['iter_s'] * 1e3:.2f}"
                                     for a in args.algos)
                    print(f"  P={job[0]['P']} process {r} ({kc['device']}, host rank "
                          f"{kc['host_rank']}, CPUs {kc.get('cpus_allowed')}, on CPU "
                          f"{kc.get('cpu_now')}): ms/iter {fits}; MTTKRP per mode, ms: "
                          f"together {kc['together_ms']}, alone {kc['alone_ms']}"
                          + (f"; Φ: together {kc['phi_together_ms']}, alone "
                             f"{kc['phi_alone_ms']}" if "phi_alone_ms" in kc else ""))
        print("\ncollectives (process 0, best of 5): mode, rows, MB, Allgatherv, Allreduce, "
              "the rows exchange the backend uses")
        for job in jobs:
            for c in job[0]["collectives"]:
                print(f"  P={job[0]['P']} mode {c['mode']}: {c['rows']} rows, {c['MB']:.2f} MB, "
                      f"{c['allgatherv_s'] * 1e3:.3f} ms, {c['allreduce_s'] * 1e3:.3f} ms, "
                      f"{c['rows_exchange_s'] * 1e3:.3f} ms")
    report["loadavg_after"] = os.getloadavg()
    print(f"loadavg before {load0}, after {report['loadavg_after']}")
    if args.out:
        write_report(report, args.out)
    return report


if __name__ == "__main__":
    main()
