"""CPALS: recovery, agreement with pyttb, input handling."""
import numpy as np
import pytest

from sktensor_fast import CPALS, KruskalTensor, SparseTensor, num_threads

from _reference import fits_to_compare, random_sparse


def planted(shape, rank, rng):
    return KruskalTensor(rng.uniform(1, 2, rank), [rng.random((s, rank)) for s in shape])


def test_recovers_planted_rank5_model():
    rng = np.random.default_rng(0)
    truth = planted((20, 18, 16), 5, rng)
    X = SparseTensor.from_dense(truth.full())
    best = CPALS(rank=5, max_iter=1000, tol=1e-12, n_init=3, random_state=0).fit(X)
    fms, _ = best.model_.score(truth)
    assert best.fit_ > 0.999
    assert fms >= 0.99


def test_same_answer_as_pyttb_cp_als():
    ttb = pytest.importorskip("pyttb")
    rng = np.random.default_rng(1)
    X = random_sparse((15, 12, 10), 600, rng)
    init = [rng.random((s, 4)) for s in X.shape]
    iters = 12
    ref, _, out = ttb.cp_als(X.to_pyttb(), 4, maxiters=iters, stoptol=0.0,
                             init=ttb.ktensor([f.copy() for f in init]), printitn=0)
    model = CPALS(rank=4, max_iter=iters, tol=0.0, init=[f.copy() for f in init]).fit(X)
    assert model.n_iter_ == iters
    assert model.fit_ == pytest.approx(out["fit"], rel=1e-8)
    ours = model.model_
    theirs = KruskalTensor.from_pyttb(ref)
    np.testing.assert_allclose(ours.full(), theirs.full(), rtol=1e-7, atol=1e-9)


def test_fit_is_computed_without_dense_tensor_and_is_correct():
    rng = np.random.default_rng(2)
    X = random_sparse((10, 9, 8), 300, rng)
    m = CPALS(rank=3, max_iter=20, random_state=0).fit(X)
    resid = np.linalg.norm(X.to_dense() - m.model_.full())
    assert m.fit_ == pytest.approx(1 - resid / X.norm(), rel=1e-9)
    assert len(m.loss_history_) == m.n_iter_


def test_same_model_with_one_and_two_threads():
    rng = np.random.default_rng(3)
    X = random_sparse((200, 150, 100), 30000, rng)
    models = []
    for t in (1, 2):
        with num_threads(t):
            models.append(CPALS(rank=6, max_iter=15, tol=0, random_state=5).fit(X))
    for a, b in zip(models[0].factors_, models[1].factors_):
        np.testing.assert_array_equal(a, b)


def test_float32_input_runs_in_float32():
    rng = np.random.default_rng(4)
    X = random_sparse((20, 15, 10), 800, rng, dtype=np.float32)
    m = CPALS(rank=3, max_iter=30, random_state=0).fit(X)
    m64 = CPALS(rank=3, max_iter=30, random_state=0).fit(X.astype(np.float64))
    assert abs(m.fit_ - m64.fit_) < 1e-3


@pytest.mark.parametrize("init", ["random", "nvecs"])
def test_inits(init):
    rng = np.random.default_rng(5)
    truth = planted((12, 10, 8), 3, rng)
    m = CPALS(rank=3, init=init, max_iter=300, tol=1e-10, random_state=0).fit(truth.full())
    assert m.fit_ > 0.99


def test_init_kruskal_and_list_equivalent():
    rng = np.random.default_rng(6)
    X = random_sparse((10, 8, 6), 200, rng)
    f = [rng.random((s, 2)) for s in X.shape]
    a = CPALS(rank=2, init=f, max_iter=5, tol=0).fit(X)
    b = CPALS(rank=2, init=KruskalTensor(np.ones(2), f), max_iter=5, tol=0).fit(X)
    np.testing.assert_allclose(a.weights_, b.weights_)


def test_n_init_keeps_best():
    rng = np.random.default_rng(7)
    X = random_sparse((15, 12, 10), 500, rng)
    fits = [CPALS(rank=4, max_iter=10, random_state=s).fit(X).fit_ for s in range(3)]
    best = CPALS(rank=4, max_iter=10, n_init=3, random_state=0).fit(X)
    assert best.fit_ >= min(fits) - 1e-12


