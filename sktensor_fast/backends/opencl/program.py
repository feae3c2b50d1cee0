"""Building OpenCL programs: compiler output hidden unless asked for, failures as clear errors.

Every OpenCL program of the package (the backend's kernels, the CP-APR row solvers, the GCP
kernels, the radix sort, the device probe) is built through :func:`build_program`, and every
program a backend runs is kept in its :class:`ProgramCache` (``backend.kernel(...)``), built
on first use.  :func:`header` writes the ``#define`` lines that set a kernel file's data types
and number of modes.
"""
import logging
import os
import re
import warnings

import numpy as np

from ._cl import import_cl

__all__ = ["build_program", "kernel_source", "header", "ProgramCache", "KernelBuildError",
           "WHAT_TO_DO", "logger"]

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


def header(dtype, nmodes=None, idx="int", extra=(), factor_t="VAL_T"):
    """The ``#define`` lines that precede a kernel file: ``VAL_T`` (and ``USE_FP64``) for
    ``dtype``, ``IDX_T``, and for a kernel over the factors of ``nmodes`` modes ``NMODES``,
    ``FACTOR_PARAMS`` and ``FACTOR_ARRAY`` (factor entries of type ``factor_t``); then the
    lines of ``extra``."""
    lines = []
    if np.dtype(dtype) == np.float64:
        lines += ["#define USE_FP64 1", "#define VAL_T double"]
    else:
        lines += ["#define VAL_T float"]
    lines.append(f"#define IDX_T {idx}")
    if nmodes is not None:
        lines.append(f"#define NMODES {nmodes}")
        params = ", ".join(f"__global const {factor_t}* F{k}" for k in range(nmodes))
        names = ", ".join(f"F{k}" for k in range(nmodes))
        lines.append(f"#define FACTOR_PARAMS {params}")
        lines.append(f"#define FACTOR_ARRAY __global const {factor_t}* F[NMODES] = "
                     f"{{{names}}};")
    lines += list(extra)
    return "\n".join(lines) + "\n"


#: build option that keeps the kernels' argument types (read by :func:`typed_kernel`)
ARG_INFO = "-cl-kernel-arg-info"

#: NumPy types of the OpenCL C scalar types a kernel argument may have
_SCALARS = {"char": np.int8, "uchar": np.uint8, "short": np.int16, "ushort": np.uint16,
            "int": np.int32, "uint": np.uint32, "long": np.int64, "ulong": np.uint64,
            "float": np.float32, "double": np.float64}


def _has_arg_info(ctx):
    """Whether every device of ``ctx`` takes :data:`ARG_INFO` (OpenCL 1.2 and later)."""
    for dev in ctx.devices:
        m = re.match(r"OpenCL\s+(\d+)\.(\d+)", str(getattr(dev, "version", "")))
        if m is None or (int(m.group(1)), int(m.group(2))) < (1, 2):
            return False
    return True


def typed_kernel(knl):
    """``knl`` with its scalar arguments' types declared to PyOpenCL
    (``set_scalar_arg_dtypes``), read from the program's argument information.

    PyOpenCL sets an undeclared scalar argument by trying it as a buffer, local memory, a
    sampler and so on first: about 7 µs per scalar on the hosts measured, which made the
    argument setting of a launch cost several times the launch itself
    (``benchmarks/experiments/bench_launch.py``).  A declared one is packed directly.  A kernel
    whose argument information the device does not give, or with an argument of a private type
    not in the table (a vector, a struct), is returned as it is."""
    cl = import_cl()
    try:
        types = []
        for i in range(knl.num_args):
            if knl.get_arg_info(i, cl.kernel_arg_info.ADDRESS_QUALIFIER) \
                    != cl.kernel_arg_address_qualifier.PRIVATE:
                types.append(None)
                continue
            name = knl.get_arg_info(i, cl.kernel_arg_info.TYPE_NAME).strip().rstrip("\x00")
            if name not in _SCALARS:
                return knl
            types.append(_SCALARS[name])
    except (cl.Error, cl.LogicError, cl.RuntimeError):
        return knl
    knl.set_scalar_arg_dtypes(types)
    return knl


class ProgramCache:
    """The compiled programs and kernels of one OpenCL context, each built on first use.

    A program is named by a key: a tuple whose first entry names the kernel file (``"cp"``,
    ``"dense"``, ``"cpapr_rows"``, ``"gcp"``, ``"sort"``) and whose others are the settings its
    source is built with.  Its source is given as a callable, called only when the program is
    built.  A kernel object is made once per program and kernel name (retrieving a kernel from
    a program makes a new object each time, and a launch sets its arguments on the object).

    Parameters
    ----------
    ctx : pyopencl.Context
        The context whose devices build the programs.
    """

    def __init__(self, ctx):
        self.ctx = ctx
        self._programs = {}
        self._kernels = {}

    def program(self, key, source, options=(), what="kernels"):
        """The program named ``key``, built from ``source()`` with build ``options`` on first
        use (``what`` names it in a build error)."""
        prog = self._programs.get(key)
        if prog is None:
            extra = [ARG_INFO] if _has_arg_info(self.ctx) else []
            prog = self._programs[key] = build_program(self.ctx, source(),
                                                       list(options) + extra, what)
        return prog

    def kernel(self, key, name, source, options=(), what="kernels"):
        """Kernel ``name`` of the program named ``key`` (see :meth:`program`)."""
        knl = self._kernels.get((key, name))
        if knl is None:
            knl = typed_kernel(import_cl().Kernel(self.program(key, source, options, what),
                                                  name))
            self._kernels[(key, name)] = knl
        return knl

    def new_kernel(self, key, name, source, options=(), what="kernels"):
        """A kernel object ``name`` of the program named ``key`` of its own, not the shared
        one of :meth:`kernel`: for a caller that sets its arguments once and enqueues it many
        times (the GCP steps), which no other launch may overwrite."""
        return typed_kernel(import_cl().Kernel(self.program(key, source, options, what), name))

    def clear(self):
        """Forget every program and kernel (the next use builds them again)."""
        self._programs.clear()
        self._kernels.clear()
