"""OpenCL prepare: the device's radix sort of the mode orders and the staged (page-locked)
uploads, against NumPy's stable argsort and the plain uploads (run on PoCL in CI)."""
import logging
import uuid

import numpy as np
import pytest

from sktensor_fast import CPALS, CPAPR, SparseTensor

from _reference import device_arrays, random_sparse

cl = pytest.importorskip("pyopencl")


@pytest.fixture
def switches(monkeypatch, be):
    """Set OpenCLTensor's PINNED / DEVICE_ORDERS / STAGE_BYTES for one test (restored after,
    with the backend's staging buffers)."""
    from sktensor_fast.backends.opencl.tensor import OpenCLTensor
    saved = be.__dict__.get("_staging", None)

    def set_(pinned=None, device=None, stage=None):
        monkeypatch.setattr(OpenCLTensor, "PINNED", pinned)
        monkeypatch.setattr(OpenCLTensor, "DEVICE_ORDERS", device)
        if stage is not None:
            monkeypatch.setattr(OpenCLTensor, "STAGE_BYTES", stage)
    yield set_
    if saved is None:
        be.__dict__.pop("_staging", None)
    else:
        be.__dict__["_staging"] = saved


def _argsort(be, keys, length, **kw):
    from sktensor_fast.backends.opencl import sort
    got = sort.device_argsort(be, np.asarray(keys), length, **kw)
    assert got.dtype == np.int32 and got.shape == (len(keys),)
    np.testing.assert_array_equal(got, np.argsort(keys, kind="stable"))


def _keys(case, n, rng):
    """(keys, length) of one kind."""
    if case == "random":
        return rng.integers(0, 28818, n), 28818
    if case == "skewed":             # most keys equal, a Zipf tail
        k = np.minimum(rng.zipf(1.3, n) - 1, 9183)
        k[rng.random(n) < 0.5] = 7
        return k, 9184
    if case == "one_key":
        return np.full(n, 999), 1000
    if case == "distinct":
        return rng.permutation(n), max(n, 1)
    if case == "top_bit":           # only the 0 and the highest bit of 15
        return rng.choice([0, 1 << 14], n), (1 << 14) + 1
    if case == "all_ones":          # 0 and the largest 15-bit key: every digit at its ends
        return rng.choice([0, (1 << 15) - 1], n), 1 << 15
    if case == "short":             # a mode of 16 (one 4-bit pass)
        return rng.integers(0, 16, n), 16
    raise AssertionError(case)


CASES = ["random", "skewed", "one_key", "distinct", "top_bit", "all_ones", "short"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("n", [0, 1, 2, 2047, 2049, 4097, 30001])
def test_device_order_equals_stable_argsort(be, case, n):
    """Tiles of 2048 (5-bit digits) and 4096 (4-bit) keys: sizes around their multiples."""
    rng = np.random.default_rng(n + len(case))
    keys, length = _keys(case, n, rng)
    _argsort(be, keys, length)


@pytest.mark.parametrize("max_bits", [4, 8])
def test_device_order_any_digit_width(be, max_bits):
    rng = np.random.default_rng(max_bits)
    for length in (2, 9184, 28818, 2 ** 31 - 2):
        _argsort(be, rng.integers(0, length, 10001), length, max_bits=max_bits)


def test_device_order_mode_of_length_one(be):
    _argsort(be, np.zeros(3000, dtype=np.int64), 1)


def test_device_order_bad_input(be):
    from sktensor_fast.backends.opencl import sort
    with pytest.raises(ValueError, match=r"keys must lie in \[0, 10\)"):
        sort.device_argsort(be, np.array([3, 10]), 10)
    with pytest.raises(ValueError, match="one-dimensional"):
        sort.device_argsort(be, np.zeros((2, 2), dtype=int), 3)
    with pytest.raises(ValueError, match="RADIX_BITS must be between 1 and 8"):
        sort.sort_config(be, 100, max_bits=9)


def test_sort_program_builds_without_warnings(be, caplog):
    """sort.cl compiles clean (the GPU tests turn compiler warnings into errors): a fresh build
    logs the one warning planted in it and no other."""
    from sktensor_fast.backends.opencl.program import build_program, kernel_source
    if "Portable Computing Language" not in be.device.platform.name:
        pytest.skip("the build log is checked on PoCL")
    for bits, wg, per_item in [(4, 256, 16), (5, 128, 16), (8, 64, 16)]:
        # (a kernel of a new name: PoCL caches binaries, and their logs, by the source after
        # the preprocessor)
        src = (f"#define RADIX_BITS {bits}\n#define WG {wg}\n#define PER_ITEM {per_item}\n"
               + kernel_source("sort.cl") + "#warning planted\n"
               + f"__kernel void fresh_{uuid.uuid4().hex}(__global int* a) {{ a[0] = 1; }}\n")
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="sktensor_fast.opencl"):
            build_program(be.ctx, src, what="sort.cl")
        lines = [ln for ln in caplog.text.splitlines() if "warning:" in ln]
        assert lines and all("planted" in ln for ln in lines), caplog.text