def test_transform_and_score():
    rng = np.random.default_rng(8)
    truth = planted((30, 10, 8), 3, rng)
    dense = truth.full()
    m = CPALS(rank=3, max_iter=500, tol=1e-12, random_state=0).fit(dense[:20])
    W = m.transform(dense[20:])
    assert W.shape == (10, 3)
    # the refit explains the new slices
    assert m.score(dense[20:]) > 0.999
    recon = m.inverse_transform(W).full()
    np.testing.assert_allclose(recon, dense[20:], atol=1e-5 * np.abs(dense).max())
    np.testing.assert_allclose(m.fit_transform(dense[:20]), m.transform(dense[:20]), rtol=1e-4,
                               atol=1e-6)


def test_five_way_and_two_way(device):
    rng = np.random.default_rng(9)
    X5 = random_sparse((5, 4, 6, 3, 4), 200, rng)
    m = CPALS(rank=2, max_iter=10, random_state=0, device=device).fit(X5)
    assert len(m.factors_) == 5
    X2 = rng.standard_normal((20, 6))
    m2 = CPALS(rank=2, max_iter=200, tol=1e-10, random_state=0, device=device).fit(X2)
    # a rank-2 CP of a matrix is its best rank-2 approximation
    s = np.linalg.svd(X2, compute_uv=False)
    best = 1 - np.sqrt(np.sum(s[2:] ** 2)) / np.linalg.norm(X2)
    assert m2.fit_ == pytest.approx(best, abs=1e-4)


@pytest.mark.parametrize("bad, match", [
    ({"rank": 0}, "rank"),
    ({"rank": 2.5}, "rank"),
    ({"rank": "3"}, "rank"),
    ({"max_iter": 0}, "max_iter"),
    ({"tol": -1.0}, "tol"),
    ({"device": "tpu"}, "device"),
    ({"init": "svd"}, "init"),
    ({"format": "csf"}, "format"),
])
def test_bad_parameters(bad, match):
    X = np.random.default_rng(0).random((4, 3, 2))
    with pytest.raises(ValueError, match=match):
        CPALS(**bad).fit(X)


def test_bad_inputs():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="at least 2 modes"):
        CPALS().fit(np.ones(5))
    with pytest.raises(ValueError, match="NaN"):
        CPALS().fit(np.array([[1.0, np.nan], [1.0, 2.0]]))
    with pytest.raises(ValueError, match="inf"):
        CPALS().fit(np.array([[[1.0, np.inf]], [[1.0, 2.0]]]))
    with pytest.raises(ValueError, match="nnz = 0"):
        CPALS().fit(np.zeros((3, 3, 3)))
    m = CPALS(rank=2, max_iter=5, random_state=0).fit(rng.random((6, 4, 3)))
    with pytest.raises(ValueError, match="modes 1 and up"):
        m.transform(rng.random((6, 4, 2)))
    with pytest.raises(ValueError, match="modes 1 and up"):
        m.transform(rng.random((6, 4, 3, 1)))
    with pytest.raises(ValueError, match="factor 1 has shape"):
        CPALS(rank=2, init=[np.ones((6, 2)), np.ones((5, 2)), np.ones((3, 2))]).fit(
            rng.random((6, 4, 3)))
    with pytest.raises(ValueError, match="dense tensor"):
        SparseTensor([[0, 0, 0]], [1.0], (10**5, 10**5, 10**5)).to_dense()


@pytest.mark.parametrize("scale", [1e300, 1e-300, 2.0 ** 300, 1e200])
def test_data_near_the_limits_of_float64_fit_as_unscaled(scale):
    """‖X‖² of data near 1e±300 over/underflows: such data are fitted after an exact
    power-of-two scaling, with the same fit and the weights scaled back."""
    rng = np.random.default_rng(0)
    X = random_sparse((10, 8, 6), 150, rng)
    ref = CPALS(rank=3, random_state=0, tol=1e-8).fit(X)
    Xs = SparseTensor(X.subs, X.vals * scale, X.shape)
    m = CPALS(rank=3, random_state=0, tol=1e-8).fit(Xs)
    assert m.fit_ == pytest.approx(ref.fit_, rel=1e-9)
    assert m.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(m.weights_ / scale, ref.weights_, rtol=1e-8)
    np.testing.assert_allclose(m.loss_history_, ref.loss_history_, rtol=1e-8, atol=1e-12)
    with np.errstate(over="ignore"):
        assert m.score(Xs) == pytest.approx(ref.score(X), rel=1e-9)
        np.testing.assert_allclose(m.transform(Xs) / scale, ref.transform(X), rtol=1e-7)


