"""GCP on the OpenCL backend (run on PoCL in CI) against the CPU backend.

The device draws its samples with the CPU's counter-based generator, so for the same (seed,
step) both backends see the same entries; the device adds each gradient row's contributions in
the CPU's order (sample order, no atomics) and forms every product in the CPU's order, with
contraction into fused multiply-adds off on both sides.  What may still differ is the last bit
of ``exp`` / ``log`` / ``pow`` (the device's math library is not glibc's), which is why the
comparisons use a relative tolerance of 1e-12 per primitive and 1e-9 for whole fits (a few
hundred optimiser steps may amplify a last-bit difference a little; in practice the fits below
agree far more closely).
"""
import numpy as np
import pytest

from sktensor_fast import GCP, SparseTensor
from sktensor_fast.backends import get_backend, gcp_plan
from sktensor_fast.backends.cpu import _gcp
from sktensor_fast.backends.cpu import gcp_ops as cpu_ops
from sktensor_fast.decomposition.losses import LOSSES, get_loss
from sktensor_fast.decomposition.optimizers import make_optimizer

from _reference import ScaledSquares, opencl_backend_or_skip, sampler_param_index, sparse_problem

cl = pytest.importorskip("pyopencl")
from sktensor_fast.backends.opencl import gcp_ops as ocl_ops  # noqa: E402

PARAMS = {"huber": 0.7, "negative_binomial": 3.0, "beta": 0.5}


_opencl_backend = opencl_backend_or_skip


def host(be, arrays):
    return [np.asarray(be.to_numpy(a)) for a in arrays]


def assert_close(got, want, rtol=1e-12):
    for g, w in zip(got, want):
        scale = max(np.abs(w).max(), 1e-300)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale)


# ---------------------------------------------------------------------------- samples
def test_step_key_is_the_cpu_generator():
    for seed, step in [(0, 0), (11, 4), (2 ** 62 - 1, 123456), (2 ** 64 - 1, 2 ** 40)]:
        assert ocl_ops.step_key(seed, step) == int(_gcp.step_key(np.uint64(seed),
                                                                 np.uint64(step)))
    assert ocl_ops.step_key(1, 2) != ocl_ops.step_key(1, 3)


def _same_draw(be, To, so, cpu_state, key, N):
    """The device's materialised sample of ``key`` equals the CPU's, entry by entry."""
    d = ocl_ops.draw(be, To, so.grad_sampler, key)
    n = d["n"]
    subs, x, w, corr = cpu_ops.draw(cpu_state.grad_sampler, key, N)
    assert n == subs.shape[0] and n > 0
    np.testing.assert_array_equal(d["subs"].get()[:n], subs)
    np.testing.assert_array_equal(d["x"].get()[:n], x)
    np.testing.assert_array_equal(d["w"].get()[:n], w)
    np.testing.assert_array_equal(d["corr"].get()[:n], corr)


@pytest.mark.parametrize("sampler", ["stratified", "semi-stratified", "uniform"])
@pytest.mark.parametrize("density", [0.05, 0.7])  # rejection / the list of zeros
def test_same_samples_as_cpu(be, cpu, sampler, density):
    X, _ = sparse_problem(density=density)
    Tc, To = cpu.prepare(X), be.prepare(X)
    sc = cpu.gcp.setup(Tc, sampler, (300, 500), (100, 100), 3)
    so = be.gcp.setup(To, sampler, (300, 500), (100, 100), 3)
    assert (so.n_grad, so.n_loss, so.n_entries) == (sc.n_grad, sc.n_loss, sc.n_entries)
    if density < 0.5:
        # one sampler (sktf_gcp_sample.h) with the same parameter array on both devices
        np.testing.assert_array_equal(so.grad_sampler.sp.get(), sc.grad_sampler.params)
    for step in (0, 1, 17):
        _same_draw(be, To, so, sc, int(_gcp.step_key(np.uint64(9), np.uint64(step + 1))), 3)
    # the fixed loss sample too
    subs, x, w, corr = sc.loss_sample
    n = so.loss_sample["n"]
    np.testing.assert_array_equal(so.loss_sample["subs"].get()[:n], subs)
    np.testing.assert_array_equal(so.loss_sample["w"].get()[:n], w)


@pytest.mark.parametrize("threshold,attempts", [(0.5, 256), (2.0, 256), (2.0, 1), (2.0, 3)])
def test_same_zero_samples_as_cpu_on_every_path(be, cpu, monkeypatch, threshold, attempts):
    """Dense tensor: zeros from the list of zeros (CPU: computed from the linear indices, as on
    the device) or by rejection that gives up after ``attempts`` draws and computes the zero."""
    monkeypatch.setattr(gcp_plan, "ZERO_LIST_DENSITY", threshold)
    monkeypatch.setattr(gcp_plan, "MAX_ATTEMPTS", attempts)
    monkeypatch.setattr(gcp_plan, "ZERO_LIST_MAX", 0)
    X, _ = sparse_problem(shape=(20, 15, 10), density=0.9)
    dense = X.to_dense()
    dense.flat[:7] = 0      # zeros before the first nonzero: the search for a zero's rank
    X = SparseTensor.from_dense(dense)      # starts left of every nonzero
    Tc, To = cpu.prepare(X), be.prepare(X)
    sc = cpu.gcp.setup(Tc, "stratified", (50, 3000), (20, 500), 3)
    so = be.gcp.setup(To, "stratified", (50, 3000), (20, 500), 3)
    assert isinstance(so, gcp_plan.GcpState) and isinstance(sc, gcp_plan.GcpState)
    idx = sampler_param_index()
    for sp in (sc.grad_sampler.params, so.grad_sampler.sp.get()):  # the path asked for
        assert (sp[idx["EXPLICIT_Z"]], sp[idx["IMPLICIT_Z"]]) == \
            ((0, 0) if threshold > 1 else (1, 1))
        assert sp[idx["MAX_ATTEMPTS"]] == attempts
    key = int(_gcp.step_key(np.uint64(9), np.uint64(1)))
    _same_draw(be, To, so, sc, key, 3)
    subs = cpu_ops.draw(sc.grad_sampler, key, 3)[0][50:]
    assert np.all(X.to_dense()[tuple(subs.T)] == 0)
    n = so.loss_sample["n"]
    np.testing.assert_array_equal(so.loss_sample["subs"].get()[:n], sc.loss_sample[0])


