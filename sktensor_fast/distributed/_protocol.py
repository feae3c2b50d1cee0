"""How an estimator's ``fit`` meets a :class:`DistributedTensor`.

``BaseCP`` asks its input for two things when the input provides them: ``_sktf_validate``
(the input checks, run here on every process's share with one agreed outcome) and
``_sktf_backend`` (the backend that runs the fit: here the distributed backend wrapping each
process's own device, after checking that every process fits the same estimator).
"""
from .._fingerprint import NotComparable, fingerprint
from ..tensor import SparseTensor
from ._mpi import agree_on_errors

__all__ = ["validate", "backend_for"]

#: parameters that may differ between processes (they do not change the model)
_LOCAL_PARAMS = ("verbose", "device", "device_options")


class _ShareView(SparseTensor):
    """This process's nonzeros (copy of mode 0) presented with the global shape and nnz, for
    the estimators' data checks, which look at ``shape``, ``nnz`` and ``vals`` only."""

    @classmethod
    def of(cls, Xd):
        t = Xd.local[0]
        view = cls._from_canonical(t.subs, t.vals, Xd.shape)
        view._global_nnz = Xd.nnz
        return view

    @property
    def nnz(self):
        return self._global_nnz


def validate(Xd, estimator, reset):
    with agree_on_errors(Xd.comm):
        _check_unsupported(estimator)
        estimator._validate_input(_ShareView.of(Xd), reset)
    return Xd


def _check_unsupported(estimator):
    """Raise for the settings a DistributedTensor does not take (before an estimator looks
    at the tensor's nonzeros, which no process holds whole)."""
    if type(estimator).__name__ == "GCP" and \
            estimator.get_params(deep=False).get("mask") is not None:
        raise NotImplementedError("GCP: a mask is not available on a DistributedTensor")


def _signature(estimator):
    """{parameter: fingerprint} of the parameters every process must share; a parameter whose
    value cannot be described (see :mod:`sktensor_fast._fingerprint`) is marked, with the
    reason kept apart (it may name an address)."""
    params = estimator.get_params(deep=False)
    sig, why = {}, {}
    for k, v in sorted(params.items()):
        if k in _LOCAL_PARAMS:
            continue
        try:
            sig[k] = fingerprint(v)
        except NotComparable as exc:
            sig[k] = ("not comparable", type(v).__module__ + "." + type(v).__qualname__)
            why[k] = str(exc)
    return sig, why


def _local_device(Xd, device):
    """The device string this process uses: ``"gpu"`` is the (local rank)-th GPU of the host."""
    from ..backends import parse_device
    kind, sel = parse_device(device)
    if kind == "opencl" and sel == "gpu":
        from ..backends import list_devices
        gpus = [d for d in list_devices() if "GPU" in d["type"].upper()]
        if not gpus:
            from ..backends.opencl.device import NoDeviceError
            raise NoDeviceError("device='gpu': PyOpenCL sees no GPU on this host")
        return gpus[Xd._local_rank() % len(gpus)]["device"]
    return device


def backend_for(Xd, estimator):
    from .backend import DistributedBackend
    name = type(estimator).__name__
    comm = Xd.comm
    params_sig, why = _signature(estimator)
    sig = (type(estimator).__module__ + "." + type(estimator).__qualname__, params_sig)
    everyone = comm.allgather(sig)
    Xd._local_rank()      # collective on first use: do it outside the local block below
    with agree_on_errors(comm):
        for k, reason in why.items():
            raise ValueError(
                f"{name}: the processes cannot check that they fit with the same {k}: its "
                f"value is {reason}. Give every process an object whose attributes define it "
                f"(a class with its settings as attributes, a function), or a built-in name")
        for r, other in enumerate(everyone):
            if other == sig:
                continue
            if other[0] != sig[0]:
                raise ValueError(f"the processes fit different estimators: {sig[0]} here, "
                                 f"{other[0]} on process {r}")
            diff = sorted(k for k in set(sig[1]) | set(other[1])
                          if sig[1].get(k, "<unset>") != other[1].get(k, "<unset>"))
            raise ValueError(f"the processes fit {name} with different parameters ({diff}); "
                             f"every process must call fit with the same parameters (only "
                             f"{', '.join(_LOCAL_PARAMS)} may differ)")
        params = estimator.get_params(deep=False)
        if isinstance(params.get("init"), str) and params.get("random_state") is None:
            raise ValueError(f"{name}(random_state=None) would draw a different initial guess "
                             f"on every process; pass an int random_state (or init) so that "
                             f"every process starts from the same model")
        if params.get("init") == "nvecs":
            raise NotImplementedError(f"{name}: init='nvecs' is not available on a "
                                      f"DistributedTensor; use init='random' or given factors")
        _check_unsupported(estimator)
        if name == "GCP":
            if params.get("random_state") is None:
                raise ValueError("GCP(random_state=None) would draw different samples on every "
                                 "process; pass an int random_state")
        device = _local_device(Xd, estimator.device)
        from ..backends import get_backend
        local = get_backend(device, getattr(estimator, "device_options", None))
    return DistributedBackend.wrap(local, Xd)
