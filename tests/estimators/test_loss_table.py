"""The loss table is the one description of GCP's losses: the C header, the NumPy interface
and the kernels of every backend agree with it."""
import math
import os
import re

import numpy as np
import pytest

import sktensor_fast
from sktensor_fast._loss_table import EPS, LOSS_TABLE, N_LOSSES
from sktensor_fast.decomposition.losses import LOSSES, get_loss

INCLUDE = os.path.join(os.path.dirname(sktensor_fast.__file__), "include")


def _defines(header):
    with open(os.path.join(INCLUDE, header), encoding="utf-8") as f:
        text = f.read()
    return dict(re.findall(r"^#define\s+(SKTF_\w+)\s+(.+?)\s*$", text, re.M))


def test_header_codes_are_the_table():
    d = _defines("sktf_losses.h")
    codes = {k[len("SKTF_LOSS_"):].lower(): int(v) for k, v in d.items()
             if k.startswith("SKTF_LOSS_") and re.fullmatch(r"\d+", v)}
    assert codes == {row[0]: row[1] for row in LOSS_TABLE}
    assert int(d["SKTF_N_LOSSES"]) == N_LOSSES == len(LOSS_TABLE)
    assert float(re.search(r"\)\s*([0-9.e+-]+)\)", d["SKTF_LOSS_EPS"]).group(1)) == EPS
    # codes 0 .. N-1 in table order
    assert [row[1] for row in LOSS_TABLE] == list(range(N_LOSSES))


def test_compiled_modules_see_the_table():
    from sktensor_fast._native import _numerics
    from sktensor_fast.backends.cpu import _gcp
    assert _numerics.N_LOSSES == N_LOSSES
    assert _numerics.LOSS_EPS == EPS
    assert _gcp.LOSS_CODES == tuple(range(N_LOSSES))


@pytest.mark.parametrize("row", LOSS_TABLE, ids=[r[0] for r in LOSS_TABLE])
def test_loss_classes_are_built_from_the_table(row):
    name, code, lower, data, zero, param = row
    cls = LOSSES[name]
    assert cls.code == code and cls.name == name and cls.data == data
    assert cls.lower == lower or (math.isinf(lower) and cls.lower == lower)
    if param is None:
        loss = get_loss(name)
        assert math.isnan(loss.param)
        with pytest.raises(ValueError, match="takes no loss_param"):
            get_loss(name, 1.5)
    else:
        with pytest.raises(ValueError, match="needs loss_param"):
            get_loss(name)
        for bad in {"positive": (0.0, -1.0), "not 0 or 1": (0.0, 1.0)}[param[1]]:
            with pytest.raises(ValueError, match="invalid loss_param"):
                get_loss(name, bad)
        loss = get_loss(name, 2.5)
        assert loss.param == 2.5
    if zero == "param > 0":
        assert get_loss(name, 2.5).zero_in_domain
        assert not get_loss(name, -0.5).zero_in_domain
    else:
        assert loss.zero_in_domain is zero
    # the data domain
    if data in ("nonneg", "counts", "binary"):
        with pytest.raises(ValueError, match="negative|binary"):
            loss.check_data(np.array([1.0, -1.0]))
    if data == "binary":
        with pytest.raises(ValueError, match="binary"):
            loss.check_data(np.array([0.0, 1.0, 2.0]))
    if data == "counts":
        with pytest.warns(UserWarning, match="non-integer"):
            loss.check_data(np.array([0.5, 1.0]))
    if data == "real":
        loss.check_data(np.array([-1.5, 2.0]))


def test_table_is_the_documented_table():
    """The table's data domains and lower bounds are those that the losses module documents
    with the formulas (written apart from the table: a wrong bound in either shows here)."""
    from sktensor_fast.decomposition import losses
    data = {"real": "real", "counts ≥ 0": "counts", "{0, 1}": "binary", "≥ 0": "nonneg"}
    doc = {}
    for line in losses.__doc__.splitlines():
        m = re.match(r"``(\w+)``.*?\s{2,}(real|counts ≥ 0|\{0, 1\}|≥ 0)\s+(−inf|0)\s*$", line)
        if m:
            doc[m.group(1)] = (data[m.group(2)], -math.inf if m.group(3) == "−inf" else 0.0)
    assert doc == {name: (dom, lower) for name, _, lower, dom, _, _ in LOSS_TABLE}


