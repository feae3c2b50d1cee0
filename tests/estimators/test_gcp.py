"""Generalized CP: losses, samplers, the fused gradient kernel, the estimator."""
import numpy as np
import pytest

from sktensor_fast import GCP, CPALS, KruskalTensor, SparseTensor, num_threads
from sktensor_fast.backends import gcp_plan, get_backend
from sktensor_fast.backends.cpu import _gcp, gcp_ops
from sktensor_fast.decomposition.losses import LOSSES, get_loss
from sktensor_fast.decomposition.optimizers import make_optimizer

from _reference import fits_to_compare, sampler_param_index, sparse_problem

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
    h = pytest.importorskip("pyttb.gcp.handles")
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
    kw = dict(rank=3, solver=solver, random_state=0, epoch_iters=50, max_iter=20, tol=1e-10)
    a = GCP(loss=SquaredError(), **kw).fit(X)
    b = GCP(loss="gaussian", **kw).fit(X)
    n = min(a.n_iter_, b.n_iter_)
    assert abs(a.n_iter_ - b.n_iter_) <= 1
    np.testing.assert_allclose(a.loss_history_[:n], b.loss_history_[:n], rtol=1e-9)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fa, fb, rtol=1e-4, atol=1e-6)
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
    F, G = be.gcp.full_loss_grad(T, lam, U, loss, mask=mask)
    n = (0, 30) if sampler == "uniform" else (15, 15)
    state = be.gcp.setup(T, sampler, n, (5, 5), 0, zero_subs=zero_subs)
    draws = 3000
    acc = [np.zeros_like(u) for u in U]
    f_acc = 0.0
    out = None
    for step in range(draws):
        out, f = be.gcp.sampled_gradient(T, state, lam, U, loss, 7, step, out=out,
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
        state = be.gcp.setup(T, sampler, (p, q), (5, 5), 0)
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


@pytest.mark.parametrize("threshold,attempts,list_max,path", [
    (0.5, 256, 1 << 24, "list"),    # dense: the explicit list of zeros
    (0.5, 256, 0, "computed"),      # dense: zeros computed from the linear indices
    (2.0, 256, 0, "rejection"),     # rejection (a zero is usually found)
    (2.0, 1, 0, "rejection"),       # rejection giving up at once: the zero is computed
    (2.0, 3, 0, "rejection"),
])
def test_stratified_zeros_are_zeros_whatever_the_path(monkeypatch, threshold, attempts,
                                                      list_max, path):
    """Every zero sample of the stratified sampler is a zero, drawn uniformly among the zeros,
    whether it comes from a list, from the linear indices or from (failing) rejection."""
    monkeypatch.setattr(gcp_plan, "ZERO_LIST_DENSITY", threshold)
    monkeypatch.setattr(gcp_plan, "MAX_ATTEMPTS", attempts)
    monkeypatch.setattr(gcp_plan, "ZERO_LIST_MAX", list_max)
    X, _ = small_problem(shape=(20, 15, 10), density=0.9)
    dense = X.to_dense()
    dense.flat[:7] = 0      # zeros before the first nonzero: the search for a zero's rank
    X = SparseTensor.from_dense(dense)      # starts left of every nonzero
    n_zero = X.size - X.nnz
    be = get_backend("cpu")
    state = be.gcp.setup(be.prepare(X), "stratified", (10, 60000), (10, 3000), 0)
    assert isinstance(state, gcp_plan.GcpState)
    # the sampler takes the path the constants ask for
    idx, sp = sampler_param_index(), state.grad_sampler.params
    assert (sp[idx["EXPLICIT_Z"]], sp[idx["IMPLICIT_Z"]]) == \
        {"list": (1, 0), "computed": (1, 1), "rejection": (0, 0)}[path]
    assert (sp[idx["ZMODE"]], sp[idx["MAX_ATTEMPTS"]]) == (2, attempts)
    subs, x, w, _ = gcp_ops.draw(state.grad_sampler, 5, 3)
    zs = subs[10:]
    assert np.all(dense[tuple(zs.T)] == 0) and np.all(x[10:] == 0)
    np.testing.assert_allclose(w[10:], n_zero / 60000)
    # uniform over the zeros: every zero drawn about 60000 / n_zero times
    lin = np.ravel_multi_index(tuple(zs.T), X.shape)
    counts = np.unique(lin, return_counts=True)[1]
    expect = 60000 / n_zero
    assert counts.size == n_zero and np.all(np.abs(counts - expect) < 6 * np.sqrt(expect))
    lsubs = state.loss_sample[0][10:]
    assert np.all(dense[tuple(lsubs.T)] == 0)


def test_the_samplers_limits_are_defined_once():
    """gcp_plan's limits have no copy elsewhere in the package (a test patching a copy would
    change nothing): no module assigns or imports them by name."""
    import ast
    import pathlib
    import sktensor_fast
    names = {"ZERO_LIST_DENSITY", "ZERO_LIST_MAX", "MAX_ATTEMPTS", "UNIFORM_CAP"}
    names |= {"_" + n for n in names}
    root = pathlib.Path(sktensor_fast.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if path.name == "gcp_plan.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found += [(path.name, t.id) for t in targets
                          if isinstance(t, ast.Name) and t.id in names]
            elif isinstance(node, ast.ImportFrom):
                found += [(path.name, a.name) for a in node.names if a.name in names]
    assert found == []
    assert {n for n in names if not n.startswith("_")} <= set(gcp_plan.__all__)


# ------------------------------------------------------------------ the sampling plan itself

def test_linear_index_is_c_order_and_refuses_2_63_entries():
    rng = np.random.default_rng(0)
    shape = (3, 4, 5)
    subs = np.stack([rng.integers(0, s, 50) for s in shape], axis=1)
    lin = gcp_plan.linear_index(subs, shape)
    assert lin.dtype == np.int64
    np.testing.assert_array_equal(lin, np.ravel_multi_index(tuple(subs.T), shape))
    # 2**63 entries exactly: no int64 index; one row fewer: the largest index still fits
    assert gcp_plan.linear_index(np.zeros((1, 2), np.int64), (2 ** 32, 2 ** 31)) is None
    last = np.array([[2 ** 32 - 1, 2 ** 31 - 2]], np.int64)
    assert gcp_plan.linear_index(last, (2 ** 32, 2 ** 31 - 1))[0] == 2 ** 63 - 2 ** 32 - 1


@pytest.mark.parametrize("kind,nnz,n_zero,p,q,expect", [
    ("stratified", 30, 90, 6, 9, (6, 9, 5.0, 10.0, 2, False, False)),
    ("stratified", 0, 10, 5, 5, (0, 5, 0.0, 2.0, 2, False, False)),      # no nonzeros
    ("stratified", 10, 0, 5, 5, (5, 0, 2.0, 0.0, 2, False, False)),      # no zeros
    ("semi-stratified", 30, 90, 6, 9, (6, 9, 5.0, 120 / 9, 0, True, True)),
    ("semi-stratified", 0, 90, 6, 0, (0, 0, 0.0, 0.0, 0, True, True)),
    ("uniform", 30, 90, 6, 9, (0, 15, 0.0, 8.0, 1, True, False)),
    ("uniform", 30, 90, 0, 0, (0, 0, 0.0, 0.0, 1, True, False)),
])
def test_sampler_plan_counts_and_weights(kind, nnz, n_zero, p, q, expect):
    """Counts, unbiasing weights (population / samples, 0 without samples) and mode."""
    got = gcp_plan.sampler_plan(kind, nnz, n_zero, p, q)
    assert got[:2] == expect[:2] and got[4:] == expect[4:]
    assert got[2:4] == pytest.approx(expect[2:4], rel=1e-15, abs=0)


def test_zero_list_mode_above_the_density_threshold_only():
    d = gcp_plan.ZERO_LIST_DENSITY
    assert d == 0.5
    assert not gcp_plan.zero_list_mode(100, 50, True)     # density 0.5: not above
    assert gcp_plan.zero_list_mode(100, 51, True)
    assert not gcp_plan.zero_list_mode(100, 51, False)    # no linear index
    assert not gcp_plan.zero_list_mode(100, 10, True)


@pytest.mark.parametrize("size,nnz,expect", [
    (1000, 63, None), (1000, 64, (4, 63)), (64, 64, (0, 64)), (10, 64, (0, 10)),
    (2 ** 40, 2 ** 27, (14, 2 ** 26)),                     # at most 2**26 buckets
])
def test_bucket_layout(size, nnz, expect):
    got = gcp_plan.bucket_layout(size, nnz)
    assert got == expect
    if got is not None:   # every index of the tensor falls in a bucket, the last one used
        shift, n = got
        assert (size - 1) >> shift == n - 1


@pytest.mark.parametrize("sampler,n_nz,n_zero,expect", [
    # pyttb's defaults: g = max(ceil(3 nnz / 1000), min(1000, max(100, ceil(nnz / 100))))
    ("stratified", 10 ** 6, 10 ** 9, ((3000, 3000), (100000, 100000))),
    ("stratified", 10 ** 6 + 1, 10 ** 9, ((3001, 3001), (100000, 100000))),
    ("stratified", 200000, 10 ** 9, ((1000, 1000), (100000, 100000))),
    ("stratified", 50000, 10 ** 7, ((500, 500), (50000, 50000))),
    ("stratified", 5000, 40, ((100, 40), (5000, 40))),
    ("stratified", 0, 500, ((0, 100), (0, 500))),
    ("semi-stratified", 2 * 10 ** 7 + 1, 10 ** 9, ((60001, 60001), (200001, 200001))),
    # uniform: min(n_obs, max(1000, ceil(n_obs / 100)), 100000) entries
    ("uniform", 10 ** 6, 0, ((0, 10000), (100000, 0))),
    ("uniform", 10 ** 6 + 1, 0, ((0, 10001), (100000, 0))),
    ("uniform", 50000, 0, ((0, 1000), (50000, 0))),
    ("uniform", 300, 200, ((0, 500), (300, 200))),
    ("uniform", 10 ** 8, 0, ((0, 100000), (1000000, 0))),
])
def test_default_counts_are_pyttbs(sampler, n_nz, n_zero, expect):
    assert gcp_plan.default_counts(sampler, n_nz, n_zero) == expect


def test_default_counts_given():
    assert gcp_plan.default_counts("stratified", 10, 10, 7, (3, 4)) == ((7, 7), (3, 4))
    assert gcp_plan.default_counts("semi-stratified", 10, 10, (5, 6), 8) == ((5, 6), (8, 8))
    assert gcp_plan.default_counts("uniform", 10, 10, 7) == ((0, 7), (10, 10))


def test_check_loss_and_loss_code():
    from sktensor_fast._loss_table import N_LOSSES

    class Coded:
        def __init__(self, code):
            self.code = code

    class Fns:
        def value(self, x, m):
            return x

        def deriv(self, x, m):
            return m

    last, user = Coded(N_LOSSES - 1), Fns()
    assert gcp_plan.check_loss(last) is last
    assert gcp_plan.check_loss(user) is user and gcp_plan.check_loss(user, exact=True) is user
    huber = get_loss("huber", 0.7)
    assert gcp_plan.check_loss(huber, exact=True) is huber
    with pytest.raises(ValueError, match=f"unknown loss code {N_LOSSES}"):
        gcp_plan.check_loss(Coded(N_LOSSES))
    for bad in (Coded(True), Coded("0"), Coded(1.0), object()):
        with pytest.raises(TypeError, match="integer code"):
            gcp_plan.check_loss(bad)
    with pytest.raises(TypeError, match="needs methods"):
        gcp_plan.check_loss(Coded(-1))              # a user code without the functions
    with pytest.raises(TypeError, match="needs methods"):
        gcp_plan.check_loss(Coded(0), exact=True)   # the exact loss calls the functions
    assert gcp_plan.loss_code(huber) == (7, 0.7)
    code, param = gcp_plan.loss_code(user)
    assert code == -1 and np.isnan(param)


@pytest.mark.slow
def test_stratified_zeros_of_a_dense_tensor_above_2_24_entries():
    """A tensor of more than 2^24 entries, 99 % nonzero: no nonzero is taken for a zero (the
    zeros used to be found by rejection there, giving up after 256 draws)."""
    shape = (4097, 4097)
    size = shape[0] * shape[1]
    assert size > 2 ** 24
    rng = np.random.default_rng(0)
    is_nz = np.ones(size, dtype=bool)
    is_nz[rng.integers(0, size, size // 100)] = False
    lin = np.flatnonzero(is_nz)
    subs = np.stack(np.divmod(lin, shape[1]), axis=1)
    X = SparseTensor._from_canonical(subs, np.ones(lin.size), shape)
    del subs, lin
    be = get_backend("cpu")
    state = be.gcp.setup(be.prepare(X, "coo"), "stratified", (10, 20000), (10, 20000), 0)
    for zs in (gcp_ops.draw(state.grad_sampler, 5, 2)[0][10:], state.loss_sample[0][10:]):
        assert zs.shape[0] == 20000
        assert not is_nz[zs[:, 0] * shape[1] + zs[:, 1]].any()


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
    # work_per_thread=1: every thread asked for runs, however small the sample
    for threads in (1, 2, 3):
        for block in (0, 256):
            out = [np.full_like(f, np.nan) for f in factors]
            f = _gcp.gradient(None, 0, loss.code, loss.param, lam, factors, out, act, True,
                              threads, xsubs=subs, xvals=x, xw=w, xcorr=corr, block=block,
                              work_per_thread=1)
            for g, r in zip(out, ref):
                np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10)
            assert f == pytest.approx(fref, rel=1e-10)
            out_y = [np.zeros_like(f) for f in factors]
            _gcp.gradient(None, 0, -1, 0.0, lam, factors, out_y, act, False, threads,
                          xsubs=subs, xvals=x, xw=w, xcorr=corr, xy=y, block=block,
                          work_per_thread=1)
            for g, r in zip(out_y, ref_y):
                np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10)
            results.append((block, out))
    # the summation order is fixed by the samples: 1, 2 and 3 threads agree bitwise
    for other in (results[2:4], results[4:6]):
        for (b1, o1), (b2, o2) in zip(results[:2], other):
            assert b1 == b2
            for g1, g2 in zip(o1, o2):
                np.testing.assert_array_equal(g1, g2)


def test_the_sampler_is_written_once():
    """The drawing of samples (the generator's words turned into entries, values, weights and
    flags) is defined once, in include/sktf_gcp_sample.h, and both the CPU kernels and the
    OpenCL kernels call it: no other compiled source of the package turns those words into
    entries (the generator's own header, _numerics' bindings of it for the Python side, and
    the benchmarks' generator of synthetic tensors, which draws coordinates of its own,
    aside), and the sampler's functions have one definition in the tree."""
    import pathlib
    import re
    import sktensor_fast
    from sktensor_fast.backends.opencl.program import kernel_source
    root = pathlib.Path(sktensor_fast.__file__).parent
    sources = {p: p.read_text(encoding="utf-8") for p in sorted(root.rglob("*"))
               if p.suffix in (".pyx", ".pxd", ".pxi", ".h", ".cl")}
    words = {p.name for p, text in sources.items()
             if re.search(r"\bsktf_(rand|below|sample_key)\s*\(", text)}
    assert words == {"sktf_rng.h", "sktf_gcp_sample.h", "_numerics.pyx", "_synth.pyx"}
    defined = [(p.name, name) for p, text in sources.items()
               for name in re.findall(r"^SKTF_INLINE\b[^;{(]*\b(sktf_gcp_\w+)\s*\(", text,
                                      re.M)]
    names = [name for _, name in defined]
    assert "sktf_gcp_sample" in names and "sktf_gcp_find" in names
    assert sorted(set(names)) == sorted(names)
    assert {f for f, _ in defined} == {"sktf_gcp_sample.h"}
    # no sampler of the old kind left in a kernel source (Cython cdef or OpenCL function)
    for p, text in sources.items():
        assert not re.search(r"\b(_find|_zero_coords|gcp_find|gcp_zero_coords|gcp_sample)\s*\(",
                             text), p.name
    # both devices call it
    assert "sktf_gcp_sample(&S.g" in sources[root / "backends" / "cpu" / "_gcp.pyx"]
    cl_src = kernel_source("common.cl", "gcp.cl")
    assert "sktf_gcp_sample(&S" in cl_src and '#line 1 "sktf_gcp_sample.h"' in cl_src


def test_sampler_parameters_are_the_headers_layout():
    """GcpSampler.params is the parameter array of sktf_gcp_sample.h (SKTF_GCP_* indices)."""
    idx = sampler_param_index()
    X, _ = small_problem(shape=(30, 20, 10), density=0.05, R=4)
    be = get_backend("cpu")
    state = be.gcp.setup(be.prepare(X), "semi-stratified", (70, 90), (5, 5), 0)
    sp = state.grad_sampler.params
    assert sp.shape == (idx["NPARAMS"],)
    assert (sp[idx["NNZ"]], sp[idx["P"]], sp[idx["Q"]]) == (X.nnz, 70, 90)
    assert (sp[idx["HAS_LIN"]], sp[idx["NZERO"]]) == (1, X.size - X.nnz)
    assert (sp[idx["CORRECT"]], sp[idx["EXPLICIT_Z"]], sp[idx["ZMODE"]]) == (1, 0, 0)


def test_fused_sampling_equals_drawn_sample_and_inactive_modes_untouched():
    X, _ = small_problem(shape=(30, 20, 10), density=0.05, R=4)
    rng = np.random.default_rng(2)
    U = [rng.uniform(0.1, 1.0, (s, 4)) for s in X.shape]
    be = get_backend("cpu")
    T = be.prepare(X)
    loss = get_loss("poisson")
    lam = np.ones(4)
    for sampler in ("stratified", "semi-stratified", "uniform"):
        state = be.gcp.setup(T, sampler, (700, 900), (5, 5), 0)
        key = _gcp.step_key(np.uint64(11), np.uint64(4))
        subs, x, w, corr = gcp_ops.draw(state.grad_sampler, key, 3)
        ref, fref = gradient_ref(subs, x, w, corr, lam, U, loss)
        for threads in (1, 2):
            with num_threads(threads):
                out, f = be.gcp.sampled_gradient(T, state, lam, U, loss, 11, 3, with_loss=True)
            for g, r in zip(out, ref):
                np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10)
            assert f == pytest.approx(fref, rel=1e-10)
        marker = [np.full_like(u, 7.0) for u in U]
        be.gcp.sampled_gradient(T, state, lam, U, loss, 11, 3, out=marker,
                                active=[False, True, False])
        assert np.all(marker[0] == 7.0) and np.all(marker[2] == 7.0)
        np.testing.assert_allclose(marker[1], ref[1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("sampler", ["stratified", "semi-stratified", "uniform"])
def test_serial_steps_with_and_without_prefetching_are_bitwise_the_same(sampler):
    """The serial loop prefetches what its samples read only when that exceeds
    ``_gcp.prefetch_bytes()`` (small tensors stay in cache): always and never prefetching
    give the same gradients, losses and steps, bit for bit."""
    X, U0 = small_problem(seed=5, shape=(20, 30, 9, 6), density=0.1, R=4)
    be = get_backend("cpu")
    T = be.prepare(X)
    loss = get_loss("poisson")
    lam = np.array([1.0, 0.5, 2.0, 0.8])
    results = []
    old = _gcp.prefetch_bytes()
    try:
        for limit in (0, 2 ** 62):
            _gcp.prefetch_bytes(limit)
            state = be.gcp.setup(T, sampler, (300, 400), (200, 200), 3)
            assert state.grad_sampler.prefetches(4) == (limit == 0)
            with num_threads(1):
                g, f = be.gcp.sampled_gradient(T, state, lam, U0, loss, 7, 2, with_loss=True)
                U = [u.copy() for u in U0]
                opt = make_optimizer("adam", learning_rate=1e-2).start(be, U)
                be.gcp.steps(T, state, lam, U, loss, 7, 0, 20, opt, 0.0)
            results.append((g, f, U, be.gcp.loss_estimate(T, state, lam, U, loss)))
    finally:
        _gcp.prefetch_bytes(old)
    (g0, f0, U0_, l0), (g1, f1, U1, l1) = results
    assert f0 == f1 and l0 == l1
    for a, b in zip(g0 + U0_, g1 + U1):
        np.testing.assert_array_equal(a, b)
    assert old == _gcp.prefetch_bytes()


@pytest.mark.parametrize("solver,block", [("adam", 300), ("sgd", 300), ("adam", 0),
                                          ("adagrad", 0), ("sgd", 0)])
def test_fused_steps_on_several_blocks_and_threads_are_bitwise_the_same(solver, block):
    """The compiled loop of steps with the multi-threaded gradient (the first thread's chunks
    straight into the gradient, the others' by row ranges, wherever the threads meet) gives,
    for 2, 3 and 5 threads (each run several times: the threads meet where their timing
    takes them), the bits of the serial gradient and optimiser step called one step at a
    time, 5 steps: on blocks of 300 samples and with the step's samples in one block; all
    steps in one parallel region (the optimiser step of each row range into the other of two
    copies of the factors, the odd last step's copied back), or, with a deadline, one step
    per parallel region (the optimiser step split among the threads after the last block).  17 rows in mode 0, more than
    MAX_PARTS in mode 1 (ranges of 4 rows), an inactive mode untouched."""
    rng = np.random.default_rng(8)
    shape = (17, 150, 9)
    X, _ = small_problem(seed=3, shape=shape, density=0.2, R=5)
    be = get_backend("cpu")
    T = be.prepare(X)
    loss = get_loss("poisson")
    lam = rng.uniform(0.5, 1.5, 5)
    U0 = [rng.uniform(0.1, 1.0, (s, 5)) for s in shape]
    active = np.array([1, 1, 0], np.int8)
    state = be.gcp.setup(T, "stratified", (700, 650), (5, 5), 0)
    code = _gcp.SOLVER_CODES[solver]

    def optimizer(V):
        opt = make_optimizer(solver, learning_rate=1e-2, beta1=0.9, beta2=0.999,
                             epsilon=1e-8).start(be, V)
        opt.t = 2                       # the steps below are steps 3 to 7
        return opt

    with num_threads(1):
        U = [u.copy() for u in U0]
        opt = optimizer(U)
        G = None
        for s in range(5):
            G, _ = be.gcp.sampled_gradient(T, state, lam, U, loss, 5, 2 + s, out=G,
                                           active=active.astype(bool))
            opt.step(be, U, G, loss.lower, active.astype(bool))
    for i, threads in enumerate((2, 2, 2, 3, 3, 5)):
        V = [u.copy() for u in U0]
        opt2 = optimizer(V)
        G2 = [np.full_like(u, np.nan) for u in V]
        m = opt2.moments
        done, timed_out = _gcp.run_steps(
            state.grad_sampler, np.uint64(5), 2, 5, loss.code, loss.param, lam, V, G2, active,
            code, list(m[0]) if m else None, list(m[1]) if len(m) > 1 else None, 1e-2, 3,
            0.9, 0.999, 1e-8, loss.lower, threads, work_per_thread=1, block=block,
            deadline=None if i % 2 else 1e300, clock=lambda: 0.0)
        assert (done, timed_out) == (5, False)
        for a, b in zip(V, U):
            np.testing.assert_array_equal(a, b)
        for arrs, ref in zip(opt2.moments, opt.moments):
            for a, b in zip(arrs, ref):
                np.testing.assert_array_equal(a, b)
        for k in (0, 1):
            np.testing.assert_array_equal(G2[k], G[k])
        np.testing.assert_array_equal(V[2], U0[2])


@pytest.mark.parametrize("sampler,solver", [("stratified", "adam"), ("semi-stratified", "adam"),
                                            ("uniform", "sgd"), ("stratified", "adagrad")])
def test_steps_with_samples_drawn_ahead_are_bitwise_the_serial_steps(sampler, solver):
    """The serial loop of steps with a second thread drawing the samples of the next steps
    (``draw_ahead``: a ring of slots, the computing thread drawing a step itself when its
    slot is not ready) gives the bits of the gradient and optimiser step called one step at a
    time: 90 steps, more than the ring's slots (it wraps), several runs (the threads' timing
    differs), an inactive mode untouched; semi-stratified samples carry correction flags.
    Every step is counted once, from a slot or drawn by the computing thread, and the slots
    were used.  Without ``draw_ahead``, with steps on two threads, or for one step, the
    loop runs without the drawing thread."""
    rng = np.random.default_rng(4)
    shape = (17, 40, 9)
    X, _ = small_problem(seed=6, shape=shape, density=0.2, R=4)
    be = get_backend("cpu")
    T = be.prepare(X)
    loss = get_loss("poisson")
    lam = rng.uniform(0.5, 1.5, 4)
    U0 = [rng.uniform(0.1, 1.0, (s, 4)) for s in shape]
    active = np.array([1, 1, 0], np.int8)
    n_grad = (0, 60) if sampler == "uniform" else (30, 25)
    state = be.gcp.setup(T, sampler, n_grad, (5, 5), 0)
    code = _gcp.SOLVER_CODES[solver]
    n_steps = 90

    def optimizer(V):
        opt = make_optimizer(solver, learning_rate=1e-2, beta1=0.9, beta2=0.999,
                             epsilon=1e-8).start(be, V)
        opt.t = 2
        return opt

    with num_threads(1):
        U = [u.copy() for u in U0]
        opt = optimizer(U)
        G = None
        for s in range(n_steps):
            G, _ = be.gcp.sampled_gradient(T, state, lam, U, loss, 5, 2 + s, out=G,
                                           active=active.astype(bool))
            opt.step(be, U, G, loss.lower, active.astype(bool))
    from_slots = 0
    runs = [(1, n_steps, True, 10 ** 9)] * 4 + [(1, n_steps, False, 10 ** 9),
                                                (2, n_steps, True, 1), (1, 1, True, 10 ** 9)]
    # whether the drawing thread is ever ahead depends on the scheduler: on a loaded machine
    # (a test suite on every core) the computing thread may draw every step itself in a run;
    # further runs (each checked alike) until a slot has served a step, up to 40
    extra = [(1, n_steps, True, 10 ** 9)] * 40

    def more_runs():
        yield from runs
        for run in extra:
            if from_slots:
                return
            yield run

    for threads, steps, ahead, per_thread in more_runs():
        V = [u.copy() for u in U0]
        opt2 = optimizer(V)
        G2 = [np.full_like(u, np.nan) for u in V]
        m = opt2.moments
        before = _gcp.ahead_stats()
        done, timed_out = _gcp.run_steps(
            state.grad_sampler, np.uint64(5), 2, steps, loss.code, loss.param, lam, V, G2,
            active, code, list(m[0]) if m else None, list(m[1]) if len(m) > 1 else None,
            1e-2, 3, 0.9, 0.999, 1e-8, loss.lower, threads, work_per_thread=per_thread,
            draw_ahead=ahead)
        assert (done, timed_out) == (steps, False)
        if steps < n_steps:
            continue
        if ahead and threads == 1:
            stats = _gcp.ahead_stats()
            assert sum(stats) == n_steps
            from_slots += stats[0]
        else:
            assert _gcp.ahead_stats() == before      # no drawing thread
        for a, b in zip(V, U):
            np.testing.assert_array_equal(a, b)
        for arrs, ref in zip(opt2.moments, opt.moments):
            for a, b in zip(arrs, ref):
                np.testing.assert_array_equal(a, b)
        for k in (0, 1):
            np.testing.assert_array_equal(G2[k], G[k])
        np.testing.assert_array_equal(V[2], U0[2])
    assert from_slots > 0


def test_default_poisson_fit_with_samples_drawn_ahead_is_the_one_thread_fit(monkeypatch):
    """The default Poisson fit of the embedded data, whose steps of 304 samples are too small
    to share between threads: on two threads, with a CPU free, a second thread draws their
    samples ahead (``gcp_ops.DRAW_AHEAD``), and the model has the bits of the one-thread fit,
    of two threads without it, and of two threads when no CPU is free (no drawing thread)."""
    from sktensor_fast.backends.cpu import parallel_costs as pc
    from sktensor_fast.datasets import load_flights_routes
    X = load_flights_routes().tensor
    # measured costs that keep such steps on one thread (a step on two would cost 1 ms more)
    monkeypatch.setattr(gcp_ops, "MIN_SAMPLES_PER_THREAD", None)
    monkeypatch.setattr(pc, "_COSTS", {("gcp", 2): (50e-9, 1e-3)})
    models = []
    for threads, ahead, free in ((1, True, True), (2, True, True), (2, False, True),
                                 (2, True, False)):
        monkeypatch.setattr(gcp_ops, "DRAW_AHEAD", ahead)
        monkeypatch.setattr(gcp_ops, "cpu_left_free", lambda: free)
        before = _gcp.ahead_stats()
        with num_threads(threads):
            est = GCP(loss="poisson", random_state=1, max_iter=3, epoch_iters=200).fit(X)
        models.append(est)
        if threads == 2 and ahead and free:
            assert sum(_gcp.ahead_stats()) == 200       # the last epoch's steps
        else:
            assert _gcp.ahead_stats() == before
    for est in models[1:]:
        assert est.loss_history_.tolist() == models[0].loss_history_.tolist()
        for a, b in zip(est.factors_, models[0].factors_):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("solver", ["adam", "adagrad", "sgd"])
def test_fused_steps_equal_the_primitives_step_by_step(solver):
    """The CPU backend's compiled loop of steps gives the bits of gradient + optimiser step
    called one step at a time (1 and 2 threads; a draw large enough for the multi-threaded
    gradient; an inactive mode stays untouched), GcpKernels' default loop agrees, and both
    leave the optimiser's moments and step counter where the steps one by one leave them."""
    from sktensor_fast.backends.base import GcpKernels
    X, _ = small_problem(shape=(40, 30, 20), density=0.1, R=8)
    be = get_backend("cpu")
    T = be.prepare(X)
    loss = get_loss("poisson")
    lam = np.ones(8)
    rng = np.random.default_rng(5)
    U0 = [rng.uniform(0.1, 1.0, (s, 8)) for s in X.shape]
    active = [True, False, True]

    def optimizer(V):
        opt = make_optimizer(solver, learning_rate=1e-2, beta1=0.9, beta2=0.999,
                             epsilon=1e-8).start(be, V)
        opt.t = 3                       # the steps below are steps 4 to 9
        return opt

    for n_grad in ((20, 20), (7000, 7000)):   # serial / parallel gradient at 2 threads
        state = be.gcp.setup(T, "stratified", n_grad, (5, 5), 0)
        results = []
        for threads in (1, 2):
            with num_threads(threads):
                U = [u.copy() for u in U0]
                opt = optimizer(U)
                G = None
                for s in range(6):
                    G, _ = be.gcp.sampled_gradient(T, state, lam, U, loss, 9, 3 + s, out=G,
                                                   active=active)
                    opt.step(be, U, G, loss.lower, active)
                assert opt.t == 9

                def stepwise(*a):
                    return GcpKernels._stepwise(be.gcp, *a, None, None, None)
                for run in (be.gcp.steps, stepwise):
                    V = [u.copy() for u in U0]
                    opt2 = optimizer(V)
                    G2, done, timed_out = run(T, state, lam, V, loss, 9, 3, 6, opt2,
                                              loss.lower, active)
                    assert (done, timed_out, opt2.t) == (6, False, 9)
                    for a, b in zip(V, U):
                        np.testing.assert_array_equal(a, b)
                    for arrs, ref in zip(opt2.moments, opt.moments):
                        for a, b in zip(arrs, ref):
                            np.testing.assert_array_equal(a, b)
                    np.testing.assert_array_equal(V[1], U0[1])
                results.append(U)
        for a, b in zip(*results):
            np.testing.assert_array_equal(a, b)
    # a deadline already passed: one step, then the loop stops and says so
    V = [u.copy() for u in U0]
    opt2 = optimizer(V)
    _, done, timed_out = be.gcp.steps(T, state, lam, V, loss, 9, 0, 50, opt2, loss.lower,
                                      deadline=-1.0, clock=lambda: 0.0)
    assert (done, timed_out, opt2.t) == (1, True, 4)


@pytest.mark.parametrize("solver", ["adam", "adagrad", "sgd"])
def test_optimizer_objects_step_as_the_compiled_steps_and_the_formulas(solver):
    """An optimiser object's step gives the bits of the compiled element-wise step called
    with the rate and bias corrections of that step (what a step was before the optimisers
    became objects), and the textbook formulas (bias-corrected moments) to rounding."""
    rng = np.random.default_rng(3)
    be = get_backend("cpu")
    U = [rng.standard_normal((7, 3)), rng.standard_normal((5, 3))]
    V = [u.copy() for u in U]
    R_ = [u.copy() for u in U]
    opt = make_optimizer(solver, learning_rate=0.05, decay=0.5, beta1=0.8, beta2=0.99,
                         epsilon=1e-6).start(be, U)
    moments = {"m": [np.zeros_like(u) for u in U], "v": [np.zeros_like(u) for u in U],
               "s": [np.zeros_like(u) for u in U]}
    ref = {k: [a.copy() for a in v] for k, v in moments.items()}
    lower = -0.5
    clipped = False
    for t in range(1, 8):
        if t == 4:                      # a failed epoch: the rate halves from step 4 on
            opt.checkpoint(be)
            opt.failed_epoch()
        lr = 0.05 * 0.5 ** (t >= 4)
        assert opt.rate == lr
        G = [rng.standard_normal(u.shape) for u in U]
        opt.step(be, U, G, lower)
        assert opt.t == t
        for k in range(2):
            u, g = V[k].reshape(-1), G[k].reshape(-1)
            m, v, s = (moments[n][k].reshape(-1) for n in "mvs")
            if solver == "adam":
                _gcp.adam_step(u, g, m, v, lr, 0.8, 0.99, 1e-6, 1.0 - 0.8 ** t,
                               1.0 - 0.99 ** t, lower)
                rm, rv = ref["m"][k], ref["v"][k]
                rm[...] = 0.8 * rm + 0.2 * G[k]
                rv[...] = 0.99 * rv + 0.01 * G[k] ** 2
                step = lr * (rm / (1 - 0.8 ** t)) / (np.sqrt(rv / (1 - 0.99 ** t)) + 1e-6)
            elif solver == "adagrad":
                _gcp.adagrad_step(u, g, s, lr, 1e-6, lower)
                rs = ref["s"][k]
                rs += G[k] ** 2
                step = lr * G[k] / (np.sqrt(rs) + 1e-6)
            else:
                _gcp.sgd_step(u, g, lr, lower)
                step = lr * G[k]
            R_[k] = np.maximum(R_[k] - step, lower)
        clipped |= any(np.any(u == lower) for u in U)
    assert clipped                      # the clipping was exercised
    for a, b, c in zip(U, V, R_):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-14)
    for name, arrs in zip(opt.moment_names, opt.moments):
        for a, b in zip(arrs, moments[name]):
            np.testing.assert_array_equal(a, b)


def test_optimizer_checkpoint_and_failed_epoch():
    be = get_backend("cpu")
    rng = np.random.default_rng(0)
    U = [rng.random((4, 2)), rng.random((3, 2))]
    opt = make_optimizer("adam", learning_rate=0.1, decay=0.25).start(be, U)
    opt.step(be, U, [np.ones((4, 2)), np.ones((3, 2))], 0.0)
    opt.checkpoint(be)
    kept = [[a.copy() for a in arrs] for arrs in opt.moments]
    for _ in range(3):
        opt.step(be, U, [np.ones((4, 2)), -np.ones((3, 2))], 0.0)
    assert opt.t == 4 and not np.array_equal(opt.moments[0][0], kept[0][0])
    opt.failed_epoch()
    assert (opt.t, opt.n_fails, opt.rate) == (1, 1, 0.1 * 0.25)
    for arrs, ref in zip(opt.moments, kept):
        for a, b in zip(arrs, ref):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(RuntimeError, match="without a checkpoint"):
        opt.failed_epoch()
    opt.start(be, U)                    # a new fit: zero moments, full rate
    assert (opt.t, opt.n_fails, opt.rate) == (0, 0, 0.1)
    assert all(not a.any() for arrs in opt.moments for a in arrs)


def test_optimizer_names_and_settings_are_checked():
    from sktensor_fast.decomposition.optimizers import LBFGSB, OPTIMIZERS, Adam
    with pytest.raises(ValueError, match="unknown GCP solver 'newton'; use adam, sgd, "
                                         "adagrad"):
        make_optimizer("newton")
    with pytest.raises(ValueError, match="unknown GCP solver"):
        make_optimizer(["adam"])
    assert set(OPTIMIZERS) == {"adam", "sgd", "adagrad", "lbfgsb"}
    # the estimator's settings, each class taking its own
    opt = make_optimizer("adam", learning_rate=0.5, beta1=0.5, max_iter=3, tol=0.1)
    assert isinstance(opt, Adam) and (opt.learning_rate, opt.beta1) == (0.5, 0.5)
    assert repr(make_optimizer("sgd", learning_rate=0.5, beta1=0.5)) == \
        "SGD(learning_rate=0.5, decay=0.1)"
    lb = make_optimizer("lbfgsb", learning_rate=0.5, max_iter=3, tol=0.1)
    assert isinstance(lb, LBFGSB) and lb.options()["maxiter"] == 3
    assert lb.options(tight=True)["ftol"] == 1e-15
    for kw, match in ((dict(learning_rate=0.0), "learning_rate must be > 0"),
                      (dict(decay=1.5), r"decay must be in \(0, 1\]"),
                      (dict(beta1=1.0), "beta1 must be < 1"),
                      (dict(beta2=float("nan")), "beta2 must be a real number"),
                      (dict(epsilon=0), "epsilon must be > 0")):
        with pytest.raises(ValueError, match=match):
            make_optimizer("adam", **kw)
    # the estimator's own error for an unknown solver is unchanged
    with pytest.raises(ValueError, match="'solver' parameter of GCP must be a str among"):
        GCP(solver="newton").fit(np.ones((3, 3, 3)))


def test_exact_loss_and_gradient_match_pyttb():
    ttb = pytest.importorskip("pyttb")
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
        F, G = be.gcp.full_loss_grad(T, np.ones(3), U, loss, mask=mask)
        assert F == pytest.approx(F_ref, rel=1e-10)
        for g, r in zip(G, G_ref):
            np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-10)


