"""Section ``gpu`` of the suite: every OpenCL device against all the host's cores, on the
shapes of FROSTT's NELL-2 and Uber.

For each shape (a synthetic tensor of ``benchmarks/synth.py``: Zipf(1.2)-skewed coordinates,
the real nonzero count capped by the preset, ``--max-nnz`` and memory), on the CPU backend at
the largest ``--threads`` and on every ``--device``:

- ``prepare`` (the device's copies, or the CPU's format) and MTTKRP and Φ of every mode, best
  of ``--repeat`` with the device's queue finished, and the largest relative difference from
  the CPU's result;
- the same kernels the usual PyTorch way (gather the factor rows, multiply, ``index_add_``) on
  the same GPU where PyTorch sees CUDA (``bench_opencl.torch_reference``);
- whole fits from the host tensor (``prepare`` included) of the three estimators: CPALS
  (``als_iters`` iterations), CPAPR MU (``apr_iters`` outer iterations of 10 inner ones) and
  GCP Adam (``gcp_epochs`` epochs of the default samples), ``tol=0``, the same start; the
  final fit / log-likelihood / loss estimate of each;
- pygenten's ``cp_als`` on the host (its subprocess, all cores) where it is installed.

Only on request (``--sections gpu``): at ``--full`` a NELL-2-sized tensor takes minutes on
the host.  Rows without a device are the CPU's alone (a note says so).
"""
import time

import numpy as np

from .common import md_table
from .kernels import _prepare, rel_err, time_modes
from .synth import FROSTT, synthetic_tensor

__all__ = ["section_gpu", "SHAPES", "PRESET"]

#: the shapes of the section
SHAPES = ("nell2", "uber")

#: per suite preset: nonzeros per tensor (None: the real count), iterations of the fits
PRESET = {
    "tiny": dict(nnz=3000, als_iters=2, apr_iters=1, gcp_epochs=1, gcp_steps=5),
    "quick": dict(nnz=2_000_000, als_iters=10, apr_iters=5, gcp_epochs=3, gcp_steps=None),
    "full": dict(nnz=None, als_iters=10, apr_iters=5, gcp_epochs=3, gcp_steps=None),
}


def _fits(p):
    from sktensor_fast import CPALS, CPAPR, GCP
    gcp = dict(loss="poisson", max_iter=p["gcp_epochs"])
    if p["gcp_steps"]:
        gcp["epoch_iters"] = p["gcp_steps"]
    return [("CPALS", CPALS, dict(max_iter=p["als_iters"]), "fit_"),
            ("CPAPR mu", CPAPR, dict(max_iter=p["apr_iters"], max_inner_iter=10),
             "loss_history_"),
            ("GCP adam", GCP, gcp, "loss_history_")]


def _score(est, attr):
    v = getattr(est, attr, None)
    if v is None:
        return None
    return float(np.asarray(v).reshape(-1)[-1])


def _time_fit(Est, kw, X, device, R, threads):
    import warnings
    from sktensor_fast import num_threads
    est = Est(rank=R, random_state=0, tol=0, device=device, **kw)
    with warnings.catch_warnings(), num_threads(threads):
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        est.fit(X)
        return time.perf_counter() - t, est


