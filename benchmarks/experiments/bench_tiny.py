"""CP-ALS on a tiny tensor (flights-routes, 15,188 nonzeros) at 1 and 2 threads, and pygenten.

On a tensor this small an iteration takes a few hundred microseconds: the fixed costs of an
iteration (Python between the kernels, the R x R steps, starting threads) weigh as much as the
MTTKRPs.  For each rank and format this script times, with the same random initial factors:

- the time per iteration: the difference between fits of ``--long`` and ``--short``
  iterations (``tol=0``), divided by the difference, so that what a fit does once (preparing
  the tensor, the initial guess, the final normalisation) is left out;
- the whole fit: ``CPALS(rank)`` with its default stopping rule (``tol=1e-4``,
  ``max_iter=100``) from the same start;

each ``--repeat`` times, 1 and 2 threads in turn within a repeat, as wall time and as CPU
time of the process (all its threads), best and median.  pygenten's ``cp_als`` (GenTen) is
timed the same way, per iteration, in a subprocess with ``OMP_NUM_THREADS`` set, when a
Python that imports it is found: ``--genten-python`` (or ``SKTF_GENTEN_PYTHON``), else this
Python if it has pygenten.  pygenten stays out of the package's dependencies; a separate
virtual environment does (``python -m venv /tmp/gt && /tmp/gt/bin/pip install pygenten
pyttb``).

    python benchmarks/experiments/bench_tiny.py --repeat 15
    python benchmarks/experiments/bench_tiny.py --genten-python /tmp/gt/bin/python --json out.json
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _stats(values):
    v = sorted(values)
    return {"best": v[0], "median": v[len(v) // 2]}


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def time_ours(X, init, rank, fmt, threads, short, long, repeat):
    """Per-iteration and whole-fit times of CPALS (seconds; wall and CPU, best and median)."""
    import warnings
    from sktensor_fast import CPALS, num_threads

    def fit(iters, tol):
        kw = {"max_iter": iters} if iters else {}
        est = CPALS(rank=rank, init=[f.copy() for f in init], tol=tol, format=fmt, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X)
        return est

    runs = {t: {"short": [], "long": [], "whole": []} for t in threads}
    fits = {}
    for t in threads:                    # warm up: measured costs, first-call work
        with num_threads(t):
            fit(2, 0.0)
    for _ in range(repeat):
        for t in threads:
            with num_threads(t):
                runs[t]["short"].append(_timed(lambda: fit(short, 0.0)))
                runs[t]["long"].append(_timed(lambda: fit(long, 0.0)))
                est = None

                def whole():
                    nonlocal est
                    est = fit(None, 1e-4)
                runs[t]["whole"].append(_timed(whole))
                fits[t] = (est.n_iter_, est.fit_)
    out = {}
    for t in threads:
        r = runs[t]
        res = {}
        for k, name in ((0, "wall"), (1, "cpu")):
            s = _stats([x[k] for x in r["short"]])
            lg = _stats([x[k] for x in r["long"]])
            res[f"iter_{name}"] = {q: (lg[q] - s[q]) / (long - short) for q in s}
            res[f"fit_{name}"] = _stats([x[k] for x in r["whole"]])
        res["fit_iters"], res["fit_value"] = fits[t]
        out[t] = res
    return out


def find_genten_python(given):
    """A Python that imports pygenten: ``given``, ``SKTF_GENTEN_PYTHON``, or this one."""
    for exe in (given, os.environ.get("SKTF_GENTEN_PYTHON")):
        if exe:
            return exe
    if importlib.util.find_spec("pygenten") is not None:
        return sys.executable
    return None


def time_genten(python, X, init, threads, short, long, repeat, timeout=600):
    """pygenten's cp_als per iteration at ``threads`` threads, in a subprocess."""
    fd, path = tempfile.mkstemp(suffix=".npz")
    os.close(fd)
    try:
        np.savez(path, subs=X.subs, vals=X.vals.astype(np.float64), shape=np.asarray(X.shape),
                 iters=np.asarray([short, long]), repeat=repeat,
                 **{f"init{k}": f for k, f in enumerate(init)})
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
        cmd = [python, os.path.abspath(__file__), "--genten-worker", path]
        try:
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"pygenten took more than {timeout} s"}
        for line in res.stdout.splitlines():
            if line.startswith("GENTEN-RESULT "):
                runs = json.loads(line.split(" ", 1)[1])
                out = {}
                for k, name in ((0, "wall"), (1, "cpu")):
                    s = _stats([x[k] for x in runs[str(short)]])
                    lg = _stats([x[k] for x in runs[str(long)]])
                    out[f"iter_{name}"] = {q: (lg[q] - s[q]) / (long - short) for q in s}
                return out
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        return {"error": "pygenten failed: " + " | ".join(tail)}
    finally:
        os.unlink(path)


