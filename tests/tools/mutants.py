"""Mutation testing of selected modules: do the tests fail when the code is wrong?

Each mutant is one small change of one target file (a flipped comparison, a swapped operator,
a constant off by one, a negated condition, a deleted ``raise``, a ``return None``); the
target's test files run against it (``-x -q -n 0 -p no:cacheprovider``, with a timeout).  A
mutant is *killed* when the tests fail (or time out), *survived* when they pass: then either
a test is missing, or the mutant is equivalent (behaves like the original).

Python targets are mutated on the syntax tree (``ast``, operators applied one at a time; the
file is rewritten by ``ast.unparse``, so mutant 0, the unparsed original, must pass); C headers
are mutated textually, one operator of one code line at a time.  The C headers are tested
through the OpenCL backend (PoCL compiles the header again at run time, no rebuild of the CPU
modules); those targets are skipped when no OpenCL device is usable.

The file under test is restored after every mutant (also on Ctrl-C); ``git status`` must be
clean afterwards.

Run (from the repository root, with the compiled modules built in place)::

    PYTHONPATH=$PWD python tests/tools/mutants.py                  # every target, sampled
    PYTHONPATH=$PWD python tests/tools/mutants.py gcp_plan io -n 40
    PYTHONPATH=$PWD python tests/tools/mutants.py --list gcp_plan  # the mutants, not run
    PYTHONPATH=$PWD python tests/tools/mutants.py --only gcp_plan:12,gcp_plan:30

Options: ``-n`` mutants per target (sampled round-robin over the functions with a fixed seed,
so the numbering is stable while the file does not change), ``--timeout`` seconds per run,
``--out`` a JSON-lines file of the results (default ``sktf_mutants.jsonl`` in the
temporary directory), ``--tests`` other test files than the target's, ``--cpu-tests`` (C
targets) test files run with the CPU modules rebuilt in place for each mutant (and rebuilt
from the clean header afterwards).  Mutant ids (``target:index``) index the full, unsampled
list of ``--list``.

Results (one run of the targets below, 2026-11; "before": with the tests as they were;
"after": the survivors run again once the tests were strengthened):

Mutants per target: sampled (``-n 30``; 20 for binary, text; 15 for apr_rows_py), run with
the target's own test files ("before"); every survivor was then run again with the tests
strengthened ("after").  C headers ran through OpenCL (PoCL); their survivors also with the
CPU modules rebuilt (``--cpu-tests tests/estimators/test_gcp.py``).  The "before" runs of io and binary
used tests/data/test_io.py and tests/data/test_binary.py only; their targets now add
tests/data/test_writing.py, which holds the tests of writing to FIFOs and devices.

==============  ====  ======  ========  ==================  ==========  ============
target          run   killed  survived  killed after        equivalent  not killed
==============  ====  ======  ========  ==================  ==========  ============
gcp_plan        30    16      14        13                  1           0
gcp_sample_h    30    16      14 (9*)   4                   1 (+9*)     0
loss_table      26    21      5         5                   0           0
losses          30    19      11        9                   2           0
apr_row_h       30    24      6         1                   3           2
apr_rows_py     15    10      5         1                   4           0
io              30    23      7         3                   4           0
binary          20    12      8         6                   2           0
text            20    13      7         3                   4           0
==============  ====  ======  ========  ==================  ==========  ============

\* in the CPU-only prefetch hints of sktf_gcp_sample.h (``sktf_gcp_sample_touch``,
``sktf_gcp_touch_ahead``, ``sktf_gcp_touch_first``): not compiled for OpenCL, no effect on
the samples by design; the C mutants now leave ``#ifndef __OPENCL_VERSION__`` out.

Killed by new or strengthened tests:

- gcp_plan 1, 18, 31, 38, 40, 41, 54, 61, 62, 73, 79, 92, 103 (boundaries of
  ``linear_index`` at 2**63 entries, weights of ``sampler_plan`` without samples,
  ``zero_list_mode`` at density 0.5, ``bucket_layout``, pyttb's ``default_counts``,
  ``check_loss`` at ``N_LOSSES``, ``loss_code`` of a user loss): the plan tests of
  tests/estimators/test_gcp.py (``test_sampler_plan_counts_and_weights`` and the six next to it).
- gcp_sample_h 44 (zero rank search starting right of nonzero 0): zeros before the first
  nonzero in ``test_stratified_zeros_are_zeros_whatever_the_path`` (test_gcp.py) and
  ``test_same_zero_samples_as_cpu_on_every_path`` (test_opencl_gcp.py).  35, 55, 59
  (one coordinate too many compared / copied / drawn) are killed by the CPU tests once the
  CPU modules are rebuilt.
- loss_table 9, 11, 18 (lower bound 1 for rayleigh, gamma, zt_poisson):
  ``test_table_is_the_documented_table``; 19, 23 (parameter 0 accepted): 0 added to the
  refused parameters of ``test_loss_classes_are_built_from_the_table``.
- losses 36, 39 (repr), 45, 50, 51 (counts warning, integer data), 60 (loss protocol),
  73, 74 (shape of a user loss's result), 80 (parameter with a loss object): five tests in
  tests/estimators/test_loss_table.py.
- apr_row_h 33 (active threshold ``sqrt(1 + ...)``): ``test_row_solve_matches_cpu_with_a_
  large_eps_active``.  apr_rows_py 61 (device factor of integers accepted): two cases more
  in ``test_bad_inputs_are_clear_errors``.
- io 19 (a file object read past its first 64 KiB): ``test_stream_longer_than_one_read``;
  145 (mode names): ``test_write_labels_refuses_names_unfit_for_a_file_name``; 97 (FIFOs
  and character devices refused) by test_writing.py.
- binary 20 (``_chunks``), 72 (short ``pwrite``), 267 (identity), 272 (``read_rows``
  default), 303 (``mmap``): five tests in tests/data/test_binary.py; 69 (FIFO padding) by
  test_writing.py.  The short-write test also found the header written by one unchecked
  ``os.pwrite``; it goes through ``_pwrite_all`` now.
- text 134 (BOM of a mapped file), 282 (file objects inflated): two tests in
  tests/data/test_io.py; 176 (``feed_bytes``) by tests/distributed/test_distributed.py
  (``--tests tests/distributed/test_distributed.py``).

Equivalent:

- gcp_plan 48: ``max(1, ...)`` -> ``max(2, ...)`` in ``bucket_layout``: nnz >= 64 there, so
  the bit length is >= 6.
- gcp_sample_h 34: ``lo < nnz`` -> ``<=`` (look-up without linear index): a read one row
  past the nonzeros for a key above all of them, which cannot match it.
- apr_row_h 30 (``a > k`` -> ``>=`` in the KKT maximum), 37 (``<`` -> ``<=`` in a minimum):
  ties give the same value; 233 (``rho < 0.25`` -> ``<=``): an exact tie of a float ratio.
- apr_rows_py 6, 7 (work-group sizes 257 / 65: the reduction rounds down to a power of two,
  the launch size does not change results), 22 (a cached buffer of the same size
  reallocated), 110 (early return for rank 0 / no rows: the backend returns before).
- losses 0 (user code -2 instead of -1: any negative code is a user loss), 2
  (``reshape(-2)``: NumPy takes any negative size as the unknown one).
- io 12, 23 (read-ahead sizes), 34 (7 bytes peeked: the magics are at most 6), 75 (a branch
  of ``_iter_blocks`` for ``max_line_length``, which its only caller never passes).
- binary 6 (copy chunk size), 81 (sequential and threaded copies swapped: the same jobs).
- text 80 (growth at ``rows == capacity`` too), 292 (7 bytes read for the magics), 360
  (rows per write buffer), 272 (line count after a last line without a break: no line
  follows it).

Not killed: apr_row_h 58 (``count == 1`` -> ``== 2`` on the uphill branch of the line
search: needs a first step accepted as a descent and a halved one going uphill) and 284
(``r <= R`` in the last L-BFGS update: writes one entry past the direction vector, into
scratch that is written again before it is read).
"""
import argparse
import ast
import copy
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = "sktensor_fast"

