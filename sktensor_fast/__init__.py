"""sktensor_fast: fast sparse tensor decompositions with scikit-learn estimators.

Data: :class:`SparseTensor` (COO), :class:`KruskalTensor`, FROSTT I/O (:func:`load_tns`,
:func:`save_tns`; the binary container :func:`save_tensor` / :func:`load_tensor`).  Estimators:
:class:`CPALS`, :class:`CPAPR`, :class:`GCP`; what they found:
:func:`describe_components`; fitted models to a file and back: :func:`save_model`,
:func:`load_model`.  Kernels run on
the CPU (Cython/OpenMP) or on OpenCL devices, chosen by each estimator's ``device`` parameter.
"""
__version__ = "0.1.0"

from . import _config


def _missing_extensions():
    """The compiled modules of the package that have no extension file next to their source
    (setup.py builds one per ``.pyx`` file, plus ``_cyutility``); every one of them when the
    folder holds no extension file at all (e.g. a copy of the Python sources only)."""
    import os
    from importlib.machinery import EXTENSION_SUFFIXES
    root = os.path.dirname(os.path.abspath(__file__))
    built, sources = set(), {"_cyutility"}
    for folder, _, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        prefix = "" if rel == "." else rel.replace(os.sep, ".") + "."
        for fn in files:
            suffix = next((s for s in EXTENSION_SUFFIXES if fn.endswith(s)), None)
            if suffix:
                built.add(prefix + fn[:-len(suffix)])
            elif fn.endswith(".pyx"):
                sources.add(prefix + fn[:-4])
    return root, sorted(sources - built), bool(built)


def _raise_build_error(exc):
    """Re-raise ``exc``, the ImportError of importing the package, as one that says how to
    build the compiled extensions when they are missing (a source tree that was never built,
    or built for another Python); any other ImportError is raised as it is."""
    root, missing, any_built = _missing_extensions()
    if not missing and any_built:
        raise exc
    import sys
    names = ", ".join(f"{__name__}.{m}" for m in missing[:4]) + (
        f" and {len(missing) - 4} more" if len(missing) > 4 else "")
    what = (f"{names} (not built for Python {sys.version_info.major}."
            f"{sys.version_info.minor})" if any_built else "none of them is built")
    raise ImportError(
        f"sktensor_fast was imported from {root}, a source tree whose compiled extensions "
        f"are missing: {what}.  Build them in place with `python setup.py build_ext "
        f"--inplace` (a C compiler and Cython are needed), or install the package with "
        f"`pip install -e .` (or `pip install .`); to use an installed sktensor_fast "
        f"instead, import it from outside the source folder.  Import error: {exc}") from exc


# The OpenMP runtime reads its waiting policy once, when the compiled kernels load it: ask for
# passive waiting (threads sleep at barriers instead of spinning against the threads they wait
# for) unless the user chose a policy.  The environment is restored right after.
_config._openmp_env_enter()
try:
    # the compiled CPU kernels, and with them the OpenMP runtime, load here (they may be
    # missing: the OpenCL backend runs without them, and the CPU backend says so when asked)
    from .backends.cpu import backend as _cpu_backend  # noqa: F401
    from .tensor import SparseTensor
    from .kruskal import KruskalTensor
    from .io import load_tns, save_tns
    from .binary import load_tensor, save_tensor
    from .decomposition import CPALS, CPAPR, GCP
    from .backends import list_devices
    from .backends.options import OpenCLOptions, config_context, get_device_options
    from .backends.cpu import get_num_threads, set_num_threads, num_threads
except ImportError as _exc:
    _raise_build_error(_exc)
finally:
    _config._openmp_env_exit()
from ._config import show_config, get_config
from .inspection import describe_components
from .persistence import load_model, save_model

__all__ = [
    "SparseTensor", "KruskalTensor", "load_tns", "save_tns", "load_tensor", "save_tensor", "CPALS", "CPAPR", "GCP",
    "list_devices", "OpenCLOptions", "config_context", "get_device_options", "show_config", "get_config", "get_num_threads", "set_num_threads",
    "num_threads", "describe_components", "save_model", "load_model", "__version__",
]
