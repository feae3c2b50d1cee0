"""Whole fits of sktensor_fast and of its peers, run the same way and judged the same way.

Each ``run_*`` function fits one library from a given initial model with a fixed number of
iterations (stopping tolerances off) and returns a dict with the wall time, the iterations
run and the final model (``weights``, ``factors``).  :func:`judge` then evaluates every final
model with one exact, sparse formula per problem, so that a faster library cannot hide a worse
answer:

- CP-ALS: fit ``1 − ‖X − M‖ / ‖X‖`` (``‖X − M‖² = ‖X‖² − 2⟨X, M⟩ + ‖M‖²``);
- CP-APR: Poisson log-likelihood ``Σ_nz x log m − Σ_all m``;
- GCP (Poisson loss): ``Σ_all m − Σ_nz x log(m + 1e-10)`` (pyttb's Poisson objective).

pygenten runs in a subprocess (``python -m benchmarks.peers --genten-worker FILE``), because
its Kokkos runtime reads ``OMP_NUM_THREADS`` once at import and may crash while finalising.
"""
import contextlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

if __package__ in (None, ""):   # run as a script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sktensor_fast import SparseTensor, num_threads  # noqa: E402
from sktensor_fast.kruskal import KruskalTensor  # noqa: E402

GCP_EPS = 1e-10


# ------------------------------------------------------------------ judging
def model_values(X, weights, factors):
    return KruskalTensor(weights, factors).values_at(X.subs).astype(np.float64)


def cp_fit(X, weights, factors):
    """1 − ‖X − M‖ / ‖X‖, exact, without forming a dense tensor."""
    K = KruskalTensor(weights, factors)
    vals = X.vals.astype(np.float64)
    nx2 = float(vals @ vals)
    inner = float(vals @ model_values(X, weights, factors))
    res2 = abs(nx2 - 2 * inner + K.norm() ** 2)
    return 1.0 - np.sqrt(res2) / np.sqrt(nx2)


def _model_sum(weights, factors):
    tot = np.asarray(weights, dtype=np.float64).copy()
    for f in factors:
        tot *= np.asarray(f, dtype=np.float64).sum(axis=0)
    return float(tot.sum())


def poisson_loglik(X, weights, factors):
    """Σ_nz x log m − Σ_all m (−inf when a nonzero has model value 0)."""
    m = model_values(X, weights, factors)
    with np.errstate(divide="ignore", invalid="ignore"):
        data = float(np.dot(X.vals.astype(np.float64), np.log(m)))
    return data - _model_sum(weights, factors)


def gcp_poisson_loss(X, weights, factors):
    """Σ_all m − Σ_nz x log(m + 1e-10): the Poisson GCP objective over every entry."""
    m = model_values(X, weights, factors)
    return _model_sum(weights, factors) - float(np.dot(X.vals.astype(np.float64),
                                                       np.log(m + GCP_EPS)))


JUDGES = {"cp_als": ("fit", cp_fit), "cp_apr": ("log_likelihood", poisson_loglik),
          "gcp_lbfgsb": ("loss", gcp_poisson_loss), "gcp_adam": ("loss", gcp_poisson_loss)}


def judge(problem, X, result):
    """Add the problem's common quality measure of ``result``'s model to it (in place)."""
    key, fn = JUDGES[problem]
    if "weights" in result:
        result[key] = float(fn(X, result.pop("weights"), result.pop("factors")))
        result["measure"] = key
    return result


def available(module):
    """(True, version) when ``module`` can be found, else (False, reason); never imports it."""
    try:
        from importlib import metadata
        dist = {"tensorly": "tensorly", "pyttb": "pyttb", "pygenten": "pygenten"}.get(module,
                                                                                      module)
        return True, metadata.version(dist)
    except Exception:
        pass
    if importlib.util.find_spec(module) is None:
        return False, f"{module} is not installed"
    return True, "unknown"


@contextlib.contextmanager
def _quiet():
    """Silence warnings and pyttb's log messages (it logs through the root logger)."""
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _kt(M):
    """weights and factors of a pyttb ktensor as float64 arrays."""
    return (np.asarray(M.weights, dtype=np.float64),
            [np.asarray(f, dtype=np.float64) for f in M.factor_matrices])


# ------------------------------------------------------------------ CP-ALS
def als_ours(X, init, iters, threads, fmt="auto", device="cpu"):
    from sktensor_fast import CPALS
    est = CPALS(rank=init[0].shape[1], init=[f.copy() for f in init], max_iter=iters, tol=0.0,
                format=fmt, device=device)
    with num_threads(threads):
        dt, _ = _timed(lambda: est.fit(X))
    return {"seconds": dt, "iters": int(est.n_iter_), "weights": est.weights_,
            "factors": est.factors_, "own_measure": float(est.fit_)}


