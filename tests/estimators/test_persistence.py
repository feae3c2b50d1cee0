"""save_model / load_model: labels, settings and fitted state survive, nothing is unpickled."""
import json
import os

import numpy as np
import pytest

from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor, load_model, save_model
from sktensor_fast.datasets import load_flights_routes

from _reference import ScaledSquares


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


# ---------------------------------------------------------------------- settings not plain
class OtherLoss(ScaledSquares):
    pass


def _small_tensor():
    rng = np.random.default_rng(0)
    return SparseTensor.from_dense(rng.poisson(1.5, (6, 5, 4)).astype(float))


def test_user_defined_loss_is_required_at_load(tmp_path):
    X = _small_tensor()
    est = GCP(rank=2, loss=ScaledSquares(3.0), solver="lbfgsb", random_state=0,
              max_iter=5).fit(X)
    path = save_model(est, tmp_path / "m.npz")
    with pytest.raises(ValueError, match=r"m\.npz.*user-defined loss ScaledSquares.*loss="):
        load_model(path)
    again = load_model(path, loss=ScaledSquares(3.0))
    assert isinstance(again.loss, ScaledSquares) and again.loss.s == 3.0
    np.testing.assert_array_equal(again.transform(X), est.transform(X))
    assert again.score(X) == est.score(X)
    with pytest.raises(ValueError, match="loss= is a OtherLoss"):
        load_model(path, loss=OtherLoss(3.0))
    with pytest.raises(ValueError, match="user-defined loss object"):
        load_model(path, loss="gaussian")
    with pytest.warns(UserWarning, match="differs from the ScaledSquares"):
        load_model(path, loss=ScaledSquares(2.0))
    # loss= for a model without a user-defined loss is a mistake
    plain = save_model(GCP(rank=2, loss="poisson", solver="lbfgsb", random_state=0,
                           max_iter=3).fit(X), tmp_path / "p.npz")
    with pytest.raises(ValueError, match=r"p\.npz was fitted with 'poisson'"):
        load_model(plain, loss=ScaledSquares())


def test_builtin_loss_object_and_mask_are_stored(tmp_path):
    from sktensor_fast.decomposition.losses import get_loss
    X = _small_tensor()
    dense = np.ones(X.shape, dtype=bool)
    dense[0, 0, :] = False
    sparse_mask = SparseTensor.from_dense(dense.astype(float))
    for mask in (dense, sparse_mask):
        est = GCP(rank=2, loss=get_loss("huber", 0.5), mask=mask, solver="lbfgsb",
                  random_state=0, max_iter=5).fit(X)
        path = save_model(est, tmp_path / "m.npz")
        again = load_model(path)
        assert again.loss.name == "huber" and again.loss.param == 0.5
        if isinstance(mask, SparseTensor):
            assert isinstance(again.mask, SparseTensor)
            np.testing.assert_array_equal(again.mask.subs, mask.subs)
        else:
            np.testing.assert_array_equal(again.mask, mask)
        np.testing.assert_array_equal(again.transform(X), est.transform(X))
        # the loaded settings refit the same model
        refit = GCP(**again.get_params()).fit(X)
        for a, b in zip(refit.factors_, est.factors_):
            np.testing.assert_array_equal(a, b)
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
    assert meta["format_version"] == 2 and meta["params_not_saved"] == []


# ---------------------------------------------------------------------- what a file may hold
def _model_file(tmp_path, name="m.npz"):
    X = SparseTensor([[0, 0, 0], [1, 1, 1], [2, 0, 1]], [2.0, 3.0, 1.0], (3, 2, 2))
    return save_model(CPALS(rank=2, random_state=0, max_iter=3).fit(X), tmp_path / name)


def _rewrite(src, dst, meta=None, arrays=None, drop=()):
    """A copy of the model file ``src`` with its JSON or arrays replaced."""
    with np.load(src, allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files if k not in drop}
    if meta is not None:
        entries["meta"] = np.array(json.dumps(meta))
    entries.update(arrays or {})
    np.savez(dst, **entries)
    return dst


def _meta(path):
    with np.load(path, allow_pickle=False) as z:
        return json.loads(str(z["meta"]))


@pytest.mark.parametrize("change, message", [
    (lambda m: [m], "JSON document is a list"),
    (lambda m: {k: v for k, v in m.items() if k != "params"}, "no 'params'"),
    (lambda m: {**m, "params": [1]}, "'params' is a list"),
    (lambda m: {**m, "format_version": "1"}, "format_version is '1'"),
    (lambda m: {**m, "format_version": 99}, "newer sktensor_fast"),
    (lambda m: {**m, "attributes": {**m["attributes"], "transform": 1}},
     "'transform' is not a fitted attribute"),
    (lambda m: {**m, "attributes": {**m["attributes"], "n_iter_": "many"}},
     "'n_iter_' is 'many'"),
    (lambda m: {**m, "attributes": {**m["attributes"], "tensor_shape_": [3, 2, 5]}},
     "n_features_in_"),
    (lambda m: {**m, "params": {**m["params"], "rank": 3}}, "factor_0"),
    (lambda m: {**m, "params": {**m["params"], "bogus": 1}}, "bogus"),
    (lambda m: {**m, "params": {**m["params"], "tol": "small"}}, "settings are not valid"),
    (lambda m: {**m, "labels": [["a"], None, None]}, "labels"),
    (lambda m: {**m, "mode_names": "abc"}, "mode_names"),
])
def test_tampered_json_is_one_value_error_naming_the_file(tmp_path, change, message):
    src = _model_file(tmp_path)
    bad = _rewrite(src, tmp_path / "bad.npz", meta=change(_meta(src)))
    with pytest.raises(ValueError, match=message) as info:
        load_model(bad)
    assert "bad.npz" in str(info.value)


