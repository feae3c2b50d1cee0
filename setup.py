"""Build the Cython extensions of sktensor_fast with OpenMP where the compiler supports it.

The OpenMP flags are chosen per compiler by compiling a tiny test program.  When no flag
works (for example Apple clang without libomp) the extensions are built serial and a
warning is printed; ``sktensor_fast.show_config()`` then reports ``openmp: False``.
"""
import os
import re
import shutil
import sys
import tempfile
import warnings

import numpy as np
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

OMP_TEST = r"""
#include <omp.h>
int main(void) {
    int n = 0;
    #pragma omp parallel reduction(+:n)
    n += 1;
    return omp_get_max_threads() > 0 ? 0 : 1;
}
"""

CANDIDATES = {
    "msvc": [(["/openmp"], [])],
    "unix": [(["-fopenmp"], ["-fopenmp"]),
             (["-Xpreprocessor", "-fopenmp"], ["-lomp"]),
             (["-qopenmp"], ["-qopenmp"])],
}


def _try_flags(compiler, cflags, lflags):
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "omp_test.c")
        with open(src, "w") as f:
            f.write(OMP_TEST)
        objs = compiler.compile([src], output_dir=tmp, extra_postargs=cflags)
        compiler.link_executable(objs, os.path.join(tmp, "omp_test"), extra_postargs=lflags)
        return True
    except Exception:
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _jobs():
    """Compile jobs: ``SKTENSOR_FAST_BUILD_JOBS`` when set, else one per CPU this process may
    use (the extensions are independent, so they compile side by side)."""
    env = os.environ.get("SKTENSOR_FAST_BUILD_JOBS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise SystemExit(f"SKTENSOR_FAST_BUILD_JOBS must be a positive integer, not {env!r}")
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class BuildExtOpenMP(build_ext):
    def finalize_options(self):
        super().finalize_options()
        # ``build_ext -j N`` (or setup.cfg's parallel) wins; otherwise every CPU compiles
        if not self.parallel:
            self.parallel = _jobs()

    def build_extensions(self):
        ctype = self.compiler.compiler_type
        flags = None
        if os.environ.get("SKTENSOR_FAST_NO_OPENMP", "") not in ("", "0"):
            flags = None
        else:
            for cflags, lflags in CANDIDATES.get(ctype, CANDIDATES["unix"]):
                if _try_flags(self.compiler, cflags, lflags):
                    flags = (cflags, lflags)
                    break
        opt = ["/O2"] if ctype == "msvc" else ["-O3"]
        if ctype != "msvc" and os.environ.get("SKTENSOR_FAST_NATIVE", "0") == "1":
            opt.append("-march=native")
        for ext in self.extensions:
            ext.extra_compile_args = list(ext.extra_compile_args) + opt
            if flags is not None:
                ext.extra_compile_args += flags[0]
                ext.extra_link_args = list(ext.extra_link_args) + flags[1]
                ext.define_macros = list(ext.define_macros) + [("SKTF_OPENMP", "1")]
        if flags is None:
            warnings.warn("sktensor_fast: the C compiler has no usable OpenMP flag; "
                          "building serial kernels (show_config() will report openmp: False)")
            print("WARNING: building sktensor_fast without OpenMP (serial kernels)", file=sys.stderr)
        super().build_extensions()


INCLUDE = os.path.join("sktensor_fast", "include")
SHARED_UTILITY = "sktensor_fast._cyutility"


def _headers_of(path):
    """The headers of ``INCLUDE`` that ``path`` includes, directly or through another header
    (so that editing a header rebuilds exactly the modules that use it)."""
    pattern = re.compile(r'^\s*(?:cdef\s+extern\s+from|#\s*include)\s+"([^"]+)"', re.M)
    seen, todo = [], [path]
    while todo:
        with open(todo.pop(), encoding="utf-8") as f:
            text = f.read()
        for name in pattern.findall(text):
            hdr = os.path.join(INCLUDE, name)
            if hdr not in seen and os.path.exists(hdr):
                seen.append(hdr)
                todo.append(hdr)
    return sorted(seen)


def extensions():
    from Cython.Build import cythonize
    # sktensor_fast/include: the C99 headers of the numerics that the CPU kernels and the
    # OpenCL kernels share (shipped as package data, see pyproject.toml)
    common = dict(include_dirs=[INCLUDE, np.get_include()],
                  define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
    # every .pyx file of the package is one extension module; the memoryview and fused-type
    # support code that Cython would otherwise generate again in each of them (about 0.8 MB
    # of C apiece) is compiled once, into the shared module sktensor_fast._cyutility
    exts = [Extension(SHARED_UTILITY, [SHARED_UTILITY.replace(".", os.sep) + ".c"])]
    for root, _, files in sorted(os.walk("sktensor_fast")):
        for fn in sorted(files):
            if fn.endswith(".pyx"):
                path = os.path.join(root, fn)
                name = path[:-4].replace(os.sep, ".")
                exts.append(Extension(name, [path], depends=_headers_of(path), **common))
    return cythonize(exts, compiler_directives={"language_level": "3", "boundscheck": False,
                                                "wraparound": False, "cdivision": True,
                                                "initializedcheck": False},
                     shared_utility_qualified_name=SHARED_UTILITY,
                     nthreads=_jobs() if sys.platform.startswith("linux") else 0, quiet=True)


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExtOpenMP})
