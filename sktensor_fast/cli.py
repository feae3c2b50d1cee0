"""Command line: ``python -m sktensor_fast`` / ``sktensor-fast``.

``sktensor-fast fit [FILE] --method cpapr --rank R ...`` decomposes a FROSTT ``.tns``/``.tns.gz``
file (or, with no FILE, the embedded ``flights-routes`` data set) and prints each component's
weight and the top entries of every mode (:func:`sktensor_fast.describe_components`), with
labels when ``mode-N-*.map`` files are present.  ``--out PATH`` saves the model with its labels
and settings (:func:`sktensor_fast.save_model`; read it back with
:func:`sktensor_fast.load_model`); ``--plot PATH`` draws the components
(:func:`sktensor_fast.plotting.plot_components`, needs matplotlib); ``--json PATH`` (``-``:
standard output) writes a summary of the model and the fit.

Progress (iteration, objective, elapsed time) goes to stderr at most once per
``--progress-interval`` seconds, by default when stderr is a terminal only; it comes from
:func:`sktensor_fast.decomposition.fit_callback`.

Expected failures (a bad file, an unavailable device, a bad option, an output that cannot be
written) end with one line on stderr and exit status 2, before the fit where they can be
detected before it; ``--debug`` shows the traceback.
"""
import argparse
import contextlib
import inspect
import json
import os
import platform
import sys
import time
import warnings

import numpy as np

__all__ = ["main", "build_parser", "describe_components", "model_summary", "ProgressPrinter"]


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


def _nonnegative_float(name):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") \
                from None
        if not value >= 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number >= 0, got "
                                             f"{text!r}")
        return value
    return parse


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
    f.add_argument("--loss", default=None,
                   help="gcp's loss: gaussian (its default), poisson, bernoulli_logit, gamma, "
                        "... (see sktensor_fast.decomposition.losses)")
    f.add_argument("--loss-param", type=float, default=None,
                   help="the loss's parameter (negative_binomial, huber, beta)")
    f.add_argument("--format", default=None, type=_lower, choices=["auto", "coo", "alto"],
                   help="storage of the tensor for the CPU kernels (default auto); "
                        "--device cpu only")
    f.add_argument("--device", default="cpu", help="cpu, gpu, opencl or opencl:P:D")
    f.add_argument("--threads", type=_positive_int("--threads"), default=None,
                   help="CPU threads, >= 1 (default: all cores)")
    f.add_argument("--top", type=_positive_int("--top"), default=5,
                   help="entries shown per mode, printed, drawn and in --json (default 5)")
    f.add_argument("--out", default=None,
                   help="save the model, its labels and settings to exactly this file "
                        "(.npz format; load it with sktensor_fast.load_model)")
    f.add_argument("--plot", default=None, metavar="PATH",
                   help="draw the components to this image (.png, .pdf, .svg, ...): one row "
                        "per component, one panel per mode; needs matplotlib")
    f.add_argument("--json", default=None, metavar="PATH",
                   help="write a summary of the model and the fit as JSON to this file; '-' "
                        "writes it to stdout (the text report then goes to stderr)")
    f.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show progress (iteration, objective, elapsed) on stderr; default: "
                        "when stderr is a terminal")
    f.add_argument("--progress-interval", type=_nonnegative_float("--progress-interval"),
                   default=1.0, metavar="SECONDS",
                   help="at most one progress line per this many seconds (default 1; 0: "
                        "every iteration)")
    f.add_argument("--verbose", action="store_true",
                   help="the estimator's own log on stderr, and progress")
    f.add_argument("--quiet", action="store_true",
                   help="no progress and no log on stderr (as --no-progress)")
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


