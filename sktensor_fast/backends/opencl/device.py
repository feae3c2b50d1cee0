"""OpenCL devices: which one a ``device`` string names, and whether its compiler works.

:func:`select_device` picks the device for ``"gpu"``, ``"opencl"`` or ``"opencl:P:D"``;
:func:`probe_device` builds a small test program once per device and process, so that a device
whose compiler fails is skipped (or refused) with the compiler's own message.
"""
import contextlib
import os
import sys
import tempfile

from .program import (WHAT_TO_DO, KernelBuildError, _compiler_message, _device_label,
                      build_program, logger)
from ._cl import INSTALL_HINT, import_cl
from ..._warnings import warn as _warn

__all__ = ["NoDeviceError", "DeviceUnusableError", "probe_device", "select_device"]


class NoDeviceError(RuntimeError):
    """No usable OpenCL device matches the requested ``device`` string.

    Raised when an estimator with ``device="gpu"``, ``"opencl"`` or ``"opencl:P:D"`` finds no
    such device (the message lists the platforms and devices that PyOpenCL sees and how to
    install a driver).

    Examples
    --------
    >>> from sktensor_fast import CPALS
    >>> from sktensor_fast.backends.opencl import NoDeviceError
    >>> from sktensor_fast.datasets import load_flights_routes
    >>> X = load_flights_routes().tensor
    >>> try:
    ...     CPALS(device="opencl:99:0").fit(X)
    ... except NoDeviceError as exc:
    ...     print("no such device")
    ... except ImportError:             # PyOpenCL is not installed
    ...     print("no such device")
    no such device
    """


class DeviceUnusableError(NoDeviceError):
    """An OpenCL device exists but its compiler cannot build a small test program.

    Raised when the device is selected (``device="gpu"``, ``"opencl"`` or ``"opencl:P:D"``), so
    that a broken OpenCL installation fails once, with the compiler's own message, instead of
    at every kernel.  A subclass of :class:`NoDeviceError`.

    Examples
    --------
    >>> from sktensor_fast.backends.opencl import DeviceUnusableError, NoDeviceError
    >>> issubclass(DeviceUnusableError, NoDeviceError)
    True
    >>> from sktensor_fast import list_devices
    >>> unusable = [d["device"] for d in list_devices() if d["usable"] is False]
    """


_PROBE_SRC = """
__kernel void sktensor_fast_probe(__global float* a, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        a[i] = 2.0f * a[i] + 1.0f;
}
"""

#: probe_device's results: {device key: None (usable) or the compiler's message}
_PROBED = {}


def _device_key(dev):
    try:
        return (dev.platform.name, dev.name, dev.driver_version, int(dev.int_ptr))
    except Exception:  # pragma: no cover
        return id(dev)


@contextlib.contextmanager
def _stderr_collected():
    """Collect what is written to the process's standard error (file descriptor 2) inside the
    block: some OpenCL compilers (PoCL's clang) print their diagnostics there themselves, in
    addition to the build log that the error message quotes.  Yields a dict whose ``"text"``
    holds it after the block; where descriptor 2 cannot be redirected, nothing is collected."""
    out = {"text": ""}
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield out
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out["text"] = tmp.read().decode("utf-8", "replace")


def probe_device(dev):
    """Whether the OpenCL device ``dev`` can compile kernels: ``None`` when a small test
    program builds, else the compiler's message.

    The test program is built once per device and process (the result is cached), so that
    :func:`sktensor_fast.list_devices` and device selection can tell a working device from one
    whose compiler fails (for example PoCL with an LLVM that does not know the host CPU).  What
    the compiler prints to the process's standard error meanwhile (PoCL's "1 error
    generated.") is kept off the terminal and logged at DEBUG level on the
    ``sktensor_fast.opencl`` logger: the message returned quotes the build log.

    Parameters
    ----------
    dev : pyopencl.Device
        The device.

    Returns
    -------
    str or None
        ``None`` when the device works, else why not.
    """
    key = _device_key(dev)
    if key in _PROBED:
        return _PROBED[key]
    cl = import_cl()
    with _stderr_collected() as printed:
        try:
            ctx = cl.Context([dev])
            prog = build_program(ctx, _PROBE_SRC, what="a test program")
            cl.Kernel(prog, "sktensor_fast_probe")
            err = None
        except KernelBuildError as exc:
            err = _compiler_message(exc.__cause__)
        except cl.Error as exc:
            err = f"{type(exc).__name__}: {exc}".strip()
    if printed["text"].strip():
        logger.debug("the compiler of %s printed while building the test program:\n%s",
                     _device_label(dev), printed["text"])
    _PROBED[key] = err
    return err