def test_data_checks_of_integer_and_empty_data():
    """Integer counts pass without a warning (any dtype); empty data passes; the domain is
    checked on integer arrays too."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dtype in (np.int64, np.int32, np.float32, np.float64):
            get_loss("poisson").check_data(np.array([0, 1, 5], dtype=dtype))
            get_loss("bernoulli_odds").check_data(np.array([0, 1, 1], dtype=dtype))
        for name in ("poisson", "bernoulli_odds", "gamma"):
            get_loss(name).check_data(np.array([]))
    with pytest.raises(ValueError, match="binary"):
        get_loss("bernoulli_odds").check_data(np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="negative"):
        get_loss("poisson").check_data(np.array([3, -1], dtype=np.int32))


def test_loss_protocol_needs_value_deriv_and_lower():
    from sktensor_fast.decomposition.losses import is_loss_object

    def make(**members):
        return type("UserLoss", (), members)()

    def f(self, x, m):
        return x

    assert is_loss_object(make(value=f, deriv=f, lower=0.0))
    assert is_loss_object(get_loss("poisson"))
    for members in ({"deriv": f, "lower": 0.0}, {"value": f, "lower": 0.0},
                    {"value": f, "deriv": f}, {"value": 1.0, "deriv": f, "lower": 0.0}):
        assert not is_loss_object(make(**members))


def test_user_loss_results_take_the_shape_of_the_model_values():
    class Constant:
        lower = 0.0

        def value(self, x, m):
            return 2.0                      # a scalar: broadcast to m's shape

        def deriv(self, x, m):
            return np.ones(3)               # a shape that does not broadcast

    loss = get_loss(Constant())
    m = np.ones((2, 2))
    np.testing.assert_array_equal(loss.value(np.zeros((2, 2)), m), np.full((2, 2), 2.0))
    with pytest.raises(ValueError, match=r"deriv\(x, m\) returned shape \(3,\)"):
        loss.deriv(np.zeros((2, 2)), m)


def test_get_loss_passes_loss_objects_through_without_a_parameter():
    class User:
        lower = 0.0

        def value(self, x, m):
            return x

        def deriv(self, x, m):
            return m

    huber = get_loss("huber", 0.5)
    custom = get_loss(User())
    assert get_loss(huber) is huber and get_loss(custom) is custom
    for obj in (huber, custom, User()):
        with pytest.raises(ValueError, match="loss_param must be None"):
            get_loss(obj, 1.0)


def test_loss_repr_names_loss_and_parameter():
    assert repr(get_loss("poisson")) == "Loss('poisson')"
    assert repr(get_loss("huber", 0.5)) == "Loss('huber', 0.5)"


def test_loss_broadcasts_and_keeps_shapes():
    loss = get_loss("poisson")
    x = np.arange(6.0).reshape(2, 3)
    v = loss.value(x, 2.0)
    assert v.shape == (2, 3)
    np.testing.assert_allclose(v, 2.0 - x * np.log(2.0 + EPS), rtol=1e-15)
    assert np.ndim(loss.deriv(1.0, 2.0)) == 0
    assert loss.deriv(1.0, 2.0) == pytest.approx(1.0 - 1.0 / (2.0 + EPS), rel=1e-15)


def test_opencl_sources_get_the_shared_headers_pasted_in():
    from sktensor_fast.backends.opencl.program import kernel_source
    for name, functions in [("gcp.cl", ("sktf_loss_value", "sktf_loss_deriv", "sktf_below",
                                        "sktf_gcp_sample", "sktf_gcp_find", "sktf_adam_entry",
                                        "sktf_adagrad_entry", "sktf_sgd_entry")),
                            ("gcp_setup.cl", ("sktf_below", "sktf_gcp_sample", "sktf_gcp_find",
                                              "sktf_adam_entry", "sktf_adagrad_entry",
                                              "sktf_sgd_entry")),
                            ("cpapr_rows.cl", ("sktf_apr_pdnr_row", "sktf_apr_pqnr_row"))]:
        src = kernel_source("common.cl", name)
        assert '#include "sktf_' not in src
        for fn in functions:
            # defined once in the program (by the header), called from the kernels
            assert len(re.findall(r"^SKTF_INLINE [^;{]*\b" + fn + r"\(", src, re.M)) == 1, fn
        # the compiler's line numbers point into the real files
        assert '#line 1 "sktf_platform.h"' in src and f'#line 1 "{name}"' in src


@pytest.mark.parametrize("header", ["sktf_platform.h", "sktf_losses.h", "sktf_rng.h",
                                    "sktf_apr_cpu.h", "sktf_gcp_sample.h", "sktf_cp.h",
                                    "sktf_optim.h"])
def test_shared_headers_are_strict_c99(tmp_path, header):
    # the headers shared with the OpenCL kernels stay in portable C99 (OpenCL C's subset)
    import shlex
    import shutil
    import subprocess
    import sysconfig
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    if shutil.which(cc[0]) is None:
        pytest.skip("no C compiler")
    src = tmp_path / "use.c"
    src.write_text(f'#include "{header}"\nint main(void) {{ return 0; }}\n')
    res = subprocess.run(cc[:1] + ["-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror",
                                   "-Wno-unused-function", "-fsyntax-only", f"-I{INCLUDE}",
                                   str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("name, macros", [("cp.cl", ("SKTF_PHI_WEIGHT",)),
                                          ("dense.cl", ("SKTF_DATA_TERM",)),
                                          ("cpapr_rows.cl", ("SKTF_PHI_WEIGHT",))])
def test_opencl_sources_get_the_per_nonzero_formulas(name, macros):
    from sktensor_fast.backends.opencl.program import kernel_source
    src = kernel_source("common.cl", name)
    for macro in macros:
        assert len(re.findall(r"^#define " + macro + r"\(", src, re.M)) == 1, macro
        assert re.search(r"\b" + macro + r"\(", src.split("#define " + macro, 1)[1].split("\n", 1)[1])


def test_per_nonzero_formulas_are_written_once():
    # the clamp of a model value at eps (Phi's weight, the Poisson data term) is spelled out in
    # sktf_cp.h only; the kernels of every device use its macros
    from pathlib import Path
    pattern = re.compile(r"\(?\w+\)?\s*<\s*\(?eps\)?\s*\?|>\s*eps\s*\?|"
                         r"if \(\w+ < eps\) \w+ = eps|log\(fmax\(")
    include = Path(INCLUDE)
    root = include.parent
    files = (list(include.glob("*.h")) + list((root / "backends/opencl/kernels").glob("*.cl"))
             + list((root / "backends/cpu").glob("*.pyx")))
    assert len(files) > 15
    found = sorted(p.name for p in files if pattern.search(p.read_text()))
    assert found == ["sktf_cp.h"]
