"""Where ALTO's private-buffer path starts to beat the compact path: MTTKRP time versus reuse.

    python benchmarks/experiments/bench_alto_threshold.py                      # defaults below
    python benchmarks/experiments/bench_alto_threshold.py --nnz 2e6 --rank 16 --threads 2 --repeat 5 \\
        --out bench_out/alto_threshold.json

Builds 3-way tensors with a fixed number of nonzeros whose target mode (``--mode``) has length
2^k for k in ``--log2-lengths`` (the other two modes are fixed), so that the reuse
``nnz / I_target`` sweeps several decades, and times that mode's MTTKRP over ALTO with
conflicts resolved by private buffers over row intervals and by compact buffers of the shared
rows, and over COO for reference (best of ``--repeat``).  Prints a table and the
smallest reuse from which buffers win at every larger reuse, and writes JSON.
"""
import argparse
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import sktensor_fast  # noqa: E402
from sktensor_fast import SparseTensor  # noqa: E402
from sktensor_fast.backends.cpu.formats import CooFormat  # noqa: E402
from sktensor_fast.backends.cpu.formats.alto import AltoFormat  # noqa: E402
from sktensor_fast.backends.cpu import _alto  # noqa: E402
from benchmarks.common import best_of, cpu_model, write_report  # noqa: E402
from benchmarks.synth import zipf_indices  # noqa: E402


def make_tensor(shape, nnz, seed, a):
    rng = np.random.default_rng(seed)
    cols = []
    for s in shape:
        if a > 0:
            cols.append(zipf_indices(s, nnz, rng, a))
        else:
            cols.append(rng.integers(0, s, nnz))
    return SparseTensor(np.stack(cols, axis=1), rng.random(nnz), shape, copy=False)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nnz", type=float, default=2 ** 21)
    p.add_argument("--log2-lengths", type=int, nargs="+",
                   default=[6, 8, 10, 12, 14, 16, 17, 18, 19, 20, 21])
    p.add_argument("--other", type=int, nargs=2, default=[4096, 2048],
                   help="lengths of the two other modes")
    p.add_argument("--mode", type=int, default=1, choices=[0, 1, 2],
                   help="position of the swept (target) mode; COO needs a permutation for "
                        "modes other than 0, so 1 is the representative case")
    p.add_argument("--zipf", type=float, default=0.0,
                   help="Zipf exponent of the coordinates (0: uniform)")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default="bench_out/alto_threshold.json")
    args = p.parse_args(argv)
    rows = []
    print(f"ALTO mode-{args.mode} MTTKRP, nnz≈{int(args.nnz):,}, R={args.rank}, "
          f"threads={args.threads}, "
          f"decoder={_alto.get_decoder()}, other modes {args.other}, zipf={args.zipf}")
    print(f"{'I_target':>9} {'nnz':>9} {'reuse':>9} {'parts':>5} {'buf rows':>9} "
          f"{'buffer ms':>10} {'compact ms':>10} {'compact/buffer':>14} {'COO ms':>8}")
    for k in args.log2_lengths:
        shape = [*args.other]
        shape.insert(args.mode, 2 ** k)
        shape = tuple(shape)
        X = make_tensor(shape, int(args.nnz), seed=k, a=args.zipf)
        T = AltoFormat(X, num_threads=args.threads)
        rng = np.random.default_rng(0)
        factors = [rng.random((s, args.rank)) for s in shape]
        out = np.empty((shape[args.mode], args.rank))
        t = {}
        C = CooFormat(X)
        m = args.mode
        t["coo"] = best_of(lambda: C.accumulate(factors, m, out, None, 0.0, args.threads),
                           args.repeat)
        for how in ("buffer", "compact"):
            T.accumulate(factors, m, out, None, 0.0, args.threads, conflict=how)  # warm up
            t[how] = best_of(lambda: T.accumulate(factors, m, out, None, 0.0, args.threads,
                                                  conflict=how), args.repeat)
        row = {"shape": shape, "nnz": X.nnz, "reuse": T.reuse(m), "partitions": T.n_partitions,
               "buffer_rows": T.buffer_rows(m), "buffer_s": t["buffer"], "compact_s": t["compact"],
               "compact_rows": T.compact_rows(m),
               "coo_s": t["coo"]}
        rows.append(row)
        print(f"{shape[m]:>9} {X.nnz:>9} {row['reuse']:>9.1f} {T.n_partitions:>5} "
              f"{row['buffer_rows']:>9} {t['buffer'] * 1e3:>10.2f} {t['compact'] * 1e3:>10.2f} "
              f"{t['compact'] / t['buffer']:>14.2f} {t['coo'] * 1e3:>8.2f}", flush=True)
    # smallest reuse from which buffers win at every larger reuse
    by_reuse = sorted(rows, key=lambda r: r["reuse"])
    crossover = None
    for i, r in enumerate(by_reuse):
        if all(q["buffer_s"] <= q["compact_s"] for q in by_reuse[i:]):
            crossover = r["reuse"]
            break
    print(f"buffers win from reuse ≈ {crossover}" if crossover is not None
          else "buffers never win at every larger reuse")
    report = {"benchmark": "alto_threshold", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(),
              "load_avg": os.getloadavg(), "args": vars(args), "decoder": _alto.get_decoder(),
              "config": sktensor_fast.get_config(), "rows": rows, "crossover_reuse": crossover}
    write_report(report, args.out)


if __name__ == "__main__":
    main()
