"""The ALTO format: bit layout, encode/decode, kernels against COO, estimators, bad input."""
import numpy as np
import pytest

from sktensor_fast import SparseTensor, num_threads
from sktensor_fast.backends import get_backend
from sktensor_fast.backends.cpu import _alto
from sktensor_fast.backends.cpu.formats import (AltoFormat, CooFormat, FORMATS, build_format)
from sktensor_fast.backends.cpu.formats import alto as alto_mod
from sktensor_fast.backends.cpu.formats.alto import alto_bits, alto_layout, make_codec

from _reference import mttkrp_ref, phi_ref, random_sparse

DECODERS = ["generic"] + (["pext"] if _alto.pext_available() else [])


@pytest.fixture(params=DECODERS)
def decoder(request):
    old = _alto.set_decoder(request.param)
    yield request.param
    _alto.set_decoder(old)


def _ref_encode(subs, shape):
    """Bit-by-bit ALTO index as Python ints (the definition, for checking the codec)."""
    pos = alto_layout(shape)
    out = []
    for row in subs.tolist():
        v = 0
        for n, c in enumerate(row):
            for level, p in enumerate(pos[n]):
                v |= ((c >> level) & 1) << p
        out.append(v)
    return out


def _as_ints(lin):
    lin = np.asarray(lin)
    if lin.ndim == 1:
        return [int(x) for x in lin]
    return [(int(h) << 64) | int(lo) for h, lo in lin]


def _random_subs(shape, n, rng):
    cols = []
    for s in shape:
        c = rng.integers(0, s, n, dtype=np.int64)
        c[0], c[-1] = 0, s - 1  # the extremes
        cols.append(c)
    return np.ascontiguousarray(np.stack(cols, axis=1))


# ---------------------------------------------------------------------- layout and codec
ROUNDTRIP_SHAPES = [
    (1, 7, 300),                              # a mode of length 1 (0 bits)
    (2 ** 40, 3, 5),                          # a mode of length 2^40
    (9, 17, 33, 2, 1000),                     # 5 modes
    (3, 5, 7, 11, 13, 2, 70, 129),            # 8 modes
    (2 ** 21, 2 ** 21, 2 ** 21),              # 63 bits
    (2 ** 32, 2 ** 32),                       # 64 bits
    (2 ** 33, 2 ** 32),                       # 65 bits: two words
    (2 ** 43, 2 ** 42, 2 ** 42),              # 127 bits
    (2 ** 43, 2 ** 43, 2 ** 42),              # 128 bits
    (2 ** 63 - 1, 5, 2 ** 20 + 1),            # a 63-bit mode spanning both words
    (1, 1, 1),                                # no bits at all
]


@pytest.mark.parametrize("shape", ROUNDTRIP_SHAPES)
def test_encode_decode_roundtrip(shape, decoder):
    rng = np.random.default_rng(len(shape) * 7 + sum(alto_bits(shape)))
    subs = _random_subs(shape, 300, rng)
    codec, total = make_codec(shape)
    assert total == sum(alto_bits(shape))
    assert codec.words == (1 if total <= 64 else 2)
    lin = codec.encode(subs, 2)
    assert _as_ints(lin) == _ref_encode(subs, shape)
    np.testing.assert_array_equal(codec.decode(lin, 2), subs)
    np.testing.assert_array_equal(codec.decode(lin, 1), subs)


def test_bit_totals():
    assert sum(alto_bits((2 ** 21,) * 3)) == 63
    assert sum(alto_bits((2 ** 32, 2 ** 32))) == 64
    assert sum(alto_bits((2 ** 33, 2 ** 32))) == 65
    assert sum(alto_bits((2 ** 43, 2 ** 42, 2 ** 42))) == 127
    assert alto_bits((1, 2, 3, 4, 5, 2 ** 40, 2 ** 40 + 1)) == [0, 1, 2, 2, 3, 40, 41]


def test_layout_interleaves_longest_mode_on_top():
    shape = (4, 8, 2)  # the 4x8x2 example: bits 2, 3, 1
    pos = alto_layout(shape)
    assert sorted(p for pn in pos for p in pn) == list(range(6))
    assert all(np.all(np.diff(pn) > 0) for pn in pos)
    # level 0 holds one bit of every mode, shortest lowest; the top bit is the longest mode's
    assert pos[2] == [0] and pos[0][0] == 1 and pos[1][0] == 2
    assert pos[1][-1] == 5
    for shape in [(183, 24, 1140, 1717), (2482, 2862, 14036, 17), (3, 2 ** 40, 7)]:
        pos = alto_layout(shape)
        total = sum(len(p) for p in pos)
        longest = int(np.argmax(shape))
        assert pos[longest][-1] == total - 1


