"""Cases of the distributed tests, run under ``mpiexec -n P python tests/distributed/_mpi_cases.py``.

Run by tests/distributed/test_distributed.py.  ``python _mpi_cases.py OUT.json [case ...]`` runs the named
cases (all by default) on every process; each case does its collective work first and its
assertions last, so that a failed assertion on one process cannot leave the others waiting.
Process 0 writes {case: {"ok": bool, "errors": [per-process traceback or None], "seconds"}}
to OUT.json, updated after every case.  ``python _mpi_cases.py --abort-uncaught``,
``--raise-before-scatter`` and ``--kill-one`` end the job in the ways a job must not hang.
"""
import contextlib
import json
import os
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np

from mpi4py import MPI

# the tests' shared helpers (``_container``, ``_reference``) live one folder up
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _reference import ScaledSquares  # noqa: E402

from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor, save_tns
from sktensor_fast import load_tns as load_tns_serial
from sktensor_fast.distributed import from_parts, load_tensor, load_tns, scatter

comm = MPI.COMM_WORLD
RANK, SIZE = comm.Get_rank(), comm.Get_size()
CASES = {}
TOL = 1e-10


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def random_tensor(shape, nnz, seed=0, counts=True, skew=False):
    rng = np.random.default_rng(seed)
    cols = []
    for s in shape:
        if skew:   # a few heavy rows, as real data have
            p = 1.0 / np.arange(1, s + 1) ** 1.2
            cols.append(rng.choice(s, nnz, p=p / p.sum()))
        else:
            cols.append(rng.integers(0, s, nnz))
    vals = (rng.poisson(2.0, nnz) + 1.0) if counts else rng.standard_normal(nnz)
    return SparseTensor(np.stack(cols, 1), vals, shape)


def everywhere(obj):
    """The list of ``obj`` of every process."""
    return comm.allgather(obj)


def assert_same_everywhere(arrays):
    got = everywhere([np.asarray(a) for a in arrays])
    for r, other in enumerate(got):
        for a, b in zip(got[0], other):
            assert np.array_equal(a, b), f"process {r} differs from process 0"


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-300))


def compare_models(serial, dist, what):
    assert serial.n_iter_ == dist.n_iter_, (what, serial.n_iter_, dist.n_iter_)
    assert rel(serial.loss_history_, dist.loss_history_) < TOL, what
    assert rel(serial.weights_, dist.weights_) < TOL, what
    for k, (a, b) in enumerate(zip(serial.factors_, dist.factors_)):
        assert rel(a, b) < TOL, (what, k, rel(a, b))


def expect_error_everywhere(fn, exc_type, *fragments):
    """Run ``fn`` collectively; every process must raise ``exc_type`` naming ``fragments``."""
    try:
        fn()
    except exc_type as exc:
        msg = str(exc)
    else:
        msg = None
    got = everywhere(msg)
    for r, m in enumerate(got):
        assert m is not None, f"process {r} did not raise {exc_type.__name__}"
        for f in fragments:
            assert f in m, f"process {r}: {f!r} not in {m!r}"
    return got


def shared_tmpdir():
    d = tempfile.mkdtemp(prefix="sktf-mpi-") if RANK == 0 else None
    return comm.bcast(d, root=0)


# ------------------------------------------------------------------------------ the tensor
@case
def scatter_partition():
    X = random_tensor((40, 30, 3), 3000, seed=1, skew=True)
    Xd = scatter(X if RANK == 0 else None)
    back = Xd.gather(root=0)
    blocks = [Xd.block(n) for n in range(3)]
    # every nonzero of the copy of mode n lies in this process's rows of mode n
    inside = [bool(np.all(t.subs[:, n] < hi - lo)) for n, (t, (lo, hi))
              in enumerate(zip(Xd.local, blocks))]
    per_mode = everywhere(Xd.local_nnz)
    attrs = everywhere((Xd.shape, Xd.nnz, Xd.norm(), Xd.sum(),
                        [b.tolist() for b in Xd.bounds]))
    assert all(a == attrs[0] for a in attrs)
    assert attrs[0][:2] == (X.shape, X.nnz)
    assert abs(attrs[0][2] - X.norm()) <= 1e-12 * X.norm()
    assert all(inside)
    # each mode's copies hold every nonzero once; balanced by nonzeros (rows are not split)
    totals = np.sum(per_mode, axis=0)
    assert np.all(totals == X.nnz), totals
    longest = max(np.bincount(X.subs[:, n]).max() for n in range(3))
    for n in range(3):
        shares = [p[n] for p in per_mode]
        assert max(shares) - X.nnz / SIZE <= longest, (n, shares)
    if RANK == 0:
        assert back == X


@case
def scatter_float32_and_tiny_modes():
    # mode 2 has fewer rows than processes: some processes own no row of it
    X = random_tensor((7, 5, 1), 30, seed=2).astype(np.float32)
    Xd = scatter(X if RANK == 0 else None)
    back = Xd.gather()
    rows = everywhere(Xd.block(2))
    model = CPALS(rank=2, random_state=0, max_iter=10, tol=0, format="coo").fit(Xd)
    serial = CPALS(rank=2, random_state=0, max_iter=10, tol=0, format="coo").fit(X)
    assert Xd.dtype == np.float32
    assert sorted(hi - lo for lo, hi in rows) == [0] * (SIZE - 1) + [1]
    if RANK == 0:
        assert back == X
    assert abs(model.fit_ - serial.fit_) < 1e-5


