"""Two checkouts of sktensor_fast side by side: CPU kernels and whole fits, alternating processes.

    python benchmarks/bench_ab.py --a /path/to/old/checkout --b . --rounds 5 --out ab.json

Each checkout must have its compiled extensions built in place (``python setup.py build_ext
--inplace``).  Every round runs one fresh process per checkout, in the order a, b, then b, a in
the next round (so that neither always goes first).  A process imports ``sktensor_fast`` from its
checkout only, builds the same tensors (this script's synthetic generator and the real tensors
of ``../shared/data``), and times with the same code:

- kernels: MTTKRP and CP-APR's Phi of every mode, COO and ALTO, best of ``--calls`` calls
  after one untimed call, at each ``--threads`` count;
- fits: CP-ALS (10 iterations), CP-APR MU (5 outer iterations), GCP Adam (3 epochs) with
  ``tol=0``, best of ``--fit-repeat``.

The report gives, per measurement, the median over rounds of each process's best time and the
ratio b / a; results (factors of the fits, kernel outputs) are compared bit for bit.  Both
processes get the same environment, so the OpenMP waiting policy, ``OMP_NUM_THREADS`` and the
like apply to both (set them on the command line to compare under a given policy).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"

#: synthetic tensors: (name, shape, nnz), FROSTT shapes with Zipf(1.2) coordinates
SYNTH = [("uber-1m", (183, 24, 1140, 1717), 1_000_000),
         ("nell2-1m", (12092, 9184, 28818), 1_000_000)]
REAL = ["flights-routes", "rails-commits", "flights-carrier-dest-date-hour"]
FITS = {
    "cpals": ("CPALS", dict(max_iter=10, tol=0.0, random_state=0)),
    "cpapr-mu": ("CPAPR", dict(solver="mu", max_iter=5, tol=0.0, random_state=0)),
    "gcp-adam": ("GCP", dict(loss="poisson", solver="adam", epoch_iters=20, max_iter=3,
                             max_fails=3, tol=0.0, random_state=0)),
}


def _digest(*arrays):
    h = hashlib.sha1()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def child(spec):
    import warnings
    warnings.simplefilter("ignore")
    import sktensor_fast as sk
    from sktensor_fast.backends import get_backend
    sys.path.insert(1, str(ROOT))
    from benchmarks.synth import synthetic_tensor
    from sktensor_fast.io import load_tns
    tensors = [(n, lambda s=s, z=z: synthetic_tensor(s, z, seed=0)) for n, s, z in SYNTH]
    tensors += [(n, lambda n=n: load_tns(DATA / n / "tensor.tns.gz")) for n in REAL
                if (DATA / n / "tensor.tns.gz").exists()]
    be = get_backend("cpu")
    out = {"checkout": str(Path(sk.__file__).resolve().parents[1]), "kernels": [], "fits": []}
    R = spec["rank"]
    for name, load in tensors:
        X = load()
        rng = np.random.default_rng(0)
        U = [rng.random((s, R)) for s in X.shape]
        for fmt in ("coo", "alto"):
            T = be.prepare(X, fmt)
            for nt in spec["threads"]:
                with sk.num_threads(nt):
                    for m in range(X.ndim):
                        o = np.empty((X.shape[m], R))
                        for kernel in ("mttkrp", "phi"):
                            def call():
                                if kernel == "mttkrp":
                                    return be.mttkrp(T, U, m, out=o)
                                return be.phi(T, U, m, U[m], 1e-10, out=o)
                            call()
                            best = np.inf
                            for _ in range(spec["calls"]):
                                t = time.perf_counter()
                                call()
                                best = min(best, time.perf_counter() - t)
                            out["kernels"].append({"tensor": name, "format": fmt, "threads": nt,
                                                   "mode": m, "kernel": kernel, "seconds": best,
                                                   "digest": _digest(o)})
        if X.nnz > spec["fit_max_nnz"]:
            continue
        for nt in spec["threads"]:
            for fit, (cls_name, kw) in FITS.items():
                cls = getattr(sk, cls_name)
                best, est = np.inf, None
                with sk.num_threads(nt):
                    cls(rank=8, **{**kw, "max_iter": 1}).fit(X)
                    for _ in range(spec["fit_repeat"]):
                        est = cls(rank=8, **kw)
                        t = time.perf_counter()
                        est.fit(X)
                        best = min(best, time.perf_counter() - t)
                out["fits"].append({"tensor": name, "fit": fit, "threads": nt, "seconds": best,
                                    "digest": _digest(est.weights_, *est.factors_)})
    print("RESULT " + json.dumps(out), flush=True)


def run_one(checkout, spec):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(checkout) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                           json.dumps(spec)], cwd=str(checkout), env=env, capture_output=True,
                          text=True)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"{checkout}: exit {proc.returncode}: {proc.stderr[-3000:]}")
    return json.loads(line[-1][len("RESULT "):])


def summarize(runs):
    rows = []
    for part, keys in (("kernels", ("tensor", "format", "threads", "mode", "kernel")),
                       ("fits", ("tensor", "fit", "threads"))):
        groups = {}
        for side in ("a", "b"):
            for r in runs[side]:
                for x in r[part]:
                    g = groups.setdefault(tuple(x[k] for k in keys), {"a": [], "b": [],
                                                                      "digests": {}})
                    g[side].append(x["seconds"])
                    g["digests"].setdefault(side, set()).add(x["digest"])
        for key, g in groups.items():
            if not g["a"] or not g["b"]:
                continue
            a, b = float(np.median(g["a"])), float(np.median(g["b"]))
            rows.append({"part": part, **dict(zip(keys, key)), "a": a, "b": b, "ratio": b / a,
                         "same_bits": g["digests"].get("a") == g["digests"].get("b")
                         and len(g["digests"]["a"]) == 1})
    return rows


def _commit(checkout):
    """The git commit of a checkout (with '+changes' when its tracked files differ), or None."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=checkout, capture_output=True, text=True).stdout.strip()
        return head + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--a", required=False, help="the first checkout (e.g. the old one)")
    p.add_argument("--b", default=str(ROOT), help="the second checkout (default: this one)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--fit-repeat", type=int, default=3)
    p.add_argument("--fit-max-nnz", type=int, default=400_000)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--out", default="bench_out/ab.json")
    args = p.parse_args(argv)
    if args.child is not None:
        return child(json.loads(args.child))
    if not args.a:
        p.error("--a is required")
    spec = {"threads": args.threads, "calls": args.calls, "fit_repeat": args.fit_repeat,
            "fit_max_nnz": args.fit_max_nnz, "rank": args.rank}
    runs = {"a": [], "b": []}
    for rnd in range(args.rounds):
        order = ("a", "b") if rnd % 2 == 0 else ("b", "a")
        for side in order:
            t = time.time()
            runs[side].append(run_one(Path(getattr(args, side)).resolve(), spec))
            print(f"round {rnd + 1}: {side} {time.time() - t:.1f} s, load "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
    rows = summarize(runs)
    for part in ("kernels", "fits"):
        sub = [r for r in rows if r["part"] == part]
        if not sub:
            continue
        for nt in sorted({r["threads"] for r in sub}):
            rs = np.array([r["ratio"] for r in sub if r["threads"] == nt])
            print(f"{part}, {nt} thread(s): b / a geometric mean {np.exp(np.log(rs).mean()):.3f},"
                  f" median {np.median(rs):.3f}, range {rs.min():.3f}-{rs.max():.3f} "
                  f"({len(rs)} measurements)")
        for r in sub:
            key = " ".join(str(r[k]) for k in r if k not in ("part", "a", "b", "ratio",
                                                              "same_bits"))
            print(f"  {key:58s} {r['a'] * 1e3:9.3f} ms -> {r['b'] * 1e3:9.3f} ms "
                  f"({r['ratio']:.3f}){'' if r['same_bits'] else '  bits differ'}")
    res = {"command": "python benchmarks/bench_ab.py " + " ".join(sys.argv[1:] if argv is None
                                                                  else argv),
           "a": str(Path(args.a).resolve()), "b": str(Path(args.b).resolve()),
           "a_commit": _commit(args.a), "b_commit": _commit(args.b),
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "spec": spec,
           "env": {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "GOMP_", "KMP_"))},
           "rows": rows, "runs": runs}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
