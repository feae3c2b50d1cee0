"""Warnings that point at the caller's line.

A warning raised deep inside the package (a thread count checked in a context manager, a data
check run by ``fit`` inside a ``Pipeline`` step) is reported at the first frame of the call
stack that lies outside the package, outside scikit-learn and joblib (whose output wrappers,
meta-estimators and caches call the estimators) and outside the standard library's
``contextlib``: the user's own line, whatever the depth of the call.
"""
import contextlib
import os
import sys
import warnings

__all__ = ["warn"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _prefixes():
    prefixes = [_PACKAGE, os.path.splitext(os.path.abspath(contextlib.__file__))[0]]
    for name in ("sklearn", "joblib"):      # joblib: the caching of Pipeline's steps
        try:
            module = __import__(name)
        except ImportError:  # pragma: no cover - dependencies of the package
            continue
        prefixes.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)
    return tuple(prefixes)


_INTERNAL = []       # filled at the first warning (scikit-learn need not be imported before)


def _internal(filename):
    if not _INTERNAL:
        _INTERNAL.append(_prefixes())
    return os.path.abspath(filename).startswith(_INTERNAL[0])


def stacklevel():
    """The ``stacklevel`` of a ``warnings.warn`` call made by the caller of this function that
    points at the first frame outside the package (see the module)."""
    frame = sys._getframe(2)      # the caller of the function that asks
    level = 2
    while frame is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level


def warn(message, category=UserWarning):
    """``warnings.warn(message, category)`` reported at the user's line (see the module)."""
    warnings.warn(message, category, stacklevel=stacklevel())
