"""Fitted models to a file and back: :func:`save_model`, :func:`load_model`.

The file is a NumPy ``.npz`` archive read without pickle (``allow_pickle=False``), so loading
one runs no code from it: the factor matrices and weights as arrays, the loss history, and one
JSON document with the estimator's class and settings, its fitted scalars, the labels and mode
names, its ``set_output`` configuration, and the package version that wrote it.  Settings that
are not plain values (an ``init`` given as arrays, a ``mask``, a user-defined loss object) are
not stored; the file lists them under ``params_not_saved`` and the loaded estimator has their
defaults.
"""
import json
import os

import numpy as np

__all__ = ["save_model", "load_model", "FORMAT_VERSION"]

#: Version of the file layout written by :func:`save_model`.
FORMAT_VERSION = 1

#: Fitted attributes stored besides the factors (those the estimator has).
_ATTRIBUTES = ("n_iter_", "converged_", "stop_reason_", "n_features_in_", "tensor_shape_",
               "log_likelihood_", "kkt_violation_", "n_inner_iter_", "fit_", "loss_")


def _classes():
    from .decomposition import CPALS, CPAPR, GCP
    return {"CPALS": CPALS, "CPAPR": CPAPR, "GCP": GCP}


def _plain(value):
    """``value`` as JSON (numbers, strings, bools, None, lists of them), or raise TypeError."""
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, float) and not np.isfinite(value):
            return {"float": repr(value)}
        return value
    if isinstance(value, (list, tuple)) and all(
            v is None or isinstance(v, (bool, int, float, str, np.integer, np.floating))
            for v in value):
        return [_plain(v) for v in value]
    raise TypeError(type(value).__name__)


def _unplain(value):
    if isinstance(value, dict) and set(value) == {"float"}:
        return float(value["float"])
    return value


def save_model(model, path, labels=None, mode_names=None):
    """Write a fitted CPALS, CPAPR or GCP with its labels and settings to ``path``.

    Parameters
    ----------
    model : fitted CPALS, CPAPR or GCP
    path : str or path-like
        The file to write, exactly this name (no extension is added).  It is written to a
        temporary file in the same folder and renamed, so an interrupted save leaves no
        partial file.
    labels, mode_names : optional
        Labels of every mode's indices and names of the modes; by default those the model
        kept from a tensor that carried them (``model.labels_``, ``model.mode_names_``).

    Returns
    -------
    str
        The path written.

    Examples
    --------
    >>> import os, tempfile
    >>> from sktensor_fast import CPAPR, load_model, save_model
    >>> from sktensor_fast.datasets import load_flights_routes
    >>> X = load_flights_routes().tensor
    >>> model = CPAPR(rank=2, solver="pdnr", random_state=0).fit(X)
    >>> path = save_model(model, os.path.join(tempfile.mkdtemp(), "flights.npz"))
    >>> again = load_model(path)
    >>> again.mode_names_[0], again.labels_[4][0], again.get_params()["solver"]
    ('origin', 'Monday', 'pdnr')
    >>> bool((again.transform(X) == model.transform(X)).all())
    True
    """
    if type(model).__name__ not in _classes() or not hasattr(model, "factors_"):
        raise TypeError(f"save_model takes a fitted CPALS, CPAPR or GCP, got "
                        f"{type(model).__name__}" + ("" if hasattr(model, "factors_")
                                                     else " (not fitted)"))
    labels = labels if labels is not None else getattr(model, "labels_", None)
    mode_names = mode_names if mode_names is not None else getattr(model, "mode_names_", None)
    N = len(model.factors_)
    if labels is not None:
        if len(labels) != N:
            raise ValueError(f"labels has {len(labels)} entries, the model {N} modes")
        labels = [None if lab is None else [str(x) for x in lab] for lab in labels]
    if mode_names is not None:
        if len(mode_names) != N:
            raise ValueError(f"mode_names has {len(mode_names)} entries, the model {N} modes")
        mode_names = [str(m) for m in mode_names]
    params, dropped = {}, []
    for key, value in model.get_params(deep=False).items():
        try:
            params[key] = _plain(value)
        except TypeError:
            dropped.append(key)
    attrs = {}
    for key in _ATTRIBUTES:
        if hasattr(model, key):
            attrs[key] = _plain(getattr(model, key))
    from . import __version__
    meta = {"format": "sktensor_fast model", "format_version": FORMAT_VERSION,
            "package_version": __version__, "class": type(model).__name__, "params": params,
            "params_not_saved": dropped, "attributes": attrs, "labels": labels,
            "mode_names": mode_names,
            "output_config": {k: v for k, v in getattr(model, "_sklearn_output_config",
                                                       {}).items() if isinstance(v, str)}}
    arrays = {"weights": np.asarray(model.weights_, dtype=np.float64),
              "loss_history": np.asarray(getattr(model, "loss_history_", []), np.float64),
              "meta": np.array(json.dumps(meta))}
    arrays.update({f"factor_{n}": np.asarray(f, dtype=np.float64)
                   for n, f in enumerate(model.factors_)})
    path = os.fspath(path)
    from .io import _atomic_output
    with _atomic_output(path) as f:     # a temporary file renamed onto path when complete
        np.savez(f, **arrays)
    return path


