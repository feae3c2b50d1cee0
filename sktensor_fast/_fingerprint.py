"""What defines a value, as plain data that two processes (or two sessions) can compare.

:func:`fingerprint` describes a setting of an estimator by what it does, not by its address:
numbers and strings as themselves, arrays by shape, dtype and a checksum of their bytes,
containers element by element, and code by its content.  A function is its compiled code
(bytecode, constants, the names it reads), its default arguments, the values captured in its
closure and the values of the module globals it reads; a method is its function and its
object; an object is its class (the functions and values defined in the classes of its MRO)
and the values of its attributes.  So two user-defined loss objects have the same
fingerprint exactly when they run the same code on the same values: a loss whose parameter
or formula differs between two processes, or between the session that saved a model and the
one that loads it, is told apart although both have the same class name and a default repr.

An object that cannot be described this way (no attributes to read and a repr that only
gives its address) raises :class:`NotComparable`.  Code is compared as compiled by one Python
version: the same source gives another fingerprint under another Python version.

This module imports nothing of the package.
"""
import hashlib
import sys
import types
import zlib

import numpy as np

__all__ = ["fingerprint", "digest", "NotComparable", "PYTHON"]

#: the interpreter whose bytecode :func:`fingerprint` describes ("cpython-3.12")
PYTHON = f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}"

#: deepest nesting described (objects holding objects holding ...)
_MAX_DEPTH = 64

_SIMPLE = (type(None), bool, int, float, complex, str, bytes, np.integer, np.floating,
           np.bool_, np.complexfloating)


#: Py_TPFLAGS_HEAPTYPE: set on the classes that ``class`` statements make
_HEAPTYPE = 1 << 9

#: callables implemented in C: described by their name
_BUILTIN_CALLABLES = (types.BuiltinFunctionType, types.MethodDescriptorType,
                      types.WrapperDescriptorType, types.MethodWrapperType,
                      types.ClassMethodDescriptorType, types.GetSetDescriptorType,
                      types.MemberDescriptorType, np.ufunc)


class NotComparable(TypeError):
    """A value whose content cannot be described (see :func:`fingerprint`)."""


def fingerprint(value):
    """A description of ``value`` made of tuples, strings, bytes and numbers (picklable,
    comparable with ``==``); raises :class:`NotComparable` for what cannot be described."""
    return _Describer().describe(value, 0)


def digest(value):
    """The SHA-256 (hex) of :func:`fingerprint`: a short identity of ``value``."""
    return hashlib.sha256(repr(fingerprint(value)).encode("utf-8", "backslashreplace")
                          ).hexdigest()


def _array(a):
    a = np.ascontiguousarray(a)
    if a.dtype.hasobject:
        return None
    return ("array", a.shape, a.dtype.str, zlib.crc32(a.reshape(-1).view(np.uint8)))


def _name(obj):
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', type(obj).__name__)}"


