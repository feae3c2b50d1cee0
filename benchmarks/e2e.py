"""File to model: every phase a user waits for, on a NELL-2-shaped tensor, in one run.

Phases (seconds, one call each unless said otherwise):

- **construct**: ``SparseTensor(subs, vals, shape)`` from unsorted arrays, next to NumPy's stable
  argsort of the same tensor's linear index alone (same run: the ratio is the measure), and the
  compiled passes alone (``_native.canonical.canonical_coo``);
- **save_tns** / **parse**: writing the ``.tns`` text, and ``load_tns`` of it (which also builds
  the sorted tensor), next to ``pandas.read_csv(path, sep=" ", header=None, engine="c")``
  parsing the same file (when pandas is installed), and the compiled reader alone
  (``_native.text.load_arrays``); the peak of the traced allocations while loading
  (``tracemalloc``, a second call) over the bytes of the final tensor;
- **binary save / load**: :func:`sktensor_fast.binary.save_tensor` and :func:`~.binary.load_tensor` (read, and
  memory-mapped), each with its full check;
- per device (the CPU and every ``--device``): **prepare** (``backend.prepare``, kept with the
  tensor and reused by the fits) and the **fits**, CP-APR (rank 16, 5 outer iterations, tol 0)
  and CP-ALS (rank 16, 10 iterations), with the time spent in the sparse kernels (MTTKRP, Φ,
  model values, the Poisson data term; OpenCL queues finished around each call) inside them.

``python -m benchmarks --sections e2e --max-nnz N [--device gpu]`` runs it alone; the plot
``e2e.png`` stacks the phases per device.
"""
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from sktensor_fast import CPALS, CPAPR, SparseTensor, load_tns, num_threads, save_tns
from sktensor_fast import binary
from sktensor_fast._native import text
from sktensor_fast._native.canonical import canonical_coo
from sktensor_fast._prepared import prepared
from sktensor_fast.backends import get_backend

from .synth import FROSTT, zipf_indices

__all__ = ["section_e2e", "plot_e2e", "E2E_NNZ"]

#: nonzeros of the tensor per preset (``--max-nnz`` overrides)
E2E_NNZ = {"tiny": 20_000, "quick": 1_000_000, "full": FROSTT["nell2"][1]}

KERNELS = ("mttkrp", "phi", "model_values", "poisson_data_term")


def nell2_arrays(nnz, seed=0, zipf_rounds=2):
    """Coordinates (in random order) and count values of ``nnz`` distinct nonzeros of a
    NELL-2-shaped tensor.

    ``zipf_rounds`` rounds draw Zipf(1.2)-skewed coordinates in every mode (the heavy rows and
    their repeats); what is still missing after them is drawn uniformly, where repeats are
    rare.  Skewed draws alone would need ever more rounds to find the last distinct
    coordinates of a large tensor (tens of seconds for a few million).
    """
    shape = FROSTT["nell2"][0]
    rng = np.random.default_rng(seed)
    lin = np.zeros(0, dtype=np.int64)
    rounds = 0
    while lin.size < nnz:
        need = int((nnz - lin.size) * 1.5) + 1024
        new = np.zeros(need, dtype=np.int64)
        for s in shape:
            new *= s
            new += (zipf_indices(s, need, rng) if rounds < zipf_rounds
                    else rng.integers(0, s, need))
        lin = np.concatenate([lin, new])
        lin.sort()
        # (np.unique of NumPy 2.4 hashes int64 keys: 20 s for 6M where sorting takes 0.8 s)
        lin = lin[np.concatenate(([True], lin[1:] != lin[:-1]))]
        rounds += 1
    lin = rng.permutation(lin)[:nnz]
    subs = np.empty((nnz, len(shape)), dtype=np.int64)
    for k in range(len(shape) - 1, -1, -1):
        subs[:, k] = lin % shape[k]
        lin //= shape[k]
    vals = rng.integers(1, 5, nnz).astype(np.float64)
    return subs, vals, shape


