"""The sktensor_fast benchmark suite: STREAM, memory-bound kernels, whole fits, scaling.

    python -m benchmarks --quick --out bench_out          # a few minutes on 2 cores
    python -m benchmarks --full --threads 1 2 4 8 16      # FROSTT-sized tensors, as memory allows
    python -m benchmarks --tiny --out /tmp/b              # seconds (the test suite runs this)
    python -m benchmarks --quick --device opencl          # also the first OpenCL device (PoCL)
    python benchmarks/run.py --quick --device gpu --sections stream kernels

The method follows the Kokkos portability study of sparse tensor kernels: measure STREAM on the
machine, then report the memory-bound kernels (MTTKRP, CP-APR's Φ) as effective bandwidth under
a stated byte model (``benchmarks/byte_models.py``) and as a fraction of STREAM triad on the same
device in the same run, then whole decompositions against the peer libraries.

Sections
--------
stream
    copy / scale / add / triad (Cython + OpenMP at every ``--threads`` count; OpenCL on every
    ``--device``), arrays of ``--stream-size`` float64 elements (default: at least 4x the
    last-level cache), best of the rounds after the first.
kernels
    MTTKRP and Φ of every mode, for every storage format (``sktensor_fast.backends.FORMATS``) on
    the CPU and the device layout of every OpenCL device, on synthetic tensors with the shapes
    of FROSTT's Uber, NIPS, Chicago and NELL-2 (nonzeros capped for the run, Zipf(1.2)-skewed
    coordinates) and on the real tensors of ``../shared/data`` (skipped when absent).  Time per
    mode (best of ``--repeat``), GB/s under the byte model, fraction of triad, and the largest
    relative difference from the first CPU format's result.
fits
    CP-ALS (sktensor_fast, pyttb ``cp_als``, TensorLy ``parafac`` on the densified tensor when
    it is small, pygenten ``cp_als``), CP-APR MU (sktensor_fast, pyttb ``cp_apr``), GCP with
    the Poisson loss by L-BFGS-B (small dense tensors) and by Adam (sktensor_fast, pyttb
    ``gcp_opt``): same tensor, initial guess, rank, iterations and threads; time per
    iteration and the final fit / log-likelihood / loss of every library, all evaluated by the
    same exact formula (``benchmarks/peers.py``).  Libraries that are not installed are
    skipped with a note.
scaling
    MTTKRP and Φ (all modes) against the number of nonzeros (NELL-2's shape) and against the
    number of threads, on log-log axes.
contention (only when asked for: ``--sections contention``)
    Whole fits (CP-ALS, CP-APR MU, GCP Adam) in fresh processes with one thread and with the
    default thread count (or ``--threads``), on a quiet machine and with ``--busy N`` busy
    processes started by the benchmark (default: one per core); see
    ``benchmarks/contention.py``.
e2e
    File to model on a NELL-2-shaped tensor (``--max-nnz`` nonzeros; ``benchmarks/e2e.py``):
    construction from unsorted arrays, ``save_tns``, ``load_tns`` (parse + sorted tensor, peak
    memory), the binary container, and per device the prepare and the fits of CP-APR and CP-ALS
    with the kernel time inside them; references from the same run (NumPy's stable argsort,
    pandas' ``read_csv``).

Output: one table per section on stdout (Markdown), ``OUT/benchmarks.json`` (machine, CPU,
threads, devices, versions, date and every section) and PNG plots in ``OUT``.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # python benchmarks/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sktensor_fast  # noqa: E402
from sktensor_fast import SparseTensor, load_tns, num_threads  # noqa: E402
from sktensor_fast.backends import get_backend, parse_device  # noqa: E402
from sktensor_fast.backends import FORMATS  # noqa: E402
from benchmarks import contention  # noqa: E402
from benchmarks import e2e as e2e_mod  # noqa: E402
from benchmarks import peers  # noqa: E402
from benchmarks import stream as stream_mod  # noqa: E402
from benchmarks.byte_models import genten_mttkrp_bytes, mttkrp_bytes, phi_bytes  # noqa: E402
from benchmarks.synth import FROSTT, synthetic_tensor  # noqa: E402

__all__ = ["main", "PRESETS", "DATA_DIR"]

#: real count tensors next to the repository (each folder holds ``tensor.tns.gz``)
DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"

#: FROSTT shapes used by the kernels section, in this order (NELL-2 last: scaling reuses it)
KERNEL_TENSORS = ("uber", "nips", "chicago", "nell2")

#: bytes of memory per nonzero the kernels and scaling sections may need at their peak
#: (generating a synthetic tensor, its coordinates, values, one format and a subsample)
BYTES_PER_NNZ = 160

MB = 2 ** 20

PRESETS = {
    "tiny": dict(stream_n=1 << 16, stream_trials=3, kernel_nnz=2000, real_max_gz=100_000,
                 repeat=1, rank=8, fit_rank=4, fit_tensors=("synthetic-tiny",), als_iters=3,
                 apr_iters=2, apr_inner=2, lbfgsb_iters=3, adam_epochs=2, adam_epoch_iters=5,
                 tensorly_max=2e5, gcp_dense_max=2e4, genten=False, fit_threads="min",
                 scaling_nnz=(500, 1000, 2000)),
    "quick": dict(stream_n=None, stream_trials=5, kernel_nnz=1_000_000, real_max_gz=None,
                  repeat=2, rank=16, fit_rank=10, fit_tensors=("flights-routes", "synthetic-small"),
                  als_iters=10, apr_iters=5, apr_inner=10, lbfgsb_iters=10, adam_epochs=3,
                  adam_epoch_iters=50, tensorly_max=1e6, gcp_dense_max=3e4, genten=True,
                  fit_threads="all",
                  scaling_nnz=(125_000, 250_000, 500_000, 1_000_000)),
    "full": dict(stream_n=None, stream_trials=10, kernel_nnz=None, real_max_gz=None,
                 repeat=5, rank=16, fit_rank=16,
                 fit_tensors=("flights-routes", "synthetic-small",
                              "flights-carrier-dest-date-hour", "rails-commits", "nell2-1m"),
                 als_iters=20, apr_iters=10, apr_inner=10, lbfgsb_iters=20, adam_epochs=5,
                 adam_epoch_iters=200, tensorly_max=2e7, gcp_dense_max=2e5, genten=True,
                 fit_threads="all",
                 scaling_nnz=None),
}

#: small fit tensors that are not files: (shape, nnz)
SYNTHETIC_FITS = {"synthetic-tiny": ((12, 10, 8), 300), "synthetic-small": ((40, 30, 20), 4000),
                  "nell2-1m": (FROSTT["nell2"][0], 1_000_000)}


# ====================================================================== machine
def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def cpu_model():
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def meminfo():
    out = {}
    for line in _read("/proc/meminfo").splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def last_level_cache_bytes():
    """Size of the largest data/unified cache of CPU 0 (Linux sysfs), or None."""
    best = None
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in sorted(base.glob("index*")) if base.is_dir() else []:
        kind = _read(idx / "type").strip()
        size = _read(idx / "size").strip()
        if kind == "Instruction" or not size:
            continue
        mult = {"K": 1024, "M": MB, "G": 2 ** 30}.get(size[-1], 1)
        val = int(size.rstrip("KMG")) * mult
        best = val if best is None else max(best, val)
    return best


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def versions():
    from importlib import metadata
    out = {"python": sys.version.split()[0], "sktensor_fast": sktensor_fast.__version__}
    for dist in ("numpy", "scipy", "scikit-learn", "Cython", "pyttb", "tensorly", "pygenten",
                 "pyopencl", "pocl-binary-distribution", "matplotlib", "sparse", "threadpoolctl"):
        try:
            out[dist] = metadata.version(dist)
        except Exception:
            out[dist] = None
    return out


def git_commit():
    root = Path(__file__).resolve().parents[1]
    try:
        res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return res.stdout.strip() + ("+modified" if dirty else "") if res.returncode == 0 else None
    except Exception:
        return None


def machine_info(threads, devices):
    mem = meminfo()
    cfg = sktensor_fast.get_config()
    return {"hostname": platform.node(), "cpu": cpu_model(), "logical_cpus": os.cpu_count(),
            "cores_available": cores(), "last_level_cache_bytes": last_level_cache_bytes(),
            "memory_total_bytes": mem.get("MemTotal"),
            "memory_available_bytes": mem.get("MemAvailable"),
            "platform": platform.platform(), "load_average_start": list(os.getloadavg()),
            "threads": list(threads), "openmp": cfg.get("openmp"), "formats": cfg.get("formats"),
            "alto_decoder": cfg.get("alto_decoder"), "devices": devices,
            "opencl_devices_visible": cfg.get("opencl_devices"), "versions": versions(),
            "git_commit": git_commit()}


# ====================================================================== helpers
def best_time(fn, repeat, finish=None, warmup=False):
    """(best seconds of ``repeat`` calls, result of the last call)."""
    out = None
    if warmup:
        fn()
        if finish:
            finish()
    best = np.inf
    for _ in range(max(1, repeat)):
        t = time.perf_counter()
        out = fn()
        if finish:
            finish()
        best = min(best, time.perf_counter() - t)
    return best, out


def md_table(headers, rows):
    """A Markdown table as a string."""
    cells = [[str(c) for c in r] for r in rows]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in cells]
    return "\n".join(lines)


def fmt_num(x, digits=3):
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "–" if x is None else str(x)
    if isinstance(x, (int, np.integer)):
        return f"{x:,}"
    ax = abs(x)
    if ax != 0 and (ax >= 1e6 or ax < 1e-3):
        return f"{x:.{digits}e}"
    return f"{x:.{digits}g}" if ax < 1000 else f"{x:,.1f}"


class Synth:
    """Synthetic tensors, keeping the last one (the scaling section reuses NELL-2's)."""

    def __init__(self):
        self.key = None
        self.X = None

    def get(self, shape, nnz, seed=0):
        key = (tuple(shape), int(nnz), seed)
        if key != self.key:
            self.X = None
            self.X = synthetic_tensor(tuple(shape), int(nnz), seed=seed)
            self.key = key
        return self.X


def subsample(X, nnz, seed=1):
    """A random subset of ``nnz`` nonzeros of X (same shape, coordinates stay sorted)."""
    if nnz >= X.nnz:
        return X
    keep = np.sort(np.random.default_rng(seed).choice(X.nnz, size=int(nnz), replace=False))
    return SparseTensor(X.subs[keep], X.vals[keep], X.shape, copy=False)


def memory_cap_nnz():
    """Nonzeros the kernel / scaling sections can afford (40 % of the available memory)."""
    avail = meminfo().get("MemAvailable", 4 * 2 ** 30)
    return int(0.4 * avail / BYTES_PER_NNZ)


def cpu_formats():
    return [f for f in FORMATS if f != "auto"]


def device_layouts(devices):
    """(device, format) pairs the kernels run on: every CPU format, one layout per device."""
    pairs = [("cpu", f) for f in cpu_formats()]
    pairs += [(d["device"], "device") for d in devices if d["device"] != "cpu" and d.get("ok")]
    return pairs


def layout_bytes(T, mode):
    """Byte-model parameters of a prepared tensor for ``mode``, and a description."""
    name = getattr(T, "name", None)
    if name == "alto":
        words = T.lin.shape[1] if T.lin.ndim == 2 else 1
        return (dict(idx_bytes=8, val_bytes=T.sorted_vals.itemsize, perm_bytes=0,
                     index_bytes=T.lin.itemsize * words),
                f"ALTO: {T.lin.itemsize * words}-byte linear index + value, no permutation")
    if name == "coo":
        perm = T.perms[mode]
        return (dict(idx_bytes=T.subs.itemsize, val_bytes=T.vals.itemsize,
                     perm_bytes=perm.itemsize if perm.size else 0),
                f"COO: {T.ndim} x {T.subs.itemsize}-byte coordinates + value"
                + (f", {perm.itemsize}-byte permutation entry" if perm.size else
                   " (storage order, no permutation)"))
    if hasattr(T, "idx_dtype"):   # OpenCL backend: one mode-sorted copy per mode
        ib = np.dtype(T.idx_dtype).itemsize
        return (dict(idx_bytes=ib, val_bytes=np.dtype(T.dtype).itemsize, perm_bytes=0),
                f"OpenCL mode-sorted copy: {T.ndim} x {ib}-byte coordinates + value")
    return dict(idx_bytes=8, val_bytes=8), "unknown layout, counted as COO"


def _prepare(be, X, device, fmt):
    t = time.perf_counter()
    T = be.prepare(X, fmt if device == "cpu" else "auto")
    if device != "cpu":
        be.queue.finish()
    return T, time.perf_counter() - t


def time_modes(be, device, T, X, factors, threads, repeat, kernels=("mttkrp", "phi")):
    """{kernel: [(seconds, host result) per mode]} for a prepared tensor."""
    R = factors[0].shape[1]
    if device == "cpu":
        facs = factors
        outs = [np.empty((s, R), dtype=X.dtype) for s in X.shape]
        finish, warm = None, False
    else:
        facs = [be.asarray(f) for f in factors]
        outs = [be.zeros((s, R), X.dtype) for s in X.shape]
        finish, warm = be.queue.finish, True   # OpenCL builds its programs on first use
    res = {k: [] for k in kernels}
    with num_threads(threads):
        for m in range(X.ndim):
            for k in kernels:
                if k == "mttkrp":
                    fn = (lambda m=m: be.mttkrp(T, facs, m, out=outs[m]))
                else:
                    fn = (lambda m=m: be.phi(T, facs, m, facs[m], 1e-10, out=outs[m]))
                t, out = best_time(fn, repeat, finish, warm)
                res[k].append((t, np.array(be.to_numpy(out))))
    return res


def rel_err(a, ref):
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return float(np.max(np.abs(a - ref)) / scale) if scale > 0 else float(np.max(np.abs(a)))


# ====================================================================== sections
def section_stream(cfg, threads, devices):
    n = cfg["stream_n"]
    if n is None:
        llc = last_level_cache_bytes() or 32 * MB
        n = max(1 << (26 if cfg["mode"] == "full" else 24), 4 * llc // 8)
    rows = []
    for th in threads:
        r = stream_mod.cpu_stream(n, th, cfg["stream_trials"])
        for op, v in r["ops"].items():
            rows.append({"device": "cpu", "threads": th, "op": op, "n": n, "dtype": "float64",
                         "max_rel_err": r["max_rel_err"], **v})
    for d in devices:
        if d["device"] == "cpu" or not d.get("ok"):
            continue
        try:
            r = stream_mod.opencl_stream(get_backend(d["device"]), n, cfg["stream_trials"])
        except Exception as exc:   # e.g. the arrays do not fit the device
            rows.append({"device": d["device"], "error": f"{type(exc).__name__}: {exc}"})
            continue
        for op, v in r["ops"].items():
            rows.append({"device": d["device"], "threads": None, "op": op, "n": n,
                         "dtype": r["dtype"], "max_rel_err": r["max_rel_err"], **v})
    ok = [r for r in rows if "GBs" in r]
    table = md_table(["device", "threads", "copy GB/s", "scale GB/s", "add GB/s", "triad GB/s",
                      "max rel err"],
                     [[dev, th if th is not None else "–"]
                      + [fmt_num(next(r["GBs"] for r in ok if r["device"] == dev
                                      and r["threads"] == th and r["op"] == op))
                         for op in stream_mod.OPS]
                      + [fmt_num(next(r["max_rel_err"] for r in ok if r["device"] == dev
                                      and r["threads"] == th))]
                      for dev, th in dict.fromkeys((r["device"], r["threads"]) for r in ok)])
    notes = []
    llc = last_level_cache_bytes()
    if llc and n * 8 < 4 * llc:
        notes.append(f"arrays of {n * 8 / MB:.1f} MiB are smaller than 4x the last-level cache "
                     f"({llc / MB:.0f} MiB): these are cache bandwidths, not memory bandwidths")
    return {"array_elements": n, "array_bytes": n * 8, "trials": cfg["stream_trials"],
            "notes": notes,
            "bytes_counted": {op: f"{k} arrays x element size"
                              for op, k in stream_mod.STREAM_ARRAYS.items()},
            "rows": rows}, table


def triad_lookup(stream):
    out = {}
    for r in stream.get("rows", []):
        if r.get("op") == "triad" and "GBs" in r:
            out[(r["device"], r["threads"])] = r["GBs"]
    return out


def kernel_tensors(cfg, synth):
    """Yields (name, source, loader) for the kernels section."""
    cap = cfg["kernel_nnz"] or memory_cap_nnz()
    for name in KERNEL_TENSORS:
        shape, nnz = FROSTT[name]
        n = min(nnz, cap)
        yield (name, f"synthetic: FROSTT {name} shape, {n:,} of {nnz:,} nonzeros, Zipf(1.2)",
               lambda shape=shape, n=n: synth.get(shape, n))
    if not DATA_DIR.is_dir():
        return
    for path in sorted(DATA_DIR.glob("*/tensor.tns.gz")):
        if cfg["real_max_gz"] is not None and path.stat().st_size > cfg["real_max_gz"]:
            continue
        yield (path.parent.name, f"real: {path.parent.name}", lambda p=path: load_tns(p))


def section_kernels(cfg, threads, devices, stream, synth):
    th = max(threads)
    R = cfg["rank"]
    triad = triad_lookup(stream)
    llc = last_level_cache_bytes()
    rows, notes = [], []
    if not DATA_DIR.is_dir():
        notes.append(f"real tensors skipped: {DATA_DIR} does not exist")
    for name, source, load in kernel_tensors(cfg, synth):
        X = load()
        rng = np.random.default_rng(0)
        factors = [rng.random((s, R)).astype(X.dtype) for s in X.shape]
        ref = None
        for device, fmt in device_layouts(devices):
            be = get_backend(device)
            try:
                T, prep = _prepare(be, X, device, fmt)
            except Exception as exc:
                notes.append(f"{name} on {device}/{fmt}: {type(exc).__name__}: {exc}")
                continue
            res = time_modes(be, device, T, X, factors, th, cfg["repeat"])
            if ref is None:
                ref = {k: [o for _, o in v] for k, v in res.items()}
                ref_name = f"{device}/{fmt}"
            tri = triad.get((device, th if device == "cpu" else None))
            for kernel, per_mode in res.items():
                for m, (sec, out) in enumerate(per_mode):
                    params, layout = layout_bytes(T, m)
                    model = mttkrp_bytes if kernel == "mttkrp" else phi_bytes
                    nbytes = model(X.nnz, X.ndim, R, X.shape, mode=m, **params)
                    gbs = nbytes / sec / 1e9
                    # what the kernel touches: stored nonzeros and every factor matrix
                    per_nnz = (params.get("index_bytes") or X.ndim * params["idx_bytes"]) \
                        + params["val_bytes"] + params.get("perm_bytes", params["idx_bytes"])
                    working = X.nnz * per_nnz + sum(X.shape) * R * params["val_bytes"]
                    row = {"tensor": name, "source": source, "shape": list(X.shape),
                           "nnz": X.nnz, "rank": R, "device": device, "format": fmt,
                           "threads": th if device == "cpu" else None, "kernel": kernel,
                           "mode": m, "seconds": sec, "bytes": nbytes, "GBs": gbs,
                           "triad_GBs": tri, "frac_triad": gbs / tri if tri else None,
                           "layout": layout, "prepare_s": prep,
                           "working_set_bytes": working,
                           "in_cache": bool(llc and device == "cpu" and working <= llc),
                           "max_rel_err": rel_err(out, ref[kernel][m]), "reference": ref_name}
                    if kernel == "mttkrp":
                        gb = genten_mttkrp_bytes(X.nnz, X.ndim, R, params["val_bytes"],
                                                 params["idx_bytes"])
                        row["GBs_genten_model"] = gb / sec / 1e9
                    rows.append(row)
            del T
        del X
    groups = {}
    for r in rows:
        groups.setdefault((r["tensor"], r["device"], r["format"], r["kernel"]), []).append(r)
    table = md_table(
        ["tensor", "nnz", "device / format", "kernel", "ms per mode", "GB/s per mode",
         "% of triad (mean)", "max rel err"],
        [[t, fmt_num(g[0]["nnz"]), f"{d} / {f}", "MTTKRP" if k == "mttkrp" else "Φ",
          " / ".join(f"{r['seconds'] * 1e3:.2f}" for r in g),
          " / ".join(f"{r['GBs']:.2f}" for r in g),
          (f"{100 * np.mean([r['frac_triad'] for r in g]):.0f}%"
           + (" (in LLC)" if g[0].get("in_cache") else "")
           if g[0]["frac_triad"] is not None else "–"),
          f"{max(r['max_rel_err'] for r in g):.1e}"]
         for (t, d, f, k), g in groups.items()])
    if any(r.get("in_cache") for r in rows):
        notes.append(f"'(in LLC)': the nonzeros and factors fit in the {llc / MB:.0f} MiB "
                     f"last-level cache, so the kernel can beat STREAM's memory bandwidth")
    return {"rank": R, "threads": th, "repeat": cfg["repeat"],
            "byte_model": ("benchmarks/byte_models.py: per nonzero its stored index (COO "
                           "coordinates or ALTO linear index), value, permutation entry "
                           "where one is read, and one row of every other factor; output "
                           "rows (and Φ's B rows) once per row"),
            "rows": rows, "notes": notes}, table


def fit_tensor(name):
    if name in SYNTHETIC_FITS:
        shape, nnz = SYNTHETIC_FITS[name]
        return synthetic_tensor(shape, nnz, seed=0), f"synthetic {shape}, {nnz:,} nonzeros"
    path = DATA_DIR / name / "tensor.tns.gz"
    if not path.is_file():
        return None, f"{path} not found"
    return load_tns(path), f"real: {name}"


def _attempt(fn):
    try:
        return fn()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:400]}


