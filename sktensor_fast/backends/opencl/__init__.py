"""OpenCL backend (needs PyOpenCL: ``pip install 'sktensor_fast[gpu]'``)."""
from .backend import (DeviceUnusableError, KernelBuildError, NoDeviceError, OpenCLBackend,
                      OpenCLTensor)

__all__ = ["OpenCLBackend", "OpenCLTensor", "NoDeviceError", "DeviceUnusableError",
           "KernelBuildError"]
