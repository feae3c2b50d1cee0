"""CP-ALS and its MTTKRPs at 1 and 2 threads on a tensor with power-law coordinates.

    python benchmarks/experiments/bench_skewed.py                     # 20000^3, ~2M nonzeros, R = 16
    python benchmarks/experiments/bench_skewed.py --rounds 7 --phases --out bench_out/skewed.json
    python benchmarks/experiments/bench_skewed.py --checkout ../other-checkout   # another version
    python benchmarks/experiments/bench_skewed.py --ab ../other-checkout --pairs 6 --rounds 2 \
        --min-probe 1.7 --out bench_out/skewed_ab.json                          # before / after

The tensor (built in about a second, vectorised NumPy, fixed seed):

- ``--draws`` coordinate triples (default 4,000,000); in every mode ``k`` independently
  ``c = floor(scale * (u ** (-1 / alpha) - 1))`` with ``u`` uniform on (0, 1]: a Pareto
  (Lomax) variable of shape ``alpha`` (``--alpha``, default 1.2) and scale ``--scale``
  (default 32), drawn again while ``c >= I_k``;
- each mode's coordinates then go through a fixed random permutation of its rows (the heavy
  rows scattered over the mode, as in real data; ``--no-scatter`` keeps them at the start);
- every draw is a nonzero of value 1, and repeated coordinates are summed (so values are
  counts): with the defaults 2,047,579 nonzeros, and in every mode the heaviest row holds 2.1 %
  of them and the ten heaviest 17.4 % (``--no-scatter``: the same counts, rows 0, 1, ...).

The generator draws ``np.random.default_rng(seed)``: first ``u`` for mode 0, 1, 2 (redraws
right after each), then the three permutations.

Timed, in ``--rounds`` rounds; inside a round the formats and the thread counts alternate
(format outermost), so that every setting sees the same machine; the best time of every setting
is kept:

- ``cpals``: a whole ``CPALS(rank, max_iter=--iters, tol=0, random_state=0, format=F)`` fit
  (the tensor prepared once, before the rounds: the fit reuses it);
- ``mttkrp m``: one MTTKRP of mode ``m`` on the prepared tensor (the factors of the fit's
  initial guess);
- ``dense``: the dense steps of one CP-ALS iteration (``backend.als_update`` of every mode:
  the R x R solve, the new factor, its Gram matrix).

``--phases`` also times the phases of ALTO's MTTKRP (zeroing, partitions, merge of the
private buffers) and what every thread did in them, for each conflict path, with the kernel's
own timers; a thread's share of a phase's wall time that it did not work, it waited.

The factors of the fits at each thread count are compared bitwise with those at the first
count.  The load average is read at the start and after every round, and a probe of the cores
(:func:`core_probe`: the speedup of a kernel whose data stay in cache, about 2 when two cores
are free, about 1 when other programs hold one) runs before and after.  Prints Markdown tables
and, with ``--out``, writes JSON.
"""
import argparse
import hashlib
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if "--checkout" in sys.argv[:-1]:       # time another checkout's package (built in place)
    sys.path.insert(0, os.path.abspath(sys.argv[sys.argv.index("--checkout") + 1]))

import sktensor_fast as sk  # noqa: E402
from sktensor_fast import CPALS, SparseTensor  # noqa: E402
from sktensor_fast.backends import get_backend  # noqa: E402
from benchmarks.common import cpu_model, md_table, plain, write_report  # noqa: E402


def pareto_coords(rng, n, length, alpha, scale):
    """``n`` coordinates in [0, length): floor(scale * Lomax(alpha)), redrawn while too large."""
    c = np.floor(scale * (rng.random(n) ** (-1.0 / alpha) - 1.0))
    bad = np.flatnonzero(c >= length)
    while bad.size:
        c[bad] = np.floor(scale * (rng.random(bad.size) ** (-1.0 / alpha) - 1.0))
        bad = bad[c[bad] >= length]
    return c.astype(np.int64)


def skewed_tensor(shape=(20000, 20000, 20000), draws=4_000_000, alpha=1.2, scale=32.0,
                  seed=0, scatter=True):
    """The benchmark's tensor (see the module docstring)."""
    rng = np.random.default_rng(seed)
    subs = np.empty((int(draws), len(shape)), dtype=np.int64)
    for k, n in enumerate(shape):
        subs[:, k] = pareto_coords(rng, int(draws), int(n), alpha, scale)
    if scatter:
        for k, n in enumerate(shape):
            subs[:, k] = rng.permutation(int(n))[subs[:, k]]
    return SparseTensor(subs, np.ones(int(draws)), tuple(shape))


