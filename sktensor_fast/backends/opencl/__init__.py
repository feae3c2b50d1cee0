"""OpenCL backend (needs PyOpenCL: ``pip install 'sktensor_fast[gpu]'``)."""
from .backend import OpenCLBackend
from .device import DeviceUnusableError, NoDeviceError
from .program import KernelBuildError
from .tensor import OpenCLTensor

__all__ = ["OpenCLBackend", "OpenCLTensor", "NoDeviceError", "DeviceUnusableError",
           "KernelBuildError"]