class _Describer:
    def __init__(self):
        self.active = {}        # id -> position, for the objects being described (cycles)
        self.done = {}          # id -> (object, description): each object described once

    def describe(self, v, depth):
        if isinstance(v, _SIMPLE):
            if isinstance(v, np.generic):
                v = v.item()
            if isinstance(v, (float, complex)) and v != v:
                return ("nan",)         # NaN != NaN: compared by name
            return v
        if depth > _MAX_DEPTH:
            raise NotComparable(f"a {type(v).__name__} nested more than {_MAX_DEPTH} levels deep")
        key = id(v)
        if key in self.active:
            return ("cycle", self.active[key])
        if key in self.done:
            return self.done[key][1]
        self.active[key] = len(self.active)
        try:
            out = self._describe(v, depth + 1)
        finally:
            del self.active[key]
        self.done[key] = (v, out)   # holding v keeps its id from being reused meanwhile
        return out

    def _describe(self, v, depth):
        d = self.describe
        if isinstance(v, np.ndarray):
            a = _array(v)
            if a is None:
                return ("object array", v.shape, tuple(d(x, depth) for x in v.reshape(-1)))
            return a
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, tuple(d(x, depth) for x in v))
        if isinstance(v, dict):
            items = sorted(((repr(d(k, depth)), d(x, depth)) for k, x in v.items()),
                           key=lambda kv: kv[0])
            return ("dict", tuple(items))
        if isinstance(v, (set, frozenset)):
            return ("set", tuple(sorted(repr(d(x, depth)) for x in v)))
        if isinstance(v, np.random.RandomState):
            return ("RandomState", d(v.get_state(), depth))
        if isinstance(v, np.random.Generator):
            return ("Generator", repr(v.bit_generator.state))
        if isinstance(v, np.dtype):
            return ("dtype", v.str)
        if isinstance(v, types.ModuleType):
            return ("module", v.__name__)
        if isinstance(v, types.FunctionType):
            return self._function(v, depth)
        if isinstance(v, types.MethodType):
            return ("method", d(v.__func__, depth), d(v.__self__, depth))
        if isinstance(v, types.CodeType):
            return self._code(v, depth, {})
        if isinstance(v, (staticmethod, classmethod)):
            return (type(v).__name__, d(v.__func__, depth))
        if isinstance(v, property):
            return ("property", d(v.fget, depth), d(v.fset, depth), d(v.fdel, depth))
        if isinstance(v, type):
            return self._class(v, depth)
        if isinstance(v, _BUILTIN_CALLABLES):
            return ("builtin", _name(v), getattr(v, "__name__", repr(v)))
        if type(v).__name__ == "partial" and hasattr(v, "func"):      # functools.partial
            return ("partial", d(v.func, depth), d(v.args, depth), d(v.keywords, depth))
        if hasattr(v, "subs") and hasattr(v, "vals") and hasattr(v, "shape"):   # SparseTensor
            return ("sparse", tuple(v.shape), _array(v.subs), _array(v.vals))
        if hasattr(v, "weights") and hasattr(v, "factors"):                   # KruskalTensor
            return ("kruskal", d(np.asarray(v.weights), depth), d(list(v.factors), depth))
        state = _attributes(v)
        if state is not None or _python_class(type(v)):
            return ("object", d(type(v), depth), d(state, depth))
        r = repr(v)
        if " at 0x" in r or r.startswith("<"):
            raise NotComparable(f"an object of type {type(v).__qualname__} (no attributes to "
                                f"compare, and its repr {r!r} says nothing of its content)")
        return (_name(type(v)), r)

    def _function(self, f, depth):
        d = self.describe
        names = {}
        code = self._code(f.__code__, depth, names)
        glob = f.__globals__
        builtins = glob.get("__builtins__", {})
        builtins = builtins if isinstance(builtins, dict) else vars(builtins)
        used = []
        for n in sorted(names):
            if n in glob:
                used.append((n, d(glob[n], depth)))
            elif n in builtins:
                used.append((n, ("builtin name",)))
        cells = ()
        if f.__closure__:
            cells = tuple(d(_cell(c), depth) for c in f.__closure__)
        return ("function", _name(f), code, d(f.__defaults__, depth),
                d(f.__kwdefaults__, depth), cells, tuple(used))

    def _code(self, c, depth, names):
        """The code object as data; the names it reads (global candidates) go to ``names``."""
        names.update(dict.fromkeys(c.co_names))
        consts = []
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                consts.append(self._code(k, depth, names))
            else:
                consts.append(self.describe(k, depth))
        return ("code", c.co_code, tuple(consts), c.co_names, c.co_argcount,
                c.co_kwonlyargcount, c.co_flags)

    def _class(self, cls, depth):
        if not _defined_in_python(cls):
            return ("class", _name(cls))
        own = []
        for k in cls.__mro__:
            if not _defined_in_python(k):
                continue
            members = []
            for attr, val in sorted(vars(k).items()):
                if attr.startswith("__") and attr.endswith("__") and attr not in (
                        "__call__", "__init__", "__getattr__", "__getattribute__"):
                    continue
                members.append((attr, self.describe(val, depth)))
            own.append((_name(k), tuple(members)))
        return ("class", _name(cls), tuple(own))


def _cell(c):
    try:
        return c.cell_contents
    except ValueError:          # an empty cell
        return ("empty cell",)


def _defined_in_python(cls):
    """Whether a class was made by a ``class`` statement (a heap type), not built in."""
    return bool(cls.__flags__ & _HEAPTYPE)


def _python_class(cls):
    """Whether a class (or one of its bases) defines methods in Python: then the class and
    the object's attributes are what it does."""
    return any(isinstance(val, types.FunctionType)
               for k in cls.__mro__ if _defined_in_python(k) for val in vars(k).values())


def _attributes(v):
    """The attributes of an object (``__dict__`` and ``__slots__``), or None if it has none."""
    state = {}
    found = False
    if hasattr(v, "__dict__") and isinstance(getattr(v, "__dict__", None), dict):
        state.update(v.__dict__)
        found = True
    for k in type(v).__mro__:
        slots = k.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        for s in slots:
            if s in ("__dict__", "__weakref__"):
                continue
            found = True
            if hasattr(v, s):
                state[s] = getattr(v, s)
    return state if found else None
