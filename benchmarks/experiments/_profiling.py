"""Device time of OpenCL launches from profiling events, for the experiments.

:func:`install` makes every PyOpenCL command queue created afterwards a profiling one and
records ``(name, event)`` for every kernel launch (``kernel(...)`` and
``enqueue_nd_range_kernel``) and, with ``transfers``, every ``enqueue_copy`` / fill, while
``enabled()`` is true.  Call it before the backend creates its queue.
"""
import pyopencl as cl

__all__ = ["install", "device_seconds"]


def install(events, enabled=lambda: True, transfers=False):
    base = cl.CommandQueue

    class ProfilingQueue(base):
        def __init__(self, ctx, device=None, properties=None):
            super().__init__(ctx, device,
                             properties=cl.command_queue_properties.PROFILING_ENABLE)

    cl.CommandQueue = ProfilingQueue

    def recording(fn, name_of):
        def wrapped(*a, **k):
            ev = fn(*a, **k)
            if enabled() and isinstance(ev, cl.Event):
                events.append((name_of(a), ev))
            return ev
        return wrapped

    cl.Kernel.__call__ = recording(cl.Kernel.__call__, lambda a: a[0].function_name)
    cl.enqueue_nd_range_kernel = recording(cl.enqueue_nd_range_kernel,
                                           lambda a: a[1].function_name)
    if transfers:
        cl.enqueue_copy = recording(cl.enqueue_copy, lambda a: "copy")
        cl.enqueue_fill_buffer = recording(cl.enqueue_fill_buffer, lambda a: "fill")


def device_seconds(ev):
    """The event's device time in seconds, or None where it has no profiling information."""
    try:
        return (ev.profile.end - ev.profile.start) * 1e-9
    except cl.Error:
        return None
