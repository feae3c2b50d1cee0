"""partial_fit's window built on the OpenCL device (backends/opencl/window.py): the same
tensor as the host builds, bit for bit, from the history kept on the device and the batch,
with nothing of the history crossing from the host (run on PoCL in CI)."""
import warnings

import numpy as np
import pytest

from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor
from sktensor_fast._prepared import value_stats

from _reference import device_arrays, random_sparse

cl = pytest.importorskip("pyopencl")

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def _window_module():
    from sktensor_fast.backends.opencl import window
    return window


def _host_keep(X, rows):
    """The slices ``rows`` (ascending) of ``X``, renumbered: a NumPy reference."""
    where = np.full(X.shape[0], -1)
    where[rows] = np.arange(len(rows))
    pick = where[X.subs[:, 0]]
    subs = X.subs[pick >= 0].copy()
    subs[:, 0] = pick[pick >= 0]
    return SparseTensor._from_canonical(subs, X.vals[pick >= 0], (len(rows),) + X.shape[1:])


def _host_stack(H, B):
    subs = B.subs.copy()
    subs[:, 0] += H.shape[0]
    return SparseTensor._from_canonical(np.concatenate([H.subs, subs]),
                                        np.concatenate([H.vals, B.vals]),
                                        (H.shape[0] + B.shape[0],) + B.shape[1:])


def _mixed(shape, nnz, seed, empty=()):
    """Values of every kind (integers, fractions, negatives, ones), slices ``empty`` empty."""
    rng = np.random.default_rng(seed)
    X = random_sparse(shape, nnz, rng, skew=0)
    vals = rng.choice([1.0, 2.0, -3.0, 0.5, 1.0, 7.25], size=X.nnz)
    keep = ~np.isin(X.subs[:, 0], list(empty))
    return SparseTensor._from_canonical(X.subs[keep], vals[keep], X.shape)


def _same_stats(got, want):
    for key in ("nonint", "negative", "nonbinary", "first_nonint", "first_negative",
                "first_nonbinary", "max_abs"):
        assert got[key] == want[key], key
    for key in ("sum", "sum_sq"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-13)


@pytest.mark.parametrize("rows", [[0, 1, 2, 3, 4, 5], [2, 5], [0, 3, 4], [1], [5]])
def test_slice_stats_combine_to_the_stats_of_the_slices(rows):
    w = _window_module()
    X = _mixed((6, 7, 5), 150, 1, empty=[1])
    B = _mixed((3, 7, 5), 40, 2, empty=[0])
    st = w.SliceStats.of(X).take(rows).concat(w.SliceStats.of(B))
    ref = _host_stack(_host_keep(X, rows), B)
    np.testing.assert_array_equal(st.nnz, np.bincount(ref.subs[:, 0], minlength=ref.shape[0]))
    _same_stats(st.combined(), value_stats(ref))


def test_slice_stats_of_empty_slices():
    w = _window_module()
    X = SparseTensor._from_canonical(np.zeros((0, 3), np.int64), np.zeros(0), (4, 3, 2))
    st = w.SliceStats.of(X)
    assert list(st.nnz) == [0, 0, 0, 0]
    assert st.combined() == {"sum": 0.0, "sum_sq": 0.0, "max_abs": 0.0, "nonint": 0,
                             "negative": 0, "nonbinary": 0, "first_nonint": -1,
                             "first_negative": -1, "first_nonbinary": -1}


CASES = [  # (window shape, nnz, batch shape, nnz, kept rows, empty slices of the window)
    ((9, 12, 7), 400, (3, 12, 7), 90, [5, 6, 7, 8], ()),
    ((9, 12, 7), 400, (3, 12, 7), 90, [0, 2, 3, 7], (2, 7)),
    ((6, 5, 4, 3), 200, (2, 5, 4, 3), 30, [1, 4], ()),
    ((5, 40), 60, (4, 40), 0, [0, 1, 2, 3, 4], ()),
    ((5, 40), 60, (1, 40), 7, [3], (3,)),
]


