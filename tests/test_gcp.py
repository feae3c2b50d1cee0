"""Generalized CP: losses, samplers, the fused gradient kernel, the estimator."""
import numpy as np
import pytest

from sktensor_fast import GCP, CPALS, KruskalTensor, SparseTensor, num_threads
from sktensor_fast.backends import get_backend
from sktensor_fast.backends.cpu import _gcp, gcp_ops
from sktensor_fast.decomposition.losses import LOSSES, get_loss

PARAMS = {"huber": 0.7, "negative_binomial": 3.0, "beta": 0.5}
NONNEG_MODEL = {"poisson", "bernoulli_odds", "gamma", "rayleigh", "negative_binomial", "beta",
                "zt_poisson"}


def loss_inputs(name, rng, n=400):
    """Data valid for the loss and model values inside its domain."""
    if name in ("bernoulli_odds", "bernoulli_logit"):
        x = rng.integers(0, 2, n).astype(float)
    elif name in ("poisson", "poisson_log", "negative_binomial", "zt_poisson"):
        x = rng.poisson(2.0, n).astype(float)
    elif name in ("gamma", "rayleigh", "beta"):
        x = rng.gamma(2.0, 1.0, n)
    else:
        x = rng.standard_normal(n) * 2
    if name in NONNEG_MODEL:
        m = rng.uniform(0.2, 3.0, n)
    else:
        m = rng.uniform(-2.5, 2.5, n)
    if name == "huber":  # keep away from the kink |x - m| = δ
        m = np.where(np.abs(np.abs(x - m) - PARAMS["huber"]) < 1e-3, m + 0.01, m)
    return x, m


def pyttb_handles(name):
    from pyttb.gcp import handles as h
    p = PARAMS.get(name)
    table = {
        "gaussian": (h.gaussian, h.gaussian_grad),
        "bernoulli_odds": (h.bernoulli_odds, h.bernoulli_odds_grad),
        "bernoulli_logit": (h.bernoulli_logit, h.bernoulli_logit_grad),
        "poisson": (h.poisson, h.poisson_grad),
        "poisson_log": (h.poisson_log, h.poisson_log_grad),
        "rayleigh": (h.rayleigh, h.rayleigh_grad),
        "gamma": (h.gamma, h.gamma_grad),
        "huber": (lambda x, m: h.huber(x, m, p), lambda x, m: h.huber_grad(x, m, p)),
        "negative_binomial": (lambda x, m: h.negative_binomial(x, m, p),
                              lambda x, m: h.negative_binomial_grad(x, m, p)),
        "beta": (lambda x, m: h.beta(x, m, p), lambda x, m: h.beta_grad(x, m, p)),
        "zt_poisson": (h.ztp, h.ztp_grad),
    }
    return table[name]


