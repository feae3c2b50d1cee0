"""The package's modules import each other without a circle.

The graph is read from the source with ``ast``: a module imports ``a.b.c`` and with it the
packages ``a`` and ``a.b`` whose ``__init__`` runs first (except the packages the module itself
lives in, which are being imported already).  Imports at module level run at import time and
must form no cycle at all.  Imports inside functions may only close a cycle through the device
registry (``sktensor_fast/backends/__init__.py``), which imports the backend a device string
names when it is asked for one.
"""
import ast

import pytest

from _reference import ROOT  # noqa: E402 - the repository root

PKG = "sktensor_fast"
#: modules whose function-level imports may point back into what imports them
DISPATCH = {"sktensor_fast.backends"}


def modules():
    found = {}
    for path in sorted((ROOT / PKG).rglob("*")):
        if path.suffix not in (".py", ".pyx") or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_pkg)
    return found


def imports(name, path, is_pkg, known):
    """(module-level targets, function-level targets) of one module."""
    if path.suffix == ".pyx":
        return set(), set()          # Cython: compiled leaves (cimports are not Python imports)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top, lazy = set(), set()

    def resolve(level, module):
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        if level:
            base = base[:len(base) - (level - 1)]
            return ".".join(base + ([module] if module else []))
        return module or ""

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            targets = []
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = resolve(child.level, child.module)
                for a in child.names:
                    full = f"{base}.{a.name}"
                    targets.append(full if full in known else base)
            (lazy if inner else top).update(t for t in targets if t.startswith(PKG))
            visit(child, inner)

    visit(tree, False)
    return top, lazy


def expand(name, targets, known):
    """Every module a set of imports runs: the targets and their parent packages."""
    out = set()
    for t in targets:
        parts = t.split(".")
        for i in range(1, len(parts) + 1):
            m = ".".join(parts[:i])
            if m in known and not (name == m or name.startswith(m + ".")):
                out.add(m)
    return out


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return comps


@pytest.fixture(scope="module")
def graphs():
    known = modules()
    top, full = {}, {}
    for name, (path, is_pkg) in known.items():
        t, lazy = imports(name, path, is_pkg, known)
        top[name] = expand(name, t, known)
        full[name] = top[name] | (set() if name in DISPATCH else expand(name, lazy, known))
    return top, full


def test_no_cycle_at_import_time(graphs):
    top, _ = graphs
    assert cycles(top) == []


def test_no_cycle_through_function_level_imports(graphs):
    _, full = graphs
    assert cycles(full) == []


def test_the_checker_sees_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    known = {"p": None, "p.x": None, "p.y": None}
    assert expand("p.x", {"p.y"}, known) == {"p.y"}          # p is x's own package
    assert expand("q", {"p.y"}, {**known, "q": None}) == {"p", "p.y"}


def test_known_edges_are_seen(graphs):
    top, _ = graphs
    assert "sktensor_fast.backends.cpu.formats" in top["sktensor_fast.backends.cpu.backend"]
    assert "sktensor_fast.backends.cpu._kernels" in top["sktensor_fast.backends.cpu.formats.coo"]
    assert "sktensor_fast.backends.opencl.gcp_ops" in top["sktensor_fast.backends.opencl.backend"]
    assert "sktensor_fast.backends.opencl.tensor" in top["sktensor_fast.backends.opencl.gcp_ops"]


def test_the_cpu_formats_are_the_cpu_backends(graphs):
    """The CPU formats are imported inside backends/cpu only, and import neither the CPU
    backend nor anything outside backends/cpu but the data layer: the backend calls a format,
    a format calls the compiled kernels, nothing calls back."""
    _, full = graphs
    cpu, fmt = "sktensor_fast.backends.cpu", "sktensor_fast.backends.cpu.formats"
    outside = [m for m, targets in full.items() if not m.startswith(cpu + ".")
               and any(t == fmt or t.startswith(fmt + ".") for t in targets)]
    assert outside == []
    for m, targets in full.items():
        if m == fmt or m.startswith(fmt + "."):
            assert f"{cpu}.backend" not in targets, m
            assert not [t for t in targets if t.startswith("sktensor_fast.decomposition")
                        or t.startswith("sktensor_fast.backends.opencl")], m