def _genten_worker(path):
    """In the subprocess: time pygenten's cp_als (pyttb's sptensor as its input)."""
    import pyttb as ttb
    import pygenten as gt
    d = np.load(path)
    shape = tuple(int(s) for s in d["shape"])
    Xp = ttb.sptensor(d["subs"], d["vals"][:, None], shape)
    init = [d[f"init{k}"] for k in range(len(shape))]
    runs = {}
    for _ in range(int(d["repeat"]) + 1):       # the first round warms up
        for iters in d["iters"]:
            K = ttb.ktensor([np.asfortranarray(f) for f in init], copy=True)
            w, c = time.perf_counter(), time.process_time()
            gt.cp_als(Xp, rank=init[0].shape[1], maxiters=int(iters), tol=0.0, init=K,
                      printitn=0)
            runs.setdefault(str(int(iters)), []).append((time.perf_counter() - w,
                                                         time.process_time() - c))
    runs = {k: v[1:] for k, v in runs.items()}
    print("GENTEN-RESULT " + json.dumps(runs), flush=True)
    os._exit(0)  # Kokkos may crash while finalising at interpreter exit


def _us(x):
    return f"{x * 1e6:8.0f}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, nargs="+", default=[5, 8])
    p.add_argument("--formats", nargs="+", default=["auto", "alto"])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--short", type=int, default=10)
    p.add_argument("--long", type=int, default=110)
    p.add_argument("--repeat", type=int, default=11)
    p.add_argument("--genten-python", default=None)
    p.add_argument("--no-genten", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from benchmarks.common import machine_info
    from sktensor_fast.datasets import load_flights_routes
    X = load_flights_routes().tensor
    X.norm()                        # value statistics kept with X, outside the timings
    info = machine_info(args.threads, ["cpu"])
    print(f"flights-routes {X.shape}, {X.nnz:,} nonzeros; {info['cpu']}, "
          f"{info['cores_available']} cores available, load average at start "
          f"{', '.join(f'{x:.2f}' for x in info['load_average_start'])}")
    genten = None if args.no_genten else find_genten_python(args.genten_python)
    rows = []
    for rank in args.ranks:
        init = [np.random.default_rng(rank).random((n, rank)) for n in X.shape]
        for fmt in args.formats:
            res = time_ours(X, init, rank, fmt, args.threads, args.short, args.long,
                            args.repeat)
            for t in args.threads:
                rows.append({"library": "sktensor_fast", "format": fmt, "rank": rank,
                             "threads": t, **res[t]})
        if genten:
            for t in args.threads:
                res = time_genten(genten, X, init, t, args.short, args.long, args.repeat)
                rows.append({"library": "pygenten", "format": "-", "rank": rank, "threads": t,
                             **res})
        elif rank == args.ranks[0]:
            print("pygenten: no Python with pygenten found (--genten-python)")
    print("times in microseconds per iteration, milliseconds per whole fit; best / median "
          "over the repeats")
    print(f"{'library':14s} {'format':6s} {'R':>2s} {'thr':>3s} | {'iter wall':>17s} | "
          f"{'iter cpu':>17s} | {'fit wall ms':>13s} | {'fit cpu ms':>13s} | iters")
    for r in rows:
        if "error" in r:
            print(f"{r['library']:14s} {r['format']:6s} {r['rank']:2d} {r['threads']:3d} | "
                  f"{r['error']}")
            continue
        line = (f"{r['library']:14s} {r['format']:6s} {r['rank']:2d} {r['threads']:3d} | "
                f"{_us(r['iter_wall']['best'])} {_us(r['iter_wall']['median'])} | "
                f"{_us(r['iter_cpu']['best'])} {_us(r['iter_cpu']['median'])} |")
        if "fit_wall" in r:
            line += (f" {r['fit_wall']['best'] * 1e3:6.2f} {r['fit_wall']['median'] * 1e3:6.2f}"
                     f" | {r['fit_cpu']['best'] * 1e3:6.2f} {r['fit_cpu']['median'] * 1e3:6.2f}"
                     f" | {r['fit_iters']}")
        print(line)
    if args.json:
        from benchmarks.common import write_report
        write_report({"machine": info, "args": vars(args), "rows": rows}, args.json)
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--genten-worker":
        _genten_worker(sys.argv[2])
    else:
        main()
