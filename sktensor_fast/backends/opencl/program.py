"""Building OpenCL programs: compiler output hidden unless asked for, failures as clear errors.

Every OpenCL program of the package (the backend's kernels, the CP-APR row solvers, the GCP
kernels, the device probe) is built through :func:`build_program`.
"""
import logging
import os
import re
import warnings

from ._cl import import_cl

__all__ = ["build_program", "kernel_source", "KernelBuildError", "WHAT_TO_DO", "logger"]

#: the OpenCL sources of the package
KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
#: the C99 headers of the numerics shared with the CPU kernels (losses, random generator,
#: CP-APR row solver), pasted into the OpenCL sources by :func:`kernel_source`
INCLUDE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "include")

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([A-Za-z0-9_]+\.h)"[ \t]*$', re.M)


def _expand(name, directory, done):
    """Text of file ``name`` with its ``#include "x.h"`` lines replaced by the headers of
    :data:`INCLUDE_DIR` (each pasted once; ``#line`` directives keep the compiler's messages
    pointing at the lines of the real files)."""
    with open(os.path.join(directory, name), encoding="utf-8") as f:
        text = f.read()
    out, pos, line = [f'#line 1 "{name}"\n'], 0, 1
    for m in _INCLUDE.finditer(text):
        out.append(text[pos:m.start()])
        line += text.count("\n", pos, m.start())
        hdr = m.group(1)
        if hdr not in done:
            if not os.path.exists(os.path.join(INCLUDE_DIR, hdr)):
                raise FileNotFoundError(f"{name}, line {line}: included header {hdr} is not "
                                        f"in {INCLUDE_DIR}")
            done.add(hdr)
            out.append(_expand(hdr, INCLUDE_DIR, done))
            out.append(f'\n#line {line + 1} "{name}"')
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def kernel_source(*names):
    """The OpenCL C source of the kernel files ``names`` (in ``kernels/``), concatenated, with
    the shared headers they ``#include`` pasted in.

    Parameters
    ----------
    *names : str
        File names in the ``kernels`` directory of the OpenCL backend.

    Returns
    -------
    str
        The source, ready to follow the host's ``#define`` header.
    """
    done = set()
    return "\n".join(_expand(name, KERNEL_DIR, done) for name in names) + "\n"

#: compiler output of successful builds goes to this logger at DEBUG level (and, with
#: PYOPENCL_COMPILER_OUTPUT=1, to PyOpenCL's CompilerWarning as PyOpenCL does by default)
logger = logging.getLogger("sktensor_fast.opencl")

WHAT_TO_DO = (
    "Run on the CPU with device='cpu' (the compiled CPU kernels need no OpenCL), choose another "
    "OpenCL device ('opencl:P:D'; `sktensor-fast info` marks which ones can compile), or update "
    "or reinstall the device's OpenCL driver (for PoCL: `pip install -U "
    "pocl-binary-distribution pyopencl`, or a PoCL build whose LLVM knows this CPU).")


class KernelBuildError(RuntimeError):
    """The device's OpenCL compiler failed on one of the package's kernels.

    The message names the device and quotes the compiler.  Devices whose compiler fails on
    every program are refused earlier, with :class:`DeviceUnusableError`.

    Examples
    --------
    >>> from sktensor_fast.backends.opencl import KernelBuildError
    >>> issubclass(KernelBuildError, RuntimeError)
    True
    """


def _truthy(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _compiler_message(exc):
    """The compiler's own text from a PyOpenCL build error (without PyOpenCL's repetitions of
    the status and its ``(options: ...)`` trailer)."""
    text = str(exc)
    m = re.search(r"Build on [^\n]*:\n\n(.*?)(?:\n\(options:|\n\(source saved|\Z)", text, re.S)
    msg = (m.group(1) if m else text).strip()
    status = re.match(r"clBuildProgram failed: ([A-Z_]+)", text)
    if status and status.group(1) not in msg:
        msg = f"{status.group(1)}: {msg}"
    return msg if len(msg) <= 2000 else msg[:2000] + " [...]"


def _device_label(dev):
    try:
        return f"'{dev.name.strip()}' on '{dev.platform.name.strip()}'"
    except Exception:  # pragma: no cover - a device object without its info
        return repr(dev)


def build_program(ctx, src, options=(), what="kernels"):
    """Build OpenCL C source ``src`` for the devices of ``ctx`` and return the program.

    The compiler output of a successful build (warnings, remarks: nothing a user of the
    package can act on) is logged at DEBUG level on the ``sktensor_fast.opencl`` logger instead
    of appearing as PyOpenCL's ``CompilerWarning``; set ``PYOPENCL_COMPILER_OUTPUT=1`` to get
    PyOpenCL's warnings with the full text.  A failed build raises :class:`KernelBuildError`
    naming the device and quoting the compiler.

    Parameters
    ----------
    ctx : pyopencl.Context
        The context whose devices build the program.
    src : str
        OpenCL C source.
    options : sequence of str, default=()
        Build options.
    what : str, default="kernels"
        What the program is, for the messages.

    Returns
    -------
    pyopencl.Program
        The built program.
    """
    cl = import_cl()
    prog = cl.Program(ctx, src)
    try:
        if _truthy(os.environ.get("PYOPENCL_COMPILER_OUTPUT", "")):
            prog.build(options=list(options))
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                prog.build(options=list(options))
    except cl.Error as exc:
        devs = ", ".join(_device_label(d) for d in ctx.devices)
        raise KernelBuildError(
            f"the OpenCL compiler of {devs} failed to build {what}: {_compiler_message(exc)}. "
            f"{WHAT_TO_DO}") from exc
    if logger.isEnabledFor(logging.DEBUG):
        for dev in ctx.devices:
            try:
                log = prog.get_build_info(dev, cl.program_build_info.LOG)
            except cl.Error:
                continue
            if log and log.strip():
                logger.debug("OpenCL compiler output for %s on %s:\n%s", what,
                             _device_label(dev), log.strip())
    return prog