def test_data_at_the_top_of_float64_fit_and_score():
    """Magnitudes of 2^1023 and more are scaled by 2^1023, the largest power of two a float
    holds (2^1024 would overflow)."""
    import sys
    import warnings
    from sktensor_fast.decomposition.cp_als import _data_scale
    top = sys.float_info.max
    assert _data_scale(np.array([top])) == 2.0 ** 1023
    assert _data_scale(np.array([1e308])) == 2.0 ** 1023
    assert _data_scale(np.array([2.0 ** 1022])) == 2.0 ** 1023
    X = SparseTensor([[0, 0], [1, 1]], [1.0, 1e308])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        m = CPALS(rank=1, random_state=0).fit(X)
        np.testing.assert_array_equal(m.weights_, [1e308])
        np.testing.assert_array_equal(np.abs(m.factors_[0][:, 0]), [0.0, 1.0])
        assert m.fit_ == pytest.approx(1.0) and m.score(X) == pytest.approx(1.0)
        np.testing.assert_allclose(m.transform(X), [[0.0], [1e308]])
    Y = SparseTensor([[0, 0], [1, 1]], [-top, top])
    assert CPALS(rank=1, random_state=0).fit(Y).weights_[0] == pytest.approx(top)


def test_weights_past_the_float64_range_are_refused():
    # two diagonal entries of 1e308 with rank 2: components whose weights pass 1.8e308
    X = SparseTensor([[0, 0], [1, 1]], [1e308, 1e308])
    m = CPALS(rank=2, random_state=0)
    with pytest.raises(ValueError, match="exceed the largest float64"):
        m.fit(X)
    assert not hasattr(m, "weights_") and not hasattr(m, "factors_")


def test_same_model_on_every_device(device):
    rng = np.random.default_rng(3)
    X = random_sparse((40, 30, 20), 5000, rng)
    init = [rng.random((s, 4)) for s in X.shape]
    a, b = fits_to_compare(lambda **kw: CPALS(rank=4, max_iter=15, tol=0,
                                              init=[f.copy() for f in init], **kw), X, device)
    assert b.fit_ == pytest.approx(a.fit_, rel=1e-9)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fb, fa, rtol=1e-9, atol=1e-9 * np.abs(fa).max())
    np.testing.assert_allclose(b.transform(X[:5]), a.transform(X[:5]), rtol=1e-8, atol=1e-10)
    assert b.score(X) == pytest.approx(a.score(X), rel=1e-9)


@pytest.mark.parametrize("shape", [(30, 20), (12, 10, 8, 6)])
def test_same_iterations_and_history_on_every_device(device, shape):
    """Where the device overlaps the next MTTKRP with the wait for an update (the columns of
    the new factor scaled afterwards, the MTTKRP corrected), the fit still follows the host's
    iterations: the same fits at every iteration, the same stop by ``tol`` (a MTTKRP enqueued
    ahead of the test is dropped), and by ``max_iter``."""
    rng = np.random.default_rng(5)
    X = random_sparse(shape, 400 if len(shape) == 2 else 2000, rng)
    init = [rng.random((s, 3)) for s in X.shape]
    for kw in (dict(max_iter=200, tol=1e-7), dict(max_iter=7, tol=0)):
        a, b = fits_to_compare(lambda **k: CPALS(rank=3, init=[f.copy() for f in init],
                                                 **kw, **k), X, device)
        assert b.stop_reason_ == a.stop_reason_ and b.n_iter_ == a.n_iter_
        np.testing.assert_allclose(b.loss_history_, a.loss_history_, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(b.weights_, a.weights_, rtol=1e-8)
        for fa, fb in zip(a.factors_, b.factors_):
            np.testing.assert_allclose(fb, fa, rtol=1e-8, atol=1e-8 * np.abs(fa).max())


def test_random_start_is_the_random_states_uniform_numbers():
    """init='random' starts from the numbers of ``RandomState(seed).uniform(size=...)`` for
    each factor in mode order (as before the draw skipped uniform's extra pass): the same
    models from the same seeds across versions."""
    from sklearn.utils import check_random_state
    from sktensor_fast.decomposition._init import initialize_factors
    X = random_sparse((13, 7, 5), 60, np.random.default_rng(0))
    got = initialize_factors("random", X, 3, check_random_state(11))
    rs = check_random_state(11)
    for f, s in zip(got, X.shape):
        np.testing.assert_array_equal(f, rs.uniform(size=(s, 3)))
        assert f.flags.c_contiguous and f.dtype == np.float64