#: target -> (file, kind, functions (None: all), test files (with an optional -k))
TARGETS = {
    "gcp_plan": (f"{PKG}/backends/gcp_plan.py", "py",
                 ["linear_index", "sampler_plan", "zero_list_mode", "bucket_layout",
                  "default_counts", "check_loss", "loss_code"],
                 ["tests/estimators/test_gcp.py", "tests/kernels/opencl/test_opencl_gcp.py"]),
    "gcp_sample_h": (f"{PKG}/include/sktf_gcp_sample.h", "c", None,
                     ["tests/kernels/opencl/test_opencl_gcp.py"]),
    "loss_table": (f"{PKG}/_loss_table.py", "py", None,
                   ["tests/estimators/test_loss_table.py", "tests/estimators/test_gcp.py"]),
    "losses": (f"{PKG}/decomposition/losses.py", "py", None,
               ["tests/estimators/test_loss_table.py", "tests/estimators/test_gcp.py"]),
    "apr_row_h": (f"{PKG}/include/sktf_apr_row.h", "c", None,
                  ["tests/kernels/opencl/test_opencl_cpapr.py"]),
    "apr_rows_py": (f"{PKG}/backends/opencl/cpapr_rows.py", "py", None,
                    ["tests/kernels/opencl/test_opencl_cpapr.py"]),
    "io": (f"{PKG}/io.py", "py", None, ["tests/data/test_io.py", "tests/data/test_writing.py"]),
    "binary": (f"{PKG}/binary.py", "py", None, ["tests/data/test_binary.py",
                                                   "tests/data/test_writing.py"]),
    "text": (f"{PKG}/_native/text.py", "py", None, ["tests/data/test_io.py"]),
}

