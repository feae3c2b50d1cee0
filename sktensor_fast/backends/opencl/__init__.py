"""OpenCL backend (needs PyOpenCL: ``pip install 'sktensor_fast[gpu]'``)."""
from .backend import NoDeviceError, OpenCLBackend, OpenCLTensor

__all__ = ["OpenCLBackend", "OpenCLTensor", "NoDeviceError"]
