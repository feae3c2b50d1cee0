"""ALTO versus COO on the CPU: MTTKRP and CP-APR Φ per mode, format construction, CP-ALS.

    python benchmarks/bench_alto.py                                  # Uber, NIPS, NELL-2 (20M)
    python benchmarks/bench_alto.py --tensors uber nips --rank 16 --threads 2 --repeat 5 \\
        --genten --auto-sweep --out bench_out/alto.json

Synthetic tensors with the shapes and nonzero counts of FROSTT's Uber (4-way, 3.3M), NIPS
(4-way, 3.1M) and a 20M-nonzero slice of NELL-2's shape (``benchmarks/synth.py``; duplicate
coordinates are summed, so the final counts are a little lower).  For every mode: MTTKRP over
COO and over ALTO (conflict resolution chosen by reuse, and both paths forced: private
buffers over row intervals, compact buffers of the shared rows), Φ over COO and ALTO;
format construction times; one CP-ALS iteration with each format, and with GenTen (pygenten,
OpenMP) when ``--genten`` is given and pygenten imports.  STREAM triad is measured in the same
run.  ``--auto-sweep`` adds build + 10 MTTKRP sweeps of both formats at small nonzero counts,
the evidence for ``format="auto"``.  Prints a table and writes JSON.
"""
import argparse
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sktensor_fast  # noqa: E402
from sktensor_fast import CPALS, num_threads  # noqa: E402
from sktensor_fast.backends.cpu import _alto, _stream  # noqa: E402
from sktensor_fast.backends.cpu.formats import AltoFormat, CooFormat  # noqa: E402
from benchmarks.common import write_report  # noqa: E402
from benchmarks.synth import FROSTT, synthetic_tensor  # noqa: E402
from benchmarks.bench_mttkrp import best_of, cpu_model  # noqa: E402


def stream_triad_gbs(threads, n=1 << 24, repeat=5):
    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)
    t = best_of(lambda: _stream.triad(a, b, c, 3.0, threads), repeat)
    return 3 * 8 * n / t / 1e9


def timed_build(fn, repeat):
    best, obj = None, None
    for _ in range(repeat):
        obj = None
        t = time.perf_counter()
        obj = fn()
        t = time.perf_counter() - t
        best = t if best is None else min(best, t)
    return best, obj


def cpals_per_iter(X, fmt, rank, threads, repeat):
    """Seconds per CP-ALS iteration (difference of 4 and 1 iterations, setup excluded)."""
    def fit(k):
        est = CPALS(rank=rank, max_iter=k, tol=0.0, random_state=0, format=fmt)
        with num_threads(threads):
            t = time.perf_counter()
            est.fit(X)
            return time.perf_counter() - t
    t1 = min(fit(1) for _ in range(repeat))
    t4 = min(fit(4) for _ in range(repeat))
    return max(t4 - t1, 0.0) / 3


def genten_per_iter(X, rank, threads, iters=4):
    """Seconds per CP-ALS iteration of GenTen (its own timer, setup excluded), or None."""
    try:
        import pygenten as gt
    except Exception as exc:  # pragma: no cover - optional
        return None, f"pygenten not importable: {exc}"
    Xg = gt.Sptensor(X.shape, np.ascontiguousarray(X.subs), np.ascontiguousarray(X.vals),
                     copy=True)
    best = None
    for _ in range(2):
        M, M0, info = gt.cp_als(Xg, rank=rank, maxiters=iters, tol=0.0, printitn=0, seed=1)
        first, last = info.getEntry(0), info.lastEntry()
        per = (last.cum_time - first.cum_time) / max(last.iteration, 1)
        best = per if best is None else min(best, per)
        del M, M0, info
    del Xg
    return best, f"pygenten CP-ALS, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"


