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


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ndarray", "SparseTensor", "sparse.COO"])
def test_grid_search_pipeline_cross_val(kind, device):
    if device != "cpu" and kind != "SparseTensor":
        pytest.skip("the input kinds are converted on the host: one of them on OpenCL")
    rng = np.random.default_rng(0)
    Xd, y = labelled_tensor(rng)
    X = inputs(Xd)[kind]
    est = CPALS(max_iter=50, random_state=0, device=device)
    assert clone(est).get_params()["device"] == device
    gs = GridSearchCV(est, {"rank": [2, 4]}, cv=3).fit(X)
    assert gs.best_params_["rank"] in (2, 4)
    pipe = Pipeline([("cp", CPALS(rank=3, max_iter=100, random_state=0, device=device)),
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


def _solvers(cls):
    """Every value of the estimator's ``solver`` parameter (None: it has no such parameter)."""
    cons = cls._parameter_constraints.get("solver")
    return sorted(cons[0].options) if cons else [None]


def _every_solver():
    from sktensor_fast import CPAPR, GCP
    return [(cls, solver) for cls in (CPALS, CPAPR, GCP) for solver in _solvers(cls)]


def test_every_solver_is_checked():
    names = {f"{cls.__name__}-{s}" for cls, s in _every_solver()}
    assert {"CPALS-None", "CPAPR-mu", "CPAPR-pdnr", "CPAPR-pqnr", "GCP-adam", "GCP-sgd",
            "GCP-adagrad", "GCP-lbfgsb"} <= names


@pytest.mark.parametrize("cls, solver", _every_solver(),
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_check_estimator(cls, solver):
    """scikit-learn's check_estimator for every estimator and every solver (for GCP,
    fit_transform(X) and transform(X) agree because each fit ends with the step on the
    mode-0 loadings that transform takes)."""
    import warnings
    from sklearn.utils.estimator_checks import check_estimator
    # scikit-learn's data are matrices with 2 to 4 features (columns), which determine the
    # loadings of at most that many components: rank 2 (the default is 5)
    kw = {"random_state": 0, "rank": 2}
    if solver is not None:
        kw["solver"] = solver
    if cls.__name__ == "GCP":
        kw.update(epoch_iters=10, max_iter=3)
    with warnings.catch_warnings():
        # CPAPR assumes counts and warns about sklearn's arbitrary nonnegative floats
        warnings.filterwarnings("ignore", message=".*non-integer values")
        check_estimator(cls(**kw))


# ---------------------------------------------------------------------------- convergence
def _counts(seed=0, shape=(12, 10, 8)):
    rng = np.random.default_rng(seed)
    M = KruskalTensor(None, [rng.random((s, 2)) for s in shape]).full()
    return SparseTensor.from_dense(rng.poisson(4 * M).astype(float))


def _estimators():
    from sktensor_fast import CPAPR, GCP
    return [CPALS(), CPAPR(), GCP()]


@pytest.mark.parametrize("est", _estimators(), ids=lambda e: type(e).__name__)
def test_bools_are_refused_for_numeric_parameters(est):
    """rank=True would pass scikit-learn's Interval(Integral) as 1: every numeric parameter
    refuses bools (NumPy's too) with the parameter's name; verbose still takes them."""
    from sklearn.utils._param_validation import Interval
    X = np.ones((3, 3, 3))
    numeric = [name for name, cons in est._parameter_constraints.items()
               if any(isinstance(c, Interval) or c == "random_state" for c in cons)
               and not any(c in ("boolean", "verbose") for c in cons)]
    assert {"rank", "max_iter", "tol", "n_init", "random_state"} <= set(numeric)
    for name in numeric:
        for val in (True, False, np.bool_(True)):
            with pytest.raises((ValueError, TypeError),
                               match=f"'{name}' parameter.*(bool|True|False)"):
                clone(est).set_params(**{name: val}).fit(X)
    clone(est).set_params(verbose=False, max_iter=2).fit(X)


@pytest.mark.parametrize("est", _estimators(), ids=lambda e: type(e).__name__)
def test_complex_init_is_refused(est):
    rng = np.random.default_rng(0)
    X = rng.poisson(2.0, (4, 3, 2)).astype(float)
    init = [rng.random((s, 2)) for s in X.shape]
    init[1] = init[1] + 1j * rng.random(init[1].shape)
    with pytest.raises(ValueError, match="init factor 1 holds complex values"):
        clone(est).set_params(rank=2, init=init).fit(X)


@pytest.mark.parametrize("est", _estimators(), ids=lambda e: type(e).__name__)
def test_initial_factors_of_extreme_scale(est):
    """A given init whose model overflows float64 (1e200 per entry): CPALS, which does not
    depend on the scale of the initial columns, rescales them exactly and fits as from the
    unscaled init; GCP and CPAPR, which do, refuse it with a ValueError naming init (it used
    to be a FloatingPointError from the first iteration)."""
    rng = np.random.default_rng(0)
    X = rng.poisson(2.0, (5, 4, 3)).astype(float)
    init = [rng.random((s, 2)) + 0.1 for s in X.shape]
    kw = dict(rank=2, max_iter=3, random_state=0)
    if isinstance(est, CPALS):
        ref = clone(est).set_params(init=init, **kw).fit(X)
        for scale in (1e200, 1e-200):
            m = clone(est).set_params(init=[f * scale for f in init], **kw).fit(X)
            np.testing.assert_allclose(m.weights_, ref.weights_, rtol=1e-12)
        dead = [f.copy() for f in init]
        dead[1][:, 0] = 0.0
        with pytest.warns(UserWarning, match=r"column\(s\) \[0\] of factor 1 are zero"):
            clone(est).set_params(init=dead, **kw).fit(X)
    else:
        with pytest.raises(ValueError, match="init: the initial model reaches values of "
                                             "about 1e600"):
            clone(est).set_params(init=[f * 1e200 for f in init], **kw).fit(X)


def _convergence_estimators():
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


@pytest.mark.parametrize("name", list(_convergence_estimators()))
def test_stopping_at_max_iter_warns_and_says_so(name):
    from sklearn.exceptions import ConvergenceWarning
    X = _counts()
    make = _convergence_estimators()[name]
    with pytest.warns(ConvergenceWarning, match=r"stopped at max_iter=2 .*tol="):
        est = make(max_iter=2, tol=1e-300).fit(X)
    assert est.converged_ is False and est.stop_reason_ == "max_iter"
    assert est.n_iter_ >= 2
    # tol=0: a fixed number of iterations asked for on purpose, which does not warn
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = make(max_iter=2, tol=0.0).fit(X)
    assert est.converged_ is False and est.stop_reason_ == "max_iter"
    # run to its own criterion: no warning, converged_
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = make(max_iter=1000).fit(X)
    assert est.converged_ is True and est.stop_reason_ not in ("max_iter", "max_time")
    assert est.n_iter_ < 1000 or name == "GCP-lbfgsb"


@pytest.mark.parametrize("cls, solver", _every_solver(),
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_solver_warns_at_max_iter(cls, solver, device):
    """ConvergenceWarning from every solver that stops at max_iter short of its tolerance."""
    from sklearn.exceptions import ConvergenceWarning
    kw = dict(rank=2, random_state=0, max_iter=2, tol=1e-300, device=device)
    if solver is not None:
        kw["solver"] = solver
    if cls.__name__ == "GCP":
        kw.update(loss="poisson", epoch_iters=5)
    with pytest.warns(ConvergenceWarning, match=r"stopped at max_iter=2 .*tol="):
        est = cls(**kw).fit(_counts())
    assert est.converged_ is False and est.stop_reason_ == "max_iter"


@pytest.mark.parametrize("name", list(_convergence_estimators()))
def test_max_time_stops_every_estimator(name, device):
    from sklearn.exceptions import ConvergenceWarning
    X = _counts()
    make = _convergence_estimators()[name]
    with pytest.warns(ConvergenceWarning, match="stopped at max_time=1e-09s after"):
        est = make(max_iter=1000, tol=0.0, max_time=1e-9, device=device).fit(X)
    assert est.stop_reason_ == "max_time" and not est.converged_
    assert est.n_iter_ <= 2


def test_lbfgsb_n_iter_counts_the_iterations_of_the_fit():
    """GCP's L-BFGS-B stops at max_iter (no second solve after it); the loss history has one
    entry per iteration."""
    from sktensor_fast import GCP
    X = _counts()
    est = GCP(rank=2, loss="poisson", solver="lbfgsb", random_state=0, max_iter=3).fit(X)
    assert est.n_iter_ == 3
    assert est.n_iter_ == len(est.loss_history_) - 1