def _unusable(dev, err):
    return DeviceUnusableError(
        f"the OpenCL device {_device_label(dev)} cannot compile kernels; its compiler said: "
        f"{err}. {WHAT_TO_DO}")


def _platform_summary(cl):
    try:
        plats = cl.get_platforms()
    except Exception as exc:  # no ICD loader / no platform
        return f"no OpenCL platform could be listed ({exc})"
    if not plats:
        return "no OpenCL platform is installed"
    parts = []
    for p, plat in enumerate(plats):
        try:
            devs = [f"{d}: {dev.name} [{cl.device_type.to_string(dev.type)}]"
                    for d, dev in enumerate(plat.get_devices())]
        except Exception:
            devs = []
        parts.append(f"platform {p} '{plat.name}': " + (", ".join(devs) or "no devices"))
    return "; ".join(parts)


def select_device(selector):
    """Pick a ``pyopencl.Device`` for ``'gpu'``, ``'opencl'`` or a (platform, device) pair."""
    cl = import_cl()
    try:
        plats = cl.get_platforms()
    except Exception:
        plats = []
    if isinstance(selector, tuple):
        p, d = selector
        if p >= len(plats):
            raise NoDeviceError(f"OpenCL platform index {p} is out of range: "
                                f"{_platform_summary(cl)}. {INSTALL_HINT}")
        devs = plats[p].get_devices()
        if d >= len(devs):
            raise NoDeviceError(f"OpenCL device index {d} is out of range for platform {p} "
                                f"'{plats[p].name}' ({len(devs)} device(s)): {_platform_summary(cl)}")
        err = probe_device(devs[d])
        if err is not None:
            raise _unusable(devs[d], err)
        return devs[d]
    want_gpu = selector == "gpu"
    broken = []
    for plat in plats:
        try:
            devs = plat.get_devices(device_type=cl.device_type.GPU if want_gpu
                                    else cl.device_type.ALL)
        except Exception:
            continue
        for dev in devs:
            err = probe_device(dev)
            if err is None:
                if broken:
                    _warn(
                        f"device={selector!r}: skipped the OpenCL device(s) "
                        f"{', '.join(_device_label(b) for b, _ in broken)} whose compiler cannot "
                        f"build kernels; using {_device_label(dev)}", RuntimeWarning)
                return dev
            broken.append((dev, err))
    if len(broken) == 1:
        raise _unusable(*broken[0])
    if broken:
        raise DeviceUnusableError(
            f"device={selector!r}: no OpenCL device can compile kernels: " + "; ".join(
                f"{_device_label(dev)}: {err}" for dev, err in broken) + f". {WHAT_TO_DO}")
    if want_gpu and _any_device(cl, plats):
        # OpenCL works here, only without a GPU: name what can run instead
        raise NoDeviceError(f"device='gpu': no OpenCL GPU found; the OpenCL devices here are "
                            f"{_platform_summary(cl)}. Use device='opencl' to run on the first "
                            f"of them, or device='cpu' (the default) for the compiled CPU "
                            f"kernels.")
    what = "GPU" if want_gpu else "device"
    raise NoDeviceError(f"device={selector!r}: no OpenCL {what} found ({_platform_summary(cl)}). "
                        f"Use device='cpu' (the default), or: {INSTALL_HINT}")


def _any_device(cl, plats):
    for plat in plats:
        try:
            if plat.get_devices(device_type=cl.device_type.ALL):
                return True
        except Exception:
            continue
    return False

