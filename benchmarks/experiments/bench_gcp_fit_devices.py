"""A whole GCP fit (Poisson loss, Adam, the default samples) on a GPU and on the host's cores.

    python benchmarks/experiments/bench_gcp_fit_devices.py --nnz 76879419 --device gpu

The synthetic NELL-2-shaped tensor of ``benchmarks/synth.py`` (Zipf-skewed coordinates), rank
``--rank``, ``--epochs`` epochs of GCP's default ``epoch_iters`` steps with ``tol=0`` and the
same seed on every device: one fit on ``--device`` and one on the CPU with every host thread,
each after a fit of one epoch that builds what a first fit builds (the programs, the prepared
tensor).  Prints the seconds of each fit, their ratio and each fit's last loss estimate.
"""
import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.synth import synthetic_tensor  # noqa: E402
from sktensor_fast import GCP, get_num_threads  # noqa: E402


def fit(X, device, rank, epochs):
    est = GCP(rank, loss="poisson", max_iter=epochs, tol=0, random_state=0, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        est.fit(X)
    return time.perf_counter() - t, float(est.loss_history_[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nnz", type=float, default=2e6)
    ap.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
    print(f"shape {X.shape}, {X.nnz} nonzeros, rank {args.rank}, {args.epochs} epochs, "
          f"{get_num_threads()} host threads")
    res = {}
    for device in (args.device, "cpu"):
        fit(X, device, args.rank, 1)
        res[device] = fit(X, device, args.rank, args.epochs)
        print(f"  {device:8s} {res[device][0]:8.3f} s   last loss estimate {res[device][1]:.6g}")
    print(f"  cpu / {args.device}: {res['cpu'][0] / res[args.device][0]:.1f}x")
    if args.out:
        from sktensor_fast.backends import get_backend
        dev = get_backend(args.device).info().get("device", args.device)
        with open(args.out, "w") as fh:
            json.dump({"shape": list(X.shape), "nnz": int(X.nnz), "rank": args.rank,
                       "epochs": args.epochs, "host_threads": get_num_threads(),
                       "device": dev,
                       "fits": {k: {"seconds": v[0], "last_loss_estimate": v[1]}
                                for k, v in res.items()}}, fh, indent=1)
    return res


if __name__ == "__main__":
    main()
