"""The ``fits`` section of the suite: whole CP-ALS, CP-APR and GCP fits of sktensor_fast and
of its peers from the same start, timed per iteration and judged by one exact formula
(``benchmarks/peers.py``).
"""
import numpy as np

import sktensor_fast
from sktensor_fast import load_tns

from . import peers
from .common import DATA_DIR, fmt_num, md_table
from .kernels import cpu_formats
from .synth import FROSTT, synthetic_tensor

__all__ = ["section_fits", "SYNTHETIC_FITS"]

#: small fit tensors that are not files: (shape, nnz)
SYNTHETIC_FITS = {"synthetic-tiny": ((12, 10, 8), 300), "synthetic-small": ((40, 30, 20), 4000),
                  "nell2-1m": (FROSTT["nell2"][0], 1_000_000)}


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
