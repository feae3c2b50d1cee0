"""Warnings point at the line of the caller, not inside the package or the standard library."""
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

import sktensor_fast
from sktensor_fast._threads import max_threads
from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor

X_FRACTIONS = SparseTensor([[0, 0, 0], [1, 1, 1], [2, 0, 1], [0, 1, 0]], [1.5, 2.0, 3.0, 1.0])


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    assert caught, "no warning"
    return caught


def _assert_here(caught, category):
    found = [w for w in caught if issubclass(w.category, category)]
    assert found, [str(w.message) for w in caught]
    for w in found:
        assert w.filename == __file__, (w.filename, w.lineno, str(w.message))


def test_thread_count_capped_points_at_the_with_statement():
    too_many = max_threads() + 1

    def block():
        with sktensor_fast.num_threads(too_many):
            pass
    _assert_here(_caught(block), RuntimeWarning)


def test_set_num_threads_capped_points_at_the_call():
    try:
        _assert_here(_caught(lambda: sktensor_fast.set_num_threads(
            max_threads() + 1)), RuntimeWarning)
    finally:
        sktensor_fast.set_num_threads(None)


@pytest.mark.parametrize("make", [lambda: CPAPR(rank=1, max_iter=1, random_state=0),
                                  lambda: CPALS(rank=1, max_iter=1, tol=1e-12, random_state=0),
                                  lambda: GCP(rank=1, loss="poisson", solver="lbfgsb",
                                              max_iter=1, random_state=0)])
def test_fit_warnings_point_at_the_fit_call(make):
    caught = _caught(lambda: make().fit(X_FRACTIONS))
    _assert_here(caught, ConvergenceWarning)
    _assert_here(caught, UserWarning)


def test_data_warnings_point_at_the_call():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"a": ["x", None, "y"], "b": ["u", "v", "v"], "n": [1.0, 2.0, 3.0]})
    _assert_here(_caught(lambda: SparseTensor.from_dataframe(df, ["a", "b"], "n")),
                 UserWarning)
    _assert_here(_caught(lambda: SparseTensor([[0, 0]], np.array([1e-300]), (1, 1),
                                              dtype=np.float32)), UserWarning)


def test_warnings_through_scikit_learn_wrappers_point_at_the_call():
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    _assert_here(_caught(lambda: CPAPR(rank=1, max_iter=1).set_output(transform="default")
                         .fit_transform(X_FRACTIONS)), ConvergenceWarning)
    _assert_here(_caught(lambda: make_pipeline(CPAPR(rank=1, max_iter=1), StandardScaler())
                         .fit(X_FRACTIONS)), ConvergenceWarning)
