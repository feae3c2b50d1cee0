"""The compiled MT19937 draw of the random start: NumPy's numbers, NumPy's state after."""
import numpy as np
import pytest

from sktensor_fast._native._numerics import mt19937_random_sample
from sktensor_fast.decomposition._init import _uniform_matrices


def _compiled(rs, n):
    st = rs.get_state(legacy=False)
    key = np.array(st["state"]["key"], dtype=np.uint32)
    out = np.full(n, np.nan)
    pos = mt19937_random_sample(key, int(st["state"]["pos"]), out)
    st["state"] = {"key": key, "pos": pos}
    rs.set_state(st)
    return out


@pytest.mark.parametrize("odd", [False, True])
def test_same_doubles_and_state_as_numpy_across_regenerations(odd):
    ref, got = np.random.RandomState(7), np.random.RandomState(7)
    if odd:  # one 32-bit output drawn: every pair then straddles a regeneration
        ref.randint(0, 2 ** 31)
        got.randint(0, 2 ** 31)
    for n in (0, 1, 2, 311, 312, 313, 623, 624, 625, 1249, 5000, 3):
        np.testing.assert_array_equal(_compiled(got, n), ref.random_sample(n))
    # the generator's state is where NumPy leaves it: the next numbers of any kind agree
    assert got.random_sample() == ref.random_sample()
    assert got.randint(0, 2 ** 31) == ref.randint(0, 2 ** 31)
    np.testing.assert_array_equal(got.standard_normal(5), ref.standard_normal(5))


def test_refuses_a_state_that_is_not_mt19937s():
    with pytest.raises(ValueError, match="624 words"):
        mt19937_random_sample(np.zeros(623, np.uint32), 0, np.empty(3))
    with pytest.raises(ValueError, match="position"):
        mt19937_random_sample(np.zeros(624, np.uint32), 625, np.empty(3))


@pytest.mark.parametrize("make", [
    lambda: np.random.RandomState(11),
    lambda: np.random.RandomState(np.random.PCG64(11)),   # not MT19937: NumPy's own draw
    lambda: np.random.default_rng(11),                     # a Generator: its own draw
])
def test_uniform_matrices_are_random_sample_s(make):
    shapes = [(401, 16), (3, 5), (997, 7)]
    rng, ref = make(), make()
    got = _uniform_matrices(rng, shapes)
    draw = getattr(ref, "random_sample", None) or ref.random
    for g, s in zip(got, shapes):
        assert g.shape == s and g.dtype == np.float64
        np.testing.assert_array_equal(g, draw(size=s))
    assert (getattr(rng, "random_sample", None) or rng.random)() == draw()


def test_threads_sharing_a_randomstate_draw_different_numbers():
    """Draws from one RandomState in several threads take its lock: together they are the
    numbers of one sequence, none drawn twice."""
    import threading
    rng = np.random.RandomState(5)
    got = []
    def draw():
        for _ in range(20):
            got.append(_uniform_matrices(rng, [(700, 3)])[0])
    ts = [threading.Thread(target=draw) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ref = np.random.RandomState(5).random_sample(80 * 2100)
    allv = np.sort(np.concatenate([g.ravel() for g in got]))
    np.testing.assert_array_equal(allv, np.sort(ref))
