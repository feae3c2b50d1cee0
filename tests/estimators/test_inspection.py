"""describe_components, feature names and pandas output of the estimators."""
import numpy as np
import pytest

from sktensor_fast import CPALS, CPAPR, GCP, KruskalTensor, describe_components
from sktensor_fast.datasets import load_flights_routes


def test_describe_components_labels_legend_and_uniform_modes():
    data = load_flights_routes()
    est = CPAPR(rank=3, solver="pdnr", random_state=0, max_iter=50).fit(data.tensor)
    text = describe_components(est, top=3)
    assert text.startswith("How to read this")
    assert "share" in text.split("Component 1")[0]             # the legend says what numbers are
    assert text.count("Component ") == 3
    assert "weekday: near-uniform" in text                     # ≈ 1/7 every day
    assert "origin:" in text and any(a in text for a in ("EWR", "JFK", "LGA"))
    # the shares printed are the factor column's: CPAPR's columns sum to 1
    first = est.factors_[0][:, 0]
    assert f"{first.max():.3f}" in text.split("Component 2")[0]
    bare = describe_components((est.weights_, est.factors_), legend=False, top=1)
    assert "How to read" not in bare and "mode 0:" in bare and "EWR" not in bare


def test_describe_components_signs_and_errors():
    K = KruskalTensor([3.0], [np.array([[1.0], [-3.0]]), np.array([[1.0], [1.0], [8.0]])])
    text = describe_components(K, legend=False)
    assert "2 -0.750" in text and "3 0.800" in text
    with pytest.raises(ValueError, match="top"):
        describe_components(K, top=0)
    with pytest.raises(ValueError, match=r"labels has 1 entries but the model has 2 modes"):
        describe_components(K, labels=[["a", "b"]])
    # a mode's names must name every index (they were mixed with the indices before), and a
    # string is not a list of names
    with pytest.raises(ValueError, match=r"labels\[1\] has 2 names but mode 1 has length 3"):
        describe_components(K, labels=[["a", "b"], ["x", "y"]])
    with pytest.raises(TypeError, match="labels must be a list"):
        describe_components(K, labels="ab")
    with pytest.raises(TypeError, match=r"labels\[0\] must be a list of names"):
        describe_components(K, labels=["ab", None])
    with pytest.raises(ValueError, match="one entry per mode"):
        describe_components(K, mode_names=["a"])
    assert "  mode 1: z 0.800" in describe_components(K, labels=[None, ["x", "y", "z"]],
                                                      legend=False)
    with pytest.raises(TypeError, match="fitted"):
        describe_components("model")


@pytest.mark.parametrize("cls", [CPALS, CPAPR, GCP])
def test_feature_names_and_pandas_output(cls):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    X = rng.poisson(2.0, (6, 5, 4)).astype(float)
    kw = {"solver": "lbfgsb", "loss": "poisson"} if cls is GCP else {}
    est = cls(rank=3, random_state=0, max_iter=5, **kw).fit(X)
    name = cls.__name__.lower()
    assert list(est.get_feature_names_out()) == [f"{name}0", f"{name}1", f"{name}2"]
    est.set_output(transform="pandas")
    W = est.transform(X)
    assert isinstance(W, pd.DataFrame) and list(W.columns) == [f"{name}{r}" for r in range(3)]
    assert W.shape == (6, 3)
    F = cls(rank=2, random_state=0, max_iter=5, **kw).set_output(transform="pandas") \
        .fit_transform(X)
    assert isinstance(F, pd.DataFrame) and F.shape == (6, 2)
