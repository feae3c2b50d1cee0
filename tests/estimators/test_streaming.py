"""partial_fit: streaming updates over mode-0 slices with a bounded history."""
import gc
import weakref

import numpy as np
import pytest

from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor, num_threads

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def _counts(n0=24, seed=0):
    rng = np.random.default_rng(seed)
    A = [rng.random((n0, 3)), rng.random((10, 3)), rng.random((8, 3))]
    rates = np.einsum("ir,jr,kr->ijk", *A) * 3
    return SparseTensor.from_dense(rng.poisson(rates).astype(float))


def _gcp(**kw):
    return GCP(3, loss="poisson", epoch_iters=50, max_iter=20, random_state=0, **kw)


def _cpapr(**kw):
    return CPAPR(3, max_iter=30, random_state=0, **kw)


def _cpals(**kw):
    return CPALS(3, max_iter=30, random_state=0, **kw)


MAKERS = {"GCP": _gcp, "CPAPR": _cpapr, "CPALS": _cpals}


def _stream(est, X, size):
    for s in range(0, X.shape[0], size):
        est.partial_fit(X[s:s + size])
    return est


def _same(a, b):
    assert np.array_equal(a.weights_, b.weights_)
    for u, v in zip(a.factors_, b.factors_):
        assert np.array_equal(u, v)


@pytest.mark.parametrize("name", list(MAKERS))
def test_one_batch_with_unbounded_window_is_fit(name):
    X = _counts()
    a = MAKERS[name](window=None).fit(X)
    b = MAKERS[name](window=None).partial_fit(X)
    _same(a, b)
    assert np.array_equal(a.loss_history_, b.loss_history_)
    assert b.n_samples_seen_ == X.shape[0] and b.tensor_shape_ == a.tensor_shape_


@pytest.mark.parametrize("name", ["GCP", "CPAPR"])
def test_streams_on_every_device(name, device):
    X = _counts(n0=8)
    a = MAKERS[name](window=None, device=device).fit(X)
    b = MAKERS[name](window=None, device=device).partial_fit(X)
    _same(a, b)
    c = _stream(MAKERS[name](window=2, device=device).set_params(max_iter=5), X, 4)
    ref = _stream(MAKERS[name](window=2).set_params(max_iter=5), X, 4)
    for u, v in zip(c.factors_, ref.factors_):
        np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_stream_saved_mid_way_goes_on_as_before(name, device):
    """An estimator pickled or deep-copied between two updates (its history kept on the
    device, on OpenCL) goes on from the copy: the next updates give the same model, bit for
    bit, as the estimator that was not saved."""
    import copy
    import pickle
    X = _counts(n0=16)
    a = MAKERS[name](window=6, device=device).set_params(max_iter=5)
    a.partial_fit(X[:4]).partial_fit(X[4:8])
    saved = [pickle.loads(pickle.dumps(a)), copy.deepcopy(a)]
    for est in [a] + saved:
        est.partial_fit(X[8:12]).partial_fit(X[12:])
    for est in saved:
        assert est.n_samples_seen_ == a.n_samples_seen_ == 16
        _same(a, est)


@pytest.mark.parametrize("name", list(MAKERS))
def test_memory_bounded_by_the_window(name):
    X = _counts(n0=30)
    est = MAKERS[name](window=3)
    first = X[0:2]
    est.partial_fit(first)
    ref = weakref.ref(first)
    del first
    for s in range(2, 30, 2):
        est.partial_fit(X[s:s + 2])
        assert est._stream["history"].shape[0] == 3
        n = 4 if s == 2 else 5   # the history, then the batch
        assert est.factors_[0].shape[0] == n and est.tensor_shape_ == (n, 10, 8)
        assert [f.shape for f in est.factors_[1:]] == [(10, 3), (8, 3)]
    gc.collect()
    assert ref() is None   # no batch is kept beyond the window's copy of its slices
    assert est.n_samples_seen_ == 30


