"""A model larger than the host's memory is a MemoryError before any of it is made, not a
process ended by the system."""
import numpy as np
import pytest

from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor
from sktensor_fast import _memory


def _huge():
    # three modes of 2**21 rows: 32 MiB a factor matrix at rank 2, 96 MiB a set.  The memory
    # the tests report available is made smaller than that, so that a missing check fails
    # them by fitting instead of exhausting the machine
    n = 2 ** 21
    return SparseTensor(np.array([[0, 0, 0], [n - 1, n - 1, n - 1]]), np.array([1.0, 2.0]),
                        (n, n, n))


@pytest.mark.parametrize("est", [CPALS(rank=2), CPAPR(rank=2), GCP(rank=2, max_iter=2)])
def test_model_larger_than_memory_is_a_memory_error(est, monkeypatch):
    monkeypatch.setattr(_memory, "available_bytes", lambda: 2 ** 26)
    with pytest.raises(MemoryError, match=r"needs at least 0\.2 GiB of host memory: 2 sets "
                                          r"of factor matrices of rank 2 for modes of 2097152, "
                                          r"2097152, 2097152 rows .* but 0\.1 GiB"):
        est.fit(_huge())
    with pytest.raises(MemoryError, match="Lower the rank"):
        est.partial_fit(_huge()) if hasattr(est, "partial_fit") else est.fit(_huge())


def test_model_that_fits_is_not_refused(monkeypatch):
    rng = np.random.default_rng(0)
    subs = np.unique(rng.integers(0, 20, (200, 3)), axis=0)
    X = SparseTensor(subs, np.ones(subs.shape[0]), (20, 20, 20))
    need = 2 * 60 * 3 * 8                    # two sets of 60 rows at rank 3
    monkeypatch.setattr(_memory, "available_bytes", lambda: need)
    CPALS(rank=3, max_iter=2).fit(X)
    monkeypatch.setattr(_memory, "available_bytes", lambda: need - 1)
    with pytest.raises(MemoryError):
        CPALS(rank=3, max_iter=2).fit(X)
    monkeypatch.setattr(_memory, "available_bytes", lambda: None)   # unknown: not checked
    CPALS(rank=3, max_iter=2).fit(X)


def test_available_bytes_reads_the_system(tmp_path, monkeypatch):
    got = _memory.available_bytes()
    assert got is None or got > 0
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:  100 kB\nMemAvailable:  40 kB\nSwapFree:  2 kB\n")
    real_open = open

    def fake_open(path, *a, **k):
        if path == "/proc/meminfo":
            return real_open(info, *a, **k)
        raise OSError("no cgroup here")
    monkeypatch.setattr("builtins.open", fake_open)
    assert _memory.available_bytes() == 42 * 1024


def test_cgroup_limit_counts_anonymous_memory_only(tmp_path, monkeypatch):
    """Under a cgroup limit the room is the limit less the anonymous memory in use (its page
    cache is given back on demand), or less all it uses without memory.stat; no limit, no
    bound."""
    files = {"/sys/fs/cgroup/memory.max": "1000\n", "/sys/fs/cgroup/memory.current": "900\n",
             "/sys/fs/cgroup/memory.stat": "file 700\nanon 200\nkernel 10\n"}
    real_open = open

    def fake_open(path, *a, **k):
        if path in files:
            f = tmp_path / path.replace("/", "_")
            f.write_text(files[path])
            return real_open(f, *a, **k)
        raise OSError("not here")
    monkeypatch.setattr("builtins.open", fake_open)
    assert _memory.available_bytes() == 800
    del files["/sys/fs/cgroup/memory.stat"]
    assert _memory.available_bytes() == 100
    files["/sys/fs/cgroup/memory.max"] = "max\n"
    assert _memory.available_bytes() is None
