"""The host memory a fit can count on, and a check that a model fits in it before any array of
the model is made (a model larger than the memory would otherwise end the process when the
system runs out, not raise)."""
import os

__all__ = ["available_bytes", "check_model_memory"]


def _meminfo():
    """``MemAvailable + SwapFree`` of /proc/meminfo in bytes, or None where it cannot be
    read."""
    try:
        with open("/proc/meminfo") as fh:
            info = {}
            for line in fh:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    info[key] = int(parts[0]) * 1024
    except OSError:
        return None
    if "MemAvailable" not in info:
        return None
    return info["MemAvailable"] + info.get("SwapFree", 0)


def _cgroup_room():
    """What the process's cgroup (v2) still allows, in bytes, or None without a limit: its
    limit less the anonymous memory in use (the page cache it also counts is given back on
    demand), or less all it uses where memory.stat does not say."""
    try:
        with open("/sys/fs/cgroup/memory.max") as fh:
            limit = fh.read().strip()
        if limit == "max":
            return None
        used = None
        try:
            with open("/sys/fs/cgroup/memory.stat") as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == "anon":
                        used = int(value)
                        break
        except (OSError, ValueError):
            pass
        if used is None:
            with open("/sys/fs/cgroup/memory.current") as fh:
                used = int(fh.read().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def available_bytes():
    """Bytes of host memory a new allocation can still count on: the system's available
    memory and free swap, at most what the cgroup's limit leaves; None where neither is
    known (then nothing is checked)."""
    known = [b for b in (_meminfo(), _cgroup_room()) if b is not None]
    return min(known) if known else None


def check_model_memory(shape, rank, arrays, what, itemsize=8):
    """Raise MemoryError when ``arrays`` sets of factor matrices of a rank-``rank`` model of a
    tensor of ``shape`` (``itemsize`` bytes an entry) exceed :func:`available_bytes`.
    ``what`` names the fit in the message."""
    rows = sum(int(s) for s in shape)
    need = rows * int(rank) * int(itemsize) * int(arrays)
    room = available_bytes()
    if room is None or need <= room:
        return
    gib = 2.0 ** 30
    raise MemoryError(
        f"{what} needs at least {need / gib:.1f} GiB of host memory: {arrays} sets of factor "
        f"matrices of rank {rank} for modes of {', '.join(str(int(s)) for s in shape)} rows "
        f"({rows * int(rank) * int(itemsize) / gib:.1f} GiB each), but {room / gib:.1f} GiB "
        f"are available. Lower the rank, or fit on a machine with more memory")
