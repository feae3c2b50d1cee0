"""The sktensor_fast benchmark suite: STREAM, memory-bound kernels, whole fits, scaling.

    python -m benchmarks --quick --out bench_out          # a few minutes on 2 cores
    python -m benchmarks --full --threads 1 2 4 8 16      # FROSTT-sized tensors, as memory allows
    python -m benchmarks --tiny --out /tmp/b              # seconds (the test suite runs this)
    python -m benchmarks --quick --device opencl          # also the first OpenCL device (PoCL)
    python benchmarks/run.py --quick --device gpu --sections stream kernels

The method follows the Kokkos portability study of sparse tensor kernels: measure STREAM on the
machine, then report the memory-bound kernels (MTTKRP, CP-APR's Φ) as effective bandwidth under
a stated byte model (``benchmarks/byte_models.py``) and as a fraction of STREAM triad on the same
device in the same run, then whole decompositions against the peer libraries.

Sections
--------
stream
    copy / scale / add / triad (Cython + OpenMP at every ``--threads`` count; OpenCL on every
    ``--device``), arrays of ``--stream-size`` float64 elements (default: at least 4x the
    last-level cache), best of the rounds after the first.
kernels
    MTTKRP and Φ of every mode, for every storage format (``sktensor_fast.backends.FORMATS``) on
    the CPU and the device layout of every OpenCL device, on synthetic tensors with the shapes
    of FROSTT's Uber, NIPS, Chicago and NELL-2 (nonzeros capped for the run, Zipf(1.2)-skewed
    coordinates) and on the real tensors of ``../shared/data`` (skipped when absent).  Time per
    mode (best of ``--repeat``), GB/s under the byte model, fraction of triad, and the largest
    relative difference from the first CPU format's result.
fits
    CP-ALS (sktensor_fast, pyttb ``cp_als``, TensorLy ``parafac`` on the densified tensor when
    it is small, pygenten ``cp_als``), CP-APR MU (sktensor_fast, pyttb ``cp_apr``), GCP with
    the Poisson loss by L-BFGS-B (small dense tensors) and by Adam (sktensor_fast, pyttb
    ``gcp_opt``): same tensor, initial guess, rank, iterations and threads; time per
    iteration and the final fit / log-likelihood / loss of every library, all evaluated by the
    same exact formula (``benchmarks/peers.py``).  Libraries that are not installed are
    skipped with a note.
scaling
    MTTKRP and Φ (all modes) against the number of nonzeros (NELL-2's shape) and against the
    number of threads, on log-log axes.
contention (only when asked for: ``--sections contention``)
    Whole fits (CP-ALS, CP-APR MU, GCP Adam) in fresh processes with one thread and with the
    default thread count (or ``--threads``), on a quiet machine and with ``--busy N`` busy
    processes started by the benchmark (default: one per core); see
    ``benchmarks/contention.py``.
e2e
    File to model on a NELL-2-shaped tensor (``--max-nnz`` nonzeros; ``benchmarks/e2e.py``):
    construction from unsorted arrays, ``save_tns``, ``load_tns`` (parse + sorted tensor, peak
    memory), the binary container, and per device the prepare and the fits of CP-APR and CP-ALS
    with the kernel time inside them; references from the same run (NumPy's stable argsort,
    pandas' ``read_csv``).

shapes (only when asked for: ``--sections shapes``)
    The shapes where the CPU path is measured against its floor and its peers beyond large,
    even tensors (``benchmarks/shapes.py``): CP-ALS on the embedded flights-routes tensor
    against pygenten, CP-ALS on power-law coordinates, CP-APR MU on a tensor with two tiny
    modes against pyttb, the default Poisson GCP fit against ``CPAPR(solver="pdnr")``; every
    thread count.

gpu (only when asked for: ``--sections gpu``, with ``--device``)
    Every OpenCL device against all host cores on the NELL-2 and Uber shapes
    (``benchmarks/gpu.py``): prepare, MTTKRP and Φ per mode, PyTorch's gather + ``index_add_``
    on the same GPU, whole fits of CPALS, CPAPR MU and GCP Adam, pygenten's ``cp_als``.

Output: one table per section on stdout (Markdown), ``OUT/benchmarks.json`` (machine, CPU,
threads, devices, versions, date and every section) and PNG plots in ``OUT``.
"""
import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):   # python benchmarks/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sktensor_fast.backends import get_backend, parse_device  # noqa: E402
from benchmarks import contention  # noqa: E402
from benchmarks import e2e as e2e_mod  # noqa: E402
from benchmarks import gpu as gpu_mod  # noqa: E402
from benchmarks import shapes as shapes_mod  # noqa: E402
from benchmarks import stream as stream_mod  # noqa: E402
from benchmarks.common import (DATA_DIR, MB, cores, cpu_model, machine_info,  # noqa: E402
                               plain)
