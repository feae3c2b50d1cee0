"""The command line: `python -m sktensor_fast` / `sktensor-fast`."""
import subprocess
import sys

import numpy as np
import pytest

from sktensor_fast import SparseTensor, save_tns
from sktensor_fast.cli import main


def test_no_arguments_decomposes_embedded_data(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "flights-routes" in out
    assert "Component 1:" in out
    # labels of every mode are printed, not indices
    assert "origin:" in out and any(a in out for a in ("JFK", "EWR", "LGA"))
    assert "weekday:" in out and "day" in out


def test_module_runs_without_arguments():
    r = subprocess.run([sys.executable, "-m", "sktensor_fast", "--quiet", "--rank", "2",
                        "--max-iter", "5"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Component 2:" in r.stdout


def test_fit_a_file_with_labels_and_save(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = SparseTensor(rng.integers(0, [6, 5, 4], size=(80, 3)), rng.integers(1, 5, 80), (6, 5, 4))
    path = tmp_path / "t.tns.gz"
    save_tns(path, X)
    (tmp_path / "mode-2-colour.map").write_text("red\ngreen\nblue\ncyan\nmagenta\n")
    out_file = tmp_path / "model"              # written exactly there, no .npz added
    assert main(["fit", str(path), "--method", "CPALS", "--rank", "2", "--seed", "1",
                 "--out", str(out_file), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "CPALS(rank=2)" in out and "fit" in out
    assert any(c in out for c in ("red", "green", "blue", "cyan", "magenta"))
    assert f"Model saved to {out_file} (load it with sktensor_fast.load_model)" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mode-2-colour.map", "model",
                                                           "t.tns.gz"]
    from sktensor_fast import load_model
    model = load_model(out_file)
    assert model.factors_[0].shape == (6, 2) and model.weights_.shape == (2,)
    assert model.labels_[1] == ["red", "green", "blue", "cyan", "magenta"]
    assert model.get_params()["random_state"] == 1


def test_errors_are_reported_not_raised(tmp_path, capsys):
    bad = tmp_path / "bad.tns"
    bad.write_text("1 1 1 2\n1 x 1 3\n")
    assert main(["fit", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err
    assert main(["fit", str(tmp_path / "missing.tns"), "--quiet"]) == 2
    with pytest.raises(SystemExit):             # argparse: one line and status 2
        main(["fit", "--method", "cpals", "--rank", "0", "--quiet"])
    assert "--rank must be >= 1" in capsys.readouterr().err


def test_info(capsys):
    assert main(["info"]) == 0
    assert "OpenMP" in capsys.readouterr().out


def test_default_fit_of_embedded_data_is_finite(capsys):
    """The main job's model is positive at every nonzero, with every solver."""
    for solver in ("pdnr", "mu", "pqnr"):
        assert main(["fit", "--quiet", "--solver", solver, "--max-iter", "30"]) == 0
        summary = [ln for ln in capsys.readouterr().out.splitlines()
                   if ln.startswith("CPAPR")][0]
        assert "-inf" not in summary and "log-likelihood" in summary


def test_method_names_any_case_and_one_default_solver(capsys):
    import inspect
    from sktensor_fast import CPAPR
    assert main(["fit", "--method", "CPAPR", "--quiet", "--rank", "2", "--max-iter", "3"]) == 0
    out = capsys.readouterr().out
    default = inspect.signature(CPAPR).parameters["solver"].default
    assert f"CPAPR(rank=2, solver={default!r})" in out        # the estimator's default
    assert "NOT converged (stopped at max_iter" in out          # no silent max_iter
    assert "How to read this" in out and "near-uniform" in out  # legend, uniform modes
    assert main(["fit", "--method", "Gcp", "--quiet", "--rank", "2", "--max-iter", "1"]) == 0
    assert "GCP(rank=2" in capsys.readouterr().out


def test_version():
    r = subprocess.run([sys.executable, "-m", "sktensor_fast", "--version"],
                       capture_output=True, text=True, timeout=120)
    from sktensor_fast import __version__
    assert r.returncode == 0 and r.stdout.strip() == f"sktensor-fast {__version__}"


@pytest.mark.parametrize("argv,message", [
    (["--threads", "0"], "--threads must be >= 1, got 0"),
    (["--top", "-2"], "--top must be >= 1, got -2"),
    (["--method", "nmf"], "invalid choice"),
])
def test_bad_options_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--quiet"] + argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_expected_failures_are_one_line_before_any_work(tmp_path, capsys):
    from sktensor_fast import list_devices
    if not any("GPU" in d["type"] for d in list_devices()):
        assert main(["fit", "--device", "gpu", "--quiet"]) == 2
        cap = capsys.readouterr()
        assert "Traceback" not in cap.err and len(cap.err.strip().splitlines()) == 1
        assert "device='cpu'" in cap.err and "Tensor:" not in cap.out   # before loading
    assert main(["fit", "--quiet", "--out", str(tmp_path / "no" / "m.npz")]) == 2
    cap = capsys.readouterr()
    assert "does not exist" in cap.err and "Tensor:" not in cap.out      # before the fit
    assert main(["fit", "--quiet", "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    with pytest.raises(ValueError):                                     # --debug: traceback
        main(["fit", "--quiet", "--device", "cuda", "--debug"])


# --------------------------------------------------------------------------- --plot
FAST = ["--rank", "2", "--max-iter", "3", "--quiet"]


def _one_line_error(capsys):
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in cap.err, cap.err
    assert "Tensor:" not in cap.out                 # refused before the data are read
    return lines[0]


def test_plot_draws_one_row_per_component_one_panel_per_mode(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    from sktensor_fast import plotting
    drawn = []

    def record(*args, **kwargs):
        fig = plot_components(*args, **kwargs)
        drawn.append(fig)
        return fig

    plot_components = plotting.plot_components
    monkeypatch.setattr(plotting, "plot_components", record)
    path = tmp_path / "components.png"
    assert main(["fit", "--top", "3", "--plot", str(path)] + FAST) == 0
    assert f"Components drawn to {path}" in capsys.readouterr().out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = drawn
    assert len(fig.axes) == 2 * 5                                  # rank 2 x 5 modes
    assert [ax.get_title() for ax in fig.axes[:5]] == ["origin", "dest", "carrier", "hour",
                                                        "weekday"]
    origin = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert sorted(origin) == ["EWR", "JFK", "LGA"]                 # labelled entries
    assert len(fig.axes[1].get_yticklabels()) == 3                 # --top 3
    assert not (set(p.name for p in tmp_path.iterdir()) - {"components.png"})


def test_plot_without_matplotlib_is_one_line_before_the_fit(tmp_path, capsys, monkeypatch):
    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # `import matplotlib` fails
    argv = ["fit", "--plot", str(tmp_path / "c.png")] + FAST
    assert main(argv) == 2
    line = _one_line_error(capsys)
    assert "needs matplotlib, which is not installed" in line
    assert 'pip install "sktensor_fast[plot]"' in line
    assert not (tmp_path / "c.png").exists()
    from sktensor_fast.cli import CliError
    with pytest.raises(CliError) as info:                       # --debug: the traceback
        main(argv + ["--debug"])
    assert isinstance(info.value.__cause__, ImportError)


@pytest.mark.parametrize("case", ["missing-folder", "parent-is-a-file", "read-only-folder",
                                  "bad-extension", "folder"])
def test_plot_to_an_unusable_path_is_one_line_before_the_fit(case, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    if case == "missing-folder":
        path, message = tmp_path / "no" / "c.png", "does not exist"
    elif case == "parent-is-a-file":
        (tmp_path / "f").write_text("")
        path, message = tmp_path / "f" / "c.png", "is a file, not a folder"
    elif case == "read-only-folder":
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            (ro / "probe").write_text("")
        except OSError:
            pass
        else:
            pytest.skip("permissions do not stop this user (root) from writing")
        path, message = ro / "c.png", "not writable"
    elif case == "bad-extension":
        path, message = tmp_path / "c.xyz", "not an image format matplotlib writes"
    else:
        path, message = tmp_path, "is a folder"
    assert main(["fit", "--plot", str(path)] + FAST) == 2
    line = _one_line_error(capsys)
    assert line.startswith("sktensor-fast: error: --plot ") and message in line, line


# --------------------------------------------------------------------------- --json
def test_json_summary_round_trip(tmp_path, capsys):
    import json
    from sktensor_fast import __version__, load_model
    from sktensor_fast.inspection import component_entries
    js, model_file = tmp_path / "summary.json", tmp_path / "model.npz"
    assert main(["fit", "--rank", "3", "--max-iter", "4", "--top", "2", "--seed", "3",
                 "--json", str(js), "--out", str(model_file), "--quiet"]) == 0
    assert f"Summary written to {js}" in capsys.readouterr().out
    doc = json.loads(js.read_text())
    model = load_model(model_file)
    assert doc["method"] == "cpapr" and doc["estimator"] == "CPAPR"
    assert doc["settings"] == json.loads(json.dumps(model.get_params()))
    assert doc["settings"]["max_iter"] == 4 and doc["settings"]["random_state"] == 3
    assert doc["tensor"]["shape"] == [3, 105, 16, 20, 7] and doc["tensor"]["nnz"] == 15188
    assert doc["tensor"]["mode_names"] == ["origin", "dest", "carrier", "hour", "weekday"]
    assert doc["rank"] == 3 and np.allclose(doc["weights"], model.weights_, rtol=1e-15)
    # the components are describe_components' (the labels' top entries per mode)
    assert doc["components"] == json.loads(json.dumps(component_entries(model, top=2)[1]))
    first = doc["components"][0]["modes"][0]
    assert first["mode"] == "origin" and len(first["top"]) == 2
    assert all(e["label"] in ("EWR", "JFK", "LGA") for e in first["top"])
    assert doc["objective"] == {"name": "log-likelihood", "value": model.log_likelihood_,
                                "greater_is_better": True}
    assert doc["log_likelihood"] == model.log_likelihood_ and doc["fit"] is None
    assert doc["n_iter"] == 4 and doc["converged"] is False
    assert doc["stop_reason"] == "max_iter" and len(doc["objective_history"]) == 4
    assert doc["stop_description"].startswith("it ran max_iter=4 iterations")
    assert doc["objective_meaning"].startswith("the Poisson log-likelihood")
    assert doc["timing_s"]["fit"] > 0 and doc["threads"] >= 1
    assert doc["versions"]["sktensor_fast"] == __version__ and "numpy" in doc["versions"]


def test_json_to_stdout_holds_only_json_and_piped_stderr_has_no_progress():
    import json
    r = subprocess.run([sys.executable, "-m", "sktensor_fast", "fit", "--method", "cpals",
                        "--rank", "2", "--max-iter", "5", "--json", "-"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)                       # nothing else on stdout
    assert doc["estimator"] == "CPALS" and 0 < doc["fit"] < 1 and doc["log_likelihood"] is None
    assert "Tensor:" in r.stderr and "Component 1:" in r.stderr    # the report moved there
    assert "] iteration" not in r.stderr                            # piped: no progress


# --------------------------------------------------------------------------- progress
def _run(*argv):
    r = subprocess.run([sys.executable, "-m", "sktensor_fast", "fit", "--rank", "2",
                        "--max-iter", "3", "--tol", "0", *argv],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [ln for ln in r.stderr.splitlines() if "] iteration" in ln], r.stderr


def test_progress_shown_when_forced_and_absent_when_piped():
    lines, _ = _run("--progress", "--progress-interval", "0")
    assert len(lines) == 3, lines
    assert lines[0].startswith("[CPAPR] iteration     1  log-likelihood ")
    assert lines[2].split()[2] == "3" and lines[2].endswith("s")
    assert _run()[0] == []                                   # piped: nothing
    assert _run("--progress", "--progress-interval", "0", "--quiet")[0] == []
    lines, err = _run("--verbose", "--progress-interval", "0", "--method", "cpals")
    assert len(lines) == 3 and lines[0].startswith("[CPALS] iteration     1  fit ")
    assert "[CPALS] done:" in err                            # and the estimator's own log
    assert _run("--progress", "--no-progress", "--verbose")[0] == []


def test_progress_is_throttled():
    import io
    from sktensor_fast.cli import ProgressPrinter
    from sktensor_fast.decomposition import FitProgress
    times = iter([0.0, 0.2, 0.5, 1.1, 1.5, 2.0, 2.05, 3.5])
    out = io.StringIO()
    printer = ProgressPrinter(out, interval=1.0, clock=lambda: next(times))
    for it in range(1, 8):
        printer(FitProgress("GCP", it, -2.5 * it, "loss", it / 10, start=2, n_init=3))
    assert out.getvalue().splitlines() == [
        "[GCP (start 2/3)] iteration     3  loss -7.5  0.3s",
        "[GCP (start 2/3)] iteration     7  loss -17.5  0.7s"]


def test_progress_on_a_terminal(tmp_path):
    """With stderr a terminal and nothing asked, the progress is shown."""
    pty = pytest.importorskip("pty")
    import os
    master, slave = pty.openpty()
    try:
        r = subprocess.run([sys.executable, "-m", "sktensor_fast", "fit", "--rank", "2",
                            "--max-iter", "3", "--tol", "0", "--progress-interval", "0"],
                           stdout=subprocess.PIPE, stderr=slave, text=True, timeout=300)
        os.close(slave)
        slave = None
        err = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            err += chunk
    finally:
        if slave is not None:
            os.close(slave)
        os.close(master)
    assert r.returncode == 0
    assert err.decode().count("] iteration") == 3, err[-2000:]


# --------------------------------------------------------------------------- --loss, --format
def test_loss_and_format_reach_the_estimators(tmp_path, capsys):
    import json
    js = tmp_path / "s.json"
    assert main(["fit", "--method", "gcp", "--loss", "poisson", "--format", "coo",
                 "--json", str(js)] + FAST) == 0
    assert "loss='poisson'" in capsys.readouterr().out
    doc = json.loads(js.read_text())
    assert doc["settings"]["loss"] == "poisson" and doc["settings"]["format"] == "coo"
    assert doc["objective"]["name"] == "loss" and doc["objective"]["greater_is_better"] is False
    assert main(["fit", "--method", "gcp", "--loss", "huber", "--loss-param", "2",
                 "--json", str(js)] + FAST) == 0
    assert json.loads(js.read_text())["settings"]["loss_param"] == 2.0
    assert main(["fit", "--method", "cpals", "--format", "alto", "--json", str(js)]
                + FAST) == 0
    assert json.loads(js.read_text())["settings"]["format"] == "alto"


@pytest.mark.parametrize("argv,message", [
    (["--method", "cpapr", "--loss", "poisson"],
     "--loss applies to --method gcp only: cpapr minimises the Poisson loss"),
    (["--method", "cpals", "--loss-param", "2"], "--loss-param applies to --method gcp only"),
    (["--method", "gcp", "--loss", "cauchy"], "--loss cauchy: "),
    (["--method", "gcp", "--loss", "huber"], "--loss huber: "),
    (["--format", "alto", "--device", "gpu"], "--format chooses how the CPU kernels store"),
])
def test_loss_and_format_refused_where_meaningless(argv, message, capsys):
    assert main(["fit"] + argv + FAST) == 2
    assert message in _one_line_error(capsys)


# --------------------------------------------------------------------------- files
def _small(tmp_path):
    X = SparseTensor([[0, 0, 0], [1, 2, 1], [2, 1, 0], [1, 1, 1]], [1.0, 2.0, 5.0, 3.0],
                     (3, 3, 2))
    (tmp_path / "mode-1-city.map").write_text("Paris\nRome\nOslo\n")
    return X


def test_info_describes_a_text_file_and_a_container_read_by_its_signature(tmp_path, capsys):
    from sktensor_fast import save_tensor
    X = _small(tmp_path)
    save_tns(tmp_path / "x.tns", X)
    assert main(["info", str(tmp_path / "x.tns")]) == 0
    out = capsys.readouterr().out
    assert "(FROSTT text)" in out and "shape (3, 3, 2), 4 nonzeros, density 0.222" in out
    assert "mode 0: length 3, 3 with nonzeros (nonzeros per index: min 1, max 2)" in out
    assert "labels: Paris, Rome, Oslo" in out
    assert "values: min 1, max 5, sum 11; all integers" in out
    # a container whatever its name: recognised by its first bytes, not its extension
    other = tmp_path / "sub"
    other.mkdir()
    save_tensor(other / "data.tns", X, labels=[None, ["a", "b", "c"], None])
    assert main(["info", str(other / "data.tns")]) == 0
    out = capsys.readouterr().out
    assert "binary container" in out and "4 nonzeros" in out and "labels: a, b, c" in out
    assert main(["fit", str(other / "data.tns")] + FAST) == 0
    out = capsys.readouterr().out
    assert "binary container" in out and "Component 2:" in out


def test_empty_file_and_folder_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "empty.tns").write_text("# no data\n")
    for cmd in ("fit", "info"):
        assert main([cmd, str(tmp_path / "empty.tns")]) == 2
        line = _one_line_error(capsys)
        assert "holds no nonzeros" in line
        assert "pass `shape`" not in line
        assert main([cmd, str(tmp_path)]) == 2
        line = _one_line_error(capsys)
        assert "is a folder, not a tensor file" in line and "Errno" not in line


@pytest.mark.parametrize("case", ["json-on-input", "out-via-symlink", "out-and-json",
                                  "plot-on-label-file", "hard-link"])
def test_outputs_never_overwrite_the_input_or_each_other(case, tmp_path, capsys):
    X = _small(tmp_path)
    data = tmp_path / "x.tns"
    save_tns(data, X)
    before = data.read_bytes()
    m = str(tmp_path / "m.npz")
    argv = {"json-on-input": ["--json", str(data)],
            "out-via-symlink": ["--out", str(tmp_path / "link")],
            "out-and-json": ["--out", m, "--json", str(tmp_path / "." / "m.npz")],
            "plot-on-label-file": ["--plot", str(tmp_path / "mode-1-city.map")],
            "hard-link": ["--out", str(tmp_path / "hard")]}[case]
    if case == "out-via-symlink":
        (tmp_path / "link").symlink_to(data)
    if case == "hard-link":
        import os
        os.link(data, tmp_path / "hard")
    assert main(["fit", str(data)] + argv + FAST) == 2
    line = _one_line_error(capsys)
    assert ("same file" in line) if case == "out-and-json" else ("would destroy" in line), line
    assert data.read_bytes() == before
    assert (tmp_path / "mode-1-city.map").read_text() == "Paris\nRome\nOslo\n"
    assert not (tmp_path / "m.npz").exists()
    assert main(["fit", str(data), "--json", "-", "--out", m] + FAST) == 0   # stdout: fine
    capsys.readouterr()


def test_huge_integer_options_are_refused_by_the_parser(capsys):
    for opt in ("--rank", "--max-iter", "--n-init"):
        with pytest.raises(SystemExit) as info:
            main(["fit", opt, "99999999999999999999", "--quiet"])
        err = capsys.readouterr().err
        assert info.value.code == 2
        assert f"{opt} must be at most 2147483647, got 99999999999999999999" in err
        assert "Maximum allowed dimension" not in err


@pytest.mark.parametrize("argv", [["fit", "--rank", "2", "--max-iter", "3", "--quiet"],
                                  ["fit", "--rank", "2", "--max-iter", "3", "--json", "-"],
                                  ["info"]])
def test_closed_stdout_is_quiet(argv):
    """`sktensor-fast ... | head -1`: the reader goes away; no traceback, no error line."""
    p = subprocess.Popen([sys.executable, "-m", "sktensor_fast", *argv],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()                    # closed before anything is written
    try:
        err = p.stderr.read().decode()
        rc = p.wait(timeout=300)
    finally:
        p.kill()
    assert rc in (0, 141), (rc, err)
    assert "Traceback" not in err and "error" not in err.lower() and "Broken pipe" not in err


def test_stop_reason_and_objective_explained(capsys):
    assert main(["fit", "--method", "gcp", "--loss", "poisson", "--rank", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    summary = [i for i, ln in enumerate(lines) if ln.startswith("GCP(")][0]
    stop, meaning = lines[summary + 1], lines[summary + 2]
    assert stop.startswith("  converged (stop_reason_=") and "the loss stopped" in stop
    assert meaning.startswith("  loss: the poisson loss summed over every entry")
    assert "sign means nothing" in meaning and "lower is better" in meaning
    assert main(["fit", "--max-iter", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "  stopped (stop_reason_='max_iter'): it ran max_iter=2 iterations" in out
    assert "  log-likelihood: the Poisson log-likelihood" in out


def test_cli_warnings_are_one_line(capsys):
    assert main(["fit", "--threads", "100000"] + FAST) == 0
    err = capsys.readouterr().err
    assert "sktensor-fast: warning: 100000 threads requested" in err
    assert "contextlib" not in err and "cli.py" not in err


def test_one_default_rank_everywhere():
    import inspect
    from sktensor_fast import CPALS, CPAPR, GCP
    from sktensor_fast.cli import build_parser
    ranks = {inspect.signature(c).parameters["rank"].default for c in (CPALS, CPAPR, GCP)}
    assert ranks == {build_parser().parse_args(["fit"]).rank} == {5}
