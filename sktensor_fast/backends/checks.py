"""Checks of the kernel interface's arguments, shared by its groups of primitives.

The public methods of :class:`~.base.Backend`, :class:`~.apr_kernels.AprKernels` and
:class:`~.gcp_kernels.GcpKernels` check their arguments with these, once for every backend,
before any compiled code runs; a bad argument is a TypeError or ValueError naming it.
"""
import math

import numpy as np

__all__ = ["check_bool", "check_factors", "check_real", "check_same_shape"]


def check_factors(T, factors, mode=None, B=None, out=None, weights=None):
    """Shapes of the kernels' dense arguments, checked before any compiled code runs.

    Every factor k must be (I_k x R) with one R; ``B`` and ``out`` (I_mode x R); ``weights``
    of length R.  Returns R.  Raises ValueError naming the argument otherwise.
    """
    if len(factors) != T.ndim:
        raise ValueError(f"{len(factors)} factor matrices given for a tensor with {T.ndim} "
                         f"modes")
    shapes = [tuple(f.shape) if hasattr(f, "shape") else np.shape(f) for f in factors]
    if any(len(s) != 2 for s in shapes):
        raise ValueError(f"factor matrices must be 2-D, got shapes {shapes}")
    R = shapes[0][1]
    for k, s in enumerate(shapes):
        if s[1] != R:
            raise ValueError(f"factor {k} has {s[1]} columns, factor 0 has {R}")
        if s[0] != T.shape[k] and k != mode:
            raise ValueError(f"factor {k} has {s[0]} rows but mode {k} of the tensor has "
                             f"length {T.shape[k]}")
    if mode is not None and not 0 <= mode < T.ndim:
        raise ValueError(f"mode {mode} is out of range for a tensor with {T.ndim} modes")
    for name, a in (("B", B), ("out", out)):
        if a is not None and tuple(a.shape) != (T.shape[mode], R):
            raise ValueError(f"{name} has shape {tuple(a.shape)}, expected "
                             f"({T.shape[mode]}, {R})")
    if weights is not None and np.shape(weights) != (R,):
        raise ValueError(f"weights have shape {np.shape(weights)}, expected ({R},)")
    return R


def check_same_shape(A, Phi, a="A", b="Phi"):
    """``A`` and ``Phi`` are arrays (NumPy or device) of one shape; TypeError / ValueError
    naming them (``a``, ``b``) otherwise."""
    for name, x in ((a, A), (b, Phi)):
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            raise TypeError(f"{name} must be a NumPy or device array, got {type(x).__name__}")
    if tuple(Phi.shape) != tuple(A.shape):
        raise ValueError(f"{b} has shape {tuple(Phi.shape)}, {a} has {tuple(A.shape)}")


def check_bool(value, name):
    """``value`` as a bool: True or False (NumPy's too), not another truthy object (a string
    such as ``"no"`` is true).  Raises TypeError naming ``name`` otherwise."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_real(value, name, lo=None, strict=False):
    """``value`` as a float: a real number (not a bool, not NaN), at least ``lo`` (above it
    when ``strict``).  Raises ValueError naming ``name`` otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)) \
            or math.isnan(float(value)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if lo is not None and (value <= lo if strict else value < lo):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {lo:g}, got {value!r}")
    return value