def test_the_kernel_interface_imports_no_device(graphs):
    """The interface (base.py, its groups and their checks) is what every device implements:
    it imports no device package, not even lazily."""
    _, full = graphs
    for m in ("base", "apr_kernels", "gcp_kernels", "checks"):
        name = f"sktensor_fast.backends.{m}"
        assert name in full
        assert not [t for t in full[name] if t.startswith(("sktensor_fast.backends.cpu",
                                                           "sktensor_fast.backends.opencl",
                                                           "sktensor_fast.distributed"))], m


def test_opencl_programs_are_built_in_one_place():
    """Every OpenCL program of the package is built by program.py (the backend's program
    cache), apart from the device probe's test program: no other module makes a program or a
    kernel object."""
    makers = ("build_program(", ".Program(", ".Kernel(")
    found = []
    for path in sorted((ROOT / PKG / "backends" / "opencl").glob("*.py")):
        if path.name in ("program.py", "device.py"):
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{path.name}: {m}" for m in makers if m in text]
    assert found == []
    probe = (ROOT / PKG / "backends" / "opencl" / "device.py").read_text(encoding="utf-8")
    assert probe.count("build_program(") == 1


def test_opencl_modules_do_not_import_the_cpu_backend(graphs):
    """What the OpenCL backend imports at module level reaches no module of backends/cpu
    except its package (which holds only the pure-Python thread settings)."""
    top, _ = graphs
    seen, todo = set(), ["sktensor_fast.backends.opencl"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(top.get(m, ()))
    assert not [m for m in seen if m.startswith("sktensor_fast.backends.cpu.")]
    assert "sktensor_fast.backends.gcp_plan" in seen


#: hides the compiled CPU kernels (backends/cpu/_*.so): what an install without them sees.
#: The compiled passes of sktensor_fast/_native (coordinate narrowing, sorting by a mode,
#: FROSTT text) stay: they are the data layer's, which every device uses to build a tensor.
_HIDE_CPU_KERNELS = """
import importlib.abc, sys
class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith("sktensor_fast.backends.cpu._"):
            raise ImportError(f"{name} is hidden")
sys.meta_path.insert(0, _Hide())
"""


def _run_without_cpu_kernels(code):
    import subprocess
    import sys
    from _reference import checkout_env
    env = checkout_env()
    return subprocess.run([sys.executable, "-c", _HIDE_CPU_KERNELS + code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_opencl_backend_imports_without_the_cpu_kernels():
    r = _run_without_cpu_kernels(
        "import sktensor_fast.backends.opencl\n"
        "import sktensor_fast\n"
        "assert not sktensor_fast.get_config()['cpu_kernels']\n"
        "try:\n"
        "    sktensor_fast.CPALS(rank=2).fit([[[1.0, 2.0]], [[3.0, 0.0]]])\n"
        "except ImportError as exc:\n"
        "    assert 'compiled CPU kernels' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('the CPU backend ran without its kernels')\n"
        "print('imported')\n")
    assert r.returncode == 0 and "imported" in r.stdout, r.stdout + r.stderr


@pytest.mark.slow
def test_every_estimator_fits_on_opencl_without_the_cpu_kernels():
    from _reference import opencl_backend_or_skip
    opencl_backend_or_skip()
    r = _run_without_cpu_kernels(
        "import warnings\n"
        "import numpy as np\n"
        "from sktensor_fast import CPALS, CPAPR, GCP\n"
        "rng = np.random.default_rng(0)\n"
        "X = ((rng.random((8, 7, 6)) < 0.3) * rng.integers(1, 5, (8, 7, 6))).astype(float)\n"
        "kw = dict(rank=2, max_iter=2, device='opencl', random_state=0)\n"
        "warnings.simplefilter('ignore')\n"
        "for est in (CPALS(**kw), CPAPR(**kw), CPAPR(solver='pdnr', **kw),\n"
        "            GCP(loss='poisson', epoch_iters=5, **kw),\n"
        "            GCP(loss='poisson', solver='lbfgsb', **kw)):\n"
        "    assert np.isfinite(est.fit(X).transform(X)).all()\n"
        "print('fitted')\n")
    assert r.returncode == 0 and "fitted" in r.stdout, r.stdout + r.stderr