@pytest.mark.parametrize("arrays, drop, message", [
    ({"factor_1": np.ones((3, 2))}, (), "factor_1.*shape"),
    ({"factor_3": np.ones((2, 2))}, (), "factor_3"),
    ({"weights": np.ones((2, 2))}, (), "weights"),
    ({"weights": np.array(["a", "b"])}, (), "weights"),
    ({"meta": np.ones(3)}, (), "meta"),
    ({"factor_0": np.full((3, 2), np.nan)}, (), "NaN"),
    ({}, ("factor_2",), "factor_2.*missing"),
])
def test_arrays_are_checked_against_the_document(tmp_path, arrays, drop, message):
    src = _model_file(tmp_path)
    bad = _rewrite(src, tmp_path / "bad.npz", arrays=arrays, drop=drop)
    with pytest.raises(ValueError, match=message):
        load_model(bad)


def test_files_that_are_not_models(tmp_path):
    import pickle
    src = _model_file(tmp_path)
    data = open(src, "rb").read()
    cases = {"objects.npz": pickle.dumps({"a": 1}), "text.npz": b"1 2 3\n",
             "empty.npz": b"", "truncated.npz": data[:len(data) // 2],
             "cut.npz": data[:-10]}
    np.save(tmp_path / "single.npy", np.ones(3))
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    for name in [*cases, "single.npy"]:
        with pytest.raises(ValueError) as info:
            load_model(tmp_path / name)
        msg = str(info.value)
        assert name in msg and "pickle" not in msg.lower(), msg
    with pytest.raises(ValueError, match="single .npy array"):
        load_model(tmp_path / "single.npy")
    with pytest.raises(ValueError, match="truncated"):
        load_model(tmp_path / "truncated.npz")
    with pytest.raises(IsADirectoryError, match="cannot read the model file"):
        load_model(tmp_path)


def test_a_flipped_bit_in_an_array_is_found(tmp_path):
    src = _model_file(tmp_path)
    data = bytearray(open(src, "rb").read())
    pos = data.index(b"factor_0.npy") + len("factor_0.npy") + 128 + 3   # in the data
    data[pos] ^= 0x10
    (tmp_path / "flipped.npz").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="flipped.npz.*damaged archive"):
        load_model(tmp_path / "flipped.npz")


def _npy_header(shape):
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<f8", "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _with_bomb(src, dst, name, shape, meta=None):
    """The model file ``src`` with the entry ``name`` replaced by a deflated .npy of
    ``shape`` whose zip directory claims the full size (only its first MiB is there)."""
    import struct
    import zipfile
    nbytes = int(np.prod(shape)) * 8
    head = _npy_header(shape)
    with np.load(src, allow_pickle=False) as z:
        keep = {k: z[k] for k in z.files if k != name}
    if meta is not None:
        keep["meta"] = np.array(json.dumps(meta))
    np.savez(dst, **keep)
    body = head + bytes(1 << 20)
    with zipfile.ZipFile(dst, "a", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(name + ".npy", body)
    data = bytearray(open(dst, "rb").read())
    total = len(head) + nbytes
    assert total < 2 ** 32
    fname = (name + ".npy").encode()
    # patch the uncompressed size in the entry's local header and central directory record
    lh = data.rfind(b"PK\x03\x04", 0, data.index(fname))
    struct.pack_into("<I", data, lh + 22, total)
    cd = data.rfind(b"PK\x01\x02", 0, data.rindex(fname))
    struct.pack_into("<I", data, cd + 24, total)
    open(dst, "wb").write(bytes(data))
    return dst


def test_a_huge_factor_is_refused_before_it_is_read(tmp_path):
    """A few-MB file whose factor claims (250M, 2) float64 (4 GB) is refused from the .npy
    header, in little time and memory."""
    import time
    import tracemalloc
    src = _model_file(tmp_path)
    bomb = _with_bomb(src, tmp_path / "bomb.npz", "factor_0", (250_000_000, 2))
    import zipfile
    with zipfile.ZipFile(bomb) as zf:
        assert zf.getinfo("factor_0.npy").file_size > 4e9
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=r"bomb\.npz.*factor_0.*\(250000000, 2\).*\(3, 2\)"):
            load_model(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 1.0 and peak < 20e6, peak
    # the same factor with a document that agrees: refused for its compression
    meta = _meta(src)
    meta["attributes"]["tensor_shape_"] = [250_000_000, 2, 2]
    meta["attributes"]["n_features_in_"] = 4
    bomb2 = _with_bomb(src, tmp_path / "bomb2.npz", "factor_0", (250_000_000, 2), meta=meta)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"bomb2\.npz.*factor_0.*compressed"):
            load_model(bomb2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6, peak


def test_files_of_the_first_format_without_their_loss_or_mask(tmp_path):
    """Format 1 listed a loss object or a mask as not saved: the loss is required at load
    (not replaced by the default) and a dropped mask is said."""
    X = _small_tensor()
    est = GCP(rank=2, loss=ScaledSquares(3.0), solver="lbfgsb", random_state=0,
              max_iter=5).fit(X)
    src = save_model(est, tmp_path / "m.npz")
    meta = _meta(src)
    meta["format_version"] = 1
    del meta["params"]["loss"]
    meta["params_not_saved"] = ["loss", "mask"]
    meta["params"].pop("mask", None)
    old = _rewrite(src, tmp_path / "old.npz", meta=meta)
    with pytest.raises(ValueError, match=r"old\.npz.*loss object that the file does not hold"):
        load_model(old)
    with pytest.warns(UserWarning, match="mask=None"):
        again = load_model(old, loss=ScaledSquares(3.0))
    np.testing.assert_array_equal(again.transform(X), est.transform(X))


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