@pytest.mark.parametrize("name", ["GCP", "CPAPR"])
def test_deterministic_whatever_the_threads(name):
    X = _counts()
    runs = []
    for threads in (1, 2):
        with num_threads(threads):
            runs.append(_stream(MAKERS[name](window=5), X, 4))
    _same(*runs)
    again = _stream(MAKERS[name](window=5), X, 4)
    _same(runs[0], again)


def test_the_seed_matters():
    X = _counts()
    a = _stream(_gcp(window=5), X, 4)
    b = _stream(GCP(3, loss="poisson", epoch_iters=50, max_iter=20, random_state=1, window=5),
                X, 4)
    assert not np.allclose(a.factors_[1], b.factors_[1])


@pytest.mark.parametrize("name", list(MAKERS))
def test_transform_and_score_between_calls(name):
    X = _counts(n0=30)
    est = MAKERS[name](window=6)
    est.partial_fit(X[:3])
    first = est.score(X)
    before = [f.copy() for f in est.factors_[1:]]
    for s in range(3, 30, 3):
        est.partial_fit(X[s:s + 3])
        W = est.transform(X[:5])
        assert W.shape == (5, 3) and np.all(np.isfinite(W))
        assert np.isfinite(est.score(X[s:s + 3]))
    # the updates moved the non-sample factors, and the model of the whole stream explains
    # the whole tensor better than the model of the first batch
    assert not all(np.allclose(u, v) for u, v in zip(before, est.factors_[1:]))
    assert est.score(X) > first


def test_partial_fit_continues_a_fitted_model():
    X = _counts()
    est = _cpapr(window=4).fit(X[:12])
    est.partial_fit(X[12:15])
    assert est.n_samples_seen_ == 15
    assert est.factors_[0].shape == (3, 3)   # no history after fit: the batch alone
    est.partial_fit(X[15:18])
    assert est.factors_[0].shape == (6, 3)
    # fit starts over: the stream's history and count go
    est.fit(X)
    assert not hasattr(est, "n_samples_seen_") and "_stream" not in est.__dict__


def test_mode0_labels_follow_the_window():
    X = _counts()
    X.labels = [[f"d{i}" for i in range(24)], [f"a{j}" for j in range(10)],
                [f"b{k}" for k in range(8)]]
    est = _cpals(window=2)
    est.partial_fit(X[:3])   # selections keep no labels: give them
    est.labels_ = [X.labels[0][:3]] + X.labels[1:]
    batch = X[3:6]
    batch.labels = [X.labels[0][3:6]] + X.labels[1:]
    est.partial_fit(batch)
    assert est.labels_[0] == ["d1", "d2", "d3", "d4", "d5"]
    assert est.labels_[1] == X.labels[1]


# ---------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("name", list(MAKERS))
def test_batch_of_another_shape(name):
    X = _counts()
    est = MAKERS[name]().partial_fit(X[:4])
    other = SparseTensor.from_dense(np.ones((2, 10, 7)))
    with pytest.raises(ValueError, match=r"partial_fit: the batch has shape \(2, 10, 7\), but "
                                         r"the model's modes 1 and up have shape \(10, 8\)"):
        est.partial_fit(other)
    with pytest.raises(ValueError, match=r"the batch has shape \(2, 10, 8, 1\)"):
        est.partial_fit(SparseTensor.from_dense(np.ones((2, 10, 8, 1))))
    # the model is unchanged by the refused batch
    assert est.factors_[0].shape == (4, 3) and est.n_samples_seen_ == 4


@pytest.mark.parametrize("name", list(MAKERS))
def test_rank_changed_during_a_stream(name):
    """A rank set between two calls of partial_fit is refused with both ranks named (the
    model of the stream has the first); fit starts a stream with the new rank."""
    X = _counts()
    est = MAKERS[name]().partial_fit(X[:4])
    est.set_params(rank=4)
    with pytest.raises(ValueError, match=r"partial_fit continues a model of rank 3, but rank "
                                         r"is now 4"):
        est.partial_fit(X[4:8])
    assert est.factors_[1].shape == (10, 3) and est.n_samples_seen_ == 4
    est.set_params(rank=3).partial_fit(X[4:8])
    assert est.n_samples_seen_ == 8
    est.set_params(rank=4).fit(X[:4])
    assert est.partial_fit(X[4:8]).factors_[1].shape == (10, 4)


