"""MTTKRP and Φ over the fibers of 3-way tensors with two tiny modes (formats/fibers.py)."""
import warnings

import numpy as np
import pytest

from sktensor_fast import CPAPR, SparseTensor, num_threads
from sktensor_fast.backends import get_backend
from sktensor_fast.backends.cpu import _fiber
from sktensor_fast.backends.cpu.formats import AltoFormat, CooFormat
from sktensor_fast.backends.cpu.formats import fibers as fib_mod
from sktensor_fast.backends.cpu.formats.fibers import TinyFibers, fiber_modes

from _reference import mttkrp_ref, phi_ref, random_sparse


def _tiny_tensor(rng, shape=(12, 150, 9), density=0.9, dtype=np.float64):
    """Counts on nearly every entry of a tensor with two tiny modes (some entries missing,
    some fibers empty)."""
    dense = rng.poisson(3.0, size=shape).astype(dtype) + 1
    dense[rng.random(shape) > density] = 0
    dense[:, 7, :] = 0                                    # a long-mode row without nonzeros
    return SparseTensor.from_dense(dense)


def test_fiber_modes_rule():
    assert fiber_modes((24, 21, 2340), 1_180_000) == (2, 1, 0)
    assert fiber_modes((24, 21, 2340), 300_000) is None          # fibers too short
    assert fiber_modes((300, 21, 2340), 10 ** 7) is None         # a middle mode too long
    assert fiber_modes((24, 21, 2340, 3), 10 ** 6) is None       # 3-way only
    assert fiber_modes((5, 5, 5), 0) is None
    assert fiber_modes((10, 10, 10), 1000) == (0, 1, 2)         # ties: the first is the root


def test_layout():
    rng = np.random.default_rng(0)
    X = _tiny_tensor(rng)
    a, b, c = fiber_modes(X.shape, X.nnz)
    assert (a, b, c) == (1, 2, 0)
    F = TinyFibers(X.subs, X.vals, X.shape, (a, b, c))
    assert F.fptr[0] == 0 and F.fptr[-1] == X.nnz and np.all(np.diff(F.fptr) > 0)
    assert F.cptr[0] == 0 and F.cptr[-1] == F.n_fibers
    # every nonzero is found in its fiber with its value
    rebuilt = np.zeros(X.shape)
    for f in range(F.n_fibers):
        for t in range(F.fptr[f], F.fptr[f + 1]):
            idx = [0, 0, 0]
            idx[a], idx[b], idx[c] = F.fa[f], F.fb[f], F.leaf[t]
            rebuilt[tuple(idx)] += F.vals[t]
    np.testing.assert_array_equal(rebuilt, X.to_dense())


@pytest.mark.parametrize("fmt", [CooFormat, AltoFormat])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("R", [3, 8, 16, 40])
def test_kernels_against_numpy_and_threads(fmt, dtype, R, monkeypatch):
    """Φ and MTTKRP of every mode over fibers agree with NumPy, give the same bits on 1 and
    2 threads (with chunks small enough that each thread gets several) and agree with the
    format's own kernels."""
    monkeypatch.setattr(fib_mod, "CHUNK_NNZ", 1000)
    rng = np.random.default_rng(R)
    X = _tiny_tensor(rng, dtype=dtype)
    T = fmt(X)
    assert T.fibers() is not None and len(T.fibers().cptr) > 4
    factors = [rng.random((s, R)).astype(dtype) for s in X.shape]
    be = get_backend("cpu")
    tol = 1e-12 if dtype == np.float64 else 2e-4
    res = {}
    for threads in (1, 2):
        with num_threads(threads):
            res[threads] = [be.phi(T, factors, m, factors[m], 1e-10) for m in range(3)] + \
                           [be.mttkrp(T, factors, m) for m in range(3)]
    for x, y in zip(res[1], res[2]):
        np.testing.assert_array_equal(x, y)
    for m in range(3):
        np.testing.assert_allclose(res[1][m], phi_ref(X, factors, m, factors[m], 1e-10),
                                   rtol=tol, atol=0)
        np.testing.assert_allclose(res[1][3 + m], mttkrp_ref(X, factors, m), rtol=tol)
    assert not np.any(res[1][1][7])                       # the empty row stays zero
    monkeypatch.setattr(fib_mod, "USE_FIBERS", False)
    U = fmt(X)
    assert U.fibers() is None
    for m in range(3):
        np.testing.assert_allclose(be.phi(U, factors, m, factors[m], 1e-10), res[1][m],
                                   rtol=tol)


def test_guard_and_zero_model():
    """A model value below eps is floored as in the other kernels (x / eps)."""
    rng = np.random.default_rng(3)
    X = _tiny_tensor(rng, density=1.0)
    T = AltoFormat(X)
    assert T.fibers() is not None
    factors = [rng.random((s, 4)) for s in X.shape]
    factors[0][2] = 0.0                                   # model zero on a whole slice
    be = get_backend("cpu")
    for m in range(3):
        np.testing.assert_allclose(be.phi(T, factors, m, factors[m], 1e-3),
                                   phi_ref(X, factors, m, factors[m], 1e-3), rtol=1e-12)


