"""Threads of the CPU backend: caps, OpenMP waiting, BLAS during fits, reproducibility.

The crash reproducers and everything that depends on how the OpenMP runtime or the CPU affinity
is set up at start run in a fresh interpreter.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sktensor_fast as sk
from sktensor_fast.backends.cpu import backend as cpu_backend

from _reference import ROOT  # noqa: E402 - the repository root


def _python(code, env=None, timeout=600):
    """Run ``code`` in a fresh interpreter at the repository root; returns the process."""
    full = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"):
        full.pop(k, None)
    full.update(env or {})
    from _reference import checkout_env
    full = checkout_env(full)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=str(ROOT), env=full,
                          capture_output=True, text=True, timeout=timeout)


def _last_json(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------- caps
def test_thread_requests_above_the_cap_warn_and_are_capped():
    cap = cpu_backend.max_threads()
    assert cap == cpu_backend.MAX_THREADS_PER_CPU * (os.cpu_count() or 1)
    try:
        with pytest.warns(RuntimeWarning, match=f"capped at {cap}"):
            sk.set_num_threads(100_000)
        assert sk.get_num_threads() == cap
        sk.set_num_threads(1)
        with pytest.warns(RuntimeWarning, match="capped"):
            with sk.num_threads(10 ** 9):
                assert sk.get_num_threads() == cap
        assert sk.get_num_threads() == 1
    finally:
        sk.set_num_threads(None)
    for bad in (0, -3, 2.5, True, "4"):
        with pytest.raises(ValueError, match="number of threads"):
            sk.set_num_threads(bad)


CRASH_FITS = """
    import warnings, numpy as np, sktensor_fast as sk
    from benchmarks.synth import synthetic_tensor
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        {setup}
        # building the tensor runs compiled passes too: the first of them warns
        X = synthetic_tensor((60, 50, 40), 20000, seed=0)
        n = sk.get_num_threads()
        sk.CPALS(rank=4, max_iter=2, format="alto").fit(X)
        sk.CPAPR(rank=4, max_iter=1, solver="pdnr").fit(X)
        sk.GCP(rank=4, loss="poisson", epoch_iters=3, max_iter=1).fit(X)
    print(n, sum("capped" in str(w.message) for w in caught))
"""


@pytest.mark.parametrize("how", ["set_num_threads", "OMP_NUM_THREADS"])
def test_huge_thread_counts_do_not_crash(how):
    """100000 threads used to segfault ALTO and GCP fits (50000: libgomp could not create the
    threads and exited); now the count is capped with a warning."""
    if how == "set_num_threads":
        proc = _python(CRASH_FITS.format(setup="sk.set_num_threads(100000)"))
    else:
        proc = _python(CRASH_FITS.format(setup="pass"), env={"OMP_NUM_THREADS": "100000"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    n, warned = proc.stdout.split()
    assert int(n) == cpu_backend.max_threads() and int(warned) >= 1


# ---------------------------------------------------------------------- OpenMP waiting
WAIT_REPORT = """
    import json, os, sktensor_fast as sk
    print(json.dumps([os.environ.get("OMP_WAIT_POLICY"), sk.get_config()["openmp_wait_policy"]]))
"""


def test_passive_waiting_is_asked_for_and_the_environment_restored():
    env_value, policy = _last_json(_python(WAIT_REPORT))
    assert env_value is None                      # the user's environment is unchanged
    assert policy.startswith("passive")


@pytest.mark.parametrize("var,value", [("OMP_WAIT_POLICY", "active"), ("GOMP_SPINCOUNT", "1000"),
                                       ("KMP_BLOCKTIME", "5")])
def test_a_users_waiting_policy_is_kept(var, value):
    env_value, policy = _last_json(_python(WAIT_REPORT, env={var: value}))
    assert policy == f"user: {var}={value}"
    assert env_value == (value if var == "OMP_WAIT_POLICY" else None)


IDLE_CPU = """
    import json, os, time, numpy as np, sktensor_fast as sk
    from sktensor_fast.backends.cpu import _kernels
    rng = np.random.default_rng(0)
    subs = np.ascontiguousarray(rng.integers(0, 50, (40000, 3)))
    facs = [rng.random((50, 8)) for _ in range(3)]
    out = np.empty(40000)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(30):
        _kernels.kruskal_values(subs, np.ones(8), facs, out, 2)   # a parallel region ...
        time.sleep(0.01)                                          # ... then the threads idle
    print(json.dumps([time.process_time() - c0, time.perf_counter() - t0]))
