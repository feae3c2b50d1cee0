"""Kernel backends and device selection.

``device`` strings accepted by every estimator:

- ``"cpu"``: the Cython/OpenMP kernels (default);
- ``"gpu"``: the first OpenCL GPU;
- ``"opencl"``: the first OpenCL device of any type (e.g. a CPU through PoCL);
- ``"opencl:P:D"``: OpenCL platform ``P``, device ``D`` (indices as in :func:`list_devices`).
"""
import re

from .base import Backend

__all__ = ["Backend", "get_backend", "parse_device", "list_devices"]

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


def get_backend(device="cpu"):
    """Return the backend object for a device string (cached per device)."""
    kind, sel = parse_device(device)
    key = (kind, sel)
    if key in _CACHE:
        return _CACHE[key]
    if kind == "cpu":
        from .cpu.backend import CpuBackend
        backend = CpuBackend()
    else:
        from .opencl.backend import OpenCLBackend
        backend = OpenCLBackend(sel)
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
                from .opencl.backend import probe_device
                error = probe_device(dev)
            out.append({"device": f"opencl:{p}:{d}", "platform": plat.name, "name": dev.name,
                        "type": cl.device_type.to_string(dev.type),
                        "fp64": bool(dev.double_fp_config),
                        "global_mem_bytes": int(dev.global_mem_size),
                        "usable": (error is None) if check else None, "error": error})
    return out