@pytest.mark.parametrize("shape", [(40, 7, 300), (2 ** 33, 2 ** 32), (6, 5, 4, 3, 5)])
def test_build_sorts_and_partitions(shape, decoder):
    rng = np.random.default_rng(5)
    subs = _random_subs(shape, 2000, rng)
    X = SparseTensor(subs, rng.standard_normal(len(subs)), shape)
    T = AltoFormat(X, n_partitions=7)
    ints = _as_ints(T.lin)
    assert ints == sorted(ints) and len(set(ints)) == X.nnz
    D = T.decode()
    # the values travel with their coordinates
    order = np.lexsort(D.T[::-1])
    np.testing.assert_array_equal(D[order], X.subs)
    np.testing.assert_array_equal(T.sorted_vals[order], X.vals)
    # partitions: equal sizes, intervals cover their coordinates
    assert T.n_partitions == 7 and T.parts[0] == 0 and T.parts[-1] == X.nnz
    assert np.ptp(np.diff(T.parts)) <= 1
    for p in range(T.n_partitions):
        part = D[T.parts[p]:T.parts[p + 1]]
        np.testing.assert_array_equal(T.part_min[p], part.min(axis=0))
        np.testing.assert_array_equal(T.part_max[p], part.max(axis=0))
    # the source arrays are shared, not copied
    assert np.shares_memory(T.subs, X.subs) and np.shares_memory(T.vals, X.vals)


def test_shared_rows_flags():
    rng = np.random.default_rng(6)
    X = random_sparse((30, 20, 10), 1500, rng)
    T = AltoFormat(X, n_partitions=5)
    D = T.decode()
    for mode in range(3):
        owners = [set() for _ in range(X.shape[mode])]
        for p in range(T.n_partitions):
            for r in D[T.parts[p]:T.parts[p + 1], mode]:
                owners[r].add(p)
        expected = np.array([len(o) > 1 for o in owners], dtype=np.uint8)
        np.testing.assert_array_equal(T.shared_rows(mode), expected)


@pytest.mark.parametrize("shape", [(30, 20, 10), (2,) * 3 + (32,) * 12, (3000, 2000, 900)])
def test_compact_plan(shape, decoder):
    """Per partition the sorted rows it shares with another; per nonzero its row's entry
    among them (-1 where the partition owns the row).  The first two shapes number the
    shared rows through a map over their span, the last one (shared rows spread far apart)
    through the radix sort."""
    rng = np.random.default_rng(7)
    X = random_sparse(shape, 1500, rng)
    T = AltoFormat(X, n_partitions=5)
    D = T.decode()
    for mode in range(len(shape)):
        slot, rows, roff = T.compact_plan(mode)
        shared = T.shared_rows(mode).astype(bool)
        assert slot.dtype == np.int32 and roff[0] == 0 and roff[-1] == rows.size
        for p in range(T.n_partitions):
            r = D[T.parts[p]:T.parts[p + 1], mode]
            mine = np.unique(r[shared[r]])
            np.testing.assert_array_equal(rows[roff[p]:roff[p + 1]], mine)
            expect = np.where(shared[r], np.searchsorted(mine, r), -1)
            np.testing.assert_array_equal(slot[T.parts[p]:T.parts[p + 1]], expect)
        assert T.compact_rows(mode) == rows.size


def test_default_partitions():
    """A function of the nonzero count alone (not of the cores, threads or affinity)."""
    assert alto_mod.default_partitions(0) == 0
    assert alto_mod.default_partitions(1) == 1
    assert alto_mod.default_partitions(10) == 1
    assert alto_mod.default_partitions(10 ** 5) == 7
    assert alto_mod.default_partitions(2 ** 20) == 64
    assert alto_mod.default_partitions(2 ** 23) == 64
    assert alto_mod.default_partitions(2 ** 24) == 128
    assert alto_mod.default_partitions(10 ** 8) == 512
    P = [alto_mod.default_partitions(n) for n in range(1, 10 ** 8, 77777)]
    assert np.all(np.diff(P) >= 0)


