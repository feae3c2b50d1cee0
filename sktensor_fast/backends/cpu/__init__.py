from .backend import CpuBackend, get_num_threads, set_num_threads, num_threads

__all__ = ["CpuBackend", "get_num_threads", "set_num_threads", "num_threads"]