# ---------------------------------------------------------------------------- losses
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_matches_finite_differences_pyttb_and_kernel(name):
    rng = np.random.default_rng(0)
    loss = get_loss(name, PARAMS.get(name))
    x, m = loss_inputs(name, rng)
    f, g = loss.value(x, m), loss.deriv(x, m)
    h = 1e-6 * np.maximum(1.0, np.abs(m))
    fd = (loss.value(x, m + h) - loss.value(x, m - h)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)
    fh, gh = pyttb_handles(name)
    np.testing.assert_allclose(f, fh(x, m), rtol=1e-12, atol=1e-12)
    if name == "negative_binomial":
        # pyttb's gradient handle has (r + 1) where the derivative has (r + x): equal at x = 1
        one = x == 1
        assert one.any()
        np.testing.assert_allclose(g[one], gh(x[one], m[one]), rtol=1e-12)
    else:
        np.testing.assert_allclose(g, gh(x, m), rtol=1e-10, atol=1e-12)
    # the kernels' nogil versions agree with the NumPy ones
    kv, kd = np.empty_like(x), np.empty_like(x)
    _gcp.loss_values(loss.code, loss.param, x, m, kv, kd)
    np.testing.assert_allclose(kv, f, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(kd, g, rtol=1e-12, atol=1e-12)


def test_logit_loss_is_stable_for_large_model_values():
    loss = get_loss("bernoulli_logit")
    m = np.array([-800.0, 800.0])
    assert np.all(np.isfinite(loss.value(np.array([0.0, 1.0]), m)))
    np.testing.assert_allclose(loss.deriv(np.array([0.0, 1.0]), m), [0.0, 0.0], atol=1e-300)


class SquaredError:
    """A user-defined Gaussian loss."""

    lower = -np.inf

    def value(self, x, m):
        return (x - m) ** 2

    def deriv(self, x, m):
        return 2 * (m - x)


def planted(shape=(12, 10, 8), rank=3, noise=0.01, seed=0):
    rng = np.random.default_rng(seed)
    truth = KruskalTensor(None, [rng.random((s, rank)) for s in shape])
    return truth, truth.full() + noise * rng.standard_normal(shape)


@pytest.mark.parametrize("solver", ["lbfgsb", "adam"])
def test_custom_loss_object_matches_builtin(solver):
    _, X = planted()
    kw = dict(rank=3, solver=solver, random_state=0, epoch_iters=50, max_iter=20)
    a = GCP(loss=SquaredError(), **kw).fit(X)
    b = GCP(loss="gaussian", **kw).fit(X)
    assert a.n_iter_ == b.n_iter_
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fa, fb, rtol=1e-6, atol=1e-8)
    assert a.score(X) == pytest.approx(b.score(X), rel=1e-6)


def test_custom_loss_object_is_validated():
    class NoLower:
        def value(self, x, m):
            return m

        def deriv(self, x, m):
            return np.ones_like(m)

    with pytest.raises(ValueError, match="lower"):
        GCP(loss=NoLower()).fit(np.ones((3, 3, 3)))
    with pytest.raises(ValueError, match="loss"):
        GCP(loss=object()).fit(np.ones((3, 3, 3)))


# ---------------------------------------------------------------------------- samplers
def small_problem(seed=0, shape=(6, 5, 4), density=0.3, R=2):
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random(shape) < density, rng.poisson(3.0, shape) + 1.0, 0.0)
    X = SparseTensor.from_dense(dense)
    U = [rng.uniform(0.2, 1.0, (s, R)) for s in shape]
    return X, U


@pytest.mark.parametrize("sampler", ["stratified", "semi-stratified", "uniform"])
@pytest.mark.parametrize("masked", [False, True])
def test_sampled_gradient_is_unbiased(sampler, masked):
    X, U = small_problem()
    be = get_backend("cpu")
    T = be.prepare(X)
    loss = get_loss("poisson")
    lam = np.ones(2)
    zero_subs = mask = None
    if masked:
        rng = np.random.default_rng(5)
        mask = rng.random(X.shape) < 0.7
        obs = X.to_dense() * mask
        X = SparseTensor.from_dense(obs)
        T = be.prepare(X)
        zero_subs = np.argwhere(mask & (obs == 0))
    F, G = be.gcp_full_loss_grad(T, lam, U, loss, mask=mask)
    n = (0, 30) if sampler == "uniform" else (15, 15)
    state = be.gcp_setup(T, sampler, n, (5, 5), 0, zero_subs=zero_subs)
    draws = 3000
    acc = [np.zeros_like(u) for u in U]
    f_acc = 0.0
    out = None
    for step in range(draws):
        out, f = be.gcp_sampled_gradient(T, state, lam, U, loss, 7, step, out=out,
                                         with_loss=True)
        f_acc += f
        for a, g in zip(acc, out):
            a += g
    for a, g in zip(acc, G):
        err = np.linalg.norm(a / draws - g) / np.linalg.norm(g)
        assert err < 0.06, err
    assert f_acc / draws == pytest.approx(F, rel=0.03)


