import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

#: ../shared/data next to the repository (real count tensors), when present
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present next to the repository")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _parallel_even_when_small(monkeypatch):
    """The kernels use fewer threads on small tensors; the tests' tensors are small, so let
    them run with every thread asked for, to exercise the parallel paths."""
    from sktensor_fast.backends.cpu import gcp_ops
    from sktensor_fast.backends.cpu.formats import coo
    monkeypatch.setattr(coo, "MIN_NNZ_PER_THREAD", 1)
    monkeypatch.setattr(gcp_ops, "MIN_SAMPLES_PER_THREAD", 1)


#: the devices estimator tests run on: the CPU, and OpenCL where a device (PoCL on a CPU in
#: CI) can build the kernels; an unavailable device skips with the reason
DEVICES = ("cpu", "opencl")


@pytest.fixture(params=DEVICES)
def device(request):
    """Each device in turn (``device=`` of the estimators)."""
    if request.param != "cpu":
        from _reference import opencl_backend_or_skip
        opencl_backend_or_skip()
    return request.param


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Every test skipped because OpenCL cannot run here is reported at one place, the
    helper that decides it (``_reference.opencl_backend_or_skip``), so that ``pytest -ra``
    folds them into one line with one short reason."""
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3 \
            and "OpenCL unavailable: " in str(rep.longrepr[2]):
        import inspect
        import _reference
        line = inspect.getsourcelines(_reference.opencl_backend_or_skip)[1]
        rep.longrepr = (inspect.getsourcefile(_reference), line, rep.longrepr[2])
