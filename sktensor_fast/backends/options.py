"""Settings of the OpenCL kernels as parameters: :class:`OpenCLOptions` and
:func:`config_context`.

The OpenCL MTTKRP / Φ kernels have a few tuning settings (memory layout, nonzeros per
work-item, columns per lane, how Φ forms its dot products, the device memory a tensor may
use).  They are chosen, from the weakest to the strongest:

1. the measured defaults of the device (``None`` below: the backend picks);
2. the environment variables ``SKTENSOR_FAST_OCL_*`` (read at every backend request; a bad
   value is reported once by a ``RuntimeWarning`` and ignored);
3. :func:`config_context` (``with config_context(device_options=...):``);
4. an estimator's ``device_options`` parameter (or ``get_backend(device, options)``).

The options that are set are part of the key under which backends are cached, so that two
settings give two backends (each with its compiled kernels) and a changed variable is never
silently ignored.  Pure Python: importable without PyOpenCL or the compiled CPU kernels.

Only what a user may reasonably tune is an option.  The kernels' experimental variants (64-bit
offsets where 32 bits fit, no prefetching of the next nonzero) are attributes of the backend
that the benchmarks set (``benchmarks/bench_opencl.py``); no default uses them.
"""
import contextlib
import contextvars
import dataclasses
import os

from .._warnings import warn as _warn

__all__ = ["OpenCLOptions", "as_options", "config_context", "get_device_options",
           "resolve_options"]

#: allowed values of the string and small-integer settings
LAYOUTS = ("lanes", "lanes-sorted", "wide")
PHI_VARIANTS = ("shuffle", "local")
#: how the GCP kernels add a step's contributions into the gradient rows
GCP_REDUCTIONS = ("deterministic", "atomic")
VECS = (1, 2, 4, 8)


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"OpenCL option {name!r} must be a positive int (or None for the "
                         f"device's default), got {value!r}")
    return value


def _choice(name, value, allowed):
    if value not in allowed or isinstance(value, bool):
        raise ValueError(f"OpenCL option {name!r} must be one of "
                         f"{', '.join(repr(a) for a in allowed)} (or None for the device's "
                         f"default), got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class OpenCLOptions:
    """Tuning settings of the OpenCL MTTKRP / Φ kernels (``None``: the device's default).

    Results agree with the CPU kernels to rounding for every setting; only the speed and the
    device memory differ (``doc/guide/tuning.rst`` has the measurements behind the defaults).

    Parameters
    ----------
    layout : {'lanes', 'lanes-sorted', 'wide'}, optional
        How a chunk of nonzeros is spread over work-items: ``'lanes'`` (R / vec work-items per
        chunk over a chunk-interleaved copy of each mode; the default on GPUs),
        ``'lanes-sorted'`` (the same over the mode-sorted copies: no second copy, slower) or
        ``'wide'`` (one work-item per chunk holds whole rows, ranks up to 16; the default on
        CPU devices).
    chunk : int, optional
        Nonzeros per work-item of the lanes layouts (default 256; on a GPU, 128 for a
        tensor too small to give every compute unit 1024 chunks of 256).
    vec : {1, 2, 4, 8}, optional
        Columns per lane (default: 4, or 2 for the fp64 MTTKRP over ``'lanes-sorted'``); the
        largest divisor of the rank that is at most this is used.  8 with float64 data is a
        ValueError on PoCL's CPU devices, which cannot build 8-wide vectors of doubles.
    phi : {'shuffle', 'local'}, optional
        How the lanes kernels form Φ's dot products: a warp shuffle (NVIDIA only, its
        default) or lanes sharing through local memory (the default elsewhere).
    wide_chunk, wide_group : int, optional
        Nonzeros per work-item and work-group size of the wide layout (64 and 128).
    max_tensor_bytes : int or str, optional
        Device bytes a tensor may use; one whose resident copies need more is streamed
        through the device in blocks (a number of bytes, or a string such as ``"512M"`` or
        ``"2G"``; default: stream only what does not fit the device).
    gcp_reduction : {'deterministic', 'atomic'}, optional
        How GCP's stochastic gradient adds the contributions of a step's samples into the
        gradient rows.  ``'deterministic'`` (the default) sorts the samples by row and adds
        each row's contributions in sample order, the order of the CPU kernels: the same bits
        in every run and on every device.  ``'atomic'`` adds them with atomic
        compare-and-swap loops (float64 needs ``cl_khr_int64_base_atomics``): fewer kernel
        launches per step, faster on devices with fast atomics, but the order of the
        additions follows the device's schedule, so gradients and fits are **not bitwise
        reproducible** (they agree with the deterministic path to rounding).

    Examples
    --------
    >>> from sktensor_fast import OpenCLOptions
    >>> OpenCLOptions(layout="wide", chunk=128).set_options()
    {'layout': 'wide', 'chunk': 128}
    >>> OpenCLOptions(layout="rows")
    Traceback (most recent call last):
    ...
    ValueError: OpenCL option 'layout' must be one of 'lanes', 'lanes-sorted', 'wide' (or None for the device's default), got 'rows'
    >>> OpenCLOptions.from_mapping({"chunks": 4})
    Traceback (most recent call last):
    ...
    ValueError: unknown OpenCL option 'chunks'; the options are layout, chunk, vec, phi, wide_chunk, wide_group, max_tensor_bytes, gcp_reduction
    """

    layout: object = None
    chunk: object = None
    vec: object = None
    phi: object = None
    wide_chunk: object = None
    wide_group: object = None
    max_tensor_bytes: object = None
    gcp_reduction: object = None

    def __post_init__(self):
        if isinstance(self.max_tensor_bytes, str):
            object.__setattr__(self, "max_tensor_bytes", _parse_bytes(self.max_tensor_bytes))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                _CHECKS[f.name](f.name, value)

    @classmethod
    def names(cls):
        """The option names, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_mapping(cls, mapping):
        """Options from a dict; an unknown name is a ValueError naming the allowed ones."""
        names = cls.names()
        for key in mapping:
            if key not in names:
                raise ValueError(f"unknown OpenCL option {key!r}; the options are "
                                 f"{', '.join(names)}")
        return cls(**dict(mapping))

    @classmethod
    def from_env(cls, environ=None):
        """The options set by ``SKTENSOR_FAST_OCL_*`` environment variables.

        A variable with a bad value, or one that names no option, is reported by a
        ``RuntimeWarning`` (once per variable and value) and left out, so the device's
        default holds."""
        environ = os.environ if environ is None else environ
        names = cls.names()
        for var in environ:
            if var.startswith(ENV_PREFIX) and var[len(ENV_PREFIX):].lower() not in names:
                _warn_once(var, environ[var], f"not an OpenCL option (the options are "
                                              f"{', '.join(names)})")
        values = {}
        for name in cls.names():
            var = ENV_PREFIX + name.upper()
            raw = environ.get(var)
            if raw is None:
                continue
            try:
                value = _PARSE[name](raw.strip())
                _CHECKS[name](name, value)
            except ValueError as exc:
                _warn_once(var, raw, exc)
                continue
            values[name] = value
        return cls(**values)

    def set_options(self):
        """The options that are set (not None), as a dict."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def updated(self, other):
        """These options with those set in ``other`` (an OpenCLOptions) taking precedence."""
        return dataclasses.replace(self, **other.set_options())


ENV_PREFIX = "SKTENSOR_FAST_OCL_"

_CHECKS = {
    "layout": lambda n, v: _choice(n, v, LAYOUTS),
    "chunk": _positive_int,
    "vec": lambda n, v: _choice(n, v, VECS),
    "phi": lambda n, v: _choice(n, v, PHI_VARIANTS),
    "wide_chunk": _positive_int,
    "wide_group": _positive_int,
    "max_tensor_bytes": _positive_int,
    "gcp_reduction": lambda n, v: _choice(n, v, GCP_REDUCTIONS),
}


def _parse_int(raw):
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"expected an integer, got {raw!r}") from None