def test_stratified_zero_samples_are_zeros_and_uniform_looks_values_up():
    X, _ = small_problem(density=0.6)
    be = get_backend("cpu")
    T = be.prepare(X)
    dense = X.to_dense()
    for sampler, (p, q) in [("stratified", (50, 400)), ("uniform", (0, 400)),
                            ("semi-stratified", (50, 400))]:
        state = be.gcp_setup(T, sampler, (p, q), (5, 5), 0)
        subs, x, w, corr = gcp_ops.draw(state.grad_sampler, 123, X.ndim)
        at = dense[tuple(subs.T)]
        if sampler == "uniform":
            np.testing.assert_array_equal(x, at)
            assert np.all(w == X.size / 400)
        else:
            np.testing.assert_array_equal(x[:p], at[:p])
            assert np.all(x[p:] == 0)
            assert np.all(corr[:p] == (sampler == "semi-stratified"))
        if sampler == "stratified":
            assert np.all(at[p:] == 0)
            np.testing.assert_allclose(w[p:], (X.size - X.nnz) / q)


def test_nonzero_lookup_with_and_without_linear_index():
    rng = np.random.default_rng(3)
    big = (2 ** 22, 2 ** 22, 2 ** 22)  # the linear index would overflow int64
    subs = rng.integers(0, 50, size=(300, 3)) * 80000
    X = SparseTensor(subs, rng.random(300) + 1, big)
    T = get_backend("cpu").prepare(X)
    assert T.linear_index() is None
    probe = np.concatenate([X.subs[::3], X.subs[::7] + 1, np.zeros((1, 3), np.int64)])
    expect = np.array([np.flatnonzero(np.all(X.subs == r, axis=1))[0]
                       if np.any(np.all(X.subs == r, axis=1)) else -1 for r in probe])
    small = SparseTensor(X.subs // 80000, X.vals, (50, 50, 50))
    for Xt, pr, ex in [(X, probe, expect), (small, probe // 80000, None)]:
        Tt = get_backend("cpu").prepare(Xt)
        lin = Tt.linear_index()
        s = _gcp.GcpSampler(np.array(Xt.shape, np.int64), Tt.subs, Tt.vals,
                            lin if lin is not None else np.zeros(0, np.int64),
                            np.zeros((0, 3), np.int64), False, 1, 1, 1.0, 1.0, 2, False, False)
        out = np.empty(pr.shape[0], np.int64)
        s.find(np.ascontiguousarray(pr), out)
        if ex is None:
            ex = np.array([np.flatnonzero(np.all(Tt.subs == r, axis=1))[0]
                           if np.any(np.all(Tt.subs == r, axis=1)) else -1 for r in pr])
        np.testing.assert_array_equal(out, ex)


# ---------------------------------------------------------------------------- the kernel
def gradient_ref(subs, x, w, corr, lam, factors, loss=None, y=None):
    """NumPy reference of the fused kernel for an explicit sample."""
    N = len(factors)
    rows = [f[subs[:, k]] for k, f in enumerate(factors)]
    m = (np.prod(rows, axis=0) * lam).sum(axis=1)
    if y is None:
        y = w * (loss.deriv(x, m) - corr * loss.deriv(np.zeros_like(x), m))
        f = float(np.sum(w * (loss.value(x, m) - corr * loss.value(np.zeros_like(x), m))))
    else:
        f = None
    grads = []
    for k in range(N):
        krp = np.ones_like(rows[0]) * lam * y[:, None]
        for l in range(N):
            if l != k:
                krp = krp * rows[l]
        g = np.zeros_like(factors[k])
        np.add.at(g, subs[:, k], krp)
        grads.append(g)
    return grads, f


def zipf_subs(shape, n, rng, a=1.5):
    cols = []
    for s in shape:
        p = 1.0 / np.arange(1, s + 1) ** a
        cols.append(rng.permutation(s)[rng.choice(s, size=n, p=p / p.sum())])
    return np.ascontiguousarray(np.stack(cols, axis=1), dtype=np.int64)


@pytest.mark.parametrize("shape", [(40, 7), (9, 30, 5), (6, 5, 70, 4), (3, 8, 5, 6, 4)])
@pytest.mark.parametrize("R", [1, 3, 16, 64])
def test_fused_gradient_matches_numpy(shape, R):
    rng = np.random.default_rng(R + len(shape))
    n = 1500
    subs = zipf_subs(shape, n, rng)
    x = rng.poisson(1.5, n).astype(float)
    w = rng.uniform(0.5, 2.0, n)
    corr = (rng.random(n) < 0.3).astype(np.int8)
    lam = rng.uniform(0.5, 1.5, R)
    factors = [rng.uniform(0.1, 1.0, (s, R)) for s in shape]
    loss = get_loss("poisson")
    ref, fref = gradient_ref(subs, x, w, corr, lam, factors, loss)
    y = rng.standard_normal(n)
    ref_y, _ = gradient_ref(subs, x, w, corr, lam, factors, y=y)
    act = np.ones(len(shape), np.int8)
    results = []
    for threads in (1, 2):
        for block in (0, 256):
            out = [np.full_like(f, np.nan) for f in factors]
            f = _gcp.gradient(None, 0, loss.code, loss.param, lam, factors, out, act, True,
                              threads, xsubs=subs, xvals=x, xw=w, xcorr=corr, block=block)
            for g, r in zip(out, ref):
                np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10)
            assert f == pytest.approx(fref, rel=1e-10)
            out_y = [np.zeros_like(f) for f in factors]
            _gcp.gradient(None, 0, -1, 0.0, lam, factors, out_y, act, False, threads,
                          xsubs=subs, xvals=x, xw=w, xcorr=corr, xy=y, block=block)
            for g, r in zip(out_y, ref_y):
                np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10)
            results.append((block, out))
    # the summation order is fixed by the samples: 1 and 2 threads agree bitwise
    for (b1, o1), (b2, o2) in zip(results[:2], results[2:]):
        assert b1 == b2
        for g1, g2 in zip(o1, o2):
            np.testing.assert_array_equal(g1, g2)


def test_fused_sampling_equals_drawn_sample_and_inactive_modes_untouched():
    X, _ = small_problem(shape=(30, 20, 10), density=0.05, R=4)
    rng = np.random.default_rng(2)
    U = [rng.uniform(0.1, 1.0, (s, 4)) for s in X.shape]
    be = get_backend("cpu")
    T = be.prepare(X)
    loss = get_loss("poisson")
    lam = np.ones(4)
    for sampler in ("stratified", "semi-stratified", "uniform"):
        state = be.gcp_setup(T, sampler, (700, 900), (5, 5), 0)
        key = _gcp.step_key(np.uint64(11), np.uint64(4))
        subs, x, w, corr = gcp_ops.draw(state.grad_sampler, key, 3)
        ref, fref = gradient_ref(subs, x, w, corr, lam, U, loss)
        for threads in (1, 2):
            with num_threads(threads):
                out, f = be.gcp_sampled_gradient(T, state, lam, U, loss, 11, 3, with_loss=True)
            for g, r in zip(out, ref):
                np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10)
            assert f == pytest.approx(fref, rel=1e-10)
        marker = [np.full_like(u, 7.0) for u in U]
        be.gcp_sampled_gradient(T, state, lam, U, loss, 11, 3, out=marker,
                                active=[False, True, False])
        assert np.all(marker[0] == 7.0) and np.all(marker[2] == 7.0)
        np.testing.assert_allclose(marker[1], ref[1], rtol=1e-10, atol=1e-10)


