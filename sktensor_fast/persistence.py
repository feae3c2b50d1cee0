"""Fitted models to a file and back: :func:`save_model`, :func:`load_model`.

The file is a NumPy ``.npz`` archive read without pickle, so loading one runs no code from
it: the factor matrices and weights as arrays, the loss history, and one JSON document with
the estimator's class and settings, its fitted scalars, the labels and mode names, its
``set_output`` configuration, and the package version that wrote it.

Settings that are not plain values:

- a GCP ``mask`` is stored (a boolean array as itself; a SparseTensor as its coordinates and
  values), so that the loaded estimator refits as the saved one did;
- a built-in loss given as an object (``get_loss("huber", 0.5)``) is stored as its name and
  parameter;
- a user-defined GCP loss cannot be stored: the file holds no code.  Its class name and a
  fingerprint of its code and attributes are, and :func:`load_model` needs the loss back
  (``load_model(path, loss=MyLoss())``), as Keras's ``load_model`` needs ``custom_objects``;
- an ``init`` given as arrays or a ``random_state`` given as a generator are not stored
  (they do not change ``transform`` or ``score``): the file lists them under
  ``params_not_saved`` and the loaded estimator has their defaults.

:func:`load_model` reads the JSON document first and checks every entry's ``.npy`` header
against it (each factor must have the shape that the saved tensor shape and rank give) before
it reads any array, and reads every array once; an entry compressed more than
``_MAX_EXPANSION``-fold is refused (``save_model`` writes them uncompressed), so that reading
a file takes memory in proportion to its size.
"""
import json
import math
import os
import zipfile
import zlib

import numpy as np
from numpy.lib import format as npy_format

from ._warnings import warn as _warn

__all__ = ["save_model", "load_model", "FORMAT_VERSION"]

#: Version of the file layout written by :func:`save_model`; a file is written with the
#: lowest version that reads it (1: every setting a plain value; 2: a stored mask or a loss
#: given as an object).
FORMAT_VERSION = 2

#: Fitted attributes stored besides the factors (those the estimator has), with their type.
_ATTRIBUTES = {"n_iter_": "int", "converged_": "bool", "stop_reason_": "str",
               "n_features_in_": "int", "tensor_shape_": "shape", "log_likelihood_": "float",
               "kkt_violation_": "float", "n_inner_iter_": "int", "fit_": "float",
               "loss_": "float"}

#: An entry whose uncompressed size passes this multiple of its stored size (and 1 MiB) is
#: refused: what save_model writes is not compressed.
_MAX_EXPANSION = 100

#: Bytes read at a time from an entry.
_CHUNK = 1 << 24

_FORMAT = "sktensor_fast model"


class _Invalid(Exception):
    """A model file that is not what save_model writes (the message says why)."""


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
        try:
            return float(value["float"])
        except (TypeError, ValueError):
            raise _Invalid(f"a number is written as {value['float']!r}") from None
    return value


def _loss_entry(loss):
    """The JSON of a loss given as an object: a built-in one by name and parameter, a
    user-defined one by its class and fingerprint (restored from ``load_model``'s ``loss``)."""
    from ._fingerprint import PYTHON, NotComparable, digest
    from .decomposition.losses import CustomLoss, Loss
    if isinstance(loss, Loss):
        return {"builtin_loss": loss.name,
                "loss_param": None if loss.param_spec is None else float(loss.param)}
    obj = loss.obj if isinstance(loss, CustomLoss) else loss
    try:
        fp = digest(obj)
    except NotComparable:
        fp = None
    return {"user_loss": type(obj).__qualname__, "module": type(obj).__module__,
            "name": str(getattr(obj, "name", type(obj).__name__)), "fingerprint": fp,
            "python": PYTHON}


def _mask_entry(mask, shape, arrays):
    """The JSON of a mask; its arrays go to ``arrays``."""
    from .tensor import SparseTensor
    if isinstance(mask, SparseTensor):
        arrays["mask_subs"] = np.ascontiguousarray(mask.subs, dtype=np.int64)
        arrays["mask_vals"] = np.ascontiguousarray(mask.vals)
        return {"mask": "sparse"}
    m = np.asarray(mask)
    if m.dtype.kind not in "biuf" or m.shape != tuple(shape):
        raise TypeError(f"save_model: the mask (dtype {m.dtype}, shape {m.shape}) is not a "
                        f"mask of the fitted tensor {tuple(shape)}")
    arrays["mask"] = m
    return {"mask": "array"}


