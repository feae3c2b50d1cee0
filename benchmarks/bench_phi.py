"""CP-APR's Φ of every mode and the Poisson data term on the CPU, COO and ALTO.

    python benchmarks/bench_phi.py                                    # NELL-2 shape, 1M nnz
    python benchmarks/bench_phi.py --shape 6186 24 77 32 --threads 2  # Chicago shape (4-way)

A synthetic tensor (``benchmarks/synth.py``: Zipf-skewed coordinates, counts 1..4) with
``--nnz`` nonzeros; factors and B uniform on [0, 1), rank ``--rank``.  For each format: the
best of ``--repeat`` calls of Φ for each mode (after one warm-up call, which builds ALTO's
buffers), their sum, and the best of ``--repeat`` Poisson data terms (Σ x log m).  Run it on
two checkouts to compare kernels.  Prints a table and writes JSON.
"""
import argparse
import os
import platform
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sktensor_fast  # noqa: E402
from sktensor_fast import num_threads  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402
from sktensor_fast.backends.cpu.formats import AltoFormat, CooFormat  # noqa: E402
from benchmarks.common import best_of, cpu_model, write_report  # noqa: E402
from benchmarks.synth import synthetic_tensor  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    p.add_argument("--nnz", type=float, default=1e6)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--out", default="bench_out/phi.json")
    args = p.parse_args(argv)
    threads = args.threads or os.cpu_count() or 1
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0)
    rng = np.random.RandomState(0)
    factors = [rng.uniform(size=(s, args.rank)) for s in X.shape]
    weights = np.ones(args.rank)
    be = get_backend("cpu")
    print(f"machine: {platform.node()} | {cpu_model()} | {os.cpu_count()} CPUs | "
          f"threads={threads} | load average before: {os.getloadavg()[0]:.2f}")
    print(f"tensor {X.shape}, nnz={X.nnz:,}, R={args.rank}; ms, best of {args.repeat}")
    rows = []
    for name, T in (("coo", CooFormat(X)), ("alto", AltoFormat(X))):
        per_mode = []
        with num_threads(threads):
            for m in range(X.ndim):
                be.phi(T, factors, m, factors[m], 1e-10)
                per_mode.append(best_of(lambda: be.phi(T, factors, m, factors[m], 1e-10),
                                     args.repeat))
            ll = best_of(lambda: be.poisson_data_term(T, weights, factors, 1e-10), args.repeat)
        rows.append({"format": name, "phi_ms_per_mode": [t * 1e3 for t in per_mode],
                     "phi_ms_sum": sum(per_mode) * 1e3, "data_term_ms": ll * 1e3})
        print(f"{name:5s} Φ per mode " + " ".join(f"{t * 1e3:7.2f}" for t in per_mode)
              + f" | sum {sum(per_mode) * 1e3:7.2f} | data term {ll * 1e3:6.2f}", flush=True)
    write_report({"benchmark": "phi", "machine": platform.node(), "cpu": cpu_model(),
                  "cpus": os.cpu_count(), "threads": threads, "shape": list(X.shape),
                  "nnz": X.nnz, "rank": args.rank, "version": sktensor_fast.__version__,
                  "rows": rows}, args.out)


if __name__ == "__main__":
    main()
