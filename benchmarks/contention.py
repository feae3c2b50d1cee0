"""Whole fits on a quiet and on a busy machine, with one thread and with many.

Run through the suite (``python -m benchmarks --sections contention``; options ``--busy N``,
``--threads T ...``, ``--repeat``) or alone::

    python -m benchmarks.contention --busy 2 --out bench_out/contention.json
    python -m benchmarks.contention --busy 16 --threads 16     # a 16-core host, 16 busy processes
    python -m benchmarks.contention --compare-spin             # also OpenMP's spinning default
    python -m benchmarks.contention --compare-spin 20000 1000  # ... or spins of these counts

Every measurement runs in a fresh Python process (the OpenMP runtime reads its settings once per
process) with ``OMP_NUM_THREADS`` set to the thread count, or left as inherited for "default".
The process builds the tensors, fits each once untimed (one iteration, to fault in the pages),
then times ``repeat`` whole fits of each (format built, iterations, result arranged; short fits
more often, until a second has passed).

Two conditions: "quiet" (no extra load), then "busy": ``--busy N`` processes that spin in a pure
Python loop (other users' programs) are started, the same fits are repeated, and the processes are
stopped.  The busy processes end by themselves after a bounded time or when this process is gone,
and are killed on exit, on an exception and on Ctrl-C.  Within each condition the thread counts
alternate and the whole sequence is run ``rounds`` times; the best time of each (tensor, fit,
threads) over all processes is kept.  Ratios (many threads over one) are taken within one
condition of one run.
"""
import argparse
import atexit
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import cpu_model, fmt_num, md_table, plain

ROOT = Path(__file__).resolve().parents[1]

#: The busy loop: pure Python arithmetic until the deadline or until its parent is gone.
BUSY_CODE = r"""
import os, sys, time
deadline = time.monotonic() + float(sys.argv[1])
parent = int(sys.argv[2])
x = 0
while time.monotonic() < deadline and os.getppid() == parent:
    for i in range(100000):
        x += i
"""

#: Fits timed in every process: name -> (estimator, keyword arguments without the rank).
FITS = {
    "cpals": ("CPALS", dict(max_iter=10, tol=0.0, random_state=0)),
    "cpapr-mu": ("CPAPR", dict(solver="mu", max_iter=5, tol=0.0, random_state=0)),
    "gcp-adam": ("GCP", dict(loss="poisson", solver="adam", epoch_iters=20, max_iter=3,
                             max_fails=3, tol=0.0, random_state=0)),
}

#: Tensors per preset: (name, shape, nnz, rank); shape None: the embedded flights-routes data.
TENSORS = {
    "tiny": [("synthetic-5k", (200, 30, 40), 5000, 8)],
    "quick": [("synthetic-500k", (2000, 300, 400), 500_000, 8),
              ("synthetic-1.6m", (2000, 300, 400), 1_600_000, 16),
              ("flights-routes", None, None, 8)],
    "full": [("synthetic-500k", (2000, 300, 400), 500_000, 8),
             ("synthetic-1.6m", (2000, 300, 400), 1_600_000, 16),
             ("synthetic-8m", (12092, 9184, 28818), 8_000_000, 16),
             ("flights-routes", None, None, 8)],
}

#: Short fits are repeated (beyond ``repeat``) until they took this many seconds in all, at most
#: MAX_REPEAT times: their best time is then less at the mercy of one scheduler stall.
MIN_SECONDS = 1.0
MAX_REPEAT = 20

#: Seconds after which a busy process ends by itself (a condition restarts any that ended).
BUSY_SECONDS = 1200


# ---------------------------------------------------------------------- busy processes
class BusyProcesses:
    """``n`` busy processes, stopped on ``stop()``, on leaving the ``with`` block, at exit."""

    def __init__(self, n, seconds=BUSY_SECONDS):
        self.n, self.seconds, self.procs, self.restarted = int(n), float(seconds), [], 0

    def _spawn(self):
        return subprocess.Popen([sys.executable, "-c", BUSY_CODE, str(self.seconds),
                                 str(os.getpid())], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self):
        atexit.register(self.stop)
        self.procs = [self._spawn() for _ in range(self.n)]
        return self

    def check(self):
        """Restart busy processes that ended (their time ran out); returns how many."""
        dead = [i for i, p in enumerate(self.procs) if p.poll() is not None]
        for i in dead:
            self.procs[i] = self._spawn()
        self.restarted += len(dead)
        return len(dead)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores kill
                pass
        self.procs = []
        atexit.unregister(self.stop)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def _terminate_as_exit(signum, frame):  # pragma: no cover - signal handler
    raise SystemExit(128 + signum)


