"""fingerprint: settings compared by what they do (code, constants, closures, attributes)."""
import functools
import threading

import numpy as np
import pytest

from sktensor_fast._fingerprint import NotComparable, digest, fingerprint
from sktensor_fast.decomposition.losses import get_loss

from _reference import ScaledSquares


def closure_loss(c):
    class Loss:
        lower = 0.0

        def value(self, x, m):
            return c * (x - m) ** 2

        def deriv(self, x, m):
            return 2 * c * (m - x)
    return Loss()


def code_loss(power):
    ns = {"np": np}
    exec(f"class Loss:\n lower = 0.0\n def value(self, x, m): return abs(x - m) ** {power}\n"
         f" def deriv(self, x, m): return {power} * abs(x - m)", ns)
    return ns["Loss"]()


GLOBAL_SCALE = 2.0


def reads_a_global(x, m):
    return GLOBAL_SCALE * (x - m)


def test_equal_objects_equal_fingerprints():
    assert digest(ScaledSquares(1.0)) == digest(ScaledSquares(1.0))
    assert digest(closure_loss(3)) == digest(closure_loss(3))
    assert digest(code_loss(2)) == digest(code_loss(2))
    assert digest(get_loss("huber", 0.5)) == digest(get_loss("huber", 0.5))
    nan = float("nan")
    assert fingerprint([nan, np.float64(nan)]) == fingerprint([float("nan"), nan])


def test_what_defines_a_loss_is_seen():
    assert digest(ScaledSquares(1.0)) != digest(ScaledSquares(2.0))              # an attribute
    assert digest(closure_loss(3)) != digest(closure_loss(4))      # a closure value
    assert digest(code_loss(2)) != digest(code_loss(3))            # the code (a constant)
    assert digest(get_loss("huber", 0.5)) != digest(get_loss("huber", 0.7))
    assert digest(get_loss("poisson")) != digest(get_loss("gaussian"))
    assert digest(lambda x, m: x - m) != digest(lambda x, m: m - x)
    assert digest(functools.partial(max, 1)) != digest(functools.partial(max, 2))
    before = digest(reads_a_global)
    global GLOBAL_SCALE
    GLOBAL_SCALE = 3.0
    try:
        assert digest(reads_a_global) != before                    # a global it reads
    finally:
        GLOBAL_SCALE = 2.0
    assert digest(np.arange(3.0)) != digest(np.arange(3))


def test_objects_that_cannot_be_described_are_refused():
    with pytest.raises(NotComparable, match="object"):
        fingerprint(object())
    loss = ScaledSquares(1.0)
    loss.lock = threading.Lock()
    with pytest.raises(NotComparable, match="lock"):
        fingerprint(loss)


def test_cycles_and_sharing():
    a = ScaledSquares(1.0)
    a.me = a
    b = ScaledSquares(1.0)
    b.me = b
    assert fingerprint(a) == fingerprint(b)
    shared = np.ones(4)
    assert fingerprint([shared, shared]) == fingerprint([np.ones(4), np.ones(4)])