def test_partial_fit_after_fit_with_another_shape():
    est = _gcp().fit(_counts())
    with pytest.raises(ValueError, match=r"the batch has shape \(3, 9, 8\), but the model's "
                                         r"modes 1 and up have shape \(10, 8\)"):
        est.partial_fit(SparseTensor.from_dense(np.ones((3, 9, 8))))


def test_batch_with_other_labels():
    X = _counts()
    first = X[:4]
    first.labels = [None, [f"a{j}" for j in range(10)], [f"b{k}" for k in range(8)]]
    first.mode_names = ["day", "origin", "dest"]
    est = _cpapr().partial_fit(first)
    batch = X[4:8]
    batch.labels = [None, [f"a{j}" for j in range(10)], [f"b{k}" for k in range(7)] + ["zz"]]
    with pytest.raises(ValueError, match=r"labels of mode 2 \(dest\).*index 7 is 'zz' in X "
                                         r"but 'b7' in the model"):
        est.partial_fit(batch)


@pytest.mark.parametrize("window", [-1, 2.5, True, "3"])
def test_window_is_checked(window):
    with pytest.raises(ValueError, match="'window' parameter"):
        _gcp(window=window).partial_fit(_counts())


def test_gcp_partial_fit_refuses_a_mask():
    X = _counts()
    with pytest.raises(ValueError, match="partial_fit cannot use a mask"):
        _gcp(mask=np.ones(X.shape, dtype=bool)).partial_fit(X)


def test_counts_checked_in_every_batch():
    X = _counts()
    est = _cpapr().partial_fit(X[:4])
    bad = SparseTensor.from_dense(-np.ones((2, 10, 8)))
    with pytest.raises(ValueError, match="Negative values"):
        est.partial_fit(bad)


def _labelled_batches(X, size):
    """The slices of X in batches that carry their labels (mode 0: the slice's number)."""
    out = []
    for s in range(0, X.shape[0], size):
        b = X[s:s + size]
        b.labels = [list(range(s, s + b.shape[0])), None, None]
        out.append(b)
    return out


@pytest.mark.parametrize("method", ["last", "reservoir"])
def test_history_holds_the_slices_it_names(method):
    X = _counts(n0=30)
    est = _cpals(window=4, window_method=method)
    for b in _labelled_batches(X, 1):
        est.partial_fit(b)
    kept = est.labels_[0]
    assert len(kept) == 5 and kept[-1] == 29 and kept == sorted(kept)
    if method == "last":
        assert kept == [25, 26, 27, 28, 29]
    else:   # a sample of the whole stream, not only its end
        assert min(kept[:-1]) < 25
    H = est._stream["history"]
    assert H.shape == (4, 10, 8)
    # the history's slices are those of the tensor that the labels name (the last four of
    # the update: the batch 29 leaves only when a newer one comes in, for "last")
    names = [kept[i] for i in est._stream["rows"]]
    for i, n in enumerate(names):
        np.testing.assert_array_equal(H[i].to_dense(), X[n].to_dense())


def test_reservoir_is_deterministic_and_bounded():
    X = _counts(n0=30)
    runs = [_stream(_gcp(window=3, window_method="reservoir"), X, 2) for _ in range(2)]
    _same(*runs)
    assert runs[0]._stream["history"].shape[0] == 3


def test_window_method_is_checked():
    with pytest.raises(ValueError, match="'window_method' parameter"):
        _cpals(window_method="first").partial_fit(_counts())


@pytest.mark.parametrize("window, sizes", [(0, [0, 0, 0, 0]), (None, [4, 8, 12, 16])])
def test_window_zero_and_unbounded(window, sizes):
    X = _counts()
    est = _cpals(window=window)
    seen = []
    for s in range(0, 16, 4):
        est.partial_fit(X[s:s + 4])
        H = est._stream["history"]
        seen.append(0 if H is None else H.shape[0])
    assert seen == sizes   # no history, or every slice so far
    assert est.factors_[0].shape[0] == (4 if window == 0 else 16)
