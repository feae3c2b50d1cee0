"""The Examples sections of the package's docstrings run as doctests (without a GPU: examples
that touch OpenCL work whether or not a device is there)."""
import doctest
import importlib
import pkgutil

import pytest

import sktensor_fast

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules():
    names = [sktensor_fast.__name__]
    for info in pkgutil.walk_packages(sktensor_fast.__path__, prefix="sktensor_fast."):
        if info.name.endswith("__main__"):
            continue                       # runs the command line when imported
        names.append(info.name)
    return sorted(names)


MODULES = _modules()


def test_modules_found():
    assert "sktensor_fast.tensor" in MODULES and "sktensor_fast.decomposition.gcp" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name == "sktensor_fast.plotting":
        pytest.importorskip("matplotlib")
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    tests = [t for t in finder.find(module, name, globs={}) if t.examples]
    # only the docstrings defined in this module (imported names are tested where they live)
    tests = [t for t in tests if _defined_in(t, module)]
    failures = []
    for t in tests:
        out = []
        result = runner.run(t, out=out.append, clear_globs=True)
        if result.failed:
            failures.append(f"{t.name} ({t.filename}:{t.lineno}):\n" + "".join(out))
    assert not failures, "\n".join(failures)


def _defined_in(test, module):
    return test.filename is None or test.filename == getattr(module, "__file__", None)


# The public names and their reference pages -------------------------------------------

def public_objects():
    """Every public function and class: the package's ``__all__`` and the modules the API
    reference documents besides it."""
    from sktensor_fast import datasets, inspection, io, plotting
    from sktensor_fast.backends import opencl
    from sktensor_fast import decomposition
    from sktensor_fast.decomposition import losses
    objs = {f"sktensor_fast.{n}": getattr(sktensor_fast, n) for n in sktensor_fast.__all__
            if n != "__version__"}
    for mod, names in ((datasets, datasets.__all__), (io, ["read_labels", "write_labels"]),
                       (plotting, plotting.__all__), (losses, ["get_loss"]),
                       (decomposition, ["fit_callback", "FitProgress"]),
                       (inspection, ["component_entries"]),
                       (opencl, ["NoDeviceError", "DeviceUnusableError", "KernelBuildError"])):
        for n in names:
            objs[f"{mod.__name__}.{n}"] = getattr(mod, n)
    return objs


@pytest.mark.parametrize("name", sorted(public_objects()))
def test_public_docstring_has_examples(name):
    obj = public_objects()[name]
    doc = obj.__doc__ or ""
    assert "Examples\n" in doc and ">>>" in doc, f"{name} has no Examples section"
