"""Command line: ``python -m sktensor_fast`` / ``sktensor-fast``.

``sktensor-fast fit [FILE] --method cpapr --rank R ...`` decomposes a FROSTT ``.tns``/``.tns.gz``
file or a binary container written by :func:`sktensor_fast.save_tensor` (recognised by its
first bytes, whatever its name), or with no FILE the embedded ``flights-routes`` data set, and
prints why the fit stopped, its objective with its meaning, and each component's weight and the
top entries of every mode (:func:`sktensor_fast.describe_components`), with labels when
``mode-N-*.map`` files are present.  ``sktensor-fast info FILE`` describes a tensor file
without fitting it (shape, nonzeros, density, the nonzeros of every mode, labels, the values);
``sktensor-fast info`` alone shows the build configuration and the OpenCL devices.  ``--out PATH`` saves the model with its labels
and settings (:func:`sktensor_fast.save_model`; read it back with
:func:`sktensor_fast.load_model`); ``--plot PATH`` draws the components
(:func:`sktensor_fast.plotting.plot_components`, needs matplotlib); ``--json PATH`` (``-``:
standard output) writes a summary of the model and the fit.

Progress (iteration, objective, elapsed time) goes to stderr at most once per
``--progress-interval`` seconds, by default when stderr is a terminal only; it comes from
:func:`sktensor_fast.decomposition.fit_callback`.

Expected failures (a bad file, an unavailable device, a bad option, an output that cannot be
written, an output that is the input or another output) end with one line on stderr and exit
status 2, before the fit where they can be detected before it; ``--debug`` shows the traceback.
Warnings are one line each, ``sktensor-fast: warning: ...``.  When standard output is closed
early (``sktensor-fast fit | head -1``) the command stops quietly with status 141, as a Unix
tool killed by ``SIGPIPE``.
"""
import argparse
import contextlib
import inspect
import json
import os
import platform
import stat
import sys
import time
import warnings

import numpy as np

__all__ = ["main", "build_parser", "describe_components", "describe_tensor", "model_summary",
           "ProgressPrinter"]


class CliError(Exception):
    """An expected failure, reported in one line."""


def _methods():
    from . import decomposition
    return {"cpals": decomposition.CPALS, "cpapr": decomposition.CPAPR,
            "gcp": decomposition.GCP}


def _default_rank():
    from .decomposition import CPAPR
    return inspect.signature(CPAPR).parameters["rank"].default


def _default_solver():
    from .decomposition import CPAPR
    return inspect.signature(CPAPR).parameters["solver"].default


#: The largest integer option accepted (ranks, iterations, starts, threads, entries shown):
#: larger values only fail later, in an allocation or a C integer.
MAX_INT_OPTION = 2 ** 31 - 1


def _positive_int(name, minimum=1, maximum=MAX_INT_OPTION):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") \
                from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{name} must be at most {maximum}, got {text}")
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
        description="Fast sparse tensor decompositions. `fit` decomposes a FROSTT .tns file "
                    "or a binary container (sktensor_fast.save_tensor), or the embedded "
                    "flights-routes data set when no file is given; `info FILE` describes a "
                    "tensor file.")
    p.add_argument("--version", action="version", version=f"sktensor-fast {__version__}")
    sub = p.add_subparsers(dest="command")
    f = sub.add_parser("fit", help="decompose a tensor and print its components")
    f.add_argument("file", nargs="?", default=None,
                   help="FROSTT .tns or .tns.gz file, or a binary container written by "
                        "sktensor_fast.save_tensor (default: the embedded flights-routes data)")
    f.add_argument("--method", default="cpapr", type=_lower, choices=sorted(_methods()),
                   help="cpals (least squares), cpapr (Poisson, the default), gcp "
                        "(generalized); any case")
    f.add_argument("--rank", type=_positive_int("--rank"), default=_default_rank(),
                   help=f"number of components (default: the estimators', {_default_rank()})")
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
    i = sub.add_parser("info", help="describe a tensor file (without FILE: the build "
                                    "configuration and OpenCL devices)")
    i.add_argument("file", nargs="?", default=None,
                   help="FROSTT .tns or .tns.gz file, or a binary container written by "
                        "sktensor_fast.save_tensor: its shape, nonzeros, density, the nonzeros "
                        "of every mode, its labels and values, without fitting")
    i.add_argument("--debug", action="store_true",
                   help="show the traceback of an error instead of one line")
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


