"""Streaming GCP (``partial_fit``, one day per batch) against a batch fit and pygenten.

    python benchmarks/bench_streaming.py                    # the whole year, 5 seeds
    python benchmarks/bench_streaming.py --days 60 --seeds 0 --mem-batches 200 --no-pygenten

The stream is ``flights-carrier-dest-date-hour`` from ``../shared/data`` with the date first
(365 × 16 × 105 × 20, 294,734 nonzeros): day ``t`` is batch ``t``.  Reported:

- final loss of the streamed model against a batch fit on all the days (same rank, loss and
  seed; the median over ``--seeds``).  Both are scored alike: the exact Poisson loss
  ``Σ m − x log m`` over every entry of the whole tensor, with the date loadings solved for
  the model's final non-sample factors (``score``, in chunks of 30 days, each small enough
  for the exact loss);
- time per daily batch (the median over the batches after the first, and the mean) against
  the time of refitting the whole history from scratch at the end of the stream (the batch
  fit above);
- memory over ``--mem-batches`` batches (the days over and over): the peak of what Python and
  NumPy allocate during each ``partial_fit`` (tracemalloc), and what stays allocated after
  it; cheap updates (2 epochs of 50 steps), since the memory does not depend on the steps;
  every day is a tensor of its own, as a stream delivers it;
- time per batch against pygenten's ``online_gcp`` (GenTen's streaming GCP) on the first
  ``--pg-days`` days, with the same loss, rank, window, learning rate, steps per epoch and
  epochs per update (``tol=0``: every epoch runs), each with its own default sample counts;
  pygenten runs in the virtual environment ``--pygenten-python`` (a separate process,
  ``OMP_NUM_THREADS`` as ours).  Its temporal mode is the last, so its batches are the days
  as the last mode.  Its final non-sample factors are scored as ours.

Prints a table and writes JSON (machine, threads, versions, numbers).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sktensor_fast  # noqa: E402
from sktensor_fast import GCP, SparseTensor, load_tns  # noqa: E402
from benchmarks.common import DATA_DIR, cpu_model, write_report  # noqa: E402

DATA = DATA_DIR / "flights-carrier-dest-date-hour" / "tensor.tns.gz"


def load_stream(days=None):
    """The tensor with the date first (days × carrier × dest × hour)."""
    X = load_tns(DATA).transpose([2, 0, 1, 3])
    return X if days is None else X[:days]


def split_days(X):
    """Each day of ``X`` as a tensor of its own (as a stream delivers it: not a selection of
    a larger tensor, whose prepared forms the package would keep with that tensor)."""
    cuts = np.searchsorted(X.subs[:, 0], np.arange(X.shape[0] + 1))
    out = []
    for t in range(X.shape[0]):
        subs = np.array(X.subs[cuts[t]:cuts[t + 1]])
        subs[:, 0] = 0
        out.append(SparseTensor._from_canonical(subs, np.array(X.vals[cuts[t]:cuts[t + 1]]),
                                                (1,) + tuple(X.shape[1:])))
    return out


def exact_loss(est, X, chunk=30):
    """Σ over every entry of X of the Poisson loss, the date loadings solved for ``est``'s
    non-sample factors (exact: each chunk has fewer entries than GCP_DENSE_LIMIT)."""
    total = 0.0
    for s in range(0, X.shape[0], chunk):
        part = X[s:s + chunk]
        total += -est.score(part) * part.size
    return total


def stream(make, X, record_memory=False):
    """``partial_fit`` day after day; the model and the time of each call."""
    est = make()
    times = []
    for day in split_days(X):
        t0 = time.perf_counter()
        est.partial_fit(day)
        times.append(time.perf_counter() - t0)
    return est, np.array(times)


def memory_run(X, n_batches, rank, window, seed):
    est = GCP(rank, loss="poisson", window=window, random_state=seed, epoch_iters=50,
              max_iter=2)
    peaks, kept = [], []
    days = split_days(X)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for b in range(n_batches):
        d = days[b % len(days)]
        # a new tensor for every batch, as a stream delivers it (what the package prepares
        # for a tensor lives as long as the tensor)
        day = SparseTensor._from_canonical(d.subs.copy(), d.vals.copy(), d.shape)
        tracemalloc.reset_peak()
        est.partial_fit(day)
        peak = tracemalloc.get_traced_memory()[1]
        del day
        peaks.append(peak - base)
        kept.append(tracemalloc.get_traced_memory()[0] - base)
    tracemalloc.stop()
    return np.array(peaks), np.array(kept)


PYGENTEN_SCRIPT = r"""
import json, sys, time, os
import numpy as np
import pygenten as g
a = json.loads(sys.argv[1])
subs = np.load(a["subs"]); vals = np.load(a["vals"])
# days last: carrier, dest, hour, date
subs = np.ascontiguousarray(subs[:, [1, 2, 3, 0]]).astype(np.int64)
shape = (a["shape"][1], a["shape"][2], a["shape"][3])
R = a["rank"]
def day(t):
    m = subs[:, 3] == t
    s = np.ascontiguousarray(subs[m]); s[:, 3] = 0
    return g.Sptensor(shape + (1,), s, np.ascontiguousarray(vals[m]))