# ---------------------------------------------------------------------- kernels vs COO
KERNEL_SHAPES = [(40, 7, 300), (12, 5, 9, 7), (6, 5, 4, 3, 5), (2,) * 3 + (32,) * 12]


def _close(got, ref, rtol=1e-12):
    scale = max(np.abs(ref).max(), 1e-300)
    assert np.abs(got - ref).max() <= rtol * scale, np.abs(got - ref).max() / scale


@pytest.mark.parametrize("shape", KERNEL_SHAPES)
@pytest.mark.parametrize("conflict", ["buffer", "compact"])
@pytest.mark.parametrize("threads", [1, 2])
def test_mttkrp_and_phi_match_coo(shape, conflict, threads, decoder):
    rng = np.random.default_rng(len(shape) + 10 * threads)
    X = random_sparse(shape, 3000, rng, counts=True)
    C = CooFormat(X)
    T = AltoFormat(X, n_partitions=7, conflict=conflict)
    assert T.words == (2 if sum(alto_bits(shape)) > 64 else 1)
    be = get_backend("cpu")
    for rank in (3, 16):
        factors = [rng.random((s, rank)) for s in shape]
        with num_threads(threads):
            for mode in range(len(shape)):
                _close(be.mttkrp(T, factors, mode), be.mttkrp(C, factors, mode))
                B = rng.random((shape[mode], rank))
                B[0] = 0.0  # the eps floor
                _close(be.phi(T, factors, mode, B, 1e-10), be.phi(C, factors, mode, B, 1e-10))


@pytest.mark.parametrize("rank", [1, 8, 32, 33])
def test_rank_fast_paths(rank, decoder):
    rng = np.random.default_rng(rank)
    X = random_sparse((50, 40, 30), 4000, rng)
    T = AltoFormat(X, n_partitions=5)
    factors = [rng.standard_normal((s, rank)) for s in X.shape]
    be = get_backend("cpu")
    with num_threads(2):
        for mode in range(3):
            for conflict in ("buffer", "compact"):
                out = np.empty((X.shape[mode], rank))
                T.accumulate(factors, mode, out, None, 0.0, 2, conflict=conflict)
                _close(out, mttkrp_ref(X, factors, mode), 1e-11)
            B = rng.random((X.shape[mode], rank))
            _close(be.phi(T, [np.abs(f) for f in factors], mode, B, 1e-10),
                   phi_ref(X, [np.abs(f) for f in factors], mode, B, 1e-10), 1e-11)


def test_float32():
    rng = np.random.default_rng(1)
    X = random_sparse((50, 40, 30), 5000, rng, dtype=np.float32)
    T = AltoFormat(X, n_partitions=4)
    factors = [rng.standard_normal((s, 16)).astype(np.float32) for s in X.shape]
    be = get_backend("cpu")
    with num_threads(2):
        for mode in range(3):
            got = be.mttkrp(T, factors, mode)
            assert got.dtype == np.float32
            _close(got, mttkrp_ref(X, [f.astype(np.float64) for f in factors], mode), 2e-5)


def test_buffer_path_is_thread_count_independent():
    rng = np.random.default_rng(3)
    X = random_sparse((300, 200, 100), 50000, rng)
    T = AltoFormat(X, conflict="buffer")
    factors = [rng.random((s, 10)) for s in X.shape]
    be = get_backend("cpu")
    outs = []
    for threads in (1, 2):
        with num_threads(threads):
            outs.append([be.mttkrp(T, factors, m) for m in range(3)])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("threads", [1, 2])
