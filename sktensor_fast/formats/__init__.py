"""Storage formats built from a :class:`~sktensor_fast.SparseTensor` for the kernels.

A format is built once per fit and reused for every mode and iteration.
"""
from .coo import CooFormat, partition_pointers

__all__ = ["CooFormat", "partition_pointers", "FORMATS", "build_format"]

#: Values accepted by the ``format`` parameter of the estimators.
FORMATS = ("auto", "coo")


def build_format(X, format="auto"):
    """Build the storage format named ``format`` for the validated tensor ``X``."""
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    return CooFormat(X)
