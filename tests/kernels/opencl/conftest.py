"""Fixtures of the OpenCL kernel tests: the OpenCL backend the estimators use (skipping with the
reason where no device can build kernels) and the CPU backend they are compared against."""
import pytest

from sktensor_fast.backends import get_backend

from _reference import opencl_backend_or_skip


@pytest.fixture(scope="module")
def be():
    return opencl_backend_or_skip()


@pytest.fixture(scope="module")
def cpu():
    return get_backend("cpu")
