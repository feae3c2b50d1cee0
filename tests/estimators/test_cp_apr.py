"""CPAPR: kernels against NumPy, the algorithms against pyttb, the estimator contract."""
import sys
import warnings

import numpy as np
import pytest

from sktensor_fast import CPAPR, KruskalTensor, SparseTensor, num_threads
from sktensor_fast.backends import get_backend
from sktensor_fast.backends.cpu.formats import CooFormat

from _apr_reference import row_solve_ref
from _reference import fits_to_compare, random_sparse

@pytest.fixture(autouse=True)
def _one_thread_by_default():
    """The inputs here are tiny: with two OpenMP threads on a busy two-core machine, thread
    hand-offs dominate (10-50x slower).  Tests about threads ask for them explicitly."""
    with num_threads(1):
        yield


ROW_PARAMS = {"tol": 1e-4, "max_inner": 10, "eps_div_zero": 1e-10, "eps_active": 1e-8,
              "mu0": 1e-5, "lbfgs_mem": 3}


def count_tensor(shape, nnz, seed):
    return random_sparse(shape, nnz, np.random.default_rng(seed), counts=True)


def planted(shape, rank, total, seed):
    """Poisson counts drawn from a known nonnegative model with sparse-ish factors."""
    rng = np.random.default_rng(seed)
    factors = []
    for s in shape:
        f = rng.random((s, rank)) ** 4          # peaked columns: components are distinct
        factors.append(f / f.sum(axis=0))
    weights = np.full(rank, total / rank) * np.linspace(1.0, 2.0, rank)
    truth = KruskalTensor(weights, factors)
    X = SparseTensor.from_dense(rng.poisson(truth.full()).astype(float))
    return X, truth


# ---------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("shape", [(25, 9), (14, 10, 8), (9, 6, 7, 5), (6, 5, 4, 3, 4)])
@pytest.mark.parametrize("rank", [1, 3, 8])
@pytest.mark.parametrize("method", ["pdnr", "pqnr"])
def test_row_solver_matches_numpy(shape, rank, method):
    X = count_tensor(shape, 250, hash((shape, rank)) % 2**32)
    rng = np.random.default_rng(rank)
    factors = [rng.random((s, rank)) for s in shape]
    T = CooFormat(X)
    be = get_backend("cpu")
    for mode in range(len(shape)):
        B0 = factors[mode] * 5.0
        ref, kkt, inner, changed = row_solve_ref(X, factors, mode, B0, method, ROW_PARAMS)
        for threads in (1, 2):
            B = B0.copy()
            with num_threads(threads):
                res = be.apr.row_solve(T, factors, mode, B, method, ROW_PARAMS)
            np.testing.assert_allclose(B, ref, rtol=1e-9, atol=1e-12)
            assert res["kkt"] == pytest.approx(kkt.max(), rel=1e-9)
            assert res["n_inner"] == inner.sum()
            assert res["n_changed"] == changed.sum()


@pytest.mark.parametrize("method", ["pdnr", "pqnr"])
def test_row_solver_uncached_rows_and_float32(method, monkeypatch):
    """Rows too long for the Khatri-Rao cache recompute it on the fly; float32 data works."""
    from sktensor_fast.backends.cpu import _cpapr
    X = count_tensor((7, 12, 9), 400, 5)
    rng = np.random.default_rng(0)
    factors = [rng.random((s, 4)) for s in X.shape]
    T = CooFormat(X)
    be = get_backend("cpu")
    ref = row_solve_ref(X, factors, 0, factors[0], method, ROW_PARAMS)[0]
    monkeypatch.setattr(_cpapr, "PI_CACHE_ELEMS", 40)   # rows with > 10 nonzeros: uncached
    assert np.diff(T.row_ptr(0)).max() * 4 > 40
    B = factors[0].copy()
    be.apr.row_solve(T, factors, 0, B, method, ROW_PARAMS)
    np.testing.assert_allclose(B, ref, rtol=1e-9, atol=1e-12)
    X32 = SparseTensor(X.subs, X.vals, X.shape, dtype=np.float32)
    B32 = factors[0].astype(np.float32)
    be.apr.row_solve(CooFormat(X32), [f.astype(np.float32) for f in factors], 0, B32, method,
                     ROW_PARAMS)
    assert B32.dtype == np.float32
    np.testing.assert_allclose(B32, ref, rtol=1e-3, atol=1e-5)