@pytest.mark.parametrize("case", CASES)
def test_device_window_equals_the_host_window(be, case):
    """History kept on the device, batch uploaded, window gathered there: every array of the
    device tensor equals that of the host-stacked window prepared from the host, and its
    statistics those of a pass over its values."""
    w = _window_module()
    shape0, nnz0, shape1, nnz1, rows, empty = case
    X = _mixed(shape0, nnz0, 3, empty)
    B = _mixed(shape1, nnz1, 4)
    first = w.stream_window(be, None, X, be.prepare(X), "coo")
    hist = first.keep(np.array(rows))
    assert hist.shape == (len(rows),) + shape0[1:]
    ref_hist = _host_keep(X, rows)
    got = hist.to_host()
    np.testing.assert_array_equal(got.subs, ref_hist.subs)
    np.testing.assert_array_equal(got.vals, ref_hist.vals)
    win = w.stream_window(be, hist, B, be.prepare(B), "coo")
    ref = _host_stack(ref_hist, B)
    assert win.shape == ref.shape and win.nnz == ref.nnz and win.downloads == 0
    T = win._T
    assert T.upload_info["from_device"]
    want = device_arrays(be.prepare(ref))
    have = device_arrays(T)
    assert have.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(have[k], want[k], err_msg=k)
    _same_stats(value_stats(win), value_stats(ref))
    np.testing.assert_allclose(T.norm_sq, float(np.sum(ref.vals ** 2)), rtol=1e-13)
    # the host's view, downloaded only when asked for
    np.testing.assert_array_equal(win.subs, ref.subs)
    np.testing.assert_array_equal(win.vals, ref.vals)
    assert win.downloads == 1


def test_window_of_another_dtype_is_left_to_the_host(be):
    w = _window_module()
    X = _mixed((4, 6, 5), 50, 5)
    hist = w.stream_window(be, None, X, be.prepare(X), "coo").keep(np.arange(4))
    B = X[:2].astype(np.float32)
    assert w.stream_window(be, hist, B, be.prepare(B), "coo") is None


# ---------------------------------------------------------------- through partial_fit
def _counts(n0, seed=0):
    rng = np.random.default_rng(seed)
    A = [rng.random((n0, 3)), rng.random((10, 3)), rng.random((8, 3))]
    return SparseTensor.from_dense(rng.poisson(np.einsum("ir,jr,kr->ijk", *A) * 3)
                                   .astype(float))


MAKERS = {
    "GCP": lambda **kw: GCP(3, loss="poisson", epoch_iters=20, max_iter=4, random_state=0,
                            **kw),
    "CPAPR": lambda **kw: CPAPR(3, max_iter=5, random_state=0, **kw),
    "CPALS": lambda **kw: CPALS(3, max_iter=5, random_state=0, **kw),
}


@pytest.mark.parametrize("name", list(MAKERS))
@pytest.mark.parametrize("method", ["last", "reservoir"])
def test_stream_on_the_device_keeps_the_cpu_history(be, name, method):
    X = _counts(16)
    dev = MAKERS[name](window=3, window_method=method, device="opencl")
    ref = MAKERS[name](window=3, window_method=method)
    for s in range(0, 16, 2):
        dev.partial_fit(X[s:s + 2])
        ref.partial_fit(X[s:s + 2])
        H, R = dev._stream["history"], ref._stream["history"]
        assert type(H).__name__ == "DeviceHistory" and isinstance(R, SparseTensor)
        got = H.to_host()
        np.testing.assert_array_equal(got.subs, R.subs)
        np.testing.assert_array_equal(got.vals, R.vals)
    for u, v in zip(dev.factors_, ref.factors_):
        np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-9)


def _direct_uploads(monkeypatch):
    """Uploads straight from the arrays (not through the page-locked staging buffers that a
    GPU's uploads take, which the counter would see as bytes)."""
    from sktensor_fast.backends.opencl import tensor
    monkeypatch.setattr(tensor, "staging", lambda *args, **kwargs: None)


def _upload_counter(monkeypatch):
    """Bytes of host-to-device copies, by dtype, from now on."""
    seen = {}
    real = cl.enqueue_copy

    def counting(queue, dest, src, **kw):
        if isinstance(src, np.ndarray) and isinstance(dest, cl.MemoryObjectHolder):
            seen[src.dtype.str] = seen.get(src.dtype.str, 0) + src.nbytes
        return real(queue, dest, src, **kw)
    monkeypatch.setattr(cl, "enqueue_copy", counting)
    return seen