class _KernelClock:
    """Wraps a backend's sparse kernels to add up their time (finishing OpenCL queues)."""

    def __init__(self, backend):
        self.be = backend
        self.seconds = 0.0
        self.calls = 0
        self.saved = {}
        self.depth = 0       # a kernel calling another (Φ's data term) is timed once

    def __enter__(self):
        queue = getattr(self.be, "queue", None)
        for name in KERNELS:
            real = getattr(self.be, name)
            self.saved[name] = real

            def timed(*args, _real=real, **kwargs):
                if self.depth:
                    return _real(*args, **kwargs)
                if queue is not None:
                    queue.finish()
                self.depth += 1
                t = time.perf_counter()
                try:
                    out = _real(*args, **kwargs)
                    if queue is not None:
                        queue.finish()
                finally:
                    self.depth -= 1
                self.seconds += time.perf_counter() - t
                self.calls += 1
                return out
            setattr(self.be, name, timed)
        return self

    def __exit__(self, *exc):
        for name in self.saved:
            delattr(self.be, name)        # back to the class's method


def _timed(fn, what=None):
    t = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    if what:
        _progress(f"{what}: {dt:.3f} s")
    return dt, out


def _progress(msg):
    """One line per phase on stderr as it ends (a long run shows where it is)."""
    import sys
    print(f"  e2e {msg}", file=sys.stderr, flush=True)