# ---------------------------------------------------------------------------- estimator
@pytest.mark.parametrize("solver", ["lbfgsb", "adam"])
def test_gaussian_reaches_cpals_fit(solver):
    truth, X = planted(shape=(15, 12, 10))
    with num_threads(1):  # a tiny reference fit: threads would only add overhead
        cp = CPALS(rank=3, tol=1e-10, max_iter=500, random_state=0).fit(X)
    # the precision of a least-squares fit needs large samples (the default is 1 % of the
    # nonzeros, at least 100, on small tensors)
    kw = dict(learning_rate=3e-3, epoch_iters=100, max_iter=300, tol=1e-6, max_fails=3,
              n_samples_grad=1000)
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


def test_mask_observing_zeros_only_is_refused_for_what_it_is():
    """Observed zeros only: the best model is zero, its components undetermined; refused for
    a dense and a sparse X alike, naming the mask (not an 'empty tensor')."""
    D = np.random.default_rng(0).poisson(1.0, (4, 3, 2)).astype(float)
    only_zeros = D == 0
    hidden = np.where(only_zeros, D, np.nan)          # the nonzeros unobserved (NaN)
    for X in (D, hidden, SparseTensor.from_dense(D)):
        for solver in ("lbfgsb", "adam"):
            with pytest.raises(ValueError, match="mask observes no nonzero entry") as info:
                GCP(rank=1, mask=only_zeros, solver=solver, random_state=0).fit(X)
            assert "empty tensor" not in str(info.value)
    with pytest.raises(ValueError, match="mask observes no nonzero entry"):
        GCP(rank=1, mask=SparseTensor.from_dense(only_zeros.astype(float))).fit(D)
    with pytest.raises(ValueError, match="empty tensor"):      # no mask: the data are empty
        GCP(rank=1).fit(np.zeros((3, 2, 2)))