def _write_messy_tns(path, X, rng):
    """X in a .tns with comments, blank lines, shuffled lines, split repeats and a zero."""
    lines = []
    for s, v in zip(X.subs.tolist(), X.vals.tolist()):
        c = " ".join(str(i + 1) for i in s)
        if rng.random() < 0.1:
            lines.append(f"{c} {v - 1.0}")   # a repeat: the two lines add up to v
            lines.append(f"{c}  1.0")
        else:
            lines.append(f"{c}\t{v}")
    lines.append(" ".join(str(i + 1) for i in X.subs[0]) + " 0")   # explicit zero, then
    lines.append(" ".join(str(i + 1) for i in X.subs[0]) + " 0.0")   # added to X's entry
    order = rng.permutation(len(lines))
    out = ["# a comment", ""]
    for i in order:
        out.append(lines[i])
        if rng.random() < 0.02:
            out.append("   # indented comment")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


@case
def load_tns_parallel():
    d = shared_tmpdir()
    path = os.path.join(d, "x.tns")
    gz = os.path.join(d, "x.tns.gz")
    if RANK == 0:
        X0 = random_tensor((20, 15, 12, 6), 1500, seed=3)
        _write_messy_tns(path, X0, np.random.default_rng(0))
        save_tns(gz, X0)
    comm.Barrier()
    Xd = load_tns(path)
    Xg = load_tns(gz)
    Xs = load_tns(path, shape=(25, 15, 12, 6))
    back, back_gz, back_s = Xd.gather(), Xg.gather(), Xs.gather()
    if RANK == 0:
        ref = load_tns_serial(path)
        assert back == ref
        assert back_gz == load_tns_serial(gz)
        assert back_s.shape == (25, 15, 12, 6)
        assert np.array_equal(back_s.subs, ref.subs)


@case
def load_tns_errors():
    d = shared_tmpdir()
    path = os.path.join(d, "bad.tns")
    if RANK == 0:
        rows = [f"{i % 5 + 1} {i % 7 + 1} {i % 3 + 1} 1.5" for i in range(400)]
        rows[350] = "3 4 x 2.0"     # line 351, in the last process's byte range
        with open(path, "w") as f:
            f.write("\n".join(rows) + "\n")
    comm.Barrier()
    expect_error_everywhere(lambda: load_tns(path), ValueError, "line 351", "'x'")
    expect_error_everywhere(lambda: load_tns(os.path.join(d, "missing.tns")),
                            FileNotFoundError, "missing.tns")
    # a file one process cannot read: every process raises
    good = os.path.join(d, "good.tns")
    if RANK == 0:
        with open(good, "w") as f:
            f.write("1 1 1 1\n2 2 2 2\n")
    comm.Barrier()
    import sktensor_fast.io as io_mod
    real = io_mod._open_binary

    def denied(p):
        raise PermissionError(f"[Errno 13] Permission denied: {p!r}")
    if RANK == SIZE - 1:
        io_mod._open_binary = denied
    try:
        msgs = expect_error_everywhere(lambda: load_tns(good), PermissionError, "good.tns")
    finally:
        io_mod._open_binary = real
    assert f"process {SIZE - 1}" in msgs[0]
    # different arguments on different processes
    expect_error_everywhere(lambda: load_tns(good, shape=(2, 2, 2 + RANK)), ValueError,
                            "different arguments")


@case
def load_tensor_parallel():
    from sktensor_fast import save_tensor
    d = shared_tmpdir()
    path = os.path.join(d, "x.sktf")
    X0 = random_tensor((20, 15, 12, 6), 1500, seed=4)
    if RANK == 0:
        save_tensor(path, X0)
    comm.Barrier()
    Xd = load_tensor(path)
    # each process read only its share of the nonzeros; the owners hold the tensor
    back = Xd.gather()
    if RANK == 0:
        assert back == X0
    ref = scatter(X0 if RANK == 0 else None)
    for a, b in zip(Xd.local, ref.local):
        assert a == b
    m1 = CPALS(rank=3, random_state=0, max_iter=5, tol=0).fit(Xd)
    m2 = CPALS(rank=3, random_state=0, max_iter=5, tol=0).fit(ref)
    assert m1.fit_ == m2.fit_
    # a file whose shares are out of order (rows swapped across the split): every process
    bad = os.path.join(d, "swapped.sktf")
    if RANK == 0:
        import shutil
        shutil.copyfile(path, bad)
        from sktensor_fast.binary import _read_header
        with open(bad, "r+b") as f:
            hdr = _read_header(f, bad)
            shape, nnz = hdr.shape, hdr.nnz
            off = int(hdr.sections["subs"]["offset"])
            N = len(shape)
            subs = np.fromfile(bad, dtype="<i8", count=nnz * N, offset=off).reshape(nnz, N)
            half = nnz // 2
            # the first row of the second half moved to row 0 of the file: each half stays
            # sorted apart from that one row only if the halves are swapped whole
            subs = np.concatenate([subs[half:], subs[:half]])
            f.seek(off)
            f.write(subs.tobytes())
        from _container import resigned       # checksums that match the swapped rows
        with open(bad, "rb") as f:
            raw = resigned(f.read())
        with open(bad, "wb") as f:
            f.write(raw)
    comm.Barrier()
    if SIZE == 2:
        expect_error_everywhere(lambda: load_tensor(bad), ValueError, "swapped.sktf",
                                "is corrupt", "not after the row before it")
    expect_error_everywhere(lambda: load_tensor(os.path.join(d, "missing.sktf")),
                            FileNotFoundError, "missing.sktf")
    trunc = os.path.join(d, "cut.sktf")
    if RANK == 0:
        with open(path, "rb") as f, open(trunc, "wb") as g:
            g.write(f.read()[:-4000])
    comm.Barrier()
    expect_error_everywhere(lambda: load_tensor(trunc), ValueError, "cut.sktf", "truncated")
    expect_error_everywhere(lambda: load_tensor(path if RANK == 0 else bad), ValueError,
                            "different paths")


