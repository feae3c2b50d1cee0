"""The OpenCL backend's sparse kernels (kernels/cp.cl): MTTKRP, Φ and the model values.

:class:`SparseKernels` is a part of :class:`~.backend.OpenCLBackend`: it chooses the launch
geometry of cp.cl's kernels (lanes per nonzero, columns per lane, work-group sizes, 32-bit
offsets where they fit), launches them over a device tensor's copies, and folds the partial
sums of rows cut between chunks of nonzeros (the boundary list) into the output.  A
:class:`~.tensor.DeviceTensor` decides how a call runs over it: a resident tensor comes back
here once (``_launch_*``), a streamed one once per block.
"""
import numpy as np

__all__ = ["SparseKernels", "CP_CL", "Launcher"]

#: the kernel file of MTTKRP, Φ and the model values
CP_CL = "cp.cl"


def _same_arg(a, b):
    """Whether kernel argument ``a`` is the one set before (``b``): the same buffer object, an
    equal scalar of the same type, or local memory of the same size."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, np.generic):
        return bool(a == b)
    if type(a).__name__ == "LocalMemory":
        return a.size == b.size
    return False


class Launcher:
    """A kernel object of its own that remembers the arguments it was last launched with and
    sets them again only when one changed.

    PyOpenCL's ``kernel(queue, ...)`` sets every argument at every launch; for the MTTKRP / Φ
    kernels and their boundary reductions that host work cost more than a small tensor's
    kernels themselves (``benchmarks/experiments/bench_gpu_overheads.py``).  A
    launcher is kept by the tensor it serves (:attr:`~.tensor.OpenCLTensor.launchers`): the
    arguments it holds (the tensor's own buffers, the factors and outputs of the last call)
    live no longer than the tensor, and no other launch touches its kernel object.
    """

    __slots__ = ("cl", "knl", "args")

    def __init__(self, cl, knl):
        self.cl, self.knl, self.args = cl, knl, None

    def __call__(self, queue, glob, local, *args):
        old = self.args
        if old is None or len(old) != len(args) or not all(map(_same_arg, args, old)):
            self.knl.set_args(*args)
        self.args = args
        return self.cl.enqueue_nd_range_kernel(queue, self.knl, glob, local)


class SparseKernels:
    """Sparse kernels of the OpenCL backend (mixed into :class:`~.backend.OpenCLBackend`,
    whose device, settings, ``kernel`` and dense steps they use)."""

    #: columns per lane of the MTTKRP / Φ kernel (kernels/cp.cl): one vector load of VEC
    #: entries per factor row and lane; the largest of 8, 4, 2, 1 that divides the rank and is
    #: at most this.  Fastest on an H200 at R = 16 (doc/guide/tuning.rst, "OpenCL columns per
    #: lane"): 4 for both kernels
    #: over the chunk-interleaved copies ("lanes"), 2 for the fp64 MTTKRP over the mode-sorted
    #: ones ("lanes-sorted").  The environment variable SKTENSOR_FAST_OCL_VEC (or the attribute
    #: ``vec``) sets all.
    VEC = {"mttkrp": 4, "mttkrp_fp32": 4, "phi": 4, "mttkrp_sorted": 2}

    #: Experimental switches of the lanes MTTKRP / Φ kernel, not options: no default turns
    #: them off, and only the benchmarks do (``benchmarks/bench_opencl.py --off32s 0 1
    #: --prefetches 0 1`` sets these attributes on a backend).  ``off32``: 32-bit offsets where
    #: every offset fits (64-bit ones otherwise, as they must be); ``prefetch``: the next
    #: nonzero's coordinates loaded one step ahead.  On an H200 at R = 16, fp64, interleaved
    #: copies, chunk 256 (ms per mode; doc/guide/tuning.rst, "32-bit offsets"): neither 2.03 / 3.00, off32 only
    #: 2.45 / 2.64, prefetch only 2.07-2.26 / 2.75, both 1.86-1.88 / 2.51-2.54 (MTTKRP / Φ).
    off32 = True
    prefetch = True

    #: Experimental, for the benchmarks only (``bench_gpu_overheads.py --fp32-factors``): the
    #: fp64 MTTKRP of the lanes layouts reads float copies of the factors (made at every
    #: call), its products and sums staying in fp64.  Results then differ from the fp64 ones
    #: by the rounding of the factors to float (about 1e-7 relative).
    fp32_factors = False

    #: What the lanes MTTKRP / Φ kernel is compiled for, as constants instead of arguments:
    #: bit 1 the output mode (a program per mode), bit 2 the rank (and the lanes per chunk
    #: that follow from it: a program per rank, as a fit uses one; GCP's step kernels are
    #: built for the rank too, see :meth:`fixed_rank`).  None: the rank on GPU
    #: devices, nothing elsewhere (where the lanes layout serves only explicit requests).  The
    #: same bits every way.  H100, NELL-2's shape, R = 16, fp64 (ms per mode;
    #: ``benchmarks/experiments/bench_specialize.py``): Φ 2.48-2.54 as arguments, 2.32-2.40
    #: with the rank, 2.21-2.34 with the rank and the mode; the MTTKRP 1.76-1.89 in every
    #: setting.  A program per mode costs a build per mode (0.3 s each there) for about
    #: 0.08 ms a Φ, so the mode is not the default.
    specialize = None

    #: the Poisson data term (CP-APR's log-likelihood) in the lanes layout by the Φ kernel,
    #: the model values never written out (False: ``kruskal_values``, then a reduction)
    FUSED_DATA_TERM = True

    #: work-items per work-group of the lanes MTTKRP / Φ kernel (RP lanes x LG chunks); on an
    #: H200 at R = 16, 64 and 128 were 7% faster than 256-1024 (doc/guide/tuning.rst, "OpenCL
    #: work-group size")
    group_size = 128

    #: largest rank that the wide kernel serves (its registers hold 2-3 rows per work-item)
    WIDE_MAX_RANK = 16

    #: entries of the boundary list per work-item at the reduction levels
    LEVEL_CHUNK = 16

    #: the last levels of the boundary reduction run in one launch of one work-group of
    #: (up to) this many work-items (``reduce_tail``), from the first level at which the group
    #: covers the list's chunks in at most :attr:`TAIL_ROUNDS` rounds (0: a launch per level)
    TAIL_GROUP = 1024
    TAIL_ROUNDS = 4

    #: the lanes kernel reduces its chunks' boundary rows in the work-group (local memory),
    #: so the boundary list holds two entries per group instead of two per chunk: False
    #: writes every chunk's two (the measurement's before)
    GROUP_BOUNDARIES = True
    #: most local memory (bytes) a group of the lanes kernel takes for that list and Φ's
    #: exchanges (and at most half of the device's); a larger need (a wide rank) keeps the
    #: list per chunk
    GROUP_LOCAL_BYTES = 24 << 10

    def cp_kernel(self, dtype, nmodes, name, phi=False, vec=1, rank=None, interleaved=False,
                  off32=False, prefetch=False, T=None, role=None, fp32_factors=False,
                  group_bnd=False, fixed=None, data_term=False):
        """Kernel ``name`` of cp.cl for ``nmodes`` factors of ``dtype``, from the backend's
        program cache.  ``phi``: the Φ variant (False: MTTKRP; ``"local"``, ``"shuffle"`` or
        ``"wide"``); ``vec`` columns per lane in accumulate (per vector in accumulate_wide,
        which needs the compile-time ``rank``); ``interleaved``: accumulate reads the
        chunk-interleaved copy; ``off32``: accumulate's offsets fit in int; ``prefetch``:
        accumulate loads a step's coordinates during the step before; ``group_bnd``:
        accumulate reduces its chunks' boundary rows in the work-group (two entries of the
        boundary list per group, not per chunk); ``fixed``: (mode, rank, lanes per chunk)
        compiled in as constants, the mode or the rank (with the lanes) None where they stay
        arguments; ``data_term`` (with ``phi``): accumulate sums the Poisson data term of its
        work-group's nonzeros instead of writing rows."""
        if vec == 8 and np.dtype(dtype) == np.float64 and not getattr(self, "double8", True):
            raise ValueError(
                f"OpenCL option vec=8 with float64 data: PoCL cannot build kernels with 8-wide "
                f"vectors of doubles on '{self.device.name.strip()}'; use vec=4 or less (or "
                f"float32 data)")

        def source():
            extra = []
            if phi:
                extra.append("#define PHI 1")
            if phi == "shuffle":
                extra.append("#define PHI_SHUFFLE_NV 1")
            if vec > 1:
                vt = "double" if np.dtype(dtype) == np.float64 else "float"
                extra += [f"#define VEC {vec}", f"#define VEC_T {vt}{vec}"]
            if rank is not None:
                extra.append(f"#define RANK {rank}")
            if interleaved:
                extra.append("#define INTERLEAVED 1")
            if off32:
                extra.append("#define OFF_T int")
            if prefetch:
                extra.append("#define PREFETCH 1")
            if group_bnd:
                extra.append("#define GROUP_BND 1")
            if data_term:
                extra.append("#define DATA_TERM 1")
            if fixed is not None:
                mode_c, rank_c, rp_c = fixed
                if mode_c is not None:
                    extra.append(f"#define FIXED_MODE {mode_c}")
                if rank_c is not None:
                    extra += [f"#define FIXED_RANK {rank_c}", f"#define FIXED_RP {rp_c}"]
            factor_t = "VAL_T"
            if fp32_factors:
                sfx = "" if vec == 1 else str(vec)
                extra += ["#define FP32_FACTORS 1", f"#define FVEC_T float{sfx}",
                          f"#define TO_VEC_T convert_double{sfx}"]
                factor_t = "float"
            return (self._header(dtype, nmodes, extra=extra, factor_t=factor_t)
                    + self._source(CP_CL))
        key = ("cp", np.dtype(dtype).str, nmodes, phi, vec, rank, interleaved, off32, prefetch)
        if fp32_factors:
            key += ("fp32_factors",)
        if group_bnd:
            key += ("group_bnd",)
        if fixed is not None:
            key += ("fixed",) + tuple(fixed)
        if data_term:
            key += ("data_term",)
        return self._launcher(T, (key, name, role), source, f"{CP_CL} (for {name})")

    def _specialize_bits(self):
        spec = self.specialize
        if spec is None:
            spec = 2 if self.is_gpu else 0
        return spec

    def _fixed(self, mode, R, RP):
        """cp_kernel's ``fixed`` for :attr:`specialize`: (mode or None, rank or None, RP)."""
        spec = self._specialize_bits()
        if not spec:
            return None
        return (mode if spec & 1 else None, R if spec & 2 else None, RP)

    def fixed_rank(self, R):
        """The rank ``R`` where :attr:`specialize` compiles the rank into kernels (GCP's
        too), else None."""
        return int(R) if self._specialize_bits() & 2 else None

    def _launcher(self, T, ident, source, what):
        """The kernel ``ident[:2]`` (program key, name) as a callable ``(queue, global, local,
        *args)``: ``T``'s own :class:`Launcher` for ``ident`` where ``T`` keeps launchers,
        else the backend's shared kernel object."""
        key, name = ident[0], ident[1]
        cache = getattr(T, "launchers", None)
        if cache is None:
            return self.kernel(key, name, source, what=what)
        got = cache.get(ident)
        if got is None:
            got = cache[ident] = Launcher(self.cl, self.programs.new_kernel(key, name, source,
                                                                            what=what))
        return got

    # ------------------------------------------------------------------ what the backend calls
    def _mttkrp(self, T, factors, mode, out):
        return T.accumulate(factors, mode, None, 0.0, out)

    def mttkrp_after(self, T, factors, mode, out, before):
        """:meth:`_mttkrp` (checked arguments) with ``before()`` called once, after all the
        host's preparation and just before the first kernel that reads the factors is
        enqueued: ``before`` may enqueue the transfers that fill a factor (a device array of
        its shape, contents not yet written when this is called).  The distributed backend
        prepares a MTTKRP this way while the rows of the factor just updated are still on
        their way from the other processes."""
        return T.accumulate(factors, mode, None, 0.0, out, before=before)

    def _phi(self, T, factors, mode, B, eps, out):
        return T.accumulate(factors, mode, B, eps, out)

    def _model_values(self, T, weights, factors):
        return T.model_values(weights, factors)

    def _poisson_data_term(self, T, weights, factors, eps):
        return T.poisson_data_term(weights, factors, eps)

    # ------------------------------------------------------------------ launches
    def _launch_accumulate(self, T, factors, mode, B, eps, out, zero=True, data_term=False,
                           before=None):
        """MTTKRP (``B`` None) or Φ of ``mode`` into ``out``; the kernels write the rows of
        ``T``'s nonzeros only, the others are zeroed first unless ``zero`` is False (or every
        row holds a nonzero: ``T.rows_complete``).  With ``data_term`` (the lanes layouts, ``B``
        the mode's factor with the weights folded in, ``out`` unused): the Poisson data term
        Σ x log(max(m, eps)) as a float, from the Φ kernel's model values.  ``before``: a
        callable called once just before the first kernel that reads the factors is enqueued
        (:meth:`mttkrp_after`)."""
        facs = [self.asarray(f, dtype=T.dtype) for f in factors]
        R = int(facs[0].shape[1])
        I = T.shape[mode]
        if not data_term:
            complete = getattr(T, "rows_complete", None)
            written = (complete is not None and (out is None or out.shape[0] == I)
                       and complete(mode))
            if out is None:
                out = self._empty((I, R), T.dtype) if written else self.zeros((I, R), T.dtype)
            elif zero and not written:
                self.fill_zero(out)
        if T.nnz == 0 or R == 0:
            if before is not None:
                before()
            return 0.0 if data_term else out
        RP = 1                      # lanes per row in the boundary reduction: one per column
        while RP < R:
            RP *= 2
        RP = min(RP, self.max_wg)
        if RP < R:
            raise ValueError(f"rank {R} exceeds the device's work-group size {self.max_wg}")
        if self.layout == "wide" and R <= self.WIDE_MAX_RANK:
            return self._launch_wide(T, facs, mode, B, eps, out, R, RP, before)
        kind = "phi" if B is not None else (
            "mttkrp_fp32" if np.dtype(T.dtype) == np.float32 else "mttkrp")
        sorted_kind = kind + "_sorted"
        vec = self.vec or self.VEC[sorted_kind if self.layout == "lanes-sorted"
                                   and sorted_kind in self.VEC else kind]
        while R % vec:
            vec //= 2
        RV = 1                      # lanes per nonzero in the kernel: vec columns each
        while RV < R // vec:
            RV *= 2
        variant = False
        if B is not None:
            # the butterfly stays inside one warp of 32 lanes
            variant = "local" if self.phi_variant == "shuffle" and RV > 32 else self.phi_variant
        interleaved = self.layout == "lanes"
        # a streamed tensor's blocks are laid out for their chunk; a resident tensor's by size
        chunk = getattr(T, "chunk", None) or self.lanes_chunk(T.nnz)
        if interleaved:
            subs, vals = self._interleaved(T, mode, chunk)
        else:
            subs, vals = T.subs[mode], T.vals[mode]
        LG = max(1, min(self.group_size, self.max_wg) // RV)
        nchunks = -(-T.nnz // chunk)
        # 32-bit offsets where every one fits: positions x modes, factor and output rows x R,
        # boundary slots x R
        limit = 2 ** 31 - 1
        off32 = self.off32 and max(nchunks * chunk * T.ndim, max(T.shape) * R,
                                   (2 * nchunks + 2) * R) < limit
        fp32 = bool(self.fp32_factors and B is None and np.dtype(T.dtype) == np.float64)
        if fp32:
            if before is not None:       # the copies read the factors
                before()
                before = None
            facs = [f.astype(np.float32) for f in facs]
        ngroups = -(-nchunks // LG)
        isz = np.dtype(T.dtype).itemsize
        local = [2 * RV * LG * isz] if B is not None else []
        group = [2 * LG * R * isz, 2 * LG * 8]
        group_bnd = bool(self.GROUP_BOUNDARIES and not data_term
                         and sum(local + group) <= self._group_local())
        if group_bnd:
            local += group
        knl = self.cp_kernel(T.dtype, T.ndim, "accumulate", variant, vec,
                             interleaved=interleaved, off32=off32, prefetch=self.prefetch,
                             T=T, role=mode, fp32_factors=fp32, group_bnd=group_bnd,
                             fixed=self._fixed(mode, R, RV), data_term=data_term)
        gsize = (RV, ngroups * LG)
        lsize = (RV, LG)
        dt = np.dtype(T.dtype).type
        args = [np.int64(T.nnz), np.int32(R), np.int32(mode), np.int32(chunk),
                np.int64(nchunks), subs.data, vals.data] + [f.data for f in facs]
        if data_term:
            part = self._scratch(ngroups, T.dtype)       # the groups' sums (bnd_row unused)
            Bd = self.asarray(B, dtype=T.dtype)
            knl(self.queue, gsize, lsize, *args, Bd.data, dt(eps), Bd.data, part, part,
                *[self.cl.LocalMemory(n) for n in local])
            return float(self._download(part, ngroups, T.dtype).sum())
        nlist = ngroups if group_bnd else nchunks     # pairs of entries in the boundary list
        bnd_row, bnd_val = self._boundary_buffers(nlist, R, T.dtype, T)
        if B is not None:
            Bd = self.asarray(B, dtype=T.dtype)
            args += [Bd.data, dt(eps), out.data, bnd_row, bnd_val]
        else:
            args += [out.data, dt(0), out.data, bnd_row, bnd_val]  # B unused
        args += [self.cl.LocalMemory(n) for n in local]
        if before is not None:
            before()
        knl(self.queue, gsize, lsize, *args)
        self._reduce_boundaries(bnd_row, bnd_val, 2 * nlist, R, RP, T.dtype, out, T)
        return out

    def _group_local(self):
        """Bytes of local memory a group of the lanes kernel may take for its boundary rows
        and Φ's exchanges: :attr:`GROUP_LOCAL_BYTES`, at most half of what the device has."""
        return min(self.GROUP_LOCAL_BYTES, int(self.device.local_mem_size) // 2)

    def _interleaved(self, T, mode, chunk):
        """The chunk-interleaved copy of the nonzeros sorted by ``mode`` (kept on ``T``)."""
        return T.interleaved_copy(mode, chunk)

    def _launch_wide(self, T, facs, mode, B, eps, out, R, RP, before=None):
        """MTTKRP / Φ by cp.cl's accumulate_wide: one work-item per chunk of nonzeros, whole
        rows in registers, over the chunk-interleaved copy of the mode."""
        vec = self.vec or 4
        while R % vec:
            vec //= 2
        chunk = getattr(T, "chunk", None) or self.wide_chunk_of(T.nnz)
        phi = "wide" if B is not None else False
        subs, vals = self._interleaved(T, mode, chunk)
        knl = self.cp_kernel(T.dtype, T.ndim, "accumulate_wide", phi, vec, rank=R, T=T,
                             role=mode)
        nchunks = -(-T.nnz // chunk)
        LG = min(self.wide_group, self.max_wg)
        bnd_row, bnd_val = self._boundary_buffers(nchunks, R, T.dtype, T)
        dt = np.dtype(T.dtype).type
        Bd = out if B is None else self.asarray(B, dtype=T.dtype)  # B unused by MTTKRP
        if before is not None:
            before()
        knl(self.queue, (-(-nchunks // LG) * LG,), (LG,), np.int64(T.nnz), np.int64(nchunks),
            np.int32(mode), np.int32(chunk), subs.data, vals.data, *[f.data for f in facs],
            Bd.data, dt(eps), out.data, bnd_row, bnd_val)
        self._reduce_boundaries(bnd_row, bnd_val, 2 * nchunks, R, RP, T.dtype, out, T)
        return out

    def _boundary_buffers(self, nchunks, R, dtype, T=None, level=0):
        """Raw buffers for a boundary list of 2 * nchunks (row, R values) entries (no Array
        objects: their bookkeeping costs more host time than the small kernels): ``T``'s own,
        kept for its next calls, where it keeps launchers (the same buffers, the same kernel
        arguments), else from the pool."""
        n = max(2 * nchunks, 1)
        nbytes = (8 * n, n * R * np.dtype(dtype).itemsize)
        cache = getattr(T, "launchers", None)
        if cache is None:
            return tuple(self.allocator(b) for b in nbytes)
        key = ("boundary", level)
        got = cache.get(key)
        if got is None or got[0].size < nbytes[0] or got[1].size < nbytes[1]:
            got = cache[key] = tuple(self.cl.Buffer(self.ctx, self.cl.mem_flags.READ_WRITE, b)
                                     for b in nbytes)
        return got

    def _reduce_boundaries(self, rows, vals, n, R, RP, dtype, out, T=None):
        """Fold the sorted (row, partial sum) boundary list into ``out``, level by level: a
        launch per level while the list is long, then the last levels in one launch of one
        work-group (``reduce_tail``) once a pass of that group over the list takes at most
        :attr:`TAIL_ROUNDS` chunks per work-item."""
        source = lambda: self._header(dtype) + self._source("dense.cl")  # noqa: E731
        chunk = self.LEVEL_CHUNK
        if chunk < 4:      # 2 entries out of a chunk of 3 or fewer: the list may not shrink
            raise ValueError(f"LEVEL_CHUNK is {chunk}; the boundary reduction needs at least 4")
        tail = self._launcher(T, (("dense", np.dtype(dtype).str), "reduce_tail", 0),
                              source, "dense.cl (for reduce_tail)") if self.TAIL_ROUNDS else None
        tail_lg = self._tail_group(tail, dtype) // RP if tail is not None else 0
        level = 0
        while True:
            level += 1
            nch = -(-n // chunk)
            if nch > 1 and nch <= self.TAIL_ROUNDS * tail_lg:
                knl = tail
                lg = min(tail_lg, nch)
                brows, bvals = self._boundary_buffers(nch, R, dtype, T, "tail")
                knl(self.queue, (RP, lg), (RP, lg), np.int64(n), np.int32(R), np.int32(chunk),
                    rows, vals, out.data, brows, bvals)
                return out
            knl = self._launcher(T, (("dense", np.dtype(dtype).str), "reduce_level", level),
                                 source, "dense.cl (for reduce_level)")
            final = nch == 1
            LG = max(1, min(256, self.max_wg) // RP)
            ngroups = -(-nch // LG)
            if final:
                nrows, nvals = rows, vals  # unused
            else:
                nrows, nvals = self._boundary_buffers(nch, R, dtype, T, level)
            knl(self.queue, (RP, ngroups * LG), (RP, LG), np.int64(n), np.int32(R),
                np.int32(chunk), np.int32(final), rows, vals, out.data, nrows, nvals)
            if final:
                return out
            rows, vals, n = nrows, nvals, 2 * nch

    def _tail_group(self, knl, dtype):
        """Work-items of the one work-group of ``reduce_tail`` (``knl``, a launcher or kernel):
        :attr:`TAIL_GROUP`, at most what the device allows for that kernel."""
        key = ("tail_group", np.dtype(dtype).str)
        got = self.__dict__.setdefault("_group_sizes", {}).get(key)
        if got is None:
            k = getattr(knl, "knl", knl)
            most = int(k.get_work_group_info(self.cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                             self.device))
            got = self._group_sizes[key] = max(1, min(self.TAIL_GROUP, self.max_wg, most))
        return got

    def _launch_model_values(self, T, weights, factors):
        """The model's values at the nonzeros of a resident tensor (or a block's)."""
        facs = [self.asarray(f, dtype=T.dtype) for f in factors]
        w = self.asarray(np.asarray(weights), dtype=T.dtype)
        out = self.zeros((T.nnz,), T.dtype)
        if T.nnz:
            knl = self.cp_kernel(T.dtype, T.ndim, "kruskal_values")
            self.launch(knl, (T.nnz,), np.int64(T.nnz), np.int32(w.shape[0]), T.subs[0].data,
                        w.data, *[f.data for f in facs], out.data)
        return out

    def _launch_poisson_data_term(self, T, weights, factors, eps):
        """Σ x log(max(m, eps)) over the nonzeros of a resident tensor (or a block's): in the
        lanes layout by the Φ kernel of mode 0 with the weights folded into its factor (one
        pass, the model values kept in registers), else from the model values written out."""
        if T.nnz == 0:
            return 0.0
        if self.layout == "lanes" and self.FUSED_DATA_TERM:
            facs = [self.asarray(f, dtype=T.dtype) for f in factors]
            B = self._empty(facs[0].shape, T.dtype)
            if B.size:
                self.cl.enqueue_copy(self.queue, B.data, facs[0].data)
            self.scale_columns(B, np.asarray(weights))
            return self._launch_accumulate(T, facs, 0, B, eps, None, data_term=True)
        m = self._launch_model_values(T, weights, factors)
        # T.vals[0] is in the order of T.subs[0], the order model_values uses
        return self._vec_reduce(0, T.vals[0], m, eps, T.nnz)