# ---------------------------------------------------------------------- one process
def child_main(spec):
    """Build the tensors, time the fits; print one JSON line."""
    sys.path.insert(0, str(ROOT))
    import sktensor_fast as sk
    from benchmarks.synth import synthetic_tensor
    out = {"threads": sk.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
           "wait_policy": sk.get_config()["openmp_wait_policy"], "results": []}
    for name, shape, nnz, rank in spec["tensors"]:
        if shape is None:
            from sktensor_fast.datasets import load_flights_routes
            X = load_flights_routes().tensor
        else:
            X = synthetic_tensor(tuple(shape), int(nnz), seed=0)
        for fit in spec["fits"]:
            cls_name, kw = FITS[fit]
            cls = getattr(sk, cls_name)
            cls(rank=rank, **{**kw, "max_iter": 1}).fit(X)       # fault in, untimed
            times, cpu, nivcsw = [], [], []
            while len(times) < spec["repeat"] or (sum(times) < MIN_SECONDS
                                                  and len(times) < MAX_REPEAT):
                est = cls(rank=rank, **kw)
                c, n = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
                t = time.perf_counter()
                est.fit(X)
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
                nivcsw.append(resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw - n)
            # cpu_seconds: CPU time of all the process's threads during each fit (one thread
            # that shares its core with a busy process gets about half of its wall time);
            # involuntary_switches: times the scheduler took a core from one of its threads
            out["results"].append({"tensor": name, "nnz": int(X.nnz), "rank": rank, "fit": fit,
                                   "seconds": times, "cpu_seconds": cpu,
                                   "involuntary_switches": nivcsw})
    print("RESULT " + json.dumps(out), flush=True)


#: OpenMP's own default waiting (GNU libgomp: spin about 3 ms), which the package replaces by
#: passive waiting unless the user sets a policy; ``--compare-spin`` times it too.
SPIN_ENV = {"GOMP_SPINCOUNT": "300000", "KMP_BLOCKTIME": "200"}


def spin_env(count):
    """The environment of a run that spins ``count`` times (GNU libgomp's GOMP_SPINCOUNT) before
    sleeping; OpenMP's default is 300000 (LLVM's KMP_BLOCKTIME=200 ms goes with it)."""
    count = int(count)
    if count == 300000:
        return dict(SPIN_ENV)
    return {"GOMP_SPINCOUNT": str(count)}


def run_child(spec, threads, timeout, extra_env=None):
    """One fresh process with ``OMP_NUM_THREADS=threads`` (None: as inherited)."""
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    env.update(extra_env or {})
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "benchmarks.contention", "--child",
                           json.dumps(spec)], cwd=str(ROOT), env=env, capture_output=True,
                          text=True, timeout=timeout)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"the fit process (OMP_NUM_THREADS={threads}) failed with exit code "
                           f"{proc.returncode}: {proc.stderr[-2000:]}")
    res = json.loads(line[-1][len("RESULT "):])
    res["wall_seconds"] = time.time() - t0
    return res


# ---------------------------------------------------------------------- the section
def thread_settings(threads, compare_spin=False):
    """[(label, OMP_NUM_THREADS or None, extra environment)]: one thread, then the counts asked
    for (else the default, i.e. OMP_NUM_THREADS as inherited); with ``compare_spin`` (True, or
    a list of spin counts) each of those again with OpenMP's spinning default (label suffix
    ``+spin``) or with each spin count (``+spinN``)."""
    out = [("1", 1, {})]
    many = ([(str(t), t) for t in sorted(set(int(t) for t in threads)) if t != 1] if threads
            else [("default", None)])
    out += [(a, b, {}) for a, b in many]
    if compare_spin:
        counts = [300000] if compare_spin is True else [int(c) for c in compare_spin]
        for c in counts:
            suffix = "+spin" if c == 300000 else f"+spin{c}"
            out += [(a + suffix, b, spin_env(c)) for a, b in many]
    return out