def save_model(model, path, labels=None, mode_names=None):
    """Write a fitted CPALS, CPAPR or GCP with its labels and settings to ``path``.

    Parameters
    ----------
    model : fitted CPALS, CPAPR or GCP
    path : str or path-like
        The file to write, exactly this name (no extension is added).  It is written to a
        temporary file in the same folder and renamed, so an interrupted save leaves no
        partial file.  As every saver of the package: the mode ``open()`` would give, a
        symbolic link written through, a character device or a FIFO written directly.
    labels, mode_names : optional
        Labels of every mode's indices and names of the modes; by default those the model
        kept from a tensor that carried them (``model.labels_``, ``model.mode_names_``).

    A GCP ``mask`` is stored with the model; a user-defined loss is not (the file holds no
    code): :func:`load_model` then needs it back (see there).

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
    arrays = {}
    params, dropped = {}, []
    version = 1
    for key, value in model.get_params(deep=False).items():
        if key == "loss" and not isinstance(value, str):
            params[key] = _loss_entry(value)
            version = 2
            continue
        if key == "mask" and value is not None:
            params[key] = _mask_entry(value, model.tensor_shape_, arrays)
            version = 2
            continue
        try:
            params[key] = _plain(value)
        except TypeError:
            dropped.append(key)
    attrs = {}
    for key in _ATTRIBUTES:
        if hasattr(model, key):
            attrs[key] = _plain(getattr(model, key))
    from . import __version__
    meta = {"format": _FORMAT, "format_version": version,
            "package_version": __version__, "class": type(model).__name__, "params": params,
            "params_not_saved": dropped, "attributes": attrs, "labels": labels,
            "mode_names": mode_names,
            "output_config": {k: v for k, v in getattr(model, "_sklearn_output_config",
                                                       {}).items() if isinstance(v, str)}}
    arrays.update({"weights": np.asarray(model.weights_, dtype=np.float64),
                   "loss_history": np.asarray(getattr(model, "loss_history_", []), np.float64),
                   "meta": np.array(json.dumps(meta))})
    arrays.update({f"factor_{n}": np.asarray(f, dtype=np.float64)
                   for n, f in enumerate(model.factors_)})
    path = os.fspath(path)
    from .io import _atomic_output
    with _atomic_output(path) as f:     # a temporary file renamed onto path when complete
        np.savez(f, **arrays)
    return path


def load_model(path, *, loss=None):
    """Read a model written by :func:`save_model`.

    Returns an estimator of the saved class, with the saved settings, fitted attributes
    (``weights_``, ``factors_``, ``labels_``, ``mode_names_``, ...) and ``set_output``
    configuration, ready for ``transform``, ``score``, ``inverse_transform`` and
    :func:`describe_components`.  Nothing in the file is unpickled or run.

    Parameters
    ----------
    path : str or path-like
    loss : object, optional
        Only for a GCP fitted with a user-defined loss, and required then: the loss object
        (the same class, with the same code and settings).  The file cannot hold it, since
        reading a model runs no code from the file; it holds the loss's class name and a
        fingerprint of its code and attributes instead.  Refusing to save such a model would
        leave no way to keep it, and loading it with the default loss would change
        ``transform`` and ``score`` without a word; so, as Keras's ``load_model`` takes the
        custom objects of a model, the session that loads gives the code.  A loss of another
        class is a ValueError; one whose code or attributes differ from those saved (by the
        same Python version) gives a UserWarning.

    Returns
    -------
    CPALS, CPAPR or GCP

    Raises
    ------
    FileNotFoundError, PermissionError, OSError
        When the file cannot be read (the message names it).
    ValueError
        When the file is not a model written by :func:`save_model` (not an ``.npz`` archive,
        truncated or corrupt, a JSON document or an array that is not what save_model writes,
        a factor whose shape does not follow from the saved tensor shape and rank) or was
        written by a newer version; when ``loss`` is missing, or given for a model without a
        user-defined loss.  The message names the file and the problem.

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
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ValueError(f"{path} is not a model file of sktensor_fast.save_model: "
                         f"{_what_it_is(path)}") from None
    except OSError as exc:
        raise _os_error(exc, path) from exc
    try:
        with zf:
            return _load(zf, path, loss)
    except _Invalid as exc:
        raise ValueError(f"{path} is not a valid sktensor_fast model file: {exc}") from None
    except OSError as exc:
        raise _os_error(exc, path) from exc
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        # a damaged entry (CRC, local header, compressed stream), an unknown compression, a
        # password-protected entry
        raise ValueError(f"{path} is not a valid sktensor_fast model file: a damaged archive "
                         f"({type(exc).__name__}: {exc})") from None


