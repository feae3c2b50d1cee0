"""The kernel interface: the few primitives every algorithm is written against.

An algorithm (CP-ALS, CP-APR, GCP) never asks which device it runs on.  It receives a
:class:`Backend`, asks it to ``prepare`` the tensor once (upload it, build the storage format),
keeps its factor matrices as backend arrays, and calls the primitives below.  Only R x R
matrices, length-R vectors and scalars come back to the host as NumPy objects.

Backend arrays are whatever the backend uses (NumPy arrays on the CPU, ``pyopencl.array.Array``
on an OpenCL device).  Factor matrices are C-contiguous (I_n x R).
"""
from abc import ABC, abstractmethod

import numpy as np

__all__ = ["Backend"]


class Backend(ABC):
    """Abstract kernel backend."""

    #: short name used in ``show_config`` and error messages
    name = "abstract"

    # ------------------------------------------------------------------ data placement
    @abstractmethod
    def prepare(self, X, format="auto"):
        """Lay out a validated :class:`SparseTensor` for the kernels (once per fit)."""

    @abstractmethod
    def asarray(self, a, dtype=None):
        """Host array -> backend array (a copy when it must cross to a device)."""

    @abstractmethod
    def to_numpy(self, a):
        """Backend array -> NumPy array on the host."""

    @abstractmethod
    def zeros(self, shape, dtype):
        """A zero-filled backend array."""

    def copy(self, a):
        return a.copy()

    # ------------------------------------------------------------------ sparse kernels
    @abstractmethod
    def mttkrp(self, T, factors, mode, out=None):
        """Matricised tensor times Khatri-Rao product for ``mode``: (I_mode x R)."""

    @abstractmethod
    def phi(self, T, factors, mode, B, eps, out=None):
        """CP-APR's Φ = (X_(n) ⊘ max(B Π, eps)) Πᵀ, computed without storing Π."""

    @abstractmethod
    def model_values(self, T, weights, factors):
        """Values of the Kruskal model at the nonzeros of ``T`` (length nnz, backend array)."""

    # ------------------------------------------------------------------ small dense steps
    @abstractmethod
    def gram(self, A):
        """AᵀA as a NumPy (R x R) array."""

    @abstractmethod
    def matmul_small(self, A, M):
        """A @ M for a backend (I x R) A and a host (R x R) M; returns a backend array."""

    @abstractmethod
    def column_norms(self, A, ord=2):
        """Per-column norms (``ord`` 1, 2 or ``inf``) as a NumPy vector."""

    @abstractmethod
    def scale_columns(self, A, s):
        """A[:, r] *= s[r] in place (``s`` a host vector); returns A."""

    @abstractmethod
    def inner(self, A, B):
        """sum(A * B) over all entries, per column: a NumPy vector of length R."""

    def tensor_norm_sq(self, T):
        return T.norm_sq

    def info(self):
        """A dict describing this backend for ``show_config``."""
        return {"name": self.name}