def section_contention(mode="quick", busy=None, threads=None, repeat=None, rounds=2,
                       fits=tuple(FITS), timeout=1800, cores=None, compare_spin=False,
                       tensors=None):
    """Run both conditions; returns (result dict, Markdown table).  ``tensors``: names from
    the preset's list (default: all of them)."""
    cores = cores or len(os.sched_getaffinity(0))
    busy = cores if busy is None else int(busy)
    repeat = repeat or (1 if mode == "tiny" else 2)
    rounds = 1 if mode == "tiny" else rounds
    names, tensors = tensors, [t for t in TENSORS[mode] if not tensors or t[0] in tensors]
    if not tensors:
        raise ValueError(f"no tensor of the {mode!r} preset is named in {names!r}; choose "
                         f"from {[t[0] for t in TENSORS[mode]]}")
    spec = {"tensors": [list(t) for t in tensors], "fits": list(fits), "repeat": int(repeat)}
    settings = thread_settings(threads, compare_spin)
    conditions = [("quiet", 0)] + ([("busy", busy)] if busy > 0 else [])
    runs, notes, loads = [], [], {}
    old = signal.signal(signal.SIGTERM, _terminate_as_exit)
    try:
        for cond, nbusy in conditions:
            load0 = list(os.getloadavg())
            with BusyProcesses(nbusy) as bp:
                if nbusy:
                    time.sleep(1.0)   # let the scheduler spread them
                for rnd in range(rounds):
                    for label, t, extra in settings:
                        bp.check()
                        r = run_child(spec, t, timeout, extra)
                        r.update(condition=cond, busy=nbusy, round=rnd, setting=label,
                                 load_average=list(os.getloadavg()))
                        runs.append(r)
                        print(f"  contention: {cond} (busy {nbusy}), round {rnd + 1}, "
                              f"threads {label} ({r['threads']}): {r['wall_seconds']:.1f} s",
                              flush=True)
                restarted = bp.restarted
            if restarted:
                notes.append(f"{cond}: {restarted} busy processes ended early and were "
                             f"restarted")
            loads[cond] = [load0[0], os.getloadavg()[0]]
            notes.append(f"{cond}: load average {load0[0]:.2f} before, {loads[cond][1]:.2f} "
                         f"after (the busy processes included)")
    finally:
        signal.signal(signal.SIGTERM, old)
    rows = summarize(runs, settings, conditions, tensors, fits)
    res = {"busy": busy, "cores": cores, "repeat": repeat, "rounds": rounds,
           "settings": [{"label": a, "omp_num_threads": b, "env": e} for a, b, e in settings],
           "fits": {f: {"estimator": FITS[f][0], **FITS[f][1]} for f in fits},
           "tensors": [{"name": n, "shape": s, "nnz": z, "rank": r} for n, s, z, r in tensors],
           "load_average": loads, "rows": rows, "runs": runs, "notes": notes}
    return res, table(rows, settings)


def summarize(runs, settings, conditions, tensors, fits):
    """Best time per (condition, tensor, fit, setting) and the ratios to one thread."""
    rows = []
    for cond, nbusy in conditions:
        for tname, *_ in tensors:
            for fit in fits:
                row = {"condition": cond, "busy": nbusy, "tensor": tname, "fit": fit}
                for label, *_ in settings:
                    xs = [x for r in runs if r["condition"] == cond and r["setting"] == label
                          for x in r["results"] if x["tensor"] == tname and x["fit"] == fit]
                    ts = [s for x in xs for s in x["seconds"]]
                    cs = [c for x in xs for c in x.get("cpu_seconds", [None] * len(x["seconds"]))]
                    row[f"t_{label}"] = min(ts) if ts else None
                    # CPU seconds over wall seconds of the best fit (threads x share of a core)
                    best = int(np.argmin(ts)) if ts else None
                    row[f"cpu_per_wall_{label}"] = (cs[best] / ts[best] if ts and cs[best]
                                                    is not None and ts[best] > 0 else None)
                    row[f"median_{label}"] = float(np.median(ts)) if ts else None
                    thr = [r["threads"] for r in runs
                           if r["condition"] == cond and r["setting"] == label]
                    row[f"threads_{label}"] = thr[0] if thr else None
                for label, *_ in settings[1:]:
                    a, b = row.get("t_1"), row.get(f"t_{label}")
                    row[f"ratio_{label}"] = b / a if a and b else None
                rows.append(row)
    return rows


