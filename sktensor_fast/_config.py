"""Build and runtime configuration report."""
import platform
import sys

import numpy as np

__all__ = ["show_config", "get_config"]


def get_config():
    """What this installation can do, as a dict.

    Returns
    -------
    dict
        ``version``, ``python``, ``numpy``, ``platform``; ``cpu_kernels`` (whether the
        compiled kernels are there), ``openmp``, ``threads`` (what the CPU kernels use),
        ``formats`` (the storage formats), ``alto_max_bits`` and ``alto_decoder`` (when ALTO is
        available), ``pyopencl`` (its version, or None) and ``opencl_devices`` (as returned by
        :func:`~sktensor_fast.list_devices`, each with ``usable`` and ``error``).

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
    from .formats import FORMATS
    cfg = {
        "version": __version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu_kernels": cpu._kernels is not None,
        "openmp": bool(cpu._kernels.HAVE_OPENMP) if cpu._kernels is not None else False,
        "threads": cpu.get_num_threads() if cpu._kernels is not None else 0,
        "formats": [f for f in FORMATS if f != "auto"],
    }
    if "alto" in FORMATS:
        from .formats.alto import MAX_BITS
        cfg["alto_max_bits"] = MAX_BITS
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
    print(f"  threads       : {cfg['threads']}", file=out)
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
        for d in cfg["opencl_devices"]:
            print(f"    {d['device']}: {d['name']} [{d['type']}] on {d['platform']}, "
                  f"fp64={'yes' if d['fp64'] else 'no'}"
                  + ("" if d.get("usable", True) is not False else ", UNUSABLE"), file=out)
            if d.get("usable", True) is False:
                first = d["error"].strip().splitlines()[0] if d["error"].strip() else "?"
                print(f"      its OpenCL compiler cannot build kernels: {first}", file=out)
                print("      (device='gpu'/'opencl' skip it; use device='cpu' or another device)",
                      file=out)
