"""OpenCL backend (run on PoCL in CI) against the NumPy references and the CPU backend."""
import numpy as np
import pytest

from sktensor_fast import CPALS
from sktensor_fast.backends import get_backend, list_devices, parse_device

from _reference import opencl_backend_or_skip, mttkrp_ref, phi_ref, random_sparse

cl = pytest.importorskip("pyopencl")


_opencl_backend = opencl_backend_or_skip


LAYOUTS = ("lanes", "lanes-sorted", "wide")


@pytest.fixture(params=LAYOUTS)
def layout_be(request, be):
    """The shared backend with each MTTKRP / Φ layout in turn (restored afterwards)."""
    old = be.layout
    be.layout = request.param
    yield be
    be.layout = old


# every number of modes (2 to 5) with two of the ranks, every rank (one column, an odd one,
# the widest of the wide kernel, one past it) with two numbers of modes: each program is
# compiled for its modes and rank, so the whole 4 x 4 grid would build twice the programs
# (PoCL: about half a second each) for pairs that share every line of kernel code
SHAPE_RANKS = [((40, 7), 1), ((40, 7), 16), ((30, 20, 10), 5), ((30, 20, 10), 33),
               ((12, 5, 9, 7), 1), ((12, 5, 9, 7), 33), ((6, 5, 4, 3, 5), 5),
               ((6, 5, 4, 3, 5), 16)]


@pytest.mark.parametrize("shape, rank", SHAPE_RANKS)
def test_kernels_fp64(layout_be, shape, rank):
    be = layout_be
    rng = np.random.default_rng(rank + len(shape))
    X = random_sparse(shape, 2000, rng, counts=True)
    T = be.prepare(X)
    f = [rng.random((s, rank)) for s in shape]
    for m in range(len(shape)):
        np.testing.assert_allclose(be.to_numpy(be.mttkrp(T, f, m)), mttkrp_ref(X, f, m),
                                   rtol=1e-12)
        B = rng.random((shape[m], rank))
        B[0] = 0
        np.testing.assert_allclose(be.to_numpy(be.phi(T, f, m, B, 1e-10)),
                                   phi_ref(X, f, m, B, 1e-10), rtol=1e-11)
    w = rng.random(rank)
    ref = np.einsum("r,nr->n", w, np.prod([f[k][X.subs[:, k]] for k in range(len(shape))], 0))
    np.testing.assert_allclose(be.to_numpy(be.model_values(T, w, f)), ref, rtol=1e-12)
    assert be.poisson_data_term(T, w, f) == pytest.approx(np.sum(X.vals * np.log(ref)),
                                                          rel=1e-12)


@pytest.mark.parametrize("rank", [3, 16])
def test_kernels_fp32(layout_be, rank):
    be = layout_be
    rng = np.random.default_rng(0)
    X = random_sparse((50, 30, 20), 4000, rng, dtype=np.float32, counts=True)
    T = be.prepare(X)
    f = [rng.random((s, rank)).astype(np.float32) for s in X.shape]
    f64 = [a.astype(np.float64) for a in f]
    for m in range(3):
        got = be.to_numpy(be.mttkrp(T, f, m))
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, mttkrp_ref(X, f64, m), rtol=1e-4)
        B = rng.random((X.shape[m], rank)).astype(np.float32)
        np.testing.assert_allclose(be.to_numpy(be.phi(T, f, m, B, 1e-10)),
                                   phi_ref(X, f64, m, B.astype(np.float64), 1e-10), rtol=1e-4)


@pytest.mark.parametrize("off32, prefetch", [(True, True), (False, False), (True, False),
                                             (False, True)])
def test_heavy_row_spanning_many_chunks(layout_be, off32, prefetch):
    """One output row owns most nonzeros: the boundary lists of many chunks carry its sum
    (the default kernel, and its experimental variants that the benchmarks time)."""
    be = layout_be
    old = be.off32, be.prefetch
    be.off32, be.prefetch = off32, prefetch
    rng = np.random.default_rng(1)
    from sktensor_fast import SparseTensor
    n = 20000
    subs = np.stack([np.where(rng.random(n) < 0.8, 2, rng.integers(0, 30, n)),
                     rng.integers(0, 40, n), rng.integers(0, 50, n)], axis=1)
    X = SparseTensor(subs, rng.random(n), (30, 40, 50))
    T = be.prepare(X)
    f = [rng.random((s, 8)) for s in X.shape]
    try:
        for m in range(3):
            np.testing.assert_allclose(be.to_numpy(be.mttkrp(T, f, m)), mttkrp_ref(X, f, m),
                                       rtol=1e-11)
            np.testing.assert_allclose(be.to_numpy(be.phi(T, f, m, f[m], 1e-10)),
                                       phi_ref(X, f, m, f[m], 1e-10), rtol=1e-11)
    finally:
        be.off32, be.prefetch = old


@pytest.mark.parametrize("nnz", [2000, 0])
@pytest.mark.parametrize("fp32", [False, True])
def test_mttkrp_after_fills_a_factor_just_before_the_kernels(layout_be, nnz, fp32):
    """mttkrp_after calls ``before`` once, after its own preparation and before any kernel
    reads the factors: a factor whose contents only ``before`` uploads gives the MTTKRP of
    those contents (also when the factors are first copied to fp32, and without nonzeros)."""
    be = layout_be
    rng = np.random.default_rng(5)
    shape, R = (30, 20, 10), 8
    X = random_sparse(shape, 2000, rng) if nnz else random_sparse(shape, 0, rng)
    T = be.prepare(X)
    f = [rng.random((s, R)) for s in shape]
    old = be.fp32_factors
    be.fp32_factors = fp32
    try:
        for m, k in ((0, 2), (1, 0), (2, 1)):
            dev = [be.asarray(a) for a in f]
            dev[k] = be.empty(f[k].shape, np.float64)   # filled by ``before`` only
            seen = []

            def before():
                seen.append(m)
                be.cl.enqueue_copy(be.queue, dev[k].data, f[k], is_blocking=False).wait()

            got = be.to_numpy(be.mttkrp_after(T, dev, m, be.zeros((shape[m], R), np.float64),
                                              before))
            assert len(seen) == 1
            np.testing.assert_allclose(got, mttkrp_ref(X, f, m), rtol=1e-4 if fp32 else 1e-12,
                                       atol=1e-300)
    finally:
        be.fp32_factors = old