def test_transform_score_inverse_transform(device):
    truth, X = planted(shape=(20, 9, 8), noise=0.0)
    g = GCP(rank=3, solver="lbfgsb", random_state=0, device=device).fit(X)
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


# ---------------------------------------------------------------------------- hostile input
@pytest.mark.parametrize("kw", [
    dict(n_samples_grad=2 ** 62),
    dict(n_samples_grad=2 ** 30),            # 2^30 nonzeros and 2^30 zeros: one too many
    dict(n_samples_grad=(2 ** 31 - 1, 1)),
    dict(n_samples_grad=2 ** 31, sampler="uniform"),
    dict(n_samples_loss=2 ** 40),
    dict(n_samples_loss=(1, 2 ** 31)),
])
def test_sample_counts_are_bounded(kw):
    with pytest.raises(ValueError, match="GCP_MAX_SAMPLES = 2\\*\\*31 - 1"):
        GCP(**kw).fit(np.ones((3, 3, 3)))


def test_epoch_iters_beyond_int64_is_refused():
    """The kernels count an epoch's steps in int64: 2**63 steps is a parameter error, not an
    OverflowError from inside the fit."""
    with pytest.raises(ValueError, match="epoch_iters"):
        GCP(epoch_iters=2 ** 63, max_iter=1).fit(np.ones((3, 3, 3)))