def _same_file(a, b):
    """Whether the paths ``a`` and ``b`` name one file (the same resolved path, or, where both
    exist, the same device and inode: symbolic and hard links)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _label_files(path):
    """The ``mode-N-*.map`` label files read with the tensor file ``path``."""
    import glob
    folder = os.path.dirname(os.path.abspath(path))
    return sorted(glob.glob(os.path.join(glob.escape(folder), "mode-*-*.map")))


def _check_distinct(args):
    """Refuse, before any work, an output file that is an input (the tensor file or one of
    its label files) or another output: writing it would destroy the data or the other
    result.  Standard output (``--json -``) is no file."""
    inputs = []
    if args.file is not None and os.path.exists(args.file):
        inputs = [("the input file", args.file)] + [("the label file", m)
                                                    for m in _label_files(args.file)]
    outputs = [(opt, path) for opt, path in (("--out", args.out), ("--plot", args.plot),
                                             ("--json", args.json))
               if path is not None and path != "-"]
    for i, (opt, path) in enumerate(outputs):
        for what, source in inputs:
            if _same_file(path, source):
                raise CliError(f"{opt} {path} is {what} {source}: writing it would destroy "
                               f"the data; choose another file name")
        for other, other_path in outputs[:i]:
            if _same_file(path, other_path):
                raise CliError(f"{opt} {path} and {other} {other_path} are the same file: "
                               f"one would overwrite the other; give each its own file")


def _read_tensor(path, purpose):
    """``(X, kind)``: the tensor of the file ``path`` with the labels of its ``mode-N-*.map``
    files, read as a binary container when it starts with the container's signature and as
    FROSTT text otherwise; ``kind`` says which.  ``purpose`` ("fit", "describe") words the
    refusal of an empty file."""
    from .binary import MAGIC, load_tensor
    from .io import load_tns
    from .tensor import _attach_labels
    if not os.path.lexists(path):
        raise CliError(f"{path}: no such file")
    try:
        info = os.stat(path)
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise CliError(f"{path} is a folder, not a tensor file: give a .tns, .tns.gz or "
                       f"binary container file")
    container = False
    if stat.S_ISREG(info.st_mode):               # a pipe or device is read once, as text
        try:
            with open(path, "rb") as fh:
                container = fh.read(len(MAGIC)) == MAGIC
        except OSError as exc:
            raise CliError(f"{path}: cannot read it: {exc.strerror}") from None
    if container:
        X, labels = load_tensor(path, with_labels=True)
        kind = "binary container of sktensor_fast.save_tensor"
    else:
        try:
            X, labels = load_tns(path, with_labels=True)
        except ValueError as exc:
            if "holds no nonzeros" not in str(exc):
                raise
            raise CliError(f"{path} holds no nonzeros (no data line), so it records no shape: "
                           f"there is nothing to {purpose}") from None
        kind = "FROSTT text"
    _attach_labels(X, labels, getattr(X, "mode_names", None))
    return X, kind


def _objective_words(est):
    """``(name, value, meaning)`` of the fitted estimator's objective, the meaning in words
    that say how to read its value (and its sign)."""
    if hasattr(est, "loss_"):
        loss = est.loss if isinstance(est.loss, str) else type(est.loss).__name__
        where = "observed entry" if getattr(est, "mask", None) is not None else "entry"
        stochastic = getattr(est, "solver", "lbfgsb") != "lbfgsb"
        sampled = ", estimated from a fixed sample of entries" if stochastic else ""
        if loss == "gaussian":
            meaning = f"the sum of squared errors over every {where}{sampled}; lower is better"
        else:
            meaning = (f"the {loss} loss summed over every {where}{sampled}: a negative "
                       f"log-likelihood up to a constant of the data, so its sign means "
                       f"nothing; lower is better")
        return "loss", est.loss_, meaning
    if hasattr(est, "log_likelihood_"):
        meaning = ("the Poisson log-likelihood sum(x log m) - sum(m), without the data's "
                   "constant -sum(log x!), so its sign means nothing; greater is better")
        if not np.isfinite(est.log_likelihood_):
            meaning += "; -inf: the model is exactly zero at some nonzero of the data"
        return "log-likelihood", est.log_likelihood_, meaning
    return "fit", est.fit_, "1 - |X - M| / |X| (Frobenius norms): 1 is a perfect fit"


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
        "stop_description": est._stop_words(),
        "objective_meaning": _objective_words(est)[2],
        "objective_history": est.loss_history_,
        "timing_s": timing,
        "versions": _versions(),
    }
    return _jsonable(doc)


def _cmd_fit(args):
    from . import get_num_threads, num_threads, save_model
    from .datasets import load_flights_routes
    from .decomposition import fit_callback

    methods = _methods()
    # everything that can be refused is refused here, before the data are read
    _check_method_options(args)
    _check_distinct(args)
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
        X, kind = _read_tensor(args.file, "fit")
        source = args.file if kind == "FROSTT text" else f"{args.file} ({kind})"
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
    objective, value, meaning = _objective_words(est)
    summary += f", {objective} {value:.4f}" if objective == "fit" else \
        f", {objective} {value:.6g}"
    say(summary)
    say(f"  {'converged' if est.converged_ else 'stopped'} "
        f"(stop_reason_={est.stop_reason_!r}): {est._stop_words()}")
    say(f"  {objective}: {meaning}")
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


def _short_list(names, n=5):
    names = [str(x) for x in names]
    return ", ".join(names[:n]) + (f", ... ({len(names)} in all)" if len(names) > n else "")


def describe_tensor(X, source, kind=None):
    """What ``sktensor-fast info FILE`` prints: the shape, nonzeros, density and dtype of
    ``X``, every mode's length, how many of its indices hold a nonzero and how many nonzeros
    they hold, its labels, and the range, sum and integrality of the values."""
    lines = [f"Tensor: {source}" + (f" ({kind})" if kind else "")]
    lines.append(f"  shape {tuple(X.shape)}, {X.nnz} nonzeros, density {X.density:.3g}, "
                 f"dtype {X.dtype}")
    labels = getattr(X, "labels", None) or [None] * X.ndim
    names = getattr(X, "mode_names", None) or [None] * X.ndim
    for k in range(X.ndim):
        size = X.shape[k]
        counts = np.bincount(np.asarray(X.subs[:, k]), minlength=size) if X.nnz \
            else np.zeros(size, np.int64)
        used = int(np.count_nonzero(counts))
        head = f"  mode {k}" + (f" ({names[k]})" if names[k] else "") + f": length {size}"
        line = f"{head}, {used} with nonzeros"
        if used:
            line += (f" (nonzeros per index: min {int(counts[counts > 0].min())}, "
                     f"max {int(counts.max())})")
        lines.append(line)
        lines.append("    labels: " + (_short_list(labels[k]) if labels[k] is not None
                                       else "none (indices are shown 1-based)"))
    if X.nnz:
        vals = np.asarray(X.vals)
        integral = bool(np.all(vals == np.round(vals)))
        what = "all integers" if integral else "not all integers"
        if integral and vals.min() >= 0:
            what += " (counts: CPAPR and GCP's count losses apply)"
        lines.append(f"  values: min {vals.min():.6g}, max {vals.max():.6g}, sum "
                     f"{float(X.sum()):.6g}; {what}")
    else:
        lines.append("  values: none (every entry is zero)")
    return "\n".join(lines)


def _cmd_info(args):
    if args.file is None:
        from . import show_config
        show_config()
        return 0
    X, kind = _read_tensor(args.file, "describe")
    print(describe_tensor(X, args.file, kind))
    return 0


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Warnings of the command line: one line each, on stderr."""
    print(f"sktensor-fast: warning: {message}", file=sys.stderr if file is None else file)


def _stdout_closed():
    """Standard output was closed by its reader (``| head``): send what is left to
    /dev/null, so that nothing is written at exit, and return the status of a Unix tool
    stopped by ``SIGPIPE`` (128 + 13)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # pragma: no cover - stdout not a file
        pass
    return 141


def main(argv=None):
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            status = _main(argv)
            sys.stdout.flush()          # a closed pipe is noticed here, not at exit
            return status
    except BrokenPipeError:
        return _stdout_closed()


def _main(argv):
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("fit", "info", "-h", "--help", "--version"):
        argv = ["fit"] + argv  # `fit` is the default command
    args = parser.parse_args(argv)
    try:
        return _cmd_info(args) if args.command == "info" else _cmd_fit(args)
    except BrokenPipeError:
        raise
    except Exception as exc:
        from .backends.opencl.device import NoDeviceError
        expected = (CliError, ValueError, TypeError, OSError, ImportError, NoDeviceError,
                    MemoryError)
        if args.debug or not isinstance(exc, expected):
            raise
        print(f"sktensor-fast: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