@pytest.mark.parametrize("nmodes, rank", [(3, 16), (2, 33), (5, 1)])
def test_kernels_compiled_for_the_mode_and_rank_give_the_same_bits(be, nmodes, rank):
    """The lanes kernels with the rank, or the rank and the output mode, compiled in as
    constants (``specialize`` 2, 3; the rank is the default on GPUs) give the bits of the
    kernel that takes them as arguments, for MTTKRP and Φ in every mode (one and several
    columns per lane, more lanes than a warp, a rank of one).  Each setting builds programs
    for PoCL, so the mode alone (1, the same constants) is left out."""
    rng = np.random.default_rng(nmodes * 100 + rank)
    from sktensor_fast import SparseTensor
    shape = (30, 20, 25, 7, 5)[:nmodes]
    n = 4001
    subs = np.stack([rng.integers(0, s, n) for s in shape], axis=1)
    subs[rng.random(n) < 0.4, 0] = 3
    X = SparseTensor(subs, rng.random(n), shape)
    f = [rng.random((s, rank)) for s in shape]
    old = be.layout, be.chunk, be.specialize
    built = {}
    try:
        be.layout, be.chunk = "lanes", 16
        got = {}
        for spec in (0, 2, 3):
            be.specialize = spec
            T = be.prepare(X)
            got[spec] = [(be.to_numpy(be.mttkrp(T, f, m)),
                          be.to_numpy(be.phi(T, f, m, f[m], 1e-10))) for m in range(nmodes)]
            built[spec] = {k for k in be.programs._programs if k[0] == "cp"}
        for m in range(nmodes):
            np.testing.assert_allclose(got[0][m][0], mttkrp_ref(X, f, m), rtol=1e-11)
            np.testing.assert_allclose(got[0][m][1], phi_ref(X, f, m, f[m], 1e-10), rtol=1e-11)
            for spec in (2, 3):
                for a, b in zip(got[0][m], got[spec][m]):
                    np.testing.assert_array_equal(a, b)
    finally:
        be.layout, be.chunk, be.specialize = old
    # one program per rank, then one per mode where the mode is compiled in too
    rank_only = {k for k in built[2] - built[0] if "fixed" in k}
    per_mode = {k for k in built[3] - built[2] if "fixed" in k}
    assert {k[-2] for k in rank_only} == {rank} and {k[-3] for k in rank_only} == {None}
    assert {k[-3] for k in per_mode} == set(range(nmodes))


@pytest.mark.parametrize("nmodes, rank, chunk", [(3, 16, 16), (3, 6, 5), (4, 8, 64),
                                                  (2, 33, 7), (3, 1, 3)])
def test_data_term_in_one_pass_of_the_phi_kernel(be, nmodes, rank, chunk, monkeypatch):
    """In the lanes layout the Poisson data term comes from the Φ kernel of mode 0 with the
    weights folded in (no model values written): equal to the data term from the model
    values to 1e-13, nonzeros whose value is 0 adding nothing, -inf where the model is 0
    with eps = 0 and NaN from a NaN factor entry."""
    rng = np.random.default_rng(nmodes * 10 + rank)
    from sktensor_fast import SparseTensor
    shape = (30, 20, 25, 7)[:nmodes]
    n = 5000
    subs = np.stack([rng.integers(0, s, n) for s in shape], axis=1)
    subs[rng.random(n) < 0.3, 0] = 2
    vals = rng.random(n) * 3
    vals[::7] = 0
    X = SparseTensor(subs, vals, shape)
    f = [rng.random((s, rank)) + 0.01 for s in shape]
    w = rng.random(rank) + 0.5
    m = np.einsum("r,nr->n", w, np.prod([f[k][X.subs[:, k]] for k in range(nmodes)], 0))
    keep = X.vals != 0
    ref = np.sum(X.vals[keep] * np.log(m[keep]))
    old = be.layout, be.chunk
    try:
        be.layout, be.chunk = "lanes", chunk
        T = be.prepare(X)
        monkeypatch.setattr(be, "FUSED_DATA_TERM", False)
        unfused = be.poisson_data_term(T, w, f, 1e-10)
        monkeypatch.setattr(be, "FUSED_DATA_TERM", True)

        def no_model_values(*args):
            raise AssertionError("the fused data term wrote the model values")
        monkeypatch.setattr(be, "_launch_model_values", no_model_values)
        got = be.poisson_data_term(T, w, f, 1e-10)
        assert abs(got - ref) <= 1e-13 * np.sum(np.abs(X.vals * np.log(m))), (got, ref)
        assert abs(got - unfused) <= 1e-13 * abs(unfused)
        zero = [a.copy() for a in f]
        zero[0][X.subs[1, 0]] = 0          # a nonzero (value 3 x random) whose model is 0
        X1 = X.vals[1]
        assert X1 != 0
        assert be.poisson_data_term(T, w, zero, 0.0) == -np.inf
        assert np.isfinite(be.poisson_data_term(T, w, zero, 1e-10))
        nan = [a.copy() for a in f]
        nan[nmodes - 1][X.subs[3, nmodes - 1], 0] = np.nan
        assert np.isnan(be.poisson_data_term(T, w, nan, 1e-10))
    finally:
        be.layout, be.chunk = old


def test_kernels_are_compiled_for_the_rank_on_gpus_only(be):
    """By default the rank is compiled in on GPU devices, nothing on others."""
    old = be.specialize, be.is_gpu
    try:
        be.specialize = None
        be.is_gpu = True
        assert be._fixed(1, 16, 4) == (None, 16, 4)
        assert be.fixed_rank(16) == 16          # GCP's kernels too
        be.is_gpu = False
        assert be._fixed(1, 16, 4) is None
        assert be.fixed_rank(16) is None
        be.specialize = 3
        assert be._fixed(1, 16, 4) == (1, 16, 4)
        be.specialize = 1
        assert be.fixed_rank(16) is None
    finally:
        be.specialize, be.is_gpu = old