def table(rows, settings):
    others = [s for s, *_ in settings[1:]]
    head = ["condition", "tensor", "fit", "1 thread s"]
    for s in others:
        head += [f"{s} threads s", f"{s} / 1"]
    body = []
    for r in rows:
        line = [f"{r['condition']} (+{r['busy']})" if r["busy"] else r["condition"], r["tensor"],
                r["fit"], fmt_num(r["t_1"])]
        for s in others:
            n = r.get(f"threads_{s}")
            line += [fmt_num(r[f"t_{s}"]) + (f" ({n})" if s.startswith("default") and n else ""),
                     fmt_num(r[f"ratio_{s}"])]
        body.append(line)
    return md_table(head, body)


def plot(res, outdir, plt):
    """contention.png: time with many threads over time with one, per fit, both conditions."""
    rows = res.get("rows", [])
    others = [s["label"] for s in res.get("settings", [])[1:]]
    if not rows or not others:
        return None
    conds = sorted({r["condition"] for r in rows}, key=["quiet", "busy"].index)
    fig, axes = plt.subplots(1, len(conds), figsize=(6 * len(conds), 4), squeeze=False)
    for ax, cond in zip(axes[0], conds):
        sub = [r for r in rows if r["condition"] == cond]
        labels = [f"{r['tensor']}\n{r['fit']}" for r in sub]
        x = np.arange(len(sub))
        w = 0.8 / len(others)
        for k, s in enumerate(others):
            vals = [r[f"ratio_{s}"] or np.nan for r in sub]
            ax.bar(x + k * w, vals, w, label=f"{s} threads / 1 thread")
        ax.axhline(1.0, color="k", lw=0.8)
        if cond == "busy":
            ax.axhline(1.3, color="r", lw=0.8, ls="--", label="1.3")
        ax.set_xticks(x + w * (len(others) - 1) / 2)
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("fit time ratio (lower is better)")
        busy = sub[0]["busy"] if sub else 0
        load = res.get("load_average", {}).get(cond)
        ax.set_title((f"{busy} busy processes started" if busy else "no busy processes started")
                     + (f" (load average {load[0]:.1f} before)" if load else ""), fontsize=9)
        ax.legend(fontsize=7)
    return fig


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.contention", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=sorted(TENSORS), default="quick")
    p.add_argument("--busy", type=int, default=None,
                   help="busy processes of the loaded condition (default: one per core)")
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="thread counts besides 1 (default: OpenMP's default)")
    p.add_argument("--repeat", type=int, default=None, help="timed fits per process")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tensors", nargs="+", default=None,
                   help="only these tensors of the preset (names as in TENSORS)")
    p.add_argument("--fits", nargs="+", choices=sorted(FITS), default=list(FITS))
    p.add_argument("--compare-spin", type=int, nargs="*", default=None, metavar="COUNT",
                   help="also time the many-thread runs with OpenMP's spinning default "
                        f"({', '.join(f'{k}={v}' for k, v in SPIN_ENV.items())}), or with "
                        "each GOMP_SPINCOUNT given")
    p.add_argument("--out", default="bench_out/contention.json")
    args = p.parse_args(argv)
    if args.child is not None:
        return child_main(json.loads(args.child))
    if args.busy is not None and args.busy < 0:
        raise SystemExit("--busy must be >= 0")
    if args.threads and min(args.threads) < 1:
        raise SystemExit("--threads: thread counts must be >= 1")
    res, tab = section_contention(args.mode, args.busy, args.threads, args.repeat, args.rounds,
                                  fits=tuple(args.fits),
                                  compare_spin=(args.compare_spin or True)
                                  if args.compare_spin is not None else False,
                                  tensors=args.tensors)
    print(tab)
    for note in res["notes"]:
        print(f"- note: {note}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res.update(command="python -m benchmarks.contention " + " ".join(argv if argv is not None
                                                                      else sys.argv[1:]),
               date=time.strftime("%Y-%m-%d %H:%M:%S"), cpu=cpu_model())
    out.write_text(json.dumps(plain(res), indent=1))
    print(f"wrote {out}")
    return res


if __name__ == "__main__":
    main()