def test_buffer_waves_bound_memory_and_keep_the_result(monkeypatch, threads):
    """Partitions run in waves whose buffers fit the budget; the merge order is the partition
    order, so the result is bitwise the one of a single wave."""
    rng = np.random.default_rng(4)
    X = random_sparse((300, 200, 100), 40000, rng)
    factors = [rng.random((s, 10)) for s in X.shape]
    be = get_backend("cpu")
    one = AltoFormat(X, conflict="buffer", n_partitions=24)
    with num_threads(threads):
        ref = [be.mttkrp(one, factors, m) for m in range(3)]
        refphi = [be.phi(one, factors, m, factors[m], 1e-10) for m in range(3)]
    monkeypatch.setattr(alto_mod, "BUFFER_ENTRIES_PER_NNZ", 0.01)
    T = AltoFormat(X, conflict="buffer", n_partitions=24)
    for m in range(3):
        lanes = T.lanes_for(m, 10)
        waves, need = T.buffer_waves(m, 10, threads, "buffer", lanes)
        assert waves[0] == 0 and waves[-1] == 24 and np.all(np.diff(waves) >= 1)
        assert len(waves) > 2                          # several waves
        spans = np.maximum(T.part_max[:, m] - T.part_min[:, m] + 1, 0) * 10 * lanes
        assert need == max(spans[a:b].sum() for a, b in zip(waves[:-1], waves[1:]))
        assert need < spans.sum()
        assert np.all(np.diff(waves)[:-1] >= threads)
    with num_threads(threads):
        for m in range(3):
            np.testing.assert_array_equal(be.mttkrp(T, factors, m), ref[m])
            np.testing.assert_array_equal(be.phi(T, factors, m, factors[m], 1e-10), refphi[m])
            np.testing.assert_allclose(ref[m], mttkrp_ref(X, factors, m), rtol=1e-12)
    assert T._work.shape[0] == max(T.buffer_waves(m, 10, threads, "buffer",
                                                  T.lanes_for(m, 10))[1] for m in range(3))
    with pytest.raises(ValueError, match="waves"):
        _alto.accumulate(T.codec, T.lin, T.sorted_vals, T.parts, T.part_min, T.part_max,
                         factors, 0, np.empty((300, 10)), None, 0.0, 1, True, None, None,
                         np.array([0, 5], dtype=np.int64))


@pytest.mark.parametrize("threads", [1, 2])
def test_compact_waves_keep_the_result(monkeypatch, threads):
    """The compact path in waves of partitions (a small buffer budget) gives the bits of a
    single wave, and the compact and buffer paths agree to rounding."""
    rng = np.random.default_rng(5)
    X = random_sparse((3000, 2000, 900), 20000, rng)
    factors = [rng.random((s, 6)) for s in X.shape]
    be = get_backend("cpu")
    one = AltoFormat(X, conflict="compact", n_partitions=16)
    with num_threads(threads):
        ref = [be.mttkrp(one, factors, m) for m in range(3)]
    monkeypatch.setattr(alto_mod, "BUFFER_ENTRIES_PER_NNZ", 0.02)
    T = AltoFormat(X, conflict="compact", n_partitions=16)
    with num_threads(threads):
        for m in range(3):
            waves, need = T.buffer_waves(m, 6, threads, "compact")
            assert len(waves) > 2 and need < T.compact_rows(m) * 6
            np.testing.assert_array_equal(be.mttkrp(T, factors, m), ref[m])
            buf = AltoFormat(X, conflict="buffer", n_partitions=16)
            _close(ref[m], be.mttkrp(buf, factors, m))
            _close(ref[m], mttkrp_ref(X, factors, m))


def test_conflict_choice_by_reuse():
    rng = np.random.default_rng(8)
    X = random_sparse((4, 3000, 20), 6000, rng, skew=0)
    T = AltoFormat(X, n_partitions=4)
    assert T.conflict_for(0) == "buffer"      # reuse 1500
    assert T.conflict_for(1) == "compact"     # reuse 2
    T.conflict = "compact"
    assert T.conflict_for(0) == "compact"
    with pytest.raises(ValueError, match="conflict"):
        AltoFormat(X, conflict="locks")
    with pytest.raises(ValueError, match="conflict"):
        AltoFormat(X, conflict="atomic")      # replaced by the deterministic compact path


def test_empty_and_tiny():
    be = get_backend("cpu")
    X = SparseTensor(np.zeros((0, 3), dtype=np.int64), np.zeros(0), (3, 4, 5))
    T = AltoFormat(X)
    factors = [np.ones((s, 2)) for s in X.shape]
    np.testing.assert_array_equal(be.mttkrp(T, factors, 1), np.zeros((4, 2)))
    X = SparseTensor([[2, 0, 1]], [3.0], (3, 1, 2))
    T = AltoFormat(X, n_partitions=5)
    assert T.n_partitions == 1
    factors = [np.full((s, 2), 2.0) for s in X.shape]
    np.testing.assert_array_equal(be.mttkrp(T, factors, 0), [[0, 0], [0, 0], [12, 12]])


