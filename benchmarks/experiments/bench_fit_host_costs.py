"""The host's fixed costs of a fit on a device, each timed alone: the random start, the
download of the final factors and the model's normal form.

    python benchmarks/experiments/bench_fit_host_costs.py --device gpu
    python benchmarks/experiments/bench_fit_host_costs.py --device gpu --shape 183 24 1140 1717

For factor matrices of ``--shape`` x ``--rank`` (NELL-2's by default), milliseconds of
``--repeat`` calls each (the first call of a process is often slower):

- the start's uniform numbers: NumPy's ``RandomState.random_sample`` and the package's draw
  (``_init._uniform_matrices``: the same numbers from compiled MT19937);
- the download of the three device matrices: into new arrays (``to_numpy``), into arrays kept
  from the last call, and through ``to_numpy_transient`` (a kept page-locked buffer);
- new host arrays written once (what new memory costs the host itself);
- ``KruskalTensor.normalize(sort=True, signs=True)``.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from sktensor_fast.backends import get_backend  # noqa: E402
from sktensor_fast.decomposition._init import _uniform_matrices  # noqa: E402
from sktensor_fast.kruskal import KruskalTensor  # noqa: E402


def _times(fn, repeat):
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="gpu")
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--repeat", type=int, default=6)
    args = p.parse_args(argv)
    be = get_backend(args.device)
    shapes = [(n, args.rank) for n in args.shape]
    rs = np.random.RandomState(0)
    F = [rs.random_sample(s) - 0.3 for s in shapes]
    w = rs.random_sample(args.rank)
    D = [be.asarray(f) for f in F]
    kept = [np.empty_like(f) for f in F]
    rows = {
        "numpy random_sample": lambda: [np.random.RandomState(0).random_sample(s)
                                        for s in shapes],
        "compiled draw": lambda: _uniform_matrices(np.random.RandomState(0), shapes),
        "download into new arrays": lambda: [be.to_numpy(d) for d in D],
        "download into kept arrays": lambda: [be.download_into(d, k) if hasattr(
            be, "download_into") else np.copyto(k, be.to_numpy(d)) for d, k in zip(D, kept)],
        "to_numpy_transient": lambda: be.to_numpy_transient(D),
        "new host arrays written": lambda: [np.empty(s).fill(1.0) for s in shapes],
        "normalize": lambda: KruskalTensor._wrap(w, F).normalize(sort=True, signs=True),
    }
    print(f"{be.name}, factors {[s[0] for s in shapes]} x {args.rank}, ms per call:")
    for name, fn in rows.items():
        ts = _times(fn, args.repeat)
        print(f"  {name:28s} " + " ".join(f"{t:6.2f}" for t in ts), flush=True)


if __name__ == "__main__":
    main()
