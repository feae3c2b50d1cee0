"""The ``kernels`` and ``scaling`` sections of the suite: MTTKRP and Φ of every mode, per
storage format and device, as effective bandwidth under the byte model
(``benchmarks/byte_models.py``) and as a fraction of STREAM triad; then the same kernels
against the number of nonzeros and of threads.
"""
import time

import numpy as np

from sktensor_fast import SparseTensor, load_tns, num_threads
from sktensor_fast.backends import get_backend
from sktensor_fast.backends import FORMATS

from .byte_models import genten_mttkrp_bytes, mttkrp_bytes, phi_bytes
from .common import DATA_DIR, MB, best_time, fmt_num, last_level_cache_bytes, md_table, meminfo
from .synth import FROSTT, synthetic_tensor

__all__ = ["section_kernels", "section_scaling", "Synth", "layout_bytes", "cpu_formats",
           "KERNEL_TENSORS"]

#: FROSTT shapes used by the kernels section, in this order (NELL-2 last: scaling reuses it)
KERNEL_TENSORS = ("uber", "nips", "chicago", "nell2")

#: bytes of memory per nonzero the kernels and scaling sections may need at their peak
#: (generating a synthetic tensor, its coordinates, values, one format and a subsample)
BYTES_PER_NNZ = 160


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