def test_model_values_and_coo_view():
    rng = np.random.default_rng(4)
    X = random_sparse((20, 10, 8), 500, rng)
    T = AltoFormat(X, n_partitions=3)
    C = CooFormat(X)
    factors = [rng.random((s, 3)) for s in X.shape]
    w = rng.random(3)
    be = get_backend("cpu")
    ref = be.model_values(C, w, factors)
    np.testing.assert_array_equal(be.model_values(T, w, factors), ref)  # subs order
    D = T.decode()
    ref_alto = np.einsum("r,nr,nr,nr->n", w, *(f[D[:, k]] for k, f in enumerate(factors)))
    np.testing.assert_allclose(T.kruskal_values(w, factors, 2), ref_alto, rtol=1e-13)
    for mode in range(3):
        np.testing.assert_array_equal(T.row_ptr(mode), C.row_ptr(mode))
        np.testing.assert_array_equal(T.perms[mode], C.perms[mode])
    np.testing.assert_array_equal(T.linear_index(), C.linear_index())


# ---------------------------------------------------------------------- estimators
def _estimators():
    from sktensor_fast import decomposition as d
    out = [("CPALS", dict(rank=3, max_iter=8, tol=0.0))]
    if hasattr(d, "CPAPR"):
        out.append(("CPAPR", dict(rank=3, max_iter=6, max_inner_iter=5, tol=0.0)))
        out.append(("CPAPR", dict(rank=3, solver="pdnr", max_iter=3, max_inner_iter=5,
                                  tol=0.0)))
    if hasattr(d, "GCP"):
        out.append(("GCP", dict(rank=3, loss="gaussian", epoch_iters=10, max_iter=3)))
    return out


@pytest.mark.parametrize("name,params", _estimators(),
                         ids=lambda v: v if isinstance(v, str) else v.get("solver", ""))
def test_estimators_same_model_alto_and_coo(name, params):
    from sktensor_fast import decomposition as d
    rng = np.random.default_rng(11)
    X = random_sparse((30, 25, 20), 2000, rng, counts=True)
    models = {}
    for fmt in ("coo", "alto"):
        est = getattr(d, name)(random_state=0, format=fmt, **params)
        with num_threads(2):
            est.fit(X)
        models[fmt] = est
    a, b = models["coo"], models["alto"]
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_allclose(b.weights_, a.weights_, rtol=1e-10)
    for fa, fb in zip(a.factors_, b.factors_):
        np.testing.assert_allclose(fb, fa, rtol=1e-10, atol=1e-10 * np.abs(fa).max())


# ---------------------------------------------------------------------- bad input and auto
def test_too_many_bits():
    X = SparseTensor([[0, 0, 0], [5, 2 ** 59, 1000]], [1.0, 2.0], (2 ** 60, 2 ** 60, 2 ** 10))
    assert sum(alto_bits(X.shape)) == 130
    with pytest.raises(ValueError, match="130 index bits.*128"):
        build_format(X, "alto")
    with pytest.raises(ValueError, match="128"):
        AltoFormat(X)
    T = build_format(X, "auto")
    assert isinstance(T, CooFormat) and "130 index bits" in T.note
    from sktensor_fast import CPALS
    with pytest.raises(ValueError, match="128"):
        CPALS(rank=2, format="alto").fit(X)


def test_auto_rule(monkeypatch):
    import sktensor_fast.backends.cpu.formats as formats
    assert "alto" in FORMATS
    rng = np.random.default_rng(2)
    X = random_sparse((30, 20, 10), 500, rng)
    assert isinstance(build_format(X, "coo"), CooFormat)
    assert isinstance(build_format(X, "alto"), AltoFormat)
    monkeypatch.setattr(formats, "AUTO_ALTO_MIN_NNZ", X.nnz + 1)
    assert isinstance(build_format(X, "auto"), CooFormat)
    monkeypatch.setattr(formats, "AUTO_ALTO_MIN_NNZ", X.nnz)
    assert isinstance(build_format(X, "auto"), AltoFormat)


