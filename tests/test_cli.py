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
