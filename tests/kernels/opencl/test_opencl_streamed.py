"""Tensors streamed through the OpenCL device in blocks (backends/opencl/streamed.py) give what
the resident tensor gives (run on PoCL in CI, with the device memory capped)."""
import warnings

import numpy as np
import pytest

from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor

from _reference import opencl_backend_or_skip, random_sparse

cl = pytest.importorskip("pyopencl")

from sktensor_fast.backends.opencl import streamed  # noqa: E402


@pytest.fixture
def be(monkeypatch):
    """The estimators' OpenCL backend, with its settings restored after the test."""
    backend = opencl_backend_or_skip()
    monkeypatch.setattr(backend, "max_tensor_bytes", backend.max_tensor_bytes)
    monkeypatch.setattr(backend, "layout", backend.layout)
    return backend


def _fresh(X):
    """The same tensor as a new object (prepared tensors are kept per tensor object)."""
    return SparseTensor(X.subs, X.vals, X.shape, dtype=X.dtype)


def _heavy_tensor(seed=0, nnz=3000):
    rng = np.random.default_rng(seed)
    X = random_sparse((40, 60, 50), nnz, rng, counts=True)
    # one mode-0 row with more nonzeros than a block holds at a quarter of the need
    n = 4000
    extra = np.stack([np.full(n, 7), rng.integers(0, 60, n), rng.integers(0, 50, n)], 1)
    return SparseTensor(np.concatenate([X.subs, extra]),
                        np.concatenate([X.vals, rng.poisson(2.0, n) + 1.0]), X.shape)


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(a)))


@pytest.mark.parametrize("layout,host,divisor", [
    ("wide", "plain", 16), ("lanes", "pinned", 16), ("wide", "pinned", 4), ("lanes", "plain", 4),
    ("lanes", "staged", 16), ("wide", "staged", 4)])
def test_kernels_match_resident(be, layout, host, divisor, monkeypatch):
    be.layout = layout
    pinned = host == "pinned"
    monkeypatch.setattr(streamed.StreamedTensor, "PINNED", pinned)
    monkeypatch.setattr(streamed.StreamedTensor, "STAGED", host == "staged")
    # staging buffers smaller than a block: every upload goes in several pieces
    monkeypatch.setattr(streamed.StreamedTensor, "STAGE_BYTES", 4096)
    X = _heavy_tensor()
    be.max_tensor_bytes = None
    T = be.prepare(_fresh(X))
    assert not getattr(T, "streamed", False)
    cap = streamed.resident_bytes(be, X) // divisor
    be.max_tensor_bytes = cap
    S = be.prepare(_fresh(X))
    assert isinstance(S, streamed.StreamedTensor)
    assert S.pinned == pinned
    if host == "staged":
        assert S.staged and streamed.staging(be, 4096) is not None
    else:
        assert not S.staged
    assert S.nbytes <= cap
    whole = divisor == 4
    b0 = S.blocks[0]
    assert sum(b.nnz for b in b0) == X.nnz
    if whole:
        # a quarter of the need holds one mode: one block per mode, the resident kernels
        assert S.nblocks == [1, 1, 1]
    else:
        assert all(n > S.nslots for n in S.nblocks), (S.nblocks, S.nslots)
        # the heavy row of mode 0 is cut between blocks
        assert any(a.r1 - 1 == b.r0 and b.shared for a, b in zip(b0, b0[1:]))
    same = np.array_equal if whole else (lambda a, b: rel(a, b) < 1e-13)
    rng = np.random.default_rng(1)
    R = 8
    F = [rng.random((s, R)) for s in X.shape]
    for mode in range(3):
        Bm = rng.random((X.shape[mode], R))
        for _ in range(2):       # twice: the slots are reused after the first pass
            a = be.to_numpy(be.mttkrp(T, [be.asarray(f) for f in F], mode))
            b = be.to_numpy(be.mttkrp(S, [be.asarray(f) for f in F], mode))
            assert same(a, b), (mode, rel(a, b))
            c = be.to_numpy(be.phi(T, [be.asarray(f) for f in F], mode, be.asarray(Bm), 1e-10))
            d = be.to_numpy(be.phi(S, [be.asarray(f) for f in F], mode, be.asarray(Bm), 1e-10))
            assert same(c, d), (mode, rel(c, d))
    w = rng.random(R)
    dev = [be.asarray(f) for f in F]
    a, b = be.poisson_data_term(T, w, dev), be.poisson_data_term(S, w, dev)
    assert abs(a - b) <= 1e-13 * abs(a)
    # a block's padding (coordinates 0, value 0) adds nothing even where the model is 0 there
    zero = [f.copy() for f in F]
    zero[0][0] = 0
    dz = [be.asarray(f) for f in zero]
    a, b = be.poisson_data_term(T, w, dz, 0.0), be.poisson_data_term(S, w, dz, 0.0)
    assert not np.isnan(a) and not np.isnan(b)
    assert a == b or abs(a - b) <= 1e-13 * abs(a)
    assert np.array_equal(be.to_numpy(be.model_values(T, w, dev)), be.model_values(S, w, dev))
    F[1][:, :] -= 0.5            # some model values <= 0
    dev = [be.asarray(f) for f in F]
    n = be.model_zero_count(T, w, dev)
    assert 0 < n == be.model_zero_count(S, w, dev)


