"""Build and runtime configuration report, and the OpenMP waiting policy set at import."""
import os
import platform
import sys

import numpy as np

from . import _threads

__all__ = ["show_config", "get_config"]

#: Variables by which a user chooses how OpenMP threads wait (GNU libgomp, LLVM/Intel runtimes).
OPENMP_WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")

#: The waiting policy the package asks for when the user chose none.
DEFAULT_WAIT_POLICY = "PASSIVE"

_WAIT = {"policy": None, "set": False}


def _openmp_runtime_loaded():
    """Whether a shared OpenMP runtime (libgomp.so, libomp.so, libiomp5.so) is mapped already.

    Vendored copies (``libgomp-<hash>.so`` in other wheels) are separate runtimes and are not
    counted.  False where ``/proc/self/maps`` cannot be read.
    """
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                name = os.path.basename(line.rstrip())
                if name.startswith(("libgomp.so", "libomp.so", "libiomp5.so")):
                    return True
    except OSError:
        pass
    return False


def _openmp_env_enter():
    """Before the compiled kernels load: set ``OMP_WAIT_POLICY=PASSIVE`` unless the user set
    one of :data:`OPENMP_WAIT_VARIABLES` or an OpenMP runtime is loaded already.

    OpenMP's default (GNU: spin about 3 ms at every barrier before sleeping) makes each
    parallel region of a kernel cost a scheduler tick on a machine whose cores are busy with
    other programs: a thread that waits spins on the core that the thread it waits for needs.
    Passive threads sleep at once; see ``doc/guide/tuning.rst``, "Passive waiting".
    """
    user = {k: os.environ[k] for k in OPENMP_WAIT_VARIABLES if k in os.environ}
    loaded = not user and _openmp_runtime_loaded()
    # the thread counts of busy machines rely on sleeping threads (_threads.threads_for_load)
    _threads.WAITS_PASSIVELY["value"] = (not user and not loaded) or (
        user.get("OMP_WAIT_POLICY", "").lower() == "passive")
    if user:
        _WAIT["policy"] = "user: " + ", ".join(f"{k}={v}" for k, v in user.items())
    elif loaded:
        _WAIT["policy"] = "runtime default (the OpenMP runtime was loaded before sktensor_fast)"
    else:
        os.environ["OMP_WAIT_POLICY"] = DEFAULT_WAIT_POLICY
        _WAIT["set"] = True
        _WAIT["policy"] = "passive (set by sktensor_fast)"


def _openmp_env_exit():
    """After the compiled kernels loaded: remove the variable :func:`_openmp_env_enter` set,
    so that the user's environment (and that of their subprocesses) is unchanged."""
    if _WAIT["set"]:
        if os.environ.get("OMP_WAIT_POLICY") == DEFAULT_WAIT_POLICY:
            del os.environ["OMP_WAIT_POLICY"]
        _WAIT["set"] = False


def get_config():
    """What this installation can do, as a dict.

    Returns
    -------
    dict
        ``version``, ``python``, ``numpy``, ``platform``; ``cpu_kernels`` (whether the
        compiled kernels are there), ``openmp``, ``threads`` (what the CPU kernels use),
        ``formats`` (the storage formats), ``alto_max_bits`` and ``alto_decoder`` (when ALTO is
        available), ``pyopencl`` (its version, or None), ``opencl_devices`` (as returned by
        :func:`~sktensor_fast.list_devices`, each with ``usable`` and ``error``) and
        ``opencl_options`` (the OpenCL kernel settings in force here, from the
        ``SKTENSOR_FAST_OCL_*`` variables and :func:`~sktensor_fast.config_context`; those not
        listed take the device's default).

    See Also
    --------
    show_config : the same, printed.

    Examples
    --------
    >>> import sktensor_fast
    >>> cfg = sktensor_fast.get_config()
    >>> cfg["version"] == sktensor_fast.__version__, cfg["cpu_kernels"]
    (True, True)
    >>> "coo" in cfg["formats"], cfg["threads"] >= 1
    (True, True)
    """
    from . import __version__
    from .backends import list_devices
    from .backends.cpu import backend as cpu
    cfg = {
        "version": __version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu_kernels": cpu._kernels is not None,
        "openmp": bool(cpu._kernels.HAVE_OPENMP) if cpu._kernels is not None else False,
        "threads": cpu.get_num_threads() if cpu._kernels is not None else 0,
        "max_threads": cpu.max_threads(),
        "openmp_wait_policy": _WAIT["policy"],
        "formats": [f for f in cpu.CpuBackend.formats if f != "auto"],
    }
    if "alto" in cpu.CpuBackend.formats:
        cfg["alto_max_bits"] = cpu.ALTO_MAX_BITS
        try:
            from .backends.cpu import _alto
            cfg["alto_decoder"] = _alto.get_decoder()
        except ImportError:
            cfg["alto_decoder"] = None
    try:
        import pyopencl
        cfg["pyopencl"] = pyopencl.VERSION_TEXT
    except ImportError:
        cfg["pyopencl"] = None
    cfg["opencl_devices"] = list_devices()
    from .backends.options import get_device_options
    cfg["opencl_options"] = get_device_options().set_options()
    return cfg


