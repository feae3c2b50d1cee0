"""What a fitted CP model found, in words: :func:`describe_components`."""
import numpy as np

__all__ = ["describe_components", "component_entries", "LEGEND"]

#: Printed above the components by :func:`describe_components` (``legend=True``).
LEGEND = """\
How to read this: the model is a sum of components; each is one column per mode, multiplied.
  weight   the component's weight (and its share of the sum of all weights)
  per mode the indices where the component's column is largest, as label share: the share
           of the column's total (absolute) value at that index, so a column spread evenly
           over I indices has shares of 1/I (for CPAPR, the share of the component's counts)
  near-uniform  no index of that mode gets more than {uniform:g} x 1/I: the component does
           not single out anything in that mode, and its top entries are not a finding"""


def _model_parts(model):
    """(weights, factors, labels, mode_names) of an estimator or a KruskalTensor."""
    from .kruskal import KruskalTensor
    if isinstance(model, KruskalTensor):
        return np.asarray(model.weights, float), [np.asarray(f, float) for f in model.factors], \
            None, None
    if hasattr(model, "weights_") and hasattr(model, "factors_"):
        return (np.asarray(model.weights_, float), [np.asarray(f, float) for f in model.factors_],
                getattr(model, "labels_", None), getattr(model, "mode_names_", None))
    if isinstance(model, tuple) and len(model) == 2:
        return np.asarray(model[0], float), [np.asarray(f, float) for f in model[1]], None, None
    raise TypeError(f"model must be a fitted CPALS / CPAPR / GCP, a KruskalTensor or a "
                    f"(weights, factors) pair, got {type(model).__name__}")


def describe_components(model, labels=None, mode_names=None, top=5, uniform=1.25,
                        legend=True):
    """Describe every component of a CP model with the labels of its strongest entries.

    Parameters
    ----------
    model : fitted CPALS, CPAPR or GCP, KruskalTensor, or (weights, factors)
        The model.  An estimator fitted on a tensor that carries labels (the embedded data
        set, :meth:`SparseTensor.from_dataframe`, or a tensor with ``labels`` set) brings
        them along.
    labels : list of (list of str or None), optional
        Names of the indices of every mode (``labels[k][j]`` names index ``j`` of mode
        ``k``); overrides the model's.  Indices without a name are shown 1-based.
    mode_names : list of str, optional
        Names of the modes; overrides the model's.
    top : int, default=5
        Entries shown per mode and component (>= 1).
    uniform : float, default=1.25
        A mode is marked ``near-uniform`` in a component when none of its shares exceeds
        ``uniform / I`` (I the length of the mode).
    legend : bool, default=True
        Start with :data:`LEGEND`, which says what the numbers are.

    Returns
    -------
    str
        One block per component, by decreasing weight.

    Examples
    --------
    >>> import numpy as np
    >>> from sktensor_fast import KruskalTensor, describe_components
    >>> K = KruskalTensor([10.0, 2.0], [np.array([[0.9, 0.5], [0.1, 0.5]]),
    ...                                 np.array([[0.2, 0.1], [0.3, 0.0], [0.5, 0.9]])])
    >>> print(describe_components(K, labels=[["day", "night"], ["a", "b", "c"]],
    ...                           mode_names=["time", "letter"], top=2, legend=False))
    Component 1: weight 10 (83.3% of the total)
        time: day 0.900, night 0.100
      letter: c 0.500, b 0.300
    Component 2: weight 2 (16.7% of the total)
        time: near-uniform (largest share 0.500, uniform 0.500): day 0.500, night 0.500
      letter: c 0.900, a 0.100
    """
    names, components = component_entries(model, labels=labels, mode_names=mode_names,
                                          top=top, uniform=uniform)
    width = max(len(str(m)) for m in names)
    from .backends.checks import check_bool
    lines = [LEGEND.format(uniform=uniform), ""] if check_bool(legend, "legend") else []
    for comp in components:
        lines.append(f"Component {comp['component']}: weight {comp['weight']:.6g} "
                     f"({100 * comp['share']:.1f}% of the total)")
        for mode in comp["modes"]:
            parts = []
            for e in mode["top"]:
                name = e["label"] if e["label"] is not None else str(e["index"] + 1)
                sign = "-" if e["value"] < 0 else ""
                parts.append(f"{name} {sign}{e['share']:.3f}")
            head = ""
            if mode["near_uniform"]:
                head = (f"near-uniform (largest share {mode['largest_share']:.3f}, uniform "
                        f"{1 / mode['length']:.3f}): ")
            lines.append(f"  {str(mode['mode']):>{width}}: {head}" + ", ".join(parts))
    return "\n".join(lines)