"""


@pytest.mark.skipif(not sk.get_config()["openmp"], reason="serial build")
def test_idle_threads_sleep_with_the_default_policy():
    """The policy reaches the OpenMP runtime: between regions the idle thread sleeps instead of
    spinning (compared with active waiting, which spins through every pause)."""
    cpu_passive, wall_passive = _last_json(_python(IDLE_CPU))
    cpu_active, wall_active = _last_json(_python(IDLE_CPU, env={"OMP_WAIT_POLICY": "active"}))
    # active: a thread spins through the 30 pauses of 10 ms (unless the machine is so busy
    # that it hardly runs at all); passive: the CPU time is the kernels' alone
    assert cpu_passive < 0.5 * cpu_active or cpu_active < 0.05, (cpu_passive, cpu_active)
    assert cpu_passive < 0.15 + 0.25 * wall_passive


# ---------------------------------------------------------------------- BLAS during fits
def test_blas_runs_one_thread_during_a_fit_and_limits_are_restored(monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from sktensor_fast.backends.cpu.backend import CpuBackend
    seen = []
    gram = CpuBackend.gram

    def spy(self, A):
        seen.append([i["num_threads"] for i in threadpoolctl.threadpool_info()
                     if i["user_api"] == "blas"])
        return gram(self, A)

    monkeypatch.setattr(CpuBackend, "gram", spy)
    rng = np.random.default_rng(0)
    X = sk.SparseTensor(rng.integers(0, 20, (500, 3)), rng.random(500), (20, 20, 20))
    before = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    est = sk.CPALS(rank=3, max_iter=3, random_state=0).fit(X)
    est.transform(X)
    assert seen and all(n == 1 for s in seen for n in s)
    after = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert after == before
    # a user's OpenMP limit sets the kernels' default thread count
    with threadpoolctl.threadpool_limits(1, user_api="openmp"):
        assert sk.get_num_threads() == 1


def test_concurrent_fits_restore_the_blas_limits():
    """Overlapping scopes (fits in two Python threads, ending in either order): the limits of
    before are back after the last."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import threading
    blas = lambda: [i["num_threads"] for i in threadpoolctl.threadpool_info()  # noqa: E731
                    if i["user_api"] == "blas"]
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = blas()
        for main_first in (True, False):
            entered, release = threading.Event(), threading.Event()

            def other():
                with cpu_backend.single_threaded_blas():
                    entered.set()
                    release.wait(10)

            t = threading.Thread(target=other)
            with cpu_backend.single_threaded_blas():
                assert all(n == 1 for n in blas())
                t.start()
                entered.wait(10)
                if not main_first:
                    release.set()
                    t.join()
            release.set()
            t.join()
            assert blas() == before