days = [day(t) for t in range(a["days"])]
rng = np.random.default_rng(a["seed"])
u0 = g.Ktensor(np.ones(R), [rng.random((n, R)) for n in shape] + [rng.random((1, R))])
common = dict(method=g.Solver_Method.GCP_SGD, loss_function_type="poisson", rank=R,
              maxiters=a["epochs"], epoch_iters=a["epoch_iters"], rate=a["rate"],
              gcp_tol=0.0, printitn=0, seed=a["seed"])
t0 = time.perf_counter()
u, fest, ften = g.online_gcp(days[1:], days[0], u0, dict(common), dict(common),
                             streaming_solver=g.GCP_Streaming_Solver.StreamingSGD,
                             window_size=a["window"],
                             window_method=g.GCP_Streaming_Window_Method.Last,
                             window_penalty=1.0, rank=R, printitn=0,
                             loss_function_type="poisson")
elapsed = time.perf_counter() - t0
out = {"seconds": elapsed, "weights": np.asarray(u.weights).tolist(),
       "factors": [np.asarray(u[k]).tolist() for k in range(4)]}
with open(a["out"], "w") as f:
    json.dump(out, f)
sys.stdout.flush()
os._exit(0)   # pygenten 0.1.5 aborts in Kokkos at interpreter exit
"""


def run_pygenten(python, X, days, rank, window, seed, epochs, epoch_iters, rate):
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "subs.npy"), np.ascontiguousarray(X.subs))
        np.save(os.path.join(tmp, "vals.npy"), np.ascontiguousarray(X.vals))
        args = {"subs": os.path.join(tmp, "subs.npy"), "vals": os.path.join(tmp, "vals.npy"),
                "shape": list(X.shape), "rank": rank, "days": days, "window": window,
                "seed": seed, "epochs": epochs, "epoch_iters": epoch_iters, "rate": rate,
                "out": os.path.join(tmp, "out.json")}
        env = dict(os.environ, OMP_PROC_BIND="false")
        env.setdefault("OMP_NUM_THREADS", str(sktensor_fast.get_num_threads()))
        proc = subprocess.run([python, "-c", PYGENTEN_SCRIPT, json.dumps(args)], env=env,
                              capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0 or not os.path.exists(args["out"]):
            raise RuntimeError(f"pygenten failed ({proc.returncode}): {proc.stderr[-2000:]}")
        with open(args["out"]) as f:
            return json.load(f)


def scorer(rank, weights, factors, shape):
    """A GCP estimator holding a given model (for ``score``)."""
    est = GCP(rank, loss="poisson")
    est.weights_ = np.asarray(weights, dtype=np.float64)
    est.factors_ = [np.asarray(f, dtype=np.float64) for f in factors]
    est.tensor_shape_ = tuple(shape)
    est.n_features_in_ = int(np.prod(shape[1:]))
    return est


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--days", type=int, default=None, help="first days only (default all)")
    ap.add_argument("--rank", type=int, default=5)
    ap.add_argument("--window", type=int, default=7)
    ap.add_argument("--window-method", default="last", choices=["last", "reservoir"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--mem-batches", type=int, default=1000)
    ap.add_argument("--pg-days", type=int, default=30)
    ap.add_argument("--pg-epochs", type=int, default=5)
    ap.add_argument("--pg-epoch-iters", type=int, default=100)
    ap.add_argument("--pg-rate", type=float, default=1e-3)
    ap.add_argument("--pygenten-python", default="/tmp/pgv/bin/python")
    ap.add_argument("--no-pygenten", action="store_true")
    ap.add_argument("--only-loss", action="store_true",
                    help="the loss and time against the batch fit only")
    ap.add_argument("--out", default="benchmarks/results/streaming_flights.json")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    X = load_stream(args.days)
    R, win = args.rank, args.window
    print(f"stream {X.shape}, nnz {X.nnz}; rank {R}, Poisson loss, window {win} "
          f"({args.window_method}), "
          f"{sktensor_fast.get_num_threads()} threads")
    report = {"machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                          "threads": sktensor_fast.get_num_threads(),
                          "python": platform.python_version()},
              "shape": list(X.shape), "nnz": int(X.nnz), "rank": R, "window": win,
              "window_method": args.window_method,
              "seeds": args.seeds}

    rows = []
    for seed in args.seeds:
        t0 = time.perf_counter()
        batch = GCP(R, loss="poisson", random_state=seed).fit(X)
        t_batch = time.perf_counter() - t0
        streamed, times = stream(lambda: GCP(R, loss="poisson", window=win,
                                             window_method=args.window_method,
                                             random_state=seed), X)
        rows.append({"seed": seed, "batch_seconds": t_batch,
                     "batch_loss": exact_loss(batch, X),
                     "stream_loss": exact_loss(streamed, X),
                     "first_batch_seconds": float(times[0]),
                     "batch_median_seconds": float(np.median(times[1:])),
                     "batch_mean_seconds": float(np.mean(times[1:])),
                     "stream_total_seconds": float(times.sum())})
        r = rows[-1]
        print(f"seed {seed}: batch fit {t_batch:.1f}s loss {r['batch_loss']:.6g}; stream "
              f"loss {r['stream_loss']:.6g} ({r['stream_loss'] / r['batch_loss'] - 1:+.2%}), "
              f"{r['batch_median_seconds'] * 1e3:.0f} ms per day (median), "
              f"{r['batch_mean_seconds'] * 1e3:.0f} ms (mean)")
    for r in rows:
        r["stream_over_batch"] = r["stream_loss"] / r["batch_loss"]
    med = {k: float(np.median([r[k] for r in rows])) for k in rows[0] if k != "seed"}
    report["loss_and_time"] = {"runs": rows, "median": med}
    print(f"median: stream loss / batch loss - 1 = "
          f"{med['stream_loss'] / med['batch_loss'] - 1:+.2%} (median of the seeds' ratios "
          f"{med['stream_over_batch'] - 1:+.2%}); refit {med['batch_seconds']:.1f}s "
          f"vs {med['batch_median_seconds'] * 1e3:.0f} ms per day: "
          f"{med['batch_seconds'] / med['batch_median_seconds']:.0f}x (median day), "
          f"{med['batch_seconds'] / med['batch_mean_seconds']:.0f}x (mean day)")
    if args.only_loss:
        write_report(report, args.out)
        return report

    if args.mem_batches:
        peaks, kept = memory_run(X, args.mem_batches, R, win, args.seeds[0])
        marks = sorted(m for m in {1, 10, 100, args.mem_batches // 2, args.mem_batches}
                       if 0 < m <= args.mem_batches)
        report["memory"] = {"batches": args.mem_batches,
                            "peak_bytes": {str(m): int(peaks[m - 1]) for m in marks},
                            "kept_bytes": {str(m): int(kept[m - 1]) for m in marks},
                            "peak_max": int(peaks.max()),
                            "peak_max_after_window": int(peaks[win + 1:].max())
                            if peaks.size > win + 1 else None}
        print("memory over batches (tracemalloc, MiB): " + ", ".join(
            f"#{m}: peak {peaks[m - 1] / 2 ** 20:.2f} kept {kept[m - 1] / 2 ** 20:.2f}"
            for m in marks))

    if not args.no_pygenten and os.path.exists(args.pygenten_python):
        days = min(args.pg_days, X.shape[0])
        Xd = X[:days]
        seed = args.seeds[0]
        settings = dict(epoch_iters=args.pg_epoch_iters, max_iter=args.pg_epochs, tol=0.0,
                        learning_rate=args.pg_rate, max_fails=args.pg_epochs)
        mine, times = stream(lambda: GCP(R, loss="poisson", window=win, random_state=seed,
                                         **settings), Xd)
        pg = run_pygenten(args.pygenten_python, X, days, R, win, seed, args.pg_epochs,
                          args.pg_epoch_iters, args.pg_rate)
        f = pg["factors"]
        theirs = scorer(R, pg["weights"],
                        [np.asarray(f[3])[:1] * 0 + 1, f[0], f[1], f[2]], Xd.shape)
        res = {"days": days, "settings": settings,
               "ours_seconds_per_batch": float(times.sum() / days),
               "pygenten_seconds_per_batch": pg["seconds"] / days,
               "ours_loss": exact_loss(mine, Xd), "pygenten_loss": exact_loss(theirs, Xd)}
        report["pygenten"] = res
        print(f"vs pygenten online_gcp, {days} days: ours {res['ours_seconds_per_batch'] * 1e3:.0f}"
              f" ms per day, pygenten {res['pygenten_seconds_per_batch'] * 1e3:.0f} ms; loss "
              f"ours {res['ours_loss']:.6g}, pygenten {res['pygenten_loss']:.6g}")
    elif not args.no_pygenten:
        print(f"pygenten: no Python at {args.pygenten_python}; skipped")
    write_report(report, args.out)
    return report


if __name__ == "__main__":
    main()
