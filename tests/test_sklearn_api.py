"""The scikit-learn contract: clone, GridSearchCV, Pipeline, cross_val_score, check_estimator."""
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import Pipeline

from sktensor_fast import CPALS, KruskalTensor, SparseTensor


def labelled_tensor(rng, n=60):
    """Slices from two classes whose mode-0 loadings differ."""
    B = rng.random((8, 3))
    C = rng.random((6, 3))
    y = np.repeat([0, 1], n // 2)
    A = rng.random((n, 3)) * 0.3
    A[y == 0, 0] += 1.0
    A[y == 1, 1] += 1.0
    X = KruskalTensor(None, [A, B, C]).full() + 0.01 * rng.standard_normal((n, 8, 6))
    return X, y


def inputs(X):
    sparse = pytest.importorskip("sparse")
    return {"ndarray": X, "SparseTensor": SparseTensor.from_dense(X),
            "sparse.COO": sparse.COO.from_numpy(X)}


@pytest.mark.parametrize("kind", ["ndarray", "SparseTensor", "sparse.COO"])
def test_grid_search_pipeline_cross_val(kind):
    rng = np.random.default_rng(0)
    Xd, y = labelled_tensor(rng)
    X = inputs(Xd)[kind]
    gs = GridSearchCV(CPALS(max_iter=50, random_state=0), {"rank": [2, 4]}, cv=3).fit(X)
    assert gs.best_params_["rank"] in (2, 4)
    pipe = Pipeline([("cp", CPALS(rank=3, max_iter=100, random_state=0)),
                     ("clf", LogisticRegression())])
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.mean() > 0.9
    assert np.all(np.isfinite(cross_val_score(CPALS(rank=2, max_iter=20, random_state=0), X,
                                              cv=3)))


def test_clone_keeps_params():
    est = CPALS(rank=7, tol=1e-6, device="cpu", init="nvecs")
    c = clone(est)
    assert c.get_params() == est.get_params()
    assert not hasattr(c, "factors_")


def test_fit_transform_shape_and_unfitted():
    from sklearn.exceptions import NotFittedError
    rng = np.random.default_rng(1)
    X, _ = labelled_tensor(rng, 20)
    with pytest.raises(NotFittedError):
        CPALS().transform(X)
    W = CPALS(rank=3, random_state=0).fit_transform(X)
    assert W.shape == (20, 3)


def test_check_estimator():
    from sklearn.utils.estimator_checks import check_estimator
    check_estimator(CPALS(random_state=0))