def test_row_ptr_and_elementwise_primitives():
    X = count_tensor((10, 8, 6), 120, 1)
    T = CooFormat(X)
    for mode in range(3):
        ptr = T.row_ptr(mode)
        assert ptr is T.row_ptr(mode)                 # cached
        order = T.perms[mode] if mode else np.arange(X.nnz)
        for i in range(X.shape[mode]):
            assert np.all(X.subs[order[ptr[i]:ptr[i + 1]], mode] == i)
        assert ptr[-1] == X.nnz
    be = get_backend("cpu")
    rng = np.random.default_rng(0)
    A = rng.random((30, 4))
    A[rng.random(A.shape) < 0.3] = 1e-12
    Phi = rng.random((30, 4)) * 2
    shift = (Phi > 1) & (A < 1e-10)
    expect = np.where(shift, A + 0.5, A)
    assert be.apr.shift_inadmissible(A, Phi, 1e-10, 0.5) == np.count_nonzero(shift) > 0
    np.testing.assert_array_equal(A, expect)
    assert be.apr.kkt_violation(A, Phi) == np.max(np.abs(np.minimum(A, 1 - Phi)))
    B = A.copy()
    assert be.apr.multiply_(B, Phi) is B
    np.testing.assert_array_equal(B, A * Phi)
    from sktensor_fast.backends.base import AprKernels
    moving = np.max(np.abs(np.minimum(A, 1 - Phi)), axis=1) >= 0.3
    expect = np.where(moving[:, None], A * Phi, A)
    B, B_host = A.copy(), A.copy()
    assert be.apr.mu_rows_(B, Phi, 0.3) == np.count_nonzero(moving) > 0
    assert AprKernels(be).mu_rows_(B_host, Phi, 0.3) == np.count_nonzero(moving)  # host
    np.testing.assert_array_equal(B, expect)
    np.testing.assert_array_equal(B_host, expect)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mu_step_is_kkt_then_multiply(dtype):
    """mu_step_ (the CPU's one compiled pass) gives the KKT violation and the update of the
    two NumPy steps, bit for bit: B *= Φ unless the violation is below tol, NaN propagated
    (and then B is updated, as NaN < tol is false); other layouts take the two steps."""
    from sktensor_fast.backends.base import AprKernels
    be = get_backend("cpu")
    rng = np.random.default_rng(1)
    A = (rng.random((40, 5)) * 1.5).astype(dtype)
    A[rng.random(A.shape) < 0.2] = 0
    Phi = (rng.random((40, 5)) * 2).astype(dtype)
    kkt = np.max(np.abs(np.minimum(A, 1 - Phi)))
    for tol, moves in ((0.0, True), (float(kkt), True), (float(kkt) * 1.01, False)):
        B, B_host = A.copy(), A.copy()
        got = be.apr.mu_step_(B, Phi, tol)
        assert got == be.apr.kkt_violation(A, Phi) == kkt and isinstance(got, float)
        assert AprKernels.mu_step_(be.apr, B_host, Phi, tol) == got        # the two steps
        np.testing.assert_array_equal(B, A * Phi if moves else A)
        np.testing.assert_array_equal(B, B_host)
    for where in ((3, 2), (39, 4)):
        for arr in ("B", "Phi"):
            B, P = A.copy(), Phi.copy()
            (B if arr == "B" else P)[where] = np.nan
            with np.errstate(invalid="ignore"):
                ref = B * P
            assert np.isnan(be.apr.mu_step_(B, P, 1e300))
            np.testing.assert_array_equal(B, ref)
    # a transposed (F-ordered) B and a Φ of another dtype: the two NumPy steps
    B = np.asfortranarray(A)
    assert be.apr.mu_step_(B, Phi, 0.0) == kkt
    np.testing.assert_array_equal(B, A * Phi)
    B = A.copy()
    assert be.apr.mu_step_(B, Phi.astype(np.float16), 0.0) == np.max(
        np.abs(np.minimum(A, 1 - Phi.astype(np.float16))))
    assert be.apr.mu_step_(np.zeros((0, 5), dtype), np.zeros((0, 5), dtype), 0.0) == 0.0
    B = A.copy()                                          # Φ the same array as B
    assert be.apr.mu_step_(B, B, 0.0) == np.max(np.abs(np.minimum(A, 1 - A)))
    np.testing.assert_array_equal(B, A * A)
    # infinities: the exact pass (np.minimum's rules)
    B, P = A.copy(), Phi.copy()
    B[0, 0], P[1, 1], P[2, 2] = np.inf, np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        ref = np.max(np.abs(np.minimum(B, 1 - P)))
    assert be.apr.mu_step_(B.copy(), P, 0.0) == ref
    with pytest.raises(ValueError, match="Phi has shape"):
        be.apr.mu_step_(A.copy(), Phi[:-1], 0.0)
    with pytest.raises((TypeError, ValueError), match="tol"):
        be.apr.mu_step_(A.copy(), Phi, "x")