def _per_iteration(runs, k):
    """Seconds per iteration from ``runs`` = {iterations: result}: (t(k) - t(1)) / (k - 1)
    when both ran (setup cancels), else the whole fit over its iterations."""
    long, short = runs.get(k), runs.get(1)
    if k > 1 and short and "seconds" in short and long["seconds"] > short["seconds"]:
        return ((long["seconds"] - short["seconds"]) / (k - 1),
                "(t(k) - t(1)) / (k - 1), after a warm-up fit")
    return (long["seconds"] / max(long.get("iters") or k, 1),
            "whole fit / iterations (setup included), after a warm-up fit")


def _fit_runs(fn, k, difference=True, warm=None):
    """A warm-up fit (``warm()``, default 1 iteration; discarded), then ``fn(k)`` and, for the
    difference method, ``fn(1)``."""
    _attempt(warm or (lambda: fn(1)))
    runs = {k: _attempt(lambda: fn(k))}
    if difference and k > 1:
        runs[1] = _attempt(lambda: fn(1))
    return runs


def section_fits(cfg, threads, devices):
    from threadpoolctl import threadpool_limits
    # "all" thread counts, or only the smallest / largest (--tiny keeps to one)
    threads = {"all": list(threads), "min": [min(threads)],
               "max": [max(threads)]}[cfg["fit_threads"]]
    R = cfg["fit_rank"]
    rows, notes = [], []
    have = {m: peers.available(m) for m in ("pyttb", "tensorly", "pygenten")}
    for m, (ok, why) in have.items():
        if not ok:
            notes.append(f"{m}: skipped everywhere ({why})")
    if have["pygenten"][0] and not cfg["genten"]:
        notes.append("pygenten: skipped in --tiny (a subprocess per run)")
    if have["pygenten"][0]:
        notes.append("pygenten offers cp_als here; it has no CP-APR, and its GCP (gcp_sgd) is "
                     "compared in benchmarks/bench_gcp.py")
    ours_variants = [("cpu", f) for f in cpu_formats()]
    ours_variants += [(d["device"], "auto") for d in devices
                      if d["device"] != "cpu" and d.get("ok")]

    def record(problem, tname, X, th, library, variant, k, runs):
        row = {"problem": problem, "tensor": tname, "shape": list(X.shape), "nnz": X.nnz,
               "rank": R, "threads": th, "library": library, "variant": variant,
               "iterations": k}
        long = runs[k]
        if "error" in long:
            row["error"] = long["error"]
            rows.append(row)
            return
        peers.judge(problem, X, long)
        per_iter, how = _per_iteration(runs, k)
        row.update({"seconds": long["seconds"], "iters_run": long.get("iters"),
                    "s_per_iter": per_iter, "s_per_iter_method": how,
                    "measure": long.get("measure"), "value": long.get(long.get("measure")),
                    "own_measure": long.get("own_measure")})
        rows.append(row)

    for tname in cfg["fit_tensors"]:
        X, source = fit_tensor(tname)
        if X is None:
            notes.append(f"fit tensor {tname}: skipped ({source})")
            continue
        rng = np.random.default_rng(0)
        init = [rng.random((s, R)) for s in X.shape]
        D = None
        if have["tensorly"][0]:
            if X.size <= cfg["tensorly_max"]:
                D = X.to_dense()
            else:
                notes.append(f"tensorly on {tname}: skipped, the dense tensor would have "
                             f"{X.size:,} entries (limit {cfg['tensorly_max']:,.0f})")
        gcp_dense = X.size <= cfg["gcp_dense_max"]
        if not gcp_dense:
            notes.append(f"GCP L-BFGS-B on {tname}: skipped, it evaluates all {X.size:,} "
                         f"entries (limit {cfg['gcp_dense_max']:,.0f})")
        for th in threads:
            with threadpool_limits(limits=th):
                # ---------------- CP-ALS
                k = cfg["als_iters"]
                for dev, fmt in ours_variants:
                    record("cp_als", tname, X, th, "sktensor_fast", f"{dev}/{fmt}", k,
                           _fit_runs(lambda it, dev=dev, fmt=fmt: peers.als_ours(
                               X, init, it, th, fmt=fmt, device=dev), k))
                if have["pyttb"][0]:
                    record("cp_als", tname, X, th, "pyttb", "cp_als", k,
                           _fit_runs(lambda it: peers.als_pyttb(X, init, it, th), k))
                if D is not None:
                    record("cp_als", tname, X, th, "tensorly", "parafac (dense input)", k,
                           _fit_runs(lambda it: peers.als_tensorly(D, init, it, th), k))
                if have["pygenten"][0] and cfg["genten"]:
                    res = peers.genten("cp_als", X, init, [1, k, 1], th)
                    runs = {k: res} if isinstance(res, dict) else {k: res[1], 1: res[2]}
                    record("cp_als", tname, X, th, "pygenten", "cp_als", k, runs)
                # ---------------- CP-APR (MU)
                k, inner = cfg["apr_iters"], cfg["apr_inner"]
                for dev, fmt in ours_variants:
                    record("cp_apr", tname, X, th, "sktensor_fast", f"{dev}/{fmt}", k,
                           _fit_runs(lambda it, dev=dev, fmt=fmt: peers.apr_ours(
                               X, init, it, inner, th, fmt=fmt, device=dev), k))
                if have["pyttb"][0]:
                    record("cp_apr", tname, X, th, "pyttb", "cp_apr mu", k,
                           _fit_runs(lambda it: peers.apr_pyttb(X, init, it, inner, th), k))
                # ---------------- GCP, Poisson loss
                if not hasattr(sktensor_fast, "GCP"):
                    continue
                start = peers.gcp_start(init) if have["pyttb"][0] else [f.copy() for f in init]
                if gcp_dense:
                    k = cfg["lbfgsb_iters"]
                    # per iteration by difference, as CP-ALS: (t(k) - t(1)) / (k - 1); the
                    # whole-fit column keeps the fixed costs
                    record("gcp_lbfgsb", tname, X, th, "sktensor_fast", "cpu/lbfgsb", k,
                           _fit_runs(lambda it: peers.gcp_lbfgsb_ours(X, start, it, th), k))
                    if have["pyttb"][0]:
                        record("gcp_lbfgsb", tname, X, th, "pyttb", "gcp_opt LBFGSB (dense)", k,
                               _fit_runs(lambda it: peers.gcp_lbfgsb_pyttb(X, start, it, th),
                                         k))
                ep, it_ep = cfg["adam_epochs"], cfg["adam_epoch_iters"]
                record("gcp_adam", tname, X, th, "sktensor_fast",
                       f"cpu/adam {it_ep} steps per epoch", ep,
                       _fit_runs(lambda e: peers.gcp_adam_ours(X, start, e, it_ep, th), ep,
                                 difference=False,
                                 warm=lambda: peers.gcp_adam_ours(X, start, 1, 2, th)))
                if have["pyttb"][0]:
                    record("gcp_adam", tname, X, th, "pyttb",
                           f"gcp_opt Adam {it_ep} steps per epoch", ep,
                           _fit_runs(lambda e: peers.gcp_adam_pyttb(X, start, e, it_ep, th), ep,
                                     difference=False,
                                     warm=lambda: peers.gcp_adam_pyttb(X, start, 1, 2, th)))
        del X, D
    if not hasattr(sktensor_fast, "GCP"):
        notes.append("GCP: sktensor_fast.GCP does not exist; skipped")
    else:
        notes.append("GCP L-BFGS-B: both libraries run scipy's L-BFGS-B with the same "
                     "stopping rules from the same start and take the same steps; s / iter is "
                     "(t(k) - t(1)) / (k - 1), as for CP-ALS")
        notes.append("GCP Adam: same sample counts (pyttb's defaults) but different samples; "
                     "pyttb 1.8.6's Adam also advances its bias-correction counter by "
                     "epoch_iters at every step (optimizers.py, Adam.update_step), so its first "
                     "steps are about 3x larger than textbook Adam's and its loss falls faster "
                     "over the first epochs")
    # relative difference of each measure from the first sktensor_fast row of its group
    base = {}
    for r in rows:
        key = (r["problem"], r["tensor"])
        if r["library"] == "sktensor_fast" and r.get("value") is not None and key not in base:
            base[key] = r["value"]
    for r in rows:
        b = base.get((r["problem"], r["tensor"]))
        if r.get("value") is not None and b is not None and np.isfinite(b) and b != 0:
            r["rel_diff_vs_sktensor_fast"] = (r["value"] - b) / abs(b)
    table = md_table(
        ["problem", "tensor", "threads", "library", "variant", "iters", "s / iter",
         "whole fit s", "measure", "value", "rel. diff"],
        [[r["problem"], r["tensor"], r["threads"], r["library"], r["variant"],
          r["iterations"], fmt_num(r.get("s_per_iter")), fmt_num(r.get("seconds")),
          r.get("measure", "–"),
          (f"{r['value']:.10g}" if r.get("value") is not None else r.get("error", "–")[:60]),
          (f"{r['rel_diff_vs_sktensor_fast']:+.1e}" if "rel_diff_vs_sktensor_fast" in r
           else "–")]
         for r in rows])
    return {"threads": list(threads), "rank": R, "settings": {k: cfg[k] for k in (
        "als_iters", "apr_iters", "apr_inner", "lbfgsb_iters", "adam_epochs",
        "adam_epoch_iters", "tensorly_max", "gcp_dense_max")},
        "measures": {"fit": "1 - ||X - M|| / ||X|| (exact, sparse)",
                     "log_likelihood": "sum_nz x log m - sum_all m",
                     "loss": "sum_all m - sum_nz x log(m + 1e-10)"},
        "rows": rows, "notes": notes}, table