def test_interleaved_copies_built_once_per_mode(be):
    """The chunk-interleaved copies are built by prepare (from the one upload), reused by every
    MTTKRP / Φ, replaced (not added to) when the chunk size changes, and hold every nonzero
    once; the mode-sorted copies are built only when something asks for them."""
    rng = np.random.default_rng(3)
    X = random_sparse((30, 20, 10), 1000, rng, counts=True)
    old = be.layout, be.chunk
    try:
        be.layout, be.chunk = "lanes", 64
        T = be.prepare(X)
        assert set(T.interleaved) == {(0, 64), (1, 64), (2, 64)}
        subs, vals = T.interleaved[(1, 64)]
        f = [rng.random((s, 4)) for s in X.shape]
        be.mttkrp(T, f, 1)
        be.phi(T, f, 1, f[1], 1e-10)
        assert T.interleaved[(1, 64)][0] is subs          # reused, not rebuilt
        base = T.nbytes
        order = np.argsort(X.subs[:, 1], kind="stable")
        np.testing.assert_array_equal(T.subs[1].get(), X.subs[order])    # built now
        np.testing.assert_array_equal(T.vals[1].get(), X.vals[order])
        assert T.nbytes > base
        nch = -(-X.nnz // 64)
        k = np.arange(X.nnz)
        pos = (k % 64) * nch + k // 64
        np.testing.assert_array_equal(subs.get()[pos], T.subs[1].get())
        np.testing.assert_array_equal(vals.get()[pos], T.vals[1].get())
        be.chunk = 7
        np.testing.assert_allclose(be.to_numpy(be.mttkrp(T, f, 1)), mttkrp_ref(X, f, 1),
                                   rtol=1e-12)
        assert set(T.interleaved) == {(0, 64), (1, 7), (2, 64)}
    finally:
        be.layout, be.chunk = old


@pytest.mark.parametrize("layout", ["lanes", "lanes-sorted"])
def test_prepare_builds_the_copies_of_the_modes_asked_for(be, layout):
    """prepare(X, modes=...) builds the kernels' copies of those modes only (the distributed
    backend asks for the first mode of each share): less device memory, the same results;
    another mode's copy is built when asked for; modes outside the tensor are refused."""
    rng = np.random.default_rng(8)
    X = random_sparse((30, 20, 10), 1500, rng, counts=True)
    old = be.layout, be.chunk
    try:
        be.layout, be.chunk = layout, 64
        full = be.prepare(X)
        one = be.prepare(X, modes=(0,))
        if layout == "lanes":
            assert set(one.interleaved) == {(0, 64)}
        else:
            assert set(one._sorted) <= {0} and set(full._sorted) >= {1, 2}
        assert one.nbytes < full.nbytes
        f = [rng.random((s, 4)) for s in X.shape]
        for mode in (0, 1):
            np.testing.assert_array_equal(be.to_numpy(be.mttkrp(one, f, mode)),
                                          be.to_numpy(be.mttkrp(full, f, mode)))
        for bad in ((3,), (), (-1,)):
            with pytest.raises(ValueError, match="modes must name modes of a 3-way tensor"):
                be.prepare(X, modes=bad)
        from sktensor_fast.backends import get_backend
        with pytest.raises(ValueError, match="modes must name"):
            get_backend("cpu").prepare(X, modes=(5,))
    finally:
        be.layout, be.chunk = old


@pytest.mark.parametrize("var, value", [("LAYOUT", "rows"), ("WIDE_CHUNK", "0"),
                                        ("WIDE_GROUP", "-1"), ("PHI", "redundant"),
                                        ("CHUNK", "abc"), ("VEC", "3"), ("PHI", "nope"),
                                        ("MAX_TENSOR_BYTES", "many")])
def test_bad_environment_setting_is_reported_once(monkeypatch, recwarn, var, value):
    """A bad SKTENSOR_FAST_OCL_* value: one RuntimeWarning naming the variable, the device's
    default instead."""
    import warnings
    from sktensor_fast.backends import options
    _opencl_backend()
    monkeypatch.setattr(options, "_WARNED", set())
    monkeypatch.setenv(f"SKTENSOR_FAST_OCL_{var}", value)
    with pytest.warns(RuntimeWarning, match=f"SKTENSOR_FAST_OCL_{var}={value!r}"):
        b = get_backend("opencl")
    assert b is get_backend("opencl", {})        # the same key as without the variable
    name = var.lower()
    assert getattr(b.requested_options, name) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # reported once, not at every request
        get_backend("opencl")


@pytest.mark.parametrize("opts, match", [({"layout": "rows"}, "'lanes', 'lanes-sorted', 'wide'"),
                                         ({"off32": True}, "unknown OpenCL option 'off32'"),
                                         ({"phi": "redundant"}, "'shuffle', 'local' "),
                                         ({"vec": 3}, "1, 2, 4, 8"),
                                         ({"chunk": 0}, "positive int"),
                                         ({"wide_group": 2.0}, "positive int"),
                                         ({"max_tensor_bytes": "12X"}, "number of bytes"),
                                         ({"chunks": 64}, "the options are layout, chunk")])
def test_bad_option_is_a_clear_error(opts, match):
    from sktensor_fast import OpenCLOptions
    with pytest.raises(ValueError, match=match):
        OpenCLOptions.from_mapping(opts)
    with pytest.raises(ValueError, match=match):
        get_backend("opencl", opts)
    with pytest.raises(ValueError, match=match):
        CPALS(device="opencl", device_options=opts).fit(np.ones((3, 4, 2)))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_eight_columns_per_lane(layout):
    """vec=8: the float32 kernels everywhere; the float64 ones where the device builds 8-wide
    vectors of doubles, and on PoCL's CPU devices (which cannot) a clear error before any
    build, not a program without its kernel and a process that PoCL ends later."""
    _opencl_backend()
    be8 = get_backend("opencl", {"vec": 8, "layout": layout})
    rng = np.random.default_rng(8)
    shape = (30, 20, 10)
    X = random_sparse(shape, 1500, rng, counts=True)
    f = [rng.random((s, 16)) for s in shape]
    X32 = type(X)(X.subs, X.vals.astype(np.float32), X.shape)
    f32 = [a.astype(np.float32) for a in f]
    T32 = be8.prepare(X32)
    np.testing.assert_allclose(be8.to_numpy(be8.mttkrp(T32, f32, 1)), mttkrp_ref(X, f, 1),
                               rtol=1e-4)
    T = be8.prepare(X)
    if be8.double8:
        np.testing.assert_allclose(be8.to_numpy(be8.mttkrp(T, f, 1)), mttkrp_ref(X, f, 1),
                                   rtol=1e-12)
    else:
        with pytest.raises(ValueError, match="vec=8 with float64 data: PoCL cannot build"):
            be8.mttkrp(T, f, 1)
        with pytest.raises(ValueError, match="use vec=4 or less"):
            CPALS(rank=16, device="opencl", max_iter=2,
                  device_options={"vec": 8, "layout": layout}).fit(X)
        # the backend still works with the kernels it can build
        np.testing.assert_allclose(be8.to_numpy(be8.mttkrp(T, [a[:, :4] for a in f], 1)),
                                   mttkrp_ref(X, [a[:, :4] for a in f], 1), rtol=1e-12)


def test_options_precedence_and_cache_key(monkeypatch):
    """Environment < config_context < explicit options; each setting its own backend, and a
    variable changed later takes effect."""
    from sktensor_fast import OpenCLOptions, config_context, get_device_options
    _opencl_backend()
    monkeypatch.delenv("SKTENSOR_FAST_OCL_CHUNK", raising=False)
    monkeypatch.delenv("SKTENSOR_FAST_OCL_LAYOUT", raising=False)
    base = get_backend("opencl")
    monkeypatch.setenv("SKTENSOR_FAST_OCL_CHUNK", "32")
    env = get_backend("opencl")
    assert env is not base and env.chunk == 32 and base.chunk == 256
    with config_context(device_options={"chunk": 48, "layout": "lanes"}):
        assert get_device_options() == OpenCLOptions(chunk=48, layout="lanes")
        ctx = get_backend("opencl")
        assert ctx.chunk == 48 and ctx.layout == "lanes"
        with config_context(device_options=OpenCLOptions(chunk=16)):
            assert get_backend("opencl").layout == "lanes"       # the outer block's layout
            assert get_backend("opencl").chunk == 16
        ex = get_backend("opencl", {"chunk": 8})
        assert ex.chunk == 8 and ex.layout == "lanes"
    assert get_backend("opencl") is env
    assert env.info()["options"]["chunk"] == 32


def test_estimator_device_options(monkeypatch):
    """device_options is a parameter: it reaches the backend, survives clone and can be
    searched over; the models agree to rounding."""
    from sklearn.base import clone
    _opencl_backend()
    rng = np.random.default_rng(11)
    X = random_sparse((20, 15, 10), 600, rng)
    fits = []
    for opts in ({"layout": "lanes", "chunk": 16}, {"layout": "wide"}, None):
        est = clone(CPALS(rank=3, max_iter=5, tol=0, random_state=0, device="opencl",
                          device_options=opts))
        assert est.device_options == opts
        if opts:
            for k, v in opts.items():
                assert getattr(est._backend().options, k) == v
        fits.append(est.fit(X).fit_)
    np.testing.assert_allclose(fits, fits[0], rtol=1e-10)
    with pytest.raises(ValueError, match="no meaning on device='cpu'"):
        CPALS(device_options={"chunk": 64}).fit(X)


def test_variable_naming_no_option_is_reported_once(monkeypatch, recwarn):
    """SKTENSOR_FAST_OCL_OFF32 (an experimental switch, not an option) is reported by one
    RuntimeWarning naming the options, and changes nothing."""
    import warnings
    from sktensor_fast.backends import options
    _opencl_backend()
    monkeypatch.setattr(options, "_WARNED", set())
    monkeypatch.setenv("SKTENSOR_FAST_OCL_OFF32", "0")
    with pytest.warns(RuntimeWarning, match="SKTENSOR_FAST_OCL_OFF32='0': not an OpenCL "
                                            "option \\(the options are layout, chunk"):
        b = get_backend("opencl")
    assert b is get_backend("opencl", {}) and b.off32 is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        get_backend("opencl")


def test_layout_and_offset_settings(monkeypatch):
    _opencl_backend()
    monkeypatch.setenv("SKTENSOR_FAST_OCL_LAYOUT", "lanes-sorted")
    b = get_backend("opencl")
    assert b.layout == "lanes-sorted"
    monkeypatch.setattr(b, "off32", False)     # the experimental 64-bit offsets
    rng = np.random.default_rng(4)
    X = random_sparse((30, 20, 10), 500, rng, counts=True)
    T = b.prepare(X)
    f = [rng.random((s, 6)) for s in X.shape]
    np.testing.assert_allclose(b.to_numpy(b.mttkrp(T, f, 2)), mttkrp_ref(X, f, 2), rtol=1e-12)
    assert T.interleaved == {}                              # the sorted copies only


@pytest.mark.parametrize("rows", [300, 12092, 64 * 256 + 1])
def test_dense_steps(be, rows):
    """The reductions run in blocks of rows; with 12,092 rows the last blocks start past the
    last row (256 blocks of 48) and must count for nothing."""
    rng = np.random.default_rng(2)
    A = rng.standard_normal((rows, 7))
    C = rng.standard_normal((rows, 7))
    M = rng.standard_normal((7, 7))
    Ad, Cd = be.asarray(A), be.asarray(C)
    np.testing.assert_allclose(be.gram(Ad), A.T @ A, rtol=1e-12)
    np.testing.assert_allclose(be.inner(Ad, Cd), np.sum(A * C, 0), rtol=1e-11)
    np.testing.assert_allclose(be.column_norms(Ad, 2), np.linalg.norm(A, axis=0), rtol=1e-12)
    np.testing.assert_allclose(be.column_norms(Ad, np.inf), np.abs(A).max(0))
    np.testing.assert_allclose(be.to_numpy(be.matmul_small(Ad, M)), A @ M, rtol=1e-12)
    grams = [rng.standard_normal((5, 7)) for _ in range(2)]
    grams = [g.T @ g + np.eye(7) for g in grams] + [None]
    from sktensor_fast.backends import get_backend
    cpu = get_backend("cpu")
    for first in (True, False):
        U, w, G = be.als_update(Ad, grams, 2, first=first)
        Uc, wc, Gc = cpu.als_update(A, grams, 2, first=first)
        np.testing.assert_allclose(be.to_numpy(U), Uc, rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(w, wc, rtol=1e-12)
        np.testing.assert_allclose(G, Gc, rtol=1e-11, atol=1e-12 * np.abs(Gc).max())
    s = rng.random(7)
    np.testing.assert_allclose(be.to_numpy(be.scale_columns(Ad, s)), A * s, rtol=1e-15)


@pytest.mark.parametrize("rows", [0, 1, 300, 12092])
def test_als_partials_in_one_launch_equal_the_separate_reductions(be, rows):
    """CP-ALS's column statistic, Gram matrix and inner products of a new factor, reduced
    together (als_partial), are the bits of the separate reductions."""
    rng = np.random.default_rng(rows)
    R = 5
    U, M = be.asarray(rng.standard_normal((rows, R))), be.asarray(rng.standard_normal((rows, R)))
    for first in (True, False):
        for with_m in (True, False):
            stat, G, ip = be.als_partials_end(be.als_partials_begin(U, first,
                                                                    M if with_m else None))
            assert np.array_equal(stat, be._column(U, U, 0 if first else 1))
            assert np.array_equal(G, be._cross(U, U))
            if with_m:
                assert np.array_equal(ip, be._column(U, M, 0))
            else:
                assert ip is None
            if rows:
                Uh = be.to_numpy(U)
                np.testing.assert_allclose(stat, (Uh * Uh).sum(0) if first else np.abs(Uh).max(0),
                                           rtol=1e-12)
            else:
                assert not stat.any() and not G.any()


def test_to_numpy_transient_reuses_one_buffer_per_thread(be, monkeypatch):
    """Downloads into a kept buffer: the values of every array (dtypes, shapes, an empty one),
    the same memory at the next call of the thread, other memory in another thread, and a
    plain download above the size kept or for a host array."""
    import threading
    rng = np.random.default_rng(0)
    A = [rng.random((7, 3)), np.arange(5, dtype=np.float32), np.empty((0, 4)),
         rng.random((2, 2, 2))]
    D = [be.asarray(a) for a in A]
    got = be.to_numpy_transient(D)
    for g, a in zip(got, A):
        assert g.dtype == a.dtype and g.shape == a.shape and type(g) is np.ndarray
        np.testing.assert_array_equal(g, a)
    again = be.to_numpy_transient(D[:1])
    assert np.shares_memory(again[0], got[0])    # the thread's kept buffer
    other = []
    t = threading.Thread(target=lambda: other.extend(be.to_numpy_transient(D[:1])))
    t.start()
    t.join()
    np.testing.assert_array_equal(other[0], A[0])
    assert not np.shares_memory(other[0], got[0])
    monkeypatch.setattr(type(be), "TRANSIENT_MAX", 8)
    big = be.to_numpy_transient(D[:1])
    assert not np.shares_memory(big[0], got[0])
    np.testing.assert_array_equal(big[0], A[0])
    host = be.to_numpy_transient([A[0]])       # not a device array: as to_numpy
    np.testing.assert_array_equal(host[0], A[0])


def test_rows_and_host_transfers(be):
    """The row exchanges' helpers: rows taken on the device, a download into a host array, an
    upload from one (whole, or around rows already on the device), a host buffer of the
    shape; bad ranges and sizes are refused."""
    A = np.arange(30.0).reshape(10, 3)
    Ad = be.asarray(A)
    np.testing.assert_array_equal(be.to_numpy(be.take_rows(Ad, 3, 7)), A[3:7])
    assert be.take_rows(Ad, 4, 4).shape == (0, 3)
    h = be.host_buffer((10, 3), np.float64)
    assert h.shape == (10, 3) and h.dtype == np.float64
    be.download_into(Ad, h)
    np.testing.assert_array_equal(h, A)
    np.testing.assert_array_equal(be.to_numpy(be.upload_from(h)), A)
    for lo, hi in ((0, 11), (-1, 3), (5, 4)):
        with pytest.raises(ValueError, match="rows"):
            be.take_rows(Ad, lo, hi)
    with pytest.raises(ValueError, match="device bytes into a host array"):
        be.download_into(Ad, np.empty((2, 3)))
    # the whole matrix from the host but for rows lo:hi, which come from the device (host
    # rows there hold other numbers: they must not be read)
    for lo, hi in ((3, 7), (0, 4), (6, 10), (0, 10), (5, 5)):
        hh = A.copy()
        hh[lo:hi] = -1.0
        part = be.asarray(A[lo:hi] + 100.0)
        want = A.copy()
        want[lo:hi] += 100.0
        np.testing.assert_array_equal(be.to_numpy(be.upload_around(hh, part, lo, hi)), want)
        # left in flight: the result once the queue has run them
        got = be.upload_around(hh, part, lo, hi, wait=False)
        np.testing.assert_array_equal(be.to_numpy(got), want)
    with pytest.raises(ValueError, match="rows 2:5 of 10"):
        be.upload_around(A, be.asarray(A[:2]), 2, 5)
    with pytest.raises(TypeError, match="float32"):
        be.upload_around(A, be.asarray(A[2:5].astype(np.float32)), 2, 5)
    # a download started, waited for later; of nothing; of the wrong size
    h2 = be.host_buffer((10, 3), np.float64)
    h2[...] = -1.0
    ev = be.download_start(be.asarray(A[2:6] * 3.0), h2[2:6])
    ev.wait()
    np.testing.assert_array_equal(h2[2:6], A[2:6] * 3.0)
    assert np.all(h2[:2] == -1.0) and np.all(h2[6:] == -1.0)
    be.download_start(be.take_rows(Ad, 4, 4), h2[4:4]).wait()
    with pytest.raises(ValueError, match="device bytes into a host array"):
        be.download_start(Ad, np.empty((2, 3)))


def test_add_and_room(be):
    """``add_`` adds a device array into another of its shape (refusing another shape or
    dtype); ``tensor_room`` is the cap where one is set, else 90 % of the device memory."""
    rng = np.random.default_rng(3)
    A, B = rng.random((7, 5)), rng.random((7, 5))
    Ad = be.asarray(A)
    assert be.add_(Ad, be.asarray(B)) is Ad
    np.testing.assert_array_equal(be.to_numpy(Ad), A + B)
    be.add_(be.zeros((0, 5), np.float64), be.zeros((0, 5), np.float64))
    with pytest.raises(ValueError, match="shape"):
        be.add_(Ad, be.asarray(B[:6]))
    with pytest.raises(ValueError, match="float32"):
        be.add_(Ad, be.asarray(B.astype(np.float32)))
    old = be.max_tensor_bytes
    try:
        be.max_tensor_bytes = None
        assert be.tensor_room() == int(0.9 * be.device.global_mem_size)
        be.max_tensor_bytes = 12345
        assert be.tensor_room() == 12345
    finally:
        be.max_tensor_bytes = old


def test_device_errors():
    from sktensor_fast.backends.opencl import NoDeviceError
    has_gpu = any("GPU" in d["type"] for d in list_devices())
    if not has_gpu and list_devices():
        # OpenCL works (PoCL), without a GPU: the message names what can run instead
        with pytest.raises(NoDeviceError, match="no OpenCL GPU found.*device='opencl'.*"
                                                "device='cpu'") as info:
            get_backend("gpu")
        assert "install" not in str(info.value).lower()
    with pytest.raises(ValueError, match="unknown device"):
        parse_device("cuda")
    with pytest.raises(NoDeviceError, match="out of range"):
        get_backend("opencl:99:0")
    with pytest.raises(NoDeviceError, match="out of range"):
        get_backend("opencl:0:99")
    X = np.random.default_rng(0).random((5, 4, 3))
    with pytest.raises(ValueError, match="device"):
        CPALS(device="cuda").fit(X)


def test_too_large_for_device_is_a_clear_error(be):
    from sktensor_fast import SparseTensor
    X = SparseTensor([[0, 0, 0]], [1.0], (2 ** 31, 2, 2))
    with pytest.raises(ValueError, match="32-bit"):
        be.prepare(X)


def test_phi_variant_and_chunk_settings(be):
    if not be.is_nvidia:
        with pytest.raises(ValueError, match="NVIDIA"):
            get_backend("opencl", {"phi": "shuffle"})
    rng = np.random.default_rng(5)
    X = random_sparse((30, 20, 10), 3000, rng, counts=True)
    b = get_backend("opencl", {"phi": "local", "vec": 4, "chunk": 7})
    assert b.chunk == 7 and b.vec == 4 and b.phi_variant == "local"
    T = b.prepare(X)
    for rank in (5, 6, 8, 12):                # 1, 2, 4 and 4 columns per lane
        f = [rng.random((s, rank)) for s in X.shape]
        for m in range(3):
            np.testing.assert_allclose(b.to_numpy(b.mttkrp(T, f, m)), mttkrp_ref(X, f, m),
                                       rtol=1e-12)
            np.testing.assert_allclose(b.to_numpy(b.phi(T, f, m, f[m], 1e-10)),
                                       phi_ref(X, f, m, f[m], 1e-10), rtol=1e-11)


def test_out_of_memory_for_the_interleaved_copy_is_a_clear_error(monkeypatch, be):
    import pyopencl.array as cla
    rng = np.random.default_rng(6)
    X = random_sparse((30, 20, 10), 500, rng, counts=True)
    old = be.layout
    try:
        be.layout = "lanes-sorted"        # prepare builds no interleaved copy...
        T = be.prepare(X)
        be.layout = "lanes"               # ...so the MTTKRP builds it

        real_empty = cla.empty

        def fail(*args, **kwargs):        # the copies are the allocations outside the pool
            if "allocator" in kwargs:
                return real_empty(*args, **kwargs)
            raise cl.MemoryError("allocation failed")
        monkeypatch.setattr(cla, "empty", fail)
        f = [rng.random((s, 4)) for s in X.shape]
        with pytest.raises(MemoryError, match="interleaved copy of mode 0.*lanes-sorted"):
            be.mttkrp(T, f, 0)
    finally:
        be.layout = old


def test_format_means_what_it_says():
    """The OpenCL tensor is COO: 'auto' and 'coo' mean it, the CPU format 'alto' is refused
    (not ignored); the CPU narrows 'auto' to COO for the kernels that read only COO."""
    be = _opencl_backend()
    assert be.storage_format("auto") == be.storage_format("coo") == "coo"
    X = random_sparse((20, 15, 10), 300, np.random.default_rng(12))
    with pytest.raises(ValueError, match="format='alto' has no meaning on OpenCL"):
        CPALS(rank=2, device="opencl", format="alto").fit(X)
    with pytest.raises(ValueError, match="format='alto' has no meaning on OpenCL"):
        be.prepare(X, "alto")
    cpu = get_backend("cpu")
    assert cpu.storage_format("auto") == "auto"
    assert cpu.storage_format("auto", ("gcp",)) == "coo"
    assert cpu.storage_format("alto", ("apr_rows",)) == "alto"
    with pytest.raises(ValueError, match="use one of 'auto', 'coo', 'alto'"):
        cpu.storage_format("csf")


def test_max_tensor_bytes_is_an_option():
    """The streaming cap: an option (bytes or "512M"-style text), its environment variable a
    default, OpenCLBackend(max_tensor_bytes=) still accepted."""
    from sktensor_fast import OpenCLOptions
    from sktensor_fast.backends.opencl.backend import OpenCLBackend
    _opencl_backend()
    assert OpenCLOptions(max_tensor_bytes="2K").max_tensor_bytes == 2048
    assert get_backend("opencl", {"max_tensor_bytes": "1M"}).max_tensor_bytes == 1 << 20
    assert OpenCLBackend("opencl", max_tensor_bytes=4096).options.max_tensor_bytes == 4096


@pytest.mark.parametrize("tail_rounds, tail_group, level_chunk",
                         [(0, 1024, 16), (4, 1024, 16), (1, 32, 4), (3, 64, 5), (50, 32, 4)])
def test_boundary_levels_and_tail(layout_be, monkeypatch, tail_rounds, tail_group,
                                  level_chunk):
    """The boundary reduction gives the reference whether its last levels run in one launch of
    one work-group (``reduce_tail``: one level or many, each level in one round of the group
    or several) or a launch per level; the tail is launched where its rounds allow, once."""
    be = layout_be
    monkeypatch.setattr(be, "TAIL_ROUNDS", tail_rounds)
    monkeypatch.setattr(be, "TAIL_GROUP", tail_group)
    monkeypatch.setattr(be, "LEVEL_CHUNK", level_chunk)
    # the list of two entries per chunk (not per work-group), so that it takes many levels
    monkeypatch.setattr(be, "GROUP_BOUNDARIES", False)
    monkeypatch.setattr(be, "_group_sizes", {}, raising=False)
    monkeypatch.setattr(be, "chunk", 8)
    monkeypatch.setattr(be, "wide_chunk", 8)
    rng = np.random.default_rng(7)
    from sktensor_fast import SparseTensor
    n = 6000
    # a heavy row (spanning many chunks) among rows of a few nonzeros each
    subs = np.stack([np.where(rng.random(n) < 0.3, 5, rng.integers(0, 900, n)),
                     rng.integers(0, 40, n), rng.integers(0, 50, n)], axis=1)
    X = SparseTensor(subs, rng.random(n), (900, 40, 50))
    T = be.prepare(X)
    f = [rng.random((s, 4)) for s in X.shape]
    names = []
    orig = cl.enqueue_nd_range_kernel
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel",
                        lambda q, k, *a, **kw: names.append(k.function_name)
                        or orig(q, k, *a, **kw))
    np.testing.assert_allclose(be.to_numpy(be.mttkrp(T, f, 0)), mttkrp_ref(X, f, 0),
                               rtol=1e-11)
    np.testing.assert_allclose(be.to_numpy(be.phi(T, f, 0, f[0], 1e-10)),
                               phi_ref(X, f, 0, f[0], 1e-10), rtol=1e-11)
    tails = names.count("reduce_tail")
    levels = names.count("reduce_level")
    assert tails == (0 if tail_rounds == 0 else 2), names
    assert levels >= (4 if tail_rounds == 0 else 0), names
    if tail_rounds >= 50:
        assert levels == 0, names      # the first level already fits the tail's rounds


@pytest.mark.parametrize("layout", ["lanes", "lanes-sorted"])
def test_fp32_factor_reads_switch(be, monkeypatch, layout):
    """The benchmarks' switch ``fp32_factors``: the fp64 MTTKRP reads float copies of the
    factors (results within float rounding of the reference, not the fp64 bits); Φ and the
    switch turned off keep fp64."""
    monkeypatch.setattr(be, "layout", layout)
    rng = np.random.default_rng(11)
    X = random_sparse((30, 20, 10, 6), 3000, rng)
    T = be.prepare(X)
    f = [rng.random((s, 8)) for s in X.shape]
    exact = [be.to_numpy(be.mttkrp(T, f, m)) for m in range(4)]
    monkeypatch.setattr(be, "fp32_factors", True)
    for m in range(4):
        ref = mttkrp_ref(X, f, m)
        got = be.to_numpy(be.mttkrp(T, f, m))
        np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-6 * np.abs(ref).max())
        assert got.dtype == np.float64 and not np.array_equal(got, exact[m])
        np.testing.assert_allclose(be.to_numpy(be.phi(T, f, m, f[m], 1e-10)),
                                   phi_ref(X, f, m, f[m], 1e-10), rtol=1e-11)
    monkeypatch.setattr(be, "fp32_factors", False)
    np.testing.assert_allclose(be.to_numpy(be.mttkrp(T, f, 1)), mttkrp_ref(X, f, 1), rtol=1e-11)