def test_mu_fit_same_with_fused_and_separate_steps(monkeypatch):
    """A CP-APR MU fit is the same bits whether each inner step is the compiled pass or the
    two NumPy steps."""
    from sktensor_fast.backends.base import AprKernels
    from sktensor_fast.backends.cpu.backend import CpuAprKernels
    rng = np.random.default_rng(2)
    X = random_sparse((30, 20, 10), 800, rng, counts=True)

    def fit():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return CPAPR(rank=4, solver="mu", max_iter=4, max_inner_iter=5, tol=1e-6,
                         random_state=0).fit(X)
    fused = fit()
    monkeypatch.setattr(CpuAprKernels, "_mu_step_", AprKernels._mu_step_)
    separate = fit()
    np.testing.assert_array_equal(fused.weights_, separate.weights_)
    for a, b in zip(fused.factors_, separate.factors_):
        np.testing.assert_array_equal(a, b)
    assert fused.log_likelihood_ == separate.log_likelihood_


@pytest.mark.parametrize("fmt", ["coo", "alto"])
@pytest.mark.parametrize("shape,rank", [((10, 8, 6), 4), ((7, 5, 4, 3), 16), ((40, 30), 3)])
def test_poisson_data_term(fmt, shape, rank):
    """Σ x log(max(m, eps)) formed on the fly equals NumPy on the model values, for 1 and 2
    threads (bitwise equal to each other), with a model that is exactly zero at a nonzero."""
    from sktensor_fast import num_threads
    X = count_tensor(shape, 25 * len(shape) * 4, 3)
    be = get_backend("cpu")
    T = be.prepare(X, fmt)
    rng = np.random.default_rng(1)
    w = rng.random(rank) + 0.5
    F = [rng.random((s, rank)) + 0.01 for s in shape]

    def ref(F, eps):
        m = np.einsum("r,jr->j", w, np.prod([F[k][X.subs[:, k]] for k in range(len(shape))],
                                            axis=0))
        with np.errstate(divide="ignore"):
            return np.sum(X.vals * np.log(np.maximum(m, eps)))

    with num_threads(1):
        one = be.poisson_data_term(T, w, F)
    with num_threads(2):
        two = be.poisson_data_term(T, w, F)
    assert one == two
    assert one == pytest.approx(ref(F, 0.0), rel=1e-12)
    F[0][X.subs[0, 0]] = 0.0                      # the model vanishes at a nonzero
    assert be.poisson_data_term(T, w, F) == -np.inf
    assert be.poisson_data_term(T, w, F, eps=1e-10) == pytest.approx(ref(F, 1e-10), rel=1e-12)
    with pytest.raises(ValueError, match="weights"):
        be.poisson_data_term(T, w[:-1], F)


