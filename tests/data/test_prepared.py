"""Prepared tensors are built once per tensor, backend and format, and released with the tensor."""
import gc
import threading
import weakref

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV

from sktensor_fast import CPALS, CPAPR, SparseTensor, _prepared
from sktensor_fast.backends import get_backend


def small_tensor(seed=0, shape=(24, 20, 16), nnz=2000):
    rng = np.random.default_rng(seed)
    subs = np.column_stack([rng.integers(0, s, nnz) for s in shape])
    return SparseTensor(subs, rng.integers(1, 5, nnz).astype(float), shape)


@pytest.fixture
def count_prepares(monkeypatch):
    calls = []

    def wrap(backend):
        real = type(backend).prepare

        def counting(self, X, format="auto"):
            calls.append((self.name, X.shape, format))
            return real(self, X, format)
        monkeypatch.setattr(type(backend), "prepare", counting)
    wrap(get_backend("cpu"))
    return calls, wrap


def test_fit_restarts_transform_score_and_refit_share_one(count_prepares):
    calls, _ = count_prepares
    X = small_tensor()
    model = CPALS(rank=3, n_init=3, max_iter=4, random_state=0).fit(X)
    model.transform(X)
    model.score(X)
    CPALS(rank=2, max_iter=3, random_state=1).fit(X)
    assert len(calls) == 1
    CPALS(rank=2, max_iter=3, format="coo").fit(X)   # another format: another prepared tensor
    assert len(calls) == 2


def test_grid_search_prepares_every_fold_once(count_prepares):
    calls, _ = count_prepares
    X = small_tensor(1)
    GridSearchCV(CPALS(max_iter=3, random_state=0), {"rank": [2, 3, 4]}, cv=3).fit(X)
    # 3 train and 3 test folds, then the refit on X: each prepared once for 3 candidates
    assert len(calls) == 7
    shapes = sorted(c[1][0] for c in calls)
    assert shapes == [8, 8, 8, 16, 16, 16, 24]


def test_released_with_the_tensor():
    X = small_tensor(2)
    CPALS(rank=2, max_iter=2).fit(X)
    sub = X[np.arange(5)]
    CPALS(rank=2, max_iter=2).fit(sub)
    assert len(_prepared.cache_info(X)) == 2            # X's own and its selection's
    be = get_backend("cpu")
    with _prepared.prepared(be, X) as T:
        ref = weakref.ref(T)
    del X, sub, T
    gc.collect()
    assert ref() is None


def test_in_use_elsewhere_gives_a_private_one():
    X = small_tensor(3)
    be = get_backend("cpu")
    seen = []
    with _prepared.prepared(be, X) as T:
        t = threading.Thread(target=lambda: seen.append(
            _prepared.prepared(be, X).__enter__()))
        t.start()
        t.join()
        assert seen[0] is not T
    with _prepared.prepared(be, X) as T2:
        assert T2 is T


def test_selection_budget_evicts_least_recently_used(monkeypatch):
    X = small_tensor(4)
    monkeypatch.setattr(_prepared, "SELECTION_BYTES", 1.0)
    be = get_backend("cpu")
    for start in range(4):
        with _prepared.prepared(be, X[np.arange(start, start + 12)]):
            pass
    kept = [c for c in _prepared.cache_info(X) if c[3] is not None]
    assert 1 <= len(kept) < 4
    assert sum(c[4] for c in kept) <= 1.0 * (X.subs.nbytes + X.vals.nbytes) + kept[-1][4]


def test_value_stats_once_per_tensor(monkeypatch):
    X = SparseTensor([[0, 0], [1, 1], [2, 0]], [1.0, 2.5, 3.0])
    st = _prepared.value_stats(X)
    assert st["nonint"] == 1 and st["negative"] == 0 and st["sum"] == 6.5
    assert _prepared.value_stats(X) is st
    with pytest.warns(UserWarning, match="non-integer"):
        CPAPR(rank=1, max_iter=2).fit(X)
    with pytest.raises(ValueError, match="1 negative value"):
        CPAPR(rank=1).fit(SparseTensor([[0, 0], [1, 1]], [1.0, -2.0]))


def test_device_copy_uploaded_once(count_prepares):
    pytest.importorskip("pyopencl")
    from sktensor_fast.backends import list_devices
    if not list_devices():
        pytest.skip("no OpenCL device")
    calls, wrap = count_prepares
    be = get_backend("opencl")
    wrap(be)
    X = small_tensor(5)
    model = CPALS(rank=2, max_iter=3, device="opencl", n_init=2, random_state=0).fit(X)
    model.transform(X)
    model.score(X)
    assert [c[0] for c in calls] == [be.name]
