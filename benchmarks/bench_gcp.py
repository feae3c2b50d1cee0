"""GCP-Adam time per epoch: sktensor_fast versus pyttb's gcp_opt and GenTen (pygenten).

    python benchmarks/bench_gcp.py                         # 1M nonzeros, NELL-2 shape, R=16
    python benchmarks/bench_gcp.py --nnz 1e6 --rank 16 --threads 1 2 --out bench_out/gcp.json

Every library runs stratified sampling with the same sample counts (pyttb's defaults for the
tensor: p = q = max(1000, ⌈3 nnz / 1000⌉) per gradient step, max(10⁵, ⌈nnz / 100⌉) nonzeros and
zeros for the loss estimate), the Poisson loss, Adam, ``--epoch-iters`` steps per epoch.

- sktensor_fast: ``GCP(solver="adam").fit`` with 1 and with 1 + ``--epochs`` epochs; the time
  per epoch is the difference divided by ``--epochs`` (setup cancels out).
- GenTen (``pip install pygenten``): ``gcp_sgd`` in a subprocess per thread count
  (``OMP_NUM_THREADS``); time per epoch from its performance history, first epoch excluded
  (it includes one-off set-up work).
- pyttb: ``gcp_opt`` with ``Adam`` runs only ``--pyttb-iters`` steps (a step costs a search of
  all nonzeros in NumPy); its epoch time is the measured step time times ``--epoch-iters``
  plus one loss estimate.  pyttb is single-threaded (NumPy).

Prints a table and writes JSON (machine, versions, counts, timings).
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sktensor_fast  # noqa: E402
from sktensor_fast import GCP, num_threads  # noqa: E402
from benchmarks.common import cpu_model  # noqa: E402
from benchmarks.synth import synthetic_tensor  # noqa: E402



def counts(X):
    g = max(1000, math.ceil(3 * X.nnz / 1000))
    f = max(100_000, math.ceil(X.nnz / 100))
    zeros = X.size - X.nnz
    return (min(g, X.nnz), min(g, X.nnz, zeros)), (min(f, X.nnz), min(f, X.nnz, zeros))


def init_factors(X, rank, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.0, 1.0, (s, rank)) for s in X.shape]


# ------------------------------------------------------------------ sktensor_fast
def run_ours(X, args, n_grad, n_loss, threads):
    def fit(epochs):
        est = GCP(rank=args.rank, loss="poisson", solver="adam", sampler="stratified",
                  n_samples_grad=n_grad, n_samples_loss=n_loss, epoch_iters=args.epoch_iters,
                  max_iter=epochs, tol=0.0, max_fails=epochs, random_state=0,
                  init=init_factors(X, args.rank))
        t = time.perf_counter()
        est.fit(X)
        return time.perf_counter() - t, est

    with num_threads(threads):
        t1 = min(fit(1)[0] for _ in range(args.repeat))
        runs = [fit(1 + args.epochs) for _ in range(args.repeat)]
    tn, est = min(runs, key=lambda r: r[0])
    return {"library": "sktensor_fast", "threads": threads,
            "s_per_epoch": (tn - t1) / args.epochs, "fit_1_epoch_s": t1,
            "f_est": [float(v) for v in est.loss_history_]}


# ------------------------------------------------------------------ GenTen
def genten_worker(args):
    """Runs in a subprocess: OMP_NUM_THREADS is read when pygenten is imported."""
    import pyttb as ttb
    import pygenten as gt  # noqa: F401
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
    (gp, gq), (fp, fq) = counts(X)
    init = ttb.ktensor([np.asfortranarray(f) for f in init_factors(X, args.rank)])
    t = time.perf_counter()
    _, _, perf = gt.gcp_sgd(X.to_pyttb(), rank=args.rank, init=init, type="poisson",
                            sampling="stratified", gnzs=gp, gzs=gq, fnzs=fp, fzs=fq,
                            epochiters=args.epoch_iters, maxiters=1 + args.epochs, seed=1,
                            rate=1e-3, printitn=0)
    total = time.perf_counter() - t
    cum = [perf.getEntry(i).cum_time for i in range(perf.size())]
    res = {"library": "genten", "threads": int(os.environ.get("OMP_NUM_THREADS", "0")),
           "s_per_epoch": (cum[-1] - cum[1]) / (len(cum) - 2) if len(cum) > 2 else None,
           "first_epoch_s": cum[1] - cum[0] if len(cum) > 1 else None, "total_s": total,
           "f_est": [float(perf.getEntry(i).residual) for i in range(perf.size())]}
    print("GENTEN-RESULT " + json.dumps(res), flush=True)
    os._exit(0)  # pygenten may crash while finalising Kokkos at interpreter exit


def run_genten(args, threads):
    try:
        import pygenten  # noqa: F401
    except ImportError as exc:
        return {"library": "genten", "threads": threads, "error": f"pygenten missing: {exc}"}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    cmd = [sys.executable, os.path.abspath(__file__), "--genten-worker", "--nnz", str(args.nnz),
           "--rank", str(args.rank), "--epochs", str(args.epochs), "--epoch-iters",
           str(args.epoch_iters), "--shape", *map(str, args.shape)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("GENTEN-RESULT "):
            return json.loads(line.split(" ", 1)[1])
    return {"library": "genten", "threads": threads,
            "error": (out.stderr or out.stdout)[-500:]}


# ------------------------------------------------------------------ pyttb
def run_pyttb(X, args, n_grad, n_loss):
    import logging
    import pyttb as ttb
    from pyttb.gcp.handles import Objectives
    from pyttb.gcp.optimizers import Adam
    from pyttb.gcp.samplers import GCPSampler, StratifiedCount
    logging.getLogger().setLevel(logging.ERROR)
    sp = X.to_pyttb()
    sampler = GCPSampler(sp, function_samples=StratifiedCount(n_loss[1], n_loss[0]),
                         gradient_samples=StratifiedCount(n_grad[1], n_grad[0]))
    init = [np.asfortranarray(f) for f in init_factors(X, args.rank)]
    np.random.seed(0)
    k = args.pyttb_iters
    opt = Adam(epoch_iters=k, max_iters=1, printitn=0)
    _, _, info = ttb.gcp_opt(sp, args.rank, Objectives.POISSON, opt, init=init,
                             sampler=sampler, printitn=0)
    trace = np.asarray(info["time_trace"])
    epoch_k = float(trace[1] - trace[0]) if trace.size > 1 else float(trace[0])
    # one loss estimate, timed separately, to split the epoch into steps + estimate
    from pyttb.gcp.fg_est import estimate
    from pyttb.gcp.fg_setup import setup
    fh, _, _ = setup(Objectives.POISSON, sp)
    subs, vals, wgts = sampler.function_sample(sp)
    model = ttb.ktensor(init)
    t = time.perf_counter()
    estimate(model, subs, vals, wgts, fh, lambda_check=False)
    t_est = time.perf_counter() - t
    step = max(epoch_k - t_est, 0.0) / k
    return {"library": "pyttb", "threads": 1, "steps_timed": k, "s_per_step": step,
            "s_per_epoch": step * args.epoch_iters + t_est, "loss_estimate_s": t_est}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nnz", type=float, default=1e6)
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818],
                   help="tensor shape (default: NELL-2's)")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--epoch-iters", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=2, help="epochs timed (after a first one)")
    p.add_argument("--pyttb-iters", type=int, default=10, help="steps pyttb runs (timed)")
    p.add_argument("--threads", type=int, nargs="+", default=None)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--no-pyttb", action="store_true")
    p.add_argument("--no-genten", action="store_true")
    p.add_argument("--out", default="bench_out/gcp.json")
    p.add_argument("--genten-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.genten_worker:
        return genten_worker(args)
    threads = args.threads or sorted({1, os.cpu_count() or 1})
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
    n_grad, n_loss = counts(X)
    print(f"tensor {X.shape}, nnz={X.nnz:,}, R={args.rank}, Poisson loss, Adam, stratified: "
          f"{n_grad} gradient samples (nonzeros, zeros) per step, {n_loss} loss samples, "
          f"{args.epoch_iters} steps per epoch", flush=True)
    rows = []
    for th in threads:
        rows.append(run_ours(X, args, n_grad, n_loss, th))
        if not args.no_genten:
            rows.append(run_genten(args, th))
    if not args.no_pyttb:
        rows.append(run_pyttb(X, args, n_grad, n_loss))
    ours = {r["threads"]: r["s_per_epoch"] for r in rows if r["library"] == "sktensor_fast"}
    print(f"{'library':<14} {'threads':>7} {'s/epoch':>10} {'ms/step':>9} "
          f"{'vs ours (same thr.)':>20}")
    for r in rows:
        if r.get("error"):
            print(f"{r['library']:<14} {r['threads']:>7}   error: {r['error'][:200]}")
            continue
        spe = r["s_per_epoch"]
        ref = ours.get(r["threads"], ours.get(1))
        ratio = spe / ref if (spe and ref) else float("nan")
        note = " (extrapolated from %d steps)" % r["steps_timed"] if "steps_timed" in r else ""
        print(f"{r['library']:<14} {r['threads']:>7} {spe:>10.3f} "
              f"{1e3 * spe / args.epoch_iters:>9.3f} {ratio:>19.1f}x{note}")
    report = {"benchmark": "gcp_adam_epoch", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                          "platform": platform.platform(),
                          "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None},
              "versions": {"sktensor_fast": sktensor_fast.__version__, "numpy": np.__version__,
                           "python": platform.python_version(), **_versions()},
              "tensor": {"shape": list(X.shape), "nnz": X.nnz, "generator": "synthetic_tensor"},
              "rank": args.rank, "loss": "poisson", "epoch_iters": args.epoch_iters,
              "n_samples_grad": list(n_grad), "n_samples_loss": list(n_loss), "results": rows}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")


def _versions():
    out = {}
    for name in ("pyttb", "pygenten"):
        try:
            from importlib.metadata import version
            out[name] = version(name)
        except Exception:
            out[name] = None
    return out


if __name__ == "__main__":
    main()
