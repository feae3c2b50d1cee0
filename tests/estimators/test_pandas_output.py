"""set_output(transform="pandas"): columns from get_feature_names_out, index from the samples'
labels (mode 0 of the tensor transformed), as scikit-learn keeps a DataFrame's index."""
import numpy as np
import pytest

from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor
from sktensor_fast.datasets import load_flights_routes

pd = pytest.importorskip("pandas")

FAST = dict(rank=2, random_state=0, max_iter=3, tol=0)


@pytest.fixture(scope="module")
def dests():
    return load_flights_routes().tensor.transpose((1, 0, 2, 3, 4))   # destinations as samples


def _small():
    rng = np.random.default_rng(0)
    X = SparseTensor(rng.integers(0, [6, 4, 3], size=(40, 3)), rng.integers(1, 5, 40), (6, 4, 3))
    X.labels = [[f"s{i}" for i in range(6)], None, None]
    X.mode_names = ["sample", "feature", "time"]
    return X


@pytest.mark.parametrize("make", [lambda: CPAPR(**FAST), lambda: CPALS(**FAST),
                                  lambda: GCP(loss="poisson", epoch_iters=20, **FAST),
                                  lambda: GCP(loss="gaussian", solver="lbfgsb", **FAST)])
def test_index_is_the_mode0_labels(make):
    X = _small()
    est = make().set_output(transform="pandas")
    W = est.fit_transform(X)
    assert isinstance(W, pd.DataFrame)
    assert list(W.index) == X.labels[0] and W.index.name == "sample"
    assert list(W.columns) == list(est.get_feature_names_out())
    T = est.transform(X)
    assert list(T.index) == X.labels[0] and list(T.columns) == list(W.columns)
    np.testing.assert_array_equal(T.to_numpy(), est.set_output(transform="default")
                                  .transform(X))


def test_without_labels_the_index_is_a_range(dests):
    X = SparseTensor(dests.subs, dests.vals, dests.shape)       # no labels
    W = CPAPR(**FAST).set_output(transform="pandas").fit_transform(X)
    assert isinstance(W, pd.DataFrame) and list(W.index) == list(range(X.shape[0]))


def test_pipeline_keeps_the_labels(dests):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    pipe = make_pipeline(CPAPR(**FAST), StandardScaler()).set_output(transform="pandas")
    out = pipe.fit_transform(dests)
    assert list(out.index) == dests.labels[0] and list(out.columns) == ["cpapr0", "cpapr1"]