from benchmarks.fits import section_fits  # noqa: E402
from benchmarks.kernels import Synth, section_kernels, section_scaling  # noqa: E402
from benchmarks.plots import make_plots  # noqa: E402

__all__ = ["main", "PRESETS", "DATA_DIR", "SECTIONS", "DEFAULT_SECTIONS"]

PRESETS = {
    "tiny": dict(stream_n=1 << 16, stream_trials=3, kernel_nnz=2000, real_max_gz=100_000,
                 repeat=1, rank=8, fit_rank=4, fit_tensors=("synthetic-tiny",), als_iters=3,
                 apr_iters=2, apr_inner=2, lbfgsb_iters=3, adam_epochs=2, adam_epoch_iters=5,
                 tensorly_max=2e5, gcp_dense_max=2e4, genten=False, fit_threads="min",
                 scaling_nnz=(500, 1000, 2000)),
    "quick": dict(stream_n=None, stream_trials=5, kernel_nnz=1_000_000, real_max_gz=None,
                  repeat=2, rank=16, fit_rank=10, fit_tensors=("flights-routes", "synthetic-small"),
                  als_iters=10, apr_iters=5, apr_inner=10, lbfgsb_iters=10, adam_epochs=3,
                  adam_epoch_iters=50, tensorly_max=1e6, gcp_dense_max=3e4, genten=True,
                  fit_threads="all",
                  scaling_nnz=(125_000, 250_000, 500_000, 1_000_000)),
    "full": dict(stream_n=None, stream_trials=10, kernel_nnz=None, real_max_gz=None,
                 repeat=5, rank=16, fit_rank=16,
                 fit_tensors=("flights-routes", "synthetic-small",
                              "flights-carrier-dest-date-hour", "rails-commits", "nell2-1m"),
                 als_iters=20, apr_iters=10, apr_inner=10, lbfgsb_iters=20, adam_epochs=5,
                 adam_epoch_iters=200, tensorly_max=2e7, gcp_dense_max=2e5, genten=True,
                 fit_threads="all",
                 scaling_nnz=None),
}

#: Sections in the order they run (each one module: stream.py, kernels.py, fits.py,
#: contention.py, e2e.py)
SECTIONS = ("stream", "kernels", "fits", "scaling", "contention", "e2e", "shapes", "gpu")

#: Sections run when --sections is not given (contention starts busy processes, shapes and
#: gpu take minutes: only on request)
DEFAULT_SECTIONS = ("stream", "kernels", "fits", "scaling", "e2e")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="mode", action="store_const", const="quick",
                   help="1M-nonzero tensors, small fits (the default)")
    g.add_argument("--full", dest="mode", action="store_const", const="full",
                   help="FROSTT sizes as memory allows, larger fits")
    g.add_argument("--tiny", dest="mode", action="store_const", const="tiny",
                   help="tiny sizes: a smoke test that runs in seconds")
    p.add_argument("--device", action="append", default=[],
                   help="also run on this OpenCL device ('opencl', 'gpu', 'opencl:P:D'); "
                        "repeatable")
    p.add_argument("--out", default="bench_out", help="folder for the JSON and the plots")
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="CPU thread counts (default: 1 and all cores)")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(DEFAULT_SECTIONS),
                   help="sections to run (default: all but contention)")
    p.add_argument("--busy", type=int, default=None,
                   help="contention: busy processes of the loaded condition (default: one per "
                        "core)")
    p.add_argument("--compare-spin", action="store_true",
                   help="contention: also time OpenMP's spinning default at many threads")
    p.add_argument("--stream-size", type=int, default=None,
                   help="STREAM elements per array (default: preset, at least 4x the LLC)")
    p.add_argument("--max-nnz", type=int, default=None,
                   help="cap on the nonzeros of the synthetic tensors (kernels and scaling)")
    p.add_argument("--repeat", type=int, default=None, help="timed calls per kernel (best)")
    p.add_argument("--rank", type=int, default=None, help="rank of the kernels (default 16)")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    args.mode = args.mode or "quick"
    return args


