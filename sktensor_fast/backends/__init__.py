"""Kernel backends and device selection.

``device`` strings accepted by every estimator:

- ``"cpu"``: the Cython/OpenMP kernels (default);
- ``"gpu"``: the first OpenCL GPU;
- ``"opencl"``: the first OpenCL device of any type (e.g. a CPU through PoCL);
- ``"opencl:P:D"``: OpenCL platform ``P``, device ``D`` (indices as in :func:`list_devices`).

OpenCL backends take their kernel settings from :class:`~.options.OpenCLOptions` (see
:mod:`.options`); the settings are part of the cache key.
"""
import re

from .base import FORMATS, Backend
from .options import OpenCLOptions, as_options, resolve_options

__all__ = ["Backend", "FORMATS", "OpenCLOptions", "get_backend", "parse_device", "list_devices"]

_DEVICE_RE = re.compile(r"^opencl:(\d+):(\d+)$")


def parse_device(device):
    """Validate a device string; returns ``("cpu", None)`` or ``("opencl", selector)``."""
    if not isinstance(device, str):
        raise TypeError(f"device must be a string such as 'cpu', 'gpu', 'opencl' or "
                        f"'opencl:0:0', got {type(device).__name__}")
    d = device.strip().lower()
    if d == "cpu":
        return "cpu", None
    if d in ("gpu", "opencl"):
        return "opencl", d
    m = _DEVICE_RE.match(d)
    if m:
        return "opencl", (int(m.group(1)), int(m.group(2)))
    raise ValueError(f"unknown device {device!r}; use 'cpu', 'gpu', 'opencl' or 'opencl:P:D' "
                     f"(platform and device indices, see sktensor_fast.list_devices())")


_CACHE = {}


def get_backend(device="cpu", options=None):
    """Return the backend object for a device string (cached per device and options).

    Parameters
    ----------
    device : str
        ``"cpu"``, ``"gpu"``, ``"opencl"`` or ``"opencl:P:D"``.
    options : dict or OpenCLOptions, optional
        Settings of the OpenCL kernels, over those of :func:`~.options.config_context` and
        the ``SKTENSOR_FAST_OCL_*`` environment variables.  They have no meaning on the CPU:
        setting one there is a ValueError.

    Returns
    -------
    Backend
    """
    kind, sel = parse_device(device)
    explicit = as_options(options, "options")
    if kind == "cpu":
        if explicit.set_options():
            raise ValueError(f"device_options {explicit.set_options()} are settings of the "
                             f"OpenCL kernels and have no meaning on device='cpu'")
        key = (kind, sel)
    else:
        key = (kind, sel, resolve_options(explicit))
    if key in _CACHE:
        return _CACHE[key]
    if kind == "cpu":
        from .cpu.backend import CpuBackend
        backend = CpuBackend()
    else:
        from .opencl.backend import OpenCLBackend
        backend = OpenCLBackend(sel, key[2])
    _CACHE[key] = backend
    return backend


def list_devices(check=True):
    """The OpenCL devices visible to PyOpenCL.

    Parameters
    ----------
    check : bool, default=True
        Build a small test program on each device (once per device and process) and report
        whether its compiler works: a device that cannot compile kernels (``usable`` False)
        is skipped by ``device="gpu"``/``"opencl"`` and refused by ``"opencl:P:D"``.

    Returns
    -------
    list of dict
        One dict per device with keys ``device`` (the string to pass as ``device=``),
        ``platform``, ``name``, ``type``, ``fp64``, ``global_mem_bytes``, ``usable`` (bool, or
        None when not checked) and ``error`` (the compiler's message when not usable, else
        None).  Empty without PyOpenCL or without any OpenCL platform.

    Examples
    --------
    >>> from sktensor_fast import list_devices
    >>> devices = list_devices()
    >>> all(d["device"].startswith("opencl:") for d in devices)
    True
    >>> usable = [d["device"] for d in devices if d["usable"]]   # e.g. ['opencl:0:0']
    """
    try:
        import pyopencl as cl
    except ImportError:
        return []
    out = []
    try:
        platforms = cl.get_platforms()
    except Exception:
        return []
    for p, plat in enumerate(platforms):
        try:
            devices = plat.get_devices()
        except Exception:
            continue
        for d, dev in enumerate(devices):
            error = None
            if check:
                from .opencl.device import probe_device
                error = probe_device(dev)
            out.append({"device": f"opencl:{p}:{d}", "platform": plat.name, "name": dev.name,
                        "type": cl.device_type.to_string(dev.type),
                        "fp64": bool(dev.double_fp_config),
                        "global_mem_bytes": int(dev.global_mem_size),
                        "usable": (error is None) if check else None, "error": error})
    return out
