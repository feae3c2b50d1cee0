"""Byte models of the memory-bound kernels: how many bytes one call must move at least.

A kernel's effective bandwidth is ``bytes / seconds`` under one of these models, and the suite
reports it as a fraction of STREAM triad measured in the same run on the same device.  The
models count *compulsory* traffic, each array element once per use, with no cache reuse of
factor rows:

===========================  =============================================================
what                         bytes
===========================  =============================================================
stored index per nonzero     ``ndim * idx_bytes`` (COO coordinates) or ``index_bytes``
                             (e.g. ALTO's linear index: 8 or 16)
value per nonzero            ``val_bytes``
permutation entry            ``perm_bytes`` per nonzero (default ``idx_bytes``; 0 when the
                             nonzeros are read in storage order: COO mode 0, ALTO, the
                             OpenCL backend's mode-sorted copies)
factor rows per nonzero      ``(ndim - 1) * rank * val_bytes`` (one row of every other mode)
output rows                  ``shape[mode] * rank * val_bytes``, written once
Φ only: rows of B            ``shape[mode] * rank * val_bytes``, read once (B is indexed by
                             the output row, like the output)
===========================  =============================================================

Not counted: zeroing the output, partition or boundary buffers, write-allocate traffic (STREAM
does not count it either), the partition pointers.

GenTen's slides count ``((N R + 3) sizeof(Real) + N sizeof(Ordinal)) * nnz`` instead
(:func:`genten_mttkrp_bytes`): they charge a read and a write of the output row for every
nonzero rather than once per row, so their GB/s for the same time are higher.
"""

__all__ = ["mttkrp_bytes", "phi_bytes", "genten_mttkrp_bytes", "STREAM_BYTES"]

#: Bytes STREAM counts per array element for each operation (float64).
STREAM_BYTES = {"copy": 16, "scale": 16, "add": 24, "triad": 24}


def _tensor_bytes(nnz, ndim, idx_bytes, val_bytes, perm_bytes, index_bytes):
    if perm_bytes is None:
        perm_bytes = idx_bytes
    per_nnz = (ndim * idx_bytes if index_bytes is None else index_bytes) + val_bytes + perm_bytes
    return nnz * per_nnz


def mttkrp_bytes(nnz, ndim, rank, shape, idx_bytes=8, val_bytes=8, *, mode=0, perm_bytes=None,
                 index_bytes=None):
    """Bytes one mode-``mode`` MTTKRP moves under the suite's byte model.

    Counted exactly:

    - per nonzero, its stored index: ``ndim`` COO coordinates of ``idx_bytes`` each (or
      ``index_bytes`` when given, e.g. ALTO's 8- or 16-byte linear index), and its value
      (``val_bytes``);
    - per nonzero, one permutation entry of ``perm_bytes`` (default ``idx_bytes``; pass 0 when
      the kernel reads the nonzeros in storage order);
    - per nonzero, one row of each of the ``ndim - 1`` other factor matrices:
      ``(ndim - 1) * rank * val_bytes`` (no cache reuse assumed);
    - the output, ``shape[mode]`` rows of ``rank`` values, written once.

    Parameters
    ----------
    nnz, ndim, rank : int
        Nonzeros, modes, rank R.
    shape : sequence of int
        Tensor shape (only ``shape[mode]`` is used).
    idx_bytes, val_bytes : int, default=8
        Bytes of one coordinate and of one value / factor entry.
    mode : int, default=0
        Output mode.
    perm_bytes : int, optional
        Bytes of the permutation entry read per nonzero (default ``idx_bytes``).
    index_bytes : int, optional
        Bytes of the whole stored index of a nonzero, replacing ``ndim * idx_bytes``.

    Returns
    -------
    int

    Examples
    --------
    >>> mttkrp_bytes(10, 3, 2, (4, 5, 6))          # 10*(3*8 + 8 + 8) + 10*2*2*8 + 4*2*8
    784
    """
    return int(_tensor_bytes(nnz, ndim, idx_bytes, val_bytes, perm_bytes, index_bytes)
               + nnz * (ndim - 1) * rank * val_bytes
               + int(shape[mode]) * rank * val_bytes)


def phi_bytes(nnz, ndim, rank, shape, idx_bytes=8, val_bytes=8, *, mode=0, perm_bytes=None,
              index_bytes=None):
    """Bytes one mode-``mode`` CP-APR Φ moves under the suite's byte model.

    Everything :func:`mttkrp_bytes` counts (index, value, permutation entry and the
    ``ndim - 1`` factor rows per nonzero, from which the Π row is formed on the fly; output
    written once), plus the rows of B (the model's factor of ``mode``), ``shape[mode]`` rows
    of ``rank`` values read once: the nonzeros of one output row share its B row.

    Examples
    --------
    >>> phi_bytes(10, 3, 2, (4, 5, 6))             # mttkrp_bytes(...) + 4*2*8
    848
    """
    return int(mttkrp_bytes(nnz, ndim, rank, shape, idx_bytes, val_bytes, mode=mode,
                            perm_bytes=perm_bytes, index_bytes=index_bytes)
               + int(shape[mode]) * rank * val_bytes)


def genten_mttkrp_bytes(nnz, ndim, rank, real_bytes=8, ordinal_bytes=8):
    """GenTen's MTTKRP byte count, ``((N R + 3) real + N ordinal) * nnz`` (for comparison).

    Examples
    --------
    >>> genten_mttkrp_bytes(10, 3, 2)              # ((3*2 + 3)*8 + 3*8) * 10
    960
    """
    return int(((ndim * rank + 3) * real_bytes + ndim * ordinal_bytes) * nnz)
