"""Distributed fits: the cases of _mpi_cases.py run under ``mpiexec -n 2`` (CPU backend).

Every case runs in one mpiexec job (bounded by a timeout: a hang fails the cases not reached
instead of blocking the suite); two more jobs check that a job whose process dies of an
exception or is killed ends instead of hanging.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CASES = os.path.join(HERE, "_mpi_cases.py")
NPROCS = 2
JOB_TIMEOUT = 240


def _mpiexec():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None, "mpi4py is not installed (pip install 'sktensor_fast[mpi]')"
    cand = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = cand if os.path.exists(cand) else shutil.which("mpiexec")
    if exe is None:
        return None, "no mpiexec next to the Python interpreter or on PATH"
    return exe, None


MPIEXEC, WHY = _mpiexec()
needs_mpi = pytest.mark.skipif(MPIEXEC is None, reason=str(WHY))
pytestmark = pytest.mark.slow      # MPI jobs in subprocesses


def _env():
    from _reference import checkout_env
    return checkout_env(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def _run(args, timeout):
    return subprocess.run([MPIEXEC, "-n", str(NPROCS), sys.executable, CASES, *args],
                          capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT)


def _case_names():
    # the case names, without importing mpi4py here
    names = []
    with open(CASES) as f:
        lines = f.read().splitlines()
    for prev, line in zip(lines, lines[1:]):
        if prev.strip() == "@case" and line.startswith("def "):
            names.append(line[4:line.index("(")])
    return names


@pytest.fixture(scope="module")
def mpi_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("mpi") / "results.json"
    try:
        proc = _run([str(out)], JOB_TIMEOUT)
        log = proc.stdout + proc.stderr
        timed_out = False
    except subprocess.TimeoutExpired as exc:
        log = (exc.stdout or b"").decode(errors="replace") + \
            (exc.stderr or b"").decode(errors="replace")
        timed_out = True
    results = json.loads(out.read_text()) if out.exists() else {}
    return results, log, timed_out


@needs_mpi
@pytest.mark.parametrize("name", _case_names())
def test_mpi_case(mpi_results, name):
    results, log, timed_out = mpi_results
    if name not in results:
        state = f"timed out after {JOB_TIMEOUT}s" if timed_out else "ended"
        pytest.fail(f"the mpiexec job {state} before case {name!r} finished:\n{log[-4000:]}")
    res = results[name]
    if not res["ok"]:
        msgs = "\n".join(f"--- process {r}:\n{e}" for r, e in enumerate(res["errors"]) if e)
        pytest.fail(f"case {name!r} failed:\n{msgs}")


@needs_mpi
def test_uncaught_exception_aborts_the_job():
    proc = _run(["--abort-uncaught"], 60)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log
    assert "deliberate failure before the fit" in log, log
    assert "aborting the job" in log, log


@needs_mpi
def test_exception_before_the_first_distributed_tensor_aborts_the_job():
    # the abort hook is installed when the package is imported in a job, before any
    # collective call: the process still in scatter() does not wait forever
    try:
        proc = _run(["--raise-before-scatter"], 60)
    except subprocess.TimeoutExpired:
        pytest.fail("a process raising before scatter() left the others waiting")
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log
    assert "deliberate failure before the first distributed tensor" in log, log
    assert "aborting the job" in log, log


@needs_mpi
def test_killed_process_ends_the_job():
    proc = _run(["--kill-one"], 60)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log
    assert "KILLED" in log.upper(), log


@needs_mpi
@pytest.mark.parametrize("var", ["OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"])
def test_a_launcher_of_another_mpi_is_named(var):
    """A process that the environment says is one of 2 but whose MPI.COMM_WORLD has one (mpi4py
    on another MPI than the launcher's) refuses to compute alone, naming the cause; started
    alone, the same script runs."""
    code = ("import numpy as np\n"
            "from sktensor_fast import SparseTensor\n"
            "from sktensor_fast.distributed import scatter\n"
            "X = SparseTensor([[0, 0], [1, 1]], [1.0, 2.0])\n"
            "print('nnz', scatter(X).nnz)\n")
    from _reference import checkout_env
    alone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env=checkout_env())
    assert alone.returncode == 0 and "nnz 2" in alone.stdout, alone.stdout + alone.stderr
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=checkout_env(**{var: "2"}))
    assert proc.returncode != 0
    assert "RuntimeError" in proc.stderr and f"{var}=2" in proc.stderr, proc.stderr
    assert "another MPI library" in proc.stderr and "mpiexec" in proc.stderr, proc.stderr


def test_missing_mpi4py_names_the_extra(monkeypatch):
    from sktensor_fast import distributed
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(ImportError, match=r"sktensor_fast\[mpi\]"):
        distributed.scatter(None)
    with pytest.raises(ImportError, match="mpiexec"):
        distributed.load_tns("x.tns")


def test_the_backend_answers_the_kernel_interface_only():
    """The distributed backend implements the interface of backends/base.py method by method
    (nothing besides its constructor ``wrap``); the local backend's own attributes do not show
    through."""
    from sktensor_fast.backends import get_backend
    from sktensor_fast.backends.base import Backend
    from sktensor_fast.distributed.backend import DistributedBackend
    local = get_backend("cpu")
    be = DistributedBackend(local, channel=None)
    public = {n for n in dir(DistributedBackend) if not n.startswith("_")}
    assert public - set(dir(Backend)) == {"wrap"}
    assert callable(local._factors)
    with pytest.raises(AttributeError):
        be._factors


def test_balanced_blocks():
    import numpy as np
    from sktensor_fast.distributed.tensor import balanced_blocks
    counts = np.array([5, 0, 0, 1, 1, 1, 1, 1, 10, 0])
    b = balanced_blocks(counts, 2)
    assert b.tolist() == [0, 8, 10]             # 10 | 10 nonzeros
    b = balanced_blocks(counts, 4)
    assert b[0] == 0 and b[-1] == 10 and np.all(np.diff(b) >= 1)
    # fewer rows than parts: empty blocks, still monotone and covering
    b = balanced_blocks(np.array([3, 4]), 4)
    assert b[0] == 0 and b[-1] == 2 and np.all(np.diff(b) >= 0)
    assert balanced_blocks(np.zeros(6, dtype=int), 3).tolist() == [0, 2, 4, 6]


def test_owner_of_each_coordinate():
    """The owner table read at the coordinates gives the process whose block holds each row
    (empty blocks included), as a search of the boundaries does."""
    import numpy as np
    from sktensor_fast.distributed.tensor import _owner
    rng = np.random.default_rng(2)
    for bounds in ([0, 4, 4, 9, 12], [0, 12], [0, 0, 0, 12, 12]):
        coords = rng.integers(0, 12, 500)
        want = np.searchsorted(bounds, coords, side="right") - 1
        assert np.array_equal(_owner(np.array(bounds), coords), want), bounds


def test_gcp_draws_replicate_the_cpu_sampler():
    """The distributed draw (one process owning everything) is the CPU kernels' draw, bit for
    bit, for every sampler (rejections included: density 0.44)."""
    import numpy as np
    from sktensor_fast import SparseTensor
    from sktensor_fast.backends.cpu import _gcp, gcp_ops
    from sktensor_fast.distributed._sampling import LocalShare, draw_owned, step_key
    from sktensor_fast.backends.cpu.formats import CooFormat
    rng = np.random.default_rng(0)
    shape = (13, 11, 7)
    X = SparseTensor(np.stack([rng.integers(0, s, 600) for s in shape], 1),
                     rng.random(600) + 0.5, shape)
    T = CooFormat(X)
    for seed, step in [(5, 0), (123456789, 17), (2 ** 61 + 3, 999)]:
        assert step_key(seed, step) == int(_gcp.step_key(np.uint64(seed), np.uint64(step)))

    class OneProcess:
        size = 1
    from sktensor_fast.backends import gcp_plan

    def check(X, T, kinds, zero_list=False):
        lin = gcp_ops._linear_index(T)
        share = LocalShare(X.subs, X.vals, 0, 0, X.shape[0], X.shape, X.nnz)
        for kind in kinds:
            listed = gcp_ops._zero_list(T) if zero_list and kind == "stratified" else None
            sampler, _ = gcp_ops._make_sampler(T, kind, 50, 70, listed, lin, T.vals)
            key = step_key(42, 3)
            ref = gcp_ops.draw(sampler, key, 3)
            plan = gcp_plan.sampler_plan(kind, X.nnz, X.size - X.nnz, 50, 70)
            j, subs, x, w, c = draw_owned(OneProcess, share, key, plan, zero_list=zero_list)
            assert j.tolist() == list(range(120))
            for got, want in zip((subs, x, w, c), ref):
                assert np.array_equal(got, want), (kind, zero_list)

    check(X, T, ("stratified", "semi-stratified", "uniform"))
    # rejection giving up: the zero of a uniform rank (forced after one attempt here)
    old = gcp_plan.MAX_ATTEMPTS
    gcp_plan.MAX_ATTEMPTS = 1
    try:
        check(X, T, ("stratified",))
    finally:
        gcp_plan.MAX_ATTEMPTS = old
    # a dense tensor (density 0.7): zeros from the list of all zeros
    D = SparseTensor.from_dense((rng.random(shape) < 0.7) * 2.0)
    check(D, CooFormat(D), ("stratified",), zero_list=True)


def test_find_sorted_is_searchsorted_on_any_thread_count():
    """The compiled lookup of the distributed sampler (zero samples among a process's
    nonzeros): NumPy's searchsorted with a hit test, on 1 and 2 threads, with absent keys,
    keys beyond both ends, an empty table and no keys."""
    import numpy as np
    from sktensor_fast._native import _numerics
    rng = np.random.default_rng(3)
    table = np.unique(rng.integers(0, 10 ** 9, 50_000))
    keys = np.concatenate([rng.choice(table, 6000), rng.integers(-5, 10 ** 9 + 5, 6000),
                           [-1, 10 ** 10, table[0], table[-1]]])
    pos = np.minimum(np.searchsorted(table, keys), table.size - 1)
    want = np.where(table[pos] == keys, pos, -1)
    for threads in (1, 2):
        got = _numerics.find_sorted(table, keys, threads)
        np.testing.assert_array_equal(got, want)
    assert (want >= 0).sum() >= 6000
    assert _numerics.find_sorted(table, keys[:0]).shape == (0,)
    np.testing.assert_array_equal(_numerics.find_sorted(table[:0], keys[:3]), [-1, -1, -1])


def test_gcp_sample_gradient_is_the_drawn_gradient():
    """The kernel-interface primitive over an explicit sample gives the gradient and loss of
    the same sample drawn by the CPU backend (what each process computes for its samples)."""
    import numpy as np
    from sktensor_fast import SparseTensor
    from sktensor_fast.backends import get_backend
    from sktensor_fast.backends.cpu import _gcp, gcp_ops
    from sktensor_fast.decomposition.losses import get_loss
    be = get_backend("cpu")
    rng = np.random.default_rng(1)
    shape = (15, 12, 9)
    X = SparseTensor(np.stack([rng.integers(0, s, 300) for s in shape], 1),
                     rng.poisson(2.0, 300) + 1.0, shape)
    T = be.prepare(X, "coo")
    state = be.gcp.setup(T, "stratified", (40, 60), (50, 50), 7)
    U = [rng.random((s, 3)) for s in shape]
    w = np.ones(3)
    for name in ("poisson", "gaussian"):
        loss = get_loss(name, None)
        g_ref, f_ref = be.gcp.sampled_gradient(T, state, w, U, loss, 11, 4, with_loss=True)
        sample = gcp_ops.draw(state.grad_sampler, _gcp.step_key(np.uint64(11), np.uint64(5)), 3)
        g, f = be.gcp.sample_gradient(sample, w, U, loss, with_loss=True)
        for a, b in zip(g_ref, g):
            assert np.allclose(a, b, rtol=1e-13, atol=0)
        assert np.isclose(f, f_ref, rtol=1e-13)
        assert np.isclose(be.gcp.sample_loss(sample, w, U, loss), f_ref, rtol=1e-13)
    # an empty sample (a process that owns none of a draw) contributes zeros
    empty = (np.zeros((0, 3), np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int8))
    g, f = be.gcp.sample_gradient(empty, w, U, get_loss("poisson", None), with_loss=True)
    assert f == 0.0 and all(not a.any() for a in g)
    assert be.gcp.sample_loss(empty, w, U, get_loss("poisson", None)) == 0.0


ONE_PROCESS_ON_OPENCL = """
import numpy as np
from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor
from sktensor_fast.distributed import scatter
from sktensor_fast.backends.opencl.backend import OpenCLBackend
rng = np.random.default_rng(0)
subs = rng.integers(0, [30, 20, 10], size=(2000, 3))
X = SparseTensor(subs, rng.integers(1, 5, 2000).astype(float), (30, 20, 10))
downloads = [0]
orig = OpenCLBackend.to_numpy
def counting(self, a):
    downloads[0] += 1
    return orig(self, a)
OpenCLBackend.to_numpy = counting
orig_transient = OpenCLBackend.to_numpy_transient
def counting_transient(self, arrays):
    downloads[0] += len(arrays)
    return orig_transient(self, arrays)
OpenCLBackend.to_numpy_transient = counting_transient
Xd = scatter(X)
kw = {CPALS: {}, CPAPR: {}, GCP: dict(epoch_iters=20, max_iter=3)}
for cls in (CPALS, CPAPR, GCP):
    got = []
    for data in (X, Xd):
        downloads[0] = 0
        est = cls(**{**dict(rank=4, random_state=0, max_iter=10, tol=0, device="opencl"),
                     **kw[cls]}).fit(data)
        got.append((est.factors_, downloads[0]))
    (fa, na), (fb, nb) = got
    diff = max(float(np.max(np.abs(u - v))) for u, v in zip(fa, fb))
    print(cls.__name__, na, nb, diff)
"""


ONE_PROCESS_GCP = """
import warnings
import numpy as np
from sktensor_fast import GCP, SparseTensor
from sktensor_fast.distributed import _sampling, scatter
warnings.simplefilter("ignore")
draws = [0]
orig = _sampling.draw_owned
def counting(*args, **kwargs):
    draws[0] += 1
    return orig(*args, **kwargs)
_sampling.draw_owned = counting
rng = np.random.default_rng(0)
subs = rng.integers(0, [40, 30, 20], size=(3000, 3))
X = SparseTensor(subs, rng.integers(1, 5, 3000).astype(float), (40, 30, 20))
Xd = scatter(X)
for kw in (dict(), dict(solver="adagrad", sampler="semi-stratified", loss="gaussian")):
    a = GCP(rank=3, random_state=0, max_iter=3, epoch_iters=30, tol=0, **kw).fit(X)
    b = GCP(rank=3, random_state=0, max_iter=3, epoch_iters=30, tol=0, **kw).fit(Xd)
    same = all(np.array_equal(u, v) for u, v in zip(a.factors_, b.factors_))
    print("GCP", same and np.array_equal(a.loss_history_, b.loss_history_))
print("draws", draws[0])
"""


def test_one_process_gcp_is_the_plain_fit_on_the_cpu():
    """A distributed GCP fit of one process runs the process's backend on its whole tensor
    (its compiled step loop, its samples): the plain fit's model and losses, bit for bit."""
    pytest.importorskip("mpi4py")
    r = subprocess.run([sys.executable, "-c", ONE_PROCESS_GCP], capture_output=True,
                       text=True, timeout=300, env=_env())
    assert r.returncode == 0, r.stderr[-3000:]
    # the process's own sampler drew every sample: none by the distributed one
    assert r.stdout.split() == ["GCP", "True", "GCP", "True", "draws", "0"], r.stdout


def test_one_process_on_a_device_gathers_nothing_through_the_host():
    """A distributed fit of one process on an OpenCL device downloads what the plain fit
    downloads (the final factors), not every factor at every mode, and gives its model; GCP's
    steps run on the process's device as in the plain fit (the same samples, drawn there)."""
    pytest.importorskip("mpi4py")
    from _reference import opencl_backend_or_skip
    opencl_backend_or_skip()
    r = subprocess.run([sys.executable, "-c", ONE_PROCESS_ON_OPENCL], capture_output=True,
                       text=True, timeout=300, env=_env())
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln.split() for ln in r.stdout.splitlines() if ln.startswith(("CP", "GCP"))]
    assert [ln[0] for ln in lines] == ["CPALS", "CPAPR", "GCP"], r.stdout
    for name, plain, one, diff in lines:
        assert int(one) == int(plain), (name, plain, one)
        assert float(diff) == 0.0, (name, diff)


