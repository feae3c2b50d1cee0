"""The benchmark suite: a --tiny run end to end, the byte models, the STREAM kernels."""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from _reference import ROOT  # noqa: E402 - the repository root

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import kernels, run  # noqa: E402
from benchmarks.byte_models import genten_mttkrp_bytes, mttkrp_bytes, phi_bytes  # noqa: E402
from benchmarks.stream import OPS, cpu_stream, expected_values, opencl_stream  # noqa: E402
from sktensor_fast.backends import FORMATS  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _strict_json(path):
    def no_constants(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(Path(path).read_text(), parse_constant=no_constants)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    run.main(["--tiny", "--out", str(out), "--threads", "1", "2"])
    return out, _strict_json(out / "benchmarks.json")


# ------------------------------------------------------------------ the whole suite, --tiny
def test_tiny_report_has_every_section(tiny):
    _, rep = tiny
    for key in ("machine", "stream", "kernels", "fits", "scaling", "e2e"):
        assert key in rep and "skipped" not in rep[key], key
    m = rep["machine"]
    assert m["cpu"] and m["threads"] == [1, 2] and m["devices"][0]["device"] == "cpu"
    assert m["versions"]["numpy"] == np.__version__
    assert m["versions"]["sktensor_fast"]
    assert rep["date"] and rep["mode"] == "tiny"


def test_tiny_stream_rows(tiny):
    _, rep = tiny
    rows = rep["stream"]["rows"]
    assert {(r["threads"], r["op"]) for r in rows} == {(t, op) for t in (1, 2) for op in OPS}
    for r in rows:
        assert r["GBs"] > 0 and r["max_rel_err"] == 0.0
        assert r["bytes"] == (16 if r["op"] in ("copy", "scale") else 24) * r["n"]


def test_tiny_kernel_rows(tiny):
    _, rep = tiny
    rows = rep["kernels"]["rows"]
    formats = {r["format"] for r in rows}
    assert formats == {f for f in FORMATS if f != "auto"}
    assert {r["kernel"] for r in rows} == {"mttkrp", "phi"}
    assert {"uber", "nips", "chicago", "nell2"} <= {r["tensor"] for r in rows}
    for r in rows:
        assert r["seconds"] > 0 and r["GBs"] > 0 and r["frac_triad"] > 0
        assert r["max_rel_err"] < 1e-10
    # every mode of every tensor, per format and kernel
    for t in {r["tensor"] for r in rows}:
        ndim = len(next(r["shape"] for r in rows if r["tensor"] == t))
        for f in formats:
            for k in ("mttkrp", "phi"):
                assert sorted(r["mode"] for r in rows if (r["tensor"], r["format"], r["kernel"])
                              == (t, f, k)) == list(range(ndim))


def test_tiny_fits_and_scaling(tiny):
    _, rep = tiny
    fits = rep["fits"]["rows"]
    ours = {r["problem"] for r in fits if r["library"] == "sktensor_fast" and "error" not in r}
    assert {"cp_als", "cp_apr"} <= ours
    for r in fits:
        if "error" not in r:
            assert r["seconds"] > 0 and r["measure"] in ("fit", "log_likelihood", "loss")
    # CP-ALS: every library that ran reaches the same fit from the same start
    als = [r["value"] for r in fits if r["problem"] == "cp_als" and r.get("value") is not None]
    assert len(als) >= 2 and max(als) - min(als) < 1e-6
    sc = rep["scaling"]
    assert len({r["nnz"] for r in sc["nnz"]["rows"]}) == 3
    assert {r["threads"] for r in sc["threads_sweep"]["rows"]} == {1, 2}


def test_tiny_e2e(tiny):
    _, rep = tiny
    e = rep["e2e"]
    assert e["shape"] == [12092, 9184, 28818] and 0 < e["nnz"] <= e["nnz_requested"]
    assert not [n for n in e["notes"] if "did not give back" in n]
    assert e["construct"]["seconds"] > 0 and e["construct"]["numpy_argsort_seconds"] > 0
    assert e["parse"]["seconds"] > 0 and e["parse"]["peak_bytes"] > 0
    assert e["binary"]["load_seconds"] > 0 and e["save_tns"]["bytes"] > 0
    cpu = e["devices"]["cpu"]
    assert cpu["prepare_seconds"] > 0
    for fit in ("cpapr", "cpals"):
        assert 0 < cpu[fit]["kernel_seconds"] <= cpu[fit]["fit_seconds"]
        assert cpu[fit]["kernel_calls"] > 0
    assert {r["phase"] for r in e["rows"]} >= {"construct (unsorted arrays)", "save_tns",
                                              "prepare", "fit cpapr", "fit cpals"}


def test_tiny_plots(tiny):
    out, rep = tiny
    assert set(rep["plots"]) >= {"stream.png", "kernels.png", "fits.png", "scaling_nnz.png",
                                 "scaling_threads.png", "e2e.png"}
    for name in rep["plots"]:
        with open(out / name, "rb") as f:
            assert f.read(8) == PNG_MAGIC


# ------------------------------------------------------------------ byte models, by hand
def test_mttkrp_bytes_hand_count():
    # 3-way COO MTTKRP, nnz = 10, R = 2, shape (4, 5, 6), 8-byte indices and values, mode 0:
    #   coordinates          10 * 3 * 8 = 240
    #   values               10 * 8     =  80
    #   permutation entries  10 * 8     =  80
    #   factor rows read     10 * 2 modes * 2 * 8 = 320
    #   output rows written  4 rows * 2 * 8       =  64
    assert mttkrp_bytes(10, 3, 2, (4, 5, 6)) == 240 + 80 + 80 + 320 + 64 == 784
    # mode 2 writes 6 rows: 240 + 80 + 80 + 320 + 96
    assert mttkrp_bytes(10, 3, 2, (4, 5, 6), mode=2) == 816
    # storage order (COO mode 0): no permutation entry
    assert mttkrp_bytes(10, 3, 2, (4, 5, 6), perm_bytes=0) == 240 + 80 + 320 + 64
    # ALTO: one 8-byte linear index instead of 3 coordinates, no permutation
    assert mttkrp_bytes(10, 3, 2, (4, 5, 6), index_bytes=8, perm_bytes=0) == 80 + 80 + 320 + 64
    # OpenCL copies: int32 coordinates, no permutation: 10*3*4 + 80 + 320 + 64
    assert mttkrp_bytes(10, 3, 2, (4, 5, 6), idx_bytes=4, perm_bytes=0) == 584
    # float32 values and factors: 240 + 10*4 + 80 + 10*2*2*4 + 4*2*4
    assert mttkrp_bytes(10, 3, 2, (4, 5, 6), val_bytes=4) == 240 + 40 + 80 + 160 + 32
    # 4-way, nnz = 5, R = 3, mode 0 of length 7: 5*4*8 + 5*8 + 5*8 + 5*3*3*8 + 7*3*8
    assert mttkrp_bytes(5, 4, 3, (7, 2, 2, 2)) == 160 + 40 + 40 + 360 + 168


def test_phi_bytes_hand_count():
    # Φ adds the rows of B, read once per output row: 4 rows * 2 * 8 = 64
    assert phi_bytes(10, 3, 2, (4, 5, 6)) == 784 + 64
    assert phi_bytes(10, 3, 2, (4, 5, 6), mode=1, perm_bytes=0) == 240 + 80 + 320 + 80 + 80


def test_genten_bytes_hand_count():
    # ((N R + 3) * 8 + N * 8) * nnz = ((6 + 3) * 8 + 24) * 10
    assert genten_mttkrp_bytes(10, 3, 2) == 960


def test_layout_bytes_of_formats():
    from sktensor_fast.backends import get_backend
    from benchmarks.synth import synthetic_tensor
    X = synthetic_tensor((20, 30, 40), 500, seed=0)
    be = get_backend("cpu")
    T = be.prepare(X, "coo")
    assert kernels.layout_bytes(T, 0)[0] == dict(idx_bytes=8, val_bytes=8, perm_bytes=0)
    assert kernels.layout_bytes(T, 1)[0] == dict(idx_bytes=8, val_bytes=8, perm_bytes=8)
    if "alto" in FORMATS:
        params = kernels.layout_bytes(be.prepare(X, "alto"), 2)[0]
        assert params["index_bytes"] == 8 and params["perm_bytes"] == 0


# ------------------------------------------------------------------ STREAM kernels
def test_stream_kernels_values():
    from sktensor_fast.backends.cpu import _stream
    rng = np.random.default_rng(0)
    n = 10_001
    a0, b0 = rng.random(n), rng.random(n)
    for th in (1, 2):
        a, b, c = a0.copy(), b0.copy(), np.empty(n)
        _stream.copy(c, a, th)
        np.testing.assert_array_equal(c, a0)
        _stream.scale(c, b, 3.0, th)
        np.testing.assert_array_equal(c, 3.0 * b0)
        _stream.add(c, a, b, th)
        np.testing.assert_array_equal(c, a0 + b0)
        _stream.triad(c, a, b, 3.0, th)
        np.testing.assert_allclose(c, a0 + 3.0 * b0, rtol=1e-15)
        _stream.fill(c, 7.5, th)
        assert np.all(c == 7.5)


def test_stream_runner_checks_its_result():
    assert expected_values(1) == (15.0, 3.0, 4.0)   # c=1, b=3, c=1+3, a=3+3*4
    res = cpu_stream(4096, 2, trials=3)
    assert res["max_rel_err"] == 0.0
    assert set(res["ops"]) == set(OPS)
    assert res["ops"]["triad"]["bytes"] == 24 * 4096


def test_opencl_stream_values():
    pytest.importorskip("pyopencl")
    from sktensor_fast.backends import get_backend
    try:
        be = get_backend("opencl")
    except Exception as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    res = opencl_stream(be, 5000, trials=2)
    assert res["max_rel_err"] < (1e-12 if res["dtype"] == "float64" else 1e-5)
    assert res["ops"]["copy"]["GBs"] > 0


def test_module_entry_points_exist():
    assert (ROOT / "benchmarks" / "__main__.py").is_file()
    assert os.access(ROOT / "benchmarks" / "run.py", os.R_OK)


def test_no_import_cycle_among_benchmarks(monkeypatch):
    """The suite's modules import each other without a circle (the package's own checker,
    pointed at benchmarks/), and the one-off experiments stay out of the suite."""
    import test_import_graph as graph
    monkeypatch.setattr(graph, "PKG", "benchmarks")
    known = graph.modules()
    assert "benchmarks.contention" in known and "benchmarks.experiments.bench_defaults" in known
    full = {}
    for name, (path, is_pkg) in known.items():
        top, lazy = graph.imports(name, path, is_pkg, known)
        full[name] = graph.expand(name, top | lazy, known)
    assert graph.cycles(full) == []
    assert "benchmarks.common" in full["benchmarks.contention"]
    suite = {"benchmarks.run"}
    for _ in range(len(known)):
        suite |= {m for s in suite for m in full[s]}
    assert not [m for m in suite if m.startswith("benchmarks.experiments")]


def test_opencl_variants_script_runs(capsys):
    """The kernel-variant benchmark edits the shipped kernel source: its edits must still
    apply (it asserts the text it replaces is there) and every variant must build and run."""
    pytest.importorskip("pyopencl")
    from _reference import opencl_backend_or_skip
    opencl_backend_or_skip()
    from benchmarks.experiments import bench_opencl_variants
    bench_opencl_variants.main(["--device", "opencl", "--nnz", "3000", "--shape", "40", "30",
                                "20", "--groups", "64", "--vecs", "1", "4",
                                "--level-chunks", "16", "--repeat", "1"])
    out = capsys.readouterr().out
    for name in ("shipped", "no_gather", "no_index", "level chunk", "1000 nonzeros"):
        assert name in out


def test_streamed_script_runs(tmp_path):
    """bench_streamed fits resident and streamed (capped) tensors and writes JSON."""
    import json
    pytest.importorskip("pyopencl")
    from _reference import opencl_backend_or_skip
    be = opencl_backend_or_skip()
    before = be.max_tensor_bytes
    from benchmarks import bench_streamed
    out = tmp_path / "streamed.json"
    bench_streamed.main(["--device", "opencl", "--shape", "uber", "--nnz", "4000", "--rank", "4",
                         "--iters", "1", "--repeat", "1", "--algos", "cpapr",
                         "--out", str(out)])
    rep = json.loads(out.read_text())
    assert [r["algo"] for r in rep["rows"]] == ["cpapr"]
    for r in rep["rows"]:
        assert not r["resident"]["streamed"] and r["streamed"]["streamed"]
        assert r["streamed"]["device_bytes"] <= rep["cap_bytes"] < rep["resident_need_bytes"]
        assert r["ratio"] > 0 and r["score_rel_diff"] < 1e-12
    assert be.max_tensor_bytes == before      # the backend's setting is restored


def test_streamed_script_stacks_the_parts_of_the_weak_runs(tmp_path):
    """bench_streamed --parts 2 fits the tensor of bench_distributed --weak --stacked for two
    processes (two parts stacked along mode 0) and reports per-iteration times both ways."""
    import json
    pytest.importorskip("pyopencl")
    from _reference import opencl_backend_or_skip
    opencl_backend_or_skip()
    from benchmarks import bench_streamed
    from benchmarks.synth import synthetic_tensor
    out = tmp_path / "streamed.json"
    bench_streamed.main(["--device", "opencl", "--shape", "uber", "--nnz", "3000", "--rank", "3",
                         "--iters", "1", "--repeat", "1", "--algos", "cpals", "--parts", "2",
                         "--out", str(out)])
    rep = json.loads(out.read_text())
    assert rep["nnz"] == 6000 and rep["parts"] == 2
    assert rep["shape"][0] == 2 * 183 and rep["shape"][1:] == [24, 1140, 1717]
    X = bench_streamed._stacked((183, 24, 1140, 1717), 3000, 2, np.dtype("float64"))
    p1 = synthetic_tensor((183, 24, 1140, 1717), 3000, seed=1)
    top = X.subs[:, 0] >= 183
    assert np.array_equal(np.sort(X.vals[top]), np.sort(p1.vals))
    for kind in ("resident", "streamed"):
        assert np.isfinite(rep["rows"][0][kind]["s_per_iter_by_difference"])


def test_streamed_script_streamed_only_without_a_cap(tmp_path, monkeypatch):
    """--kinds streamed --cap-fraction 0 fits only the streamed tensor, under the cap the
    backend itself sets (here from the environment's cap, standing for a device too small
    for the resident copies), from bench_distributed's start (--start random)."""
    import json
    pytest.importorskip("pyopencl")
    from _reference import opencl_backend_or_skip
    be = opencl_backend_or_skip()
    from benchmarks import bench_streamed
    from sktensor_fast.backends.opencl import streamed
    monkeypatch.setattr(be, "max_tensor_bytes", 60_000)
    out = tmp_path / "streamed.json"
    bench_streamed.main(["--device", "opencl", "--shape", "uber", "--nnz", "3000", "--rank", "3",
                         "--iters", "1", "--repeat", "1", "--algos", "cpals", "--kinds",
                         "streamed", "--cap-fraction", "0", "--start", "random",
                         "--out", str(out)])
    rep = json.loads(out.read_text())
    row = rep["rows"][0]
    assert rep["cap_bytes"] is None and rep["kinds"] == ["streamed"]
    assert "resident" not in row and "ratio" not in row
    assert row["streamed"]["streamed"] and row["streamed"]["device_bytes"] <= 60_000
    assert rep["resident_need_bytes"] > 60_000 and rep["device_global_mem_bytes"] > 0
    from benchmarks.synth import synthetic_tensor
    from sktensor_fast import CPALS
    X = synthetic_tensor((183, 24, 1140, 1717), 3000, seed=0)
    want = CPALS(rank=3, max_iter=1, tol=0, random_state=0, device="cpu").fit(X).fit_
    assert abs(row["streamed"]["score"] - want) < 1e-9
    assert streamed.parse_max_bytes(be.max_tensor_bytes) == 60_000


def test_als_processes_script_runs(capsys):
    pytest.importorskip("pyopencl")
    from _reference import opencl_backend_or_skip
    opencl_backend_or_skip()
    from benchmarks.experiments import bench_als_processes
    ts = bench_als_processes.main(["--device", "opencl", "--shape", "20", "15", "10", "--nnz",
                                   "1500", "--rank", "3", "--iters", "2", "--fits", "2",
                                   "--label", "here"])
    assert len(ts) == 2 and np.all(ts > 0)
    assert capsys.readouterr().out.startswith("here min ")


def test_specialize_script_runs(tmp_path):
    """bench_specialize times the lanes kernels built for the mode / rank and finds the same
    bits in every setting."""
    pytest.importorskip("pyopencl")
    from _reference import opencl_backend_or_skip
    opencl_backend_or_skip()
    import json
    from benchmarks.experiments import bench_specialize
    out = tmp_path / "spec.json"
    bench_specialize.main(["--device", "opencl", "--shape", "20", "15", "10", "--nnz", "1500",
                           "--rank", "4", "--repeat", "1", "--rounds", "1", "--out", str(out)])
    rep = json.loads(out.read_text())
    assert [r["setting"] for r in rep["rounds"]] == [0, 1, 2, 3]
    assert all(r["same_bits"] and len(r["mttkrp_ms"]) == 3 and min(r["phi_ms"]) > 0
               for r in rep["rounds"])


def test_transfer_async_script_runs(capsys):
    """transfer_async times each transfer behind a MTTKRP with its event kept and dropped, and
    the mappings give the device's data."""
    pytest.importorskip("pyopencl")
    from _reference import opencl_backend_or_skip
    opencl_backend_or_skip()
    from benchmarks.experiments import transfer_async
    transfer_async.main(["--device", "opencl", "--shape", "30", "20", "10", "--nnz", "2000",
                         "--repeat", "1"])
    out = capsys.readouterr().out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ")]
    names = [r[0].strip() for r in rows[1:]]       # after the header
    assert names[0] == "download into page-locked memory"
    assert "mapping of the device array" in names
    assert "WRONG DATA" not in out
    dropped = {r[0].strip(): r[3].strip() for r in rows[1:]}
    assert float(dropped["download into plain memory"]) >= 0
    assert dropped["copy on the device"] == ""


def test_cpapr_parts_script_runs(tmp_path):
    """bench_cpapr_parts times a CP-APR MU fit and its parts on a device; its data term is the
    CPU backend's for the same factors."""
    pytest.importorskip("pyopencl")
    from _reference import opencl_backend_or_skip
    opencl_backend_or_skip()
    import json
    from benchmarks.experiments import bench_cpapr_parts
    from benchmarks.synth import synthetic_tensor
    from sktensor_fast.backends import get_backend
    out = tmp_path / "parts.json"
    bench_cpapr_parts.main(["--device", "opencl", "--shape", "20", "15", "10", "--nnz", "1500",
                            "--rank", "4", "--outer", "2", "--fits", "2", "--out", str(out)])
    rep = json.loads(out.read_text())
    assert len(rep["fit_s"]) == 2 and min(rep["fit_s"]) > 0 and len(rep["phi_ms"]) == 3
    assert rep["kkt_ms"] > 0 and rep["data_term_ms"] > 0 and np.isfinite(rep["log_likelihood"])
    X = synthetic_tensor((20, 15, 10), 1500, seed=0)
    rng = np.random.default_rng(0)
    A = [rng.random((s, 4)) + 0.1 for s in X.shape]
    w = rng.random(4) + 0.5
    cpu = get_backend("cpu")
    want = cpu.poisson_data_term(cpu.prepare(X), w, A, 1e-10)
    assert abs(rep["data_term"] - want) <= 1e-12 * abs(want)


def test_phi_script_runs(tmp_path, capsys):
    """bench_phi times Φ of every mode and the data term for COO and ALTO and writes JSON."""
    import json
    from benchmarks import bench_phi
    out = tmp_path / "phi.json"
    bench_phi.main(["--shape", "30", "20", "10", "8", "--nnz", "2000", "--threads", "1",
                    "--repeat", "1", "--out", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [r["format"] for r in rows] == ["coo", "alto"]
    for r in rows:
        assert len(r["phi_ms_per_mode"]) == 4 and r["phi_ms_sum"] > 0 and r["data_term_ms"] > 0
    assert "data term" in capsys.readouterr().out


def test_construct_script_runs(tmp_path, capsys):
    """bench_construct times a first call in a fresh process and the compiled passes one by
    one, next to NumPy's argsort, and writes JSON."""
    import json
    from benchmarks.experiments import bench_construct
    out = tmp_path / "construct.json"
    bench_construct.main(["--nnz", "3000", "--threads", "1", "2", "--repeat", "1", "--fresh",
                          "1", "--out", str(out)])
    res = json.loads(out.read_text())
    assert [r["threads"] for r in res["first_calls"]] == [1, 2]
    assert all(r["construct"] > 0 and r["argsort"] > 0 for r in res["first_calls"])
    for nt in (1, 2):
        for phase in ("scan", "scatter", "buckets", "decode", "total"):
            assert res["phases"][f"  {phase}, {nt} thread(s), wall"]["best"] >= 0
    assert "SparseTensor, 2 thread(s)" in capsys.readouterr().out


# ------------------------------------------------------------------ contention section
def test_contention_is_only_run_when_asked_for(tiny):
    _, rep = tiny
    assert "skipped" in rep["contention"]
    assert "contention" in run.SECTIONS and "contention" not in run.DEFAULT_SECTIONS


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_busy_processes_are_stopped_and_bounded():
    import time
    from benchmarks.contention import BusyProcesses
    with BusyProcesses(2) as bp:
        pids = [p.pid for p in bp.procs]
        time.sleep(0.2)
        assert all(_alive(p) for p in pids)
    assert not any(_alive(p) for p in pids)           # stopped on leaving the block
    with pytest.raises(RuntimeError):
        with BusyProcesses(1) as bp:
            pid = bp.procs[0].pid
            raise RuntimeError("interrupted")
    assert not _alive(pid)                             # ... and on an exception
    bp = BusyProcesses(1, seconds=0.3).start()         # their own deadline
    try:
        bp.procs[0].wait(timeout=30)
        assert bp.check() == 1 and bp.restarted == 1   # restarted when found ended
    finally:
        bp.stop()


def test_contention_child_and_summary(tmp_path):
    """One fresh fit process, then the table and the plot from its numbers."""
    from benchmarks import contention
    spec = {"tensors": [["synthetic-tiny", [20, 15, 10], 600, 3]], "fits": ["cpals"],
            "repeat": 1}
    r = contention.run_child(spec, 1, timeout=600)
    assert r["threads"] == 1 and r["omp_num_threads"] == "1"
    from sktensor_fast._config import OPENMP_WAIT_VARIABLES
    if not any(v in os.environ for v in OPENMP_WAIT_VARIABLES):
        assert r["wait_policy"].startswith("passive")
    (res,) = r["results"]
    # short fits are repeated beyond ``repeat`` until a second has passed, at most MAX_REPEAT
    assert res["fit"] == "cpals" and res["nnz"] > 0
    n = len(res["seconds"])
    assert 1 <= n <= contention.MAX_REPEAT
    assert n == contention.MAX_REPEAT or sum(res["seconds"]) >= contention.MIN_SECONDS
    settings = contention.thread_settings(None, compare_spin=True)
    assert [s[0] for s in settings] == ["1", "default", "default+spin"]
    assert settings[2][2] == contention.SPIN_ENV
    runs = []
    for cond, busy in (("quiet", 0), ("busy", 2)):
        for label, t in (("1", 1.0), ("default", 0.6), ("default+spin", 3.0)):
            runs.append({"condition": cond, "setting": label, "threads": 2,
                         "results": [{"tensor": "T", "fit": "cpals", "seconds": [t, t * 2]}]})
    rows = contention.summarize(runs, settings, [("quiet", 0), ("busy", 2)],
                                [("T", None, None, 3)], ["cpals"])
    assert len(rows) == 2 and rows[1]["busy"] == 2
    assert rows[0]["ratio_default"] == pytest.approx(0.6)
    assert rows[0]["ratio_default+spin"] == pytest.approx(3.0)
    assert "| busy (+2) | T | cpals |" in contention.table(rows, settings)
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = contention.plot({"rows": rows, "settings": [{"label": s[0]} for s in settings]},
                          tmp_path, plt)
    fig.savefig(tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == PNG_MAGIC


def test_defaults_script_runs(tmp_path, capsys):
    """bench_defaults fits estimators with their defaults on the embedded data, gives each
    one's CPU time as a multiple of CPAPR pdnr's and writes JSON."""
    import json
    from benchmarks.experiments import bench_defaults
    med = bench_defaults.main(["--cases", 'CPAPR(solver="pdnr")', "CPALS()", "--seeds", "0",
                               "--out", str(tmp_path / "d.json")])
    out = capsys.readouterr().out
    assert "| `CPALS()` |" in out and "CPU × pdnr" in out
    assert med['CPAPR(solver="pdnr")']["quality"] > 0 and 0 < med["CPALS()"]["quality"] < 1
    report = json.loads((tmp_path / "d.json").read_text())
    assert len(report["fits"]) == 2 and report["threads"] == 1


def test_cpapr_seeds_script_runs(capsys):
    from benchmarks.experiments import bench_cpapr_seeds
    n_inf = bench_cpapr_seeds.main(["--solvers", "mu", "--ranks", "5", "--seeds", "0",
                                    "--max-iter", "10"])
    out = capsys.readouterr().out
    assert n_inf == 0 and "| mu | 5 |" in out and "0 of 1 fits" in out


def test_gcp_build_script_runs(capsys):
    """bench_gcp_build times each GCP program's build (a new source each time) and two first
    fits."""
    from _reference import opencl_backend_or_skip
    opencl_backend_or_skip()
    from benchmarks.experiments import bench_gcp_build
    res = bench_gcp_build.main(["--device", "opencl", "--repeat", "1"])
    assert [name for name, _ in res["builds"]] == ["step, no rank", "step, rank 16", "set-up"]
    assert all(sec > 0 for _, sec in res["builds"])
    res = bench_gcp_build.main(["--device", "opencl", "--first-fit", "--nnz", "2000",
                                "--shape", "40", "30", "20", "--rank", "2"])
    assert res["first_fit_s"] > 0 and res["second_fit_s"] > 0
    assert "first fit" in capsys.readouterr().out


def test_gcp_kernel_profile_and_device_fit_scripts_run():
    """bench_gcp_kernels (in its own process: it makes every queue a profiling one) prints
    each kernel of the fused steps with its device time; bench_gcp_fit_devices fits on the
    OpenCL device and the CPU and gets the same loss."""
    import subprocess
    from _reference import checkout_env, opencl_backend_or_skip
    opencl_backend_or_skip()
    exp = ROOT / "benchmarks" / "experiments"
    r = subprocess.run([sys.executable, str(exp / "bench_gcp_kernels.py"), "3000", "opencl"],
                       capture_output=True, text=True, timeout=300, env=checkout_env())
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("gcp_draw_terms", "gcp_sort_pass", "gcp_run_sums", "gcp_run_join",
                 "gcp_update_all"):
        assert name in r.stdout, r.stdout
    from benchmarks.experiments import bench_gcp_fit_devices
    res = bench_gcp_fit_devices.main(["--nnz", "2000", "--shape", "40", "30", "20", "--rank",
                                      "2", "--epochs", "1", "--device", "opencl"])
    assert res["opencl"][1] == pytest.approx(res["cpu"][1], rel=1e-9)


def test_gcp_steps_script_runs(tmp_path, capsys):
    """bench_gcp_steps times GCP steps on the OpenCL device and counts the launches: the
    fused steps take draw + terms, the sort's counts, scans and passes, the row sums and their
    join, and the update."""
    import json
    from _reference import opencl_backend_or_skip
    opencl_backend_or_skip()
    from benchmarks.experiments import bench_gcp_steps
    res = bench_gcp_steps.main(["--nnz", "2000", "--shape", "40", "30", "20", "--rank", "2",
                                "--steps", "4", "--warmup", "1", "--repeat", "1",
                                "--out", str(tmp_path / "s.json")])
    out = capsys.readouterr().out
    assert "kernel launches/step" in out and "steps vs stepwise: 0" in out
    # one sort pass (40 rows) after its count and its scan
    assert res["ways"]["steps"]["kernels_per_step"] == 7.0
    assert res["ways"]["stepwise"]["kernels_per_step"] > 7.0
    assert json.loads((tmp_path / "s.json").read_text())["nnz"] == 2000
    res = bench_gcp_steps.main(["--nnz", "2000", "--shape", "40", "30", "20", "--rank", "4",
                                "--steps", "3", "--warmup", "1", "--repeat", "1",
                                "--ways", "steps", "steps_rank_arg"])
    assert res["max_abs_diff_steps_vs_steps_rank_arg"] == 0.0
    assert "steps vs steps_rank_arg: 0" in capsys.readouterr().out


def test_gcp_threads_script_runs(tmp_path, capsys):
    """bench_gcp_threads times Adam steps and whole GCP fits at 1 and 2 threads, checks that
    they give the same bits and writes JSON."""
    import json
    from benchmarks.experiments import bench_gcp_threads
    from sktensor_fast.backends import get_backend
    rows = bench_gcp_threads.main(["--nnz", "3000", "--shape", "40", "30", "20", "--rank", "3",
                                   "--steps", "5", "--rounds", "1", "--phases",
                                   "--out", str(tmp_path / "g.json")])
    out = capsys.readouterr().out
    assert "| 5 steps | 2 |" in out and "CPU ratio" in out and "est. speedup" in out
    assert len(rows) == 4 and all(r["same_bits"] for r in rows)
    report = json.loads((tmp_path / "g.json").read_text())
    assert report["nnz"] == 3000 and [r["threads"] for r in report["rows"]] == [1, 2, 1, 2]
    phases = report["phases"]
    assert [r["threads"] for r in phases] == [1, 2]
    for r in phases:   # every phase was entered; the parts add up to the fit
        p = r["phases"]
        assert all(p[k]["cpu_s"] > 0 for k in ("check", "setup", "loss", "steps"))
        assert sum(p[k]["cpu_s"] for k in ("check", "setup", "loss", "steps", "other")) == \
            pytest.approx(p["fit"]["cpu_s"], rel=1e-6, abs=1e-3)
    # the timers are taken off the shared backend again
    assert "steps" not in vars(get_backend("cpu").gcp)


def test_als_fixed_script_runs(tmp_path, capsys):
    from benchmarks.experiments import bench_als_fixed
    rows = bench_als_fixed.main(["--threads", "1", "--iters", "3", "--repeat", "1",
                                 "--json", str(tmp_path / "als.json")])
    ours = [r for r in rows if r["library"] == "sktensor_fast"]
    assert {r["variant"] for r in ours} == {f for f in FORMATS if f != "auto"}
    assert all(np.isfinite(r["s_per_iter"]) for r in ours)
    assert _strict_json(tmp_path / "als.json") is not None
    assert "| library | variant |" in capsys.readouterr().out


def test_tiny_script_runs(tmp_path, capsys):
    from benchmarks.experiments import bench_tiny
    rows = bench_tiny.main(["--ranks", "2", "--formats", "auto", "--threads", "1", "2",
                            "--short", "1", "--long", "3", "--repeat", "2", "--no-genten",
                            "--json", str(tmp_path / "tiny.json")])
    assert [(r["rank"], r["threads"]) for r in rows] == [(2, 1), (2, 2)]
    for r in rows:
        assert r["fit_wall"]["best"] > 0 and r["fit_cpu"]["median"] >= r["fit_cpu"]["best"]
        assert np.isfinite(r["iter_wall"]["best"]) and 0 < r["fit_value"] <= 1
    assert rows[0]["fit_value"] == rows[1]["fit_value"]        # the same model on 2 threads
    assert _strict_json(tmp_path / "tiny.json") is not None
    assert "iter wall" in capsys.readouterr().out


# ------------------------------------------------------------------ tuning decisions
def test_code_cites_tuning_entries_that_exist():
    """The package cites doc/guide/tuning.rst by an entry's title, not the benchmarks' README;
    every title cited is the start of a section title of that page."""
    import re
    page = (ROOT / "doc" / "guide" / "tuning.rst").read_text(encoding="utf-8").splitlines()
    titles = [page[i - 1].strip() for i in range(1, len(page))
              if page[i] and set(page[i]) == {"~"} and len(page[i]) >= len(page[i - 1].strip())]
    assert "ALTO: buffers or compact path" in titles and len(titles) >= 10
    cited, readme = [], []
    for path in sorted((ROOT / "sktensor_fast").rglob("*")):
        if path.suffix not in (".py", ".pyx", ".h", ".cl"):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        text = " ".join(re.sub(r"^\s*(#:?|//|/?\*)?\s*", "", ln) for ln in lines)
        readme += [path.name] * text.count("benchmarks/README")
        cited += [(path.name, t) for t in re.findall(r'tuning\.rst(?:``)?[,;]?\s*"([^"]+)"',
                                                      text)]
    assert not readme, f"code cites benchmarks/README.md: {readme}"
    assert len(cited) >= 10, cited
    unknown = [(f, t) for f, t in cited if not any(x.startswith(t) for x in titles)]
    assert not unknown, f"no such entry in doc/guide/tuning.rst: {unknown}"


def test_bench_streaming_small(shared_data, tmp_path):
    """bench_streaming on the first days: loss, times and memory per batch in its JSON."""
    from benchmarks import bench_streaming
    out = tmp_path / "s.json"
    bench_streaming.main(["--days", "6", "--seeds", "0", "--mem-batches", "12",
                          "--no-pygenten", "--out", str(out)])
    rep = _strict_json(out)
    med = rep["loss_and_time"]["median"]
    assert med["batch_loss"] > 0 and med["stream_loss"] > 0 and med["batch_median_seconds"] > 0
    assert rep["memory"]["batches"] == 12 and rep["memory"]["peak_max"] > 0


def test_apr_tiny_script_runs(tmp_path, capsys):
    """bench_apr_tiny on a small tensor of the same kind: per-iteration and Φ times at 1 and 2
    threads, the Φ floor, and pyttb (when installed) from the same start with the same
    log-likelihood after 2 outer iterations."""
    import importlib.util
    from benchmarks.experiments import bench_apr_tiny
    args = ["--shape", "12", "9", "120", "--rank", "3", "--repeat", "1", "--iters", "1",
            "--json", str(tmp_path / "apr.json")]
    has_pyttb = importlib.util.find_spec("pyttb") is not None
    rep = bench_apr_tiny.main(args + ([] if has_pyttb else ["--no-pyttb"]))
    assert rep["tensor"]["nnz"] > 0.9 * 12 * 9 * 120
    assert "fibers" in rep["layout"]
    for t in (1, 2):
        r = rep["threads"][t]
        # a difference of two fits' times: on so small a tensor noise may make it <= 0
        assert np.isfinite(r["per_outer_best_s"]) and len(r["phi_best_s"]) == 3
        assert all(x > 0 for x in r["phi_best_s"]) and all(x > 0 for x in r["phi_over_floor"])
    if has_pyttb:
        assert rep["pyttb"]["loglik_rel_diff_2_iterations"] < 1e-9
    assert _strict_json(tmp_path / "apr.json") is not None
    assert "Φ floor per mode" in capsys.readouterr().out


def test_apr_tiny_ab_interleaves_two_checkouts(tmp_path, capsys):
    """bench_apr_tiny --ab: two worker processes (here both of this checkout), their rounds
    alternating, every round's per-iteration and data term times of each side."""
    from benchmarks.experiments import bench_apr_tiny
    root = str(Path(bench_apr_tiny.__file__).resolve().parents[2])
    rep = bench_apr_tiny.main(["--shape", "12", "9", "120", "--rank", "3", "--repeat", "3",
                               "--iters", "1", "--ab", root, "--no-pyttb",
                               "--json", str(tmp_path / "ab.json")])
    assert rep["A"] == rep["B"] == root and rep["rounds"] == 3
    for side in "AB":
        for t in (1, 2):
            r = rep["results"][side][t]
            assert len(r["per_outer_s"]) == 3 and all(np.isfinite(r["per_outer_s"]))
            assert len(r["data_term_s"]) == 3 and all(x > 0 for x in r["data_term_s"])
    assert _strict_json(tmp_path / "ab.json")["rounds"] == 3
    assert "B / A" in capsys.readouterr().out


def test_shapes_section_runs_its_scripts():
    """The shapes section runs each experiment script in a process of its own with the
    preset's arguments and keeps its JSON report (tiny sizes: a smoke test)."""
    from benchmarks import shapes
    res, table = shapes.section_shapes("tiny", [1, 2], cases=["tiny", "gcp_defaults"])
    assert res["notes"] == [], res["notes"]
    rep = res["cases"]["gcp_defaults"]["report"]
    assert rep and "GCP" in table and "sktensor_fast" in table
    assert "--threads" in res["cases"]["tiny"]["command"]
    with pytest.raises(ValueError, match="unknown case"):
        shapes.case_args("nope", "tiny", [1])


def test_skewed_script_runs(tmp_path, capsys):
    """bench_skewed builds its Pareto tensor, times CP-ALS, the MTTKRPs and the dense steps at
    1 and 2 threads, the ALTO phases of both conflict paths, and writes JSON; with --ab it
    runs pairs of processes and checks that both sides give the same models."""
    import json
    from benchmarks.experiments import bench_skewed
    X = bench_skewed.skewed_tensor((300, 200, 100), 5000, 1.2, 2.0, seed=3)
    Y = bench_skewed.skewed_tensor((300, 200, 100), 5000, 1.2, 2.0, seed=3)
    assert np.array_equal(X.subs, Y.subs) and np.array_equal(X.vals, Y.vals)
    assert X.vals.sum() == 5000 and X.nnz < 5000                 # repeats summed
    shares = bench_skewed.top_shares(X)
    assert all(0 < a <= b <= 1 for a, b in shares)
    small = ["--shape", "300", "300", "300", "--draws", "20000", "--scale", "2", "--rank",
             "4", "--iters", "2", "--rounds", "1"]
    out = tmp_path / "s.json"
    bench_skewed.main(small + ["--phases", "--formats", "auto", "alto", "--out", str(out)])
    text = capsys.readouterr().out                      # auto: COO at 4,248 nonzeros
    assert "| auto (coo) | cpals |" in text and "| alto | cpals |" in text
    assert "ALTO's MTTKRP by phase" in text
    res = _strict_json(out)
    assert all(r["same_bits"] for r in res["rows"] if r["what"] == "cpals")
    assert {(r["mode"], r["path"], r["threads"]) for r in res["phases"]} == \
        {(m, p, t) for m in range(3) for p in ("buffer", "compact") for t in (1, 2)}
    assert all(r["parts_s"] > 0 and r["waves"] >= 1 for r in res["phases"])
    ab = tmp_path / "ab.json"
    bench_skewed.main(small + ["--formats", "auto", "--ab", str(ROOT), "--pairs", "1",
                               "--out", str(ab)])
    assert "| auto | cpals |" in capsys.readouterr().out
    res = json.loads(ab.read_text())
    assert len(res["reports"]["before"]) == len(res["reports"]["after"]) == 1
    models = {r["model_sha1"] for side in res["reports"].values() for rep in side
              for r in rep["rows"] if r["what"] == "cpals"}
    assert len(models) == 1                                      # the same checkout twice


def test_gpu_section_runs_on_an_opencl_device(tmp_path):
    """The gpu section at --tiny sizes on the OpenCL device the tests have (PoCL in CI):
    kernels of every mode on the CPU and the device, agreeing to rounding, whole fits of the
    three estimators on both with the same final scores, a table and a plot."""
    from _reference import opencl_backend_or_skip
    opencl_backend_or_skip()
    rep = run.main(["--tiny", "--sections", "gpu", "--device", "opencl", "--threads", "1",
                    "--out", str(tmp_path)])
    g = rep["gpu"]
    devices = {r["device"] for r in g["rows"]}
    assert devices == {"cpu", "opencl"}
    assert {r["tensor"] for r in g["rows"]} == {"nell2", "uber"}
    assert all(r["ms"] > 0 and r["rel_err_vs_cpu"] < 1e-10 for r in g["rows"])
    fits = {(f["tensor"], f["fit"], f["device"]): f for f in g["fits"]}
    assert len(fits) == 12 and not any("error" in f for f in fits.values())
    for (t, fit, d), f in fits.items():
        if d == "opencl":
            cpu = fits[(t, fit, "cpu")]
            assert f["n_iter"] == cpu["n_iter"]
            assert f["score"] == pytest.approx(cpu["score"], rel=1e-9)
    assert "gpu.png" in rep["plots"]


def test_launch_and_overhead_scripts_run(tmp_path):
    """bench_launch and bench_gpu_overheads (each in its own process: the second makes every
    queue a profiling one) time a launch, an MTTKRP call and a CP-ALS fit on the device."""
    import json
    import subprocess
    from _reference import checkout_env, opencl_backend_or_skip
    opencl_backend_or_skip()
    exp = ROOT / "benchmarks" / "experiments"
    r = subprocess.run([sys.executable, str(exp / "bench_launch.py"), "--device", "opencl",
                        "--nnz", "3000"], capture_output=True, text=True, timeout=300,
                       env=checkout_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert "scalar types declared" in r.stdout and "backend.mttkrp" in r.stdout
    out = tmp_path / "o.json"
    r = subprocess.run([sys.executable, str(exp / "bench_gpu_overheads.py"), "--device",
                        "opencl", "--shape", "30", "20", "10", "--nnz", "2000", "--repeat", "2",
                        "--als-iters", "2", "--chunks", "64", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=checkout_env())
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    for kind in ("mttkrp", "phi", "mttkrp_chunk64"):
        assert len(res["kernels"][kind]) == 3
        assert all(k["launches"] >= 1 and k["device_ms"] > 0 for k in res["kernels"][kind])
    fit = res["cpals_fit"][0]
    assert fit["launches"] > 0 and 0 < fit["kernels_s"] <= fit["device_s"]


def test_synthetic_tensors_kept_in_the_cache_folder(tmp_path, monkeypatch):
    """With SKTF_SYNTH_CACHE set, a synthetic tensor is written once and read back equal; other
    arguments make another file."""
    from benchmarks import synth
    monkeypatch.setenv(synth.CACHE_ENV, str(tmp_path))
    a = synth.synthetic_tensor((30, 20, 10), 500, seed=3)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"
    b = synth.synthetic_tensor((30, 20, 10), 500, seed=3)
    assert np.array_equal(a.subs, b.subs) and np.array_equal(a.vals, b.vals)
    assert b.shape == a.shape
    synth.synthetic_tensor((30, 20, 10), 500, seed=4)
    assert len(list(tmp_path.iterdir())) == 2
    monkeypatch.delenv(synth.CACHE_ENV)
    c = synth.synthetic_tensor((30, 20, 10), 500, seed=3)
    assert np.array_equal(a.subs, c.subs)


def test_synthetic_generator_sort_is_numpys():
    """The generator's threaded radix sort of large key arrays gives NumPy's order (so the
    synthetic tensors are the ones np.sort gave), repeated keys included."""
    from benchmarks import synth
    rng = np.random.default_rng(2)
    for high in (3 * 10 ** 12, 1000):
        x = rng.integers(0, high, (1 << 20) + 17)
        assert np.array_equal(synth._sorted(x.copy()), np.sort(x))
    small = rng.integers(0, 50, 100)
    assert np.array_equal(synth._sorted(small.copy()), np.sort(small))


def test_zipf_search_through_the_guide_table_is_searchsorted():
    """The generator's guide-table search gives np.searchsorted's indices exactly: random
    uniforms, the bin edges and the CDF's own values with their neighbours (the ties)."""
    from benchmarks import synth
    rng = np.random.default_rng(8)
    for n in (64, 183, 5000):
        p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** 1.2
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        guide = synth._guide_table(cdf)
        K = len(guide) - 1
        edges = np.arange(K, dtype=np.float64) / K
        inner = cdf[cdf < 1]
        u = np.concatenate([rng.random(20000), edges, np.nextafter(edges, 1),
                            np.nextafter(edges[1:], 0), inner, np.nextafter(inner, 0)])
        assert np.array_equal(synth._search_right(cdf, guide, u),
                              np.searchsorted(cdf, u, side="right"))


def test_timeline_waits_for_the_device_only_when_asked():
    """benchmarks/timeline.py: ``record(dist)`` waits for the device's queue before and after
    every wrapped call (a kernel is charged to the call that enqueued it); ``record(dist,
    sync=False)`` never waits, and each event is the call's own time less that of the
    wrapped calls inside it; ``undo`` puts the methods back."""
    import time
    from benchmarks import timeline

    class Queue:
        waits = 0

        def finish(self):
            Queue.waits += 1

    class Part:
        pass

    class Dist:
        local, apr, gcp, channel = Part(), Part(), Part(), Part()

        def _mttkrp(self, T, factors, mode, out):
            self._download(None, None)
            time.sleep(0.02)

        def _download(self, a, out):
            time.sleep(0.03)

    Dist.local.queue = Queue()
    for sync, waits in ((True, 4), (False, 0)):
        dist = Dist()
        Queue.waits = 0
        rec, undo = timeline.record(dist, sync)
        dist._mttkrp(None, None, 1, None)
        undo()
        assert Queue.waits == waits, (sync, Queue.waits)
        ev = {name: (mode, dt) for name, mode, _, dt in rec.events}
        assert ev["mttkrp"][0] == 1 and 0.015 < ev["mttkrp"][1] < 0.045, ev
        assert ev["download"][0] is None and ev["download"][1] >= 0.029, ev
        assert "_mttkrp" not in dist.__dict__
