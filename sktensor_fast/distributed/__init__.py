"""Distributed fits over MPI processes (mpi4py), SPMD.

Run a script with ``mpiexec -n 4 python script.py``; in it, every process builds its part of
a distributed tensor and calls ``fit`` with the same parameters::

    from sktensor_fast import CPAPR
    from sktensor_fast.distributed import load_tns
    Xd = load_tns("counts.tns")                      # every process reads its byte range
    model = CPAPR(rank=10, random_state=0).fit(Xd)   # same fitted attributes on every process

``load_tensor(path)`` reads a binary file of :func:`sktensor_fast.save_tensor` the same way (each
process its share of the nonzeros); ``scatter(X)`` spreads a tensor held by process 0 instead,
and ``from_parts(subs, vals, shape)`` builds one from the nonzeros each process holds.  The
fit runs the estimators' own algorithms on :class:`~sktensor_fast.distributed.backend.DistributedBackend`, which wraps
each process's backend (``device="cpu"``, or ``device="gpu"``: the process's own GPU, chosen
by its rank on the host).  See ``doc/scaling.md`` for the partition and its cost.

Imported in a job of several processes (an MPI launcher's, or after ``from mpi4py import
MPI``), the package makes an uncaught exception on any process abort the job (``MPI_Abort``),
so that no process waits forever for one that failed; import it at the top of the script.

Needs the ``mpi`` extra (``pip install 'sktensor_fast[mpi]'``); without mpi4py, importing
this package works and using it raises an ImportError that names the extra.
"""
from ._mpi import install_abort_hook, launched_in_a_job, require_mpi

__all__ = ["scatter", "from_parts", "load_tns", "load_tensor", "DistributedTensor",
           "DistributedBackend", "require_mpi"]


if launched_in_a_job():
    # before any collective call: a process that raises before its first call of this
    # package (or between two) aborts the job instead of leaving the others waiting
    try:
        install_abort_hook()
    except ImportError:         # no mpi4py: using the package says so
        pass


def scatter(X, comm=None):
    """Spread the tensor ``X`` of process 0 over ``comm`` (see :func:`.tensor.scatter`)."""
    require_mpi()
    from .tensor import scatter as _scatter
    return _scatter(X, comm)


def from_parts(subs, vals, shape, comm=None, dtype=None):
    """The tensor of the nonzeros every process holds (see :func:`.tensor.from_parts`)."""
    require_mpi()
    from .tensor import from_parts as _from_parts
    return _from_parts(subs, vals, shape, comm, dtype)


def load_tns(path, comm=None, **kwargs):
    """Read a ``.tns`` file in parallel (see :func:`.tensor.load_tns`)."""
    require_mpi()
    from .tensor import load_tns as _load
    return _load(path, comm, **kwargs)


def load_tensor(path, comm=None):
    """Read a binary tensor file in parallel (see :func:`.tensor.load_tensor`)."""
    require_mpi()
    from .tensor import load_tensor as _load
    return _load(path, comm)


def __getattr__(name):
    if name == "DistributedTensor":
        from .tensor import DistributedTensor
        return DistributedTensor
    if name == "DistributedBackend":
        from .backend import DistributedBackend
        return DistributedBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