def test_exact_loss_and_gradient_match_pyttb():
    import pyttb as ttb
    from pyttb.gcp.fg import evaluate
    rng = np.random.default_rng(4)
    X, U = small_problem(shape=(5, 4, 3, 2), R=3)
    mask = rng.random(X.shape) < 0.8
    be = get_backend("cpu")
    T = be.prepare(X)
    for name in ("gaussian", "poisson", "huber", "beta"):
        loss = get_loss(name, PARAMS.get(name))
        fh, gh = pyttb_handles(name)
        kt = ttb.ktensor([u.copy(order="F") for u in U], copy=True)
        F_ref, G_ref = evaluate(kt, ttb.tensor(X.to_dense()), mask.astype(float), fh, gh)
        F, G = be.gcp_full_loss_grad(T, np.ones(3), U, loss, mask=mask)
        assert F == pytest.approx(F_ref, rel=1e-10)
        for g, r in zip(G, G_ref):
            np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-10)


# ---------------------------------------------------------------------------- estimator
@pytest.mark.parametrize("solver", ["lbfgsb", "adam"])
def test_gaussian_reaches_cpals_fit(solver):
    truth, X = planted(shape=(15, 12, 10))
    with num_threads(1):  # a tiny reference fit: threads would only add overhead
        cp = CPALS(rank=3, tol=1e-10, max_iter=500, random_state=0).fit(X)
    kw = dict(learning_rate=3e-3, epoch_iters=100, max_iter=300, tol=1e-6, max_fails=3)
    g = GCP(rank=3, solver=solver, random_state=0, **(kw if solver == "adam" else {})).fit(X)
    fit = 1 - np.linalg.norm(X - g.model_.full()) / np.linalg.norm(X)
    assert fit > cp.fit_ - (1e-6 if solver == "lbfgsb" else 2e-4)
    assert g.model_.score(truth)[0] > 0.95
    assert g.loss_ == pytest.approx(g.loss_history_[-1])
    assert g.n_iter_ == len(g.loss_history_) - 1


