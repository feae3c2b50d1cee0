"""Command line: ``python -m sktensor_fast`` / ``sktensor-fast``.

``sktensor-fast fit [FILE] --method cpapr --rank R ...`` decomposes a FROSTT ``.tns``/``.tns.gz``
file (or, with no FILE, the embedded ``flights-routes`` data set) and prints each component's
weight and the top entries of every mode (:func:`sktensor_fast.describe_components`), with
labels when ``mode-N-*.map`` files are present.  ``--out PATH`` saves the model with its labels
and settings (:func:`sktensor_fast.save_model`; read it back with
:func:`sktensor_fast.load_model`).

Expected failures (a bad file, an unavailable device, a bad option) end with one line on stderr
and exit status 2; ``--debug`` shows the traceback.
"""
import argparse
import inspect
import os
import sys
import time
import warnings

import numpy as np

__all__ = ["main", "build_parser", "describe_components"]


class CliError(Exception):
    """An expected failure, reported in one line."""


def _methods():
    from . import decomposition
    return {"cpals": decomposition.CPALS, "cpapr": decomposition.CPAPR,
            "gcp": decomposition.GCP}


def _default_solver():
    from .decomposition import CPAPR
    return inspect.signature(CPAPR).parameters["solver"].default


def _positive_int(name, minimum=1):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") \
                from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {value}")
        return value
    return parse


def _lower(text):
    return text.lower()


def build_parser():
    from . import __version__
    p = argparse.ArgumentParser(
        prog="sktensor-fast",
        description="Fast sparse tensor decompositions. `fit` decomposes a FROSTT .tns file, "
                    "or the embedded flights-routes data set when no file is given.")
    p.add_argument("--version", action="version", version=f"sktensor-fast {__version__}")
    sub = p.add_subparsers(dest="command")
    f = sub.add_parser("fit", help="decompose a tensor and print its components")
    f.add_argument("file", nargs="?", default=None,
                   help="FROSTT .tns or .tns.gz file (default: the embedded flights-routes data)")
    f.add_argument("--method", default="cpapr", type=_lower, choices=sorted(_methods()),
                   help="cpals (least squares), cpapr (Poisson, the default), gcp "
                        "(generalized); any case")
    f.add_argument("--rank", type=_positive_int("--rank"), default=5,
                   help="number of components (default 5)")
    f.add_argument("--solver", default=None, type=_lower, choices=["mu", "pdnr", "pqnr"],
                   help=f"cpapr's solver (default: CPAPR's, {_default_solver()!r})")
    f.add_argument("--max-iter", type=_positive_int("--max-iter"), default=None,
                   help="maximum outer iterations")
    f.add_argument("--max-time", type=float, default=None,
                   help="stop after this many seconds (each random start)")
    f.add_argument("--tol", type=float, default=None, help="stopping tolerance")
    f.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    f.add_argument("--n-init", type=_positive_int("--n-init"), default=1,
                   help="random starts; the best model is kept (default 1)")
    f.add_argument("--device", default="cpu", help="cpu, gpu, opencl or opencl:P:D")
    f.add_argument("--threads", type=_positive_int("--threads"), default=None,
                   help="CPU threads, >= 1 (default: all cores)")
    f.add_argument("--top", type=_positive_int("--top"), default=5,
                   help="entries shown per mode (default 5)")
    f.add_argument("--out", default=None,
                   help="save the model, its labels and settings to exactly this file "
                        "(.npz format; load it with sktensor_fast.load_model)")
    f.add_argument("--quiet", action="store_true", help="no progress on stderr")
    f.add_argument("--debug", action="store_true",
                   help="show the traceback of an error instead of one line")
    i = sub.add_parser("info", help="show the build configuration and OpenCL devices")
    i.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return p


def describe_components(weights, factors, labels=None, mode_names=None, top=5, file=None):
    """Print every component (see :func:`sktensor_fast.describe_components`)."""
    from .inspection import describe_components as describe
    print(describe((weights, factors), labels=labels, mode_names=mode_names, top=top),
          file=file or sys.stdout)