@pytest.mark.parametrize("fraction", [1 / 16, 0.25, 0.6])
def test_blocks_stay_on_the_device(be, fraction):
    # a second pass over a mode uploads only the blocks that do not fit in the slots
    X = _heavy_tensor(seed=4)
    be.max_tensor_bytes = int(streamed.resident_bytes(be, X) * fraction)
    S = be.prepare(_fresh(X))
    K = S.nslots
    assert S.nbytes <= be.max_tensor_bytes
    F = [be.asarray(np.random.default_rng(5).random((s, 4))) for s in X.shape]
    for mode in range(3):
        B = S.nblocks[mode]
        u0 = S.uploads
        a = be.to_numpy(be.mttkrp(S, F, mode))
        u1 = S.uploads
        b = be.to_numpy(be.mttkrp(S, F, mode))
        u2 = S.uploads
        assert np.array_equal(a, b)
        assert u1 - u0 <= B
        assert u2 - u1 == (0 if B <= K else B - (K - 2)), (mode, B, K, u1 - u0, u2 - u1)


def _fits(be, X, divisor, make):
    be.max_tensor_bytes = None
    resident = make().fit(_fresh(X))
    be.max_tensor_bytes = streamed.resident_bytes(be, X) // divisor
    Xs = _fresh(X)
    model = make().fit(Xs)
    return resident, model