@pytest.mark.parametrize("solver", ["lbfgsb", "adam"])
def test_bernoulli_logit_recovers_planted_factors(solver):
    rng = np.random.default_rng(0)
    shape = (40, 35, 30)
    truth = KruskalTensor([1.5, 1.0], [rng.standard_normal((s, 2)) for s in shape])
    prob = 1 / (1 + np.exp(-truth.full()))
    X = SparseTensor.from_dense((rng.random(shape) < prob).astype(float))
    kw = dict(learning_rate=1e-2, epoch_iters=200) if solver == "adam" else {}
    g = GCP(rank=2, loss="bernoulli_logit", solver=solver, random_state=0, **kw).fit(X)
    fms, _ = g.model_.score(truth)
    assert fms >= 0.9


def test_same_seed_same_model_any_thread_count():
    X, _ = small_problem(shape=(30, 25, 20), density=0.05)
    # enough samples x rank for the kernels to take their multi-threaded path
    est = GCP(rank=8, loss="poisson", random_state=42, epoch_iters=20, max_iter=2,
              n_samples_grad=6000)
    with num_threads(1):
        a = est.fit(X)
        fa = [f.copy() for f in a.factors_]
        ha = a.loss_history_.copy()
    with num_threads(2):
        b = GCP(**est.get_params()).fit(X)
    for x, y in zip(fa, b.factors_):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(ha, b.loss_history_)
    c = GCP(**{**est.get_params(), "random_state": 43}).fit(X)
    assert not np.array_equal(fa[0], c.factors_[0])
    # the storage format does not change the samples or the sums either
    with num_threads(1):
        d = GCP(**{**est.get_params(), "format": "alto"}).fit(X)
    for x, y in zip(fa, d.factors_):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("solver", ["lbfgsb", "adam"])
def test_mask_ignores_masked_entries(solver):
    rng = np.random.default_rng(0)
    truth, X = planted(shape=(10, 9, 8))
    mask = rng.random(X.shape) < 0.7
    X2 = np.where(mask, X, rng.standard_normal(X.shape) * 10)
    kw = dict(rank=3, solver=solver, random_state=0, epoch_iters=50, max_iter=10)
    for m in (mask, SparseTensor.from_dense(mask.astype(float))):
        a = GCP(mask=m, **kw).fit(X)
        b = GCP(mask=m, **kw).fit(X2)
        for fa, fb in zip(a.factors_, b.factors_):
            np.testing.assert_array_equal(fa, fb)
        assert a.loss_ == b.loss_
    # missing values may be NaN in a dense array
    X3 = np.where(mask, X, np.nan)
    d = GCP(mask=mask, **kw).fit(X3)
    for fa, fd in zip(a.factors_, d.factors_):
        np.testing.assert_array_equal(fa, fd)
    # and the masked fit differs from the unmasked one on the corrupted data
    c = GCP(**kw).fit(X2)
    assert not np.allclose(c.factors_[0], a.factors_[0])


