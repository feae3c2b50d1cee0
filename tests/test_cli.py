"""The command line: `python -m sktensor_fast` / `sktensor-fast`."""
import subprocess
import sys

import numpy as np

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
    out_npz = tmp_path / "model.npz"
    assert main(["fit", str(path), "--method", "cpals", "--rank", "2", "--seed", "1",
                 "--out", str(out_npz), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "CPALS(rank=2)" in out and "fit" in out
    assert any(c in out for c in ("red", "green", "blue", "cyan", "magenta"))
    model = np.load(out_npz)
    assert model["factor_0"].shape == (6, 2) and model["weights"].shape == (2,)


def test_errors_are_reported_not_raised(tmp_path, capsys):
    bad = tmp_path / "bad.tns"
    bad.write_text("1 1 1 2\n1 x 1 3\n")
    assert main(["fit", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err
    assert main(["fit", str(tmp_path / "missing.tns"), "--quiet"]) == 2
    assert main(["fit", "--method", "cpals", "--rank", "0", "--quiet"]) == 2
    assert "rank" in capsys.readouterr().err


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