def _check_writable(path, option="--out"):
    """Fail before the fit when ``path`` cannot be written (``option`` names it)."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        raise CliError(f"{option} {path} is a folder; give a file name")
    folder = os.path.dirname(path)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise CliError(f"{option} {path}: {folder} is a file, not a folder")
    if not os.path.isdir(folder):
        raise CliError(f"{option} {path}: the folder {folder} does not exist")
    unwritable = CliError(f"{option} {path}: not writable (no permission to write there, or a "
                          f"read-only file system); choose another folder")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise unwritable
        return path
    # permissions alone do not tell (a read-only file system, ACLs): create a file there
    import tempfile
    try:
        fd, probe = tempfile.mkstemp(prefix=".sktensor-fast-", dir=folder)
    except OSError:
        raise unwritable from None
    os.close(fd)
    os.unlink(probe)
    return path


def _check_out(path):
    return _check_writable(path, "--out")


PLOT_EXTRA = 'pip install "sktensor_fast[plot]"'


def _check_plot(path):
    """The ``--plot`` file can be written and drawn: matplotlib is there, the folder is
    writable and matplotlib knows the format of the file's extension."""
    path = _check_writable(path, "--plot")
    try:
        import matplotlib
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError as exc:
        raise CliError(f"--plot needs matplotlib, which is not installed: {PLOT_EXTRA} "
                       f"(or pip install matplotlib)") from exc
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    formats = FigureCanvasBase.get_supported_filetypes()
    if ext not in formats:
        what = f"its extension .{ext}" if ext else "it has no extension, which"
        raise CliError(f"--plot {path}: {what} is not an image format matplotlib writes; "
                       f"use one of {', '.join('.' + f for f in sorted(formats))}")
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("agg")                  # files only: never open a window
    return path


def _check_method_options(args):
    """Options that apply to some methods or devices only, refused elsewhere."""
    if args.solver is not None and args.method != "cpapr":
        raise CliError(f"--solver applies to --method cpapr only (got --method {args.method})")
    if args.method != "gcp":
        for opt, val in (("--loss", args.loss), ("--loss-param", args.loss_param)):
            if val is not None:
                fixed = "least squares" if args.method == "cpals" else "the Poisson loss"
                raise CliError(f"{opt} applies to --method gcp only: {args.method} minimises "
                               f"{fixed} (use --method gcp --loss {args.loss or 'NAME'})")
    elif args.loss is not None or args.loss_param is not None:
        from .decomposition.losses import get_loss
        try:
            get_loss(args.loss or "gaussian", args.loss_param)
        except (TypeError, ValueError) as exc:
            raise CliError(f"--loss {args.loss or 'gaussian'}"
                           + (f" --loss-param {args.loss_param:g}"
                              if args.loss_param is not None else "") + f": {exc}") from None
    if args.format is not None:
        from .backends import parse_device
        if parse_device(args.device)[0] != "cpu":
            raise CliError(f"--format chooses how the CPU kernels store the tensor; the OpenCL "
                           f"kernels have their own layouts (see SKTENSOR_FAST_OCL_LAYOUT): "
                           f"drop --format or use --device cpu (got --device {args.device})")


class ProgressPrinter:
    """The ``--progress`` line: a :func:`~sktensor_fast.decomposition.fit_callback` that
    writes at most one line per ``interval`` seconds (the first one ``interval`` seconds into
    the fit, so that quick fits print nothing; ``interval=0``: every iteration)."""

    def __init__(self, stream, interval=1.0, clock=time.monotonic):
        self.stream = stream
        self.interval = float(interval)
        self.clock = clock
        self.last = clock()
        self.lines = 0

    def __call__(self, p):
        now = self.clock()
        if self.interval > 0 and now - self.last < self.interval:
            return
        self.last = now
        start = f" (start {p.start}/{p.n_init})" if p.n_init > 1 else ""
        print(f"[{p.estimator}{start}] iteration {p.iteration:5d}  {p.objective_name} "
              f"{p.objective:.8g}  {p.elapsed:.1f}s", file=self.stream, flush=True)
        self.lines += 1


def _show_progress(args):
    if args.quiet:
        return False
    if args.progress is not None:
        return args.progress
    if args.verbose:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _jsonable(value):
    """A JSON value for ``value`` (non-finite numbers become None: strict JSON has none)."""
    if isinstance(value, (bool, np.bool_)) or value is None or isinstance(value, str):
        return bool(value) if isinstance(value, np.bool_) else value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in np.asarray(value, dtype=object).tolist()] \
            if isinstance(value, np.ndarray) else [_jsonable(v) for v in value]
    return repr(value)


def _versions():
    import scipy
    import sklearn
    from . import __version__
    out = {"sktensor_fast": __version__, "python": platform.python_version(),
           "numpy": np.__version__, "scipy": scipy.__version__, "scikit-learn": sklearn.__version__}
    for mod in ("pyopencl", "matplotlib"):
        if mod in sys.modules:
            out[mod] = getattr(sys.modules[mod], "__version__", None)
    return out