def test_sample_counts_at_the_bound_pass_validation():
    from sktensor_fast.decomposition.gcp import GCP_MAX_SAMPLES
    for kw in [dict(n_samples_grad=GCP_MAX_SAMPLES, sampler="uniform"),
               dict(n_samples_grad=(GCP_MAX_SAMPLES - 1, 1)),
               dict(n_samples_loss=(GCP_MAX_SAMPLES // 2))]:
        GCP(**kw)._check_counts()


@pytest.mark.slow
def test_large_sampling_step_is_interruptible():
    """A step of 2·10⁹ samples runs for minutes inside one compiled call: Ctrl-C (SIGINT)
    stops it within a fraction of a second, on one thread and on two; so it does an epoch of
    a million short steps on two threads (all steps in one parallel region), and an epoch of
    10⁹ steps of 20 samples on one thread with a second drawing their samples ahead."""
    import subprocess
    import sys
    code = r'''
import os, signal, threading, time
import numpy as np
from sktensor_fast import GCP, num_threads
X = np.random.default_rng(0).poisson(1.0, (30, 20, 10)).astype(float)
for threads in (1, 2):
    est = GCP(rank=2, loss="poisson", n_samples_grad=10 ** 9, epoch_iters=1, max_iter=1,
              random_state=0)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    t = time.perf_counter()
    timer.start()
    try:
        with num_threads(threads):
            est.fit(X)
        print("finished", threads)
    except KeyboardInterrupt:
        print("interrupted", threads, time.perf_counter() - t - 0.5)
est = GCP(rank=2, loss="poisson", n_samples_grad=(20000, 20000), epoch_iters=10 ** 6,
          max_iter=1, random_state=0)
timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
t = time.perf_counter()
timer.start()
try:
    with num_threads(2):
        est.fit(X)
    print("finished steps")
except KeyboardInterrupt:
    print("interrupted steps", time.perf_counter() - t - 0.5)
# steps of 20 samples: on one thread, a second one drawing their samples ahead (as when a
# CPU is free)
from sktensor_fast.backends.cpu import gcp_ops
gcp_ops.cpu_left_free = lambda: True
gcp_ops.MIN_SAMPLES_PER_THREAD = 10 ** 6
est = GCP(rank=2, loss="poisson", n_samples_grad=(10, 10), epoch_iters=10 ** 9,
          max_iter=1, random_state=0)
timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
t = time.perf_counter()
timer.start()
try:
    with num_threads(2):
        est.fit(X)
    print("finished ahead")
except KeyboardInterrupt:
    print("interrupted ahead", time.perf_counter() - t - 0.5)
'''
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    lines = [ln.split() for ln in out.stdout.splitlines()]
    assert [ln[:2] for ln in lines] == [["interrupted", "1"], ["interrupted", "2"],
                                        ["interrupted", "steps"], ["interrupted", "ahead"]], \
        out.stdout + out.stderr
    for ln in lines:
        assert float(ln[2]) < 5.0, out.stdout  # seconds from the signal to the exception


def test_losses_without_zero_in_their_domain_match_their_definition():
    """zero_in_domain is False exactly for the losses whose f(0, m) is unbounded below."""
    for name in sorted(LOSSES):
        params = [PARAMS.get(name)] if name != "beta" else [0.5, 2.0, -0.5, -2.0]
        for p in params:
            loss = get_loss(name, p)
            m = np.array([0.0, 1e-12, 1e-6, 1e-3]) if loss.lower == 0 else \
                -np.logspace(-3, 2, 6)
            with np.errstate(over="ignore"):
                lowest = float(np.min(loss.value(np.zeros_like(m), m)))
            assert loss.zero_in_domain == (lowest > -5.0), (name, p, lowest)
    assert {n for n in LOSSES if not get_loss(n, PARAMS.get(n)).zero_in_domain} == \
        {"zt_poisson", "gamma", "rayleigh"}


@pytest.mark.parametrize("loss,param", [("zt_poisson", None), ("gamma", None),
                                        ("rayleigh", None), ("beta", -0.5)])
@pytest.mark.parametrize("solver", ["lbfgsb", "adam"])
def test_losses_without_zero_refuse_zeros_unless_masked(loss, param, solver):
    rng = np.random.default_rng(0)
    X = np.where(rng.random((8, 7, 6)) < 0.4, rng.poisson(3.0, (8, 7, 6)) + 1.0, 0.0)
    kw = dict(rank=2, loss=loss, loss_param=param, solver=solver, max_iter=5, epoch_iters=20,
              random_state=0)
    with pytest.raises(ValueError, match="defined for data > 0 only.*mask"):
        GCP(**kw).fit(SparseTensor.from_dense(X))
    with pytest.raises(ValueError, match="defined for data > 0 only"):
        GCP(**kw).fit(X)  # a dense array's zeros are zeros too
    # a mask that observes some zeros is refused, one of the nonzeros only fits
    with pytest.raises(ValueError, match="the mask observes 1 zero"):
        GCP(mask=(X > 0) | (np.arange(X.size) == np.flatnonzero(X == 0)[0]).reshape(X.shape),
            **kw).fit(X)
    g = GCP(mask=X > 0, **kw).fit(X)
    assert np.isfinite(g.loss_) and all(np.all(np.isfinite(f)) for f in g.factors_)
    # transform / score of data with zeros: refused as well
    with pytest.raises(ValueError, match="defined for data > 0 only"):
        g.transform(X)
    # the same data without zeros fit without a mask
    GCP(**kw).fit(X + 1.0)


@pytest.mark.parametrize("make", [
    lambda: GCP(rank=3, loss="poisson", epoch_iters=100, max_iter=3, tol=0, random_state=0),
    lambda: GCP(rank=3, loss="poisson", solver="lbfgsb", max_iter=15, random_state=0),
    lambda: CPALS(rank=3, max_iter=30, tol=0, random_state=0),
], ids=["gcp-adam", "gcp-lbfgsb", "cpals"])
def test_one_estimator_fitted_from_threads_at_once(make):
    """Fits of one estimator object from 4 threads at once: none raises (the state of a fit is
    passed down, not stored on the estimator) and the model left is that of a serial fit."""
    import threading
    rng = np.random.default_rng(0)
    X = rng.poisson(2.0, (30, 20, 15)).astype(float)
    ref = make().fit(X)
    est = make()
    errors = []

    def work():
        try:
            est.fit(X)
        except Exception as exc:  # pragma: no cover - reported by the assertion
            errors.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert not any(k.startswith("_fit") for k in vars(est))
    np.testing.assert_array_equal(est.weights_, ref.weights_)
    for a, b in zip(est.factors_, ref.factors_):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("solver", ["adam", "sgd", "adagrad", "lbfgsb"])
@pytest.mark.parametrize("masked", [False, True])
def test_fit_transform_agrees_with_transform_for_every_solver(solver, masked, device):
    _, X = planted(shape=(15, 9, 8), noise=0.05)
    mask = np.random.default_rng(1).random(X.shape) < 0.8 if masked else None
    g = GCP(rank=3, solver=solver, epoch_iters=20, max_iter=5, random_state=0, mask=mask,
            device=device)
    W = g.fit_transform(X)
    if masked:
        # transform sees every entry, the fit the observed ones only: the fitted loadings
        np.testing.assert_array_equal(W, g.factors_[0] * g.weights_)
        return
    # fit_transform(X) is fit(X).transform(X), and the fit made no second solve
    np.testing.assert_array_equal(g.transform(X), W)
    h = GCP(rank=3, solver=solver, epoch_iters=20, max_iter=5, random_state=0,
            device=device).fit(X)
    np.testing.assert_array_equal(h.factors_[0], g.factors_[0])


def test_fit_makes_no_second_solve(monkeypatch):
    """A fit runs its solver once: L-BFGS-B over all the factors and nothing after it (no
    second solve of the mode-0 loadings); only fit_transform / transform solve for the
    loadings, and only when asked."""
    from sktensor_fast.decomposition import gcp as gcp_mod
    calls = []
    orig = gcp_mod.GCP._lbfgsb

    def spy(self, *args, **kw):
        out = orig(self, *args, **kw)
        calls.append((kw.get("active"), out[2]))
        return out

    monkeypatch.setattr(gcp_mod.GCP, "_lbfgsb", spy)
    truth, _ = planted(shape=(20, 15, 10))
    X = np.random.default_rng(3).poisson(3 * truth.full()).astype(float)
    g = GCP(rank=3, loss="poisson", solver="lbfgsb", max_iter=7, tol=1e-12,
            random_state=0).fit(X)
    assert len(calls) == 1 and calls[0][0] is None
    assert g.n_iter_ == 7 == len(g.loss_history_) - 1 and g.stop_reason_ == "max_iter"
    calls.clear()
    GCP(rank=3, loss="poisson", solver="adam", max_iter=2, epoch_iters=5,
        random_state=0).fit(X)
    assert calls == []
    W = g.fit_transform(X)
    assert len(calls) == 2 and calls[1][0][0] and not any(calls[1][0][1:])
    np.testing.assert_array_equal(g.transform(X), W)


@pytest.mark.parametrize("solver", ["adam", "lbfgsb"])
def test_squared_error_refits_mode0_exactly_at_any_size(monkeypatch, solver):
    """The mode-0 problem of the squared error is least squares: fit and transform solve it
    exactly, so fit_transform(X) equals transform(X) to rounding, also above GCP_DENSE_LIMIT
    (where transform of other losses is a stochastic estimate)."""
    from sktensor_fast.decomposition import gcp as gcp_mod
    _, X = planted(shape=(15, 9, 8), noise=0.05)
    for limit in (gcp_mod.GCP_DENSE_LIMIT, 100):
        if solver == "lbfgsb" and limit == 100:
            continue  # L-BFGS-B needs the dense tensor
        monkeypatch.setattr(gcp_mod, "GCP_DENSE_LIMIT", limit)
        g = GCP(rank=3, solver=solver, epoch_iters=20, max_iter=3, random_state=0)
        W = g.fit_transform(X)
        np.testing.assert_allclose(g.transform(X), W, rtol=1e-10, atol=1e-12)
        # and those are the least-squares loadings: the gradient in mode 0 vanishes
        M = KruskalTensor(None, [W] + g.factors_[1:]).full()
        grad = np.einsum("ijk,jr,kr->ir", M - X, g.factors_[1], g.factors_[2])
        assert np.abs(grad).max() < 1e-9 * np.abs(X).sum()


def test_lbfgsb_transform_of_a_tensor_above_the_dense_limit_takes_adam(monkeypatch):
    """``transform`` of a tensor above GCP_DENSE_LIMIT is stochastic: an L-BFGS-B estimator
    takes Adam with its own settings there (it used to ask for a stochastic solver called
    'lbfgsb' and fail), the same loadings as an Adam estimator of the same settings."""
    from sktensor_fast.decomposition import gcp as gcp_mod
    X = np.random.default_rng(0).poisson(1.0, (12, 9, 8)).astype(float)
    kw = dict(rank=2, loss="poisson", epoch_iters=10, max_iter=3, random_state=0)
    est = GCP(solver="lbfgsb", **kw).fit(X)
    monkeypatch.setattr(gcp_mod, "GCP_DENSE_LIMIT", 100)
    W = est.transform(X[:5])
    adam = GCP(solver="adam", **kw).fit(X)
    adam.weights_, adam.factors_ = est.weights_, est.factors_
    np.testing.assert_array_equal(W, adam.transform(X[:5]))
    assert W.shape == (5, 2) and np.all(np.isfinite(W))


def test_score_of_zero_samples_is_a_value_error():
    _, X = planted()
    g = GCP(rank=2, solver="lbfgsb", max_iter=5, random_state=0).fit(X)
    empty = SparseTensor._from_canonical(np.zeros((0, 3), np.int64), np.zeros(0),
                                         (0,) + X.shape[1:])
    for method in (g.score, g.transform):
        with pytest.raises(ValueError, match="at least one sample"):
            method(empty)


@pytest.mark.parametrize("solver", ["lbfgsb", "adam"])
def test_non_finite_initial_loss_is_a_value_error(solver):
    """exp(m) of poisson_log overflows at the given init, and (x - m)² of data near 1e300: the
    initial guess has no finite loss, a problem of the input, not a FloatingPointError."""
    X = np.random.default_rng(0).poisson(2.0, (4, 3, 2)).astype(float)
    init = [np.full((s, 1), 10.0) for s in X.shape]  # m = 1000, exp(m) = inf
    kw = dict(rank=1, solver=solver, max_iter=2, epoch_iters=5, random_state=0)
    with pytest.raises(ValueError, match="loss of the initial guess .*poisson_log"):
        GCP(loss="poisson_log", init=init, **kw).fit(X)
    with pytest.raises(ValueError, match="loss of the initial guess .*gaussian"):
        GCP(**kw).fit(X * 1e300)


# ------------------------------------------------------------------ every device, one model
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_same_model_on_every_device(device, name):
    X, _ = sparse_problem(shape=(20, 15, 12), density=0.08, seed=4)
    if LOSSES[name].data == "binary":
        X = SparseTensor(X.subs, np.ones(X.nnz), X.shape)
    loss = get_loss(name, PARAMS.get(name))
    # losses of positive data fit the observed nonzeros only
    mask = None if loss.zero_in_domain else X.to_dense() != 0
    a, b = fits_to_compare(lambda **kw: GCP(
        rank=3, loss=name, loss_param=PARAMS.get(name), mask=mask, solver="adam",
        sampler="stratified", epoch_iters=25, max_iter=4, tol=0, random_state=7,
        n_samples_grad=200, n_samples_loss=(300, 300), learning_rate=1e-2, **kw), X, device)
    assert b.n_iter_ == a.n_iter_ == 4
    np.testing.assert_allclose(b.loss_history_, a.loss_history_, rtol=1e-9)
    assert b.loss_ == pytest.approx(a.loss_, rel=1e-9)
    # the final loadings of mode 0 come from an L-BFGS-B solve (on the host for both); with
    # beta < 1 its gradient near the zero bound is (m + eps)^(beta - 2) ~ 1e15, which
    # amplifies the last-bit differences of a device's pow in the stochastic phase
    rtol = 1e-6 if name == "beta" else 1e-9
    np.testing.assert_allclose(b.weights_, a.weights_, rtol=rtol)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fb, fa, rtol=rtol, atol=rtol * np.abs(fa).max())
    # the fit did something: the estimated loss went down
    assert a.loss_history_[-1] < a.loss_history_[0]


@pytest.mark.parametrize("sampler,solver", [("semi-stratified", "adagrad"),
                                            ("uniform", "sgd")])
def test_same_masked_model_on_every_device(device, sampler, solver):
    rng = np.random.default_rng(5)
    X, _ = sparse_problem(shape=(12, 10, 8), density=0.3, seed=5)
    mask = rng.random(X.shape) < 0.7
    a, b = fits_to_compare(lambda **kw: GCP(
        rank=2, loss="poisson", solver=solver, sampler=sampler, epoch_iters=20, max_iter=3,
        tol=0, random_state=3, mask=mask, n_samples_loss=(100, 100),
        learning_rate=1e-2 if solver == "adagrad" else 1e-4, **kw), X, device)
    np.testing.assert_allclose(b.loss_history_, a.loss_history_, rtol=1e-9)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fb, fa, rtol=1e-9, atol=1e-9 * np.abs(fa).max())


def test_same_lbfgsb_model_transform_and_score_on_every_device(device):
    X, _ = sparse_problem(shape=(8, 6, 5), density=0.4, seed=6)
    a, b = fits_to_compare(lambda **kw: GCP(rank=2, loss="poisson", solver="lbfgsb",
                                            max_iter=30, random_state=0, **kw), X, device)
    assert b.loss_ == pytest.approx(a.loss_, rel=1e-12)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fb, fa, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b.transform(X[:3]), a.transform(X[:3]), rtol=1e-8, atol=1e-10)
    assert b.score(X) == pytest.approx(a.score(X), rel=1e-9)
