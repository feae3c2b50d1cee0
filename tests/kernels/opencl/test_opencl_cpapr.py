"""CP-APR's row solvers (PDN-R, PQN-R) and row-wise MU step on the OpenCL backend, against the
CPU backend (run on PoCL in CI)."""
import numpy as np
import pytest

from sktensor_fast import CPAPR, SparseTensor

from _reference import random_sparse

cl = pytest.importorskip("pyopencl")


def _params(max_inner=10, lbfgs_mem=3, tol=1e-4):
    return {"tol": tol, "max_inner": max_inner, "eps_div_zero": 1e-10, "eps_active": 1e-8,
            "mu0": 1e-5, "lbfgs_mem": lbfgs_mem}


def _with_empty_rows(X):
    """X with two extra empty rows per mode: one in the middle, one at the end."""
    subs = X.subs.copy()
    shape = []
    for k, s in enumerate(X.shape):
        mid = s // 2
        subs[:, k] += subs[:, k] >= mid
        shape.append(s + 2)
    return SparseTensor(subs, X.vals, tuple(shape), dtype=X.dtype), \
        [[s // 2, s + 1] for s in X.shape]


def _problem(shape, rank, nnz, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X, empty = _with_empty_rows(random_sparse(shape, nnz, rng, counts=True, dtype=dtype))
    factors = [(rng.random((s, rank)) + 0.05).astype(dtype) for s in X.shape]
    return X, empty, factors


def _compare(be, cpu, X, factors, method, params, rtol=1e-9):
    """Solve every mode's rows on both backends from the same start; returns the results."""
    Tc, To = cpu.prepare(X, "coo"), be.prepare(X)
    out = []
    for mode in range(X.ndim):
        Bc = factors[mode].copy()
        rc = cpu.apr.row_solve(Tc, factors, mode, Bc, method, params)
        Bd = be.asarray(factors[mode])
        ro = be.apr.row_solve(To, factors, mode, Bd, method, params)
        Bo = be.to_numpy(Bd)
        assert Bo.dtype == X.dtype
        np.testing.assert_allclose(Bo, Bc, rtol=rtol, atol=rtol * np.abs(Bc).max())
        assert ro["kkt"] == pytest.approx(rc["kkt"], rel=rtol)
        if rtol <= 1e-9:
            assert (ro["n_inner"], ro["n_changed"]) == (rc["n_inner"], rc["n_changed"])
        out.append((Bc, Bo, rc, ro))
    return out


CASES = [((20, 15, 10), 1, 500), ((20, 15, 10), 3, 600), ((12, 9, 8, 7), 3, 500),
         ((12, 9, 8, 7), 16, 500), ((15, 10, 8), 40, 400)]


@pytest.mark.parametrize("method", ["pdnr", "pqnr"])
@pytest.mark.parametrize("shape, rank, nnz", CASES)
def test_row_solve_matches_cpu(be, cpu, method, shape, rank, nnz):
    X, empty, factors = _problem(shape, rank, nnz, seed=rank + len(shape))
    for mode, (Bc, Bo, rc, ro) in enumerate(_compare(be, cpu, X, factors, method, _params())):
        # the test means something: rows moved, some converged, empty rows are zero
        assert ro["n_changed"] > 0 and ro["n_inner"] > ro["n_changed"]
        assert not np.allclose(Bo, factors[mode])
        assert np.all(Bo[empty[mode]] == 0)
        assert np.all(Bo >= 0)


@pytest.mark.parametrize("method, max_inner, mem", [("pdnr", 1, 3), ("pdnr", 0, 3),
                                                    ("pqnr", 30, 1), ("pqnr", 30, 6)])
def test_row_solve_inner_limits_and_memory(be, cpu, method, max_inner, mem):
    X, empty, factors = _problem((14, 11, 9), 5, 400, seed=7)
    res = _compare(be, cpu, X, factors, method, _params(max_inner, mem))
    for mode, (Bc, Bo, rc, ro) in enumerate(res):
        assert ro["n_inner"] <= max_inner * X.shape[mode]
        assert np.all(Bo[empty[mode]] == 0)
    if max_inner == 0:
        assert all(r[3]["n_inner"] == 0 and r[3]["n_changed"] == 0 for r in res)


@pytest.mark.parametrize("method", ["pdnr", "pqnr"])
def test_row_solve_matches_cpu_with_a_large_eps_active(be, cpu, method):
    """eps_active above ||min(m, g)||: the active set's threshold is the latter."""
    X, empty, factors = _problem((14, 11, 9), 5, 400, seed=3)
    res = _compare(be, cpu, X, factors, method, dict(_params(), eps_active=100.0))
    assert all(r[3]["n_changed"] > 0 for r in res)


def test_row_solve_in_batches(be, cpu, monkeypatch):
    """A scratch budget of a few rows: the rows are solved batch after batch."""
    from sktensor_fast.backends.opencl import cpapr_rows
    X, _, factors = _problem((25, 12, 10), 6, 600, seed=11)
    monkeypatch.setattr(cpapr_rows, "SCRATCH_BUDGET", 3 * (9 * 6 + 2 * 36) * 8)
    for method in ("pdnr", "pqnr"):
        _compare(be, cpu, X, factors, method, _params())


def test_row_pointers_on_device(be):
    from sktensor_fast.backends.opencl.cpapr_rows import row_pointers
    X, empty, _ = _problem((16, 9, 7), 2, 300, seed=3)
    T = be.prepare(X)
    for mode in range(X.ndim):
        counts = np.bincount(X.subs[:, mode], minlength=X.shape[mode])
        want = np.concatenate([[0], np.cumsum(counts)])
        got = be.to_numpy(row_pointers(be, T, mode))
        np.testing.assert_array_equal(got, want)
        assert row_pointers(be, T, mode) is row_pointers(be, T, mode)   # cached
        assert np.all(np.diff(got)[empty[mode]] == 0)


def test_row_solve_float32(be, cpu):
    X, empty, factors = _problem((18, 12, 10), 4, 500, seed=5, dtype=np.float32)
    for method in ("pdnr", "pqnr"):
        for mode, (Bc, Bo, rc, ro) in enumerate(
                _compare(be, cpu, X, factors, method, _params(), rtol=1e-4)):
            assert Bo.dtype == np.float32 and np.all(Bo[empty[mode]] == 0)


def test_row_solve_without_nonzeros(be):
    X = SparseTensor(np.zeros((0, 3), dtype=np.int64), np.zeros(0), (4, 3, 2))
    f = [np.ones((s, 2)) for s in X.shape]
    Bd = be.asarray(f[1])
    res = be.apr.row_solve(be.prepare(X), f, 1, Bd, "pdnr", _params())
    assert res == {"kkt": 0.0, "n_inner": 0, "n_changed": 0}
    assert np.all(be.to_numpy(Bd) == 0)


def test_row_solve_host_arrays_and_other_dtype(be, cpu):
    """A NumPy B is updated in place; a float32 device B for float64 data is converted back."""
    X, _, factors = _problem((10, 8, 6), 3, 200, seed=9)
    T, Tc = be.prepare(X), cpu.prepare(X, "coo")
    Bc = factors[0].copy()
    cpu.apr.row_solve(Tc, factors, 0, Bc, "pqnr", _params())
    Bh = factors[0].copy()
    be.apr.row_solve(T, factors, 0, Bh, "pqnr", _params())
    np.testing.assert_allclose(Bh, Bc, rtol=1e-9, atol=1e-12)
    B32 = be.asarray(factors[0].astype(np.float32))
    be.apr.row_solve(T, factors, 0, B32, "pqnr", _params())
    assert B32.dtype == np.float32
    np.testing.assert_allclose(be.to_numpy(B32), Bc, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mu_rows_matches_cpu(be, cpu, dtype):
    rng = np.random.default_rng(14)
    B = rng.random((57, 5)).astype(dtype)
    Phi = (1 + 0.5 * (rng.random((57, 5)) - 0.5)).astype(dtype)
    Phi[::3] = 1          # KKT violation 0 on these rows: left alone
    B[5] = 0
    Phi[5] = 0.2          # violation 0 (B is 0): left alone too
    Bc = B.copy()
    nc = cpu.apr.mu_rows_(Bc, Phi, 1e-3)
    Bd = be.asarray(B)
    no = be.apr.mu_rows_(Bd, be.asarray(Phi), 1e-3)
    assert no == nc and 0 < no < 57
    np.testing.assert_array_equal(be.to_numpy(Bd), Bc)
    assert be.apr.mu_rows_(be.zeros((0, 5), dtype), be.zeros((0, 5), dtype), 1e-3) == 0
    Bh = B.copy()                       # a host B is updated in place as well
    assert be.apr.mu_rows_(Bh, Phi, 1e-3) == nc
    np.testing.assert_array_equal(Bh, Bc)
    assert be.apr.mu_rows_(Bd, be.asarray(np.ones_like(B)), 1e-3) == 0


def test_bad_inputs_are_clear_errors(be):
    import pyopencl.array as cla
    from sktensor_fast.backends.opencl.cpapr_rows import MAX_RANK
    X, _, f = _problem((8, 6, 5), 3, 100, seed=1)
    T = be.prepare(X)
    B = be.asarray(f[0])
    before = be.to_numpy(B).copy()
    bad = [
        (dict(method="newton"), ValueError, "unknown CP-APR row solver"),
        (dict(mode=3), ValueError, "mode 3 is out of range"),
        (dict(B=be.asarray(f[0][:, :2])), ValueError, "B has shape"),
        (dict(factors=f[:2]), ValueError, "2 factor matrices"),
        (dict(T=X), TypeError, "prepared by this backend"),
        (dict(B=f[0].tolist()), TypeError, "NumPy or device array"),
        (dict(factors=[f[0], cla.to_device(be.queue, f[1].astype(np.int64)), f[2]]),
         TypeError, "factor 1 must hold float32 or float64"),
        (dict(factors=[f[0], cla.to_device(be.queue, np.asfortranarray(f[1])), f[2]]),
         ValueError, "factor 1 must be a C-contiguous"),
        (dict(params={"tol": 1e-4}), ValueError, "lack max_inner"),
        (dict(params=dict(_params(), tol=float("nan"))), ValueError, "tol"),
        (dict(params=dict(_params(), max_inner=-1)), ValueError, "max_inner"),
        (dict(params=dict(_params(), lbfgs_mem=0)), ValueError, "lbfgs_mem"),
        (dict(params=dict(_params(), eps_div_zero=0.0)), ValueError, "eps_div_zero"),
        (dict(params=dict(_params(), max_inner=2.5)), ValueError, "integer"),
    ]
    for change, exc, match in bad:
        args = dict(T=T, factors=f, mode=0, B=B, method="pdnr", params=_params())
        args.update(change)
        with pytest.raises(exc, match=match):
            be.apr.row_solve(**args)
    np.testing.assert_array_equal(be.to_numpy(B), before)    # nothing ran
    R = MAX_RANK + 1
    fr = [np.ones((s, R)) for s in X.shape]
    with pytest.raises(ValueError, match=f"rank {R} exceeds"):
        be.apr.row_solve(T, fr, 1, be.asarray(fr[1]), "pqnr", _params())
    with pytest.raises(ValueError, match="Phi has shape"):
        be.apr.mu_rows_(B, be.zeros((8, 2), np.float64), 1e-3)
    with pytest.raises(TypeError, match="NumPy or device array"):
        be.apr.mu_rows_([[1.0, 2.0]], [[1.0, 2.0]], 1e-3)
    with pytest.raises(ValueError, match="tol"):
        be.apr.mu_rows_(B, B, float("nan"))


@pytest.mark.parametrize("solver", ["mu", "pdnr", "pqnr"])
def test_vanished_nonzero_is_revived_as_on_the_cpu(be, solver):
    """The shift of a nonzero's vanished entries runs through the backend's primitives: the
    OpenCL fit revives a start that is zero there and gives the CPU's model."""
    X = SparseTensor([[0, 0, 0], [1, 1, 1], [0, 2, 2]], [5.0, 3.0, 1.0], (2, 3, 3))
    dead = np.array([[1.0], [1.0], [0.0]])
    init = [np.ones((2, 1)), dead, dead.copy()]
    dev = CPAPR(1, solver=solver, init=init, max_iter=20, device="opencl").fit(X)
    ref = CPAPR(1, solver=solver, init=init, max_iter=20).fit(X)
    assert np.isfinite(dev.log_likelihood_)
    assert dev.log_likelihood_ == pytest.approx(ref.log_likelihood_, rel=1e-9)
