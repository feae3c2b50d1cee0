"""Importing the package from a source tree whose compiled extensions were never built says
what is missing and how to build it, instead of failing on the first compiled module.

Each case imports a copy of the package's sources in a fresh interpreter (the copy first on
the path), without the extension files or with one of them left out.
"""
import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import sktensor_fast

PKG = Path(sktensor_fast.__file__).resolve().parent


def _is_extension(name):
    return any(name.endswith(s) for s in EXTENSION_SUFFIXES)


def _copy_sources(dest, keep_pyx=False):
    """The package's Python files (and its .pyx files with ``keep_pyx``), no extension file."""
    wanted = (".py", ".pyx") if keep_pyx else (".py",)
    for path in PKG.rglob("*"):
        if path.is_file() and path.suffix in wanted and "__pycache__" not in path.parts:
            target = dest / "sktensor_fast" / path.relative_to(PKG)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def _import(root):
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([sys.executable, "-c", "import sktensor_fast"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)


def _last_line(r):
    return r.stderr.strip().splitlines()[-1]


def test_python_sources_only(tmp_path):
    _copy_sources(tmp_path)
    r = _import(tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    last = _last_line(r)
    assert last.startswith("ImportError: sktensor_fast was imported from "
                           f"{tmp_path / 'sktensor_fast'}"), last
    assert "none of them is built" in last
    assert "python setup.py build_ext --inplace" in last and "pip install -e ." in last
    # the original error stays visible (chained, and quoted in the message)
    assert "cannot import name '_construct'" in last
    assert "The above exception was the direct cause" in r.stderr


def test_one_extension_missing_is_named(tmp_path):
    """A tree built except one module (e.g. built for another Python) names that module."""
    _copy_sources(tmp_path, keep_pyx=True)
    left_out = None
    for path in PKG.rglob("*"):
        if not _is_extension(path.name):
            continue
        rel = path.relative_to(PKG)
        if rel.parts[0] == "_native" and rel.name.startswith("_construct."):
            left_out = rel
            continue
        os.symlink(path, tmp_path / "sktensor_fast" / rel)
    if left_out is None:
        pytest.skip("the package has no compiled _native._construct next to its sources")
    r = _import(tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    last = _last_line(r)
    assert ("compiled extensions are missing: sktensor_fast._native._construct (not built "
            f"for Python {sys.version_info.major}.{sys.version_info.minor})") in last, last
    assert "build_ext --inplace" in last


def test_other_import_errors_are_raised_as_they_are():
    """In a built tree an ImportError that is not about the extensions passes through."""
    exc = ImportError("No module named 'something_else'")
    with pytest.raises(ImportError) as info:
        sktensor_fast._raise_build_error(exc)
    assert info.value is exc
