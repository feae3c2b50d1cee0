"""The kernel interface: GCP primitives grouped in ``backend.gcp`` and their arguments checked
once, in the base class, with the same messages on every backend."""
import numpy as np
import pytest

from sktensor_fast import SparseTensor
from sktensor_fast.backends import Backend, get_backend
from sktensor_fast.backends.base import GcpKernels
from sktensor_fast.decomposition.losses import get_loss
from sktensor_fast.decomposition.optimizers import make_optimizer


def test_backend_has_no_flat_gcp_methods():
    assert not [m for m in dir(Backend) if m.startswith("gcp_")]
    cpu = get_backend("cpu")
    assert isinstance(cpu.gcp, GcpKernels) and cpu.gcp is cpu.gcp
    assert cpu.gcp.backend is cpu


def test_a_backend_without_gcp_says_so():
    class Bare(Backend):
        name = "bare"
        prepare = asarray = to_numpy = zeros = _mttkrp = _phi = _model_values = None
        gram = matmul_small = column_norms = scale_columns = inner = None

    with pytest.raises(NotImplementedError, match="'bare' backend does not implement the GCP "
                                                  "primitive optimizer_update"):
        Bare().gcp.optimizer_update("sgd", [np.zeros((2, 2))], [np.zeros((2, 2))], (),
                                    (0.1,), 0.0)


def _tensor():
    rng = np.random.default_rng(0)
    return SparseTensor.from_dense((rng.random((6, 5, 4)) < 0.3) * 1.0)


def _sample(subs):
    subs = np.asarray(subs)
    n = subs.shape[0]
    return subs, np.ones(n), np.ones(n), np.zeros(n, np.int8)


def _setup(device):
    be = get_backend(device)
    X = _tensor()
    T = be.prepare(X, be.storage_format("auto", ("gcp",)))
    rng = np.random.default_rng(1)
    U = [be.asarray(rng.random((s, 2))) for s in X.shape]
    return be, T, U


@pytest.mark.parametrize("call, err, match", [
    (lambda g, T, U: g.setup(T, "random", (5, 5), (5, 5), 0), ValueError, "unknown sampler"),
    (lambda g, T, U: g.setup(T, "uniform", (5,), (5, 5), 0), ValueError, "n_grad must be a pair"),
    (lambda g, T, U: g.setup(T, "uniform", (5, -1), (5, 5), 0), ValueError, "n_grad must be in"),
    (lambda g, T, U: g.setup(T, "uniform", (5, 5), (5, 5), 1.5), TypeError, "loss_seed must be"),
    (lambda g, T, U: g.setup(T, "uniform", (5, 5), (5, 5), 0, zero_subs=[[9, 0, 0]]),
     ValueError, "zero_subs row 0 .* is outside"),
    (lambda g, T, U: g.loss_estimate(T, None, np.ones(3), U, get_loss("gaussian")), ValueError,
     r"weights have shape \(3,\), expected \(2,\)"),
    (lambda g, T, U: g.sampled_gradient(T, None, np.ones(2), U, get_loss("gaussian"), -1, 0),
     ValueError, "seed must be in"),
    (lambda g, T, U: g.sampled_gradient(T, None, np.ones(2), U, get_loss("gaussian"), 0, 0,
                                        active=[True]), ValueError, "active has 1 entries"),
    (lambda g, T, U: g.sampled_gradient(T, None, np.ones(2), U, object(), 0, 0), TypeError,
     "loss must be a loss object"),
    (lambda g, T, U: g.full_loss_grad(T, np.ones(2), U, get_loss("gaussian"), mask=np.ones(3)),
     ValueError, "mask has shape"),
    (lambda g, T, U: g.full_loss_grad(T, np.ones(2), U[:2], get_loss("gaussian")), ValueError,
     "2 factor matrices given for a tensor with 3 modes"),
    (lambda g, T, U: g.optimizer_update("newton", U, U, (), (0.1,), 0.0), ValueError,
     "unknown update rule 'newton'; use one of sgd, adagrad, adam"),
    (lambda g, T, U: g.optimizer_update("sgd", U, U[:2], (), (0.1,), 0.0), ValueError,
     "2 gradients for 3 factors"),
    (lambda g, T, U: g.optimizer_update("adam", U, U, (U,), (0.9, 0.99, 0.1, 1e-8), 0.0),
     ValueError, r"moments must hold the 2 moment\(s\) of the 'adam' update \(m, v\)"),
    (lambda g, T, U: g.optimizer_update("adagrad", U, U, (U[:2],), (0.1, 1e-8), 0.0),
     ValueError, "moment 's' must hold 3 arrays"),
    (lambda g, T, U: g.optimizer_update("adagrad", U, U, (U[::-1],), (0.1, 1e-8), 0.0),
     ValueError, "mode 0: moment 's' has shape"),
    (lambda g, T, U: g.optimizer_update("sgd", U, U, (), (0.1, 1e-8), 0.0), ValueError,
     r"the 'sgd' update takes the coefficients \(lr\)"),
    (lambda g, T, U: g.optimizer_update("sgd", U, U, (), (float("nan"),), 0.0), ValueError,
     "lr must not be NaN"),
    (lambda g, T, U: g.optimizer_update("sgd", U, U[::-1], (), (0.1,), 0.0), ValueError,
     "mode 0: the gradient has shape"),
    (lambda g, T, U: g.steps(T, None, np.ones(2), U, get_loss("gaussian"), 0, 0, 1, "adam",
                             0.0), TypeError, "optimizer must be a stochastic optimiser"),
    (lambda g, T, U: g.steps(T, None, np.ones(2), U, get_loss("gaussian"), 0, 0, 1,
                             make_optimizer("adam"), 0.0), ValueError,
     r"no moments: call optimizer.start\(backend, factors\) first"),
    (lambda g, T, U: g.steps(T, None, np.ones(2), U, get_loss("gaussian"), 0, 0, 1,
                             make_optimizer("adam").start(g.backend, U[::-1]), 0.0),
     ValueError, "mode 0: moment 'm' has shape"),
    (lambda g, T, U: g.steps(T, None, np.ones(2), U, get_loss("gaussian"), 0, 0, 1,
                             make_optimizer("sgd").start(g.backend, U), 0.0, out=U[::-1]),
     ValueError, r"out\[0\] has shape"),
    # explicit samples: coordinates the kernels would index the factors with, checked first
    (lambda g, T, U: g.sample_gradient(_sample([[0, 0, 0], [6, 0, 0]]), np.ones(2), U,
                                       get_loss("poisson")),
     ValueError, r"coordinates \(6, 0, 0\) of sample 1 are outside the factors' rows"),
    (lambda g, T, U: g.sample_loss(_sample([[0, -1, 0]]), np.ones(2), U, get_loss("poisson")),
     ValueError, r"coordinates \(0, -1, 0\) of sample 0 are outside"),
    (lambda g, T, U: g.sample_loss(_sample([[0.0, 1.0, 0.0]]), np.ones(2), U,
                                   get_loss("poisson")),
     TypeError, "subs must hold integer coordinates"),
    # gradients' arrays smaller than the factors: the kernels would write past them
    (lambda g, T, U: g.sample_gradient(_sample([[5, 0, 0]]), np.ones(2), U,
                                       get_loss("poisson"), out=[np.zeros((2, 2))] + U[1:]),
     ValueError, r"out\[0\] has shape \(2, 2\), the factor \(6, 2\)"),
    (lambda g, T, U: g.sampled_gradient(T, None, np.ones(2), U, get_loss("gaussian"), 0, 0,
                                        out=U[:1] + [np.zeros((1, 2))] + U[2:]),
     ValueError, r"out\[1\] has shape \(1, 2\)"),
])
def test_gcp_arguments_are_checked_alike_on_every_device(device, call, err, match):
    be, T, U = _setup(device)
    with pytest.raises(err, match=match):
        call(be.gcp, T, U)