def test_repeated_calls_set_the_arguments_that_changed(layout_be, monkeypatch):
    """A tensor's kernels keep the arguments of their last launch and set them again only
    when one changed: calls in turn with other factors, outputs, ranks, kernels and the same
    arrays changed in place each give the reference; a repeated call sets nothing."""
    be = layout_be
    rng = np.random.default_rng(3)
    X = random_sparse((40, 30, 20), 3000, rng)
    T = be.prepare(X)
    sets = []
    orig = cl.Kernel.set_args
    monkeypatch.setattr(cl.Kernel, "set_args", lambda self, *a: sets.append(len(a))
                        or orig(self, *a))
    fa = [be.asarray(rng.random((s, 8))) for s in X.shape]
    fb = [rng.random((s, 8)) for s in X.shape]
    f5 = [rng.random((s, 5)) for s in X.shape]
    out = [be.zeros((s, 8), X.dtype) for s in X.shape]
    for _ in range(2):
        for m in range(3):
            for f in (fa, fb, fa, f5):
                host_f = [be.to_numpy(a) if not isinstance(a, np.ndarray) else a for a in f]
                o = out[m] if f is fa else None
                _close(be.to_numpy(be.mttkrp(T, f, m, out=o)), mttkrp_ref(X, host_f, m))
                _close(be.to_numpy(be.phi(T, f, m, f[m], 1e-10)),
                       phi_ref(X, host_f, m, host_f[m], 1e-10))
        fa[0].set(rng.random((40, 8)))        # the same device array, new values
    assert T.launchers
    # the repeated MTTKRP into the same output with the same factors sets nothing
    sets.clear()
    be.mttkrp(T, fa, 1, out=out[1])
    assert sets                               # the output and factors of the call before
    sets.clear()
    be.mttkrp(T, fa, 1, out=out[1])
    assert len(sets) == 0
    _close(be.to_numpy(out[1]), mttkrp_ref(X, [be.to_numpy(a) for a in fa], 1))


