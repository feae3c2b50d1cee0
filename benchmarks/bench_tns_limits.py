"""Memory of ``load_tns`` on hostile input: a line that never ends, a gzip bomb of blanks.

Each case runs in a fresh Python process and reports the outcome, the time and the peak
resident memory of that process, next to a well-formed file of the same order of size::

    python benchmarks/bench_tns_limits.py              # 64 MiB per case
    python benchmarks/bench_tns_limits.py --mib 512    # the sizes of the original reports

With the default ``max_line_length`` (1 MiB) every hostile case stops at its first block with a
ValueError naming the file and line, in memory bounded by the block size (16 MiB) plus the line
limit, whatever ``--mib`` is.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

CASE = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[3])
from sktensor_fast import load_tns
t = time.perf_counter()
try:
    limit = {} if sys.argv[2] == "default" else {
        "max_line_length": None if sys.argv[2] == "none" else int(sys.argv[2])}
    X = load_tns(sys.argv[1], **limit)
    outcome = f"{X.nnz} nonzeros, {X.ndim} modes"
except ValueError as exc:
    outcome = "ValueError: " + str(exc).split(": ", 1)[-1][:60]
print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - t,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def write_cases(folder, mib):
    unit = 1 << 20
    paths = {}
    p = os.path.join(folder, "ones_no_newline.tns")
    with open(p, "wb") as f:
        for _ in range(mib):
            f.write(b"1 " * (unit // 2))
    paths["'1 1 1 ...' without a line break"] = p
    p = os.path.join(folder, "spaces.tns.gz")
    with gzip.open(p, "wb", compresslevel=9) as f:
        for _ in range(mib):
            f.write(b" " * unit)
    paths["gzip of blanks only"] = p
    p = os.path.join(folder, "normal.tns")
    line = b"12 345 6789 1.5\n"
    with open(p, "wb") as f:
        for _ in range(mib):
            f.write(line * (unit // len(line)))
    paths["well-formed lines (repeated)"] = p
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=64, help="uncompressed size of every case")
    ap.add_argument("--max-line-length", default="default",
                    help="load_tns(max_line_length=...), 'none' for no limit; by default the "
                         "argument is not passed (so the script runs on any version)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, path in write_cases(folder, args.mib).items():
            r = subprocess.run([sys.executable, "-c", CASE, path, args.max_line_length, root],
                               capture_output=True, text=True)
            if r.returncode:
                res = {"outcome": f"exit status {r.returncode}", "seconds": None,
                       "peak_rss_mib": None}
            else:
                res = json.loads(r.stdout)
            res.update(case=name, mib=args.mib, compressed_mib=os.path.getsize(path) / 2 ** 20)
            rows.append(res)
    with open("/proc/loadavg") if os.path.exists("/proc/loadavg") else open(os.devnull) as f:
        load = f.read().split()[:3]
    print(f"load_tns, max_line_length={args.max_line_length}, {args.mib} MiB per case, "
          f"{os.cpu_count()} CPUs, load average {' '.join(load)}\n")
    print("| case | file MiB | outcome | seconds | peak RSS MiB |\n|---|---|---|---|---|")
    for r in rows:
        secs = "-" if r["seconds"] is None else f"{r['seconds']:.2f}"
        rss = "-" if r["peak_rss_mib"] is None else f"{r['peak_rss_mib']:.0f}"
        print(f"| {r['case']} | {r['compressed_mib']:.1f} | {r['outcome']} | {secs} | {rss} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_average": load, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