# ---------------------------------------------------------------------- reproducibility
REPRO = """
    import hashlib, json, os, sys, numpy as np
    import sktensor_fast as sk
    from sktensor_fast.backends.cpu.formats import alto, coo
    from benchmarks.synth import synthetic_tensor
    coo.MIN_NNZ_PER_THREAD = 1       # small tensors: run every thread asked for
    alto.PART_NNZ = 1024             # ... and cut ALTO into many partitions
    os.sched_setaffinity(0, {affinity})
    sk.set_num_threads({threads})
    out = {{}}
    for tname, shape in (("high", (60, 50, 40)), ("low", (20000, 15000, 9000))):
        X = synthetic_tensor(shape, 24000, seed=1)
        for fmt in ("coo", "alto"):
            fits = {{
                "cpals": sk.CPALS(rank=5, max_iter=3, tol=0, random_state=0, format=fmt),
                "cpapr-mu": sk.CPAPR(rank=5, max_iter=2, tol=0, random_state=0, format=fmt),
                "cpapr-pdnr": sk.CPAPR(rank=5, solver="pdnr", max_iter=1, tol=0,
                                       random_state=0, format=fmt),
                "gcp": sk.GCP(rank=5, loss="poisson", epoch_iters=4, max_iter=2, tol=0,
                              random_state=0, format=fmt),
            }}
            for name, est in fits.items():
                est.fit(X)
                h = hashlib.sha256(est.weights_.tobytes())
                for f in est.factors_:
                    h.update(np.ascontiguousarray(f).tobytes())
                out[f"{{tname}}/{{fmt}}/{{name}}"] = h.hexdigest()
    print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_models_are_bitwise_identical_for_any_threads_and_affinity():
    """COO and ALTO (buffer and compact paths), low- and high-reuse tensors, CP-ALS, CP-APR MU
    and PDN-R, GCP: the same bits with 1 or 2 threads, on one CPU or two."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    runs = {}
    for threads, aff in ((1, cpus[:1]), (2, cpus), (2, cpus[1:]), (3, cpus)):
        runs[(threads, tuple(aff))] = _last_json(_python(REPRO.format(threads=threads,
                                                                      affinity=set(aff))))
    ref = next(iter(runs.values()))
    assert len(ref) == 2 * 2 * 4
    for key, got in runs.items():
        diff = [k for k in ref if got[k] != ref[k]]
        assert not diff, (key, diff)


# ------------------------------------------------- GCP's steps on a machine whose cores are busy
@pytest.fixture
def steps_env(monkeypatch):
    """threads_for_load with the default thread count, passive waiting and a machine of
    ``cpus`` CPUs whose running-thread count the test sets."""
    from sktensor_fast import _threads
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(_threads, "_chosen_by_user", lambda: False)
    monkeypatch.setitem(_threads.WAITS_PASSIVELY, "value", True)
    state = {"running": 1}
    monkeypatch.setattr(_threads, "_running_threads", lambda: state["running"])
    cpus = len(os.sched_getaffinity(0))
    return _threads, state, cpus


@pytest.mark.parametrize("others, expect", [(0, 16), (1, 15), (14, 2), (15, 1), (16, 1),
                                            (40, 1)])
def test_steps_take_the_cores_that_other_programs_leave_free(steps_env, monkeypatch, others,
                                                            expect):
    _threads, state, _ = steps_env
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    state["running"] = 1 + others          # the caller runs too
    # 16 CPUs, 16 threads asked for: one per CPU the other running threads leave free
    # (the caller's own counts as free), at least one
    assert _threads.threads_for_load(16) == expect
    assert _threads.threads_for_load(4) == min(4, expect)
    assert _threads.threads_for_load(1) == 1


def test_steps_keep_a_users_thread_count_and_policy(steps_env, monkeypatch):
    from sktensor_fast import _threads
    _, state, cpus = steps_env
    state["running"] = 1 + 10 * cpus
    assert _threads.threads_for_load(4) == 1
    monkeypatch.setattr(_threads, "_chosen_by_user", lambda: True)    # set by the user
    assert _threads.threads_for_load(4) == 4
    monkeypatch.setattr(_threads, "_chosen_by_user", lambda: False)
    monkeypatch.setitem(_threads.WAITS_PASSIVELY, "value", False)    # a spinning policy
    assert _threads.threads_for_load(4) == 4
    monkeypatch.setitem(_threads.WAITS_PASSIVELY, "value", True)
    state["running"] = None                                           # no /proc/loadavg
    assert _threads.threads_for_load(4) == 4


