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


# ---------------------------------------------------------------------------- convergence
def _counts(seed=0, shape=(12, 10, 8)):
    rng = np.random.default_rng(seed)
    M = KruskalTensor(None, [rng.random((s, 2)) for s in shape]).full()
    return SparseTensor.from_dense(rng.poisson(4 * M).astype(float))


def _estimators():
    from sktensor_fast import CPAPR, GCP
    return {
        "CPALS": lambda **kw: CPALS(rank=2, random_state=0, **kw),
        "CPAPR-mu": lambda **kw: CPAPR(rank=2, random_state=0, **kw),
        "CPAPR-pdnr": lambda **kw: CPAPR(rank=2, solver="pdnr", random_state=0, **kw),
        "GCP-adam": lambda **kw: GCP(rank=2, loss="poisson", random_state=0, epoch_iters=20,
                                     **kw),
        "GCP-lbfgsb": lambda **kw: GCP(rank=2, loss="poisson", solver="lbfgsb",
                                       random_state=0, **kw),
    }


@pytest.mark.parametrize("name", list(_estimators()))
def test_stopping_at_max_iter_warns_and_says_so(name):
    from sklearn.exceptions import ConvergenceWarning
    X = _counts()
    make = _estimators()[name]
    with pytest.warns(ConvergenceWarning, match=r"stopped at max_iter=2 .*tol="):
        est = make(max_iter=2, tol=0.0).fit(X)
    assert est.converged_ is False and est.stop_reason_ == "max_iter"
    assert est.n_iter_ >= 2
    # run to its own criterion: no warning, converged_
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = make(max_iter=1000).fit(X)
    assert est.converged_ is True and est.stop_reason_ not in ("max_iter", "max_time")
    assert est.n_iter_ < 1000 or name == "GCP-lbfgsb"


@pytest.mark.parametrize("name", list(_estimators()))
def test_max_time_stops_every_estimator(name):
    from sklearn.exceptions import ConvergenceWarning
    X = _counts()
    make = _estimators()[name]
    with pytest.warns(ConvergenceWarning, match="stopped at max_time=1e-09s after"):
        est = make(max_iter=1000, tol=0.0, max_time=1e-9).fit(X)
    assert est.stop_reason_ == "max_time" and not est.converged_
    assert est.n_iter_ <= 2


def test_lbfgsb_n_iter_counts_the_refit_of_the_loadings():
    """GCP's L-BFGS-B refits the mode-0 loadings after the fit; n_iter_ counts those
    iterations too, and the loss history has one entry per iteration."""
    from sktensor_fast import GCP
    X = _counts()
    est = GCP(rank=2, loss="poisson", solver="lbfgsb", random_state=0, max_iter=3).fit(X)
    assert est.n_iter_ > 3
    assert est.n_iter_ == len(est.loss_history_) - 1