def _write(report, path):
    tmp = path.with_suffix(".json.tmp")
    with open(tmp, "w") as f:
        json.dump(plain(report), f, indent=1, allow_nan=False)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    cfg = dict(PRESETS[args.mode], mode=args.mode)
    if args.stream_size:
        cfg["stream_n"] = args.stream_size
    if args.max_nnz:
        cfg["kernel_nnz"] = args.max_nnz
        cfg["max_nnz"] = args.max_nnz
    if args.repeat:
        cfg["repeat"] = args.repeat
    if args.rank:
        cfg["rank"] = args.rank
    threads = sorted(set(args.threads or {1, cores()}))
    if min(threads) < 1:
        raise SystemExit("--threads: thread counts must be >= 1")
    if args.busy is not None and args.busy < 0:
        raise SystemExit("--busy must be >= 0")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    devices = [{"device": "cpu", "ok": True, "name": cpu_model(), "kind": "Cython/OpenMP"}]
    for d in args.device:
        parse_device(d)   # raises on a malformed device string
        try:
            be = get_backend(d)
            devices.append({**be.info(), "device": d, "ok": True})
        except Exception as exc:
            devices.append({"device": d, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
            print(f"device {d}: skipped ({exc})", flush=True)
    started = time.time()
    report = {"suite": "sktensor_fast benchmarks", "mode": args.mode,
              "command": "python -m benchmarks " + " ".join(argv if argv is not None
                                                             else sys.argv[1:]),
              "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "machine": machine_info(threads, devices), "settings": cfg}
    for s in SECTIONS:
        report[s] = {"skipped": "not requested (--sections)"}
    path = out / "benchmarks.json"
    m = report["machine"]
    print(f"# sktensor_fast benchmarks ({args.mode}), {report['date']}\n\n"
          f"machine: {m['hostname']} | {m['cpu']} | {m['cores_available']} cores | "
          f"LLC {(m['last_level_cache_bytes'] or 0) / MB:.0f} MiB | "
          f"{(m['memory_total_bytes'] or 0) / 2**30:.1f} GiB | threads {threads} | devices "
          + ", ".join(d["device"] for d in devices if d["ok"])
          + f" | load average {m['load_average_start'][0]:.2f}\n", flush=True)
    synth = Synth()
    titles = {"stream": "STREAM (GB/s, best of the rounds after the first)",
              "kernels": "Kernels", "fits": "Whole fits", "scaling": "Scaling",
              "contention": "Whole fits on a quiet and on a busy machine (fresh processes, "
                            "best seconds; ratio: many threads over one)",
              "e2e": "File to model",
              "shapes": "Skewed, tiny and tiny-mode tensors, GCP's defaults (CPU)",
              "gpu": "OpenCL devices against all host cores: NELL-2 and Uber shapes"}
    for s in SECTIONS:
        if s not in args.sections:
            continue
        t0 = time.time()
        if s == "stream":
            res, table = stream_mod.section_stream(cfg, threads, devices)
        elif s == "kernels":
            res, table = section_kernels(cfg, threads, devices, report["stream"], synth)
        elif s == "fits":
            res, table = section_fits(cfg, threads, devices)
        elif s == "contention":
            res, table = contention.section_contention(
                args.mode, args.busy, args.threads, args.repeat, cores=cores(),
                compare_spin=args.compare_spin)
        elif s == "e2e":
            res, table = e2e_mod.section_e2e(cfg, threads, devices)
        elif s == "shapes":
            res, table = shapes_mod.section_shapes(args.mode, threads)
        elif s == "gpu":
            res, table = gpu_mod.section_gpu(cfg, threads, devices, args.mode,
                                             max_nnz=args.max_nnz)
        else:
            res, table = section_scaling(cfg, threads, devices, synth)
        res["section_seconds"] = time.time() - t0
        report[s] = res
        print(f"## {titles[s]}\n\n{table}\n", flush=True)
        for note in res.get("notes", []):
            print(f"- note: {note}")
        if res.get("notes"):
            print()
        _write(report, path)
    report["machine"]["load_average_end"] = list(os.getloadavg())
    report["total_seconds"] = time.time() - started
    report["plots"] = [] if args.no_plots else make_plots(report, out)
    _write(report, path)
    print(f"wrote {path}" + (f" and {', '.join(report['plots'])} in {out}"
                             if report["plots"] else "")
          + f" ({report['total_seconds']:.0f} s)", flush=True)
    return report


if __name__ == "__main__":
    main()