def test_same_samples_with_a_mask_and_without_linear_index(be, cpu):
    rng = np.random.default_rng(1)
    X, _ = sparse_problem(density=0.3)
    mask = rng.random(X.shape) < 0.6
    Xm = SparseTensor.from_dense(X.to_dense() * mask)
    zero_subs = np.argwhere(mask & (Xm.to_dense() == 0))
    Tc, To = cpu.prepare(Xm), be.prepare(Xm)
    for sampler in ("stratified", "semi-stratified", "uniform"):
        sc = cpu.gcp.setup(Tc, sampler, (200, 300), (50, 50), 2, zero_subs=zero_subs)
        so = be.gcp.setup(To, sampler, (200, 300), (50, 50), 2, zero_subs=zero_subs)
        assert so.n_entries == sc.n_entries == Xm.nnz + zero_subs.shape[0]
        np.testing.assert_array_equal(so.grad_sampler.sp.get(), sc.grad_sampler.params)
        _same_draw(be, To, so, sc, 12345, 3)
    # a shape whose size overflows int64: the look-up compares coordinate rows
    big = (2 ** 22, 2 ** 22, 2 ** 22)
    subs = rng.integers(0, 50, size=(300, 3)) * 80000
    Xb = SparseTensor(subs, rng.random(300) + 1, big)
    Tc, To = cpu.prepare(Xb), be.prepare(Xb)
    # uniform samples look every value up; give it nonzeros to find by drawing few distinct
    sc = cpu.gcp.setup(Tc, "uniform", (0, 400), (10, 10), 0)
    so = be.gcp.setup(To, "uniform", (0, 400), (10, 10), 0)
    _same_draw(be, To, so, sc, 77, 3)
    sc = cpu.gcp.setup(Tc, "stratified", (100, 100), (10, 10), 0)
    so = be.gcp.setup(To, "stratified", (100, 100), (10, 10), 0)
    _same_draw(be, To, so, sc, 78, 3)


def test_lookup_finds_every_nonzero(be, cpu):
    """Uniform samples of a dense-ish tensor hit nonzeros: their values are looked up."""
    X, _ = sparse_problem(shape=(6, 5, 4), density=0.6)
    Tc, To = cpu.prepare(X), be.prepare(X)
    so = be.gcp.setup(To, "uniform", (0, 500), (5, 5), 0)
    d = ocl_ops.draw(be, To, so.grad_sampler, 99)
    subs, x = d["subs"].get(), d["x"].get()
    np.testing.assert_array_equal(x, X.to_dense()[tuple(subs.T)])
    assert np.count_nonzero(x) > 100


# ---------------------------------------------------------------------------- primitives
@pytest.mark.parametrize("sampler", ["stratified", "semi-stratified", "uniform"])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_sampled_gradient_and_loss_equal_cpu(be, cpu, sampler, name):
    # every built-in loss: the same header functions on both devices
    X, U = sparse_problem(R=5)
    if LOSSES[name].data == "binary":
        X = SparseTensor(X.subs, np.ones(X.nnz), X.shape)
    Tc, To = cpu.prepare(X), be.prepare(X)
    loss = get_loss(name, PARAMS.get(name))
    lam = np.array([1.0, 0.5, 2.0, 1.5, 0.7])
    sc = cpu.gcp.setup(Tc, sampler, (700, 900), (300, 300), 5)
    so = be.gcp.setup(To, sampler, (700, 900), (300, 300), 5)
    Ud = [be.asarray(u) for u in U]
    for step in (0, 6):
        gc, fc = cpu.gcp.sampled_gradient(Tc, sc, lam, U, loss, 11, step, with_loss=True)
        go, fo = be.gcp.sampled_gradient(To, so, lam, Ud, loss, 11, step, with_loss=True)
        assert_close(host(be, go), gc)
        assert fo == pytest.approx(fc, rel=1e-12)
    # another seed is another sample
    g2, _ = be.gcp.sampled_gradient(To, so, lam, Ud, loss, 12, 6)
    assert not np.allclose(host(be, g2)[0], gc[0])
    lc = cpu.gcp.loss_estimate(Tc, sc, lam, U, loss)
    lo = be.gcp.loss_estimate(To, so, lam, Ud, loss)
    assert lo == pytest.approx(lc, rel=1e-12)


def test_sampled_gradient_inactive_modes_and_reused_out(be, cpu):
    X, U = sparse_problem(shape=(9, 30, 5, 7), density=0.1, R=3)
    Tc, To = cpu.prepare(X), be.prepare(X)
    loss = get_loss("poisson")
    lam = np.ones(3)
    sc = cpu.gcp.setup(Tc, "stratified", (400, 400), (50, 50), 1)
    so = be.gcp.setup(To, "stratified", (400, 400), (50, 50), 1)
    ref, _ = cpu.gcp.sampled_gradient(Tc, sc, lam, U, loss, 4, 2)
    marker = [be.asarray(np.full_like(u, 7.0)) for u in U]
    out, f = be.gcp.sampled_gradient(To, so, lam, U, loss, 4, 2, out=marker,
                                     active=[False, True, False, True])
    assert out is marker and f is None
    got = host(be, out)
    assert np.all(got[0] == 7.0) and np.all(got[2] == 7.0)
    assert_close([got[1], got[3]], [ref[1], ref[3]])
    # the same output arrays again, all modes: stale rows are cleared
    out, _ = be.gcp.sampled_gradient(To, so, lam, U, loss, 4, 2, out=marker)
    assert_close(host(be, out), ref)


def _same_sums(got, ref):
    """The device's gradient rows against the CPU's: the same sums, regrouped where a row's
    samples span several segments of gcp_run_sums (rounding of the last bits)."""
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-13 * max(np.abs(r).max(), 1e-300))


