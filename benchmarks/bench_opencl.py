"""OpenCL kernels and whole fits on a GPU (or any OpenCL device) against the CPU backend.

    python benchmarks/bench_opencl.py --device gpu                       # NELL-2 shape, 76.9M nnz
    python benchmarks/bench_opencl.py --device opencl --nnz 1e5 --shape 500 400 300   # tiny, PoCL

Times MTTKRP and CP-APR Φ per mode (best of --repeat, queue finished), whole fits (CPALS
--als-iters iterations, CPAPR --apr-iters outer MU iterations) on the device and on the CPU
backend, and, when PyTorch with CUDA is importable, the same MTTKRP/Φ written the usual PyTorch
way (gather factor rows, multiply, ``index_add_``) for scale.  Prints a table and writes JSON.
"""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sktensor_fast  # noqa: E402
from sktensor_fast import CPALS  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402
from benchmarks.synth import synthetic_tensor  # noqa: E402


def timed(fn, finish, repeat):
    fn()
    finish()
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        finish()
        best = min(best, time.perf_counter() - t)
    return best


def torch_reference(X, factors, repeat):
    """MTTKRP and Φ the usual PyTorch way, on CUDA: gather rows, multiply, index_add_."""
    import torch
    if not torch.cuda.is_available():
        return None
    dev = torch.device("cuda")
    subs = torch.as_tensor(X.subs, device=dev)
    vals = torch.as_tensor(X.vals, device=dev)
    F = [torch.as_tensor(f, device=dev) for f in factors]
    R = factors[0].shape[1]
    out = {"mttkrp_ms": [], "phi_ms": []}

    def krp(mode):
        p = None
        for k in range(X.ndim):
            if k != mode:
                rows = F[k][subs[:, k]]
                p = rows if p is None else p * rows
        return p

    for mode in range(X.ndim):
        def mttkrp():
            o = torch.zeros((X.shape[mode], R), dtype=vals.dtype, device=dev)
            o.index_add_(0, subs[:, mode], krp(mode) * vals[:, None])
            return o

        B = F[mode]

        def phi():
            p = krp(mode)
            d = torch.clamp((B[subs[:, mode]] * p).sum(1), min=1e-10)
            o = torch.zeros((X.shape[mode], R), dtype=vals.dtype, device=dev)
            o.index_add_(0, subs[:, mode], p * (vals / d)[:, None])
            return o
        out["mttkrp_ms"].append(timed(mttkrp, torch.cuda.synchronize, repeat) * 1e3)
        out["phi_ms"].append(timed(phi, torch.cuda.synchronize, repeat) * 1e3)
    del subs, vals, F
    torch.cuda.empty_cache()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="gpu")
    p.add_argument("--shape", type=int, nargs="+", default=[12092, 9184, 28818])
    p.add_argument("--nnz", type=float, default=76_879_419)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--als-iters", type=int, default=10)
    p.add_argument("--apr-iters", type=int, default=5)
    p.add_argument("--chunks", type=int, nargs="*", default=[],
                   help="also time the kernels with these nonzeros-per-work-item values and "
                        "use the fastest for the rest of the run")
    p.add_argument("--phi-variants", nargs="*", default=[], choices=["shuffle", "local"],
                   help="Φ variants to sweep with --chunks (the fastest is kept)")
    p.add_argument("--vecs", type=int, nargs="*", default=[],
                   help="columns per lane (1, 2, 4, 8) to sweep (with --chunks)")
    p.add_argument("--layouts", nargs="*", default=[], choices=["wide", "lanes", "lanes-sorted"],
                   help="MTTKRP/Φ layouts to sweep (SKTENSOR_FAST_OCL_LAYOUT); --chunks and "
                        "--vecs sweep the 'lanes' ones, --wide-chunks, --wide-groups and --vecs 'wide'")
    p.add_argument("--off32s", type=int, nargs="*", default=[], choices=[0, 1],
                   help="32-bit offsets in the lanes kernels off/on (the experimental switch "
                        "OpenCLBackend.off32; default on)")
    p.add_argument("--prefetches", type=int, nargs="*", default=[], choices=[0, 1],
                   help="coordinates one step ahead in the lanes kernels off/on (the "
                        "experimental switch OpenCLBackend.prefetch; default on)")
    p.add_argument("--groups", type=int, nargs="*", default=[],
                   help="work-group sizes of the lanes kernels to sweep")
    p.add_argument("--wide-chunks", type=int, nargs="*", default=[])
    p.add_argument("--wide-groups", type=int, nargs="*", default=[])
    p.add_argument("--no-cpu", action="store_true", help="skip the CPU whole-fit comparison")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--out", default="bench_out/opencl.json")
    args = p.parse_args(argv)

    t = time.perf_counter()
    X = synthetic_tensor(tuple(args.shape), int(args.nnz), seed=0, dtype=np.dtype(args.dtype))
    t_gen = time.perf_counter() - t
    print(f"tensor {X.shape} nnz={X.nnz:,} {X.dtype} generated in {t_gen:.1f}s", flush=True)
    be = get_backend(args.device)
    info = be.info()
    print(f"device: {info}", flush=True)
    t = time.perf_counter()
    T = be.prepare(X)
    be.queue.finish()
    t_up = time.perf_counter() - t
    rng = np.random.default_rng(0)
    factors = [rng.random((s, args.rank)).astype(X.dtype) for s in X.shape]
    dfac = [be.asarray(f) for f in factors]
    out = [be.zeros((s, args.rank), X.dtype) for s in X.shape]
    finish = be.queue.finish
    sweep = {}
    variants = args.phi_variants or [be.phi_variant]
    layouts = args.layouts or [be.layout]
    default_layout, wide_defaults = be.layout, (be.wide_chunk, be.wide_group)
    default_chunk = be.chunk
    wide_sweep = {}
    if "wide" in layouts:
        be.layout = "wide"
        for vec in args.vecs or [be.vec]:
            for chunk in args.wide_chunks or [be.wide_chunk]:
                for group in args.wide_groups or [be.wide_group]:
                    be.vec, be.wide_chunk, be.wide_group = vec, chunk, group
                    T.interleaved.clear()
                    entry = {"mttkrp_ms": [timed(lambda: be.mttkrp(T, dfac, m, out=out[m]),
                                                 finish, args.repeat) * 1e3
                                           for m in range(X.ndim)],
                             "phi_ms": [timed(lambda: be.phi(T, dfac, m, dfac[m], 1e-10,
                                                             out=out[m]), finish, args.repeat)
                                        * 1e3 for m in range(X.ndim)]}
                    wide_sweep[f"vec{vec}_chunk{chunk}_group{group}"] = entry
                    print(f"wide vec {vec} chunk {chunk:4d} group {group:4d}: " + " | ".join(
                        f"{k[:-3]} " + " ".join(f"{x:.3f}" for x in v)
                        for k, v in entry.items()), flush=True)
        T.interleaved.clear()
    default_off32, default_group, default_prefetch = be.off32, be.group_size, be.prefetch
    for layout, o32, pf, vec, chunk, grp in [
            (la, o, pp, u, c, gs) for la in layouts if la != "wide"
            for o in args.off32s or [be.off32] for pp in args.prefetches or [be.prefetch]
            for u in args.vecs or [be.vec] for c in args.chunks
            for gs in args.groups or [be.group_size]]:
        be.layout, be.vec, be.chunk, be.group_size = layout, vec, chunk, grp
        be.off32, be.prefetch = bool(o32), bool(pf)
        T.interleaved.clear()
        entry = {"mttkrp_ms": [timed(lambda: be.mttkrp(T, dfac, m, out=out[m]), finish,
                                     args.repeat) * 1e3 for m in range(X.ndim)]}
        for var in variants:
            be.phi_variant = var
            entry[f"phi_{var}_ms"] = [timed(lambda: be.phi(T, dfac, m, dfac[m], 1e-10,
                                                           out=out[m]), finish, args.repeat)
                                      * 1e3 for m in range(X.ndim)]
        sweep[(layout, o32, pf, vec, chunk, grp)] = entry
        print(f"{layout} off32 {o32} prefetch {pf} vec {vec} chunk {chunk:4d} group {grp:4d}: "
              + " | ".join(
            f"{k[:-3]} " + " ".join(f"{x:.3f}" for x in v) for k, v in entry.items()),
            flush=True)
    T.interleaved.clear()
    if sweep:
        best_mttkrp = min(sweep, key=lambda c: sum(sweep[c]["mttkrp_ms"]))
        best_phi = min(((c, v) for c in sweep for v in variants),
                       key=lambda cv: sum(sweep[cv[0]][f"phi_{cv[1]}_ms"]))
        be.phi_variant = best_phi[1]
        print(f"fastest (layout, off32, prefetch, vec, chunk, group): MTTKRP {best_mttkrp}, Φ {best_phi[0]} "
              f"{best_phi[1]}; the final pass and the fits use the defaults", flush=True)
        sweep = {f"{la}_off32{o}_prefetch{pp}_vec{u}_chunk{c}_group{gs}": v
                 for (la, o, pp, u, c, gs), v in sweep.items()}
    be.vec = None
    be.layout = default_layout
    be.wide_chunk, be.wide_group = wide_defaults
    be.chunk, be.off32, be.group_size = default_chunk, default_off32, default_group
    be.prefetch = default_prefetch
    mttkrp_ms, phi_ms = [], []
    for m in range(X.ndim):
        mttkrp_ms.append(timed(lambda: be.mttkrp(T, dfac, m, out=out[m]), finish, args.repeat) * 1e3)
        phi_ms.append(timed(lambda: be.phi(T, dfac, m, dfac[m], 1e-10, out=out[m]), finish,
                            args.repeat) * 1e3)
    # correctness spot check against the CPU backend on mode 0
    cpu = get_backend("cpu")
    Tc = cpu.prepare(X)
    ref = cpu.mttkrp(Tc, factors, 0)
    err = float(np.max(np.abs(be.to_numpy(be.mttkrp(T, dfac, 0)) - ref)) / np.max(np.abs(ref)))
    ref_phi = cpu.phi(Tc, factors, 1, factors[1], 1e-10)
    err_phi = float(np.max(np.abs(be.to_numpy(be.phi(T, dfac, 1, dfac[1], 1e-10)) - ref_phi))
                    / np.max(np.abs(ref_phi)))
    bytes_per_nnz = X.ndim * 4 + X.vals.itemsize
    row = {"upload_s": t_up, "layout": be.layout, "off32": be.off32,
           "prefetch": be.prefetch, "wide_chunk": be.wide_chunk,
           "wide_group": be.wide_group, "wide_sweep": wide_sweep, "chunk": be.chunk, "group": be.group_size, "vec": be.vec or be.VEC, "chunk_sweep": sweep, "mttkrp_ms": mttkrp_ms, "phi_ms": phi_ms,
           "max_rel_err_vs_cpu": {"mttkrp": err, "phi": err_phi},
           "tensor_stream_GBs": [X.nnz * bytes_per_nnz / (ms * 1e-3) / 1e9 for ms in mttkrp_ms]}
    print("MTTKRP ms/mode: " + " ".join(f"{x:.3f}" for x in mttkrp_ms)
          + " | Φ ms/mode: " + " ".join(f"{x:.3f}" for x in phi_ms)
          + f" | rel.err vs CPU {err:.1e}/{err_phi:.1e}", flush=True)
    if not args.no_torch:
        try:
            row["torch_reference"] = torch_reference(X, factors, args.repeat)
            if row["torch_reference"]:
                tr = row["torch_reference"]
                print("PyTorch gather/index_add_ ms/mode: MTTKRP "
                      + " ".join(f"{x:.2f}" for x in tr["mttkrp_ms"]) + " | Φ "
                      + " ".join(f"{x:.2f}" for x in tr["phi_ms"]), flush=True)
        except ImportError:
            pass
    report = {"benchmark": "opencl", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "host": platform.node(), "cpus": os.cpu_count(), "device": info,
              "shape": list(X.shape), "nnz": X.nnz, "rank": args.rank, "dtype": args.dtype,
              "generate_s": t_gen, "results": row, "version": sktensor_fast.__version__}
    _write(report, args.out)  # kernel numbers survive if a whole fit runs out of time
    # compile every kernel the fits use before timing them (OpenCL builds programs lazily)
    warm = synthetic_tensor((50, 40, 30), 2000, seed=1, dtype=X.dtype)
    for dev in [args.device] + ([] if args.no_cpu else ["cpu"]):
        CPALS(rank=args.rank, max_iter=2, tol=0, random_state=0, device=dev).fit(warm)
        if hasattr(sktensor_fast, "CPAPR"):
            sktensor_fast.CPAPR(rank=args.rank, max_iter=2, random_state=0, device=dev).fit(warm)
    fits = {}
    for dev in [args.device] + ([] if args.no_cpu else ["cpu"]):
        t = time.perf_counter()
        get_backend(dev).prepare(X)
        fits[f"prepare_{dev}_s"] = time.perf_counter() - t  # included in every fit below
        est = CPALS(rank=args.rank, max_iter=args.als_iters, tol=0, random_state=0, device=dev)
        t = time.perf_counter()
        est.fit(X)
        fits[f"cpals_{dev}"] = {"seconds": time.perf_counter() - t, "fit": est.fit_,
                                "iters": est.n_iter_}
        if hasattr(sktensor_fast, "CPAPR"):
            try:
                est = sktensor_fast.CPAPR(rank=args.rank, max_iter=args.apr_iters, tol=0,
                                          random_state=0, device=dev)
                t = time.perf_counter()
                est.fit(X)
                fits[f"cpapr_{dev}"] = {"seconds": time.perf_counter() - t,
                                        "log_likelihood": est.log_likelihood_,
                                        "iters": est.n_iter_}
            except NotImplementedError as exc:
                fits[f"cpapr_{dev}"] = {"error": str(exc)}
        print(f"whole fits on {dev}: " + json.dumps({k: v for k, v in fits.items()
                                                      if k.endswith(dev)}), flush=True)
        row["fits"] = fits
        _write(report, args.out)
    print(f"wrote {args.out}")


def _write(report, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2, default=str)


if __name__ == "__main__":
    main()