def load_model(path):
    """Read a model written by :func:`save_model`.

    Returns an estimator of the saved class, with the saved settings, fitted attributes
    (``weights_``, ``factors_``, ``labels_``, ``mode_names_``, ...) and ``set_output``
    configuration, ready for ``transform``, ``score``, ``inverse_transform`` and
    :func:`describe_components`.  Nothing in the file is unpickled.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    CPALS, CPAPR or GCP

    Examples
    --------
    >>> import os, tempfile
    >>> from sktensor_fast import CPAPR, load_model, save_model
    >>> from sktensor_fast.datasets import load_flights_routes
    >>> X = load_flights_routes().tensor
    >>> model = CPAPR(rank=2, random_state=0).fit(X)
    >>> path = save_model(model, os.path.join(tempfile.mkdtemp(), "model.npz"))
    >>> again = load_model(path)
    >>> again.rank, again.labels_ == X.labels
    (2, True)
    """
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            files = set(z.files)
            if "meta" not in files:
                raise ValueError(f"{path} is not a model saved by sktensor_fast.save_model "
                                 f"(no 'meta' entry)")
            meta = json.loads(str(z["meta"]))
            N = len([k for k in files if k.startswith("factor_")])
            factors = [np.array(z[f"factor_{n}"]) for n in range(N)]
            weights = np.array(z["weights"])
            history = np.array(z["loss_history"]) if "loss_history" in files else np.zeros(0)
    except (OSError, EOFError) as exc:
        raise type(exc)(f"cannot read the model file {path}: {exc}") from exc
    except (KeyError, json.JSONDecodeError, ValueError) as exc:
        if isinstance(exc, ValueError) and "save_model" in str(exc):
            raise
        raise ValueError(f"{path} is not a valid sktensor_fast model file: {exc}") from exc
    if meta.get("format") != "sktensor_fast model":
        raise ValueError(f"{path} is not a model saved by sktensor_fast.save_model")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise ValueError(f"{path} was written by a newer sktensor_fast "
                         f"({meta.get('package_version')}); upgrade to read it")
    cls = _classes().get(meta.get("class"))
    if cls is None:
        raise ValueError(f"{path} holds an unknown estimator class {meta.get('class')!r}")
    params = {k: _unplain(v) for k, v in meta["params"].items()}
    if "n_samples_grad" in params and isinstance(params["n_samples_grad"], list):
        params["n_samples_grad"] = tuple(params["n_samples_grad"])
    if "n_samples_loss" in params and isinstance(params["n_samples_loss"], list):
        params["n_samples_loss"] = tuple(params["n_samples_loss"])
    est = cls(**params)
    est.weights_ = weights
    est.factors_ = factors
    est.loss_history_ = history
    for key, value in meta["attributes"].items():
        value = _unplain(value)
        if key == "tensor_shape_":
            value = tuple(value)
        setattr(est, key, value)
    est.labels_ = meta.get("labels")
    est.mode_names_ = meta.get("mode_names")
    output = meta.get("output_config") or {}
    if isinstance(output, dict) and output.get("transform") in ("default", "pandas", "polars"):
        est.set_output(transform=output["transform"])     # as set_output left it
    return est
