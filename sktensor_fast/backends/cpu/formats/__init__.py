"""Storage formats of the CPU backend, built from a :class:`~sktensor_fast.SparseTensor` for
its compiled kernels.

A format is built once per fit and reused for every mode and iteration.  The CPU backend
(``backends/cpu/backend.py``) calls a format, a format calls the compiled kernels
(``backends/cpu/_*.pyx``); nothing here imports the backend, and nothing outside
``backends/cpu`` imports a format.
"""
from ...base import FORMATS
from .coo import CooFormat, partition_pointers
from .alto import AltoFormat, alto_support

__all__ = ["CooFormat", "AltoFormat", "partition_pointers", "FORMATS", "build_format",
           "AUTO_ALTO_MIN_NNZ"]

#: ``format="auto"`` picks ALTO from this many nonzeros on (when the index fits in 128 bits).
AUTO_ALTO_MIN_NNZ = 100_000


def build_format(X, format="auto", modes=None):
    """Build the storage format named ``format`` for the validated tensor ``X`` (COO: with the
    permutations of ``modes`` built now, all modes when None, the others when first used).

    ``"auto"`` picks ALTO when its linear index fits in 128 bits and the tensor has at least
    ``AUTO_ALTO_MIN_NNZ`` nonzeros, COO otherwise (``doc/guide/tuning.rst``, "ALTO from
    100,000 nonzeros"; see :mod:`sktensor_fast.backends.cpu.formats.alto`).  When ALTO is ruled
    out by its width, the COO object carries the reason in ``note``.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    if format == "alto":
        return AltoFormat(X)
    if format == "auto":
        ok, why = alto_support(X.shape)
        if ok and X.nnz >= AUTO_ALTO_MIN_NNZ:
            return AltoFormat(X)
        T = CooFormat(X, modes)
        if not ok:
            T.note = why + "; using COO"
        return T
    return CooFormat(X, modes)
