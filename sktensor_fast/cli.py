"""Command line: ``python -m sktensor_fast`` / ``sktensor-fast``.

``sktensor-fast fit [FILE] --method cpals --rank R ...`` decomposes a FROSTT ``.tns``/``.tns.gz``
file (or, with no FILE, the embedded ``flights-routes`` data set) and prints each component's
weight and the top entries of every mode, with labels when ``mode-N-*.map`` files are present.
"""
import argparse
import sys
import time
import warnings

import numpy as np

__all__ = ["main", "build_parser", "describe_components"]


def _methods():
    from . import decomposition
    methods = {"cpals": decomposition.CPALS}
    for name, cls in (("cpapr", "CPAPR"), ("gcp", "GCP")):
        if hasattr(decomposition, cls):
            methods[name] = getattr(decomposition, cls)
    return methods


def build_parser():
    p = argparse.ArgumentParser(
        prog="sktensor-fast",
        description="Fast sparse tensor decompositions. `fit` decomposes a FROSTT .tns file, "
                    "or the embedded flights-routes data set when no file is given.")
    sub = p.add_subparsers(dest="command")
    f = sub.add_parser("fit", help="decompose a tensor and print its components")
    f.add_argument("file", nargs="?", default=None,
                   help="FROSTT .tns or .tns.gz file (default: the embedded flights-routes data)")
    f.add_argument("--method", default=None,
                   help="cpals (least squares), cpapr (Poisson), gcp (generalized); default "
                        "cpapr when available, else cpals")
    f.add_argument("--rank", type=int, default=5, help="number of components (default 5)")
    f.add_argument("--solver", default="pdnr", choices=["mu", "pdnr", "pqnr"],
                   help="cpapr's solver (default pdnr: on the embedded data the "
                        "multiplicative update 'mu' lets the rows of two coordinates that "
                        "share their only nonzero vanish together, leaving a model that is "
                        "zero there)")
    f.add_argument("--max-iter", type=int, default=None, help="maximum outer iterations")
    f.add_argument("--tol", type=float, default=None, help="stopping tolerance")
    f.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    f.add_argument("--n-init", type=int, default=1,
                   help="random starts; the best model is kept (default 1)")
    f.add_argument("--device", default="cpu", help="cpu, gpu, opencl or opencl:P:D")
    f.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    f.add_argument("--top", type=int, default=5, help="entries shown per mode (default 5)")
    f.add_argument("--out", default=None, help="save the model to this .npz file")
    f.add_argument("--quiet", action="store_true", help="no progress on stderr")
    sub.add_parser("info", help="show the build configuration and OpenCL devices")
    return p


def describe_components(weights, factors, labels=None, mode_names=None, top=5, file=None):
    """Print every component's weight and the top ``top`` entries of each mode."""
    out = file or sys.stdout
    N = len(factors)
    mode_names = mode_names or [f"mode {n}" for n in range(N)]
    labels = labels or [None] * N
    total = float(np.sum(np.abs(weights))) or 1.0
    for r in np.argsort(-np.abs(weights), kind="stable"):
        print(f"Component {r + 1}: weight {weights[r]:.6g} ({100 * abs(weights[r]) / total:.1f}%)",
              file=out)
        for n in range(N):
            col = factors[n][:, r]
            idx = np.argsort(-np.abs(col), kind="stable")[:top]
            parts = []
            for i in idx:
                name = labels[n][i] if labels[n] is not None and i < len(labels[n]) else str(i + 1)
                parts.append(f"{name} ({col[i]:.3f})")
            print(f"  {mode_names[n]:>10}: " + ", ".join(parts), file=out)


def _cmd_fit(args):
    from . import load_tns, num_threads
    from .datasets import load_flights_routes
    import contextlib

    methods = _methods()
    method = args.method or ("cpapr" if "cpapr" in methods else "cpals")
    if method not in methods:
        raise SystemExit(f"sktensor-fast: unknown method {method!r}; available: "
                         f"{', '.join(sorted(methods))}")
    if args.file is None:
        data = load_flights_routes()
        X, labels, mode_names = data.tensor, data.labels, data.mode_names
        source = "embedded data set flights-routes (nycflights13, CC0)"
    else:
        X, labels = load_tns(args.file, with_labels=True)
        mode_names = None
        source = args.file
    print(f"Tensor: {source}")
    print(f"  shape {X.shape}, {X.nnz} nonzeros, sum {X.sum():.6g}")
    params = {"rank": args.rank, "random_state": args.seed, "device": args.device,
              "n_init": args.n_init, "verbose": 0 if args.quiet else 1}
    if args.max_iter is not None:
        params["max_iter"] = args.max_iter
    if args.tol is not None:
        params["tol"] = args.tol
    if method == "cpapr":
        params["solver"] = args.solver
    est = methods[method](**params)
    ctx = num_threads(args.threads) if args.threads else contextlib.nullcontext()
    t0 = time.perf_counter()
    with ctx, warnings.catch_warnings():
        # a model that is zero at a nonzero is reported in the summary line instead
        warnings.filterwarnings("ignore", message=".*fitted model is zero", category=UserWarning)
        est.fit(X)
    elapsed = time.perf_counter() - t0
    summary = f"{type(est).__name__}(rank={args.rank}) on {args.device}: {est.n_iter_} iterations " \
              f"in {elapsed:.2f}s"
    if hasattr(est, "fit_"):
        summary += f", fit {est.fit_:.4f}"
    if hasattr(est, "log_likelihood_"):
        summary += f", log-likelihood {est.log_likelihood_:.6g}"
        if not np.isfinite(est.log_likelihood_):
            summary += (" (the model is exactly zero at some nonzero of the data: every "
                        "component vanished there; " + ("--solver pdnr, " if method == "cpapr"
                                                       and args.solver != "pdnr" else "")
                        + "more random starts (--n-init 4) or another --seed may find a "
                        "model without this)")
    if hasattr(est, "loss_"):
        summary += f", loss {est.loss_:.6g}"
    print(summary)
    describe_components(est.weights_, est.factors_, labels, mode_names, top=args.top)
    if args.out:
        arrays = {"weights": est.weights_}
        arrays.update({f"factor_{n}": f for n, f in enumerate(est.factors_)})
        np.savez(args.out, **arrays)
        print(f"Model saved to {args.out}")
    return 0


def main(argv=None):
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("fit", "info", "-h", "--help"):
        argv = ["fit"] + argv  # `fit` is the default command
    args = parser.parse_args(argv)
    if args.command == "info":
        from . import show_config
        show_config()
        return 0
    try:
        return _cmd_fit(args)
    except (ValueError, TypeError, OSError) as exc:
        print(f"sktensor-fast: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