def section_e2e(cfg, threads, devices):
    """Run the phases; returns ``(result dict, Markdown table)``."""
    mode = cfg.get("mode", "quick")
    nnz = int(cfg.get("max_nnz") or E2E_NNZ.get(mode, E2E_NNZ["quick"]))
    nt = max(threads)
    res = {"nnz_requested": nnz, "threads": nt, "rows": [], "devices": {}, "notes": []}
    t_gen, (subs, vals, shape) = _timed(lambda: nell2_arrays(nnz), f"generate {nnz:,} nonzeros")
    res["shape"] = list(shape)
    with num_threads(nt), tempfile.TemporaryDirectory(prefix="sktf-e2e-") as tmp:
        tmp = Path(tmp)
        # ---- construct from unsorted arrays, against NumPy's argsort of the linear index
        lin = (subs[:, 0] * shape[1] + subs[:, 1]) * shape[2] + subs[:, 2]
        t_argsort, _ = _timed(lambda: np.argsort(lin, kind="stable"), "numpy argsort")
        del lin
        t_construct, X = _timed(lambda: SparseTensor(subs, vals, shape), "SparseTensor")
        t_native, _ = _timed(lambda: canonical_coo(subs, vals, shape), "canonical_coo")
        del subs, vals
        res["nnz"] = X.nnz
        res["construct"] = {"seconds": t_construct, "numpy_argsort_seconds": t_argsort,
                            "ratio": t_construct / t_argsort, "compiled_seconds": t_native,
                            "compiled_ratio": t_native / t_argsort}
        # ---- text
        path = tmp / "nell2.tns"
        t_save, _ = _timed(lambda: save_tns(path, X), "save_tns")
        res["save_tns"] = {"seconds": t_save, "bytes": path.stat().st_size}
        t_load, Y = _timed(lambda: load_tns(path, X.shape), "load_tns")
        if Y != X:
            res["notes"].append("load_tns did not give back the saved tensor")
        del Y
        t_text, got = _timed(lambda: text.load_arrays(path, X.shape), "text.load_arrays")
        if not (np.array_equal(got[0], X.subs) and np.array_equal(got[1], X.vals)):
            res["notes"].append("the compiled text reader did not give back the saved tensor")
        del got
        final = X.subs.nbytes + X.vals.nbytes
        _progress("peak memory of load_tns (traced)")
        tracemalloc.start()
        load_tns(path, X.shape)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        tracemalloc.start()
        text.load_arrays(path, X.shape)
        _, peak_text = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        parse = {"seconds": t_load, "peak_bytes": peak, "peak_over_tensor": peak / final,
                 "compiled_seconds": t_text, "compiled_peak_over_tensor": peak_text / final}
        try:
            import pandas as pd
            t_pd, _ = _timed(lambda: pd.read_csv(path, sep=" ", header=None, engine="c"), "pandas.read_csv")
            parse.update(pandas_seconds=t_pd, ratio=t_load / t_pd,
                         compiled_ratio=t_text / t_pd)
        except ImportError:
            res["notes"].append("pandas is not installed: no read_csv reference")
        res["parse"] = parse
        path.unlink()
        # ---- binary container
        bpath = tmp / "nell2.sktf"
        t_bsave, _ = _timed(lambda: binary.save_tensor(bpath, X), "save_tensor")
        t_bload, Y = _timed(lambda: binary.load_tensor(bpath), "load_tensor")
        t_bmap, Z = _timed(lambda: binary.load_tensor(bpath, mmap=True), "load_tensor(mmap)")
        if not (Y == X and Z == X):
            res["notes"].append("the binary container did not give back the saved tensor")
        del Y, Z
        res["binary"] = {"save_seconds": t_bsave, "load_seconds": t_bload,
                         "mmap_load_seconds": t_bmap, "bytes": bpath.stat().st_size}
        bpath.unlink()
        # ---- per device: prepare once, then the fits reuse it
        for d in devices:
            if not d.get("ok"):
                continue
            dev = d["device"]
            be = get_backend(dev)
            out = {}
            try:
                for est, label, fmt in ((CPAPR(rank=16, max_iter=5, tol=0, device=dev,
                                               random_state=0), "cpapr", "auto"),
                                        (CPALS(rank=16, max_iter=10, tol=0, device=dev,
                                               random_state=0), "cpals", "auto")):
                    fmt = est._storage_format()
                    if ("prepare", fmt) not in out:
                        t0 = time.perf_counter()
                        with prepared(be, X, fmt) as T:      # kept with X for the fits
                            if hasattr(be, "queue"):
                                be.queue.finish()
                            t_prep = time.perf_counter() - t0
                            kind = type(T).__name__
                        out[("prepare", fmt)] = t_prep
                        _progress(f"prepare {fmt} on {dev}: {t_prep:.3f} s")
                        out["prepare_seconds"] = out.get("prepare_seconds", 0.0) + t_prep
                        out.setdefault("formats", []).append(f"{fmt}: {kind}")
                    with _KernelClock(be) as clock:
                        t_fit, _ = _timed(lambda: est.fit(X), f"{label} fit on {dev}")
                    out[label] = {"fit_seconds": t_fit, "kernel_seconds": clock.seconds,
                                  "kernel_calls": clock.calls, "n_iter": int(est.n_iter_)}
            except Exception as exc:   # a device that cannot hold the tensor, say
                out["error"] = f"{type(exc).__name__}: {exc}"
            res["devices"][dev] = {k if isinstance(k, str) else f"{k[0]}:{k[1]}": v
                                   for k, v in out.items()}
    # ---- table
    rows = [("construct (unsorted arrays)", "", res["construct"]["seconds"],
             f"{res['construct']['ratio']:.2f}x NumPy stable argsort "
             f"({res['construct']['numpy_argsort_seconds']:.3f} s)"),
            ("construct: compiled passes (canonical_coo)", "", res["construct"]["compiled_seconds"],
             f"{res['construct']['compiled_ratio']:.2f}x NumPy stable argsort"),
            ("save_tns", "", res["save_tns"]["seconds"],
             f"{res['save_tns']['bytes'] / 2**20:.0f} MiB of text"),
            ("load_tns (parse + sorted tensor)", "", res["parse"]["seconds"],
             (f"{res['parse']['ratio']:.2f}x pandas.read_csv "
              f"({res['parse']['pandas_seconds']:.3f} s); " if "ratio" in res["parse"] else "")
             + f"peak {res['parse']['peak_over_tensor']:.2f}x the tensor"),
            ("load: compiled parser (text.load_arrays)", "", res["parse"]["compiled_seconds"],
             (f"{res['parse']['compiled_ratio']:.2f}x pandas.read_csv; "
              if "compiled_ratio" in res["parse"] else "")
             + f"peak {res['parse']['compiled_peak_over_tensor']:.2f}x the tensor"),
            ("binary save", "", res["binary"]["save_seconds"], ""),
            ("binary load", "", res["binary"]["load_seconds"],
             f"memory-mapped: {res['binary']['mmap_load_seconds']:.3f} s")]
    for dev, out in res["devices"].items():
        if "error" in out:
            rows.append(("device", dev, None, out["error"]))
            continue
        rows.append(("prepare", dev, out["prepare_seconds"], "; ".join(out["formats"])))
        for label in ("cpapr", "cpals"):
            f = out[label]
            rows.append((f"fit {label}", dev, f["fit_seconds"],
                         f"kernels {f['kernel_seconds']:.3f} s in {f['kernel_calls']} calls, "
                         f"{f['n_iter']} iterations"))
    res["rows"] = [{"phase": a, "device": b, "seconds": c, "note": e} for a, b, c, e in rows]
    head = (f"NELL-2 shape {tuple(shape)}, {res['nnz']:,} nonzeros (fp64), {nt} threads\n\n")
    table = head + "\n".join(
        ["| phase | device | seconds | note |", "|---|---|---|---|"]
        + [f"| {a} | {b} | {'–' if c is None else f'{c:.3f}'} | {e} |" for a, b, c, e in rows])
    return res, table