def test_sparse_tensors_keep_their_kernels():
    """Short fibers keep the formats' kernels, and so does ALTO with a forced conflict path
    (as tests and benchmarks ask for it)."""
    rng = np.random.default_rng(4)
    X = random_sparse((30, 20, 10), 500, rng)
    assert AltoFormat(X).fibers() is None and CooFormat(X).fibers() is None
    X = _tiny_tensor(rng)
    f = [rng.random((s, 4)) for s in X.shape]
    be = get_backend("cpu")
    T = AltoFormat(X, conflict="buffer")
    got = be.phi(T, f, 0, f[0], 1e-10)
    assert "_fibers" not in T.__dict__
    np.testing.assert_allclose(got, phi_ref(X, f, 0, f[0], 1e-10), rtol=1e-12)


def test_which_is_checked():
    rng = np.random.default_rng(5)
    X = _tiny_tensor(rng)
    F = CooFormat(X).fibers()
    f = [rng.random((s, 4)) for s in X.shape]
    with pytest.raises(ValueError, match="which"):
        _fiber.accumulate(F.fptr, F.fa, F.fb, F.leaf, F.vals, F.cptr, F.lo[0], F.hi[0],
                          f[1], f[2], f[0], 3, np.empty((150, 4)))


def test_cpapr_mu_same_fit_with_and_without_fibers(monkeypatch):
    """CP-APR MU on a tensor with two tiny modes: the fit over fibers is the fit of the
    format's own kernels up to rounding, and the same bits on 1 and 2 threads."""
    rng = np.random.default_rng(6)
    X = _tiny_tensor(rng, shape=(10, 120, 8), density=0.95)
    init = [rng.random((s, 3)) for s in X.shape]

    def fit(threads):
        with num_threads(threads), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return CPAPR(3, init=[f.copy() for f in init], max_iter=5, tol=0,
                         format="alto").fit(X)
    a, b = fit(1), fit(2)
    assert AltoFormat(X).fibers() is not None
    for x, y in zip(a.factors_, b.factors_):
        np.testing.assert_array_equal(x, y)
    monkeypatch.setattr(fib_mod, "USE_FIBERS", False)
    c = fit(1)
    np.testing.assert_allclose(a.log_likelihood_, c.log_likelihood_, rtol=1e-12)
    for x, y in zip(a.factors_, c.factors_):
        np.testing.assert_allclose(x, y, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("R", [3, 8, 16, 40])
def test_phi_plan_is_phi_of_the_current_arrays(dtype, R, monkeypatch):
    """backend.phi_plan over fibers: a compiled plan whose calls give the bits of backend.phi
    on the arrays' contents at the time of the call (B and the factors updated in place),
    on 1 and 2 threads, for every mode; MTTKRP's plan (B None) too."""
    monkeypatch.setattr(fib_mod, "CHUNK_NNZ", 1000)
    rng = np.random.default_rng(R + 7)
    X = _tiny_tensor(rng, dtype=dtype)
    be = get_backend("cpu")
    for fmt in (CooFormat, AltoFormat):
        T = fmt(X)
        factors = [rng.random((s, R)).astype(dtype) for s in X.shape]
        for threads in (1, 2):
            with num_threads(threads):
                for m in range(3):
                    B = factors[m]
                    out = np.empty_like(B)
                    plan = be.phi_plan(T, factors, m, B, 1e-10, out)
                    assert isinstance(plan.__self__, _fiber.PhiPlan)
                    for _ in range(2):
                        assert plan() is out
                        ref = be.phi(T, factors, m, B, 1e-10)
                        np.testing.assert_array_equal(out, ref)
                        B *= ref                              # an MU step, in place
                        factors[(m + 1) % 3] *= dtype(0.5)    # another factor, in place
                    F = T.fibers()
                    which = F.modes.index(m)
                    a, b, c = F.modes
                    mt = _fiber.PhiPlan(F.fptr, F.fa, F.fb, F.leaf, F.vals, F.cptr,
                                        F.lo[which], F.hi[which], factors[a], factors[b],
                                        factors[c], which, np.empty_like(B), None, 0.0,
                                        threads, np.empty(10 ** 6, dtype))
                    np.testing.assert_array_equal(mt.run(), be.mttkrp(T, factors, m))


def test_phi_plan_falls_back_and_checks():
    """Without fibers, or where the kernel would read converted copies, phi_plan calls Φ on
    every call (still the current contents); its arguments are checked once."""
    rng = np.random.default_rng(8)
    X = _tiny_tensor(rng)
    be = get_backend("cpu")
    f = [rng.random((s, 4)) for s in X.shape]
    out = np.empty_like(f[0])
    T = AltoFormat(X, conflict="buffer")                      # no fibers
    f32 = [a.astype(np.float32) for a in f]                   # converted on every call
    for TT, ff in ((T, f), (AltoFormat(X), f32)):
        plan = be.phi_plan(TT, ff, 0, ff[0], 1e-10, out)
        assert not isinstance(getattr(plan, "__self__", None), _fiber.PhiPlan)
        for _ in range(2):
            plan()
            f64 = [a.astype(np.float64) for a in ff]
            np.testing.assert_allclose(out, phi_ref(X, f64, 0, f64[0], 1e-10), rtol=1e-5)
            ff[0] *= 2
    with pytest.raises(ValueError, match="out"):
        be.phi_plan(T, f, 0, f[0], 1e-10, None)
    with pytest.raises(ValueError, match="B has shape"):
        be.phi_plan(T, f, 0, f[1], 1e-10, out)
    F = CooFormat(X).fibers()
    args = [F.fptr, F.fa, F.fb, F.leaf, F.vals, F.cptr, F.lo[0], F.hi[0], f[1], f[2], f[0]]
    with pytest.raises(ValueError, match="which"):
        _fiber.PhiPlan(*args, 3, np.empty((150, 4)), None, 0.0, 1, np.empty(10 ** 5))
    with pytest.raises(TypeError, match="Ac must be"):
        _fiber.PhiPlan(*args[:-1], f32[0], 0, np.empty((150, 4)), None, 0.0, 1,
                       np.empty(10 ** 5))
    with pytest.raises(ValueError, match="work holds"):
        _fiber.PhiPlan(*args, 0, np.empty((150, 4)), None, 0.0, 1, np.empty(10))
    with pytest.raises(ValueError, match="columns"):
        _fiber.PhiPlan(*args, 0, np.empty((150, 3)), None, 0.0, 1, np.empty(10 ** 5))


@pytest.mark.skipif(_fiber.SIMD_LEVEL < 3, reason="the blocked loop needs AVX2 with FMA")
@pytest.mark.parametrize("long_fibers", [True, False])
@pytest.mark.parametrize("R", [8, 16])
def test_blocked_phi_gives_the_bits_of_the_scalar_loop(R, long_fibers, monkeypatch):
    """Φ in float64 at ranks 8 and 16 with AVX2 (SIMD_LEVEL 3) forms its weights 4 nonzeros
    at a time and in segments of a fiber, and (leaf output) adds runs of fibers over the same
    consecutive rows row by row: the same bits as the loop of one nonzero at a time
    (SIMD_LEVEL 2), for every mode, with fibers longer than a segment, fibers whose length is
    no multiple of 4, model values under eps and zero, NaN and infinite values in B, on 1 and
    2 threads, by backend.phi and by its plan."""
    monkeypatch.setattr(fib_mod, "CHUNK_NNZ", 3000)
    rng = np.random.default_rng(R + 11)
    if long_fibers:
        dense = rng.poisson(3.0, size=(150, 4, 140)).astype(np.float64) + 1
        dense[rng.random(dense.shape) > 0.93] = 0         # fibers of every length mod 4
        dense[3, 1, 5:] = 0                               # a fiber of 5 nonzeros
    else:
        # runs of full fibers (the leaf output's rows then loaded once per run), runs over
        # the same rows not starting at row 0, and fibers with gaps between them
        dense = rng.poisson(3.0, size=(200, 6, 22)).astype(np.float64) + 1
        dense[rng.random(dense.shape) > 0.997] = 0
        dense[40:60, :, :5] = 0
        dense[70:75, 2:, 19:] = 0
    X = SparseTensor.from_dense(dense)
    T = CooFormat(X)
    F = T.fibers()
    n = np.diff(F.fptr)
    assert F is not None and len(set(n % 4)) == 4
    if long_fibers:
        assert n.max() > 128
    else:
        run = (F.leaf[F.fptr[1:] - 1] - F.leaf[F.fptr[:-1]] == n - 1)
        assert run.mean() > 0.9 and np.any(run & (F.leaf[F.fptr[:-1]] > 0))
    factors = [rng.random((s, R)) - 0.05 for s in X.shape]  # some model values < eps
    factors[2][7] = 0.0                                   # a zero leaf row
    be = get_backend("cpu")
    res = {}
    for level in (2, 3):
        monkeypatch.setattr(_fiber, "SIMD_LEVEL", level)
        for threads in (1, 2):
            with num_threads(threads):
                for m in range(3):
                    B = factors[m].copy()
                    B[1, 2] = np.nan if m == 0 else np.inf
                    got = be.phi(T, factors, m, B, 1e-3)
                    out = np.empty_like(B)
                    be.phi_plan(T, factors, m, B, 1e-3, out)()
                    np.testing.assert_array_equal(out, got)
                    res[level, threads, m] = got
    for key, got in res.items():
        np.testing.assert_array_equal(got, res[(2,) + key[1:]])
    for m in range(3):
        B = factors[m]
        np.testing.assert_allclose(be.phi(T, factors, m, B, 1e-3),
                                   phi_ref(X, factors, m, B, 1e-3), rtol=1e-11, atol=1e-12)
