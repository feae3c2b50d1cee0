"""The wheel of this checkout carries every module, compiled extension, header, OpenCL kernel
and data file, installs into a fresh virtual environment where no compiler works, and runs the
main job (``sktensor-fast fit``) there.

The wheel is built with ``pip wheel --no-build-isolation`` from a copy of the checkout whose
``build/lib`` holds the extension modules already built in place (by ``pip install -e .`` or
``setup.py build_ext --inplace``): compiling them again would take minutes, and the editable
install has compiled them already.  In the copy the generated C and the modules are dated after
everything else, so that neither Cython nor setuptools finds anything to redo (the Cython and
NumPy headers are newer than the in-place build when the test requirements were installed after
it).  The tests skip without in-place modules, when a source of the package (``.pyx``, ``.pxd``,
header) is newer than the oldest of them (build in place again), or without the build
requirements (Cython, setuptools, wheel; the test extra installs them).

The fresh environment sees the test interpreter's NumPy, SciPy, scikit-learn and the rest of the
dependencies through a ``.pth`` file (no network); the package itself comes only from the wheel.
"""
import configparser
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow    # pip in subprocesses

from _reference import ROOT  # noqa: E402 - the repository root

PKG = ROOT / "sktensor_fast"
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
#: what a wheel is not built from, at the top of the repository: version control,
#: environments, build products, the parts of the repository outside the package
NOT_COPIED = {".git", ".venv", "build", "dist", ".pytest_cache", ".hypothesis", "doc", "tests",
              "benchmarks", "examples", "bench_out"}


def _not_copied(folder, names):
    top = Path(folder).resolve() == ROOT
    return [n for n in names if n == "__pycache__" or n.endswith(".egg-info")
            or top and n in NOT_COPIED]


def _extensions():
    """(module file relative to the repository, in-place module) of every Cython module, and
    of the shared module that holds Cython's support code for all of them (setup.py)."""
    sources = sorted(PKG.rglob("*.pyx")) + [PKG / "_cyutility.c"]
    return [(src.relative_to(ROOT).with_suffix(EXT_SUFFIX), src.with_suffix(EXT_SUFFIX))
            for src in sources]


def _clean_env(**extra):
    """The environment of a subprocess that must not see this checkout: no PYTHONPATH, no
    virtual environment of the caller, no user site-packages."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    env.update(extra)
    return env


def _run(cmd, timeout, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{cmd}\n{(r.stdout + r.stderr)[-6000:]}"
    return r


def _requires_build_tools():
    pytest.importorskip("Cython", reason="building from the checkout needs Cython")
    setuptools = pytest.importorskip("setuptools")
    if tuple(int(p) for p in setuptools.__version__.split(".")[:2]) < (70, 1):
        pytest.importorskip("wheel", reason="setuptools < 70.1 builds wheels with 'wheel'")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A copy of the checkout to build from, its ``build/lib`` holding the in-place modules."""
    _requires_build_tools()
    modules = [so for _, so in _extensions()]
    missing = [str(so.relative_to(ROOT)) for so in modules if not so.is_file()]
    if missing:
        pytest.skip(f"the extensions are not built in place ({missing[0]} is missing): "
                    f"pip install -e . or python setup.py build_ext --inplace")
    sources = [p for p in PKG.rglob("*") if p.suffix in (".pyx", ".pxd", ".h")]
    newest = max(sources, key=lambda p: p.stat().st_mtime)
    if newest.stat().st_mtime > min(so.stat().st_mtime for so in modules):
        pytest.skip(f"{newest.relative_to(ROOT)} is newer than the extensions built in place: "
                    f"build them again (python setup.py build_ext --inplace)")
    src = tmp_path_factory.mktemp("wheel") / "src"
    shutil.copytree(ROOT, src, ignore=_not_copied)
    now = time.time()
    for c in (src / "sktensor_fast").rglob("*.c"):
        os.utime(c, (now, now))
    for rel, so in _extensions():
        built = src / "build" / "lib" / rel
        built.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(so, built)
        # later than any C that Cython might still write (should a .c be missing)
        os.utime(built, (now + 86400, now + 86400))
    # the build directories are named here, whatever setuptools' default is
    cfg = configparser.ConfigParser()
    cfg.read(src / "setup.cfg")
    cfg["build"] = {"build_lib": "build/lib", "build_temp": "build/temp"}
    with open(src / "setup.cfg", "w") as f:
        cfg.write(f)
    return src