def plot_e2e(report, outdir, save):
    """Stacked bars: file to model per device (parse, prepare, fit: kernels and the rest)."""
    import matplotlib.pyplot as plt
    res = report.get("e2e", {})
    devs = {d: o for d, o in res.get("devices", {}).items() if "error" not in o}
    if not devs:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2, 1]})
    names = list(devs)
    x = np.arange(len(names))
    parts = [("parse (load_tns)", [res["parse"]["seconds"]] * len(names), "#8c8c8c"),
             ("prepare", [devs[d]["prepare_seconds"] for d in names], "#e6a23c")]
    for label, color_k, color_o in (("cpapr", "#2a6fb0", "#9cc3e6"),
                                    ("cpals", "#2e8b57", "#a6d9b9")):
        parts.append((f"{label}: kernels", [devs[d][label]["kernel_seconds"] for d in names],
                      color_k))
        parts.append((f"{label}: rest of the fit",
                      [devs[d][label]["fit_seconds"] - devs[d][label]["kernel_seconds"]
                       for d in names], color_o))
    bottom = np.zeros(len(names))
    ax = axes[0]
    for label, vals, color in parts:
        ax.bar(x, vals, bottom=bottom, label=label, color=color)
        bottom += np.asarray(vals)
    ax.set_xticks(x, names)
    ax.set_ylabel("seconds")
    ax.set_title(f"file to model, {res['nnz']:,} nonzeros")
    ax.legend(fontsize=8)
    ax = axes[1]
    other = [("construct", res["construct"]["seconds"]),
             ("construct\n(compiled)", res["construct"]["compiled_seconds"]),
             ("argsort\n(NumPy)", res["construct"]["numpy_argsort_seconds"]),
             ("save_tns", res["save_tns"]["seconds"]),
             ("binary\nsave", res["binary"]["save_seconds"]),
             ("binary\nload", res["binary"]["load_seconds"])]
    other.insert(4, ("load_tns", res["parse"]["seconds"]))
    other.insert(5, ("load\n(compiled)", res["parse"]["compiled_seconds"]))
    if "pandas_seconds" in res["parse"]:
        other.insert(6, ("read_csv\n(pandas)", res["parse"]["pandas_seconds"]))
    ax.bar(range(len(other)), [v for _, v in other], color="#8c8c8c")
    ax.set_xticks(range(len(other)), [n for n, _ in other], fontsize=8)
    ax.set_title("data phases and references")
    save(fig, "e2e.png")