def _close(got, ref):
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12 * np.abs(ref).max())


def test_launcher_compares_scalars_by_type_and_value():
    from sktensor_fast.backends.opencl.accumulate import _same_arg
    assert _same_arg(np.int64(3), np.int64(3))
    assert not _same_arg(np.int64(3), np.int32(3))
    assert not _same_arg(np.float64(0.5), np.float64(0.25))
    assert not _same_arg(np.float64(np.nan), np.float64(np.nan))   # set again: harmless
    assert _same_arg(cl.LocalMemory(64), cl.LocalMemory(64))
    assert not _same_arg(cl.LocalMemory(64), cl.LocalMemory(128))
    a, b = object(), object()
    assert _same_arg(a, a) and not _same_arg(a, b)


def test_kernels_declare_their_scalar_types(be):
    """The backend's kernels have their scalar arguments' types declared, read from the
    program's argument info (PyOpenCL then packs them directly, and plain Python numbers are
    accepted, which an undeclared scalar argument is not)."""
    from sktensor_fast.backends.opencl.program import ARG_INFO, typed_kernel
    src = ("__kernel void k(__global double* a, const long n, const int r, const double e, "
           "const uint u, __local float* l) { if (get_global_id(0) == 0) a[0] = n + r + e + u; }")
    a = cl.Buffer(be.ctx, cl.mem_flags.READ_WRITE, 8)
    plain = cl.Program(be.ctx, src).build(options=[ARG_INFO]).k
    with pytest.raises(Exception):
        plain(be.queue, (1,), None, a, 1, np.int32(2), 0.5, 3, cl.LocalMemory(8))
    k = typed_kernel(plain)
    k(be.queue, (1,), None, a, 1, np.int32(2), 0.5, 3, cl.LocalMemory(8))
    got = np.empty(1)
    cl.enqueue_copy(be.queue, got, a)
    assert got[0] == 6.5
    # the backend's own kernels: scale_columns(I, R, A, s) with Python integers
    A = be.asarray(np.ones((3, 2)))
    s_ = be.asarray(np.array([2.0, 3.0]))
    be.dense_kernel(np.float64, "scale_columns")(be.queue, (2, 3), None, 3, 2, A.data, s_.data)
    np.testing.assert_array_equal(A.get(), [[2.0, 3.0]] * 3)
    # a vector type is not in the table: the kernel is left as it was, and still runs
    k2 = typed_kernel(cl.Program(be.ctx, "__kernel void k(__global double* a, const int2 v) "
                                 "{ a[0] = v.x + v.y; }").build(options=[ARG_INFO]).k)
    k2(be.queue, (1,), None, a, np.array([1, 2], np.int32))
    cl.enqueue_copy(be.queue, got, a)
    assert got[0] == 3.0