def test_backend_has_no_flat_apr_methods():
    assert not [m for m in dir(Backend) if m.startswith("apr_") or m == "multiply_"]
    from sktensor_fast.backends.base import AprKernels
    cpu = get_backend("cpu")
    assert isinstance(cpu.apr, AprKernels) and cpu.apr is cpu.apr


def _row_params(**kw):
    return dict(dict(tol=1e-4, max_inner=5, eps_div_zero=1e-10, eps_active=1e-8), **kw)


@pytest.mark.parametrize("call, err, match", [
    (lambda a, T, U: a.shift_inadmissible(U[0], U[1], 1e-10, 0.01), ValueError,
     r"Phi has shape \(5, 2\), A has \(6, 2\)"),
    (lambda a, T, U: a.kkt_violation(U[0], [[1.0]]), TypeError, "Phi must be a NumPy or "),
    (lambda a, T, U: a.multiply_(U[0], U[1]), ValueError, "Phi has shape"),
    (lambda a, T, U: a.mu_rows_(U[0], U[0], float("nan")), ValueError, "tol must be a real"),
    (lambda a, T, U: a.row_solve(T, U, 0, U[0], "newton", _row_params()), ValueError,
     "unknown CP-APR row solver"),
    (lambda a, T, U: a.row_solve(T, U, 1.0, U[1], "pdnr", _row_params()), TypeError,
     "mode must be an integer"),
    (lambda a, T, U: a.row_solve(T, U, 0, U[1], "pdnr", _row_params()), ValueError,
     r"B has shape \(5, 2\), expected \(6, 2\)"),
    (lambda a, T, U: a.row_solve(T, U, 0, U[0], "pdnr", {"tol": 1e-4}), ValueError,
     "lack max_inner"),
    (lambda a, T, U: a.row_solve(T, U, 0, U[0], "pqnr", _row_params(lbfgs_mem=0)), ValueError,
     "lbfgs_mem must be in"),
    (lambda a, T, U: a.row_solve(T, U, 0, U[0], "pqnr", _row_params(eps_div_zero=0.0)),
     ValueError, "eps_div_zero must be > 0"),
])
def test_apr_arguments_are_checked_alike_on_every_device(device, call, err, match):
    be, T, U = _setup(device)
    T = be.prepare(_tensor(), be.storage_format("auto", ("apr_rows",)))
    with pytest.raises(err, match=match):
        call(be.apr, T, U)