@needs_mpi
def test_weak_scaling_benchmark_with_stacked_parts(tmp_path):
    """bench_distributed.py --weak --stacked: each process generates its part and the parts
    are joined by from_parts; P = 2 holds twice the nonzeros of P = 1 in a tensor twice as
    tall, and the report says so."""
    out = tmp_path / "weak.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_distributed.py"),
                        "--procs", "1", "2", "--weak", "--stacked", "--shape", "40,30,20",
                        "--nnz", "3000", "--iters", "1", "--repeat", "1", "--algos", "cpals",
                        "--out", str(out)], capture_output=True, text=True, timeout=JOB_TIMEOUT,
                       env=_env())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    rep = json.loads(out.read_text())
    jobs = rep["runs"]["weak"]["jobs"]
    (one,), two = jobs[0], jobs[1]
    assert one["P"] == 1 and one["nnz"] == 3000
    assert [j["P"] for j in two] == [2, 2] and two[0]["nnz"] == 6000
    assert two[0]["shape"] == [80, 30, 20] and one["shape"] == [40, 30, 20]
    assert sum(two[0]["local_nnz"]) > 0


@needs_mpi
def test_distributed_benchmark_kernel_check_and_host_timeline(tmp_path):
    """bench_distributed.py --kernel-check times each process's MTTKRP (and, with CP-APR,
    Φ) of every mode on its own copy, and says where it ran; --host-timeline times every
    call of one iteration on every process without waiting for the device: the calls of
    CP-ALS's steps, the rows exchange among them, and an iteration's wall time at least
    their sum."""
    out = tmp_path / "check.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_distributed.py"),
                        "--procs", "2", "--strong", "--shape", "40,30,20", "--nnz", "3000",
                        "--iters", "2", "--repeat", "1", "--algos", "cpals", "cpapr",
                        "--no-serial", "--kernel-check", "--host-timeline", "--out", str(out)],
                       capture_output=True, text=True, timeout=JOB_TIMEOUT, env=_env())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (job,) = json.loads(out.read_text())["runs"]["strong"]["jobs"]
    assert "without waiting for the device" in r.stdout
    assert r.stdout.count("MTTKRP per mode") == 2 and r.stdout.count("; Φ: together") == 2
    for rank, proc in enumerate(job):
        kc = proc["kernel_check"]
        assert kc["host_rank"] == rank and kc["device"] == "cpu"
        for key in ("together_ms", "alone_ms", "phi_together_ms", "phi_alone_ms"):
            assert len(kc[key]) == 3 and all(t > 0 for t in kc[key]), (key, kc[key])
        tl = proc["fits"]["cpals"]["host_timeline"]
        names = {e["event"] for e in tl["events"]}
        assert {"mttkrp", "als_update", "mpi.allgather_rows"} <= names, names
        assert {e["mode"] for e in tl["events"] if e["event"] == "mttkrp"} == {0, 1, 2}
        assert 0 < tl["iteration_ms"] <= tl["iteration_wall_ms"] * 1.001 + 1e-3, tl