SHAPES = [(40, 7), (30, 20, 10), (6, 5, 4, 3, 5), (3, 1, 50), (50, 2000, 9)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("nnz", [0, 1, 3000])
def test_prepare_every_way_gives_the_same_device_tensor(be, switches, shape, nnz):
    """Orders on the device or the host, uploads staged (small staging buffers: many chunks,
    rows across their ends) or plain: the same arrays, the orders those of a stable argsort."""
    rng = np.random.default_rng(nnz + len(shape))
    size = int(np.prod(shape))
    X = random_sparse(shape, min(nnz, size), rng, counts=True)
    ref = None
    for pinned in (False, True):
        for device in (False, True):
            switches(pinned=pinned, device=device, stage=4100)
            T = be.prepare(X)
            assert T.upload_info == {"pinned": pinned and X.nnz > 0, "device_orders": device}
            got = device_arrays(T)
            for m in range(1, len(shape)):
                np.testing.assert_array_equal(got[f"order{m}"],
                                              np.argsort(X.subs[:, m], kind="stable"))
            np.testing.assert_array_equal(got["subs0"], X.subs)
            np.testing.assert_array_equal(got["vals0"], X.vals)
            if ref is None:
                ref = got
            else:
                assert ref.keys() == got.keys()
                for k in ref:
                    np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


def test_prepare_skewed_large_mode(be, switches):
    """A mode longer than the nonzeros and a heavy row: several passes, tiles of equal keys."""
    rng = np.random.default_rng(5)
    n = 20000
    subs = np.stack([rng.integers(0, 7, n), rng.integers(0, 200000, n),
                     np.where(rng.random(n) < 0.7, 3, rng.integers(0, 5000, n))], axis=1)
    X = SparseTensor(subs, rng.integers(1, 4, n).astype(float), (7, 200000, 5000))
    switches(pinned=True, device=True, stage=1 << 16)
    T = be.prepare(X)
    for m in (1, 2):
        np.testing.assert_array_equal(T.orders[m].get(),
                                      np.argsort(X.subs[:, m], kind="stable"))


def test_staging_refused_falls_back_to_plain_uploads(be, switches, monkeypatch):
    from sktensor_fast.backends.opencl import tensor
    be.__dict__.pop("_staging", None)

    def refuse(self, backend, nbytes):
        raise cl.MemoryError("no page-locked memory")
    monkeypatch.setattr(tensor.Staging, "__init__", refuse)
    switches(pinned=True, device=True)
    X = random_sparse((20, 30, 40), 2000, np.random.default_rng(2), counts=True)
    T = be.prepare(X)
    assert T.upload_info == {"pinned": False, "device_orders": True}
    assert be.__dict__["_staging"] is False          # not asked again
    np.testing.assert_array_equal(T.orders[2].get(), np.argsort(X.subs[:, 2], kind="stable"))
    np.testing.assert_array_equal(T._vals0.get(), X.vals)


def test_staging_buffers_are_kept_and_remade_for_a_new_size(be, switches):
    from sktensor_fast.backends.opencl import tensor
    be.__dict__.pop("_staging", None)
    switches(pinned=True, device=False, stage=1 << 14)
    X = random_sparse((20, 30, 40), 2000, np.random.default_rng(3), counts=True)
    be.prepare(X)
    st = be.__dict__["_staging"]
    assert isinstance(st, tensor.Staging) and st.nbytes == 1 << 14
    be.prepare(X)
    assert be.__dict__["_staging"] is st
    switches(pinned=True, device=False, stage=1 << 15)
    be.prepare(X)
    assert be.__dict__["_staging"].nbytes == 1 << 15
    with pytest.raises(ValueError, match="does not fit the staging buffers"):
        be.__dict__["_staging"].upload(be.queue, None, 1, 1 << 16, None)


def test_prepare_makes_no_pass_over_the_values(be, switches, monkeypatch):
    """The sum of squares comes from the statistics kept with the tensor."""
    from sktensor_fast._native import _construct
    from sktensor_fast._prepared import value_stats
    X = random_sparse((20, 30, 40), 2000, np.random.default_rng(4), counts=True)
    stats = value_stats(X)

    def fail(*args, **kwargs):
        raise AssertionError("a second pass over the values")
    monkeypatch.setattr(_construct, "value_stats", fail)
    for pinned in (False, True):
        switches(pinned=pinned, device=True)
        T = be.prepare(X)
        assert T.norm_sq == stats["sum_sq"]


@pytest.mark.parametrize("algo", ["cpals", "cpapr", "pdnr"])
def test_fits_identical_every_way(be, switches, algo):
    """Fits on tensors prepared with device orders and staged uploads give the same models,
    bit for bit, as with host orders and plain uploads."""
    rng = np.random.default_rng(11)
    X = random_sparse((30, 25, 40), 3000, rng, counts=True)
    models = []
    for pinned, device in [(False, False), (True, True)]:
        switches(pinned=pinned, device=device, stage=1 << 12)
        Xk = SparseTensor(X.subs, X.vals, X.shape)       # a fresh tensor: prepared anew
        if algo == "cpals":
            m = CPALS(rank=4, max_iter=5, tol=0, random_state=0, device="opencl").fit(Xk)
        else:
            solver = "mu" if algo == "cpapr" else algo      # pdnr reads the sorted copies
            m = CPAPR(rank=4, solver=solver, max_iter=3, tol=0, random_state=0,
                      device="opencl").fit(Xk)
        models.append(m)
    a, b = models
    np.testing.assert_array_equal(a.weights_, b.weights_)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_array_equal(fa, fb)


def test_device_without_room_for_the_sort_orders_on_the_host(be, switches, monkeypatch):
    """A device whose local memory holds no tile of the sort gets the host's orders."""
    from sktensor_fast.backends.opencl import sort
    monkeypatch.setattr(sort, "_local_bytes", lambda *args: 1 << 40)
    assert sort.sort_config(be, 100) is None and not sort.usable(be, (5, 100))
    assert sort.usable(be, (5, 1))                   # nothing to sort
    switches(pinned=False, device=True)
    X = random_sparse((20, 30, 40), 2000, np.random.default_rng(8), counts=True)
    T = be.prepare(X)
    assert T.upload_info == {"pinned": False, "device_orders": False}
    np.testing.assert_array_equal(T.orders[1].get(), np.argsort(X.subs[:, 1], kind="stable"))
    with pytest.raises(ValueError, match="too little local memory"):
        sort.device_argsort(be, np.array([1, 0]), 100)