def test_a_cpu_is_left_free_when_fewer_threads_run_than_cpus(steps_env, monkeypatch):
    """cpu_left_free (whether GCP's steps get a thread drawing their samples ahead): fewer
    running threads than CPUs, the caller's included; whoever chose the thread count; True
    where /proc/loadavg cannot be read."""
    _threads, state, _ = steps_env
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    for running, free in ((1, True), (2, False), (3, False)):
        state["running"] = running
        assert _threads.cpu_left_free() is free
        monkeypatch.setattr(_threads, "_chosen_by_user", lambda: True)
        assert _threads.cpu_left_free() is free
        monkeypatch.setattr(_threads, "_chosen_by_user", lambda: False)
    state["running"] = None
    assert _threads.cpu_left_free() is True


def test_chosen_by_user_sees_set_num_threads_and_the_environment(monkeypatch):
    from sktensor_fast import _threads
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    base = _threads._chosen_by_user()
    with sk.num_threads(1):
        assert _threads._chosen_by_user()
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert _threads._chosen_by_user()
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert _threads._chosen_by_user() == base


def test_running_threads_reads_the_machine():
    from sktensor_fast import _threads
    n = _threads._running_threads()
    if not os.path.exists("/proc/loadavg"):
        assert n is None
    else:
        assert isinstance(n, int) and n >= 1      # this test is running


def test_gcp_fit_is_the_same_on_a_busy_machine(steps_env):
    # the thread count taken for the steps changes, the model does not
    _threads, state, cpus = steps_env
    rng = np.random.default_rng(3)
    shape = (60, 50, 40)
    lin = np.unique(rng.integers(0, 60 * 50 * 40, 20000))
    X = sk.SparseTensor(np.stack(np.unravel_index(lin, shape), axis=1),
                        rng.integers(1, 5, lin.size).astype(float), shape)
    # 2 x 3000 samples a step at rank 8: enough work for two threads of the step loop
    kw = dict(rank=8, loss="poisson", solver="adam", epoch_iters=5, max_iter=2, tol=0.0,
              n_samples_grad=3000, random_state=0)
    if cpus >= 2:
        with sk.num_threads(2):
            assert _threads.threads_for_load(2) == 2
    quiet = sk.GCP(**kw).fit(X)             # tol=0: max_iter epochs on purpose, no warning
    state["running"] = 1 + 4 * cpus
    assert _threads.threads_for_load(2) == 1
    busy = sk.GCP(**kw).fit(X)
    for a, b in zip(quiet.factors_, busy.factors_):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(quiet.weights_, busy.weights_)


def test_a_fit_runs_on_the_free_cpus_with_the_default_count(steps_env, monkeypatch):
    from sktensor_fast import _threads
    from sktensor_fast.backends import get_backend
    _, state, cpus = steps_env
    monkeypatch.setattr(_threads, "_default_threads", lambda: 6)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)))
    be = get_backend("cpu")
    state["running"] = 1 + 2                 # 2 other threads running: 4 CPUs free
    with be.compute_scope():
        assert sk.get_num_threads() == 4
        state["running"] = 1                 # decided on entry, not at every call
        assert sk.get_num_threads() == 4
        with sk.num_threads(5):              # a count the user sets is used as given
            assert sk.get_num_threads() == 5
    assert sk.get_num_threads() == 6
    state["running"] = 1 + 40
    with be.compute_scope():
        assert sk.get_num_threads() == 1
    monkeypatch.setattr(_threads, "_chosen_by_user", lambda: True)
    with be.compute_scope():
        assert sk.get_num_threads() == 6


# ---------------------------------------------------------------------- measured costs
def test_threads_for_work_weighs_shares_against_measured_region_costs(monkeypatch):
    """A thread runs only when its share of the work takes SHARE_OVER_START times what
    running on its number of threads costs beyond the shares."""
    from sktensor_fast.backends.cpu import parallel_costs as pc
    monkeypatch.setattr(pc, "_COSTS", {("region", 2): 10e-6, ("region", 4): 20e-6,
                                       ("region", 3): 15e-6, "nonzero": 5e-9})
    assert pc.threads_for_work(1.0, 1) == 1
    assert pc.threads_for_work(30e-6, 2) == 1            # 15 us each < 2 x 10 us
    assert pc.threads_for_work(40e-6, 2) == 2
    assert pc.threads_for_work(100e-6, 4) == 2           # 25 us each < 2 x 20 us on 4
    assert pc.threads_for_work(160e-6, 4) == 4
    assert pc.threads_for_work(90e-6, 3) == 3            # n itself, then powers of two
    from sktensor_fast.backends.cpu.formats import coo
    monkeypatch.setattr(coo, "MIN_NNZ_PER_THREAD", None)
    assert coo.useful_threads(15000, 2) == 2             # 75 us of work
    assert coo.useful_threads(6000, 2) == 1              # 30 us
    assert coo.useful_threads(6000, 2, rank=16) == 2     # twice the work per nonzero
    assert coo.useful_threads(10 ** 9, 1) == 1


