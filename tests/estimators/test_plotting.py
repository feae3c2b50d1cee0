"""plotting.plot_components: the drawn entries and labels, the checks of its arguments, and
the message when matplotlib is missing."""
import sys

import numpy as np
import pytest

from sktensor_fast import CPALS, KruskalTensor
from sktensor_fast.plotting import plot_components

mpl = pytest.importorskip("matplotlib")
mpl.use("agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _model():
    A = np.array([[0.1, -2.0], [3.0, 0.5], [0.2, 0.0]])
    B = np.array([[1.0, 0.0], [0.0, 1.0]])
    return KruskalTensor([4.0, 1.0], [A, B])


def _ticks(ax):
    return [t.get_text() for t in ax.get_yticklabels()]


def test_panels_entries_and_labels():
    K = _model()
    fig = plot_components(K, labels=[["a", "b", "c"], ["x", "y"]], mode_names=["m0", "m1"],
                          top=2)
    assert len(fig.axes) == 4                           # 2 components x 2 modes
    ax00, ax01, ax10, ax11 = fig.axes
    assert _ticks(ax00) == ["b", "c"]                   # largest |entries| of column 0, in order
    assert _ticks(ax10) == ["a", "b"]                   # column 1: |-2| then 0.5
    widths = [p.get_width() for p in ax10.patches]
    assert widths == [-2.0, 0.5]
    colors = [p.get_facecolor() for p in ax10.patches]
    assert colors[0] != colors[1]                       # negative entries in another colour
    assert ax00.get_title() == "m0" and ax01.get_title() == "m1"
    assert "80%" in ax00.get_ylabel() and "20%" in ax10.get_ylabel()


def test_subset_of_modes_and_components_and_numbers_without_labels():
    fig = plot_components(_model(), components=[1], modes=[1])
    assert len(fig.axes) == 1
    assert _ticks(fig.axes[0]) == ["2", "1"]            # indices 1-based, as in the text
    assert fig.axes[0].get_title() == "mode 1"
    assert fig.axes[0].get_ylabel().startswith("Component 2\n")   # column 1: second weight


def test_numbers_and_near_uniform_modes_as_describe_components_says():
    from sktensor_fast import describe_components
    A = np.array([[0.1, 0.9], [0.1, 0.05], [0.8, 0.05]])
    B = np.array([[0.5, 1.0], [0.5, 0.0]])              # column 0 of mode 1 is uniform
    K = KruskalTensor([1.0, 3.0], [A, B])               # column 1 has the larger weight
    text = describe_components(K, top=2, legend=False)
    fig = plot_components(K, top=2)
    rows = [ax.get_ylabel().splitlines()[0] for ax in fig.axes[::2]]
    assert rows == ["Component 1", "Component 2"]       # by decreasing weight, from 1
    assert "Component 1: weight 3" in text and "Component 2: weight 1" in text
    flat = [bool(ax.texts) and ax.texts[0].get_text() == "near-uniform" for ax in fig.axes]
    assert flat == [False, False, False, True]          # Component 2 (column 0), mode 1
    assert text.count("near-uniform") == 1
    assert text.split("Component 2")[1].count("near-uniform") == 1


def test_fitted_estimator_and_given_figure(tmp_path):
    rng = np.random.default_rng(0)
    X = KruskalTensor(None, [rng.random((6, 2)), rng.random((5, 2)), rng.random((4, 2))]).full()
    est = CPALS(rank=2, random_state=0).fit(X)
    fig = plt.figure()
    out = plot_components(est, fig=fig, top=3)
    assert out is fig and len(fig.axes) == 6
    fig.savefig(tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 0


@pytest.mark.parametrize("kwargs, match", [
    ({"labels": [["a", "b", "c"]]}, "labels has 1 entries but the model has 2 modes"),
    ({"labels": [["a", "b"], None]}, r"labels\[0\] has 2 names but mode 0 .* length 3"),
    ({"mode_names": ["only one"]}, "mode_names has 1 names"),
    ({"top": 0}, "top must be a positive integer"),
    ({"top": 2.5}, "top must be a positive integer"),
    ({"components": [2]}, r"components must be indices in \[0, 2\)"),
    ({"components": []}, "components must be indices"),
    ({"modes": [5]}, r"modes must be indices in \[0, 2\)"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plot_components(_model(), **kwargs)


def test_labels_as_a_string_are_refused():
    with pytest.raises(TypeError, match="labels must be a list with one list of names"):
        plot_components(_model(), labels="ab")
    with pytest.raises(TypeError, match=r"labels\[0\] must be a list of names"):
        plot_components(_model(), labels=["abc", None])


def test_bad_models():
    with pytest.raises(ValueError, match="not fitted yet"):
        plot_components(CPALS())
    with pytest.raises(TypeError, match="KruskalTensor or a fitted estimator"):
        plot_components(np.ones((3, 2)))


def test_without_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # import matplotlib fails
    with pytest.raises(ImportError, match=r"pip install 'sktensor_fast\[plot\]'"):
        plot_components(_model())
