"""The suite's plots: one PNG per section of a ``benchmarks.json`` report."""
import numpy as np

from . import contention
from . import e2e as e2e_mod
from . import gpu as gpu_mod
from . import stream as stream_mod

__all__ = ["make_plots"]


def make_plots(report, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    files = []
    title = f"{report['machine']['cpu']} ({report['machine']['cores_available']} cores)"

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(outdir / name, dpi=110)
        plt.close(fig)
        files.append(name)

    st = report["stream"].get("rows", [])
    st = [r for r in st if "GBs" in r]
    if st:
        fig, ax = plt.subplots(figsize=(7, 4))
        combos = list(dict.fromkeys((r["device"], r["threads"]) for r in st))
        w = 0.8 / len(combos)
        for i, (d, t) in enumerate(combos):
            vals = [next(r["GBs"] for r in st if (r["device"], r["threads"]) == (d, t)
                         and r["op"] == op) for op in stream_mod.OPS]
            ax.bar(np.arange(4) + i * w, vals, w,
                   label=f"{d}" + (f", {t} thread{'s' if t != 1 else ''}"
                                   if t is not None else ""))
        ax.set_xticks(np.arange(4) + w * (len(combos) - 1) / 2, stream_mod.OPS)
        ax.set_ylabel("GB/s")
        ax.set_title(f"STREAM, {title}", fontsize=9)
        ax.legend(fontsize=8)
        save(fig, "stream.png")
    kr = report["kernels"].get("rows", [])
    kr = [r for r in kr if r.get("frac_triad") is not None]
    if kr:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        tensors = list(dict.fromkeys(r["tensor"] for r in kr))
        combos = list(dict.fromkeys((r["device"], r["format"]) for r in kr))
        w = 0.8 / len(combos)
        for ax, kernel in zip(axes, ("mttkrp", "phi")):
            for i, c in enumerate(combos):
                vals = [100 * np.mean([r["frac_triad"] for r in kr if r["tensor"] == t
                                       and (r["device"], r["format"]) == c
                                       and r["kernel"] == kernel] or [np.nan])
                        for t in tensors]
                bars = ax.bar(np.arange(len(tensors)) + i * w, vals, w,
                              label=f"{c[0]} / {c[1]}", color=f"C{i}")
                for b, t in zip(bars, tensors):   # hatched: fits in the last-level cache
                    if any(r.get("in_cache") for r in kr if r["tensor"] == t
                           and (r["device"], r["format"]) == c):
                        b.set_hatch("//")
                        b.set_edgecolor("white")
            ax.set_xticks(np.arange(len(tensors)) + w * (len(combos) - 1) / 2, tensors,
                          rotation=30, ha="right", fontsize=8)
            ax.set_title(("MTTKRP" if kernel == "mttkrp" else "CP-APR Φ")
                         + " (mean over modes; hatched: fits in the LLC)", fontsize=9)
            ax.set_ylabel("% of STREAM triad (byte model)")
        axes[0].legend(fontsize=8)
        save(fig, "kernels.png")
    fr = [r for r in report["fits"].get("rows", []) if "s_per_iter" in r]
    if fr:
        problems = list(dict.fromkeys((r["problem"], r["tensor"]) for r in fr))
        ncol = min(4, len(problems))
        nrow = -(-len(problems) // ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(3.6 * ncol, 3.8 * nrow), squeeze=False)
        for ax in axes.ravel()[len(problems):]:
            ax.axis("off")
        for ax, (p, t) in zip(axes.ravel(), problems):
            g = [r for r in fr if (r["problem"], r["tensor"]) == (p, t)]
            labels = [f"{r['library']} {r['variant'].split(' ')[0]}, {r['threads']}t" for r in g]
            vals = [max(r["s_per_iter"], 1e-6) for r in g]
            ax.barh(range(len(g)), vals, color=["C0" if r["library"] == "sktensor_fast"
                                                else "C1" for r in g])
            ax.set_xscale("log")
            ax.set_xlim(10 ** np.floor(np.log10(min(vals) / 2)),
                        10 ** np.ceil(np.log10(max(vals) * 2)))
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_yticks(range(len(g)), labels, fontsize=6)
            ax.invert_yaxis()
            ax.set_title(f"{p} on {t}", fontsize=8)
            ax.set_xlabel("s / iteration", fontsize=8)
        save(fig, "fits.png")
    sc = [r for r in report["scaling"].get("nnz", {}).get("rows", []) if "seconds" in r]
    if sc:
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for c in dict.fromkeys((r["device"], r["format"], r["kernel"]) for r in sc):
            g = [r for r in sc if (r["device"], r["format"], r["kernel"]) == c]
            ax.loglog([r["nnz"] for r in g], [r["seconds"] for r in g], "o-",
                      label=f"{c[0]}/{c[1]} {'MTTKRP' if c[2] == 'mttkrp' else 'Φ'}")
        x = np.array([sc[0]["nnz"], max(r["nnz"] for r in sc)], dtype=float)
        y0 = min(r["seconds"] for r in sc if r["nnz"] == sc[0]["nnz"])
        ax.loglog(x, y0 * x / x[0], "k:", label="linear")
        ax.set_xlabel("nonzeros (NELL-2 shape)")
        ax.set_ylabel("seconds, all modes")
        ax.set_title(f"time vs nonzeros, {report['scaling']['threads']} threads", fontsize=9)
        ax.legend(fontsize=7)
        save(fig, "scaling_nnz.png")
    tr = report["scaling"].get("threads_sweep", {}).get("rows", [])
    if tr:
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for c in dict.fromkeys((r["format"], r["kernel"]) for r in tr):
            g = sorted((r for r in tr if (r["format"], r["kernel"]) == c),
                       key=lambda r: r["threads"])
            ax.loglog([r["threads"] for r in g], [r["seconds"] for r in g], "o-",
                      label=f"{c[0]} {'MTTKRP' if c[1] == 'mttkrp' else 'Φ'}")
            ax.loglog([g[0]["threads"], g[-1]["threads"]],
                      [g[0]["seconds"], g[0]["seconds"] * g[0]["threads"] / g[-1]["threads"]],
                      ":", color="grey")
        ts = sorted({r["threads"] for r in tr})
        ax.set_xticks(ts, [str(t) for t in ts])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("threads")
        ax.set_ylabel("seconds, all modes")
        ax.set_title(f"time vs threads ({report['scaling']['threads_sweep']['nnz']:,} nnz; "
                     "dotted: ideal)", fontsize=9)
        ax.legend(fontsize=7)
        save(fig, "scaling_threads.png")
    if report.get("contention", {}).get("rows"):
        fig = contention.plot(report["contention"], outdir, plt)
        if fig is not None:
            save(fig, "contention.png")
    if "devices" in report.get("e2e", {}):
        e2e_mod.plot_e2e(report, outdir, save)
    if report.get("gpu", {}).get("rows"):
        name = gpu_mod.plot(report["gpu"], outdir, title)
        if name:
            files.append(name)
    return files
