"""The CPU backend (:mod:`.backend`) and its compiled kernels."""
from ..._threads import get_num_threads, num_threads, set_num_threads

__all__ = ["get_num_threads", "set_num_threads", "num_threads"]