# ---------------------------------------------------------------------------- pyttb
def _pyttb_fit(X, init, algorithm, **kw):
    ttb = pytest.importorskip("pyttb")
    Xp = ttb.sptensor(X.subs, X.vals[:, None], X.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        M, _, out = ttb.cp_apr(Xp, init[0].shape[1], algorithm=algorithm,
                               init=ttb.ktensor([f.copy() for f in init]), printitn=0, **kw)
    return M, out


def _same_start(shape, rank, nnz, seed):
    X = count_tensor(shape, nnz, seed)
    rng = np.random.default_rng(seed + 100)
    return X, [rng.random((s, rank)) for s in shape]


@pytest.mark.parametrize("shape,rank,seed", [((12, 9, 7), 3, 0), ((8, 7, 6, 5), 4, 1)])
def test_mu_matches_pyttb(shape, rank, seed):
    """No inadmissible-zero shift (kappa_tol=0): the algorithms coincide step for step."""
    X, init = _same_start(shape, rank, 200, seed)
    M, out = _pyttb_fit(X, init, "mu", maxiters=15, maxinneriters=10, kappatol=0.0)
    est = CPAPR(rank, solver="mu", init=init, max_iter=15, kappa_tol=0.0).fit(X)
    assert est.n_iter_ == len(out["kktViolations"])
    assert est.n_inner_iter_ == out["nTotalIters"]
    assert est.log_likelihood_ == pytest.approx(out["obj"], rel=1e-8)
    assert est.kkt_violation_ == pytest.approx(out["kktViolations"][-1], rel=1e-6)
    # pyttb's log-likelihood leaves the weights absorbed in its first factor
    np.testing.assert_allclose(est.weights_, M.factor_matrices[0].sum(axis=0), rtol=1e-6)


def test_mu_shift_plumbing_matches_pyttb(monkeypatch):
    """pyttb 1.8.6 shifts entries where Φ > 0 (the Tensor Toolbox, the paper and CPAPR use
    Φ > 1).  With our primitive swapped for pyttb's rule, shifts happen at the same place in the
    iteration and the results agree; with the right rule CPAPR converges where pyttb cannot."""
    from sktensor_fast.backends.cpu.backend import CpuAprKernels

    def pyttb_rule(self, A, Phi, kappa_tol, kappa):
        V = (Phi > 0) & (A < kappa_tol)
        A[V] += kappa
        return int(V.sum())

    X, init = _same_start((12, 9, 7), 3, 150, 5)
    M, out = _pyttb_fit(X, init, "mu", maxiters=40)
    est_ok = CPAPR(3, solver="mu", init=init, max_iter=40).fit(X)
    with monkeypatch.context() as mp:
        mp.setattr(CpuAprKernels, "_shift_inadmissible", pyttb_rule)
        est = CPAPR(3, solver="mu", init=init, max_iter=40).fit(X)
    assert est.n_inner_iter_ == out["nTotalIters"]
    assert est.log_likelihood_ == pytest.approx(out["obj"], rel=1e-8)
    assert est_ok.n_iter_ < 40 and est.n_iter_ == 40     # converged / still shifting


@pytest.mark.parametrize("inexact", [True, False])
@pytest.mark.parametrize("shape,rank,seed", [((12, 9, 7), 3, 0), ((8, 7, 6, 5), 4, 1)])
def test_pdnr_matches_pyttb(shape, rank, seed, inexact):
    X, init = _same_start(shape, rank, 200, seed)
    M, out = _pyttb_fit(X, init, "pdnr", maxiters=6, inexact=inexact)
    est = CPAPR(rank, solver="pdnr", init=init, max_iter=6, inexact=inexact).fit(X)
    assert est.n_iter_ == len(out["kktViolations"])
    assert est.n_inner_iter_ == np.sum(out["nInnerIters"])
    assert est.log_likelihood_ == pytest.approx(out["obj"], rel=1e-6)


def _lbfgs_direction_for_pyttb(m, g, eps_active, S, Y, rho, pos, iters, disp_warn):
    """Replacement for pyttb 1.8.6's ``get_search_dir_pqnr``.

    pyttb's caller never advances the L-BFGS slot, its recursion steps through the memory by
    two, and the direction it returns is reduced to a scalar by the caller (pyttb's own
    ``cp_apr(..., algorithm="pqnr")`` fails with "L-BFGS first iterate is bad" on small random
    problems).  This version keeps the history itself: the caller always writes the newest
    pair into column 0, older pairs are shifted right after each call.  The two-loop recursion
    is the textbook one over the newest ``lbfgs_mem`` pairs, as in the Tensor Toolbox.
    """
    assert pos == 0, "the caller rolled back its L-BFGS slot; this replacement cannot follow"
    mem = S.shape[1]
    wk = min(eps_active, np.linalg.norm(np.minimum(m, g)))
    fixed = (g > 0) & (m <= wk)
    d = np.where(fixed, 0.0, -g)
    npairs = 0
    while npairs < mem and rho[npairs] > 0:
        npairs += 1
    if npairs:
        alpha = np.zeros(npairs)
        for k in range(npairs):
            alpha[k] = rho[k] * (S[:, k] @ d)
            d = d - alpha[k] * Y[:, k]
        d = d / rho[0] / (Y[:, 0] @ Y[:, 0])
        for k in reversed(range(npairs)):
            d = d + (alpha[k] - rho[k] * (Y[:, k] @ d)) * S[:, k]
        d[fixed] = 0.0
    S[:, 1:] = S[:, :-1].copy()
    Y[:, 1:] = Y[:, :-1].copy()
    rho[1:] = rho[:-1].copy()
    return d[:, None]


@pytest.mark.parametrize("shape,rank,seed", [((12, 9, 7), 3, 0), ((8, 7, 6, 5), 4, 1)])
def test_pqnr_matches_pyttb(shape, rank, seed, monkeypatch):
    pytest.importorskip("pyttb")
    monkeypatch.setattr(sys.modules["pyttb.cp_apr"], "get_search_dir_pqnr",
                        _lbfgs_direction_for_pyttb)
    X, init = _same_start(shape, rank, 200, seed)
    M, out = _pyttb_fit(X, init, "pqnr", maxiters=6)
    est = CPAPR(rank, solver="pqnr", init=init, max_iter=6).fit(X)
    assert est.n_iter_ == len(out["kktViolations"])
    assert est.log_likelihood_ == pytest.approx(out["obj"], rel=1e-6)


# ---------------------------------------------------------------------------- behaviour
@pytest.mark.parametrize("solver", ["mu", "pdnr", "pqnr"])
def test_planted_model_is_recovered(solver):
    X, truth = planted((30, 25, 20), 3, 60000, seed=3)
    est = CPAPR(3, solver=solver, max_iter=300 if solver == "mu" else 40, n_init=2,
                random_state=0).fit(X)
    fms, _ = est.model_.score(truth)
    assert fms >= 0.95
    assert np.all(np.diff(est.loss_history_) >= -1e-8 * np.abs(est.loss_history_[1:]))
    for f in est.factors_:
        assert np.all(f >= 0)
        np.testing.assert_allclose(f.sum(axis=0), 1.0, rtol=1e-12)
    assert np.all(np.diff(est.weights_) <= 0)
    assert est.log_likelihood_ == pytest.approx(est.loss_history_[-1], rel=1e-10)


@pytest.mark.parametrize("solver", ["mu", "pdnr", "pqnr"])
def test_same_result_with_one_and_two_threads(solver):
    X = count_tensor((60, 40, 30), 6000, 7)
    fits = []
    for threads in (1, 2):
        with num_threads(threads):
            fits.append(CPAPR(4, solver=solver, max_iter=8, random_state=1).fit(X))
    a, b = fits
    assert a.log_likelihood_ == pytest.approx(b.log_likelihood_, rel=1e-10)
    np.testing.assert_allclose(a.weights_, b.weights_, rtol=1e-10)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fa, fb, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(a.transform(X), b.transform(X), rtol=1e-10, atol=1e-12)


def labelled_counts(rng, n=60):
    A = rng.random((n, 3)) * 0.2
    y = np.repeat([0, 1], n // 2)
    A[y == 0, 0] += 1.0
    A[y == 1, 1] += 1.0
    rates = KruskalTensor(None, [A, rng.random((8, 3)), rng.random((6, 3))]).full() * 3
    return rng.poisson(rates).astype(float), y


def test_grid_search_and_pipeline():
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, cross_val_score
    from sklearn.pipeline import Pipeline
    rng = np.random.default_rng(0)
    Xd, y = labelled_counts(rng)
    X = SparseTensor.from_dense(Xd)
    gs = GridSearchCV(CPAPR(max_iter=30, random_state=0), {"rank": [2, 4]}, cv=3).fit(X)
    assert gs.best_params_["rank"] in (2, 4)
    assert np.all(np.isfinite(gs.cv_results_["mean_test_score"]))
    pipe = Pipeline([("cp", CPAPR(rank=3, max_iter=100, random_state=0)),
                     ("clf", LogisticRegression())])
    assert cross_val_score(pipe, Xd, y, cv=3).mean() > 0.8


@pytest.mark.parametrize("solver", ["mu", "pdnr", "pqnr"])
def test_all_zero_slices_stay_zero(solver, device):
    rng = np.random.default_rng(2)
    Xd, _ = labelled_counts(rng, 20)
    Xd[[3, 11]] = 0
    est = CPAPR(3, solver=solver, max_iter=20, random_state=0, device=device)
    W = est.fit_transform(Xd)
    for f in est.factors_:
        assert np.all(np.isfinite(f))
    assert np.all(est.factors_[0][[3, 11]] == 0) and np.all(W[[3, 11]] == 0)
    Wt = est.transform(Xd[:5])
    assert np.all(np.isfinite(Wt)) and np.all(Wt[3] == 0) and np.all(Wt >= 0)
    assert np.all(est.transform(np.zeros((2, 8, 6))) == 0)
    assert np.isfinite(est.score(Xd[:5]))
    # the refit loadings of the training slices nearly reproduce the fitted ones
    np.testing.assert_allclose(est.transform(Xd), W, rtol=0.05, atol=0.05 * W.max())


def test_score_is_mean_log_likelihood_per_slice():
    rng = np.random.default_rng(4)
    Xd, _ = labelled_counts(rng, 12)
    est = CPAPR(3, max_iter=50, random_state=0).fit(Xd)
    W = est.transform(Xd)
    M = KruskalTensor(None, [W] + est.factors_[1:]).full()
    expect = (np.sum(Xd[Xd > 0] * np.log(M[Xd > 0])) - M.sum()) / Xd.shape[0]
    assert est.score(Xd) == pytest.approx(expect, rel=1e-9)


def test_rails_commits_log_likelihood_increases(shared_data):
    from sktensor_fast import load_tns
    X = load_tns(shared_data / "rails-commits" / "tensor.tns.gz")
    est = CPAPR(3, max_iter=4, random_state=0).fit(X)
    hist = est.loss_history_
    assert len(hist) == 4 and np.all(np.isfinite(hist)) and np.all(np.diff(hist) > 0)
    assert np.isfinite(est.log_likelihood_) and np.isfinite(est.kkt_violation_)
    assert all(np.all(np.isfinite(f)) for f in est.factors_)
    est = CPAPR(3, solver="pdnr", max_iter=2, random_state=0).fit(X)
    assert np.all(np.diff(est.loss_history_) > 0) and np.isfinite(est.log_likelihood_)


def test_n_init_keeps_the_best():
    X = count_tensor((20, 15, 10), 800, 9)
    trials = [CPAPR(3, max_iter=5, init=_draws(X.shape, 3, 0, k)).fit(X).log_likelihood_
              for k in range(3)]
    best = CPAPR(3, max_iter=5, random_state=0, n_init=3).fit(X)
    assert best.log_likelihood_ == pytest.approx(max(trials), rel=1e-12)


def test_verbose_and_max_time(capsys):
    X = count_tensor((20, 15, 10), 800, 9)
    CPAPR(2, max_iter=3, verbose=2, random_state=0).fit(X)
    err = capsys.readouterr().err
    assert "log-likelihood" in err and "kkt" in err and "iter    3" in err
    est = CPAPR(2, max_iter=1000, tol=0.0, max_time=1e-9, random_state=0).fit(X)
    assert est.n_iter_ == 1


def _draws(shape, rank, seed, k):
    """The ``k``-th random start drawn by ``n_init`` runs seeded with ``seed``."""
    rng = np.random.RandomState(seed)
    for _ in range(k + 1):
        f = [rng.uniform(size=(s, rank)) for s in shape]
    return f


@pytest.mark.parametrize("solver", ["mu", "pdnr", "pqnr"])
def test_a_start_that_vanishes_at_a_nonzero_is_revived(solver):
    """Every component of nonzero (0, 2, 2) starts with zeros in two modes: its factor entries
    are inadmissible zeros (Φ is 0 / 0 there), shifted in both modes at once, so the fit ends
    with a model that is positive at every nonzero."""
    X = SparseTensor([[0, 0, 0], [1, 1, 1], [0, 2, 2]], [5.0, 3.0, 1.0], (2, 3, 3))
    dead = np.array([[1.0], [1.0], [0.0]])
    init = [np.ones((2, 1)), dead, dead.copy()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")         # no -inf warning
        est = CPAPR(1, solver=solver, init=init, max_iter=20).fit(X)
    assert np.isfinite(est.log_likelihood_)
    assert np.all(est.model_.values_at(X.subs) > 0)
    # kappa_tol=0 turns the shifts off: the model stays zero there, and says so
    if solver == "mu":
        with pytest.warns(UserWarning, match="model is zero at 1 nonzero.*kappa_tol=0"):
            est = CPAPR(1, init=init, max_iter=3, kappa_tol=0.0).fit(X)
        assert est.log_likelihood_ == -np.inf


def test_default_guard_divides_by_the_model_value():
    """eps_div_zero=None guards only against division by zero: 1e8 times the smallest normal
    number of the precision; a given value is raised to it."""
    est = CPAPR()
    assert est._eps(np.float64) == 1e8 * np.finfo(np.float64).tiny < 1e-299
    assert est._eps(np.float32) == 1e8 * np.finfo(np.float32).tiny < 1e-29
    assert CPAPR(eps_div_zero=1e-10)._eps(np.float64) == 1e-10
    assert CPAPR(eps_div_zero=1e-300)._eps(np.float32) == est._eps(np.float32)


def _flights_fits(max_iter, **params):
    from sktensor_fast import num_threads
    from sktensor_fast.datasets import load_flights_routes
    X = load_flights_routes().tensor
    out = {}
    with num_threads(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for solver in ("mu", "pdnr", "pqnr"):
            for rank in (2, 5, 10):
                for seed in range(5):
                    est = CPAPR(rank, solver=solver, random_state=seed, max_iter=max_iter,
                                **params).fit(X)
                    out[solver, rank, seed] = est.log_likelihood_
    return out


@pytest.mark.slow
def test_embedded_data_fits_end_finite():
    """On flights-routes, dest LGA and hour 01 each occur in one nonzero, the same one; the
    model there is 1e-8 to 1e-12.  With the Tensor Toolbox's guard 1e-10 in the derivatives
    and no revival, 14 of these 45 fits (16 at 30 iterations, 17 run to convergence) ended
    with the model exactly zero there; every one now ends finite."""
    lls = _flights_fits(max_iter=10)
    bad = [k for k, v in lls.items() if not np.isfinite(v)]
    assert bad == []


def test_a_guard_above_the_model_values_is_caught_by_the_revival(capsys):
    """With eps_div_zero=1e-10 the rows of that nonzero still collapse (the floored
    derivative asks them to shrink), and the shift of the vanished nonzero's entries brings
    them back: the fit ends finite, near the default's log-likelihood."""
    from sktensor_fast.datasets import load_flights_routes
    X = load_flights_routes().tensor
    for solver in ("mu", "pqnr"):
        floor = CPAPR(5, solver=solver, random_state=0, max_iter=40, eps_div_zero=1e-10,
                      verbose=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            floor.fit(X)
        exact = CPAPR(5, solver=solver, random_state=0, max_iter=40).fit(X)
        assert "the model was zero at 1 nonzero(s)" in capsys.readouterr().err
        assert np.isfinite(floor.log_likelihood_)
        assert floor.log_likelihood_ == pytest.approx(exact.log_likelihood_, rel=1e-3)


# ---------------------------------------------------------------------------- bad input
def test_bad_input_messages():
    good = np.random.default_rng(0).poisson(1.0, (5, 4, 3)).astype(float)
    bad = good.copy()
    bad[0, 0, 0] = -2
    with pytest.raises(ValueError, match="Negative values in data.*1 negative value"):
        CPAPR().fit(bad)
    for v in (np.nan, np.inf):
        bad = good.copy()
        bad[1, 1, 1] = v
        with pytest.raises(ValueError, match="NaN or infinit"):
            CPAPR().fit(bad)
        with pytest.raises(ValueError, match="NaN or infinit"):
            CPAPR().fit(SparseTensor([[0, 0, 0], [1, 1, 1]], [1.0, v], (2, 2, 2)))
    with pytest.warns(UserWarning, match="non-integer values; the model assumes counts"):
        CPAPR(max_iter=2).fit(good + 0.5)
    with pytest.raises(ValueError, match="empty tensor"):
        CPAPR().fit(np.zeros((4, 3, 2)))
    with pytest.raises(ValueError, match="init factor 1 holds negative values"):
        CPAPR(2, init=[np.ones((5, 2)), -np.ones((4, 2)), np.ones((3, 2))]).fit(good)
    with pytest.raises(ValueError, match="solver"):
        CPAPR(solver="newton").fit(good)
    est = CPAPR(2, max_iter=2, random_state=0).fit(good)
    bad = good.copy()
    bad[0, 0, 0] = -1
    with pytest.raises(ValueError, match="negative"):
        est.transform(bad)


@pytest.mark.parametrize("solver", ["mu", "pdnr", "pqnr"])
def test_same_model_on_every_device(device, solver):
    rng = np.random.default_rng(12)
    X = random_sparse((25, 20, 15), 1500, rng, counts=True)
    a, b = fits_to_compare(lambda **kw: CPAPR(rank=3, solver=solver, random_state=0,
                                              max_iter=5, **kw), X, device)
    assert b.n_iter_ == a.n_iter_ and b.n_inner_iter_ == a.n_inner_iter_
    assert b.log_likelihood_ == pytest.approx(a.log_likelihood_, rel=1e-8)
    np.testing.assert_allclose(b.weights_, a.weights_, rtol=1e-8)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fb, fa, rtol=1e-8, atol=1e-8 * np.abs(fa).max())
    np.testing.assert_allclose(b.transform(X[:6]), a.transform(X[:6]), rtol=1e-8,
                               atol=1e-10)


def test_same_float32_model_on_every_device(device):
    rng = np.random.default_rng(13)
    X = random_sparse((20, 15, 12), 1000, rng, counts=True, dtype=np.float32)
    init = [rng.random((s, 3)) for s in X.shape]
    a, b = fits_to_compare(lambda **kw: CPAPR(rank=3, solver="pdnr", max_iter=4,
                                              init=[f.copy() for f in init], **kw), X, device)
    assert b.log_likelihood_ == pytest.approx(a.log_likelihood_, rel=1e-4)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fb, fa, rtol=1e-3, atol=1e-4 * np.abs(fa).max())


def test_mu_fit_same_with_and_without_phi_plans(monkeypatch):
    """CP-APR MU over fibers is the same bits whether its inner iterations run the compiled
    Φ plan or backend.phi on every call."""
    from sktensor_fast.backends.base import Backend
    from sktensor_fast.backends.cpu.backend import CpuBackend
    rng = np.random.default_rng(3)
    X = SparseTensor.from_dense(rng.poisson(3.0, (10, 9, 200)).astype(float))

    def fit():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return CPAPR(rank=5, solver="mu", max_iter=3, max_inner_iter=4, tol=0,
                         random_state=0).fit(X)
    planned = fit()
    monkeypatch.setattr(CpuBackend, "_phi_plan", Backend._phi_plan)
    plain = fit()
    for a, b in zip(planned.factors_, plain.factors_):
        np.testing.assert_array_equal(a, b)
    assert planned.log_likelihood_ == plain.log_likelihood_
