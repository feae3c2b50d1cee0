"""save_model / load_model: labels, settings and fitted state survive, nothing is unpickled."""
import json
import os

import numpy as np
import pytest

from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor, load_model, save_model
from sktensor_fast.datasets import load_flights_routes


@pytest.mark.parametrize("make", [
    lambda: CPAPR(rank=2, solver="pqnr", random_state=0, max_iter=20, kappa=0.02),
    lambda: CPALS(rank=2, random_state=0, max_iter=20, tol=1e-6),
    lambda: GCP(rank=2, loss="poisson", random_state=0, max_iter=2, epoch_iters=50,
                n_samples_grad=(100, 50)),
])
def test_round_trip_keeps_everything(tmp_path, make):
    X = load_flights_routes().tensor
    est = make().fit(X)
    path = tmp_path / "model"                      # no extension: written exactly there
    assert save_model(est, path) == str(path) and path.exists()
    assert not any(p.name.endswith(".npz") for p in tmp_path.iterdir())
    again = load_model(path)
    assert type(again) is type(est) and again.get_params() == est.get_params()
    np.testing.assert_array_equal(again.weights_, est.weights_)
    for a, b in zip(again.factors_, est.factors_):
        np.testing.assert_array_equal(a, b)
    assert again.labels_ == X.labels and again.mode_names_ == X.mode_names
    for key in ("n_iter_", "converged_", "stop_reason_", "tensor_shape_", "n_features_in_"):
        assert getattr(again, key) == getattr(est, key)
    np.testing.assert_array_equal(again.loss_history_, est.loss_history_)
    if isinstance(est, CPAPR):
        assert again.log_likelihood_ == est.log_likelihood_
        np.testing.assert_array_equal(again.transform(X[:2]), est.transform(X[:2]))
        assert again.score(X) == est.score(X)


def test_file_is_plain_arrays_and_json(tmp_path):
    X = SparseTensor([[0, 0, 0], [1, 1, 1]], [2.0, 3.0], (2, 2, 2))
    init = [np.ones((2, 1))] * 3                   # not a plain value: listed, not stored
    est = CPAPR(1, init=init, max_iter=3).fit(X)
    path = save_model(est, tmp_path / "m.npz", labels=[["a", "b"], None, ["x", "y"]],
                      mode_names=["p", "q", "r"])
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        assert all(z[k].dtype != object for k in z.files)
    assert meta["class"] == "CPAPR" and meta["params_not_saved"] == ["init"]
    again = load_model(path)
    assert again.init == "random" and again.labels_[0] == ["a", "b"]
    assert again.mode_names_ == ["p", "q", "r"]


def test_errors(tmp_path):
    with pytest.raises(TypeError, match="not fitted"):
        save_model(CPAPR(), tmp_path / "x")
    bad = tmp_path / "other.npz"
    np.savez(bad, a=np.ones(3))
    with pytest.raises(ValueError, match="not a model saved"):
        load_model(bad)
    with pytest.raises(OSError, match="cannot read the model file"):
        load_model(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError):
        load_model(tmp_path / "junk.npz")
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_set_output_is_saved_and_restored(tmp_path):
    pytest.importorskip("pandas")
    X = load_flights_routes().tensor
    est = CPAPR(rank=2, random_state=0, max_iter=5, tol=0).fit(X).set_output(transform="pandas")
    again = load_model(save_model(est, tmp_path / "pandas.npz"))
    W = again.transform(X)
    assert list(W.columns) == list(again.get_feature_names_out()) == ["cpapr0", "cpapr1"]
    assert list(W.index) == X.labels[0] and W.index.name == X.mode_names[0]
    plain = load_model(save_model(CPAPR(rank=2, random_state=0, max_iter=5, tol=0).fit(X),
                                  tmp_path / "plain.npz"))
    assert isinstance(plain.transform(X), np.ndarray)