@case
def load_tensor_replaced_meanwhile():
    # a writer replaces the file after process 0 read its share and before the others read
    # theirs: refused on every process, never a tensor of two versions
    from sktensor_fast import binary, save_tensor
    d = shared_tmpdir()
    path = os.path.join(d, "x.sktf")
    X1 = random_tensor((20, 15, 12), 1500, seed=5)
    X2 = SparseTensor(X1.subs, X1.vals + 1, X1.shape)     # the same layout, other values
    if RANK == 0:
        save_tensor(path, X1)
    comm.Barrier()
    read_rows = binary.read_rows

    def replaced_between(*args):
        if RANK == 0:
            got = read_rows(*args)
            comm.Barrier()
            return got
        comm.Barrier()
        if RANK == 1:
            save_tensor(path, X2)
        return read_rows(*args)
    binary.read_rows = replaced_between
    try:
        expect_error_everywhere(lambda: load_tensor(path), ValueError, "x.sktf",
                                "replaced while the processes read it")
    finally:
        binary.read_rows = read_rows
    back = load_tensor(path).gather()
    if RANK == 0:
        assert back == X2


# ------------------------------------------------------------------------------ the fits
@case
def cpals_same_model():
    for shape, nnz, fmt in [((30, 25, 20), 2500, "coo"), ((12, 9, 8, 7), 1500, "auto"),
                            ((50, 40), 600, "alto")]:
        X = random_tensor(shape, nnz, seed=4, counts=False)
        Xd = scatter(X if RANK == 0 else None)
        est = CPALS(rank=3, random_state=1, max_iter=25, tol=0, format=fmt)
        serial = CPALS(**est.get_params()).fit(X)
        dist = est.fit(Xd)
        assert_same_everywhere([dist.weights_, *dist.factors_, dist.loss_history_])
        compare_models(serial, dist, f"CPALS {shape} {fmt}")
        assert abs(serial.fit_ - dist.fit_) < TOL
    # values too large for the norms of the fit: the data are scaled by a power of two
    big = SparseTensor(X.subs, X.vals * 2.0 ** 600, X.shape)
    Bd = scatter(big if RANK == 0 else None)
    est = CPALS(rank=3, random_state=1, max_iter=5, tol=0, format="coo")
    compare_models(CPALS(**est.get_params()).fit(big), est.fit(Bd), "CPALS scaled data")
    # a given init, and the default tolerance (the stopping iteration must agree too)
    init = [np.random.default_rng(5).random((s, 3)) for s in X.shape]
    a = CPALS(rank=3, init=init, max_iter=200).fit(X)
    b = CPALS(rank=3, init=init, max_iter=200).fit(Xd)
    compare_models(a, b, "CPALS init")


@case
def cpapr_mu_same_model():
    X = random_tensor((25, 20, 15), 2000, seed=6, skew=True)
    Xd = scatter(X if RANK == 0 else None)
    for fmt in ("coo", "alto"):
        est = CPAPR(rank=4, random_state=2, max_iter=15, format=fmt)
        serial = CPAPR(**est.get_params()).fit(X)
        dist = est.fit(Xd)
        assert_same_everywhere([dist.weights_, *dist.factors_, dist.loss_history_])
        compare_models(serial, dist, f"CPAPR mu {fmt}")
        assert abs(serial.log_likelihood_ - dist.log_likelihood_) <= \
            TOL * abs(serial.log_likelihood_)
        assert serial.n_inner_iter_ == dist.n_inner_iter_
        assert abs(serial.kkt_violation_ - dist.kkt_violation_) <= TOL * serial.kkt_violation_


@case
def cpapr_newton_same_model():
    X = random_tensor((25, 20, 15), 2000, seed=7)
    Xd = scatter(X if RANK == 0 else None)
    for solver in ("pdnr", "pqnr"):
        est = CPAPR(rank=3, solver=solver, random_state=3, max_iter=6)
        serial = CPAPR(**est.get_params()).fit(X)
        dist = est.fit(Xd)
        assert_same_everywhere([dist.weights_, *dist.factors_, dist.loss_history_])
        compare_models(serial, dist, f"CPAPR {solver}")
        assert serial.n_inner_iter_ == dist.n_inner_iter_


@case
def fits_on_a_loaded_file():
    d = shared_tmpdir()
    path = os.path.join(d, "counts.tns")
    if RANK == 0:
        save_tns(path, random_tensor((30, 20, 10), 1500, seed=8))
    comm.Barrier()
    Xd = load_tns(path)
    X = load_tns_serial(path)
    a = CPAPR(rank=3, random_state=0, max_iter=10).fit(X)
    b = CPAPR(rank=3, random_state=0, max_iter=10).fit(Xd)
    compare_models(a, b, "CPAPR from load_tns")


@case
def communication_matches_model():
    X = random_tensor((60, 50, 40), 4000, seed=9, counts=False)
    Xd = scatter(X if RANK == 0 else None)
    R, iters = 5, 4
    Xd.comm_counters(reset=True)
    CPALS(rank=R, random_state=0, max_iter=iters, tol=0, format="coo").fit(Xd)
    c = Xd.comm_counters()
    own = [hi - lo for lo, hi in (Xd.block(n) for n in range(3))]
    # one gather of every mode's new rows per iteration, 8-byte values
    expect = iters * sum((s - o) * R * 8 for s, o in zip(X.shape, own))
    calls = c["rows"][0]
    assert c["rows"][1] == expect, (c, expect)
    assert calls == iters * 3, c
    # per mode the column norms (R) and the Gram matrix (R x R) of the new rows, per
    # iteration ⟨X, M⟩ (R), summed over processes
    expect_reduce = iters * (SIZE - 1) * 8 * (3 * (R + R * R) + R)
    assert c["reduce"][1] == expect_reduce, (c, expect_reduce)
    # the maximum and the sum of different vectors on every process in one call: the bits of
    # the two calls
    rng = np.random.default_rng(100 + RANK)
    m, s = rng.standard_normal(7), rng.standard_normal(30)
    both = Xd._chan.max_and_sum(m, s)
    assert np.array_equal(both[0], Xd._chan.max(m)) and np.array_equal(both[1],
                                                                        Xd._chan.sum(s))
    assert not np.array_equal(both[0], m) and not np.array_equal(both[1], s)
    assert_same_everywhere(list(both))
    # the rows go point to point between few processes, by MPI_Allgatherv between many:
    # both give the same bits
    from sktensor_fast.distributed import _mpi
    est = CPALS(rank=R, random_state=0, max_iter=iters, tol=0, format="coo")
    a = est.fit(Xd)
    a = [f.copy() for f in a.factors_]
    old = _mpi.POINT_TO_POINT_MAX
    _mpi.POINT_TO_POINT_MAX = 1
    try:
        b = est.fit(Xd).factors_
    finally:
        _mpi.POINT_TO_POINT_MAX = old
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