@pytest.mark.parametrize("divisor", [4, 8])
def test_estimators_streamed_equal_resident(be, divisor):
    # divisor 4: one block per mode (the resident kernels); 8: about 20 blocks
    # per mode, more than the slots, streamed at every pass (fewer iterations: PoCL launches
    # are slow)
    X = _heavy_tensor(seed=2)
    als_iter, apr_iter, inner = (8, 5, 5) if divisor == 4 else (6, 3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = _fits(be, X, divisor, lambda: CPALS(rank=4, random_state=0, max_iter=als_iter,
                                                   tol=0, device="opencl"))
        assert abs(a.fit_ - b.fit_) <= 1e-12 * abs(a.fit_)
        assert rel(a.factors_[0], b.factors_[0]) < 1e-9
        a, b = _fits(be, X, divisor, lambda: CPAPR(rank=4, random_state=0, max_iter=apr_iter,
                                                   max_inner_iter=inner, device="opencl"))
        assert abs(a.log_likelihood_ - b.log_likelihood_) <= 1e-12 * abs(a.log_likelihood_)
        assert a.n_inner_iter_ == b.n_inner_iter_
        assert rel(a.factors_[0], b.factors_[0]) < 1e-9
        # transform / score on a streamed tensor
        Y = _fresh(X)
        assert abs(a.score(X) - b.score(Y)) <= 1e-12 * abs(a.score(X))


def test_what_streaming_does_not_serve(be):
    X = _heavy_tensor(seed=3)
    be.max_tensor_bytes = streamed.resident_bytes(be, X) // 4
    with pytest.raises(NotImplementedError, match="Newton.*max_tensor_bytes"):
        CPAPR(rank=2, solver="pqnr", random_state=0, max_iter=2, device="opencl").fit(_fresh(X))
    with pytest.raises(NotImplementedError, match="GCP.*SKTENSOR_FAST_OCL_MAX_TENSOR_BYTES"):
        GCP(rank=2, random_state=0, max_iter=2, device="opencl").fit(_fresh(X))
    be.max_tensor_bytes = 100
    with pytest.raises(ValueError, match="max_tensor_bytes=100 is too small"):
        be.prepare(_fresh(X))


def test_resident_and_streamed_tensors_share_one_base(be):
    """Both kinds are DeviceTensors; what differs is their methods, not a flag the kernels
    test."""
    from sktensor_fast.backends.opencl.tensor import DeviceTensor, OpenCLTensor
    X = _heavy_tensor(seed=4, nnz=500)
    R = be.prepare(_fresh(X))
    be.max_tensor_bytes = streamed.resident_bytes(be, X) // 4
    S = be.prepare(_fresh(X))
    assert isinstance(R, OpenCLTensor) and isinstance(S, streamed.StreamedTensor)
    assert isinstance(R, DeviceTensor) and isinstance(S, DeviceTensor)
    assert (R.streamed, S.streamed) == (False, True)
    assert R.require_resident("a row solver") is None
    with pytest.raises(NotImplementedError, match="a row solver on a tensor streamed"):
        S.require_resident("a row solver")


def test_parse_max_bytes(monkeypatch):
    assert streamed.parse_max_bytes(None) is None
    assert streamed.parse_max_bytes(1000) == 1000
    assert streamed.parse_max_bytes("1.5e3") == 1500
    assert streamed.parse_max_bytes("2K") == 2048
    assert streamed.parse_max_bytes("512MiB") == 512 << 20
    assert streamed.parse_max_bytes(" 1g ") == 1 << 30
    for bad in ("lots", "0", "-5", True, "5X"):
        with pytest.raises(ValueError, match="max_tensor_bytes"):
            streamed.parse_max_bytes(bad)
    monkeypatch.setenv(streamed.ENV_MAX_TENSOR_BYTES, "64M")
    assert streamed.default_max_bytes() == 64 << 20
    monkeypatch.setenv(streamed.ENV_MAX_TENSOR_BYTES, "many")
    with pytest.raises(ValueError, match=streamed.ENV_MAX_TENSOR_BYTES):
        streamed.default_max_bytes()


def test_block_cuts():
    coords = np.array([0, 0, 1, 1, 1, 2, 5, 5, 5, 5, 5, 5, 6])
    cuts = streamed._block_cuts(coords, 4)
    # cut at row starts; row 5 (6 nonzeros) is longer than a block and is split
    assert cuts[0] == (0, 2)
    assert cuts[1] == (2, 6)
    assert sum(b - a for a, b in cuts) == coords.size
    assert all(b - a <= 4 for a, b in cuts)
    assert [a for a, _ in cuts] == sorted(a for a, _ in cuts)


def test_streamed_blocks_take_the_resident_chunk(be, monkeypatch):
    """A streamed tensor's blocks are cut into the chunks its resident copies would have (on a
    GPU a small tensor's are shorter), so that one block per mode gives the resident sums."""
    monkeypatch.setattr(be, "is_gpu", True)
    monkeypatch.setattr(be, "_chunk", None)
    monkeypatch.setattr(be, "layout", "lanes")
    monkeypatch.setattr(streamed.StreamedTensor, "PINNED", False)
    X = _heavy_tensor()
    monkeypatch.setattr(be, "max_tensor_bytes", streamed.resident_bytes(be, X) // 4)
    S = be.prepare(_fresh(X))
    assert isinstance(S, streamed.StreamedTensor)
    assert S.chunk == be.lanes_chunk(X.nnz) == be.SMALL_CHUNK


def test_block_cuts_read_the_order_where_asked():
    """The cuts over a mode's order read coordinates by position (no gathered copy): the
    same cuts as over the gathered coordinates."""
    rng = np.random.default_rng(5)
    subs = rng.integers(0, 30, (2000, 3)).astype(np.int32)
    subs[:300, 1] = 4      # a row longer than a block
    for mode in range(3):
        order = np.argsort(subs[:, mode], kind="stable").astype(np.int32)
        lazy = streamed._OrderedCoords(subs, order, mode)
        for block in (1, 7, 64, 250, 5000):
            assert (streamed._block_cuts(lazy, block)
                    == streamed._block_cuts(subs[order, mode], block))


def test_host_blocks_pinned_only_beside_the_cap():
    """Page-locked host blocks by default on GPUs only, and only where they fit within the
    share of the device memory that the cap leaves (a driver may mirror them there)."""
    GB = 1 << 30
    assert streamed.pin_host_blocks(True, 9 * GB, 141 * GB, 3 * GB, 0.8)
    # a billion nonzeros on an 80 GB card streamed under half of it: 60 GB of host blocks
    assert not streamed.pin_host_blocks(True, 60 * GB, 80 * GB, 40 * GB, 0.8)
    assert streamed.pin_host_blocks(True, 32 * GB, 80 * GB, 40 * GB, 0.8)
    assert not streamed.pin_host_blocks(False, 1, 80 * GB, 40 * GB, 0.8)


def test_streamed_tensor_of_the_modes_asked_for(be):
    """A streamed tensor prepared for some modes keeps host blocks of those only (half the
    host memory here) and refuses the kernels of the others with a clear error."""
    X = _heavy_tensor(seed=2)
    be.max_tensor_bytes = streamed.resident_bytes(be, X) // 4
    full = be.prepare(_fresh(X))
    one = be.prepare(_fresh(X), modes=(0, 2))
    assert isinstance(one, streamed.StreamedTensor) and one.modes == (0, 2)
    assert one.nblocks[1] == 0 and one.nblocks[0] == full.nblocks[0]
    assert one.host_nbytes < full.host_nbytes
    F = [be.asarray(np.random.default_rng(3).random((s, 4))) for s in X.shape]
    for mode in (0, 2):
        assert np.array_equal(be.to_numpy(be.mttkrp(one, F, mode)),
                              be.to_numpy(be.mttkrp(full, F, mode)))
    with pytest.raises(RuntimeError, match=r"modes \[0, 2\] only, not of mode 1"):
        be.mttkrp(one, F, 1)
