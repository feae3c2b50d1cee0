"""OpenCL devices whose compiler fails: one clear error at selection, marked unusable in
list_devices() and `sktensor-fast info`, the OpenCL tests skipped with the reason; compiler
output of successful builds kept out of the warnings.

PoCL's real compiler is made to fail on every program with POCL_EXTRA_BUILD_FLAGS (extra
options PoCL appends to every build): ``-D__kernel=int`` turns each kernel declaration into a
compile error, as a PoCL whose LLVM does not know the host CPU fails every build.  These runs
happen in subprocesses, since the device probe is cached per process.
"""
import logging
import os
import re
import subprocess
import sys
import uuid
import warnings

import pytest

cl = pytest.importorskip("pyopencl")
pytestmark = pytest.mark.slow      # every test starts Python subprocesses

from _reference import ROOT  # noqa: E402 - the repository root


def _first_platform_is_pocl():
    try:
        plats = cl.get_platforms()
    except Exception:
        return False
    return bool(plats) and "Portable Computing Language" in plats[0].name


@pytest.fixture
def working_pocl():
    """PoCL as the first platform, with a compiler that works in this process: the runs below
    break it on purpose through POCL_EXTRA_BUILD_FLAGS (on a host whose compiler is already
    broken they would test nothing, so they skip there, with the reason)."""
    if not _first_platform_is_pocl():
        pytest.skip("needs PoCL as the first OpenCL platform (its POCL_EXTRA_BUILD_FLAGS "
                    "makes the compiler fail)")
    from _reference import opencl_backend_or_skip
    return opencl_backend_or_skip()


def _env(**extra):
    env = dict(os.environ)
    env.pop("PYOPENCL_COMPILER_OUTPUT", None)
    env.pop("POCL_EXTRA_BUILD_FLAGS", None)
    # no cached binaries: every program goes through the (failing) compiler
    from _reference import checkout_env
    return checkout_env(env, POCL_KERNEL_CACHE="0", PYOPENCL_NO_CACHE="1", **extra)


BROKEN = {"POCL_EXTRA_BUILD_FLAGS": "-D__kernel=int"}


def _run(code, **env):
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(**env),
                          capture_output=True, text=True, timeout=300)


def test_broken_compiler_gives_one_clear_error(working_pocl):
    code = r'''
import numpy as np
from sktensor_fast import CPALS, list_devices
from sktensor_fast.backends.opencl import DeviceUnusableError, NoDeviceError
from sktensor_fast.datasets import load_flights_routes
devs = list_devices()
assert devs and not devs[0]["usable"], devs
assert "cannot combine" in devs[0]["error"], devs[0]["error"]
X = load_flights_routes().tensor
for device in ("opencl", "opencl:0:0"):
    try:
        CPALS(rank=2, max_iter=2, device=device).fit(X)
    except DeviceUnusableError as exc:
        print("ERROR", device, str(exc).replace("\n", " "))
    else:
        raise AssertionError("no error for " + device)
try:
    CPALS(rank=2, max_iter=2, device="gpu").fit(X)
except NoDeviceError as exc:
    print("GPU", type(exc).__name__)
m = CPALS(rank=2, max_iter=5, random_state=0).fit(X)
print("CPU", m.fit_ > 0)
'''
    r = _run(code, **BROKEN)
    assert r.returncode == 0, r.stdout + r.stderr
    errors = [ln for ln in r.stdout.splitlines() if ln.startswith("ERROR")]
    assert len(errors) == 2
    dev_name = list(cl.get_platforms()[0].get_devices())[0].name.strip()
    for line in errors:
        assert dev_name in line                         # names the device
        assert "cannot combine" in line                 # quotes the compiler
        assert "device='cpu'" in line                   # says what to do
        assert "Traceback" not in line
    assert "GPU" in r.stdout and "CPU True" in r.stdout
    assert "error generated" not in r.stderr            # the compiler's own print is kept