def test_lanes_chunk_by_size(be, monkeypatch):
    """On a GPU, a tensor too small to fill the device with chunks of the default size gets
    shorter chunks (more work-items); the chunk option, a CPU device and large tensors keep
    the default.  The prepared copies and the kernels use the chunk of the tensor's size."""
    monkeypatch.setattr(be, "is_gpu", True)
    monkeypatch.setattr(be, "_chunk", None)
    monkeypatch.setattr(be, "layout", "lanes")
    cu = int(be.device.max_compute_units)
    big = be.FILL_CHUNKS * cu * be.DEFAULT_CHUNK
    assert be.lanes_chunk(big) == be.DEFAULT_CHUNK == be.chunk
    assert be.lanes_chunk(big - be.DEFAULT_CHUNK) == be.SMALL_CHUNK
    assert be.lanes_chunk(0) == be.SMALL_CHUNK
    rng = np.random.default_rng(4)
    X = random_sparse((30, 20, 10), 2000, rng)
    T = be.prepare(X)
    assert set(T.interleaved) == {(m, be.SMALL_CHUNK) for m in range(3)}
    f = [rng.random((s, 4)) for s in X.shape]
    for m in range(3):
        _close(be.to_numpy(be.mttkrp(T, f, m)), mttkrp_ref(X, f, m))
    assert set(T.interleaved) == {(m, be.SMALL_CHUNK) for m in range(3)}   # no other copy
    monkeypatch.setattr(be, "_chunk", 64)                 # the option wins
    assert be.lanes_chunk(big) == be.lanes_chunk(64) == 64
    assert be.lanes_chunk(10) == 10 and be.lanes_chunk(0) == 1   # never more than the tensor
    monkeypatch.setattr(be, "_chunk", None)
    monkeypatch.setattr(be, "is_gpu", False)
    assert be.lanes_chunk(big) == be.lanes_chunk(be.DEFAULT_CHUNK) == be.DEFAULT_CHUNK
    assert be.lanes_chunk(100) == 100