def show_config(file=None):
    """Print which kernels, threads and devices this installation provides.

    The same report as ``sktensor-fast info`` on the command line: the versions, whether the
    compiled kernels and OpenMP are there, the thread count, the storage formats, and every
    OpenCL device, marked UNUSABLE (with the compiler's message) when it cannot compile the
    kernels.

    Parameters
    ----------
    file : file-like, optional
        Where to print (default: standard output).

    See Also
    --------
    get_config : the same information as a dict.

    Examples
    --------
    >>> import io
    >>> import sktensor_fast
    >>> out = io.StringIO()
    >>> sktensor_fast.show_config(file=out)
    >>> print(out.getvalue().splitlines()[0])  # doctest: +ELLIPSIS
    sktensor_fast 0.1.0 (Python ..., NumPy ...)
    >>> "CPU kernels   : compiled" in out.getvalue()
    True
    """
    cfg = get_config()
    out = file or sys.stdout
    print(f"sktensor_fast {cfg['version']} (Python {cfg['python']}, NumPy {cfg['numpy']})", file=out)
    print(f"  platform      : {cfg['platform']}", file=out)
    print(f"  CPU kernels   : {'compiled' if cfg['cpu_kernels'] else 'MISSING (package not built)'}",
          file=out)
    print(f"  OpenMP        : {'yes' if cfg['openmp'] else 'no (serial kernels)'}", file=out)
    print(f"  threads       : {cfg['threads']} (at most {cfg['max_threads']}); OpenMP waiting: "
          f"{cfg['openmp_wait_policy']}", file=out)
    print(f"  formats       : {', '.join(cfg['formats'])}", file=out)
    if "alto" in cfg["formats"]:
        print(f"  ALTO          : index up to {cfg['alto_max_bits']} bits (sum of ceil(log2 I_n)); "
              f"wider tensors use COO under format='auto'; decoder: {cfg['alto_decoder']}",
              file=out)
    if cfg["pyopencl"] is None:
        print("  OpenCL        : PyOpenCL not installed (pip install 'sktensor_fast[gpu]')", file=out)
    else:
        print(f"  OpenCL        : PyOpenCL {cfg['pyopencl']}, {len(cfg['opencl_devices'])} device(s)",
              file=out)
        opts = cfg["opencl_options"]
        print("  OpenCL options: " + (", ".join(f"{k}={v!r}" for k, v in opts.items())
                                      if opts else "the devices' defaults")
              + " (SKTENSOR_FAST_OCL_*, config_context, device_options)", file=out)
        for d in cfg["opencl_devices"]:
            print(f"    {d['device']}: {d['name']} [{d['type']}] on {d['platform']}, "
                  f"fp64={'yes' if d['fp64'] else 'no'}"
                  + ("" if d.get("usable", True) is not False else ", UNUSABLE"), file=out)
            if d.get("usable", True) is False:
                first = d["error"].strip().splitlines()[0] if d["error"].strip() else "?"
                print(f"      its OpenCL compiler cannot build kernels: {first}", file=out)
                print("      (device='gpu'/'opencl' skip it; use device='cpu' or another device)",
                      file=out)