def test_skips_for_a_broken_compiler_are_one_short_line(working_pocl):
    """Every OpenCL test skipped for a compiler that cannot build kernels gives one short
    reason, folded into one line by ``pytest -ra``."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-ra", "-n", "0", "-p",
                        "no:cacheprovider", "tests/kernels/opencl/test_opencl_cpapr.py"],
                       cwd=ROOT, env=_env(**BROKEN),
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert len(lines) == 1, r.stdout[-3000:]
    assert "OpenCL unavailable: " in lines[0] and len(lines[0]) < 300, lines[0]
    assert "cannot compile kernels" in lines[0] and "its compiler said" not in lines[0]
    assert "error generated" not in r.stdout + r.stderr


def test_info_marks_the_device_unusable(working_pocl):
    r = subprocess.run([sys.executable, "-m", "sktensor_fast", "info"], cwd=ROOT,
                       env=_env(**BROKEN), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "UNUSABLE" in r.stdout
    assert "cannot combine" in r.stdout
    # and a working compiler is not marked
    r = subprocess.run([sys.executable, "-m", "sktensor_fast", "info"], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "OpenCL" in r.stdout and "UNUSABLE" not in r.stdout


def test_opencl_tests_skip_with_the_reason(working_pocl):
    files = [f"tests/kernels/opencl/{name}.py"
             for name in ("test_opencl", "test_opencl_cpapr", "test_opencl_gcp")]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-n", "0", "-p",
                        "no:cacheprovider", *files], cwd=ROOT, env=_env(**BROKEN),
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    summary = r.stdout.strip().splitlines()[-1]            # "N passed, M skipped in ..."
    assert re.search(r"\d+ skipped", summary) and not re.search(r"\d+ (failed|error)", summary), \
        summary
    assert "OpenCL unavailable" in out and "cannot compile kernels" in out


def test_build_output_is_logged_not_warned(caplog):
    from sktensor_fast.backends.opencl.backend import build_program
    from _reference import opencl_backend_or_skip
    be = opencl_backend_or_skip()
    # a fresh source (no cached binary, whose log could be empty) with a compiler warning
    src = (f"// {uuid.uuid4().hex}\n#warning sktensor_fast test warning\n"
           "__kernel void f(__global float* a) { a[0] = 1.0f; }\n")
    with caplog.at_level(logging.DEBUG, logger="sktensor_fast.opencl"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            prog = build_program(be.ctx, src, what="a test program")
    assert cl.Kernel(prog, "f") is not None
    assert not [w for w in caught if issubclass(w.category, cl.CompilerWarning)]
    if "Portable Computing Language" in be.device.platform.name:
        assert "sktensor_fast test warning" in caplog.text


def test_build_output_is_shown_when_asked(monkeypatch):
    from sktensor_fast.backends.opencl.backend import build_program
    from _reference import opencl_backend_or_skip
    be = opencl_backend_or_skip()
    if "Portable Computing Language" not in be.device.platform.name:
        pytest.skip("the build log of '#warning' is known on PoCL only")
    monkeypatch.setenv("PYOPENCL_COMPILER_OUTPUT", "1")
    src = (f"// {uuid.uuid4().hex}\n#warning sktensor_fast test warning\n"
           "__kernel void f(__global float* a) { a[0] = 1.0f; }\n")
    with pytest.warns(cl.CompilerWarning, match="sktensor_fast test warning"):
        build_program(be.ctx, src)


def test_failed_kernel_build_names_device_and_compiler():
    from sktensor_fast.backends.opencl import KernelBuildError
    from sktensor_fast.backends.opencl.backend import build_program
    from _reference import opencl_backend_or_skip
    be = opencl_backend_or_skip()
    with pytest.raises(KernelBuildError, match="failed to build a broken test") as info:
        build_program(be.ctx, "__kernel void f(__global float* a) { a[0] = undeclared; }",
                      what="a broken test")
    assert be.device.name.strip() in str(info.value)
    assert "undeclared" in str(info.value)
    assert "device='cpu'" in str(info.value)


def test_no_compiler_warning_from_a_fit_with_compiler_output(working_pocl):
    """PoCL warns about every program of the package (a redefined macro): the fit stays free
    of CompilerWarning (the warnings are errors in the subprocess) and the text goes to the
    DEBUG log."""
    code = r'''
import logging, warnings
from sklearn.exceptions import ConvergenceWarning
warnings.simplefilter("error")
warnings.simplefilter("ignore", ConvergenceWarning)   # two iterations on purpose
logging.basicConfig(level=logging.WARNING)
logging.getLogger("sktensor_fast.opencl").setLevel(logging.DEBUG)
from sktensor_fast import CPAPR
from sktensor_fast.datasets import load_flights_routes
X = load_flights_routes().tensor
m = CPAPR(rank=2, max_iter=2, device="opencl", random_state=0).fit(X)
print("FIT", m.n_iter_)
'''
    r = _run(code, POCL_EXTRA_BUILD_FLAGS="-DIDX_T=long")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "FIT" in r.stdout
    assert "'IDX_T' macro redefined" in r.stderr           # logged at DEBUG
    assert "CompilerWarning" not in r.stderr


class _FakeDevice:
    def __init__(self, name, platform, gpu):
        self.name, self.platform, self.type = name, platform, 4 if gpu else 2


class _FakePlatform:
    def __init__(self, name, specs):
        self.name = name
        self.devices = [_FakeDevice(n, self, gpu) for n, gpu in specs]

    def get_devices(self, device_type=None):
        if device_type == cl.device_type.GPU:
            return [d for d in self.devices if d.type == 4]
        return list(self.devices)


def test_selection_skips_devices_that_cannot_compile(monkeypatch):
    """'opencl' / 'gpu' take the first device whose test program builds (with a warning naming
    the skipped ones); 'opencl:P:D' on a broken device and a host with only broken devices
    raise DeviceUnusableError with every compiler message."""
    from sktensor_fast.backends.opencl import DeviceUnusableError, device as ob
    plats = [_FakePlatform("Vendor A", [("gpu0", True), ("cpu0", False)]),
             _FakePlatform("Vendor B", [("gpu1", True)])]
    broken = {"gpu0": "error: unknown target CPU 'generic'", "cpu0": None, "gpu1": None}
    monkeypatch.setattr(cl, "get_platforms", lambda: plats)
    monkeypatch.setattr(ob, "probe_device", lambda dev: broken[dev.name])

    with pytest.warns(RuntimeWarning, match="skipped the OpenCL device.*'gpu0'.*using 'cpu0'"):
        assert ob.select_device("opencl").name == "cpu0"
    with pytest.warns(RuntimeWarning, match="using 'gpu1'"):
        assert ob.select_device("gpu").name == "gpu1"
    with pytest.raises(DeviceUnusableError, match="'gpu0' on 'Vendor A'.*unknown target CPU"):
        ob.select_device((0, 0))
    assert ob.select_device((0, 1)).name == "cpu0"

    broken.update(cpu0="BUILD_PROGRAM_FAILURE: x", gpu1="BUILD_PROGRAM_FAILURE: y")
    with pytest.raises(DeviceUnusableError) as info:
        ob.select_device("opencl")
    msg = str(info.value)
    assert "no OpenCL device can compile kernels" in msg
    assert all(n in msg for n in ("gpu0", "cpu0", "gpu1", "unknown target CPU", "device='cpu'"))
    with pytest.raises(DeviceUnusableError, match="'gpu0'.*'gpu1'"):
        ob.select_device("gpu")


def test_probe_result_is_cached(monkeypatch):
    from sktensor_fast.backends.opencl import device as ob
    from _reference import opencl_backend_or_skip
    be = opencl_backend_or_skip()
    assert ob.probe_device(be.device) is None
    calls = []
    monkeypatch.setattr(ob, "build_program", lambda *a, **k: calls.append(a))
    assert ob.probe_device(be.device) is None          # cached: no second build
    assert calls == []