def _parse_bytes(raw):
    """A byte count from a string such as ``"3000000"``, ``"1.5e9"``, ``"512M"``, ``"2G"``."""
    text = str(raw).strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(text[-1:], 1) \
        if text[-1:].isalpha() else 1
    num = text[:-1] if text[-1:].isalpha() else text
    try:
        if text[-1:].isalpha() and text[-1:] not in "KMGT":
            raise ValueError
        return int(float(num) * mult)
    except ValueError:
        raise ValueError(f"OpenCL option 'max_tensor_bytes' must be a number of bytes "
                         f"(optionally with K, M or G), got {raw!r}") from None


_PARSE = {"layout": str, "chunk": _parse_int, "vec": _parse_int, "phi": str,
          "wide_chunk": _parse_int, "wide_group": _parse_int, "max_tensor_bytes": _parse_bytes,
          "gcp_reduction": str}

#: (variable, value) pairs already warned about
_WARNED = set()


def _warn_once(var, raw, why):
    if (var, raw) not in _WARNED:
        _WARNED.add((var, raw))
        _warn(f"ignoring {var}={raw!r}: {why}", RuntimeWarning)

_CONTEXT = contextvars.ContextVar("sktensor_fast_device_options", default=None)


def as_options(value, name="device_options"):
    """``None``, a dict or an :class:`OpenCLOptions` -> :class:`OpenCLOptions`."""
    if value is None:
        return OpenCLOptions()
    if isinstance(value, OpenCLOptions):
        return value
    if isinstance(value, dict):
        return OpenCLOptions.from_mapping(value)
    raise TypeError(f"{name} must be None, a dict or a sktensor_fast.OpenCLOptions, got "
                    f"{type(value).__name__}")


@contextlib.contextmanager
def config_context(*, device_options=None):
    """Within the block, OpenCL backends use these options unless an estimator sets its own.

    Parameters
    ----------
    device_options : dict or OpenCLOptions
        Options for the OpenCL kernels (see :class:`OpenCLOptions`); they take precedence over
        the ``SKTENSOR_FAST_OCL_*`` environment variables and over an enclosing context.

    Examples
    --------
    >>> from sktensor_fast import config_context, get_device_options
    >>> with config_context(device_options={"chunk": 64}):
    ...     get_device_options().chunk
    64
    """
    opts = as_options(device_options)
    outer = _CONTEXT.get()
    token = _CONTEXT.set(opts if outer is None else outer.updated(opts))
    try:
        yield opts
    finally:
        _CONTEXT.reset(token)


def get_device_options():
    """The OpenCL options in force here.

    Returns
    -------
    OpenCLOptions
        Those of the ``SKTENSOR_FAST_OCL_*`` environment variables, updated by the enclosing
        :func:`config_context` blocks (``None`` fields: the device's default).

    Examples
    --------
    >>> from sktensor_fast import config_context, get_device_options
    >>> with config_context(device_options={"layout": "wide"}):
    ...     get_device_options().layout
    'wide'
    """
    opts = OpenCLOptions.from_env()
    ctx = _CONTEXT.get()
    return opts if ctx is None else opts.updated(ctx)


def resolve_options(explicit=None):
    """:func:`get_device_options` updated by ``explicit`` (an estimator's ``device_options``)."""
    return get_device_options().updated(as_options(explicit))