def test_measured_costs_are_positive_and_kept(monkeypatch):
    from sktensor_fast.backends.cpu import parallel_costs as pc
    monkeypatch.setattr(pc, "_COSTS", {})
    a, f = pc.nonzero_cost(), pc.flop_cost()
    assert 0 < a < 1e-6 and 0 < f < 1e-7
    assert pc.region_cost(1) == 0.0
    r = pc.region_cost(2)
    assert 0 <= r < 0.1
    assert pc.measured() == {"nonzero": a, "flop": f, ("region", 2): r}
    assert pc.region_cost(2) == r and pc.nonzero_cost() == a      # measured once


def test_gcp_steps_weigh_a_step_against_its_measured_barriers(monkeypatch):
    """GCP's step loop runs a step on t threads only when each share of its samples takes
    SHARE_OVER_START times what a step on t threads costs beyond the shares (scaled from the
    calibration's 3 modes and rank 8); the measured costs are positive and kept."""
    from sktensor_fast.backends.cpu import gcp_ops
    from sktensor_fast.backends.cpu import parallel_costs as pc
    monkeypatch.setattr(gcp_ops, "MIN_SAMPLES_PER_THREAD", None)
    monkeypatch.setattr(pc, "_COSTS", {("gcp", 2): (50e-9, 40e-6), ("gcp", 4): (50e-9, 80e-6)})
    assert gcp_ops.step_threads(300, 5, 5, 2) == 1        # 300 x 50 ns x 1.74 / 2 < 80 us
    assert gcp_ops.step_threads(2000, 5, 5, 2) == 2       # 2000 x 50 ns x 1.74 / 2 > 80 us
    assert gcp_ops.step_threads(2000, 3, 8, 2) == 1       # a third of that work
    assert gcp_ops.step_threads(10 ** 5, 3, 8, 4) == 4
    assert gcp_ops.step_threads(10 ** 6, 3, 8, 1) == 1
    monkeypatch.setattr(gcp_ops, "MIN_SAMPLES_PER_THREAD", 1000)
    assert gcp_ops.step_threads(2500, 3, 8, 4) == 2       # the override: per 1000 samples
    monkeypatch.setattr(pc, "_COSTS", {})
    per_sample, extra = gcp_ops.gcp_step_costs(2)
    assert 0 < per_sample < 1e-5 and 0 <= extra < 0.1
    assert gcp_ops.gcp_step_costs(2) == (per_sample, extra)    # measured once
    assert pc.measured()[("gcp", 2)] == (per_sample, extra)


def test_gcp_on_the_embedded_data_gives_one_model_on_one_and_two_threads():
    """The same model at 1 and 2 threads (the step loop's results never depend on them; the
    suite's override runs every thread asked for)."""
    from sktensor_fast import GCP, num_threads
    from sktensor_fast.backends.cpu import gcp_ops
    from sktensor_fast.datasets import load_flights_routes
    X = load_flights_routes().tensor
    models = []
    for t in (1, 2):
        with num_threads(t):
            est = GCP(loss="poisson", random_state=0, max_iter=2, epoch_iters=50).fit(X)
        models.append(est.factors_)
    for a, b in zip(*models):
        np.testing.assert_array_equal(a, b)
    assert gcp_ops.MIN_SAMPLES_PER_THREAD == 1   # the suite's override: every thread asked for