@pytest.mark.parametrize("R", [2, 7, 8])
@pytest.mark.parametrize("segment", [None, 1, 2, 10 ** 9])
@pytest.mark.parametrize("pipe", [True, False])
def test_rows_sampled_many_times_keep_the_cpu_order(be, cpu, monkeypatch, segment, R, pipe):
    """A tiny mode: every row gets hundreds of samples (long runs of the sorted keys), summed
    in pieces of ``segment`` positions (the default, one or two samples each, all in one
    piece): the CPU's sums to rounding, the same bits in every run, and bit for bit the CPU's
    where one piece holds each row's samples (the CPU kernel's order).  R = 8: the model
    values and the contributions read four columns at a time, with the same sums; R = 7: four
    columns per work-item of the row sums, read and written one by one.  Both ways of
    reading the positions in ``gcp_run_sums`` (the pipeline and the blocks of RUN_AHEAD)."""
    monkeypatch.setattr(ocl_ops, "PIPELINE_SUMS", pipe)
    if segment is not None:
        monkeypatch.setattr(ocl_ops, "RUN_SEGMENT", segment)
    X, U = sparse_problem(shape=(2, 3, 40), density=0.5, R=R, seed=3)
    Tc, To = cpu.prepare(X), be.prepare(X)
    loss = get_loss("gaussian")
    sc = cpu.gcp.setup(Tc, "semi-stratified", (3000, 3000), (10, 10), 0)
    so = be.gcp.setup(To, "semi-stratified", (3000, 3000), (10, 10), 0)
    lam = np.linspace(0.5, 2.0, R)
    gc, _ = cpu.gcp.sampled_gradient(Tc, sc, lam, U, loss, 2, 0)
    go = host(be, be.gcp.sampled_gradient(To, so, lam, U, loss, 2, 0)[0])
    again = host(be, be.gcp.sampled_gradient(To, so, lam, U, loss, 2, 0)[0])
    for g, a in zip(go, again):
        np.testing.assert_array_equal(g, a)
    if segment == 10 ** 9:
        # the Gaussian loss needs no math library: the same operations in the same order
        for g, r in zip(go, gc):
            np.testing.assert_array_equal(g, r)
    else:
        _same_sums(go, gc)


@pytest.mark.parametrize("solver", ["adam", "adagrad", "sgd"])
def test_optimizer_steps_equal_cpu(be, cpu, solver):
    """One optimiser object per device, the same steps (a failed epoch in the middle): the
    device's update kernels give the CPU's numbers."""
    rng = np.random.default_rng(2)
    U = [rng.standard_normal((7, 3)), rng.standard_normal((5, 3))]
    Uc = [u.copy() for u in U]
    Ud = [be.asarray(u) for u in U]
    kw = dict(learning_rate=0.05, decay=0.5, beta1=0.9, beta2=0.999, epsilon=1e-8)
    oc = make_optimizer(solver, **kw).start(cpu, Uc)
    od = make_optimizer(solver, **kw).start(be, Ud)
    assert len(od.moments) == len(oc.moments) == len(oc.moment_names)
    for t in range(1, 6):
        if t == 3:
            for opt, backend in ((oc, cpu), (od, be)):
                opt.checkpoint(backend)
                opt.failed_epoch()
        G = [rng.standard_normal(u.shape) for u in U]
        act = [True, t % 2 == 0]
        oc.step(cpu, Uc, G, -0.5, act)
        od.step(be, Ud, [be.asarray(g) for g in G], -0.5, act)
    assert oc.t == od.t == 5 and oc.rate == od.rate == 0.025
    assert any(np.any(u == -0.5) for u in Uc)  # the clipping was exercised
    # sqrt and division are correctly rounded in fp64 OpenCL: the same numbers
    for a, b in zip(Uc, host(be, Ud)):
        np.testing.assert_allclose(b, a, rtol=1e-15, atol=0)
    for arrs_c, arrs_d in zip(oc.moments, od.moments):
        for a, b in zip(arrs_c, host(be, arrs_d)):
            np.testing.assert_allclose(b, a, rtol=1e-15, atol=0)


@pytest.mark.parametrize("name", ["poisson", "gaussian", "user"])
def test_explicit_samples_equal_cpu(be, cpu, name):
    """``sample_gradient`` / ``sample_loss`` over explicit samples (what each process of a
    distributed fit computes for the samples it owns): the CPU's gradient and losses, for
    counts that grow and shrink from call to call (the device's buffers are reused), with
    inactive modes, a reused ``out``, an empty sample and factors given as host arrays."""
    loss = get_loss(ScaledSquares()) if name == "user" else get_loss(name)
    X, U = sparse_problem(shape=(9, 30, 5, 7), density=0.1, R=3)
    Tc = cpu.prepare(X)
    sc = cpu.gcp.setup(Tc, "semi-stratified", (500, 700), (50, 50), 1)
    lam = np.array([1.0, 0.5, 2.0])
    Ud = [be.asarray(u) for u in U]
    out = None
    for step, keep in enumerate([1200, 40, 1200, 3000, 7]):
        full = cpu_ops.draw(sc.grad_sampler, _gcp.step_key(np.uint64(3), np.uint64(step)), 4)
        # the part of a draw one process owns: some of the samples, in the draw's order
        sample = tuple(a[:keep] for a in full)
        gc, fc = cpu.gcp.sample_gradient(sample, lam, U, loss, with_loss=True)
        go, fo = be.gcp.sample_gradient(sample, lam, Ud, loss, out=out, with_loss=True)
        assert out is None or go is out
        out = go
        assert_close(host(be, go), gc)
        assert fo == pytest.approx(fc, rel=1e-12)
        assert be.gcp.sample_loss(sample, lam, Ud, loss) == pytest.approx(
            cpu.gcp.sample_loss(sample, lam, U, loss), rel=1e-12)
    act = [False, True, True, False]
    marker = [be.asarray(np.full_like(u, 7.0)) for u in U]
    go, f = be.gcp.sample_gradient(sample, lam, U, loss, out=marker, active=act)
    gc, _ = cpu.gcp.sample_gradient(sample, lam, U, loss, active=act)
    assert go is marker and f is None
    got = host(be, go)
    assert np.all(got[0] == 7.0) and np.all(got[3] == 7.0)
    assert_close(got[1:3], gc[1:3])
    empty = tuple(a[:0] for a in sample)
    go, f = be.gcp.sample_gradient(empty, lam, Ud, loss, out=out, with_loss=True)
    assert f == 0.0 and not any(g.any() for g in host(be, go))
    assert be.gcp.sample_loss(empty, lam, Ud, loss) == 0.0


def test_user_defined_loss_takes_the_host_fallback(be, cpu):
    class Squared:
        lower = -np.inf

        def value(self, x, m):
            return (x - m) ** 2

        def deriv(self, x, m):
            return 2 * (m - x)

    user = get_loss(Squared())
    assert user.code < 0
    X, U = sparse_problem(R=3)
    Tc, To = cpu.prepare(X), be.prepare(X)
    sc = cpu.gcp.setup(Tc, "semi-stratified", (300, 300), (100, 100), 5)
    so = be.gcp.setup(To, "semi-stratified", (300, 300), (100, 100), 5)
    lam = np.ones(3)
    gc, fc = cpu.gcp.sampled_gradient(Tc, sc, lam, U, user, 1, 1, with_loss=True)
    go, fo = be.gcp.sampled_gradient(To, so, lam, U, user, 1, 1, with_loss=True)
    assert_close(host(be, go), gc)
    assert fo == pytest.approx(fc, rel=1e-12)
    builtin, _ = be.gcp.sampled_gradient(To, so, lam, U, get_loss("gaussian"), 1, 1)
    assert_close(host(be, go), host(be, builtin))
    assert be.gcp.loss_estimate(To, so, lam, U, user) == pytest.approx(
        cpu.gcp.loss_estimate(Tc, sc, lam, U, user), rel=1e-12)
    # a bare object (without the estimator's wrapper) is taken as a user-defined loss too
    go2, _ = be.gcp.sampled_gradient(To, so, lam, U, Squared(), 1, 1)
    assert_close(host(be, go2), gc)
    # and the estimator runs it on the device with the CPU's samples
    kw = dict(rank=3, loss=Squared(), epoch_iters=10, max_iter=2, tol=0, random_state=1,
              n_samples_grad=100, n_samples_loss=(100, 100))
    a = GCP(**kw).fit(X)
    b = GCP(device="opencl", **kw).fit(X)
    np.testing.assert_allclose(b.loss_history_, a.loss_history_, rtol=1e-9)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fb, fa, rtol=1e-9, atol=1e-9 * np.abs(fa).max())