def _check_out(path):
    """Fail before the fit when ``path`` cannot be written."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        raise CliError(f"--out {path} is a folder; give a file name")
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise CliError(f"--out {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or \
            (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise CliError(f"--out {path}: not writable")
    return path


def _cmd_fit(args):
    from . import load_tns, num_threads, save_model
    from .datasets import load_flights_routes
    from .tensor import _attach_labels
    import contextlib

    methods = _methods()
    if args.solver is not None and args.method != "cpapr":
        raise CliError(f"--solver applies to --method cpapr only (got --method {args.method})")
    out = _check_out(args.out) if args.out else None
    from .backends import get_backend
    get_backend(args.device)              # an unavailable device fails here, before any work
    if args.file is None:
        data = load_flights_routes()
        X = data.tensor
        source = "embedded data set flights-routes (nycflights13, CC0)"
    else:
        if not os.path.exists(args.file):
            raise CliError(f"{args.file}: no such file")
        X, labels = load_tns(args.file, with_labels=True)
        _attach_labels(X, labels, None)
        source = args.file
    print(f"Tensor: {source}")
    print(f"  shape {X.shape}, {X.nnz} nonzeros, sum {X.sum():.6g}")
    params = {"rank": args.rank, "random_state": args.seed, "device": args.device,
              "n_init": args.n_init, "verbose": 0 if args.quiet else 1}
    for key in ("max_iter", "max_time", "tol"):
        if getattr(args, key) is not None:
            params[key] = getattr(args, key)
    if args.method == "cpapr" and args.solver is not None:
        params["solver"] = args.solver
    est = methods[args.method](**params)
    ctx = num_threads(args.threads) if args.threads else contextlib.nullcontext()
    t0 = time.perf_counter()
    with ctx, warnings.catch_warnings():
        # reported in the summary line instead
        warnings.filterwarnings("ignore", message=".*fitted model is zero", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*stopped at max_")
        est.fit(X)
    elapsed = time.perf_counter() - t0
    name = type(est).__name__
    solver = f", solver={est.solver!r}" if hasattr(est, "solver") else ""
    summary = f"{name}(rank={args.rank}{solver}) on {args.device}: {est.n_iter_} " \
              f"{est._iteration_name} in {elapsed:.2f}s"
    summary += ", converged" if est.converged_ else \
        f", NOT converged (stopped at {est.stop_reason_}; raise --max-iter or --max-time)"
    if hasattr(est, "fit_"):
        summary += f", fit {est.fit_:.4f}"
    if hasattr(est, "log_likelihood_"):
        summary += f", log-likelihood {est.log_likelihood_:.6g}"
        if not np.isfinite(est.log_likelihood_):
            summary += " (the model is exactly zero at some nonzero of the data)"
    if hasattr(est, "loss_"):
        summary += f", loss {est.loss_:.6g}"
    print(summary)
    if args.n_init == 1 and args.method != "cpals":
        print("  (one random start: the fit is a local optimum; --n-init 5 keeps the best of "
              "five)")
    from .inspection import describe_components as describe
    print(describe(est, top=args.top))
    if out:
        save_model(est, out)
        print(f"Model saved to {out} (load it with sktensor_fast.load_model)")
    return 0


def main(argv=None):
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("fit", "info", "-h", "--help", "--version"):
        argv = ["fit"] + argv  # `fit` is the default command
    args = parser.parse_args(argv)
    if args.command == "info":
        from . import show_config
        show_config()
        return 0
    try:
        return _cmd_fit(args)
    except Exception as exc:
        from .backends.opencl.backend import NoDeviceError
        expected = (CliError, ValueError, TypeError, OSError, ImportError, NoDeviceError,
                    MemoryError)
        if args.debug or not isinstance(exc, expected):
            raise
        print(f"sktensor-fast: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
