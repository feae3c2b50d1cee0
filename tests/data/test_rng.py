"""The counter-based generator of GCP's samplers (sktensor_fast/include/sktf_rng.h).

The values below were produced by the generator before it moved into the shared header: they
pin the samples that fits with a given random_state draw, on every device."""
import numpy as np
import pytest

from sktensor_fast._native import _numerics
from sktensor_fast.backends.cpu import _gcp

STEP_KEYS = {(0, 0): 11385487063155714807, (42, 3): 13133053803480917400,
             (2 ** 64 - 1, 7): 10829130258298818829}


def test_step_keys_are_pinned_and_the_same_everywhere():
    for (seed, step), key in STEP_KEYS.items():
        assert _numerics.step_key(seed, step) == key
        assert int(_gcp.step_key(np.uint64(seed), np.uint64(step))) == key
    # Python ints are taken modulo 2**64, like the kernels' unsigned arithmetic
    assert _numerics.step_key(-1, 7) == STEP_KEYS[(2 ** 64 - 1, 7)]


def test_sample_words_are_pinned():
    sk = _numerics.sample_keys(STEP_KEYS[(42, 3)], np.arange(5, dtype=np.int64))
    assert sk.tolist() == [10531010325538327176, 9105700432080956566, 8271090809816613008,
                           16796629090291521295, 10485120088275351801]
    assert _numerics.rand_below(sk, 2, 1000).tolist() == [852, 570, 916, 287, 968]
    # the full 64-bit high word of r * n (no rounding through a double)
    assert _numerics.rand_below(sk, 0, 2 ** 62 + 5).tolist() == [
        3124205359573224289, 470573652422897927, 963584302658895326, 2729289054591187532,
        294883987218706551]


def test_uniform_integers_cover_the_range():
    sk = _numerics.sample_keys(123, np.arange(20000, dtype=np.int64))
    v = _numerics.rand_below(sk, 0, 7)
    assert v.min() == 0 and v.max() == 6
    counts = np.bincount(v, minlength=7)
    assert np.all(np.abs(counts - 20000 / 7) < 5 * np.sqrt(20000 / 7))
    assert np.all(_numerics.rand_below(sk, 1, 1) == 0)
    with pytest.raises(ValueError, match="n >= 1"):
        _numerics.rand_below(sk, 0, 0)