@contextlib.contextmanager
def class_attributes(cls, **values):
    """The class attributes ``values`` set on ``cls`` inside the block, restored after."""
    old = {k: cls.__dict__[k] for k in values}
    for k, v in values.items():
        setattr(cls, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(cls, k, v)


def opencl_everywhere():
    """Whether every process has an OpenCL platform (collective)."""
    try:
        import pyopencl as cl
        ok = bool(cl.get_platforms())
    except Exception:
        ok = False
    return all(everywhere(ok))


@case
def opencl_device_same_model():
    # each process's own OpenCL device (PoCL on the CPU here): arrays live on the device and
    # rows are staged through the host for the gathers
    if not opencl_everywhere():
        return
    X = random_tensor((20, 15, 12), 1200, seed=16)
    Xd = scatter(X if RANK == 0 else None)
    est = CPAPR(rank=3, random_state=0, max_iter=4, device="opencl")
    a = CPAPR(**est.get_params()).fit(X)
    b = est.fit(Xd)
    assert_same_everywhere([b.weights_, *b.factors_])
    compare_models(a, b, "CPAPR mu on OpenCL")
    # loops stopped by tol inside the inner iterations (the counts of a rank-2 model): the
    # maxima of the KKT tests over the processes decide alike everywhere
    rng = np.random.default_rng(4)
    F = [rng.gamma(0.5, 1.0, (s, 2)) for s in (25, 18, 12)]
    Y = SparseTensor.from_dense(rng.poisson(3 * np.einsum("ir,jr,kr->ijk", *F)).astype(float))
    mu = CPAPR(rank=2, random_state=1, max_iter=15, max_inner_iter=5, tol=0.3,
               device="opencl")
    ya = CPAPR(**mu.get_params()).fit(Y)
    yb = mu.fit(scatter(Y if RANK == 0 else None))
    assert ya.n_inner_iter_ == yb.n_inner_iter_ < 15 * 3 * 5, (ya.n_inner_iter_,
                                                               yb.n_inner_iter_)
    compare_models(ya, yb, "CPAPR mu on OpenCL, stops inside the inner loops")
    # CP-ALS: each process's update of its own rows finished after the next MTTKRP has
    # gathered them (unscaled), by max_iter and by tol (the same iterations)
    for kw in (dict(max_iter=10, tol=0), dict(max_iter=200, tol=1e-6)):
        als = CPALS(rank=3, random_state=0, device="opencl", **kw)
        serial = CPALS(**als.get_params()).fit(X)
        dist = als.fit(Xd)
        assert_same_everywhere([dist.weights_, *dist.factors_, dist.loss_history_])
        assert dist.n_iter_ == serial.n_iter_, (dist.n_iter_, serial.n_iter_)
        compare_models(serial, dist, f"CPALS {kw} on OpenCL")
    # GCP: each process draws the samples it owns on the host and computes their gradient on
    # its device; the one-process fit draws them on the device
    for kw in (dict(loss="poisson"),
               dict(loss="gaussian", sampler="semi-stratified", solver="adagrad")):
        gcp = GCP(rank=3, random_state=0, max_iter=3, epoch_iters=20, device="opencl", **kw)
        serial = GCP(**gcp.get_params()).fit(X)
        dist = gcp.fit(Xd)
        assert_same_everywhere([dist.weights_, *dist.factors_, dist.loss_history_])
        compare_models(serial, dist, f"GCP {kw} on OpenCL")
    # each process's share streamed through its device in blocks (its memory capped)
    from sktensor_fast.backends import get_backend
    be = get_backend("opencl")
    from sktensor_fast.backends.opencl import streamed
    # the resident shares hold the kernels' copy of their first mode only (the only one the
    # backend asks for), not one per mode: every fit above ran on them
    shares = [t for t in Xd._prepared[(id(be), be.storage_format("auto"))].local
              if t is not None]
    assert shares and all({m for m, _ in t.interleaved} <= {0} and set(t._sorted) == {0}
                          for t in shares), [(set(t.interleaved), set(t._sorted))
                                             for t in shares]
    old = be.max_tensor_bytes
    # the smallest cap the device's chunk allows (two blocks of one chunk), at least 4 KiB:
    # far below each process's resident share, whatever the driver's chunk
    row = X.ndim * 4 + X.vals.itemsize
    be.max_tensor_bytes = max(4096, 2 * max(streamed._chunk_of(be), 1) * row)
    try:
        Xs = scatter(X if RANK == 0 else None)
        c = CPAPR(**est.get_params()).fit(Xs)
        # the key is the format the backend builds for "auto" (the OpenCL tensor is COO)
        kinds = {type(t).__name__ for t in Xs._prepared[(id(be), be.storage_format("auto"))]
                 .local if t is not None}
    finally:
        be.max_tensor_bytes = old
    assert kinds == {"StreamedTensor"}, kinds
    assert all(t.modes == (0,) for t in Xs._prepared[(id(be), be.storage_format("auto"))].local
               if t is not None)
    compare_models(a, c, "CPAPR mu on OpenCL, streamed")


@case
def opencl_cpals_overlapped_gathers():
    # CP-ALS on each process's OpenCL device with the switch on: the MTTKRP after a mode's
    # update runs the nonzeros of the process's own rows of that mode while the other rows
    # are exchanged, then the rest; the model is the one of the MTTKRP over the whole copy,
    # to rounding
    if not opencl_everywhere():
        return
    from sktensor_fast.backends import get_backend
    from sktensor_fast.distributed import backend as dback
    X = random_tensor((40, 30, 24), 3000, seed=21, counts=False, skew=True)
    Xd = scatter(X if RANK == 0 else None)
    iters = 8
    est = CPALS(rank=4, random_state=2, max_iter=iters, tol=0, device="opencl")
    serial = CPALS(**est.get_params()).fit(X)
    calls = []
    plain_call = dback.DistributedBackend._mttkrp_overlapped

    def counted(self, T, factors, mode, out, k, pieces):
        calls.append((mode, k))
        return plain_call(self, T, factors, mode, out, k, pieces)

    # off by default: no pieces
    whole = CPALS(**est.get_params()).fit(Xd)
    be = get_backend("opencl")
    prep = Xd._prepared[(id(be), be.storage_format("auto"))]
    no_pieces = dict(prep._pieces)
    dback.DistributedBackend._mttkrp_overlapped = counted
    dback.DistributedBackend._OVERLAP_GATHER = True
    try:
        over = est.fit(Xd)
        over_arrays = [over.weights_.copy(), *[f.copy() for f in over.factors_]]
        over_history = list(over.loss_history_)
    finally:
        dback.DistributedBackend._mttkrp_overlapped = plain_call
        dback.DistributedBackend._OVERLAP_GATHER = False
    # a device without room for the pieces beside the copies: the whole copies serve
    Xr = scatter(X if RANK == 0 else None)
    roomless = CPALS(**est.get_params()).fit(Xr)
    prep_r = Xr._prepared[(id(be), be.storage_format("auto"))]
    old_cap, n_calls = be.max_tensor_bytes, len(calls)
    be.max_tensor_bytes = prep_r.nbytes + 1
    dback.DistributedBackend._mttkrp_overlapped = counted
    dback.DistributedBackend._OVERLAP_GATHER = True
    try:
        roomless_on = CPALS(**est.get_params()).fit(Xr)
    finally:
        dback.DistributedBackend._mttkrp_overlapped = plain_call
        dback.DistributedBackend._OVERLAP_GATHER = False
        be.max_tensor_bytes = old_cap
    roomless_calls = calls[n_calls:]
    del calls[n_calls:]
    pieces = {key: p for key, p in prep._pieces.items() if p is not None}
    rows = [hi - lo for lo, hi in (Xd.block(n) for n in range(3))]
    assert no_pieces == {}, no_pieces
    assert roomless_calls == [] and prep_r._pieces == {(1, 0): None, (2, 1): None,
                                                       (0, 2): None}, \
        (roomless_calls, prep_r._pieces)
    for a, b in zip(roomless.factors_, roomless_on.factors_):
        assert np.array_equal(a, b)
    assert_same_everywhere(over_arrays + [over_history])
    # every MTTKRP but the fit's first (all factors whole then): mode n after mode n - 1
    assert len(calls) == 3 * iters - 1, calls
    assert set(calls) == {(1, 0), (2, 1), (0, 2)}, calls
    assert set(pieces) == {(1, 0), (2, 1), (0, 2)}, sorted(prep._pieces)
    for (m, k), (own, other) in pieces.items():
        assert own.nnz + other.nnz == prep.local[m].nnz, (m, own.nnz, other.nnz)
        assert own.nnz > 0 and other.nnz > 0
        # stored mode first: the piece of own rows of k has k's block as that mode
        pos = [m] + [j for j in range(3) if j != m]
        assert own.shape[pos.index(k)] == rows[k] and other.shape[pos.index(k)] == X.shape[k]
    assert rel(whole.loss_history_, over_history) < 1e-12
    for a, b in zip([whole.weights_, *whole.factors_], over_arrays):
        assert rel(a, b) < 1e-12, rel(a, b)
    compare_models(serial, over, "CPALS on OpenCL, MTTKRP beside the exchange")


@case
def opencl_cpals_prepared_gathers():
    # CP-ALS on each process's OpenCL device: every MTTKRP but the fit's first is prepared
    # before the rows of the factor just updated are exchanged (resident and streamed
    # shares); the same model, bit for bit, as with the gather done first
    if not opencl_everywhere():
        return
    from sktensor_fast.backends import get_backend
    from sktensor_fast.backends.opencl import streamed
    from sktensor_fast.distributed import backend as dback
    X = random_tensor((40, 30, 24), 3000, seed=23, counts=False, skew=True)
    iters = 6
    est = CPALS(rank=4, random_state=3, max_iter=iters, tol=0, device="opencl")
    be = get_backend("opencl")
    plain_call = dback.DistributedBackend._mttkrp_gathered
    calls = []

    def counted(self, T, facs, k, mode, out):
        calls.append((mode, k))
        return plain_call(self, T, facs, k, mode, out)

    def fit_both(Xd):
        with class_attributes(dback.DistributedBackend, _mttkrp_gathered=counted):
            on = est.fit(Xd)
            on = [on.weights_.copy(), *[f.copy() for f in on.factors_], on.loss_history_]
        n_on = len(calls)
        with class_attributes(dback.DistributedBackend, _mttkrp_gathered=counted,
                              _PREPARE_BEFORE_GATHER=False):
            off = CPALS(**est.get_params()).fit(Xd)
        assert len(calls) == n_on, "the switch off still prepared MTTKRPs ahead"
        for a, b in zip(on, [off.weights_, *off.factors_, off.loss_history_]):
            assert np.array_equal(a, b)
        return on

    on = fit_both(scatter(X if RANK == 0 else None))
    # every MTTKRP but the fit's first (all factors whole then): mode n after mode n - 1
    assert len(calls) == 3 * iters - 1 and set(calls) == {(1, 0), (2, 1), (0, 2)}, calls
    assert_same_everywhere(on)
    compare_models(CPALS(**est.get_params()).fit(X), est.fit(scatter(X if RANK == 0
                                                                      else None)),
                   "CPALS on OpenCL, MTTKRP prepared before the exchange")
    del calls[:]
    old = be.max_tensor_bytes
    row = X.ndim * 4 + X.vals.itemsize
    be.max_tensor_bytes = max(4096, 2 * max(streamed._chunk_of(be), 1) * row)
    try:
        Xs = scatter(X if RANK == 0 else None)
        streamed_on = fit_both(Xs)
        kinds = {type(t).__name__ for t in Xs._prepared[(id(be), be.storage_format("auto"))]
                 .local if t is not None}
    finally:
        be.max_tensor_bytes = old
    assert kinds == {"StreamedTensor"}, kinds
    assert len(calls) == 3 * iters - 1, calls
    for a, b in zip(on[:-1], streamed_on[:-1]):
        assert rel(a, b) < 1e-12, rel(a, b)


@case
def transform_and_score():
    # new slices spread over the processes: the loadings (gathered) and the score are those
    # of one process, on every process
    X = random_tensor((30, 20, 15), 2500, seed=19)
    Y = random_tensor((17, 20, 15), 900, seed=20)
    Yd = scatter(Y if RANK == 0 else None)
    big = SparseTensor(Y.subs, Y.vals * 2.0 ** 600, Y.shape)
    Bd = scatter(big if RANK == 0 else None)
    models = [CPALS(rank=3, random_state=0, max_iter=10, tol=0),
              CPAPR(rank=3, random_state=0, max_iter=8),
              CPAPR(rank=3, solver="pqnr", random_state=0, max_iter=4),
              GCP(rank=3, loss="gaussian", random_state=0, max_iter=3, epoch_iters=20),
              GCP(rank=3, loss="poisson", random_state=0, max_iter=3, epoch_iters=20)]
    got = []
    for est in models:
        est.fit(X)
        Wd, sd = est.transform(Yd), est.score(Yd)
        got.append((est.transform(Y), est.score(Y), Wd, sd))
    # CPALS's score is scale-free: data beyond the safe range are scaled as on one process
    cp = models[0]
    got.append((None, cp.score(big), None, cp.score(Bd)))
    assert_same_everywhere([g[2] for g in got if g[2] is not None] + [[g[3] for g in got]])
    for est, (W, s, Wd, sd) in zip(models + [cp], got):
        what = f"{type(est).__name__} {est.get_params().get('solver')}"
        if W is not None:
            # GCP's Poisson loadings come from L-BFGS-B on the exact loss, which stops where
            # the loss's floating-point value no longer decreases; its sums over processes
            # round differently, and so do the loadings, by up to about 1e-7 relative (one
            # process solving the slices in two groups differs from one group as much); the
            # score still agrees to TOL
            tol = 1e-6 if what == "GCP adam" and est.loss == "poisson" else TOL
            assert Wd.shape == (Y.shape[0], 3), what
            assert rel(W, Wd) < tol, (what, rel(W, Wd))
        assert abs(s - sd) <= TOL * abs(s), (what, s, sd)


# ------------------------------------------------------------------------------ bad input
@case
def disagreeing_processes_fail_together():
    X = random_tensor((20, 15, 10), 800, seed=10)
    Xd = scatter(X if RANK == 0 else None)
    expect_error_everywhere(lambda: CPALS(rank=2 + RANK, random_state=0).fit(Xd), ValueError,
                            "different parameters", "rank")
    expect_error_everywhere(lambda: (CPALS if RANK == 0 else CPAPR)(rank=2, random_state=0)
                            .fit(Xd), ValueError, "different estimators")
    expect_error_everywhere(lambda: CPAPR(rank=2).fit(Xd), ValueError, "random_state")
    init = [np.random.default_rng(RANK).random((s, 2)) for s in X.shape]
    expect_error_everywhere(lambda: CPALS(rank=2, init=init).fit(Xd), ValueError,
                            "different parameters", "init")
    expect_error_everywhere(lambda: CPALS(rank=2, init="nvecs", random_state=0).fit(Xd),
                            NotImplementedError, "nvecs")
    # verbose may differ (e.g. only process 0 prints)
    CPALS(rank=2, random_state=0, max_iter=2, verbose=0).fit(Xd)
    # GCP's mask is refused before the fit looks at any nonzero, also where only one process
    # passes one
    mask = np.ones(X.shape, dtype=bool)
    expect_error_everywhere(lambda: GCP(rank=2, random_state=0, mask=mask).fit(Xd),
                            NotImplementedError, "mask")
    expect_error_everywhere(lambda: GCP(rank=2, random_state=0,
                                        mask=mask if RANK == 1 else None).fit(Xd),
                            NotImplementedError, "mask")


@case
def a_shape_too_long_for_memory_fails_together():
    # a layout whose per-row tables cannot fit: a MemoryError naming the shape on every
    # process, not NumPy's error from deep inside
    subs = np.array([[RANK, 0, 0]])
    expect_error_everywhere(lambda: from_parts(subs, [1.0], (2 ** 62, 2, 2)), MemoryError,
                            "cannot be laid out", "4611686018427387904")


def _loss_of_code(power):
    """A loss of the same class name and attributes everywhere; only its code differs."""
    class Loss:
        lower = -np.inf
        value = eval(f"lambda self, x, m: abs(x - m) ** {power}")
        deriv = eval(f"lambda self, x, m: {power} * abs(m - x) ** {power - 1} * np.sign(m - x)")
    return Loss()


@case
def different_user_losses_fail_together():
    import threading
    X = random_tensor((20, 15, 10), 800, seed=10, counts=False)
    Xd = scatter(X if RANK == 0 else None)
    kw = dict(rank=2, random_state=0, max_iter=1, epoch_iters=5)
    # the same class with a default repr: told apart by its attributes, by its code
    expect_error_everywhere(lambda: GCP(loss=ScaledSquares(1.0 + RANK), **kw).fit(Xd),
                            ValueError, "different parameters", "loss")
    expect_error_everywhere(lambda: GCP(loss=_loss_of_code(2 + 2 * RANK), **kw).fit(Xd),
                            ValueError, "different parameters", "loss")
    expect_error_everywhere(lambda: GCP(loss=lambda_loss(RANK), **kw).fit(Xd),
                            ValueError, "different parameters", "loss")
    # an attribute that cannot be compared: refused, on every process
    opaque = ScaledSquares(1.0)
    opaque.lock = threading.Lock()
    expect_error_everywhere(lambda: GCP(loss=opaque, **kw).fit(Xd), ValueError,
                            "cannot check that they fit with the same loss", "lock")
    # the same loss everywhere (separate but equal objects) fits
    dist = GCP(loss=ScaledSquares(2.0), **kw).fit(Xd)
    GCP(loss=_loss_of_code(2), **kw).fit(Xd)
    assert_same_everywhere([dist.weights_, *dist.factors_])


def lambda_loss(offset):
    """A loss whose functions are closures over ``offset``."""
    class Loss:
        lower = -np.inf

        def value(self, x, m):
            return (x - m - offset) ** 2

        def deriv(self, x, m):
            return 2 * (m + offset - x)
    return Loss()


@case
def bad_data_on_one_process_fails_everywhere():
    X = random_tensor((20, 15, 10), 800, seed=11)
    vals = X.vals.copy()
    vals[-1] = -3.0           # in the last mode-0 rows: the last process's share
    Xn = SparseTensor(X.subs, vals, X.shape)
    Xd = scatter(Xn if RANK == 0 else None)
    msgs = expect_error_everywhere(lambda: CPAPR(rank=2, random_state=0).fit(Xd), ValueError,
                                   "Negative values")
    assert f"process {SIZE - 1}" in msgs[0]
    Xh = SparseTensor(X.subs, X.vals + 0.5 * (X.subs[:, 0] >= 15), X.shape)
    Xd = scatter(Xh if RANK == 0 else None)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        CPAPR(rank=2, random_state=0, max_iter=2).fit(Xd)
    said = any("non-integer" in str(w.message) for w in rec)
    assert all(everywhere(said)), "every process warns about non-integer counts"
    # transform / score check the new slices together: a wrong shape fails everywhere
    model = CPALS(rank=2, random_state=0, max_iter=3).fit(Xd)
    Y = random_tensor((6, 15, 11), 100, seed=18)
    Yd = scatter(Y if RANK == 0 else None)
    expect_error_everywhere(lambda: model.transform(Yd), ValueError, "(15, 11)")
    # a model that differs between processes is refused rather than silently used
    other = CPALS(rank=2, random_state=0, max_iter=3).fit(random_tensor(X.shape, 500,
                                                                       seed=RANK))
    expect_error_everywhere(lambda: other.score(Xd), ValueError, "different values")


@case
def time_limit_taken_together():
    X = random_tensor((30, 20, 10), 1500, seed=12)
    Xd = scatter(X if RANK == 0 else None)
    counts = []
    for est in (CPAPR(rank=3, random_state=0, max_iter=500, tol=0, max_time=0.05),
                CPALS(rank=3, random_state=0, max_iter=100000, tol=0, max_time=0.05),
                GCP(rank=3, loss="poisson", random_state=0, max_iter=1000, epoch_iters=5,
                    max_time=0.05)):
        counts.append(everywhere(est.fit(Xd).n_iter_))
    for n in counts:
        assert len(set(n)) == 1, counts


@case
def gcp_same_samples_same_model():
    # every process draws the samples of the one-process draw that fall in its data
    X = random_tensor((30, 25, 20), 2000, seed=13)
    Xd = scatter(X if RANK == 0 else None)
    for kw in (dict(loss="poisson", sampler="stratified"),
               dict(loss="gaussian", sampler="semi-stratified", solver="adagrad"),
               dict(loss="poisson", sampler="uniform", solver="sgd", learning_rate=1e-4)):
        est = GCP(rank=3, random_state=0, max_iter=3, epoch_iters=30, **kw)
        serial = GCP(**est.get_params()).fit(X)
        dist = est.fit(Xd)
        assert_same_everywhere([dist.weights_, *dist.factors_, dist.loss_history_])
        compare_models(serial, dist, f"GCP {kw}")
        assert abs(serial.loss_ - dist.loss_) <= TOL * abs(serial.loss_)
    # a dense tensor: the stratified zeros come from the list of all zeros
    rng = np.random.default_rng(17)
    D = SparseTensor.from_dense(rng.poisson(2.0, (9, 8, 7)).astype(float))
    Dd = scatter(D if RANK == 0 else None)
    est = GCP(rank=2, loss="poisson", random_state=0, max_iter=2, epoch_iters=20)
    compare_models(GCP(**est.get_params()).fit(D), est.fit(Dd), "GCP dense")
    # L-BFGS-B on the exact loss: each process evaluates the dense slab of its mode-0 rows
    est = GCP(rank=2, loss="poisson", solver="lbfgsb", random_state=0, max_iter=30)
    serial = GCP(**est.get_params()).fit(X)
    dist = est.fit(Xd)
    assert_same_everywhere([dist.weights_, *dist.factors_])
    assert serial.n_iter_ == dist.n_iter_
    assert abs(serial.loss_ - dist.loss_) <= 1e-8 * abs(serial.loss_)
    assert rel(serial.factors_[1], dist.factors_[1]) < 1e-6


@case
def from_parts_is_the_union_of_the_parts():
    # every process passes its own nonzeros (a coordinate repeated on every process): the
    # tensor is their union, repeats summed, the same as scattering the union of process 0
    shape = (12, 9, 7)
    parts = [random_tensor(shape, 150, seed=40 + p) for p in range(SIZE)]
    mine = parts[RANK]
    subs = np.vstack([mine.subs, [[1, 2, 3]]])
    vals = np.append(mine.vals, 0.5)
    Xd = from_parts(subs, vals, shape)
    union = SparseTensor(np.vstack([p.subs for p in parts] + [[[1, 2, 3]]] * SIZE),
                         np.concatenate([p.vals for p in parts] + [[0.5]] * SIZE), shape)
    Xs = scatter(union if RANK == 0 else None)
    a = CPALS(rank=3, random_state=0, max_iter=4, tol=0).fit(Xd)
    b = CPALS(rank=3, random_state=0, max_iter=4, tol=0).fit(Xs)
    serial = CPALS(rank=3, random_state=0, max_iter=4, tol=0).fit(union)
    # an empty part, float32 values on every process
    empty = from_parts(np.zeros((0, 3), np.int64) if RANK else mine.subs,
                       np.zeros(0, np.float32) if RANK else mine.vals.astype(np.float32),
                       shape, dtype=np.float32)
    expect_error_everywhere(lambda: from_parts(mine.subs, mine.vals, (12, 9, 7 + RANK)),
                            ValueError, "different shapes")
    bad = mine.subs.copy()
    if RANK == SIZE - 1:
        bad[0, 2] = 7
    expect_error_everywhere(lambda: from_parts(bad, mine.vals, shape), ValueError)
    assert Xd.nnz == union.nnz == Xs.nnz
    assert empty.nnz == parts[0].nnz and empty.dtype == np.float32
    compare_models(serial, a, "from_parts")
    np.testing.assert_array_equal(a.weights_, b.weights_)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_array_equal(fa, fb)


@case
def kernel_arguments_checked_once():
    # the distributed backend's primitives: the arguments are checked once, by the base
    # class on the distributed backend (not again by the distributed code nor by the
    # process's backend), with the messages of one device, on every process
    from sktensor_fast.backends import get_backend
    from sktensor_fast.backends.base import Backend
    from sktensor_fast.decomposition.losses import get_loss
    from sktensor_fast.distributed.backend import DistributedBackend
    X = random_tensor((20, 15, 10), 500, seed=21)
    Xd = scatter(X if RANK == 0 else None)
    cpu = get_backend("cpu")
    be = DistributedBackend.wrap(cpu, Xd)
    T = be.prepare(Xd, "coo")
    rng = np.random.default_rng(0)
    host = [rng.random((s, 3)) for s in X.shape]
    U = [be.asarray(u) for u in host]
    calls = []
    original = Backend.__dict__["check_factors"]

    def counting(*args, **kwargs):
        calls.append(1)
        return original.__func__(*args, **kwargs)
    Backend.check_factors = staticmethod(counting)
    try:
        M = be.mttkrp(T, U, 1)
        counted = [len(calls)]
        be.phi(T, U, 2, U[2], 1e-10)
        counted.append(len(calls) - sum(counted))
        zeros = be.model_zero_count(T, np.ones(3), U)
        counted.append(len(calls) - sum(counted))
        be.gcp.full_loss_grad(T, np.ones(3), U, get_loss("poisson"))
        counted.append(len(calls) - sum(counted))
    finally:
        Backend.check_factors = original
    M = be.to_numpy(M)
    expect_error_everywhere(lambda: be.mttkrp(T, U[:2], 0), ValueError,
                            "2 factor matrices given for a tensor with 3 modes")
    expect_error_everywhere(lambda: be.model_zero_count(T, np.ones(2), U), ValueError,
                            "weights have shape (2,), expected (3,)")
    expect_error_everywhere(lambda: be.gcp.setup(T, "random", (5, 5), (5, 5), 0), ValueError,
                            "unknown sampler 'random'")
    assert counted == [1, 1, 1, 1], counted
    np.testing.assert_allclose(M, cpu.mttkrp(cpu.prepare(X, "coo"), host, 1), rtol=1e-12)
    assert zeros == 0


# ------------------------------------------------------------------------------ endings
def abort_uncaught():
    X = random_tensor((10, 8, 6), 200, seed=14)
    Xd = scatter(X if RANK == 0 else None)
    if RANK == SIZE - 1:
        raise RuntimeError("deliberate failure before the fit")
    CPALS(rank=2, random_state=0).fit(Xd)   # the others would wait here forever


def raise_before_scatter():
    X = random_tensor((10, 8, 6), 200, seed=14)
    if RANK == SIZE - 1:
        raise RuntimeError("deliberate failure before the first distributed tensor")
    scatter(X if RANK == 0 else None)   # the others would wait here forever


def kill_one():
    import signal
    X = random_tensor((40, 30, 20), 4000, seed=15)
    Xd = scatter(X if RANK == 0 else None)
    est = CPAPR(rank=3, random_state=0, max_iter=100000, tol=0)
    if RANK == SIZE - 1:
        import threading
        threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    est.fit(Xd)


def main():
    if sys.argv[1] == "--abort-uncaught":
        return abort_uncaught()
    if sys.argv[1] == "--raise-before-scatter":
        return raise_before_scatter()
    if sys.argv[1] == "--kill-one":
        return kill_one()
    out = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    results = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            CASES[name]()
            err = None
        except Exception:
            err = traceback.format_exc()
        errs = comm.gather(err, root=0)
        if RANK == 0:
            results[name] = {"ok": all(e is None for e in errs), "errors": errs,
                             "seconds": time.perf_counter() - t0}
            print(f"{name}: {'ok' if results[name]['ok'] else 'FAILED'} "
                  f"({results[name]['seconds']:.2f}s)", flush=True)
            with open(out, "w") as f:
                json.dump(results, f)


if __name__ == "__main__":
    main()