def test_transform_score_inverse_transform():
    truth, X = planted(shape=(20, 9, 8), noise=0.0)
    g = GCP(rank=3, solver="lbfgsb", random_state=0).fit(X)
    W = g.transform(X)
    np.testing.assert_allclose(W, g.fit_transform(X), rtol=1e-3, atol=1e-3)
    assert g.score(X) > -1e-5
    assert g.score(X) > g.score(X[::-1] * 0 + 1.0)
    assert g.inverse_transform(W).shape == X.shape


def test_grid_search_and_pipeline():
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline
    rng = np.random.default_rng(0)
    B, C = rng.random((8, 3)), rng.random((6, 3))
    y = np.repeat([0, 1], 15)
    A = rng.random((30, 3)) * 0.3
    A[y == 0, 0] += 1.0
    A[y == 1, 1] += 1.0
    X = KruskalTensor(None, [A, B, C]).full() + 0.01 * rng.standard_normal((30, 8, 6))
    gs = GridSearchCV(GCP(solver="lbfgsb", random_state=0, max_iter=50),
                      {"rank": [1, 3]}, cv=3).fit(X)
    assert gs.best_params_["rank"] == 3
    pipe = Pipeline([("gcp", GCP(rank=3, solver="lbfgsb", random_state=0, max_iter=100)),
                     ("clf", LogisticRegression())]).fit(X, y)
    assert pipe.score(X, y) > 0.9


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("loss,data,match", [
    ("poisson", -1.0, "non-negative"),
    ("gamma", -1.0, "non-negative"),
    ("rayleigh", -1.0, "non-negative"),
    ("negative_binomial", -1.0, "non-negative"),
    ("bernoulli_logit", 2.0, "binary"),
    ("bernoulli_odds", 0.5, "binary"),
])
def test_invalid_data_for_loss(loss, data, match):
    X = np.ones((3, 3, 3))
    X[1, 1, 1] = data
    with pytest.raises(ValueError, match=match):
        GCP(loss=loss, loss_param=PARAMS.get(loss)).fit(X)


@pytest.mark.parametrize("kw,match", [
    (dict(loss="huber"), "needs loss_param"),
    (dict(loss="negative_binomial"), "needs loss_param"),
    (dict(loss="beta"), "needs loss_param"),
    (dict(loss="huber", loss_param=-1.0), "invalid loss_param"),
    (dict(loss="beta", loss_param=1.0), "invalid loss_param"),
    (dict(loss="gaussian", loss_param=2.0), "takes no loss_param"),
    (dict(loss="nope"), "loss"),
    (dict(solver="newton"), "solver"),
    (dict(sampler="random"), "sampler"),
    (dict(n_samples_grad=0), "n_samples_grad"),
    (dict(n_samples_loss=0), "n_samples_loss"),
    (dict(n_samples_grad=(10, 0)), "n_samples_grad"),
    (dict(n_samples_grad=(10, 10), sampler="uniform"), "uniform"),
    (dict(mask=np.ones((3, 3), bool)), "mask has shape"),
    (dict(mask=SparseTensor([[0, 0]], [1.0], (3, 3))), "mask has shape"),
])
def test_invalid_parameters(kw, match):
    with pytest.raises(ValueError, match=match):
        GCP(**kw).fit(np.ones((3, 3, 3)))


def test_lbfgsb_refuses_large_tensors():
    X = SparseTensor([[0, 0, 0], [999, 999, 99]], [1.0, 2.0], (1000, 1000, 100))
    with pytest.raises(ValueError, match="stochastic solver"):
        GCP(solver="lbfgsb").fit(X)