def als_pyttb(X, init, iters, threads):
    import pyttb as ttb
    Xp = X.to_pyttb()
    K = ttb.ktensor([np.asfortranarray(f) for f in init], copy=True)
    with _quiet():
        dt, (M, _, out) = _timed(lambda: ttb.cp_als(Xp, init[0].shape[1], stoptol=0.0,
                                                    maxiters=iters, init=K, printitn=0))
    w, f = _kt(M)
    return {"seconds": dt, "iters": iters, "weights": w, "factors": f,
            "own_measure": float(out["fit"])}


def als_tensorly(Xdense, init, iters, threads):
    import tensorly as tl
    from tensorly.cp_tensor import CPTensor
    from tensorly.decomposition import parafac
    tl.set_backend("numpy")
    R = init[0].shape[1]
    start = CPTensor((np.ones(R), [f.copy() for f in init]))
    dt, cp = _timed(lambda: parafac(Xdense, R, n_iter_max=iters, init=start, tol=0,
                                    normalize_factors=False, linesearch=False))
    w, f = cp
    return {"seconds": dt, "iters": iters, "weights": np.asarray(w, dtype=np.float64),
            "factors": [np.asarray(a, dtype=np.float64) for a in f]}


# ------------------------------------------------------------------ CP-APR
def apr_ours(X, init, iters, inner, threads, fmt="auto", device="cpu"):
    from sktensor_fast import CPAPR
    est = CPAPR(rank=init[0].shape[1], init=[f.copy() for f in init], max_iter=iters,
                max_inner_iter=inner, tol=0.0, format=fmt, device=device)
    with num_threads(threads):
        dt, _ = _timed(lambda: est.fit(X))
    return {"seconds": dt, "iters": int(est.n_iter_), "weights": est.weights_,
            "factors": est.factors_, "own_measure": float(est.log_likelihood_)}


def apr_pyttb(X, init, iters, inner, threads):
    import pyttb as ttb
    Xp = ttb.sptensor(X.subs, X.vals.astype(np.float64)[:, None], X.shape)
    K = ttb.ktensor([np.asfortranarray(f) for f in init], copy=True)
    with _quiet():
        dt, (M, _, out) = _timed(lambda: ttb.cp_apr(Xp, init[0].shape[1], algorithm="mu",
                                                    init=K, maxiters=iters,
                                                    maxinneriters=inner, stoptol=0.0,
                                                    printitn=0))
    w, f = _kt(M)
    return {"seconds": dt, "iters": iters, "weights": w, "factors": f,
            "own_measure": float(out["obj"])}


# ------------------------------------------------------------------ GCP
def gcp_start(init):
    """The initial factors as pyttb's gcp_opt uses them (``normalize("all")``: weights 1)."""
    import pyttb as ttb
    K = ttb.ktensor([np.asfortranarray(f) for f in init], copy=True).normalize("all")
    return [np.ascontiguousarray(f, dtype=np.float64) for f in K.factor_matrices]


def gcp_lbfgsb_ours(X, start, iters, threads):
    from sktensor_fast import GCP
    est = GCP(rank=start[0].shape[1], loss="poisson", solver="lbfgsb",
              init=[f.copy() for f in start], max_iter=iters, tol=1e-12)
    with num_threads(threads):
        dt, _ = _timed(lambda: est.fit(X))
    return {"seconds": dt, "iters": int(est.n_iter_), "weights": est.weights_,
            "factors": est.factors_, "own_measure": float(est.loss_)}


def gcp_lbfgsb_pyttb(X, start, iters, threads):
    import pyttb as ttb
    from pyttb.gcp.handles import Objectives
    from pyttb.gcp.optimizers import LBFGSB
    dense = ttb.tensor(X.to_dense())
    # the stopping rules of GCP(solver="lbfgsb", tol=1e-12): scipy's ftol = tol * 1e-4 and its
    # default gtol (pyttb would otherwise stop at a gradient of 1e-4 * number of entries)
    opt = LBFGSB(maxiter=iters, factr=1e-12 * 1e-4 / np.finfo(float).eps, pgtol=1e-5,
                 maxfun=20 * iters + 20)
    with _quiet():
        dt, (M, _, info) = _timed(lambda: ttb.gcp_opt(dense, start[0].shape[1],
                                                      Objectives.POISSON, opt,
                                                      init=[np.asfortranarray(f) for f in start],
                                                      printitn=0))
    w, f = _kt(M)
    return {"seconds": dt, "iters": int(info.get("nit", iters)), "weights": w, "factors": f,
            "own_measure": float(info["final_f"])}