def _os_error(exc, path):
    """``exc`` (an OSError) again, its message naming the model file."""
    if exc.errno is not None:
        return type(exc)(exc.errno, f"cannot read the model file {path}: {exc.strerror}")
    return OSError(f"cannot read the model file {path}: {exc}")


def _what_it_is(path):
    """What a file that is not a zip archive is, from its first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return "not an .npz (zip) archive"
    if head.startswith(b"PK"):
        return "a damaged or truncated .npz archive (its zip directory cannot be read)"
    if head.startswith(b"\x93NUMPY"):
        return "a single .npy array, not an .npz archive"
    if not head:
        return "an empty file"
    return f"not an .npz (zip) archive (it begins with {head!r})"


def _load(zf, path, loss_arg):
    archive_size = os.fstat(zf.fp.fileno()).st_size if hasattr(zf.fp, "fileno") else None
    entries = {n[:-4]: zf.getinfo(n) for n in zf.namelist() if n.endswith(".npy")}

    def read(name, check):
        info = entries.get(name)
        return None if info is None else _read_entry(zf, info, name, check, archive_size)

    if "meta" not in entries:
        raise ValueError(f"{path} is not a model saved by sktensor_fast.save_model "
                         f"(no 'meta' entry)")
    text = read("meta", _is_text)
    try:
        meta = json.loads(str(text[()]))
    except (ValueError, RecursionError) as exc:
        raise _Invalid(f"its JSON document cannot be read ({exc})") from None
    if not isinstance(meta, dict):
        raise _Invalid(f"its JSON document is {_kind(meta)}, not an object")
    if meta.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a model saved by sktensor_fast.save_model")
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _Invalid(f"format_version is {version!r}, not a version number")
    if version > FORMAT_VERSION:
        raise ValueError(f"{path} was written by a newer sktensor_fast "
                         f"({meta.get('package_version')}, format version {version}); upgrade "
                         f"to read it")
    name = meta.get("class")
    cls = _classes().get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"{path} holds an unknown estimator class {meta.get('class')!r}")
    for key in ("params", "attributes"):
        if key not in meta:
            raise _Invalid(f"its JSON document has no {key!r}")
        if not isinstance(meta[key], dict):
            raise _Invalid(f"{key!r} is {_kind(meta[key])}, not an object")
    attrs = _attributes(meta["attributes"])
    shape = attrs.get("tensor_shape_")
    if shape is None:
        raise _Invalid("the fitted attribute 'tensor_shape_' is missing")
    if "n_features_in_" in attrs and attrs["n_features_in_"] != math.prod(shape[1:]):
        raise _Invalid(f"n_features_in_ is {attrs['n_features_in_']}, not that of the tensor "
                       f"shape {shape}")
    N = len(shape)
    not_saved = meta.get("params_not_saved", [])
    if not isinstance(not_saved, list) or not all(isinstance(k, str) for k in not_saved):
        raise _Invalid(f"params_not_saved is {not_saved!r}, not a list of names")
    params = _params(meta["params"], cls, shape, read, loss_arg, path, not_saved)
    R = params.get("rank")
    if isinstance(R, bool) or not isinstance(R, int) or R < 1:
        raise _Invalid(f"the rank is {R!r}, not an int >= 1")
    extra = sorted(n for n in entries if n.startswith("factor_")
                   and n not in {f"factor_{k}" for k in range(N)})
    if extra:
        raise _Invalid(f"entries {extra} are not factors of a tensor with {N} modes")
    # the arrays: shapes checked against the document before anything is read
    factors = []
    for n in range(N):
        f = read(f"factor_{n}", _is_floats((shape[n], R)))
        if f is None:
            raise _Invalid(f"the entry 'factor_{n}' is missing (the tensor has {N} modes)")
        factors.append(f)
    weights = read("weights", _is_floats((R,)))
    if weights is None:
        raise _Invalid("the entry 'weights' is missing")
    history = read("loss_history", _is_floats(None))
    labels = _labels(meta.get("labels"), shape)
    mode_names = meta.get("mode_names")
    if mode_names is not None and (not isinstance(mode_names, list) or len(mode_names) != N
                                   or not all(isinstance(m, str) for m in mode_names)):
        raise _Invalid(f"mode_names is not a list of {N} strings")
    try:
        est = cls(**params)
        est._validate_params()
    except (TypeError, ValueError) as exc:
        raise _Invalid(f"its settings are not valid for {cls.__name__}: {exc}") from None
    est.weights_ = weights
    est.factors_ = factors
    est.loss_history_ = np.zeros(0) if history is None else history
    for key, value in attrs.items():
        setattr(est, key, value)
    est.labels_ = labels
    est.mode_names_ = mode_names
    output = meta.get("output_config")
    if output is not None:
        if not isinstance(output, dict):
            raise _Invalid(f"output_config is {_kind(output)}, not an object")
        transform = output.get("transform")
        if transform is not None:
            if transform not in ("default", "pandas", "polars"):
                raise _Invalid(f"output_config's transform {transform!r} is not one of "
                               f"'default', 'pandas', 'polars'")
            est.set_output(transform=transform)     # as set_output left it
    return est


def _kind(value):
    return {dict: "an object", list: "a list", str: "a string", type(None): "null",
            bool: "a boolean", int: "a number", float: "a number"}.get(type(value), "other")


def _attributes(raw):
    """The fitted attributes of the document, each of its type (only the known ones)."""
    out = {}
    for key, value in raw.items():
        kind = _ATTRIBUTES.get(key)
        if kind is None:
            raise _Invalid(f"{key!r} is not a fitted attribute of the estimators "
                           f"(known: {', '.join(_ATTRIBUTES)})")
        value = _unplain(value)
        ok = {"int": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
              "bool": lambda v: isinstance(v, bool),
              "str": lambda v: isinstance(v, str),
              "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "shape": lambda v: (isinstance(v, list) and len(v) >= 2 and all(
                  isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in v))}[kind]
        if not ok(value):
            want = {"int": "an int >= 0", "bool": "true or false", "str": "a string",
                    "float": "a number", "shape": "a list of 2 or more ints >= 1"}[kind]
            raise _Invalid(f"the fitted attribute {key!r} is {value!r}, not {want}")
        out[key] = tuple(value) if kind == "shape" else float(value) if kind == "float" \
            else value
    return out


def _params(raw, cls, shape, read, loss_arg, path, not_saved=()):
    """The settings of the document, as the estimator takes them."""
    known = set(cls().get_params(deep=False))
    unknown = sorted(set(raw) - known)
    if unknown:
        raise _Invalid(f"{unknown} are not parameters of {cls.__name__}")
    params = {}
    user_loss = None
    for key, value in raw.items():
        if key == "loss" and isinstance(value, dict):
            value, user_loss = _loss(value)
        elif key == "mask" and isinstance(value, dict):
            value = _mask(value, shape, read)
        else:
            value = _unplain(value)
            if isinstance(value, list):
                value = [_unplain(v) for v in value]
                if key in ("n_samples_grad", "n_samples_loss"):
                    value = tuple(value)
        params[key] = value
    if "mask" in not_saved and "mask" not in raw:
        _warn(f"the model of {path} was fitted with a mask that the file does not hold "
              f"(written by sktensor_fast before masks were stored): the loaded estimator has "
              f"mask=None (transform and score do not use the mask; a refit would)",
              UserWarning)
    if "loss" in not_saved and "loss" not in raw:
        # written before losses given as objects were stored: which one it was is unknown
        if loss_arg is None:
            raise ValueError(f"the model of {path} was fitted with a loss object that the file "
                             f"does not hold (written by sktensor_fast before such losses were "
                             f"recorded); pass it: load_model(path, loss=...)")
        params["loss"] = loss_arg
    elif user_loss is not None:
        params["loss"] = _given_loss(user_loss, loss_arg, path)
    elif loss_arg is not None:
        raise ValueError(f"loss= is for a model fitted with a user-defined loss; the "
                         f"{cls.__name__} of {path} was fitted with "
                         f"{params.get('loss', 'its default loss')!r}")
    return params


def _loss(entry):
    """(the loss, None) for a built-in loss object; (None, entry) for a user-defined one."""
    from .decomposition.losses import LOSSES
    if "builtin_loss" in entry:
        name = entry["builtin_loss"]
        if not isinstance(name, str) or name not in LOSSES:
            raise _Invalid(f"unknown built-in loss {name!r}")
        try:
            return LOSSES[name](_unplain(entry.get("loss_param"))), None
        except (TypeError, ValueError) as exc:
            raise _Invalid(f"loss {name!r}: {exc}") from None
    if isinstance(entry.get("user_loss"), str):
        return None, entry
    raise _Invalid(f"the loss is {entry!r}, neither a loss name nor a loss object's record")


def _given_loss(entry, loss, path):
    """The loss passed to load_model for a model fitted with a user-defined loss."""
    from ._fingerprint import PYTHON, NotComparable, digest
    from .decomposition.losses import CustomLoss, Loss, is_loss_object
    saved = entry["user_loss"]
    if loss is None:
        raise ValueError(
            f"the model of {path} was fitted with the user-defined loss {saved} (module "
            f"{entry.get('module')}), which a model file cannot hold (it holds no code); pass "
            f"it: load_model(path, loss={saved.rsplit('.', 1)[-1]}(...))")
    if isinstance(loss, Loss) or not (isinstance(loss, CustomLoss) or is_loss_object(loss)):
        raise ValueError(f"loss= must be the user-defined loss object the model of {path} "
                         f"was fitted with (a {saved}), got {loss!r}")
    obj = loss.obj if isinstance(loss, CustomLoss) else loss
    if type(obj).__qualname__ != saved:
        raise ValueError(f"the model of {path} was fitted with the loss {saved}; loss= is a "
                         f"{type(obj).__qualname__}")
    if entry.get("fingerprint") and entry.get("python") == PYTHON:
        try:
            same = digest(obj) == entry["fingerprint"]
        except NotComparable:
            same = True        # nothing to compare with: the class name is all there is
        if not same:
            _warn(f"the loss given differs from the {saved} the model of {path} was fitted "
                  f"with (its code or attributes changed); transform and score use the one "
                  f"given", UserWarning)
    return loss


def _mask(entry, shape, read):
    from .tensor import SparseTensor
    kind = entry.get("mask")
    if kind == "array":
        m = read("mask", _is_array(tuple(shape), "biuf"))
        if m is None:
            raise _Invalid("the entry 'mask' is missing")
        return m
    if kind == "sparse":
        subs = read("mask_subs", _is_array((None, len(shape)), "iu"))
        if subs is None:
            raise _Invalid("the entry 'mask_subs' is missing")
        vals = read("mask_vals", _is_array((subs.shape[0],), "biuf"))
        if vals is None:
            raise _Invalid("the entry 'mask_vals' is missing")
        try:
            return SparseTensor(subs, vals, tuple(shape))
        except (TypeError, ValueError) as exc:
            raise _Invalid(f"the mask: {exc}") from None
    raise _Invalid(f"the mask is {entry!r}, not a record of a stored mask")


def _labels(labels, shape):
    if labels is None:
        return None
    if not isinstance(labels, list) or len(labels) != len(shape):
        raise _Invalid(f"labels is not a list of {len(shape)} entries")
    for n, lab in enumerate(labels):
        if lab is None:
            continue
        if (not isinstance(lab, list) or len(lab) != shape[n]
                or not all(isinstance(x, str) for x in lab)):
            raise _Invalid(f"labels[{n}] is not a list of {shape[n]} strings (the length of "
                           f"mode {n})")
    return labels


# ------------------------------------------------------------------ the arrays
def _is_text(shape, dtype):
    if dtype.kind != "U" or shape != ():
        return "a text (0-d unicode array)"
    return None


def _is_floats(want):
    return _is_array(want, "f")


def _is_array(want, kinds):
    """A check of an entry's header: a numeric dtype of one of ``kinds`` and, unless ``want``
    is None (any 1-d length), the shape ``want`` (None in it: any length there)."""
    def check(shape, dtype):
        what = {"f": "floats", "iu": "integers", "biuf": "booleans or numbers"}[kinds]
        if dtype.kind not in kinds:
            return f"an array of {what}"
        if want is None:
            return None if len(shape) == 1 else "a 1-d array"
        if len(shape) != len(want) or any(w is not None and s != w
                                          for s, w in zip(shape, want)):
            return f"an array of shape {tuple('any' if w is None else w for w in want)}"
        return None
    return check


def _read_entry(zf, info, name, check, archive_size):
    """The array of one ``.npy`` entry, its header checked by ``check(shape, dtype)`` (which
    returns None or what the entry should be) before its data are read."""
    if archive_size is not None and info.header_offset + info.compress_size > archive_size:
        raise _Invalid(f"the entry {name!r} ends past the end of the file (truncated)")
    with zf.open(info) as f:
        try:
            version = npy_format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = npy_format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = npy_format.read_array_header_2_0(f)
            else:
                raise _Invalid(f"the entry {name!r} has .npy version {version} (1.0 or 2.0 "
                               f"expected)")
        except (ValueError, TypeError, SyntaxError) as exc:
            raise _Invalid(f"the entry {name!r} has no valid .npy header ({exc})") from None
        if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
            raise _Invalid(f"the entry {name!r} holds {dtype}, not plain numbers or text")
        wrong = check(shape, dtype)
        if wrong is not None:
            raise _Invalid(f"the entry {name!r} is an array of {dtype} of shape {shape}; it "
                           f"must be {wrong}")
        if (info.compress_type != zipfile.ZIP_STORED and info.file_size > (1 << 20)
                and info.file_size > _MAX_EXPANSION * max(info.compress_size, 1)):
            raise _Invalid(f"the entry {name!r} is compressed "
                           f"{info.file_size // max(info.compress_size, 1)}-fold "
                           f"({info.file_size} bytes in {info.compress_size}); save_model "
                           f"writes its entries uncompressed")
        nbytes = math.prod(shape) * dtype.itemsize
        start = f.tell()
        if info.file_size != start + nbytes:
            raise _Invalid(f"the entry {name!r} holds {info.file_size - start} bytes of data; "
                           f"its header says {nbytes}")
        buf = np.empty(nbytes, dtype=np.uint8)      # pages taken as the data arrive
        view = memoryview(buf)
        pos = 0
        while pos < nbytes:
            got = f.readinto(view[pos:pos + _CHUNK])
            if not got:
                raise _Invalid(f"the entry {name!r} ends after {pos} of {nbytes} bytes")
            pos += got
        if f.read(1):      # reading to the end also makes zipfile check the entry's CRC
            raise _Invalid(f"the entry {name!r} is longer than its header says")
    arr = buf.view(dtype)
    arr = arr.reshape(shape[::-1]).T if fortran else arr.reshape(shape)
    if not dtype.isnative:
        arr = arr.astype(dtype.newbyteorder("="))
    if dtype.kind == "f" and dtype != np.float64:
        arr = arr.astype(np.float64)
    if dtype.kind == "f" and name != "meta" and not np.all(np.isfinite(arr)):
        if name.startswith("factor_") or name == "weights":
            raise _Invalid(f"the entry {name!r} holds NaN or infinite values")
    return arr