def test_full_loss_and_gradient_equal_cpu(be, cpu):
    X, U = sparse_problem(shape=(5, 4, 3), density=0.4, R=2)
    mask = np.random.default_rng(0).random(X.shape) < 0.8
    Tc, To = cpu.prepare(X), be.prepare(X)
    loss = get_loss("poisson")
    Fc, Gc = cpu.gcp.full_loss_grad(Tc, np.ones(2), U, loss, mask=mask, modes=[0, 2])
    Fo, Go = be.gcp.full_loss_grad(To, np.ones(2), [be.asarray(u) for u in U], loss,
                                   mask=mask, modes=[0, 2])
    assert Fo == Fc and Go[1] is None
    for k in (0, 2):
        np.testing.assert_array_equal(be.to_numpy(Go[k]), Gc[k])


def test_gcp_fp32_on_opencl():
    """float32 data: the device samples the same entries, computes in float32."""
    be = _opencl_backend()
    cpu = get_backend("cpu")
    X, U = sparse_problem(R=3, dtype=np.float32)
    To, Tc = be.prepare(X), cpu.prepare(X)
    so = be.gcp.setup(To, "stratified", (400, 400), (200, 200), 1)
    sc = cpu.gcp.setup(Tc, "stratified", (400, 400), (200, 200), 1)
    assert so.dtype == np.float32
    loss = get_loss("poisson")
    go, _ = be.gcp.sampled_gradient(To, so, np.ones(3), U, loss, 3, 0)
    gc, _ = cpu.gcp.sampled_gradient(Tc, sc, np.ones(3), U, loss, 3, 0)
    assert all(g.dtype == np.float32 for g in go)
    assert_close(host(be, go), gc, rtol=1e-4)
    assert be.gcp.loss_estimate(To, so, np.ones(3), U, loss) == pytest.approx(
        cpu.gcp.loss_estimate(Tc, sc, np.ones(3), U, loss), rel=1e-5)
    kw = dict(rank=3, loss="poisson", epoch_iters=20, max_iter=3, tol=0, random_state=2,
              n_samples_grad=200, n_samples_loss=(300, 300), learning_rate=1e-2)
    a = GCP(**kw).fit(X)
    b = GCP(device="opencl", **kw).fit(X)
    np.testing.assert_allclose(b.loss_history_, a.loss_history_, rtol=1e-4)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fb, fa, rtol=1e-3, atol=1e-4 * np.abs(fa).max())


# ---------------------------------------------------------------------------- bad input
def test_bad_inputs_raise_before_any_kernel(be, cpu):
    X, U = sparse_problem(R=2)
    To = be.prepare(X)
    Tc = cpu.prepare(X)
    loss = get_loss("poisson")
    lam = np.ones(2)
    with pytest.raises(ValueError, match="unknown sampler"):
        be.gcp.setup(To, "random", (10, 10), (10, 10), 0)
    with pytest.raises(TypeError, match="prepared by this OpenCL backend"):
        be.gcp.setup(Tc, "stratified", (10, 10), (10, 10), 0)
    with pytest.raises(ValueError, match="pair"):
        be.gcp.setup(To, "stratified", (10, 10, 10), (10, 10), 0)
    with pytest.raises(ValueError, match="n_grad"):
        be.gcp.setup(To, "stratified", (-1, 10), (10, 10), 0)
    with pytest.raises(ValueError, match="loss_seed"):
        be.gcp.setup(To, "stratified", (10, 10), (10, 10), -3)
    with pytest.raises(ValueError, match="outside the tensor"):
        be.gcp.setup(To, "stratified", (10, 10), (10, 10), 0, zero_subs=[[0, 0, 10]])
    with pytest.raises(ValueError, match="zero_subs must be an"):
        be.gcp.setup(To, "stratified", (10, 10), (10, 10), 0, zero_subs=[[0, 0]])
    with pytest.raises(TypeError, match="integer coordinates"):
        be.gcp.setup(To, "stratified", (10, 10), (10, 10), 0, zero_subs=[[0.5, 0, 1]])
    state = be.gcp.setup(To, "stratified", (10, 10), (10, 10), 0)
    with pytest.raises(ValueError, match="rows"):
        be.gcp.sampled_gradient(To, state, lam, [U[0][:-1], U[1], U[2]], loss, 0, 0)
    with pytest.raises(ValueError, match="factor matrices given"):
        be.gcp.sampled_gradient(To, state, lam, U[:2], loss, 0, 0)
    with pytest.raises(ValueError, match="weights"):
        be.gcp.sampled_gradient(To, state, np.ones(3), U, loss, 0, 0)
    with pytest.raises(ValueError, match="seed"):
        be.gcp.sampled_gradient(To, state, lam, U, loss, -1, 0)
    with pytest.raises(ValueError, match="active"):
        be.gcp.sampled_gradient(To, state, lam, U, loss, 0, 0, active=[True])
    with pytest.raises(TypeError, match="loss"):
        be.gcp.sampled_gradient(To, state, lam, U, "poisson", 0, 0)
    with pytest.raises(ValueError, match="out\\[1\\]"):
        be.gcp.sampled_gradient(To, state, lam, U, loss, 0, 0,
                                out=[be.zeros(u.shape, np.float64) for u in U[:1]]
                                + [be.zeros((3, 2), np.float64), be.zeros(U[2].shape,
                                                                          np.float64)])
    with pytest.raises(TypeError, match="out\\[0\\]"):
        be.gcp.sampled_gradient(To, state, lam, U, loss, 0, 0, out=[u.copy() for u in U])
    other = be.prepare(X)
    with pytest.raises(ValueError, match="another tensor"):
        be.gcp.sampled_gradient(other, state, lam, U, loss, 0, 0)
    with pytest.raises(ValueError, match="another tensor"):
        be.gcp.loss_estimate(other, state, lam, U, loss)
    with pytest.raises(TypeError, match="state"):
        be.gcp.loss_estimate(To, cpu.gcp.setup(Tc, "stratified", (5, 5), (5, 5), 0), lam, U,
                             loss)
    with pytest.raises(ValueError, match="mask has shape"):
        be.gcp.full_loss_grad(To, lam, U, loss, mask=np.ones((2, 2), bool))
    Ud = [be.asarray(u) for u in U]
    opt = make_optimizer("adam").start(be, Ud)
    G = [be.asarray(u) for u in U]
    with pytest.raises(TypeError, match="device array"):
        be.gcp.optimizer_update("adam", U, G, opt.moments, opt.coefficients(1), 0.0)
    with pytest.raises(TypeError, match="moment 'm'"):
        be.gcp.optimizer_update("adam", Ud, G, ([u.copy() for u in U], opt.moments[1]),
                                opt.coefficients(1), 0.0)
    with pytest.raises(ValueError, match="moments must hold the 1 moment"):
        be.gcp.optimizer_update("adagrad", Ud, G, opt.moments, (0.1, 1e-8), 0.0)
    with pytest.raises(ValueError, match="shape"):
        be.gcp.optimizer_update("adam", Ud, [G[1], G[0], G[2]], opt.moments,
                                opt.coefficients(1), 0.0)
    with pytest.raises(ValueError, match="dtype"):
        be.gcp.optimizer_update("adam", Ud, [be.asarray(u, dtype=np.float32) for u in U],
                                opt.moments, opt.coefficients(1), 0.0)
    empty = be.prepare(SparseTensor(np.zeros((0, 3), np.int64), np.zeros(0), (4, 3, 2)))
    with pytest.raises(ValueError, match="at least one"):
        be.gcp.setup(empty, "uniform", (5, 5), (5, 5), 0, zero_subs=np.zeros((0, 3), int))
    # nothing was touched by the refused calls
    np.testing.assert_array_equal(be.to_numpy(Ud[0]), U[0])
    # and the estimator's errors are the CPU's
    with pytest.raises(ValueError, match="non-negative"):
        GCP(loss="poisson", device="opencl").fit(-np.ones((3, 3, 3)))


