"""Section ``shapes`` of the suite: the shapes where the CPU path is measured against its
floor and its peers beyond large, even tensors.

Each case is an experiment script of ``benchmarks/experiments/`` run in a process of its own
(its threads set by the script), with arguments sized by the suite's preset; its JSON report
is kept whole in the section's result and its printed tables are shown:

- ``tiny``: CP-ALS per iteration on the embedded flights-routes tensor (15,188 nonzeros,
  5 modes) at every thread count, against pygenten where ``--genten-python`` finds it
  (``bench_tiny.py``);
- ``skewed``: CP-ALS and its MTTKRPs at every thread count on power-law (Pareto 1.2)
  coordinates in all three modes (``bench_skewed.py``);
- ``apr_tiny``: CP-APR MU per outer iteration on a count tensor with two tiny modes
  (24 x 21 x 2340, a synthetic stand-in), against pyttb's ``cp_apr`` when installed
  (``bench_apr_tiny.py``);
- ``gcp_defaults``: the default Poisson GCP fit against ``CPAPR(solver="pdnr")`` on
  flights-routes (``bench_defaults.py``).

Only on request (``--sections shapes``): the cases take minutes at ``--quick``.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

__all__ = ["section_shapes", "CASES", "case_args"]

#: case -> (script, the option that names its JSON report)
CASES = {
    "tiny": ("bench_tiny.py", "--json"),
    "skewed": ("bench_skewed.py", "--out"),
    "apr_tiny": ("bench_apr_tiny.py", "--json"),
    "gcp_defaults": ("bench_defaults.py", "--out"),
}


def case_args(case, mode, threads):
    """The script's arguments for the suite's preset ``mode`` and thread counts."""
    ts = [str(t) for t in threads]
    small = mode == "tiny"
    if case == "tiny":
        a = ["--threads", *ts]
        return a + (["--ranks", "5", "--formats", "auto", "--short", "2", "--long", "6",
                     "--repeat", "1", "--no-genten"] if small else
                    ["--ranks", "5", "8", "--repeat", "11" if mode == "full" else "5"])
    if case == "skewed":
        a = ["--threads", *ts]
        return a + (["--shape", "400", "400", "400", "--draws", "20000", "--iters", "1",
                     "--rounds", "1", "--formats", "auto"] if small else
                    ["--rounds", "5" if mode == "full" else "3"])
    if case == "apr_tiny":
        a = ["--threads", *ts]
        return a + (["--shape", "6", "5", "40", "--iters", "1", "--repeat", "1",
                     "--no-pyttb"] if small else
                    ["--repeat", "7" if mode == "full" else "3"])
    if case == "gcp_defaults":
        a = ["--threads", str(max(threads)), "--cases", 'CPAPR(solver="pdnr")',
             'GCP(loss="poisson")']
        return a + (["--seeds", "0"] if small else
                    ["--seeds", "0", "1", "2", "3", "4"] if mode == "full" else
                    ["--seeds", "0", "1", "2"])
    raise ValueError(f"unknown case {case!r}; use one of {sorted(CASES)}")


def _run(case, mode, threads, tmp, timeout):
    script, out_flag = CASES[case]
    path = os.path.join(tmp, case + ".json")
    cmd = [sys.executable, os.path.join(HERE, "experiments", script),
           *case_args(case, mode, threads), out_flag, path]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"took more than {timeout} s", "command": cmd}, ""
    if proc.returncode != 0:
        return {"error": f"exit status {proc.returncode}: {proc.stderr[-2000:]}",
                "command": cmd}, proc.stdout
    with open(path) as f:
        rep = json.load(f)
    return {"command": cmd[1:], "report": rep}, proc.stdout


def _tables(stdout):
    """The Markdown tables a script printed (its other lines dropped), or all it printed
    when it printed none (as a code block)."""
    rows = [ln for ln in stdout.splitlines() if ln.startswith("|")]
    if rows:
        return "\n".join(rows)
    return "```\n" + stdout.strip() + "\n```"


def section_shapes(mode, threads, cases=None, timeout=3600):
    """Run the cases (all by default); returns ``(result, table)``."""
    cases = list(CASES) if cases is None else list(cases)
    res = {"cases": {}, "notes": []}
    parts = []
    with tempfile.TemporaryDirectory(prefix="sktf_shapes_") as tmp:
        for case in cases:
            got, stdout = _run(case, mode, threads, tmp, timeout)
            res["cases"][case] = got
            if "error" in got:
                res["notes"].append(f"{case}: {got['error']}")
                parts.append(f"### {case}\n\nfailed: {got['error'][:300]}")
            else:
                parts.append(f"### {case}\n\n{_tables(stdout)}")
    return res, "\n\n".join(parts)
