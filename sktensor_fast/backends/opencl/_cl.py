"""PyOpenCL, imported where needed, or an ImportError that says how to get it.

A module of its own that imports no other module of the OpenCL backend, so that every one of
them can import it.
"""

__all__ = ["import_cl", "INSTALL_HINT"]

INSTALL_HINT = (
    "Install a GPU driver with OpenCL support (NVIDIA, AMD ROCm, Intel compute runtime) or, to run "
    "on the CPU, PoCL: `pip install pocl-binary-distribution`. `sktensor_fast.list_devices()` "
    "shows what PyOpenCL sees.")


def import_cl():
    """PyOpenCL, or an ImportError that says how to get it."""
    try:
        import pyopencl as cl
        import pyopencl.array  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "device='gpu'/'opencl' needs PyOpenCL: `pip install 'sktensor_fast[gpu]'` "
            f"(or `pip install pyopencl`). {INSTALL_HINT}") from exc
    return cl