# ---------------------------------------------------------------------------- row sort
def _coo(subs, shape, seed=0):
    """A count tensor with nonzeros at the distinct rows of ``subs``."""
    subs = np.unique(np.asarray(subs, dtype=np.int64), axis=0)
    vals = np.random.default_rng(seed).integers(1, 6, subs.shape[0]).astype(float)
    return SparseTensor(subs, vals, shape)


def _sorted_pairs(state, act):
    """The row sort's last (rows, samples) of every mode, as host arrays."""
    rs = state.row_sort(act)
    ns = state.grad_sampler.n_samples
    N = len(act)
    return (rs.rows[rs.final].get().reshape(N, ns), rs.idx[rs.final].get().reshape(N, ns))


def _rng_factors(shape, R, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.1, 1.0, (s, R)) for s in shape]


def _heavy_row():
    """Mode 0 of 500 rows (two sort passes), nearly every nonzero in row 7."""
    rng = np.random.default_rng(5)
    shape = (500, 9, 11)
    subs = np.column_stack([np.full(400, 7), rng.integers(0, 9, 400), rng.integers(0, 11, 400)])
    few = np.column_stack([rng.integers(0, 500, 10), rng.integers(0, 9, 10),
                           rng.integers(0, 11, 10)])
    return _coo(np.vstack([subs, few]), shape), (3000, 40)


def _length_one():
    rng = np.random.default_rng(6)
    shape = (1, 40, 30)
    subs = np.column_stack([np.zeros(300, int), rng.integers(0, 40, 300),
                            rng.integers(0, 30, 300)])
    return _coo(subs, shape), (1500, 1500)


def _many_modes():
    rng = np.random.default_rng(7)
    shape = (3, 4, 2, 5, 3, 2, 4, 300)
    subs = np.column_stack([rng.integers(0, s, 600) for s in shape])
    return _coo(subs, shape), (1200, 1300)


def _long_mode():
    """A mode of 70000 rows: three passes of 8 bits (six of 3 bits), samples over 3 tiles."""
    rng = np.random.default_rng(8)
    shape = (70000, 3, 2)
    subs = np.column_stack([rng.integers(0, s, 2000) for s in shape])
    return _coo(subs, shape), (1500, 1500)


def _many_tiles():
    """70,000 samples: 69 tiles, more than the work-items of a group of the tiles' scan (set
    to 32 for this case below)."""
    rng = np.random.default_rng(9)
    shape = (300, 20, 10)
    subs = np.column_stack([rng.integers(0, s, 3000) for s in shape])
    return _coo(subs, shape), (35000, 35000)


@pytest.mark.parametrize("bits", [None, 3])
@pytest.mark.parametrize("case", [_heavy_row, _length_one, _many_modes, _long_mode,
                                  _many_tiles])
