"""Plain NumPy references and random test tensors shared by the kernel tests, and the
environment of a subprocess that imports this checkout."""
import os
import re
from pathlib import Path

import numpy as np

import sktensor_fast
from sktensor_fast.tensor import SparseTensor


def random_sparse(shape, nnz, rng, skew=1.5, dtype=np.float64, counts=False):
    """A random sparse tensor with Zipf-skewed, repeated coordinates (duplicates get summed)."""
    cols = []
    for s in shape:
        if skew and s > 1:
            p = 1.0 / np.arange(1, s + 1) ** skew
            p /= p.sum()
            idx = rng.choice(s, size=nnz, p=p)
            idx = rng.permutation(s)[idx]  # the heavy rows are not always the first ones
        else:
            idx = rng.integers(0, s, size=nnz)
        cols.append(idx)
    subs = np.stack(cols, axis=1)
    if counts:
        vals = rng.poisson(2.0, size=nnz).astype(dtype) + 1
    else:
        vals = rng.standard_normal(nnz).astype(dtype)
    return SparseTensor(subs, vals, shape, dtype=dtype)


def mttkrp_ref(X, factors, mode):
    R = factors[0].shape[1]
    out = np.zeros((X.shape[mode], R))
    krp = np.repeat(X.vals.astype(np.float64)[:, None], R, axis=1)
    for k, f in enumerate(factors):
        if k != mode:
            krp = krp * f[X.subs[:, k]]
    np.add.at(out, X.subs[:, mode], krp)
    return out


def phi_ref(X, factors, mode, B, eps):
    R = factors[0].shape[1]
    pi = np.ones((X.nnz, R))
    for k, f in enumerate(factors):
        if k != mode:
            pi = pi * f[X.subs[:, k]]
    denom = np.maximum(np.sum(B[X.subs[:, mode]] * pi, axis=1), eps)
    w = X.vals / denom
    out = np.zeros((X.shape[mode], R))
    np.add.at(out, X.subs[:, mode], w[:, None] * pi)
    return out


def sampler_param_index():
    """The SKTF_GCP_* indices of the sampler's parameter array (sktf_gcp_sample.h)."""
    with open(os.path.join(os.path.dirname(sktensor_fast.__file__), "include",
                           "sktf_gcp_sample.h"), encoding="utf-8") as f:
        return {k: int(v) for k, v in re.findall(r"^#define SKTF_GCP_(\w+) (\d+)", f.read(),
                                                  re.M)}


def opencl_backend_or_skip():
    """The OpenCL backend on the first usable OpenCL device, or skip the test with the reason:
    PyOpenCL missing, no device, or no device whose compiler can build kernels (the device
    selection builds a test program on each device once per process)."""
    import pytest
    from sktensor_fast.backends import get_backend
    try:
        from sktensor_fast.backends.opencl import NoDeviceError
    except ImportError as exc:
        pytest.skip(_short_reason(exc))
    try:
        return get_backend("opencl")
    except (ImportError, NoDeviceError) as exc:
        pytest.skip(_short_reason(exc))


def _short_reason(exc, limit=160):
    """One short line for the skip of a test: the first clause of the error (the compiler's
    full message is what `sktensor-fast info` shows), the same for every test so that
    ``pytest -ra`` reports it once."""
    text = " ".join(str(exc).split())
    for cut in ("; its compiler said", ": no OpenCL device can compile", ". "):
        if cut in text:
            text = text.split(cut)[0] + (" (`sktensor-fast info` says why)"
                                         if "compile" in cut else "")
            break
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return f"OpenCL unavailable: {text}"


#: the repository root: ``import sktensor_fast`` in a subprocess finds this checkout there
ROOT = Path(__file__).resolve().parents[1]


def checkout_env(base=None, **extra):
    """``base`` (default: this process's environment) with the checkout put first on
    PYTHONPATH, ahead of whatever was there (packages that only PYTHONPATH makes visible, such
    as wheels unpacked into a folder, stay visible), and ``extra`` set."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(extra)
    return env


def fits_to_compare(make, X, device):
    """``(reference, model)``: ``make(**kw).fit(X)`` on the CPU over COO, and on ``device``
    (the ``device`` fixture): over ALTO for ``"cpu"``, over the device's own storage for the
    others.  Every device and storage must give the reference model (the agreement tests of
    the estimators, written once for every device)."""
    ref = make(device="cpu", format="coo").fit(X)
    model = make(device=device, format="alto" if device == "cpu" else "auto").fit(X)
    return ref, model


def sparse_problem(shape=(30, 20, 10), density=0.05, R=4, seed=0, dtype=np.float64):
    """A sparse count tensor of the given density (values 1 + Poisson(3)) and R-column
    factors of its shape, uniform in [0.1, 1)."""
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random(shape) < density, rng.poisson(3.0, shape) + 1.0, 0.0)
    X = SparseTensor.from_dense(dense.astype(dtype))
    U = [rng.uniform(0.1, 1.0, (s, R)) for s in shape]
    return X, U


class ScaledSquares:
    """A user-defined GCP loss, s (x - m)^2: an object with ``value`` and ``deriv`` and no
    loss code, as a user writes one."""
    lower = -np.inf

    def __init__(self, s=1.0):
        self.s = s

    def value(self, x, m):
        return self.s * (x - m) ** 2

    def deriv(self, x, m):
        return 2 * self.s * (m - x)


def device_arrays(T):
    """Every array of an OpenCL device tensor, on the host (chunk-interleaved copies at the places
    of the nonzeros: the padding is not written)."""
    out = {"subs0": T._subs0.get(), "vals0": T._vals0.get()}
    for m in range(1, T.ndim):
        out[f"order{m}"] = T.orders[m].get()
    for m in range(T.ndim):
        out[f"subs{m}_sorted"] = T.subs[m].get()
        out[f"vals{m}_sorted"] = T.vals[m].get()
    for (m, chunk), (s, v) in T.interleaved.items():
        nch = -(-T.nnz // chunk)
        k = np.arange(T.nnz)
        pos = (k % chunk) * nch + k // chunk
        out[f"interleaved{m}_subs"] = s.get()[pos]
        out[f"interleaved{m}_vals"] = v.get()[pos]
    return out