@needs_mpi
def test_distributed_benchmark_over_several_jobs(tmp_path):
    """bench_distributed.py --jobs 2 runs each process count twice (a new mpiexec each) and
    reports the median and spread over them; every process records when each iteration of
    the long fits ended."""
    out = tmp_path / "jobs.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_distributed.py"),
                        "--procs", "2", "--strong", "--shape", "40,30,20", "--nnz", "3000",
                        "--iters", "2", "--repeat", "2", "--algos", "cpals", "--jobs", "2",
                        "--no-serial", "--out", str(out)],
                       capture_output=True, text=True, timeout=JOB_TIMEOUT, env=_env())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "over the jobs" in r.stdout
    run = json.loads(out.read_text())["runs"]["strong"]
    assert [[p["P"] for p in job] for job in run["jobs"]] == [[2, 2], [2, 2]]
    (sp,) = run["spread"]["cpals"]
    times = [row["iter_s"] for row in run["tables"]["cpals"]]
    assert sp["P"] == 2 and sp["jobs"] == 2 and sorted(sp["iter_s"]) == sorted(times)
    assert sp["iter_s_min"] <= sp["iter_s_median"] <= sp["iter_s_max"]
    for job in run["jobs"]:
        for proc in job:
            marks = proc["fits"]["cpals"]["iteration_marks_ms"]
            assert len(marks) == 2 and all(len(m) == 3 for m in marks), marks
            assert all(a < b for m in marks for a, b in zip(m, m[1:])), marks
