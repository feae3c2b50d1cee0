# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""The shared numerics of ``sktensor_fast/include`` for Python callers.

The losses of GCP (``sktf_losses.h``) and its counter-based generator (``sktf_rng.h``) are
written once, in C headers that the CPU kernels include and the OpenCL programs get pasted in.
This module evaluates the same functions on NumPy arrays, so that
:mod:`sktensor_fast.decomposition.losses`, the OpenCL backend's host side and the distributed
sampler use them too instead of a copy of the formulas.
"""
from cython.parallel cimport prange
from libc.stdint cimport int64_t, uint64_t

import numpy as np

cdef extern from "sktf_losses.h":
    double sktf_loss_value(int code, double p, double x, double m) noexcept nogil
    double sktf_loss_deriv(int code, double p, double x, double m) noexcept nogil
    int SKTF_N_LOSSES
    double SKTF_LOSS_EPS

#: Number of loss codes of the header (codes are 0 .. N_LOSSES - 1).
N_LOSSES = SKTF_N_LOSSES
#: The header's guard inside logarithms and denominators.
LOSS_EPS = SKTF_LOSS_EPS

# below this many entries the loss loops run on one thread
DEF SERIAL_N = 65536


def loss_eval(int code, double param, const double[::1] x, const double[::1] m,
              double[::1] out, bint deriv, int num_threads=1):
    """``out[i] = f(x[i], m[i])`` (or ``∂f/∂m`` with ``deriv``) for loss ``code``.

    Element-wise, so the result does not depend on ``num_threads``.  Trusts its inputs (the
    caller checks the code and the lengths).
    """
    cdef Py_ssize_t i, n = x.shape[0]
    if n < SERIAL_N:
        num_threads = 1
    with nogil:
        if deriv:
            for i in prange(n, schedule='static', num_threads=num_threads):
                out[i] = sktf_loss_deriv(code, param, x[i], m[i])
        else:
            for i in prange(n, schedule='static', num_threads=num_threads):
                out[i] = sktf_loss_value(code, param, x[i], m[i])