@pytest.fixture(scope="module")
def wheel(source):
    dist = source.parent / "dist"
    _run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation",
          "--no-index", "-q", "-w", str(dist)], timeout=900, cwd=source, env=_clean_env())
    wheels = list(dist.glob("sktensor_fast-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


#: a stand-in for the C compiler and linker: records its command line, writes an empty output
_FAKE_CC = """#!/bin/sh
echo "$*" >> "$FAKE_CC_LOG"
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
if [ -n "$out" ]; then mkdir -p "$(dirname "$out")" && : > "$out"; fi
exit 0
"""


def _compile_commands(source, tmp_path, **env):
    """The compiler commands of a build of every extension, through a compiler that records
    its command line and compiles nothing (setuptools' --dry-run is gone from newer versions)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    cc = tmp_path / "fake-cc"
    cc.write_text(_FAKE_CC)
    cc.chmod(0o755)
    log = tmp_path / "commands.log"
    env = _clean_env(**env)
    for var in ("CFLAGS", "CPPFLAGS", "LDFLAGS"):
        env.pop(var, None)
    env.update(CC=str(cc), LDSHARED=f"{cc} -shared", FAKE_CC_LOG=str(log),
               SKTENSOR_FAST_BUILD_JOBS="1")
    _run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
          "--build-temp", str(tmp_path / "tmp")], timeout=300, cwd=source, env=env)
    return [ln for ln in log.read_text().splitlines() if " -c " in f" {ln} " and
            any(a.endswith(".c") for a in ln.split()) and "omp_test" not in ln]


def test_default_build_is_portable(source, tmp_path):
    """The extensions are compiled for any CPU of the architecture unless the builder asks
    for its own (SKTENSOR_FAST_NATIVE=1); the release wheels' configuration does not."""
    portable = _compile_commands(source, tmp_path / "a", SKTENSOR_FAST_NATIVE="0")
    assert len(portable) == len(_extensions()), portable
    for cmd in portable:
        assert not [f for f in cmd.split() if f.startswith(("-march", "-mtune", "-mcpu"))], cmd
    native = _compile_commands(source, tmp_path / "b", SKTENSOR_FAST_NATIVE="1")
    assert len(native) == len(portable) and all("-march=native" in c.split() for c in native)
    text = (ROOT / "pyproject.toml").read_text()
    release = text[text.index("[tool.cibuildwheel]"):]
    assert "-march" not in release
    assert release.count('SKTENSOR_FAST_NATIVE = "0"') == 2   # Linux and macOS


def test_wheel_holds_the_package(wheel):
    """Every module, compiled extension, header, OpenCL kernel and data file of the source
    tree is in the wheel, with the command's entry point and the dependencies."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = z.read(meta).decode()
        entry_points = z.read(meta.replace("METADATA", "entry_points.txt")).decode()
    want = {str(rel.as_posix()) for rel, _ in _extensions()}
    for path in PKG.rglob("*"):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        rel = path.relative_to(ROOT).as_posix()
        if (path.suffix in (".py", ".h", ".cl")
                or path.parent.parent.name == "data" and "datasets" in path.parts):
            want.add(rel)
    assert {"sktensor_fast/datasets/data/flights-routes/tensor.tns.gz",
            "sktensor_fast/include/sktf_cp.h",
            "sktensor_fast/backends/opencl/kernels/cp.cl"} <= want
    missing = sorted(want - names)
    assert not missing, f"not in {wheel.name}: {missing}"
    # generated C and build leftovers stay out
    assert not [n for n in names if n.endswith((".c", ".o"))]
    assert "sktensor-fast = sktensor_fast.cli:main" in entry_points
    for dep in ("numpy", "scipy", "scikit-learn", "threadpoolctl"):
        assert f"Requires-Dist: {dep}" in metadata, dep


#: what the main job imports besides the package: its dependencies and theirs
RUNTIME = ("numpy", "scipy", "sklearn", "joblib", "threadpoolctl")


def _dependency_dirs():
    """The folders the packages of ``RUNTIME`` are imported from here."""
    dirs = []
    for name in RUNTIME:
        spec = importlib.util.find_spec(name)
        path = Path(spec.origin).resolve()
        d = str(path.parents[1] if spec.submodule_search_locations is not None else path.parent)
        if d not in dirs:
            dirs.append(d)
    return dirs


def test_wheel_runs_without_a_compiler(wheel, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120,
         env=_clean_env())
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                                              "'purelib'))"], timeout=60,
                        env=_clean_env()).stdout.strip())
    (purelib / "_dependencies.pth").write_text("\n".join(_dependency_dirs()) + "\n")
    # no compiler: an install that tried to build anything would fail
    nocc = _clean_env(CC="/bin/false", CXX="/bin/false", LDSHARED="/bin/false")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
          "--no-deps", "--only-binary", ":all:", "-q", str(wheel)], timeout=300, env=nocc)
    where = _run([str(python), "-c", "import importlib.util as u; "
                                     "print(u.find_spec('sktensor_fast').origin)"],
                 timeout=60, env=nocc, cwd=tmp_path).stdout.strip()
    assert Path(where).resolve().is_relative_to(purelib.resolve()), where
    r = _run([str(bindir / "sktensor-fast"), "fit"], timeout=300, env=nocc, cwd=tmp_path)
    out = r.stdout
    assert "flights-routes" in out and "converged" in out, out
    assert "Component 5:" in out, out
    for mode in ("origin:", "dest:", "carrier:", "hour:", "weekday:"):
        assert mode in out, mode
    assert any(a in out for a in ("JFK", "EWR", "LGA")), out