def test_row_sort_and_gradient_equal_cpu(be, cpu, monkeypatch, case, bits):
    """The row sort is a stable sort of the samples by row (every mode, several tiles, one to
    six passes), and the gradient the CPU's (Gaussian: no math library; rows summed in pieces
    where their samples span segments).  The digit count table is written whole before each
    pass reads it: a table full of other numbers before a step changes nothing."""
    if bits is not None:   # narrow digits: more passes on the same shapes; the row sums
        # reading 3 positions ahead (blocks that do not divide a segment)
        monkeypatch.setattr(be, "_gcp_sort_config", (bits, 64, 16))
        monkeypatch.setattr(ocl_ops, "RUN_AHEAD", 3)
    if case is _many_tiles:   # several tiles per work-item of the tiles' scan
        monkeypatch.setattr(be, "_gcp_scan_wg", 32, raising=False)
    X, n_grad = case()
    N = X.ndim
    Tc, To = cpu.prepare(X), be.prepare(X)
    U = _rng_factors(X.shape, 3)
    loss = get_loss("gaussian")
    sc = cpu.gcp.setup(Tc, "stratified", n_grad, (10, 10), 2)
    so = be.gcp.setup(To, "stratified", n_grad, (10, 10), 2)
    act = (True,) * N
    for step in (0, 3):
        if step:
            so.row_sort(act).cnt.fill(12345)
        gc, _ = cpu.gcp.sampled_gradient(Tc, sc, np.ones(3), U, loss, 4, step)
        go, _ = be.gcp.sampled_gradient(To, so, np.ones(3), U, loss, 4, step)
        _same_sums(host(be, go), gc)
        subs = cpu_ops.draw(sc.grad_sampler, int(_gcp.step_key(np.uint64(4),
                                                                np.uint64(step + 1))), N)[0]
        rows, idx = _sorted_pairs(so, act)
        for k in range(N):
            order = np.argsort(subs[:, k], kind="stable")
            np.testing.assert_array_equal(idx[k], order)
            np.testing.assert_array_equal(rows[k], subs[order, k])
    rs = so.row_sort(act)
    assert rs.ntiles == -(-sum(so.n_grad) // 1024) and rs.ntiles >= 2
    want_bits = bits or ocl_ops.GCP_SORT_BITS
    assert rs.npass == max(1, -(-(max(X.shape) - 1).bit_length() // want_bits))
    assert rs.scan_wg == ocl_ops.scan_wg(be) and (case is not _many_tiles
                                                  or rs.ntiles > rs.scan_wg)


def test_a_step_after_a_failing_user_loss_is_right(be, cpu):
    """A user's loss that raises half-way through a step (after the draw, before the sort):
    the next step is right."""
    class Failing:
        def value(self, x, m):
            return (x - m) ** 2

        def deriv(self, x, m):
            raise RuntimeError("boom")

    X, U = sparse_problem(R=2)
    Tc, To = cpu.prepare(X), be.prepare(X)
    sc = cpu.gcp.setup(Tc, "stratified", (300, 300), (10, 10), 1)
    so = be.gcp.setup(To, "stratified", (300, 300), (10, 10), 1)
    with pytest.raises(RuntimeError, match="boom"):
        be.gcp.sampled_gradient(To, so, np.ones(2), U, Failing(), 1, 0)
    loss = get_loss("gaussian")
    go, _ = be.gcp.sampled_gradient(To, so, np.ones(2), U, loss, 1, 0)
    gc, _ = cpu.gcp.sampled_gradient(Tc, sc, np.ones(2), U, loss, 1, 0)
    _same_sums(host(be, go), gc)


# ---------------------------------------------------------------------------- atomic path
def _atomic_backend(be):
    atomic = get_backend("opencl", {"gcp_reduction": "atomic"})
    assert atomic is not be and atomic.gcp_reduction == "atomic"
    assert be.gcp_reduction == "deterministic"
    if not ocl_ops.atomics_supported(atomic, np.float64):
        pytest.skip("the device has no 64-bit atomics")
    return atomic


@pytest.mark.parametrize("case", [_heavy_row, _length_one, _many_modes])
def test_atomic_gradient_agrees_with_the_deterministic_one(be, case):
    atomic = _atomic_backend(be)
    X, n_grad = case()
    U = _rng_factors(X.shape, 4)
    loss = get_loss("poisson")
    lam = np.array([1.0, 0.5, 2.0, 0.3])
    got = []
    for b in (be, atomic):
        T = b.prepare(X)
        st = b.gcp.setup(T, "semi-stratified", n_grad, (10, 10), 3)
        g, f = b.gcp.sampled_gradient(T, st, lam, U, loss, 2, 1, with_loss=True)
        got.append((host(b, g), f))
    assert_close(got[1][0], got[0][0])
    assert got[1][1] == pytest.approx(got[0][1], rel=1e-12)


def test_atomic_steps_and_fit_agree_with_the_deterministic_ones(be):
    atomic = _atomic_backend(be)
    X, U = sparse_problem(shape=(12, 300, 9), density=0.1, R=3)
    loss = get_loss("poisson")
    models = []
    for b in (be, atomic):
        T = b.prepare(X)
        st = b.gcp.setup(T, "stratified", (800, 800), (10, 10), 3)
        F = [b.asarray(u) for u in U]
        opt = make_optimizer("adam", learning_rate=1e-2).start(b, F)
        G, done, timed_out = b.gcp.steps(T, st, np.ones(3), F, loss, 5, 0, 25, opt, 0.0)
        assert (done, timed_out, opt.t) == (25, False, 25)
        models.append(host(b, F) + host(b, G))
    assert_close(models[1], models[0], rtol=1e-10)
    kw = dict(rank=3, loss="poisson", epoch_iters=20, max_iter=2, tol=0, random_state=1,
              n_samples_grad=300, n_samples_loss=(100, 100))
    a = GCP(device="opencl", **kw).fit(X)
    b = GCP(device="opencl", device_options={"gcp_reduction": "atomic"}, **kw).fit(X)
    np.testing.assert_allclose(b.loss_history_, a.loss_history_, rtol=1e-9)


def test_atomic_fp32(be):
    atomic = _atomic_backend(be)
    X, U = sparse_problem(R=3, dtype=np.float32)
    loss = get_loss("poisson")
    got = []
    for b in (be, atomic):
        T = b.prepare(X)
        st = b.gcp.setup(T, "stratified", (400, 400), (20, 20), 1)
        got.append(host(b, b.gcp.sampled_gradient(T, st, np.ones(3), U, loss, 3, 0)[0]))
    assert all(g.dtype == np.float32 for g in got[1])
    assert_close(got[1], got[0], rtol=1e-5)


def test_gcp_reduction_option(monkeypatch):
    from sktensor_fast import OpenCLOptions
    from sktensor_fast.backends.options import _WARNED
    assert OpenCLOptions(gcp_reduction="atomic").set_options() == {"gcp_reduction": "atomic"}
    with pytest.raises(ValueError, match="'gcp_reduction' must be one of 'deterministic', "
                                         "'atomic'"):
        OpenCLOptions(gcp_reduction="fast")
    monkeypatch.setenv("SKTENSOR_FAST_OCL_GCP_REDUCTION", "atomic")
    assert OpenCLOptions.from_env().gcp_reduction == "atomic"
    monkeypatch.setenv("SKTENSOR_FAST_OCL_GCP_REDUCTION", "sometimes")
    _WARNED.discard(("SKTENSOR_FAST_OCL_GCP_REDUCTION", "sometimes"))
    with pytest.warns(RuntimeWarning, match="GCP_REDUCTION"):
        assert OpenCLOptions.from_env().gcp_reduction is None


def test_atomic_without_int64_atomics_is_refused(be, monkeypatch):
    atomic = get_backend("opencl", {"gcp_reduction": "atomic"})
    monkeypatch.setattr(ocl_ops, "atomics_supported", lambda b, dt: False)
    X, U = sparse_problem(R=2)
    T = atomic.prepare(X)
    st = atomic.gcp.setup(T, "stratified", (50, 50), (10, 10), 0)
    with pytest.raises(ValueError, match="cl_khr_int64_base_atomics"):
        atomic.gcp.sampled_gradient(T, st, np.ones(2), U, get_loss("poisson"), 0, 0)


def test_ptx_reduction_only_for_the_atomic_path_on_nvidia(be, monkeypatch):
    """The inline PTX adds are asked for on NVIDIA devices with gcp_reduction='atomic' only
    (another device's compiler would refuse them; the deterministic path has no atomics);
    the register bound of NVIDIA's compiler is asked of NVIDIA devices only, and is part of
    the program's key."""
    import types
    for nvidia, red, want in ((True, "atomic", True), (True, "deterministic", False),
                              (False, "atomic", False)):
        fake = types.SimpleNamespace(**{n: getattr(be, n) for n in dir(be)
                                        if not n.startswith("__")})
        fake.is_nvidia, fake.gcp_reduction = nvidia, red
        key, source, opts = ocl_ops._program_parts(fake, np.float64, 3)
        assert key[8] is want
        assert ("#define GCP_PTX_ATOMIC 1" in source()) is want
        bound = f"-cl-nv-maxrregcount={ocl_ops.NVIDIA_MAX_REGISTERS}"
        assert (bound in opts) is nvidia and (bound in key) is nvidia
    monkeypatch.setattr(ocl_ops, "PTX_ATOMICS", False)
    fake.is_nvidia, fake.gcp_reduction = True, "atomic"
    assert ocl_ops._program_parts(fake, np.float64, 3)[0][8] is False
    monkeypatch.setattr(ocl_ops, "NVIDIA_MAX_REGISTERS", None)
    assert ocl_ops._program_parts(fake, np.float64, 3)[2] == []


# ---------------------------------------------------------------------------- fused steps
def _run(b, T, st, U, loss, solver, n, active=None, out=None, stepwise=False, **kw):
    F = [b.asarray(u) for u in U] if b.name != "cpu" else [u.copy() for u in U]
    opt = make_optimizer(solver, learning_rate=1e-4 if solver == "sgd" else 1e-2).start(b, F)
    R = U[0].shape[1]
    if stepwise:
        act = tuple(active) if active is not None else (True,) * len(U)
        res = b.gcp._stepwise(T, st, np.ones(R), F, loss, 9, 4, n, opt, 0.0, act, out,
                              kw.get("deadline"), kw.get("clock"))
    else:
        res = b.gcp.steps(T, st, np.ones(R), F, loss, 9, 4, n, opt, 0.0, active, out, **kw)
    G, done, timed_out = res
    moments = [a for arrs in opt.moments for a in arrs]
    return [np.asarray(b.to_numpy(a)) for a in F + list(G) + moments], done, timed_out, opt.t


@pytest.mark.parametrize("solver", ["adam", "adagrad", "sgd"])
@pytest.mark.parametrize("n_steps", [7, 8])
def test_fused_steps_equal_stepwise_and_cpu(be, cpu, solver, n_steps):
    X, U = sparse_problem(shape=(9, 300, 5, 7), density=0.05, R=3)
    loss = get_loss("poisson")
    Tc, To = cpu.prepare(X), be.prepare(X)
    sc = cpu.gcp.setup(Tc, "stratified", (700, 700), (10, 10), 1)
    so = be.gcp.setup(To, "stratified", (700, 700), (10, 10), 1)
    active = [True, False, True, True]
    fused = _run(be, To, so, U, loss, solver, n_steps, active)
    step = _run(be, To, so, U, loss, solver, n_steps, active, stepwise=True)
    ref = _run(cpu, Tc, sc, U, loss, solver, n_steps, active)
    assert fused[1:] == step[1:] == ref[1:] == (n_steps, False, n_steps)
    for a, b in zip(fused[0], step[0]):
        np.testing.assert_array_equal(a, b)
    assert_close(fused[0], ref[0])
    # an inactive mode's factor and gradient untouched
    np.testing.assert_array_equal(fused[0][1], U[1])
    assert not fused[0][4 + 1].any()


@pytest.mark.parametrize("R", [16, 8, 7, 1, 36])
def test_kernels_compiled_for_the_rank_give_the_same_bits(be, R):
    """With the rank compiled in (``specialize`` 2, the default on GPUs) the fused steps,
    a stepwise gradient with its loss, the loss estimate and the gradient of an explicit
    sample give the bits of the kernels that take the rank as an argument; the step's
    kernels then come from a program built for that rank (one per rank), and none is built
    for a rank with the setting off.  Ranks 8 and 16 draw with R / 4 work-items per
    sample (GCP_DRAW_LANES: two and four), 7, 1 and 36 (above DRAW_LANES_MAX_RANK) with
    one; 1,400 samples leave the last work-group of the draw 56 of its 64."""
    X, U = sparse_problem(shape=(9, 300, 5, 7), density=0.05, R=R)
    loss = get_loss("poisson")
    To = be.prepare(X)
    lam = np.linspace(0.5, 1.5, R)
    old = be.specialize
    got, built = {}, {}
    try:
        for spec in (0, 2):
            be.specialize = spec
            before = {k for k in be.programs._programs if k[0] == "gcp"}
            so = be.gcp.setup(To, "stratified", (700, 700), (50, 50), 1)
            Ud = [be.asarray(u) for u in U]
            fused = _run(be, To, so, U, loss, "adam", 5, [True, False, True, True])
            g, f = be.gcp.sampled_gradient(To, so, lam, Ud, loss, 3, 2, with_loss=True)
            est = be.gcp.loss_estimate(To, so, lam, Ud, loss)
            Tc = get_backend("cpu").prepare(X)
            sc = get_backend("cpu").gcp.setup(Tc, "stratified", (300, 300), (5, 5), 1)
            sample = cpu_ops.draw(sc.grad_sampler, _gcp.step_key(np.uint64(3), np.uint64(1)),
                                  4)
            ge, fe = be.gcp.sample_gradient(sample, lam, Ud, loss, with_loss=True)
            got[spec] = (fused[0] + host(be, g) + host(be, ge), (f, est, fe))
            built[spec] = {k for k in be.programs._programs if k[0] == "gcp"} - before
    finally:
        be.specialize = old
    assert len(got[0][0]) == len(got[2][0])
    for a, b in zip(got[0][0], got[2][0]):
        np.testing.assert_array_equal(a, b)
    assert got[0][1] == got[2][1]
    assert not any("rank" in k for k in built[0])
    assert {k[k.index("rank") + 1] for k in built[2]} == {R}
    lanes = R % 4 == 0 and R <= ocl_ops.DRAW_LANES_MAX_RANK
    assert {"draw_lanes" in k for k in built[2]} == {lanes}


def test_draw_by_lanes_only_where_local_memory_holds_it(be, monkeypatch):
    """The draw's products by R / 4 work-items a sample need 8 (R + 1) bytes of local memory a
    sample (fp64): a device with too little builds the draw of one work-item a sample."""
    monkeypatch.setattr(be, "specialize", 2)
    assert ocl_ops._draw_local_bytes(64, 16, 3, np.float64) == 64 * 17 * 8 + 64 * 3 * 8
    assert "draw_lanes" in ocl_ops._program_parts(be, np.float64, 3, 16)[0]
    monkeypatch.setattr(ocl_ops, "_draw_local_bytes",
                        lambda *a: int(be.device.local_mem_size) + 1)
    assert "draw_lanes" not in ocl_ops._program_parts(be, np.float64, 3, 16)[0]


def test_a_fit_builds_the_set_up_program_and_one_of_its_rank(be, monkeypatch):
    """The kernels that take no rank (set-up, materialised samples, loss sums, the optimisers
    one factor at a time) live in gcp_setup.cl and come from a program of their own, so that
    set-up, fused steps, a stepwise step and the loss estimate with the rank compiled in build
    two GCP programs: that one and the step's program of the rank (not the step's kernels
    twice).  Every kernel is in exactly one of the two files."""
    from sktensor_fast.backends.opencl.program import ProgramCache, kernel_source
    setup_src = kernel_source("gcp_setup.cl")
    step_src = kernel_source("gcp.cl")
    for name in ocl_ops._SETUP_KERNELS:
        assert f"void {name}(" in setup_src and f"void {name}(" not in step_src, name
    X, U = sparse_problem(shape=(9, 300, 5, 7), density=0.05, R=8)
    To = be.prepare(X)
    monkeypatch.setattr(be, "specialize", 2)
    monkeypatch.setattr(be, "programs", ProgramCache(be.ctx))
    so = be.gcp.setup(To, "stratified", (700, 700), (50, 50), 1)
    _run(be, To, so, U, get_loss("poisson"), "adam", 3)
    _run(be, To, so, U, get_loss("poisson"), "adam", 1, stepwise=True)
    be.gcp.loss_estimate(To, so, np.ones(8), [be.asarray(u) for u in U], get_loss("poisson"))
    keys = [k for k in be.programs._programs if k[0] in ("gcp", "gcp_setup")]
    assert sorted(k[0] for k in keys) == ["gcp", "gcp_setup"]
    assert [k[k.index("rank") + 1] for k in keys if k[0] == "gcp"] == [8]


def test_fused_steps_reuse_out_and_count_launches(be, cpu, monkeypatch):
    X, U = sparse_problem(shape=(40, 300, 6), density=0.05, R=2)
    loss = get_loss("gaussian")
    To = be.prepare(X)
    so = be.gcp.setup(To, "stratified", (900, 900), (10, 10), 1)
    out = [be.asarray(np.full(u.shape, 3.0)) for u in U]
    calls = []
    orig = be.cl.enqueue_nd_range_kernel
    monkeypatch.setattr(be.cl, "enqueue_nd_range_kernel",
                        lambda *a, **k: calls.append(a[1].function_name) or orig(*a, **k))
    n = 11
    fused = _run(be, To, so, U, loss, "adam", n, out=out)
    monkeypatch.undo()
    rs = so.row_sort((True,) * 3)
    assert rs.npass == 2    # 300 rows: 9 bits
    # a handful of launches per step: draw and terms, the passes (each after its count and
    # its scan), the sums, the update
    assert len(calls) == n * (3 * rs.npass + 4)
    assert calls[:3 * rs.npass + 4] == (["gcp_draw_terms"]
                                        + ["gcp_sort_count", "gcp_sort_scan",
                                           "gcp_sort_pass"] * rs.npass
                                        + ["gcp_run_sums", "gcp_run_join", "gcp_update_all"])
    step = _run(be, To, so, U, loss, "adam", n, stepwise=True)
    for a, b in zip(fused[0], step[0]):
        np.testing.assert_array_equal(a, b)
    # the last step's gradient is in out (the spare set took the even steps)
    np.testing.assert_array_equal(host(be, out)[0], fused[0][3])


def test_fused_steps_deadline_every_few_steps(be):
    X, U = sparse_problem(R=2)
    loss = get_loss("poisson")
    To = be.prepare(X)
    so = be.gcp.setup(To, "stratified", (100, 100), (10, 10), 1)
    k = ocl_ops.DEADLINE_CHECK_STEPS
    seen = []

    def clock():
        seen.append(1)
        return 10.0
    res = _run(be, To, so, U, loss, "adam", 5 * k, deadline=1.0, clock=clock)
    assert res[1:] == (k, True, k) and len(seen) == 1
    # fewer steps than k: checked after the last
    res = _run(be, To, so, U, loss, "adam", 3, deadline=1.0, clock=clock)
    assert res[1:] == (3, True, 3)
    res = _run(be, To, so, U, loss, "adam", 2 * k + 1, deadline=100.0, clock=clock)
    assert res[1:] == (2 * k + 1, False, 2 * k + 1)
    # the steps before the deadline are those of the stepwise path
    ref = _run(be, To, so, U, loss, "adam", k, stepwise=True)
    res = _run(be, To, so, U, loss, "adam", 5 * k, deadline=1.0, clock=clock)
    for a, b in zip(res[0], ref[0]):
        np.testing.assert_array_equal(a, b)


def test_fused_steps_fall_back_for_user_losses_and_host_factors(be, cpu):
    X, U = sparse_problem(R=2)
    To, Tc = be.prepare(X), cpu.prepare(X)
    so = be.gcp.setup(To, "stratified", (200, 200), (10, 10), 1)
    user = get_loss(ScaledSquares())
    fused = _run(be, To, so, U, user, "adam", 4)
    step = _run(be, To, so, U, user, "adam", 4, stepwise=True)
    assert fused[1:] == (4, False, 4)
    for a, b in zip(fused[0], step[0]):
        np.testing.assert_array_equal(a, b)
    # host factors: the stepwise path, whose optimiser update asks for device arrays
    opt = make_optimizer("adam").start(be, [be.asarray(u) for u in U])
    with pytest.raises(TypeError, match="device array"):
        be.gcp.steps(To, so, np.ones(2), [u.copy() for u in U], get_loss("poisson"), 0, 0, 2,
                     opt, 0.0)