def gcp_counts(X):
    """pyttb's default stratified sample counts: ((p, q) per step, (p, q) for the loss)."""
    g = max(1000, -(-3 * X.nnz // 1000))
    f = max(100_000, -(-X.nnz // 100))
    zeros = X.size - X.nnz
    return (min(g, X.nnz), min(g, X.nnz, zeros)), (min(f, X.nnz), min(f, X.nnz, zeros))


def gcp_adam_ours(X, start, epochs, epoch_iters, threads):
    from sktensor_fast import GCP
    n_grad, n_loss = gcp_counts(X)
    est = GCP(rank=start[0].shape[1], loss="poisson", solver="adam", sampler="stratified",
              n_samples_grad=n_grad, n_samples_loss=n_loss, epoch_iters=epoch_iters,
              max_iter=epochs, tol=0.0, max_fails=epochs, random_state=0,
              init=[f.copy() for f in start])
    with num_threads(threads):
        dt, _ = _timed(lambda: est.fit(X))
    return {"seconds": dt, "iters": int(est.n_iter_), "weights": est.weights_,
            "factors": est.factors_, "own_measure": float(est.loss_)}


def gcp_adam_pyttb(X, start, epochs, epoch_iters, threads):
    import pyttb as ttb
    from pyttb.gcp.handles import Objectives
    from pyttb.gcp.optimizers import Adam
    from pyttb.gcp.samplers import GCPSampler, StratifiedCount
    n_grad, n_loss = gcp_counts(X)
    sp = X.to_pyttb()
    sampler = GCPSampler(sp, function_samples=StratifiedCount(n_loss[1], n_loss[0]),
                         gradient_samples=StratifiedCount(n_grad[1], n_grad[0]))
    opt = Adam(epoch_iters=epoch_iters, max_iters=epochs, max_fails=epochs, printitn=0)
    np.random.seed(0)
    with _quiet():
        dt, (M, _, info) = _timed(lambda: ttb.gcp_opt(sp, start[0].shape[1], Objectives.POISSON,
                                                      opt, init=[np.asfortranarray(f)
                                                                 for f in start],
                                                      sampler=sampler, printitn=0))
    w, f = _kt(M)
    # (pyttb's f_est_trace stops one epoch short of the last, so no own measure here)
    return {"seconds": dt, "iters": int(info.get("n_epoch", epochs - 1)) + 1, "weights": w,
            "factors": f}


# ------------------------------------------------------------------ GenTen
def genten(problem, X, init, iters_list, threads, timeout=600):
    """Run pygenten's ``cp_als`` in a subprocess with ``OMP_NUM_THREADS=threads``, once per
    entry of ``iters_list``; returns a list of result dicts (or one dict with ``error``)."""
    ok, why = available("pygenten")
    if not ok:
        return {"error": why}
    fd, path = tempfile.mkstemp(suffix=".npz")
    os.close(fd)
    try:
        np.savez(path, subs=X.subs, vals=X.vals, shape=np.asarray(X.shape),
                 iters=np.asarray(iters_list), **{f"init{k}": f for k, f in enumerate(init)})
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        cmd = [sys.executable, "-m", "benchmarks.peers", "--genten-worker", problem, path]
        try:
            out = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"pygenten took more than {timeout} s"}
        for line in out.stdout.splitlines():
            if line.startswith("GENTEN-RESULT "):
                res = json.loads(line.split(" ", 1)[1])
                for r in res:
                    r["weights"] = np.asarray(r["weights"])
                    r["factors"] = [np.asarray(f) for f in r["factors"]]
                return res
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        return {"error": "pygenten failed: " + " | ".join(tail)}
    finally:
        os.unlink(path)


def _genten_worker(problem, path):
    import pyttb as ttb
    import pygenten as gt
    d = np.load(path)
    X = SparseTensor(d["subs"], d["vals"], tuple(int(s) for s in d["shape"]))
    init = [d[f"init{k}"] for k in range(X.ndim)]
    Xp = X.to_pyttb()
    res = []
    for iters in d["iters"]:
        K = ttb.ktensor([np.asfortranarray(f) for f in init], copy=True)
        if problem != "cp_als":
            raise ValueError(problem)
        dt, (u, _, perf) = _timed(lambda: gt.cp_als(Xp, rank=init[0].shape[1],
                                                    maxiters=int(iters), tol=0.0, init=K,
                                                    printitn=0))
        w, f = _kt(u)
        res.append({"seconds": dt, "iters": int(iters), "weights": w.tolist(),
                    "factors": [a.tolist() for a in f],
                    "own_measure": float(perf.lastEntry().fit) if perf.size() else None})
    print("GENTEN-RESULT " + json.dumps(res), flush=True)
    sys.stdout.flush()
    os._exit(0)  # Kokkos may crash while finalising at interpreter exit


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--genten-worker":
        _genten_worker(sys.argv[2], sys.argv[3])
    else:
        print(__doc__)