def top_shares(X, top=(1, 10)):
    """Per mode, the share of the nonzeros in its ``t`` heaviest rows, for each ``t``."""
    out = []
    for k, n in enumerate(X.shape):
        c = np.sort(np.bincount(X.subs[:, k], minlength=n))[::-1]
        out.append([float(c[:t].sum() / X.nnz) for t in top])
    return out


def _load():
    return os.getloadavg()[0]


def core_probe(threads=2, repeat=7):
    """Speedup of ``threads`` threads over one on a kernel whose data stay in cache (the COO
    MTTKRP of the thread-cost calibration, 512K nonzeros of a 64³ tensor, best of
    ``repeat``): about ``threads`` when that many cores are free, about 1 when other programs
    hold all but one.  Read before and after the measurements, so that a table can be judged
    by the cores it had."""
    from sktensor_fast.backends.cpu import parallel_costs
    run, _ = parallel_costs._calibration_kernel(256)
    run(1)
    run(threads)
    one = min(parallel_costs._seconds(lambda: run(1)) for _ in range(repeat))
    many = min(parallel_costs._seconds(lambda: run(threads)) for _ in range(repeat))
    return one / many


def _fit(X, R, iters, fmt):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CPALS(R, max_iter=iters, tol=0, random_state=0, format=fmt).fit(X)


def _bits(model):
    return b"".join(np.ascontiguousarray(f).tobytes() for f in model.factors_) + \
        np.ascontiguousarray(model.weights_).tobytes()


def phases(be, T, U, threads, repeat):
    """Phase times of ALTO's MTTKRP (best total of ``repeat`` calls) per mode, conflict path
    and thread count."""
    rows = []
    R = U[0].shape[1]
    for m in range(len(U)):
        out = np.empty((T.shape[m], R), dtype=T.dtype)
        for how in ("buffer", "compact"):
            best = {}
            for _ in range(repeat):
                for t in threads:
                    nt = T.threads_for(t, R)
                    tm = np.zeros(4 + 2 * nt)
                    w = time.perf_counter()
                    T.accumulate(U, m, out, None, 0.0, t, conflict=how, times=tm)
                    w = time.perf_counter() - w
                    if w < best.get(t, (np.inf,))[0]:
                        best[t] = (w, tm, nt)
            for t in threads:
                w, tm, nt = best[t]
                rows.append({"mode": m, "path": how, "threads": t, "total_s": w,
                             "zero_s": tm[0], "parts_s": tm[1], "merge_s": tm[2],
                             "waves": int(tm[3]), "parts_busy_s": tm[4:4 + nt].tolist(),
                             "merge_busy_s": tm[4 + nt:4 + 2 * nt].tolist(),
                             "auto": how == T.conflict_for(m)})
    return rows


