"""Warnings that point at the caller's line.

A warning raised deep inside the package (a thread count checked in a context manager, a data
check run by ``fit`` inside a ``Pipeline`` step) is reported at the first frame of the call
stack that lies outside the package and outside the standard library's ``contextlib``: the
user's own line, whatever the depth of the call inside the package.
"""
import contextlib
import os
import sys
import warnings

__all__ = ["warn"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_INTERNAL = (_PACKAGE, os.path.splitext(os.path.abspath(contextlib.__file__))[0])


def _internal(filename):
    return os.path.abspath(filename).startswith(_INTERNAL)


def stacklevel():
    """The ``stacklevel`` of a ``warnings.warn`` call made by the caller of this function that
    points at the first frame outside the package (and ``contextlib``)."""
    frame = sys._getframe(2)      # the caller of the function that asks
    level = 2
    while frame is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level


def warn(message, category=UserWarning):
    """``warnings.warn(message, category)`` reported at the user's line (see the module)."""
    warnings.warn(message, category, stacklevel=stacklevel())