# ---------------------------------------------------------------------------- Python mutants

_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
        ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn,
        ast.NotIn: ast.In}
_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
        ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv, ast.LShift: ast.RShift,
        ast.RShift: ast.LShift, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
        ast.Pow: ast.Mult}


def _docstring_nodes(tree):
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _py_points(tree, functions):
    """(path to node, operator, description, function) of every mutation of ``tree``."""
    docs = _docstring_nodes(tree)
    points = []

    def visit(node, path, func, in_fstring):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name if func is None else func
        in_fstring = in_fstring or isinstance(node, ast.JoinedStr)
        keep = functions is None or func in functions
        line = getattr(node, "lineno", 0)
        if keep and not in_fstring:
            if isinstance(node, ast.Compare):
                for i, op in enumerate(node.ops):
                    if type(op) in _CMP:
                        points.append((path, ("cmp", i), f"line {line}: {type(op).__name__} -> "
                                       f"{_CMP[type(op)].__name__}", func))
            elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _BIN:
                points.append((path, ("bin",), f"line {line}: {type(node.op).__name__} -> "
                               f"{_BIN[type(node.op)].__name__}", func))
            elif isinstance(node, ast.BoolOp):
                points.append((path, ("bool",), f"line {line}: "
                               f"{type(node.op).__name__} swapped", func))
            elif (isinstance(node, ast.Constant) and type(node.value) in (int, float)
                  and id(node) not in docs):
                points.append((path, ("const",), f"line {line}: {node.value!r} + 1", func))
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                points.append((path, ("unnot",), f"line {line}: 'not' removed", func))
            elif isinstance(node, (ast.If, ast.While)):
                points.append((path, ("negate",), f"line {line}: condition negated", func))
            elif isinstance(node, ast.Raise):
                points.append((path, ("noraise",), f"line {line}: raise -> pass", func))
            elif (isinstance(node, ast.Return) and node.value is not None
                  and not (isinstance(node.value, ast.Constant) and node.value.value is None)):
                points.append((path, ("retnone",), f"line {line}: return None", func))
        for field, value in ast.iter_fields(node):
            if isinstance(value, list):
                for i, v in enumerate(value):
                    if isinstance(v, ast.AST):
                        visit(v, path + ((field, i),), func, in_fstring)
            elif isinstance(value, ast.AST):
                visit(value, path + ((field, None),), func, in_fstring)

    visit(tree, (), None, False)
    return points


def _resolve(tree, path):
    parent, node = None, tree
    for field, i in path:
        parent = (node, field, i)
        node = getattr(node, field) if i is None else getattr(node, field)[i]
    return parent, node


def _py_mutant(src, point):
    tree = ast.parse(src)
    path, (op, *arg), _, _ = point
    parent, node = _resolve(tree, path)

    def replace(new):
        owner, field, i = parent
        if i is None:
            setattr(owner, field, new)
        else:
            getattr(owner, field)[i] = new

    if op == "cmp":
        node.ops[arg[0]] = _CMP[type(node.ops[arg[0]])]()
    elif op == "bin":
        node.op = _BIN[type(node.op)]()
    elif op == "bool":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif op == "const":
        node.value = node.value + 1
    elif op == "unnot":
        replace(node.operand)
    elif op == "negate":
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
    elif op == "noraise":
        replace(ast.Pass())
    elif op == "retnone":
        node.value = ast.Constant(value=None)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