def test_decoder_switch():
    old = _alto.get_decoder()
    try:
        assert _alto.set_decoder("generic") == old
        assert _alto.get_decoder() == "generic"
        with pytest.raises(ValueError):
            _alto.set_decoder("fastest")
    finally:
        _alto.set_decoder(old)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tiny_modes_lanes_and_rows_in_cache(monkeypatch, decoder, dtype):
    """Two tiny modes and nearly every entry a nonzero: the buffer path adds consecutive
    nonzeros into copies (lanes) of each partition's buffer and prefetches nothing (the rows
    stay in cache).  MTTKRP and Φ agree with NumPy and with one lane and the prefetching
    kernels, and give the same bits on 1 and 2 threads; the model values and the data term
    do not depend on the prefetching."""
    rng = np.random.default_rng(21)
    shape, R = (6, 5, 300), 8
    dense = rng.poisson(4.0, size=shape).astype(dtype)
    X = SparseTensor.from_dense(dense)
    assert X.nnz > 0.95 * dense.size
    factors = [rng.random((s, R)).astype(dtype) for s in shape]
    be = get_backend("cpu")
    monkeypatch.setattr(alto_mod, "LANES", 4)          # off by default: the option itself
    T = AltoFormat(X, n_partitions=5)
    assert all(T.conflict_for(m) == "buffer" for m in range(3))
    assert all(T.lanes_for(m, R) == 4 for m in range(3))
    assert T.rows_cached(R, 2)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    outs = {}
    for threads in (1, 2):
        with num_threads(threads):
            outs[threads] = ([be.mttkrp(T, factors, m) for m in range(3)],
                             [be.phi(T, factors, m, factors[m], 1e-10) for m in range(3)])
    for a, b in zip(outs[1][0] + outs[1][1], outs[2][0] + outs[2][1]):
        np.testing.assert_array_equal(a, b)
    for m in range(3):
        np.testing.assert_allclose(outs[1][0][m], mttkrp_ref(X, factors, m), rtol=tol)
        np.testing.assert_allclose(outs[1][1][m], phi_ref(X, factors, m, factors[m], 1e-10),
                                   rtol=tol)
    w = np.ones(R, dtype=dtype)
    vals, ll = T.kruskal_values(w, factors), be.poisson_data_term(T, w, factors, 1e-10)
    # one lane, prefetching kernels: the same up to rounding (the same bits for the values)
    monkeypatch.setattr(alto_mod, "LANES", 1)
    monkeypatch.setattr(alto_mod.AltoFormat, "rows_cached", lambda self, R, mode=None: False)
    U = AltoFormat(X, n_partitions=5)
    assert U.lanes_for(0, R) == 1
    for m in range(3):
        np.testing.assert_allclose(be.mttkrp(U, factors, m), outs[1][0][m], rtol=tol)
        np.testing.assert_allclose(be.phi(U, factors, m, factors[m], 1e-10), outs[1][1][m],
                                   rtol=tol)
    np.testing.assert_array_equal(U.kruskal_values(w, factors), vals)
    assert be.poisson_data_term(U, w, factors, 1e-10) == ll


def test_lanes_must_be_a_power_of_two():
    rng = np.random.default_rng(2)
    X = random_sparse((6, 5, 40), 300, rng)
    T = AltoFormat(X, n_partitions=2)
    f = [rng.random((s, 4)) for s in X.shape]
    for lanes in (0, 3, 128):
        with pytest.raises(ValueError, match="lanes"):
            _alto.accumulate(T.codec, T.lin, T.sorted_vals, T.parts, T.part_min, T.part_max,
                             f, 0, np.empty((6, 4)), None, 0.0, 1, True, None, None, None,
                             lanes)


@pytest.mark.parametrize("conflict", ["buffer", "compact"])
def test_phase_times_leave_the_result(conflict):
    """The optional phase timers fill their array and change no bit of the result; an array
    too short (or of another type) is refused."""
    rng = np.random.default_rng(9)
    X = random_sparse((60, 50, 40), 8000, rng)
    T = AltoFormat(X, n_partitions=6)
    factors = [rng.random((s, 5)) for s in X.shape]
    for threads in (1, 2):
        ref = np.empty((50, 5))
        T.accumulate(factors, 1, ref, None, 0.0, threads, conflict=conflict)
        out = np.empty((50, 5))
        nt = T.threads_for(threads, 5)                        # the threads that run
        times = np.full(4 + 2 * nt, -1.0)
        T.accumulate(factors, 1, out, None, 0.0, threads, conflict=conflict, times=times)
        np.testing.assert_array_equal(out, ref)
        assert np.all(times >= 0) and times[3] >= 1          # seconds, and the waves
        assert times[1] > 0 and times[4:4 + nt].sum() > 0
        assert times[4:4 + nt].max() <= times[1] * 1.01 + 1e-6   # within the phase's wall
    with pytest.raises(ValueError, match="times"):
        T.accumulate(factors, 1, out, None, 0.0, 1, conflict=conflict, times=np.zeros(5))
    with pytest.raises((ValueError, TypeError)):
        T.accumulate(factors, 1, out, None, 0.0, 1, conflict=conflict,
                     times=np.zeros(6, dtype=np.float32))


