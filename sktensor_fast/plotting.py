"""Figures of fitted CP models (needs matplotlib: ``pip install 'sktensor_fast[plot]'``).

matplotlib is imported when a function is called, not with the package, so that it stays an
optional dependency.
"""
import numbers

import numpy as np

__all__ = ["plot_components"]


def _require_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "drawing needs matplotlib, which is not installed: pip install 'sktensor_fast[plot]' "
            "(or pip install matplotlib)") from exc


def _as_kruskal(model):
    from .kruskal import KruskalTensor
    if isinstance(model, KruskalTensor):
        return model
    if hasattr(model, "weights_") and hasattr(model, "factors_"):
        return KruskalTensor(model.weights_, model.factors_)
    if hasattr(model, "get_params"):
        raise ValueError(f"the {type(model).__name__} estimator is not fitted yet: call fit "
                         f"before drawing its components")
    raise TypeError(f"model must be a KruskalTensor or a fitted estimator (CPALS, CPAPR, GCP), "
                    f"got {type(model).__name__}")


def _check_labels(labels, shape):
    """One list of names (as strings) or None per mode (:func:`~.tensor.check_labels`)."""
    if labels is None:
        return [None] * len(shape)
    from .tensor import check_labels
    return [None if lab is None else [str(x) for x in lab]
            for lab in check_labels(labels, shape, "the model")]