def section_gpu(cfg, threads, devices, mode="quick", max_nnz=None, repeat=None):
    """Run the section; returns ``(result, table)``."""
    from sktensor_fast.backends import get_backend
    from . import peers
    from .bench_opencl import torch_reference
    p = PRESET[mode]
    R = cfg["rank"]
    repeat = repeat or cfg["repeat"]
    host = max(threads)
    targets = [("cpu", host)] + [(d["device"], host) for d in devices
                                 if d["device"] != "cpu" and d.get("ok")]
    res = {"rows": [], "fits": [], "torch": [], "notes": []}
    if len(targets) == 1:
        res["notes"].append("no usable OpenCL device (--device): the CPU's rows only")
    for name in SHAPES:
        shape, real = FROSTT[name]
        nnz = real if p["nnz"] is None else min(real, p["nnz"])
        if max_nnz:
            nnz = min(nnz, int(max_nnz))
        X = synthetic_tensor(shape, nnz, seed=0)
        rng = np.random.default_rng(0)
        factors = [rng.random((s, R)) for s in shape]
        ref = None
        for device, th in targets:
            be = get_backend(device)
            T, t_prep = _prepare(be, X, device, "auto")
            got = time_modes(be, device, T, X, factors, th, repeat)
            if ref is None:
                ref = got
            for kernel, per in got.items():
                for m, (t, out) in enumerate(per):
                    res["rows"].append({
                        "tensor": name, "shape": list(shape), "nnz": int(X.nnz),
                        "device": device, "threads": th if device == "cpu" else None,
                        "kernel": kernel, "mode": m, "ms": t * 1e3,
                        "prepare_s": t_prep,
                        "rel_err_vs_cpu": rel_err(out, ref[kernel][m][1])})
            del T
        try:
            tr = torch_reference(X, factors, repeat)
        except ImportError:
            tr = None
        if tr is None:
            res["notes"].append(f"{name}: PyTorch with CUDA not available (no gather + "
                                f"index_add_ rows)")
        else:
            res["torch"].append({"tensor": name, **tr})
        for label, Est, kw, attr in _fits(p):
            for device, th in targets:
                try:
                    t, est = _time_fit(Est, kw, X, device, R, th)
                    res["fits"].append({"tensor": name, "fit": label, "device": device,
                                        "threads": th if device == "cpu" else None,
                                        "seconds": t, "n_iter": int(est.n_iter_),
                                        "score": _score(est, attr)})
                except Exception as exc:   # a device that cannot run it: say so
                    res["fits"].append({"tensor": name, "fit": label, "device": device,
                                        "error": f"{type(exc).__name__}: {exc}"})
        ok, why = peers.available("pygenten")
        if ok and mode != "tiny":
            init = [f.copy() for f in factors]
            g = peers.genten("cp_als", X, init, [p["als_iters"]], host)
            g = g[0] if isinstance(g, list) else g
            res["fits"].append({"tensor": name, "fit": "CPALS", "device": "pygenten",
                                "threads": host, **{k: v for k, v in g.items()
                                                    if k in ("seconds", "error")}})
        elif not ok:
            res["notes"].append(f"pygenten: {why}")
    res["notes"] = list(dict.fromkeys(res["notes"]))
    return res, _table(res)


def _table(res):
    krows = []
    for r in res["rows"]:
        krows.append([r["tensor"], f"{r['nnz']:,}", r["device"]
                      + (f" ({r['threads']} thr)" if r["threads"] else ""), r["kernel"],
                      r["mode"], f"{r['ms']:.3f}", f"{r['rel_err_vs_cpu']:.1e}"])
    for t in res["torch"]:
        for k in ("mttkrp", "phi"):
            for m, ms in enumerate(t[f"{k}_ms"]):
                krows.append([t["tensor"], "", "PyTorch gather + index_add_", k, m,
                              f"{ms:.3f}", ""])
    frows = [[f["tensor"], f["fit"], f["device"] + (f" ({f['threads']} thr)"
                                                    if f.get("threads") else ""),
              f"{f['seconds']:.3f}" if "seconds" in f else f.get("error", ""),
              f.get("n_iter", ""), "" if f.get("score") is None else f"{f['score']:.6g}"]
             for f in res["fits"]]
    return (md_table(["tensor", "nnz", "device", "kernel", "mode", "ms", "rel. diff vs CPU"],
                     krows) + "\n\n"
            + md_table(["tensor", "fit (from the host tensor)", "device", "seconds",
                        "iterations", "final score"], frows))


def plot(res, outdir, title):
    """Kernel milliseconds per device and shape (log scale); returns the file name or None."""
    rows = res.get("rows", [])
    if not rows:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    tensors = list(dict.fromkeys(r["tensor"] for r in rows))
    devices = list(dict.fromkeys(r["device"] for r in rows))
    torch = {t["tensor"]: t for t in res.get("torch", [])}
    labels = devices + (["PyTorch"] if torch else [])
    w = 0.8 / len(labels)
    for ax, kernel in zip(axes, ("mttkrp", "phi")):
        for i, d in enumerate(labels):
            vals = []
            for t in tensors:
                if d == "PyTorch":
                    ms = torch.get(t, {}).get(f"{kernel}_ms") or [np.nan]
                else:
                    ms = [r["ms"] for r in rows if r["tensor"] == t and r["device"] == d
                          and r["kernel"] == kernel] or [np.nan]
                vals.append(float(np.mean(ms)))
            ax.bar(np.arange(len(tensors)) + i * w, vals, w, label=d, color=f"C{i}")
        ax.set_xticks(np.arange(len(tensors)) + w * (len(labels) - 1) / 2, tensors)
        ax.set_yscale("log")
        ax.set_title(f"{kernel}: ms per mode (mean of the modes)", fontsize=9)
    axes[0].set_ylabel("ms")
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    name = "gpu.png"
    fig.savefig(outdir / name, dpi=110)
    plt.close(fig)
    return name