def auto_sweep(name, sizes, R, th, repeat, sweeps=10):
    """Build + ``sweeps`` all-mode MTTKRP sweeps, COO vs ALTO, for small nonzero counts (the
    evidence for ``format="auto"``'s ``AUTO_ALTO_MIN_NNZ``)."""
    shape, _ = FROSTT[name]
    rows = []
    print(f"\nformat='auto' sweep on {name}'s shape: build + {sweeps} MTTKRP sweeps (all modes)")
    print(f"{'nnz':>9} | {'COO build':>9} {'sweep':>8} {'total':>8} | {'ALTO build':>10} "
          f"{'sweep':>8} {'total':>8} | {'ALTO/COO':>8}")
    rng = np.random.default_rng(1)
    factors = [rng.random((s, R)) for s in shape]
    outs = [np.empty((s, R)) for s in shape]
    for n in sizes:
        X = synthetic_tensor(shape, int(n), seed=0)
        r = {"nnz": X.nnz}
        with num_threads(th):
            for key, make in (("coo", lambda: CooFormat(X)),
                              ("alto", lambda: AltoFormat(X, num_threads=th))):
                tb, T = timed_build(make, repeat)
                for m in range(len(shape)):  # warm up (flags, workspaces)
                    T.accumulate(factors, m, outs[m], None, 0.0, th)
                ts = best_of(lambda: [T.accumulate(factors, m, outs[m], None, 0.0, th)
                                      for m in range(len(shape))], repeat)
                r[f"{key}_build_s"], r[f"{key}_sweep_s"] = tb, ts
                r[f"{key}_total_s"] = tb + sweeps * ts
        rows.append(r)
        print(f"{X.nnz:>9} | {r['coo_build_s'] * 1e3:>9.2f} {r['coo_sweep_s'] * 1e3:>8.2f} "
              f"{r['coo_total_s'] * 1e3:>8.2f} | {r['alto_build_s'] * 1e3:>10.2f} "
              f"{r['alto_sweep_s'] * 1e3:>8.2f} {r['alto_total_s'] * 1e3:>8.2f} | "
              f"{r['alto_total_s'] / r['coo_total_s']:>8.2f}  (ms)", flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tensors", nargs="*", default=["uber", "nips", "nell2"],
                   choices=sorted(FROSTT))
    p.add_argument("--nell2-nnz", type=float, default=20e6)
    p.add_argument("--max-nnz", type=float, default=None, help="cap every tensor's nonzeros")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--genten", action="store_true", help="also time pygenten's CP-ALS")
    p.add_argument("--auto-sweep", type=float, nargs="*", default=None,
                   help="also time build + 10 MTTKRP sweeps of both formats at these nonzero "
                        "counts on Uber's shape (default sizes when given without values)")
    p.add_argument("--out", default="bench_out/alto.json")
    args = p.parse_args(argv)
    if args.genten:
        os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    th, R = args.threads, args.rank
    stream = stream_triad_gbs(th)
    print(f"machine {platform.node()} ({cpu_model()}, {os.cpu_count()} cpus), threads={th}, "
          f"R={R}, ALTO decoder={_alto.get_decoder()}, STREAM triad {stream:.1f} GB/s, "
          f"load avg {os.getloadavg()[0]:.2f}", flush=True)
    results = []
    for name in args.tensors:
        shape, nnz = FROSTT[name]
        if name == "nell2":
            nnz = min(nnz, int(args.nell2_nnz))
        if args.max_nnz:
            nnz = min(nnz, int(args.max_nnz))
        X = synthetic_tensor(shape, nnz, seed=0)
        nb = 1 if X.nnz > 10_000_000 else 2
        with num_threads(th):
            t_coo, C = timed_build(lambda: CooFormat(X), nb)
            t_alto, A = timed_build(lambda: AltoFormat(X, num_threads=th), nb)
        rng = np.random.default_rng(0)
        factors = [rng.random((s, R)) for s in shape]
        rep = args.repeat if X.nnz <= 10_000_000 else max(2, args.repeat // 2)
        print(f"\n{name}: shape {shape}, nnz {X.nnz:,}, ALTO {A.bits} bits in {A.words} "
              f"word(s), {A.n_partitions} partitions | build COO {t_coo:.3f}s, ALTO {t_alto:.3f}s"
              f" | bytes COO {C.nbytes / 1e6:.0f} MB, ALTO {A.nbytes / 1e6:.0f} MB "
              f"(+ subs/vals {(A.subs.nbytes + A.vals.nbytes) / 1e6:.0f} MB of the tensor)")
        print(f"{'mode':>4} {'I_n':>7} {'reuse':>8} {'ALTO uses':>9} | {'MTTKRP ms':>9}: "
              f"{'COO':>8} {'ALTO':>8} {'speedup':>7} {'buffer':>8} {'compact':>8} | "
              f"{'Phi ms':>6}: {'COO':>8} {'ALTO':>8} {'speedup':>7}")
        modes = []
        for m in range(len(shape)):
            out = np.empty((shape[m], R))
            B = rng.random((shape[m], R))
            t = {}
            t["coo"] = best_of(lambda: C.accumulate(factors, m, out, None, 0.0, th), rep)
            for how in ("buffer", "compact"):
                A.accumulate(factors, m, out, None, 0.0, th, conflict=how)  # flags, workspace
                t[how] = best_of(lambda: A.accumulate(factors, m, out, None, 0.0, th,
                                                      conflict=how), rep)
            choice = A.conflict_for(m)
            t["alto"] = t[choice]
            t["phi_coo"] = best_of(lambda: C.accumulate(factors, m, out, B, 1e-10, th), rep)
            t["phi_alto"] = best_of(lambda: A.accumulate(factors, m, out, B, 1e-10, th), rep)
            modes.append({"mode": m, "length": shape[m], "reuse": A.reuse(m),
                          "alto_conflict": choice, "buffer_rows": A.buffer_rows(m),
                          **{f"{k}_s": v for k, v in t.items()}})
            print(f"{m:>4} {shape[m]:>7} {A.reuse(m):>8.0f} {choice:>9} | {'':>9}  "
                  f"{t['coo'] * 1e3:>8.1f} {t['alto'] * 1e3:>8.1f} {t['coo'] / t['alto']:>7.2f} "
                  f"{t['buffer'] * 1e3:>8.1f} {t['compact'] * 1e3:>8.1f} | {'':>6}  "
                  f"{t['phi_coo'] * 1e3:>8.1f} {t['phi_alto'] * 1e3:>8.1f} "
                  f"{t['phi_coo'] / t['phi_alto']:>7.2f}", flush=True)
        tot = {k: sum(md[f"{k}_s"] for md in modes) for k in ("coo", "alto", "phi_coo",
                                                               "phi_alto")}
        # bytes per nonzero streamed by one ALTO MTTKRP: index + value
        alto_bytes = X.nnz * (8 * A.words + X.vals.itemsize)
        row = {"tensor": name, "shape": shape, "nnz": X.nnz, "alto_bits": A.bits,
               "alto_words": A.words, "partitions": A.n_partitions,
               "build_coo_s": t_coo, "build_alto_s": t_alto,
               "nbytes_coo": C.nbytes, "nbytes_alto": A.nbytes, "modes": modes,
               "mttkrp_all_modes_coo_s": tot["coo"], "mttkrp_all_modes_alto_s": tot["alto"],
               "phi_all_modes_coo_s": tot["phi_coo"], "phi_all_modes_alto_s": tot["phi_alto"],
               "alto_build_over_mttkrp_all_modes": t_alto / tot["alto"],
               "alto_stream_fraction": alto_bytes * len(shape) / tot["alto"] / 1e9 / stream}
        print(f"all modes: MTTKRP COO {tot['coo'] * 1e3:.1f} ms, ALTO {tot['alto'] * 1e3:.1f} ms "
              f"({tot['coo'] / tot['alto']:.2f}x); Φ COO {tot['phi_coo'] * 1e3:.1f} ms, ALTO "
              f"{tot['phi_alto'] * 1e3:.1f} ms ({tot['phi_coo'] / tot['phi_alto']:.2f}x); "
              f"ALTO build = {t_alto / tot['alto']:.2f} MTTKRP sweeps (COO build "
              f"{t_coo / tot['coo']:.2f})", flush=True)
        del C, A
        crep = 2 if X.nnz > 10_000_000 else 3
        it = {fmt: cpals_per_iter(X, fmt, R, th, crep) for fmt in ("coo", "alto")}
        line = f"CP-ALS s/iter: COO {it['coo']:.3f}, ALTO {it['alto']:.3f}"
        row["cpals_s_per_iter"] = it
        if args.genten:
            g, note = genten_per_iter(X, R, th)
            row["genten_cpals_s_per_iter"] = g
            row["genten_note"] = note
            line += f", GenTen {g:.3f}" if g is not None else f" (GenTen: {note})"
        print(line, flush=True)
        results.append(row)
        del X
    auto_rows = None
    if args.auto_sweep is not None:
        sizes = args.auto_sweep or [1e3, 1e4, 3e4, 1e5, 3e5, 1e6]
        auto_rows = auto_sweep("uber", sizes, R, th, args.repeat)
    report = {"benchmark": "alto_vs_coo", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(),
              "load_avg_end": os.getloadavg(), "threads": th, "rank": R,
              "stream_triad_gbs": stream, "alto_decoder": _alto.get_decoder(),
              "config": sktensor_fast.get_config(), "args": vars(args), "results": results,
              "auto_sweep": auto_rows}
    write_report(report, args.out)


if __name__ == "__main__":
    main()