def plot_components(model, labels=None, mode_names=None, top=8, components=None, modes=None,
                    fig=None, uniform=1.25):
    """Draw the components of a CP model: one row per component, one panel per mode.

    Each panel is a horizontal bar chart of the mode's ``top`` largest entries (by absolute
    value) of the component's factor column, labelled with the names of the indices (indices
    without a name are shown 1-based); negative entries are drawn in another colour.  The
    row's title gives the component's number, weight and share of the sum of the weights (in
    %).  Components are numbered and ordered as :func:`~sktensor_fast.describe_components`
    prints them: ``Component 1`` has the largest weight.  A panel whose mode is
    near-uniform in the component (no index above ``uniform`` times an even share, as
    :func:`~sktensor_fast.describe_components` marks it) is drawn in grey and marked
    ``near-uniform``: the component singles out nothing there.

    Parameters
    ----------
    model : KruskalTensor or fitted CPALS, CPAPR or GCP
        The model; an estimator's ``weights_`` and ``factors_`` are drawn as they are (its
        components in decreasing order of weight).
    labels : list, optional
        One entry per mode: a list of the names of that mode's indices (``labels[k][j]``
        names index ``j`` of mode ``k``, as :func:`~sktensor_fast.load_tns` and
        :func:`~sktensor_fast.datasets.load_flights_routes` return them) or None (indices are
        shown as numbers).  Default: those of an estimator fitted on a tensor that carries
        labels (its ``labels_``), none otherwise.
    mode_names : list of str, optional
        Titles of the panels (default: an estimator's ``mode_names_`` when it has them, else
        ``"mode 0"``, ``"mode 1"``, ...).
    top : int, default=8
        Entries drawn per panel.
    components : sequence of int, optional
        The columns of the factor matrices to draw (0-based), in this order (default: all,
        by decreasing weight); each row is titled with its number in
        :func:`~sktensor_fast.describe_components` (from 1).
    modes : sequence of int, optional
        The modes to draw, in this order (default: all).
    fig : matplotlib.figure.Figure, optional
        Figure to draw into (cleared first); by default a new one from ``matplotlib.pyplot``
        sized for the grid.
    uniform : float, default=1.25
        A mode is near-uniform in a component when none of its shares exceeds
        ``uniform / I`` (I the length of the mode), as in
        :func:`~sktensor_fast.describe_components`.

    Returns
    -------
    fig : matplotlib.figure.Figure
        The figure; ``fig.savefig("components.png")`` writes it.

    Raises
    ------
    ImportError
        When matplotlib is not installed.
    ValueError
        When ``labels``, ``mode_names``, ``top``, ``components`` or ``modes`` do not fit the
        model.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("agg")
    >>> import numpy as np
    >>> from sktensor_fast import KruskalTensor
    >>> from sktensor_fast.plotting import plot_components
    >>> K = KruskalTensor([3.0, 1.0], [np.eye(3)[:, :2], np.ones((4, 2)) / 2])
    >>> fig = plot_components(K, labels=[["a", "b", "c"], None], mode_names=["letter", "n"],
    ...                       top=2)
    >>> len(fig.axes)                     # 2 components x 2 modes
    4
    >>> [t.get_text() for t in fig.axes[0].get_yticklabels()]
    ['a', 'b']
    >>> fig.axes[0].get_ylabel().splitlines()[0], fig.axes[3].texts[0].get_text()
    ('Component 1', 'near-uniform')
    """
    _require_matplotlib()
    K = _as_kruskal(model)
    shape = K.shape
    if labels is None:
        labels = getattr(model, "labels_", None)
    if mode_names is None:
        mode_names = getattr(model, "mode_names_", None)
    labels = _check_labels(labels, shape)
    if mode_names is None:
        mode_names = [f"mode {k}" for k in range(len(shape))]
    mode_names = [str(m) for m in mode_names]
    if len(mode_names) != len(shape):
        raise ValueError(f"mode_names has {len(mode_names)} names but the model has "
                         f"{len(shape)} modes")
    if isinstance(top, bool) or not isinstance(top, numbers.Integral) or top < 1:
        raise ValueError(f"top must be a positive integer, got {top!r}")
    R = K.rank
    from .inspection import component_entries
    _, entries = component_entries((K.weights, K.factors), top=1, uniform=uniform)
    by_column = {e["index"]: e for e in entries}     # number and near-uniform modes
    if components is None:
        components = [e["index"] for e in entries]    # by decreasing weight
    else:
        components = [int(c) for c in components]
        bad = [c for c in components if not 0 <= c < R]
        if bad or not components:
            raise ValueError(f"components must be indices in [0, {R}) (the model has rank {R}), "
                             f"got {list(components)!r}")
    if modes is None:
        modes = list(range(len(shape)))
    else:
        modes = [int(k) for k in modes]
        if not modes or any(not 0 <= k < len(shape) for k in modes):
            raise ValueError(f"modes must be indices in [0, {len(shape)}) (the model has "
                             f"{len(shape)} modes), got {list(modes)!r}")
    weights = np.asarray(K.weights, dtype=np.float64)
    total = float(np.sum(np.abs(weights)))
    ncols = len(modes)
    nrows = len(components)
    rows_drawn = [min(top, shape[k]) for k in modes]
    if fig is None:
        import matplotlib.pyplot as plt
        height = sum(0.22 * max(rows_drawn) + 0.75 for _ in components)
        fig = plt.figure(figsize=(2.6 * ncols + 0.8, max(2.2, height)), layout="constrained")
    else:
        fig.clear()
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for i, r in enumerate(components):
        share = f" ({100 * abs(weights[r]) / total:.0f}%)" if total > 0 else ""
        for c, k in enumerate(modes):
            ax = axes[i, c]
            col = np.asarray(K.factors[k][:, r], dtype=np.float64)
            order = np.argsort(-np.abs(col), kind="stable")[:rows_drawn[c]]
            vals = col[order]
            names = ([labels[k][j] for j in order] if labels[k] is not None
                     else [str(j + 1) for j in order])
            y = np.arange(len(order))
            flat = by_column[r]["modes"][k]["near_uniform"]
            colors = np.where(vals >= 0, "0.65" if flat else "tab:blue",
                              "0.4" if flat else "tab:red")
            ax.barh(y, vals, color=colors, height=0.7)
            if flat:
                ax.text(0.98, 0.04, "near-uniform", transform=ax.transAxes, ha="right",
                        va="bottom", fontsize=7, color="0.3", style="italic")
            ax.set_yticks(y)
            ax.set_yticklabels(names, fontsize=8)
            ax.invert_yaxis()
            ax.tick_params(axis="x", labelsize=7)
            ax.axvline(0, color="0.3", linewidth=0.6)
            if i == 0:
                ax.set_title(mode_names[k], fontsize=10)
            if c == 0:
                ax.set_ylabel(f"Component {by_column[r]['component']}\nweight "
                              f"{weights[r]:.3g}{share}", fontsize=9)
    return fig