@pytest.mark.parametrize("layout", ["lanes", "wide"])
def test_chunk_options_larger_than_the_tensor(layout):
    """A chunk option (``chunk``, ``wide_chunk``) far larger than the tensor is cut to its
    nonzeros: the copies hold the nonzeros, not a billion padded entries, and a fit takes the
    time of one chunk per mode (it used to loop over the whole option in every work-item)."""
    _opencl_backend()
    rng = np.random.default_rng(5)
    X = random_sparse((30, 20, 10), 700, rng, counts=True)
    key = "chunk" if layout == "lanes" else "wide_chunk"
    big = get_backend("opencl", {"layout": layout, key: 10 ** 9})
    T = big.prepare(X)
    assert set(T.interleaved) == {(m, X.nnz) for m in range(3)}
    assert all(T.interleaved[k][0].shape[0] == X.nnz for k in T.interleaved)
    R = 33 if layout == "lanes" else 5
    f = [rng.random((s, R)) for s in X.shape]
    for m in range(3):
        np.testing.assert_allclose(big.to_numpy(big.mttkrp(T, f, m)), mttkrp_ref(X, f, m),
                                   rtol=1e-12)
    import time
    t0 = time.perf_counter()
    m = CPALS(rank=R, device="opencl", max_iter=3, tol=0, random_state=0,
              device_options={"layout": layout, key: 10 ** 9}).fit(X)
    assert time.perf_counter() - t0 < 60
    ref = CPALS(rank=R, device="opencl", max_iter=3, tol=0, random_state=0,
                device_options={"layout": layout}).fit(X)
    np.testing.assert_allclose(m.score(X), ref.score(X), rtol=1e-9)


