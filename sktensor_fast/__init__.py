"""sktensor_fast: fast sparse tensor decompositions with scikit-learn estimators.

Data: :class:`SparseTensor` (COO), :class:`KruskalTensor`, FROSTT I/O (:func:`load_tns`,
:func:`save_tns`; the binary container :func:`save_tensor` / :func:`load_tensor`).  Estimators: :class:`CPALS`, :class:`CPAPR`, :class:`GCP`.  Kernels run on
the CPU (Cython/OpenMP) or on OpenCL devices, chosen by each estimator's ``device`` parameter.
"""
__version__ = "0.1.0"

from .tensor import SparseTensor
from .kruskal import KruskalTensor
from .io import load_tns, save_tns
from .binary import load_tensor, save_tensor
from .decomposition import CPALS, CPAPR, GCP
from .backends import list_devices
from .backends.cpu import get_num_threads, set_num_threads, num_threads
from ._config import show_config, get_config

__all__ = [
    "SparseTensor", "KruskalTensor", "load_tns", "save_tns", "load_tensor", "save_tensor", "CPALS", "CPAPR", "GCP",
    "list_devices", "show_config", "get_config", "get_num_threads", "set_num_threads",
    "num_threads", "__version__",
]
