"""Helpers shared by the benchmark suite and scripts: machine description, timing, tables,
JSON output.

Every module of ``benchmarks/`` may import this one; it imports none of them.
"""
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["cpu_model", "best_of", "write_report", "DATA_DIR", "MB", "meminfo",
           "last_level_cache_bytes", "cores", "versions", "git_commit", "machine_info",
           "best_time", "md_table", "fmt_num", "plain"]

#: real count tensors next to the repository (each folder holds ``tensor.tns.gz``)
DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"

MB = 2 ** 20


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


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def meminfo():
    out = {}
    for line in _read("/proc/meminfo").splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def last_level_cache_bytes():
    """Size of the largest data/unified cache of CPU 0 (Linux sysfs), or None."""
    best = None
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in sorted(base.glob("index*")) if base.is_dir() else []:
        kind = _read(idx / "type").strip()
        size = _read(idx / "size").strip()
        if kind == "Instruction" or not size:
            continue
        mult = {"K": 1024, "M": MB, "G": 2 ** 30}.get(size[-1], 1)
        val = int(size.rstrip("KMG")) * mult
        best = val if best is None else max(best, val)
    return best


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def versions():
    from importlib import metadata
    import sktensor_fast
    out = {"python": sys.version.split()[0], "sktensor_fast": sktensor_fast.__version__}
    for dist in ("numpy", "scipy", "scikit-learn", "Cython", "pyttb", "tensorly", "pygenten",
                 "pyopencl", "pocl-binary-distribution", "matplotlib", "sparse", "threadpoolctl"):
        try:
            out[dist] = metadata.version(dist)
        except Exception:
            out[dist] = None
    return out


def git_commit():
    root = Path(__file__).resolve().parents[1]
    try:
        res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return res.stdout.strip() + ("+modified" if dirty else "") if res.returncode == 0 else None
    except Exception:
        return None


def machine_info(threads, devices):
    import sktensor_fast
    mem = meminfo()
    cfg = sktensor_fast.get_config()
    return {"hostname": platform.node(), "cpu": cpu_model(), "logical_cpus": os.cpu_count(),
            "cores_available": cores(), "last_level_cache_bytes": last_level_cache_bytes(),
            "memory_total_bytes": mem.get("MemTotal"),
            "memory_available_bytes": mem.get("MemAvailable"),
            "platform": platform.platform(), "load_average_start": list(os.getloadavg()),
            "threads": list(threads), "openmp": cfg.get("openmp"), "formats": cfg.get("formats"),
            "alto_decoder": cfg.get("alto_decoder"), "devices": devices,
            "opencl_devices_visible": cfg.get("opencl_devices"), "versions": versions(),
            "git_commit": git_commit()}


def best_time(fn, repeat, finish=None, warmup=False):
    """(best seconds of ``repeat`` calls, result of the last call)."""
    out = None
    if warmup:
        fn()
        if finish:
            finish()
    best = np.inf
    for _ in range(max(1, repeat)):
        t = time.perf_counter()
        out = fn()
        if finish:
            finish()
        best = min(best, time.perf_counter() - t)
    return best, out


def md_table(headers, rows):
    """A Markdown table as a string."""
    cells = [[str(c) for c in r] for r in rows]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in cells]
    return "\n".join(lines)


def fmt_num(x, digits=3):
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "–" if x is None else str(x)
    if isinstance(x, (int, np.integer)):
        return f"{x:,}"
    ax = abs(x)
    if ax != 0 and (ax >= 1e6 or ax < 1e-3):
        return f"{x:.{digits}e}"
    return f"{x:.{digits}g}" if ax < 1000 else f"{x:,.1f}"


def plain(o):
    """``o`` as strict JSON data: NumPy scalars and arrays converted, NaN and ±inf as None."""
    if isinstance(o, dict):
        return {str(k): plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [plain(v) for v in o]
    if isinstance(o, np.ndarray):
        return plain(o.tolist())
    if isinstance(o, (bool, np.bool_)):
        return bool(o)
    if isinstance(o, (int, np.integer)):
        return int(o)
    if isinstance(o, (float, np.floating)):
        return float(o) if np.isfinite(o) else None
    if o is None or isinstance(o, str):
        return o
    return str(o)