def test_argument_info_asked_of_opencl_1_2_devices_only():
    """Programs are built with -cl-kernel-arg-info only where every device knows it (OpenCL
    1.2 on); an older driver gets the plain build and untyped kernels, which still run."""
    from types import SimpleNamespace as NS
    from sktensor_fast.backends.opencl.program import _has_arg_info
    ctx = lambda *v: NS(devices=[NS(version=x) for x in v])  # noqa: E731
    assert _has_arg_info(ctx("OpenCL 3.0 CUDA", "OpenCL 1.2 pocl"))
    assert not _has_arg_info(ctx("OpenCL 3.0 CUDA", "OpenCL 1.1 old"))
    assert not _has_arg_info(ctx("unknown"))


def test_outputs_of_complete_modes_are_not_zeroed_first(layout_be, monkeypatch):
    """Where every coordinate of a mode holds a nonzero, MTTKRP and Φ write every row of the
    output, so it is not zeroed first; where a row is empty it is, and that row reads 0 in an
    output that held other numbers before."""
    be = layout_be
    rng = np.random.default_rng(11)
    shape = (30, 6, 500)                     # modes 0 and 1 full, mode 2 with empty rows
    X = random_sparse(shape, 1200, rng, skew=0)
    present = [np.unique(X.subs[:, m]).size for m in range(3)]
    assert present[0] == 30 and present[1] == 6 and present[2] < 500
    T = be.prepare(X)
    assert [T.rows_complete(m) for m in range(3)] == [True, True, False]
    fills = []
    orig = type(be).fill_zero
    monkeypatch.setattr(type(be), "fill_zero", lambda self, a: fills.append(a.shape)
                        or orig(self, a))
    f = [rng.random((s, 4)) for s in shape]
    for m in range(3):
        out = be.asarray(np.full((shape[m], 4), np.nan))
        fills.clear()
        _close(be.to_numpy(be.mttkrp(T, f, m, out=out)), mttkrp_ref(X, f, m))
        assert fills == ([] if m < 2 else [(shape[m], 4)])
        out = be.asarray(np.full((shape[m], 4), 7.0))
        _close(be.to_numpy(be.phi(T, f, m, f[m], 1e-10, out=out)),
               phi_ref(X, f, m, f[m], 1e-10))
        # a new output: left unset for a complete mode (the pool may hand back the NaNs)
        out = be.asarray(np.full((shape[m], 4), np.nan))
        del out
        fills.clear()
        _close(be.to_numpy(be.mttkrp(T, f, m)), mttkrp_ref(X, f, m))
        assert fills == ([] if m < 2 else [(shape[m], 4)])


def test_rows_complete_counts_each_coordinate_once(be):
    """Distinct coordinates in any order, repeated ones, a single row, more rows than
    nonzeros."""
    from sktensor_fast import SparseTensor
    subs = np.array([[2, 0], [0, 1], [2, 2], [1, 1], [0, 0], [2, 1]])
    T = be.prepare(SparseTensor(subs, np.ones(6), (3, 4)))
    assert T.rows_complete(0) and not T.rows_complete(1)
    T = be.prepare(SparseTensor(subs, np.ones(6), (4, 3)))
    assert not T.rows_complete(0) and T.rows_complete(1)
    T = be.prepare(SparseTensor(np.zeros((1, 2), int), np.ones(1), (1, 9)))
    assert T.rows_complete(0) and not T.rows_complete(1)


@pytest.mark.parametrize("rank", [1, 4, 6, 33])
@pytest.mark.parametrize("chunk", [2, 8, 64])
def test_boundary_rows_reduced_in_the_work_group(be, monkeypatch, rank, chunk):
    """The lanes kernel's work-groups reduce their chunks' first and last rows themselves
    (two entries of the boundary list per group): rows inside a chunk, across chunks of one
    group, across groups, a row filling whole groups, a last group with fewer chunks; every
    column width (1, 2 and 4 columns per lane, lanes left idle); MTTKRP and Φ equal the
    reference and the per-chunk list; the list is shorter."""
    old = be.layout
    monkeypatch.setattr(be, "chunk", chunk)
    rng = np.random.default_rng(rank + chunk)
    from sktensor_fast import SparseTensor
    n = 5000
    heavy = rng.random(n) < 0.4
    subs = np.stack([np.where(heavy, 7, rng.integers(0, 300, n)),
                     rng.integers(0, 13, n), rng.integers(0, 50, n)], axis=1)
    X = SparseTensor(subs, rng.random(n), (300, 13, 50))
    f = [rng.random((s, rank)) for s in X.shape]
    sizes = []
    orig = type(be)._reduce_boundaries
    monkeypatch.setattr(type(be), "_reduce_boundaries",
                        lambda self, rows, vals, n, *a, **k: sizes.append(n)
                        or orig(self, rows, vals, n, *a, **k))
    try:
        for layout in ("lanes", "lanes-sorted"):
            be.layout = layout
            got = {}
            for grouped in (False, True):
                monkeypatch.setattr(be, "GROUP_BOUNDARIES", grouped)
                T = be.prepare(X)
                sizes.clear()
                got[grouped] = [be.to_numpy(be.mttkrp(T, f, m)) for m in range(3)]
                got[grouped] += [be.to_numpy(be.phi(T, f, m, f[m], 1e-10)) for m in range(3)]
                for m in range(3):
                    _close(got[grouped][m], mttkrp_ref(X, f, m))
                    _close(got[grouped][3 + m], phi_ref(X, f, m, f[m], 1e-10))
                got[grouped, "sizes"] = list(sizes)
            for a, b in zip(got[False], got[True]):
                np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13 * np.abs(a).max())
            assert all(g < p for g, p in zip(got[True, "sizes"], got[False, "sizes"]))
    finally:
        be.layout = old


def test_boundary_rows_per_chunk_where_local_memory_is_short(be, monkeypatch):
    """A device with less local memory than a group's boundary rows need (or a lower
    GROUP_LOCAL_BYTES) keeps the list per chunk, with the same results."""
    monkeypatch.setattr(be, "layout", "lanes")
    monkeypatch.setattr(be, "chunk", 4)
    rng = np.random.default_rng(2)
    X = random_sparse((60, 9, 7), 800, rng)
    f = [rng.random((s, 8)) for s in X.shape]
    lists = []
    orig = type(be)._reduce_boundaries
    monkeypatch.setattr(type(be), "_reduce_boundaries",
                        lambda self, rows, vals, n, *a, **k: lists.append(n)
                        or orig(self, rows, vals, n, *a, **k))
    got = {}
    for limit in (24 << 10, 64):
        monkeypatch.setattr(be, "GROUP_LOCAL_BYTES", limit)
        T = be.prepare(X)
        lists.clear()
        got[limit] = be.to_numpy(be.mttkrp(T, f, 0))
        _close(got[limit], mttkrp_ref(X, f, 0))
        got[limit, "n"] = lists[0]
    nchunks = -(-X.nnz // 4)
    assert got[64, "n"] == 2 * nchunks > got[24 << 10, "n"]
    # the device's own limit: at most half of its local memory
    import types
    monkeypatch.setattr(be, "GROUP_LOCAL_BYTES", 24 << 10)
    monkeypatch.setattr(be, "device", types.SimpleNamespace(local_mem_size=16 << 10))
    assert be._group_local() == 8 << 10