# --------------------------------------------------------------------------------- C mutants

# one textual swap per match; the look-arounds leave ->, <<, >>, ++, --, +=, -= alone
_C_OPS = [
    (r"(?<![<>=!-])<(?![<=])", "<="), (r"<=", "<"), (r"(?<![->])>(?![>=])", ">="),
    (r"(?<!>)>=", ">"), (r"==", "!="), (r"!=", "=="), (r"&&", "||"), (r"\|\|", "&&"),
    (r"(?<![+\w(\[e])\+(?![+=])", "-"), (r"(?<![-\w(\[eE])-(?![->=])", "+"),
    (r"(?<=\w) \* (?=\w)", " / "),
    (r"(?<![\w.])(\d+)(?![\w.])", None),   # integer constant + 1
]


def _c_code_lines(text):
    """Indices of lines worth mutating: code in function bodies, no comments or directives."""
    out, in_comment, cpu_only = [], False, 0
    for i, line in enumerate(text.split("\n")):
        s = line.strip()
        # skip what OpenCL does not compile (#ifndef __OPENCL_VERSION__ ... #endif)
        if cpu_only:
            if s.startswith("#if"):
                cpu_only += 1
            elif s.startswith("#endif"):
                cpu_only -= 1
            continue
        if re.match(r"#\s*ifndef\s+__OPENCL_VERSION__", s):
            cpu_only = 1
            continue
        if in_comment:
            if "*/" in s:
                in_comment = False
            continue
        if s.startswith("/*"):
            in_comment = "*/" not in s
            continue
        if not s or s.startswith(("//", "#", "*")) or not line.startswith(" "):
            continue
        out.append(i)
    return out


def _strip_comment(line):
    cut = len(line)
    for mark in ("/*", "//"):
        j = line.find(mark)
        if j >= 0:
            cut = min(cut, j)
    return line[:cut]


def _c_points(text):
    lines = text.split("\n")
    points = []
    func = "?"
    for i, line in enumerate(lines):
        m = re.match(r"SKTF_INLINE\s+[\w\s\*]+?(\w+)\s*\(", line)
        if m:
            func = m.group(1)
    code = set(_c_code_lines(text))
    func = "?"
    for i, line in enumerate(lines):
        m = re.match(r"(?:SKTF_INLINE|static|inline)?\s*[\w\s\*]+?\b(sktf_\w+)\s*\(", line)
        if m and not line.startswith(" "):
            func = m.group(1)
        if i not in code:
            continue
        body = _strip_comment(line)
        for k, (pat, rep) in enumerate(_C_OPS):
            for mm in re.finditer(pat, body):
                new = str(int(mm.group(1)) + 1) if rep is None else rep
                points.append(((i, mm.start(), mm.end(), new),
                               ("c",), f"line {i + 1}: {mm.group(0)!r} -> {new!r}", func))
    return points


def _c_mutant(text, point):
    (i, a, b, new), _, _, _ = point
    lines = text.split("\n")
    lines[i] = lines[i][:a] + new + lines[i][b:]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ driver

def mutants_of(target):
    path, kind, functions, _ = TARGETS[target]
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        src = f.read()
    if kind == "py":
        return src, _py_points(ast.parse(src), functions)
    return src, _c_points(src)


def sample(points, n, seed=0):
    """Indices of up to ``n`` points, round-robin over the functions (stratified)."""
    by_func = {}
    for i, p in enumerate(points):
        by_func.setdefault(p[3], []).append(i)
    rng = random.Random(seed)
    for v in by_func.values():
        rng.shuffle(v)
    chosen, queues = [], [v for _, v in sorted(by_func.items(), key=lambda kv: str(kv[0]))]
    while len(chosen) < n and any(queues):
        for q in queues:
            if q and len(chosen) < n:
                chosen.append(q.pop())
    return sorted(chosen)


def _drop_pyc(path):
    d = os.path.join(os.path.dirname(path), "__pycache__")
    stem = os.path.splitext(os.path.basename(path))[0] + "."
    if os.path.isdir(d):
        for name in os.listdir(d):
            if name.startswith(stem):
                os.remove(os.path.join(d, name))