@pytest.mark.parametrize("name", ["GCP", "CPAPR"])
def test_update_uploads_the_batch_and_no_history(be, name, monkeypatch):
    """Every update sends the device the batch's coordinates and nothing of the history's
    (which grows: window=None), never stacks or reads the window on the host, and reads the
    values of no tensor larger than the batch; the host path, counted alike, sends both
    (int32 copies: the coordinates, and on PoCL the orders sorted on the host)."""
    from sktensor_fast._native import _construct
    from sktensor_fast.backends.opencl import backend, window
    from sktensor_fast.decomposition import _base
    X = _counts(12, seed=1)
    batches = [X[s:s + 2] for s in range(0, 12, 2)]
    _direct_uploads(monkeypatch)

    def coordinate_bytes(fn):
        seen = _upload_counter(monkeypatch)
        fn()
        monkeypatch.setattr(cl, "enqueue_copy", counting_off)
        return seen.get(np.dtype(np.int32).str, 0)
    counting_off = cl.enqueue_copy
    alone = [coordinate_bytes(lambda b=b: be.prepare(b.astype(np.float64)))
             for b in batches]
    assert all(a >= b.nnz * 3 * 4 for a, b in zip(alone, batches))

    est = MAKERS[name](window=None, device="opencl")
    est.partial_fit(batches[0])

    def no_host_window(*args):
        raise AssertionError("the window was stacked on the host")

    def no_download(self):
        raise AssertionError("the window's nonzeros were downloaded")
    sizes = []
    real_stats = _construct.value_stats

    def stats(vals, *args):
        sizes.append(len(vals))
        return real_stats(vals, *args)
    monkeypatch.setattr(_base, "_stack_slices", no_host_window)
    monkeypatch.setattr(window.DeviceWindow, "_download", no_download)
    monkeypatch.setattr(_construct, "value_stats", stats)
    for b, a in zip(batches[1:], alone[1:]):
        sizes.clear()
        history = est._stream["history"].nnz * 3 * 4
        assert history > 1000
        # the batch's coordinates (and orders), and a few small int arrays of the solver
        sent = coordinate_bytes(lambda b=b: est.partial_fit(b))
        assert a <= sent < a + 64
        assert max(sizes, default=0) <= b.nnz
    assert est._stream["history"].shape[0] == 12
    monkeypatch.undo()
    _direct_uploads(monkeypatch)

    # the host path (the same counter) uploads the history's coordinates again
    host = MAKERS[name](window=None, device="opencl")
    host.partial_fit(batches[0])
    monkeypatch.setattr(backend.OpenCLBackend, "stream_windows", False)
    monkeypatch.setattr(backend.OpenCLBackend, "stream_window", lambda *args: None)
    host.partial_fit(batches[1])
    sent = coordinate_bytes(lambda: host.partial_fit(batches[2]))
    # (exactly that where the orders are sorted on the device, more on PoCL)
    assert sent >= alone[2] + (batches[0].nnz + batches[1].nnz) * 3 * 4
    for u, v in zip(host.factors_[1:], est.factors_[1:]):
        assert u.shape == v.shape


def test_streamed_batch_keeps_the_history_on_the_host(be):
    """A tensor streamed through the device in blocks has no resident arrays to keep: the
    history stays on the host, and the model is the CPU's."""
    from sktensor_fast.backends.opencl import streamed
    X = random_sparse((8, 40, 40), 2400, np.random.default_rng(0), counts=True)
    # the smallest cap the device's chunk allows (two blocks of one chunk): every batch of
    # about 600 nonzeros is above it, whatever the driver's chunk (PoCL's or a GPU's)
    cap = max(4096, 2 * max(streamed._chunk_of(be), 1) * (3 * 4 + 8))
    assert streamed.resident_bytes(be, X[0:2]) > cap
    dev = CPALS(3, max_iter=5, random_state=0, window=2, device="opencl",
                device_options={"max_tensor_bytes": cap})
    ref = CPALS(3, max_iter=5, random_state=0, window=2)
    for s in range(0, 8, 2):
        dev.partial_fit(X[s:s + 2])
        ref.partial_fit(X[s:s + 2])
        assert isinstance(dev._stream["history"], SparseTensor)
    np.testing.assert_array_equal(dev._stream["history"].subs, ref._stream["history"].subs)
    for u, v in zip(dev.factors_, ref.factors_):
        np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-9)


def test_stream_moved_to_the_cpu_takes_its_history_along(be):
    X = _counts(12)
    est = MAKERS["CPAPR"](window=3, device="opencl")
    ref = MAKERS["CPAPR"](window=3)
    for s in range(0, 6, 2):
        est.partial_fit(X[s:s + 2])
        ref.partial_fit(X[s:s + 2])
    est.set_params(device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        est.partial_fit(X[6:8])
    ref.partial_fit(X[6:8])
    H, R = est._stream["history"], ref._stream["history"]
    assert isinstance(H, SparseTensor)
    np.testing.assert_array_equal(H.subs, R.subs)
    np.testing.assert_array_equal(H.vals, R.vals)
    for u, v in zip(est.factors_, ref.factors_):
        np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-9)