def nnz_ladder(cfg, full_nnz):
    """Nonzero counts of the scaling section: the preset's, or (``--full``) 1M, 2M, 4M, ...
    up to the memory limit, NELL-2's real count or ``--max-nnz``, whichever is smallest."""
    user_cap = cfg.get("max_nnz")
    if cfg["scaling_nnz"] is not None:
        ladder = sorted(int(n) for n in cfg["scaling_nnz"])
        if user_cap:
            ladder = [n for n in ladder if n < user_cap] + [user_cap]
        return ladder
    cap = min(memory_cap_nnz(), full_nnz, user_cap or full_nnz)
    ladder = [n for n in (1_000_000 * 2 ** i for i in range(12)) if n <= cap]
    if not ladder:
        return [max(1, cap // 4), max(1, cap // 2), cap]
    if cap > ladder[-1]:
        ladder.append(cap)
    return ladder


def section_scaling(cfg, threads, devices, synth):
    th = max(threads)
    R = cfg["rank"]
    shape, full_nnz = FROSTT["nell2"]
    ladder = nnz_ladder(cfg, full_nnz)
    top = synth.get(shape, ladder[-1])
    rng = np.random.default_rng(0)
    factors = [rng.random((s, R)) for s in shape]
    nnz_rows, thr_rows = [], []
    for n in ladder:
        X = subsample(top, n)
        for device, fmt in device_layouts(devices):
            be = get_backend(device)
            try:
                T, prep = _prepare(be, X, device, fmt)
            except Exception as exc:
                nnz_rows.append({"nnz": n, "device": device, "format": fmt,
                                 "error": f"{type(exc).__name__}: {exc}"})
                continue
            res = time_modes(be, device, T, X, factors, th, cfg["repeat"])
            for kernel, per_mode in res.items():
                nnz_rows.append({"nnz": X.nnz, "device": device, "format": fmt,
                                 "threads": th if device == "cpu" else None, "kernel": kernel,
                                 "seconds": sum(t for t, _ in per_mode),
                                 "seconds_per_mode": [t for t, _ in per_mode],
                                 "prepare_s": prep})
            del T
    # threads: the largest rung up to 1M nonzeros
    n_thr = max([n for n in ladder if n <= 1_000_000] or [ladder[0]])
    X = subsample(top, n_thr)
    be = get_backend("cpu")
    for fmt in cpu_formats():
        T, prep = _prepare(be, X, "cpu", fmt)
        for t in threads:
            res = time_modes(be, "cpu", T, X, factors, t, cfg["repeat"])
            for kernel, per_mode in res.items():
                thr_rows.append({"nnz": X.nnz, "format": fmt, "threads": t, "kernel": kernel,
                                 "seconds": sum(s for s, _ in per_mode)})
        del T
    for r in thr_rows:
        one = [q["seconds"] for q in thr_rows if q["format"] == r["format"]
               and q["kernel"] == r["kernel"] and q["threads"] == min(threads)]
        r["speedup_vs_min_threads"] = one[0] / r["seconds"] if one else None
    ok = [r for r in nnz_rows if "seconds" in r]
    combos = list(dict.fromkeys((r["device"], r["format"], r["kernel"]) for r in ok))
    t1 = md_table(["nnz"] + [f"{d}/{f} {'MTTKRP' if k == 'mttkrp' else 'Φ'} ms"
                             for d, f, k in combos],
                  [[fmt_num(n)] + [fmt_num(next((r["seconds"] * 1e3 for r in ok
                                                 if r["nnz"] == n and (r["device"], r["format"],
                                                                       r["kernel"]) == c), None))
                                   for c in combos]
                   for n in dict.fromkeys(r["nnz"] for r in ok)])
    tcombos = list(dict.fromkeys((r["format"], r["kernel"]) for r in thr_rows))
    t2 = md_table(["threads"] + [f"{f} {'MTTKRP' if k == 'mttkrp' else 'Φ'} ms (speedup)"
                                 for f, k in tcombos],
                  [[t] + [next(f"{r['seconds'] * 1e3:.1f} ({r['speedup_vs_min_threads']:.2f}x)"
                               for r in thr_rows if r["threads"] == t
                               and (r["format"], r["kernel"]) == c) for c in tcombos]
                   for t in threads])
    return {"shape": list(shape), "rank": R, "threads": th, "repeat": cfg["repeat"],
            "seconds_are": "sum over modes of the best time per mode",
            "nnz": {"rows": nnz_rows}, "threads_sweep": {"nnz": X.nnz, "rows": thr_rows}}, \
        t1 + "\n\n" + t2


# ====================================================================== plots
def make_plots(report, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    files = []
    title = f"{report['machine']['cpu']} ({report['machine']['cores_available']} cores)"

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(outdir / name, dpi=110)
        plt.close(fig)
        files.append(name)

    st = report["stream"].get("rows", [])
    st = [r for r in st if "GBs" in r]
    if st:
        fig, ax = plt.subplots(figsize=(7, 4))
        combos = list(dict.fromkeys((r["device"], r["threads"]) for r in st))
        w = 0.8 / len(combos)
        for i, (d, t) in enumerate(combos):
            vals = [next(r["GBs"] for r in st if (r["device"], r["threads"]) == (d, t)
                         and r["op"] == op) for op in stream_mod.OPS]
            ax.bar(np.arange(4) + i * w, vals, w,
                   label=f"{d}" + (f", {t} thread{'s' if t != 1 else ''}"
                                   if t is not None else ""))
        ax.set_xticks(np.arange(4) + w * (len(combos) - 1) / 2, stream_mod.OPS)
        ax.set_ylabel("GB/s")
        ax.set_title(f"STREAM, {title}", fontsize=9)
        ax.legend(fontsize=8)
        save(fig, "stream.png")
    kr = report["kernels"].get("rows", [])
    kr = [r for r in kr if r.get("frac_triad") is not None]
    if kr:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        tensors = list(dict.fromkeys(r["tensor"] for r in kr))
        combos = list(dict.fromkeys((r["device"], r["format"]) for r in kr))
        w = 0.8 / len(combos)
        for ax, kernel in zip(axes, ("mttkrp", "phi")):
            for i, c in enumerate(combos):
                vals = [100 * np.mean([r["frac_triad"] for r in kr if r["tensor"] == t
                                       and (r["device"], r["format"]) == c
                                       and r["kernel"] == kernel] or [np.nan])
                        for t in tensors]
                bars = ax.bar(np.arange(len(tensors)) + i * w, vals, w,
                              label=f"{c[0]} / {c[1]}", color=f"C{i}")
                for b, t in zip(bars, tensors):   # hatched: fits in the last-level cache
                    if any(r.get("in_cache") for r in kr if r["tensor"] == t
                           and (r["device"], r["format"]) == c):
                        b.set_hatch("//")
                        b.set_edgecolor("white")
            ax.set_xticks(np.arange(len(tensors)) + w * (len(combos) - 1) / 2, tensors,
                          rotation=30, ha="right", fontsize=8)
            ax.set_title(("MTTKRP" if kernel == "mttkrp" else "CP-APR Φ")
                         + " (mean over modes; hatched: fits in the LLC)", fontsize=9)
            ax.set_ylabel("% of STREAM triad (byte model)")
        axes[0].legend(fontsize=8)
        save(fig, "kernels.png")
    fr = [r for r in report["fits"].get("rows", []) if "s_per_iter" in r]
    if fr:
        problems = list(dict.fromkeys((r["problem"], r["tensor"]) for r in fr))
        ncol = min(4, len(problems))
        nrow = -(-len(problems) // ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(3.6 * ncol, 3.8 * nrow), squeeze=False)
        for ax in axes.ravel()[len(problems):]:
            ax.axis("off")
        for ax, (p, t) in zip(axes.ravel(), problems):
            g = [r for r in fr if (r["problem"], r["tensor"]) == (p, t)]
            labels = [f"{r['library']} {r['variant'].split(' ')[0]}, {r['threads']}t" for r in g]
            vals = [max(r["s_per_iter"], 1e-6) for r in g]
            ax.barh(range(len(g)), vals, color=["C0" if r["library"] == "sktensor_fast"
                                                else "C1" for r in g])
            ax.set_xscale("log")
            ax.set_xlim(10 ** np.floor(np.log10(min(vals) / 2)),
                        10 ** np.ceil(np.log10(max(vals) * 2)))
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_yticks(range(len(g)), labels, fontsize=6)
            ax.invert_yaxis()
            ax.set_title(f"{p} on {t}", fontsize=8)
            ax.set_xlabel("s / iteration", fontsize=8)
        save(fig, "fits.png")
    sc = [r for r in report["scaling"].get("nnz", {}).get("rows", []) if "seconds" in r]
    if sc:
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for c in dict.fromkeys((r["device"], r["format"], r["kernel"]) for r in sc):
            g = [r for r in sc if (r["device"], r["format"], r["kernel"]) == c]
            ax.loglog([r["nnz"] for r in g], [r["seconds"] for r in g], "o-",
                      label=f"{c[0]}/{c[1]} {'MTTKRP' if c[2] == 'mttkrp' else 'Φ'}")
        x = np.array([sc[0]["nnz"], max(r["nnz"] for r in sc)], dtype=float)
        y0 = min(r["seconds"] for r in sc if r["nnz"] == sc[0]["nnz"])
        ax.loglog(x, y0 * x / x[0], "k:", label="linear")
        ax.set_xlabel("nonzeros (NELL-2 shape)")
        ax.set_ylabel("seconds, all modes")
        ax.set_title(f"time vs nonzeros, {report['scaling']['threads']} threads", fontsize=9)
        ax.legend(fontsize=7)
        save(fig, "scaling_nnz.png")
    tr = report["scaling"].get("threads_sweep", {}).get("rows", [])
    if tr:
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for c in dict.fromkeys((r["format"], r["kernel"]) for r in tr):
            g = sorted((r for r in tr if (r["format"], r["kernel"]) == c),
                       key=lambda r: r["threads"])
            ax.loglog([r["threads"] for r in g], [r["seconds"] for r in g], "o-",
                      label=f"{c[0]} {'MTTKRP' if c[1] == 'mttkrp' else 'Φ'}")
            ax.loglog([g[0]["threads"], g[-1]["threads"]],
                      [g[0]["seconds"], g[0]["seconds"] * g[0]["threads"] / g[-1]["threads"]],
                      ":", color="grey")
        ts = sorted({r["threads"] for r in tr})
        ax.set_xticks(ts, [str(t) for t in ts])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("threads")
        ax.set_ylabel("seconds, all modes")
        ax.set_title(f"time vs threads ({report['scaling']['threads_sweep']['nnz']:,} nnz; "
                     "dotted: ideal)", fontsize=9)
        ax.legend(fontsize=7)
        save(fig, "scaling_threads.png")
    if report.get("contention", {}).get("rows"):
        fig = contention.plot(report["contention"], outdir, plt)
        if fig is not None:
            save(fig, "contention.png")
    if "devices" in report.get("e2e", {}):
        e2e_mod.plot_e2e(report, outdir, save)
    return files


# ====================================================================== main
SECTIONS = ("stream", "kernels", "fits", "scaling", "contention", "e2e")

#: Sections run when --sections is not given (contention starts busy processes: only on request)
DEFAULT_SECTIONS = ("stream", "kernels", "fits", "scaling", "e2e")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="mode", action="store_const", const="quick",
                   help="1M-nonzero tensors, small fits (the default)")
    g.add_argument("--full", dest="mode", action="store_const", const="full",
                   help="FROSTT sizes as memory allows, larger fits")
    g.add_argument("--tiny", dest="mode", action="store_const", const="tiny",
                   help="tiny sizes: a smoke test that runs in seconds")
    p.add_argument("--device", action="append", default=[],
                   help="also run on this OpenCL device ('opencl', 'gpu', 'opencl:P:D'); "
                        "repeatable")
    p.add_argument("--out", default="bench_out", help="folder for the JSON and the plots")
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="CPU thread counts (default: 1 and all cores)")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(DEFAULT_SECTIONS),
                   help="sections to run (default: all but contention)")
    p.add_argument("--busy", type=int, default=None,
                   help="contention: busy processes of the loaded condition (default: one per "
                        "core)")
    p.add_argument("--compare-spin", action="store_true",
                   help="contention: also time OpenMP's spinning default at many threads")
    p.add_argument("--stream-size", type=int, default=None,
                   help="STREAM elements per array (default: preset, at least 4x the LLC)")
    p.add_argument("--max-nnz", type=int, default=None,
                   help="cap on the nonzeros of the synthetic tensors (kernels and scaling)")
    p.add_argument("--repeat", type=int, default=None, help="timed calls per kernel (best)")
    p.add_argument("--rank", type=int, default=None, help="rank of the kernels (default 16)")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    args.mode = args.mode or "quick"
    return args


def _write(report, path):
    tmp = path.with_suffix(".json.tmp")
    with open(tmp, "w") as f:
        json.dump(_plain(report), f, indent=1, allow_nan=False)
    os.replace(tmp, path)


def _plain(o):
    """``o`` as strict JSON data: NumPy scalars and arrays converted, NaN and ±inf as None."""
    if isinstance(o, dict):
        return {str(k): _plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_plain(v) for v in o]
    if isinstance(o, np.ndarray):
        return _plain(o.tolist())
    if isinstance(o, (bool, np.bool_)):
        return bool(o)
    if isinstance(o, (int, np.integer)):
        return int(o)
    if isinstance(o, (float, np.floating)):
        return float(o) if np.isfinite(o) else None
    if o is None or isinstance(o, str):
        return o
    return str(o)


def main(argv=None):
    args = parse_args(argv)
    cfg = dict(PRESETS[args.mode], mode=args.mode)
    if args.stream_size:
        cfg["stream_n"] = args.stream_size
    if args.max_nnz:
        cfg["kernel_nnz"] = args.max_nnz
        cfg["max_nnz"] = args.max_nnz
    if args.repeat:
        cfg["repeat"] = args.repeat
    if args.rank:
        cfg["rank"] = args.rank
    threads = sorted(set(args.threads or {1, cores()}))
    if min(threads) < 1:
        raise SystemExit("--threads: thread counts must be >= 1")
    if args.busy is not None and args.busy < 0:
        raise SystemExit("--busy must be >= 0")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    devices = [{"device": "cpu", "ok": True, "name": cpu_model(), "kind": "Cython/OpenMP"}]
    for d in args.device:
        parse_device(d)   # raises on a malformed device string
        try:
            be = get_backend(d)
            devices.append({**be.info(), "device": d, "ok": True})
        except Exception as exc:
            devices.append({"device": d, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
            print(f"device {d}: skipped ({exc})", flush=True)
    started = time.time()
    report = {"suite": "sktensor_fast benchmarks", "mode": args.mode,
              "command": "python -m benchmarks " + " ".join(argv if argv is not None
                                                             else sys.argv[1:]),
              "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "machine": machine_info(threads, devices), "settings": cfg}
    for s in SECTIONS:
        report[s] = {"skipped": "not requested (--sections)"}
    path = out / "benchmarks.json"
    m = report["machine"]
    print(f"# sktensor_fast benchmarks ({args.mode}), {report['date']}\n\n"
          f"machine: {m['hostname']} | {m['cpu']} | {m['cores_available']} cores | "
          f"LLC {(m['last_level_cache_bytes'] or 0) / MB:.0f} MiB | "
          f"{(m['memory_total_bytes'] or 0) / 2**30:.1f} GiB | threads {threads} | devices "
          + ", ".join(d["device"] for d in devices if d["ok"])
          + f" | load average {m['load_average_start'][0]:.2f}\n", flush=True)
    synth = Synth()
    titles = {"stream": "STREAM (GB/s, best of the rounds after the first)",
              "kernels": "Kernels", "fits": "Whole fits", "scaling": "Scaling",
              "contention": "Whole fits on a quiet and on a busy machine (fresh processes, "
                            "best seconds; ratio: many threads over one)",
              "e2e": "File to model"}
    for s in SECTIONS:
        if s not in args.sections:
            continue
        t0 = time.time()
        if s == "stream":
            res, table = section_stream(cfg, threads, devices)
        elif s == "kernels":
            res, table = section_kernels(cfg, threads, devices, report["stream"], synth)
        elif s == "fits":
            res, table = section_fits(cfg, threads, devices)
        elif s == "contention":
            res, table = contention.section_contention(
                args.mode, args.busy, args.threads, args.repeat, cores=cores(),
                compare_spin=args.compare_spin)
        elif s == "e2e":
            res, table = e2e_mod.section_e2e(cfg, threads, devices)
        else:
            res, table = section_scaling(cfg, threads, devices, synth)
        res["section_seconds"] = time.time() - t0
        report[s] = res
        print(f"## {titles[s]}\n\n{table}\n", flush=True)
        for note in res.get("notes", []):
            print(f"- note: {note}")
        if res.get("notes"):
            print()
        _write(report, path)
    report["machine"]["load_average_end"] = list(os.getloadavg())
    report["total_seconds"] = time.time() - started
    report["plots"] = [] if args.no_plots else make_plots(report, out)
    _write(report, path)
    print(f"wrote {path}" + (f" and {', '.join(report['plots'])} in {out}"
                             if report["plots"] else "")
          + f" ({report['total_seconds']:.0f} s)", flush=True)
    return report


if __name__ == "__main__":
    main()
