"""Helpers shared by the benchmark scripts: machine description, timing, JSON output."""
import json
import os
import platform
import time

__all__ = ["cpu_model", "best_of", "write_report"]


def cpu_model():
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def best_of(fn, repeat):
    """Shortest wall time of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def write_report(report, path):
    """Write ``report`` as JSON to ``path`` (folders created) and say so."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2, default=str)
    print(f"wrote {path}")