def model_summary(est, X, source, args, timing, threads):
    """The ``--json`` document: settings, data, components, outcome, timing and versions."""
    from .inspection import component_entries
    mode_names, components = component_entries(est, top=args.top)
    objective = {"name": None, "value": None, "greater_is_better": None}
    for attr, name in (("fit_", "fit"), ("log_likelihood_", "log-likelihood"),
                       ("loss_", "loss")):
        if hasattr(est, attr):
            objective = {"name": name, "value": getattr(est, attr),
                         "greater_is_better": attr != "loss_"}
            break
    doc = {
        "method": args.method,
        "estimator": type(est).__name__,
        "settings": est.get_params(),
        "threads": threads,
        "tensor": {"source": source, "file": None if args.file is None
                   else os.path.abspath(args.file),
                   "shape": list(X.shape), "nnz": X.nnz, "sum": float(X.sum()),
                   "dtype": str(X.dtype), "mode_names": mode_names},
        "rank": est.rank_,
        "weights": est.weights_,
        "components": components,
        "objective": objective,
        "fit": getattr(est, "fit_", None),
        "log_likelihood": getattr(est, "log_likelihood_", None),
        "loss": getattr(est, "loss_", None),
        "n_iter": est.n_iter_,
        "iteration_name": est._iteration_name,
        "converged": est.converged_,
        "stop_reason": est.stop_reason_,
        "objective_history": est.loss_history_,
        "timing_s": timing,
        "versions": _versions(),
    }
    return _jsonable(doc)


def _cmd_fit(args):
    from . import get_num_threads, load_tns, num_threads, save_model
    from .datasets import load_flights_routes
    from .decomposition import fit_callback
    from .tensor import _attach_labels

    methods = _methods()
    # everything that can be refused is refused here, before the data are read
    _check_method_options(args)
    out = _check_out(args.out) if args.out else None
    plot = _check_plot(args.plot) if args.plot else None
    to_stdout = args.json == "-"
    json_path = None if args.json is None or to_stdout else _check_writable(args.json, "--json")
    from .backends import get_backend
    get_backend(args.device)              # an unavailable device fails here, before any work
    # with --json -, standard output holds the JSON document only
    report = sys.stderr if to_stdout else sys.stdout

    def say(*a):
        print(*a, file=report)

    t_load = time.perf_counter()
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
    t_load = time.perf_counter() - t_load
    say(f"Tensor: {source}")
    say(f"  shape {X.shape}, {X.nnz} nonzeros, sum {X.sum():.6g}")
    params = {"rank": args.rank, "random_state": args.seed, "device": args.device,
              "n_init": args.n_init, "verbose": 1 if args.verbose and not args.quiet else 0}
    for key in ("max_iter", "max_time", "tol", "format"):
        if getattr(args, key) is not None:
            params[key] = getattr(args, key)
    if args.method == "cpapr" and args.solver is not None:
        params["solver"] = args.solver
    if args.method == "gcp":
        if args.loss is not None:
            params["loss"] = args.loss
        if args.loss_param is not None:
            params["loss_param"] = args.loss_param
    est = methods[args.method](**params)
    ctx = num_threads(args.threads) if args.threads else contextlib.nullcontext()
    progress = ProgressPrinter(sys.stderr, args.progress_interval) \
        if _show_progress(args) else None
    t0 = time.perf_counter()
    with ctx, warnings.catch_warnings(), fit_callback(progress):
        # reported in the summary line instead
        warnings.filterwarnings("ignore", message=".*fitted model is zero", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*stopped at max_")
        threads = get_num_threads()
        est.fit(X)
    elapsed = time.perf_counter() - t0
    name = type(est).__name__
    solver = f", solver={est.solver!r}" if hasattr(est, "solver") else ""
    loss = f", loss={est.loss!r}" if args.method == "gcp" else ""
    summary = f"{name}(rank={args.rank}{solver}{loss}) on {args.device}: {est.n_iter_} " \
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
    say(summary)
    if args.n_init == 1 and args.method != "cpals":
        say("  (one random start: the fit is a local optimum; --n-init 5 keeps the best of "
            "five)")
    from .inspection import describe_components as describe
    say(describe(est, top=args.top))
    if out:
        save_model(est, out)
        say(f"Model saved to {out} (load it with sktensor_fast.load_model)")
    if plot:
        from .plotting import plot_components
        fig = plot_components(est, top=args.top)
        fig.savefig(plot, dpi=110)
        import matplotlib.pyplot as plt
        plt.close(fig)
        say(f"Components drawn to {plot}")
    if args.json is not None:
        doc = model_summary(est, X, source, args,
                            {"load": t_load, "fit": elapsed}, threads)
        text = json.dumps(doc, indent=1, allow_nan=False)
        if to_stdout:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        else:
            with open(json_path, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
            say(f"Summary written to {json_path}")
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
