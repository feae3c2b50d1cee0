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
