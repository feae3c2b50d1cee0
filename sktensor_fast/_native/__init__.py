"""Compiled passes over whole tensors that the data layer and the storage formats share.

Nothing here depends on a backend: :mod:`._construct` sorts, validates and sums coordinates
(the canonical form of :class:`~sktensor_fast.SparseTensor`), orders nonzeros by one mode and
narrows coordinates; :mod:`._tns` parses and formats FROSTT text; :mod:`._synth` draws,
sorts and splits the coordinates of the benchmarks' synthetic Zipf tensors.  Every pass
splits its work into blocks that do not depend on the thread count, or produces a result that
is unique (a stable sort), so the output is bitwise the same for any number of threads.
"""