def run_tests(tests, timeout):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-n", "0",
           "-p", "no:cacheprovider"]
    t = time.time()
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return "killed", "timeout", time.time() - t
    tail = (r.stdout.strip().splitlines() or [""])[-1]
    if r.returncode == 0:
        return "survived", tail, time.time() - t
    if r.returncode == 5:           # no test collected
        return "error", tail, time.time() - t
    return "killed", tail, time.time() - t


def rebuild(timeout):
    """Build the compiled modules in place (those including a changed header rebuild)."""
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-j", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return r.returncode == 0


def run_one(target, index, src, points, timeout, log, cpu_tests=None):
    path, kind, _, tests = TARGETS[target]
    if cpu_tests and kind == "c":
        tests = list(tests) + list(cpu_tests)
    full = os.path.join(ROOT, path)
    point = points[index]
    text = _py_mutant(src, point) if kind == "py" else _c_mutant(src, point)
    try:
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
        if kind == "py":
            _drop_pyc(full)
        if cpu_tests and kind == "c" and not rebuild(600):
            status, tail, secs = "killed", "does not compile", 0.0
        else:
            status, tail, secs = run_tests(tests, timeout)
    finally:
        with open(full, "w", encoding="utf-8") as f:
            f.write(src)
        if kind == "py":
            _drop_pyc(full)
        if cpu_tests and kind == "c":
            rebuild(600)    # the clean modules again
    rec = {"id": f"{target}:{index}", "function": point[3], "mutation": point[2],
           "status": status, "tests": tail, "seconds": round(secs, 1)}
    log.write(json.dumps(rec) + "\n")
    log.flush()
    print(f"{rec['id']:>18} {status:9} {point[3]}: {point[2]}  [{tail}]", flush=True)
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("targets", nargs="*", help=f"default: all of {', '.join(TARGETS)}")
    ap.add_argument("-n", type=int, default=60, help="mutants per target (default 60)")
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "sktf_mutants.jsonl"))
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    ap.add_argument("--only", default="", help="comma-separated mutant ids target:index")
    ap.add_argument("--tests", default="",
                    help="comma-separated test files (and options) instead of the target's")
    ap.add_argument("--cpu-tests", default="",
                    help="C targets: also rebuild the CPU modules in place for each mutant and "
                         "run these comma-separated test files (slow: ~30 s a build)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the check that the unmutated (unparsed) targets pass")
    args = ap.parse_args(argv)
    if args.only:
        wanted = {}
        for item in args.only.split(","):
            t, i = item.strip().rsplit(":", 1)
            wanted.setdefault(t, []).append(int(i))
    else:
        wanted = {t: None for t in (args.targets or TARGETS)}
    if args.tests:
        for t in TARGETS:
            TARGETS[t] = TARGETS[t][:3] + (args.tests.split(","),)
    summary = {}
    with open(args.out, "a", encoding="utf-8") as log:
        for target, indices in wanted.items():
            src, points = mutants_of(target)
            if indices is None:
                indices = sample(points, args.n)
            if args.list:
                for i in indices:
                    print(f"{target}:{i}  {points[i][3]}: {points[i][2]}")
                continue
            path, kind, _, tests = TARGETS[target]
            if kind == "py" and not args.no_baseline:
                full = os.path.join(ROOT, path)
                try:
                    with open(full, "w", encoding="utf-8") as f:
                        f.write(ast.unparse(ast.parse(src)) + "\n")
                    _drop_pyc(full)
                    status, tail, _ = run_tests(tests, args.timeout)
                finally:
                    with open(full, "w", encoding="utf-8") as f:
                        f.write(src)
                    _drop_pyc(full)
                if status != "survived":
                    print(f"{target}: the unparsed original fails its tests ({tail}); skipped")
                    continue
            counts = {"killed": 0, "survived": 0, "error": 0}
            for i in indices:
                cpu_tests = [t for t in args.cpu_tests.split(",") if t]
                counts[run_one(target, i, src, points, args.timeout, log,
                               cpu_tests)["status"]] += 1
            summary[target] = counts
            print(f"== {target}: {len(indices)} run, {counts}", flush=True)
    for t, c in summary.items():
        print(f"{t:14} run {sum(c.values()):3}  killed {c['killed']:3}  "
              f"survived {c['survived']:3}")


if __name__ == "__main__":
    main()