def component_entries(model, labels=None, mode_names=None, top=5, uniform=1.25):
    """The components of a CP model as data: what :func:`describe_components` prints.

    Parameters
    ----------
    model, labels, mode_names, top, uniform
        As for :func:`describe_components`.

    Returns
    -------
    mode_names : list of str
        The names of the modes (``"mode 0"``, ... where none are known).
    components : list of dict
        One per component, by decreasing weight, with keys ``component`` (position, from 1),
        ``index`` (column of the factor matrices), ``weight``, ``share`` (of the sum of the
        absolute weights) and ``modes``: per mode a dict with ``mode`` (its name), ``length``,
        ``near_uniform``, ``largest_share`` and ``top``, the ``top`` strongest entries as
        dicts with ``index`` (0-based), ``label`` (None without one), ``value`` (the factor
        entry) and ``share`` (of the column's total absolute value).

    Examples
    --------
    >>> import numpy as np
    >>> from sktensor_fast import KruskalTensor
    >>> from sktensor_fast.inspection import component_entries
    >>> K = KruskalTensor([2.0], [np.array([[0.75], [0.25]]), np.array([[1.0]])])
    >>> names, comps = component_entries(K, labels=[["yes", "no"], None], top=1)
    >>> names, comps[0]["modes"][0]["top"]
    (['mode 0', 'mode 1'], [{'index': 0, 'label': 'yes', 'value': 0.75, 'share': 0.75}])
    """
    weights, factors, own_labels, own_names = _model_parts(model)
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
        raise ValueError(f"top must be an integer >= 1, got {top!r}")
    if not uniform >= 1:
        raise ValueError(f"uniform must be a number >= 1, got {uniform!r}")
    N = len(factors)
    if labels is not None:
        from .tensor import check_labels
        labels = check_labels(labels, [f.shape[0] for f in factors], "the model")
    labels = labels if labels is not None else own_labels
    mode_names = mode_names if mode_names is not None else own_names
    labels = list(labels) if labels is not None else [None] * N
    mode_names = list(mode_names) if mode_names is not None else [f"mode {n}"
                                                                    for n in range(N)]
    if len(labels) != N or len(mode_names) != N:
        raise ValueError(f"labels and mode_names need one entry per mode ({N}), got "
                         f"{len(labels)} and {len(mode_names)}")
    total = float(np.sum(np.abs(weights))) or 1.0
    components = []
    for pos, r in enumerate(np.argsort(-np.abs(weights), kind="stable")):
        modes = []
        for n in range(N):
            col = factors[n][:, r]
            mass = float(np.sum(np.abs(col)))
            share = np.abs(col) / mass if mass > 0 else np.zeros_like(col)
            idx = np.argsort(-share, kind="stable")[:top]
            lab = labels[n]
            entries = [{"index": int(i),
                        "label": str(lab[i]) if lab is not None and i < len(lab) else None,
                        "value": float(col[i]), "share": float(share[i])} for i in idx]
            I = col.shape[0]
            largest = float(share.max()) if I else 0.0
            modes.append({"mode": str(mode_names[n]), "length": int(I),
                          "near_uniform": bool(I > 1 and mass > 0 and largest <= uniform / I),
                          "largest_share": largest, "top": entries})
        components.append({"component": pos + 1, "index": int(r),
                           "weight": float(weights[r]),
                           "share": float(abs(weights[r]) / total), "modes": modes})
    return [str(m) for m in mode_names], components
