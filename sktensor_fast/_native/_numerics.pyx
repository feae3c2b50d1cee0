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
from libc.stdint cimport int64_t, uint32_t, uint64_t

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


# ---------------------------------------------------------------------------- generator
cdef extern from "sktf_rng.h":
    uint64_t sktf_mix_seed(uint64_t seed, uint64_t step) noexcept nogil
    uint64_t sktf_sample_key(uint64_t key, int64_t j) noexcept nogil
    uint64_t sktf_rand(uint64_t skey, uint64_t c) noexcept nogil
    int64_t sktf_below(uint64_t r, int64_t n) noexcept nogil


def step_key(seed, step):
    """The generator key of step ``step`` of a run seeded with ``seed`` (a Python int).

    ``seed`` and ``step`` are taken modulo 2**64, as the kernels' unsigned arithmetic does.
    """
    cdef uint64_t s = <uint64_t> (int(seed) & 0xFFFFFFFFFFFFFFFF)
    cdef uint64_t t = <uint64_t> (int(step) & 0xFFFFFFFFFFFFFFFF)
    return int(sktf_mix_seed(s, t))


def sample_keys(key, const int64_t[::1] j):
    """The generator keys of samples ``j`` (int64 array) at step key ``key`` (uint64 array)."""
    cdef uint64_t k = <uint64_t> (int(key) & 0xFFFFFFFFFFFFFFFF)
    cdef Py_ssize_t i, n = j.shape[0]
    out = np.empty(n, dtype=np.uint64)
    cdef uint64_t[::1] o = out
    with nogil:
        for i in range(n):
            o[i] = sktf_sample_key(k, j[i])
    return out


def rand_below(const uint64_t[::1] skeys, uint64_t c, int64_t n):
    """``below(rand(skeys[i], c), n)``: a uniform integer in ``[0, n)`` from the ``c``-th
    random word of each sample key (int64 array; ``n >= 1``)."""
    if n < 1:
        raise ValueError(f"rand_below needs n >= 1, got {n}")
    cdef Py_ssize_t i, m = skeys.shape[0]
    out = np.empty(m, dtype=np.int64)
    cdef int64_t[::1] o = out
    with nogil:
        for i in range(m):
            o[i] = sktf_below(sktf_rand(skeys[i], c), n)
    return out


def find_sorted(const int64_t[::1] table, const int64_t[::1] keys, int num_threads=1):
    """Positions of ``keys`` in the sorted array ``table`` of distinct values, -1 where a key
    is absent (int64 array): a binary search per key, on ``num_threads`` threads from 4,096
    keys (a search of a large table is a few cache misses, ~0.2 µs; the searches are
    independent: the result does not depend on the threads).
    The distributed sampler looks its zero samples up among a process's nonzeros with it."""
    cdef Py_ssize_t i, n = keys.shape[0], m = table.shape[0]
    cdef int64_t lo, hi, mid, k
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    if n == 0:
        return out
    if m == 0:
        out[:] = -1
        return out
    if n < 4096 or num_threads < 2:
        num_threads = 1
    for i in prange(n, nogil=True, schedule="static", num_threads=num_threads):
        k = keys[i]
        lo = 0
        hi = m
        while lo < hi:
            mid = lo + (hi - lo) // 2
            if table[mid] < k:
                lo = mid + 1
            else:
                hi = mid
        if lo < m and table[lo] == k:
            o[i] = lo
        else:
            o[i] = -1
    return out


# ---------------------------------------------------------------------------- MT19937
cdef extern from "sktf_mt19937.h":
    void sktf_mt_random_sample(uint32_t *key, int *pos, double *out, int64_t n) noexcept nogil


def mt19937_random_sample(uint32_t[::1] key, int pos, double[::1] out):
    """Fill ``out`` with the next doubles of the MT19937 state ``(key, pos)`` (NumPy's legacy
    state: 624 words and a position in ``[0, 624]``), bit for bit those of
    ``RandomState.random_sample``; ``key`` is advanced in place and the new position returned.
    """
    if key.shape[0] != 624 or not 0 <= pos <= 624:
        raise ValueError(f"an MT19937 state is 624 words and a position in [0, 624]; got "
                         f"{key.shape[0]} words and position {pos}")
    cdef int p = pos
    with nogil:
        sktf_mt_random_sample(&key[0], &p, &out[0] if out.shape[0] else NULL, out.shape[0])
    return p