def _pareto_tensor(shape, draws, scale, seed):
    """Coordinates floor(scale * Lomax(1.2)) in every mode (redrawn while out of range), the
    heavy rows scattered by a permutation; repeats summed."""
    rng = np.random.default_rng(seed)
    cols = []
    for n in shape:
        c = np.floor(scale * (rng.random(draws) ** (-1 / 1.2) - 1))
        while np.any(c >= n):
            bad = c >= n
            c[bad] = np.floor(scale * (rng.random(int(bad.sum())) ** (-1 / 1.2) - 1))
        cols.append(rng.permutation(n)[c.astype(np.int64)])
    return SparseTensor(np.stack(cols, axis=1), rng.random(draws), shape)


def test_overlapping_buffers_take_the_compact_path():
    """Power-law coordinates, heavy rows scattered: every partition's row interval spans most
    of the mode, so the private buffers would hold many times the mode's rows while few rows
    are shared.  format="auto" then takes the compact path, whose result is bitwise the buffer
    path's, at every thread count."""
    X = _pareto_tensor((500, 500, 500), 40000, 2.0, 0)
    T = AltoFormat(X, n_partitions=16)
    B = AltoFormat(X, n_partitions=16, conflict="buffer")
    rng = np.random.default_rng(1)
    factors = [rng.random((s, 16)) for s in X.shape]
    for m in range(3):
        assert T.reuse(m) >= alto_mod.REUSE_THRESHOLD
        assert T.buffer_rows(m) >= alto_mod.BUFFER_OVERLAP * X.shape[m]
        assert T.compact_rows(m) <= alto_mod.COMPACT_SHARE * T.buffer_rows(m)
        assert T.conflict_for(m) == "compact" and B.conflict_for(m) == "buffer"
        ref = mttkrp_ref(X, factors, m)
        outs = []
        for threads in (1, 2):
            for F in (T, B):
                out = np.empty((X.shape[m], 16))
                F.accumulate(factors, m, out, None, 0.0, threads)
                outs.append(out)
        for out in outs[1:]:
            np.testing.assert_array_equal(out, outs[0])
        _close(outs[0], ref)
    assert set(T._plans) == {0, 1, 2} and not B._plans


def test_uniform_coordinates_keep_the_buffers():
    """Uniform coordinates at a high reuse: the buffers barely overlap (ALTO keeps every
    partition to a narrow interval), so the buffer path stays."""
    rng = np.random.default_rng(2)
    X = random_sparse((64, 48, 40), 30000, rng, skew=0)
    T = AltoFormat(X, n_partitions=8)
    for m in range(3):
        if T.buffer_rows(m) < alto_mod.BUFFER_OVERLAP * X.shape[m]:
            assert T.conflict_for(m) == "buffer"
    assert "buffer" in [T.conflict_for(m) for m in range(3)]


@pytest.mark.parametrize("shape", KERNEL_SHAPES)
def test_buffer_and_compact_paths_give_the_same_bits(shape):
    """Both paths add a row's contributions partition by partition, in partition order, each
    partition's in nonzero order from zero: the same sums in the same order."""
    rng = np.random.default_rng(len(shape))
    X = random_sparse(shape, 3000, rng, counts=True)
    Tb = AltoFormat(X, n_partitions=7, conflict="buffer")
    Tc = AltoFormat(X, n_partitions=7, conflict="compact")
    factors = [rng.standard_normal((s, 8)) for s in shape]
    for mode in range(len(shape)):
        B = rng.random((shape[mode], 8))
        for threads in (1, 2):
            outs = []
            for T in (Tb, Tc):
                out = np.empty((shape[mode], 8))
                T.accumulate(factors, mode, out, None, 0.0, threads)
                phi = np.empty((shape[mode], 8))
                T.accumulate([np.abs(f) for f in factors], mode, phi, B, 1e-10, threads)
                outs.append((out, phi))
            np.testing.assert_array_equal(outs[0][0], outs[1][0])
            np.testing.assert_array_equal(outs[0][1], outs[1][1])