def _without(argv, names):
    """``argv`` without the options ``names`` (each with its value)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in names:
            skip = True
            continue
        out.append(a)
    return out


def ab(args, argv):
    """Before (``--ab`` checkout) against after (this checkout): ``--pairs`` pairs of
    processes, the order alternating from pair to pair, each process timing ``--rounds``
    rounds; with ``--min-probe``, a pair starts only when :func:`core_probe` reaches it (so
    that both halves of a pair see two free cores at their start).  The table gives, per
    setting, the best time over all processes of each side."""
    import json
    import subprocess
    import tempfile
    child = _without(argv, {"--ab", "--pairs", "--min-probe", "--out", "--checkout"})
    child = [a for a in child if a != "--phases"]
    script = os.path.abspath(__file__)
    reports = {"before": [], "after": []}
    tmp = tempfile.mkdtemp()
    n, skipped = 0, 0
    while n < args.pairs:
        p = core_probe(2, 5) if args.min_probe > 0 else 0.0
        if p < args.min_probe:
            skipped += 1
            time.sleep(5)
            continue
        order = ["before", "after"] if n % 2 == 0 else ["after", "before"]
        for side in order:
            out = os.path.join(tmp, f"{side}_{n}.json")
            extra = ["--checkout", os.path.abspath(args.ab)] if side == "before" else []
            subprocess.run([sys.executable, script, *child, *extra, "--out", out], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(out) as f:
                reports[side].append(json.load(f))
        n += 1
        print(f"  pair {n}/{args.pairs} done, load {_load():.2f}", file=sys.stderr, flush=True)
    best = {}
    for side, reps in reports.items():
        for rep in reps:
            for r in rep["rows"]:
                key = (side, r["format"], r["what"])
                cur = best.setdefault(key, {"paths": r["paths"], "times_s": {},
                                            "same_bits": True})
                for th, t in r["times_s"].items():
                    cur["times_s"][th] = min(cur["times_s"].get(th, np.inf), t)
                cur["same_bits"] &= r.get("same_bits", True)
                cur.setdefault("models", set()).add(r.get("model_sha1"))
    loads = [x for reps in reports.values() for rep in reps for x in rep["load_averages"]]
    probes = [x for reps in reports.values() for rep in reps for x in rep["core_probe"]]
    th = [str(t) for t in args.threads]
    print(f"\nbefore: {args.ab}; after: this checkout; {args.pairs} pairs of processes of "
          f"{args.rounds} rounds (best of {args.pairs * args.rounds}), load average "
          f"{min(loads):.2f}-{max(loads):.2f}, core probes x{min(probes):.2f}-x{max(probes):.2f}"
          f"{f', {skipped} probes below {args.min_probe:g} waited out' if skipped else ''}\n")
    head = ["format", "what"] + [f"before {t} thr ms" for t in th] + \
        [f"after {t} thr ms" for t in th] + [f"before x{th[-1]}", f"after x{th[-1]}",
                                             "same bits"]
    # same bits: at every thread count, in every process, before and after
    for fmt in args.formats:
        b, a = best[("before", fmt, "cpals")], best[("after", fmt, "cpals")]
        one = len(b["models"] | a["models"]) == 1 and None not in b["models"]
        b["same_bits"] = a["same_bits"] = b["same_bits"] and a["same_bits"] and one
    body = []
    for fmt in args.formats:
        for w in ["cpals"] + [f"mttkrp {m}" for m in range(len(args.shape))] + ["dense"]:
            b, a = best[("before", fmt, w)], best[("after", fmt, w)]
            path = ""
            if w.startswith("mttkrp"):
                m = int(w[-1])
                path = f" [{b['paths'][m]} -> {a['paths'][m]}]"
            body.append([fmt, w + path]
                        + [f"{b['times_s'][t] * 1e3:.1f}" for t in th]
                        + [f"{a['times_s'][t] * 1e3:.1f}" for t in th]
                        + [f"{b['times_s'][th[0]] / b['times_s'][th[-1]]:.2f}",
                           f"{a['times_s'][th[0]] / a['times_s'][th[-1]]:.2f}",
                           "" if w != "cpals" else
                           ("yes" if b["same_bits"] and a["same_bits"] else "NO")])
    print(md_table(head, body))
    if args.out:
        write_report(plain({"args": vars(args), "skipped_probes": skipped, "reports": reports,
                            "best": [{"side": k[0], "format": k[1], "what": k[2],
                                      "times_s": v["times_s"], "paths": v["paths"]}
                                     for k, v in best.items()]}),
                     args.out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", type=int, nargs="+", default=[20000, 20000, 20000])
    ap.add_argument("--draws", type=float, default=4e6)
    ap.add_argument("--alpha", type=float, default=1.2)
    ap.add_argument("--scale", type=float, default=32.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-scatter", action="store_true")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--formats", nargs="+", default=["auto", "coo", "alto"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--phases", action="store_true", help="ALTO's MTTKRP phase by phase")
    ap.add_argument("--out", default=None, help="write the JSON report here")
    ap.add_argument("--checkout", default=None,
                    help="import sktensor_fast from this checkout (to compare with another "
                         "version; --phases needs this one's)")
    ap.add_argument("--ab", default=None, metavar="CHECKOUT",
                    help="compare that checkout (before) with this one (after): --pairs pairs "
                         "of processes, each of --rounds rounds, see ab()")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--min-probe", type=float, default=0.0,
                    help="with --ab: start a pair only when the core probe gives at least this")
    args = ap.parse_args(argv)
    if args.ab:
        return ab(args, argv if argv is not None else sys.argv[1:])

    loads = [_load()]
    probes = [core_probe(max(args.threads))] if len(args.threads) > 1 else []
    t = time.perf_counter()
    X = skewed_tensor(tuple(args.shape), int(args.draws), args.alpha, args.scale, args.seed,
                      not args.no_scatter)
    build_s = time.perf_counter() - t
    shares = top_shares(X)
    R = args.rank
    be = get_backend("cpu")
    rng = np.random.default_rng(0)
    U = [rng.random((n, R)) for n in X.shape]
    prepared = {}
    for fmt in args.formats:
        _fit(X, R, 1, fmt)             # prepares the tensor (kept with it) and warms up
        prepared[fmt] = be.prepare(X, fmt)
    what = ["cpals"] + [f"mttkrp {m}" for m in range(X.ndim)] + ["dense"]
    runs = {(fmt, w, th): [] for fmt in args.formats for w in what for th in args.threads}
    bits = {}
    for rnd in range(args.rounds):
        for fmt in args.formats:
            T = prepared[fmt]
            for th in args.threads:
                with sk.num_threads(th):
                    w = time.perf_counter()
                    model = _fit(X, R, args.iters, fmt)
                    runs[(fmt, "cpals", th)].append(time.perf_counter() - w)
                    bits[(fmt, th)] = _bits(model)
                    Ms = []
                    for m in range(X.ndim):
                        w = time.perf_counter()
                        Ms.append(be.mttkrp(T, U, m))
                        runs[(fmt, f"mttkrp {m}", th)].append(time.perf_counter() - w)
                    grams = [be.gram(u) for u in U]
                    w = time.perf_counter()
                    with be.compute_scope():
                        for m in range(X.ndim):
                            _, _, grams[m] = be.als_update(Ms[m], grams, m)
                    runs[(fmt, "dense", th)].append(time.perf_counter() - w)
        loads.append(_load())
        print(f"  round {rnd + 1}/{args.rounds} done, load {loads[-1]:.2f}", file=sys.stderr,
              flush=True)
    phase_rows = []
    alto = [T for T in prepared.values() if T.name == "alto"]
    if args.phases and alto:
        with be.compute_scope():
            phase_rows = phases(be, alto[0], [np.ascontiguousarray(u) for u in U],
                                args.threads, max(3, args.rounds))
        loads.append(_load())

    if probes:
        probes.append(core_probe(max(args.threads)))
    t0 = args.threads[0]
    rows = []
    for fmt in args.formats:
        T = prepared[fmt]
        paths = ([T.conflict_for(m) for m in range(X.ndim)] if T.name == "alto" else
                 ["coo"] * X.ndim)
        for w in what:
            base = min(runs[(fmt, w, t0)])
            row = {"format": fmt, "storage": T.name, "what": w, "paths": paths,
                   "times_s": {th: min(runs[(fmt, w, th)]) for th in args.threads},
                   "all_s": {th: runs[(fmt, w, th)] for th in args.threads}}
            row["speedup"] = {th: base / row["times_s"][th] for th in args.threads}
            if w == "cpals":
                row["same_bits"] = all(bits[(fmt, th)] == bits[(fmt, t0)] for th in args.threads)
                row["model_sha1"] = hashlib.sha1(bits[(fmt, t0)]).hexdigest()
            rows.append(row)

    print(f"\nCP-ALS, {X.nnz:,} nonzeros {tuple(X.shape)}, Pareto({args.alpha:g}) coordinates "
          f"(scale {args.scale:g}, {int(args.draws):,} draws"
          f"{'' if not args.no_scatter else ', not scattered'}), R = {R}, {args.iters} "
          f"iterations, best of {args.rounds}; {cpu_model()}, {os.cpu_count()} CPUs, load "
          f"average {min(loads):.2f}-{max(loads):.2f}"
          + (f", in-cache probe x{probes[0]:.2f} before / x{probes[1]:.2f} after"
             if probes else ""))
    print("heaviest row / ten heaviest rows per mode: "
          + ", ".join(f"{a:.1%} / {b:.1%}" for a, b in shares) + f"; built in {build_s:.2f} s\n")
    head = ["format", "what"] + [f"{th} thr ms" for th in args.threads] + \
        [f"x{th}" for th in args.threads[1:]] + ["same bits"]
    body = []
    for r in rows:
        fmt = r["format"] + ("" if r["format"] == r["storage"] else f" ({r['storage']})")
        what_s = r["what"] + (f" [{r['paths'][int(r['what'][-1])]}]"
                              if r["what"].startswith("mttkrp") else "")
        body.append([fmt, what_s] + [f"{r['times_s'][th] * 1e3:.1f}" for th in args.threads]
                    + [f"{r['speedup'][th]:.2f}" for th in args.threads[1:]]
                    + [("yes" if r["same_bits"] else "NO") if "same_bits" in r else ""])
    print(md_table(head, body))
    if phase_rows:
        print("\nALTO's MTTKRP by phase (ms; busy: per thread; auto = the path format='auto' "
              "takes)\n")
        body = []
        for r in phase_rows:
            body.append([r["mode"], r["path"] + (" (auto)" if r["auto"] else ""), r["threads"],
                         f"{r['total_s'] * 1e3:.2f}", f"{r['zero_s'] * 1e3:.2f}",
                         f"{r['parts_s'] * 1e3:.2f}",
                         " / ".join(f"{b * 1e3:.2f}" for b in r["parts_busy_s"]),
                         f"{r['merge_s'] * 1e3:.2f}",
                         " / ".join(f"{b * 1e3:.2f}" for b in r["merge_busy_s"]), r["waves"]])
        print(md_table(["mode", "path", "threads", "total", "zero", "partitions",
                        "busy", "merge", "busy", "waves"], body))
    if args.out:
        write_report(plain({"args": vars(args), "package": os.path.dirname(sk.__file__),
                            "nnz": X.nnz, "shape": X.shape,
                            "top_row_shares": shares, "cpu": cpu_model(),
                            "load_averages": loads, "core_probe": probes, "rows": rows,
                            "phases": phase_rows}),
                     args.out)


if __name__ == "__main__":
    main()
