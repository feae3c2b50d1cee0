"""fit_callback: one call per outer iteration of every estimator's fit, none elsewhere."""
import warnings

import numpy as np
import pytest

from sktensor_fast import CPALS, CPAPR, GCP
from sktensor_fast.datasets import load_flights_routes
from sktensor_fast.decomposition import FitProgress, fit_callback


@pytest.fixture(scope="module")
def X():
    return load_flights_routes().tensor


def _fit(est, X):
    seen = []
    with fit_callback(seen.append), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X)
    return seen


@pytest.mark.parametrize("est,name,history_offset", [
    (CPALS(rank=2, max_iter=4, tol=0, random_state=0), "fit", 0),
    (CPAPR(rank=2, max_iter=4, tol=0, random_state=0), "log-likelihood", 0),
    (CPAPR(rank=2, max_iter=4, tol=0, solver="pdnr", random_state=0), "log-likelihood", 0),
    (GCP(rank=2, max_iter=4, tol=0, loss="poisson", epoch_iters=20, random_state=0),
     "estimated loss", 1),
    (GCP(rank=2, max_iter=4, tol=0, solver="lbfgsb", random_state=0), "loss", 1),
], ids=["cpals", "cpapr-mu", "cpapr-pdnr", "gcp-adam", "gcp-lbfgsb"])
def test_one_call_per_outer_iteration(X, est, name, history_offset):
    seen = _fit(est, X)
    assert all(isinstance(p, FitProgress) for p in seen)
    assert [p.iteration for p in seen] == list(range(1, 5))
    assert {p.estimator for p in seen} == {type(est).__name__}
    assert {p.objective_name for p in seen} == {name}
    assert {(p.start, p.n_init) for p in seen} == {(1, 1)}
    elapsed = [p.elapsed for p in seen]
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0
    # the objectives are those of the fit's history (GCP's starts with the initial guess; its
    # last entry is the loss after the refit of the loadings, which follows the iterations)
    hist = est.loss_history_[history_offset:history_offset + 4]
    np.testing.assert_allclose([p.objective for p in seen][:3], hist[:3], rtol=1e-12)


def test_random_starts_and_no_calls_outside_fit(X):
    est = CPALS(rank=2, max_iter=2, tol=0, n_init=3, random_state=0)
    seen = _fit(est, X)
    assert [(p.start, p.n_init, p.iteration) for p in seen] == [
        (s, 3, i) for s in (1, 2, 3) for i in (1, 2)]
    after = []
    with fit_callback(after.append):
        est.transform(X)
        est.score(X)
    gcp = GCP(rank=2, max_iter=2, epoch_iters=10, random_state=0)
    _fit(gcp, X)
    with fit_callback(after.append):
        gcp.transform(X)
    assert after == []
    # outside the block, and with None inside an outer block, nothing is called
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X)
        with fit_callback(after.append):
            with fit_callback(None):
                est.fit(X)
    assert after == []


def test_callback_errors(X):
    with pytest.raises(TypeError, match="callback must be callable"):
        with fit_callback(42):
            pass

    def stop(p):
        if p.iteration == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _fit_with(stop, CPAPR(rank=2, max_iter=50, random_state=0), X)


def _fit_with(callback, est, X):
    with fit_callback(callback), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X)
