"""Command-line arguments shared by the device experiments."""

#: NELL-2's shape and nonzeros (FROSTT)
NELL2_SHAPE = [12092, 9184, 28818]
NELL2_NNZ = 76879419


def add_tensor_args(parser, device="gpu"):
    """``--device``, and the synthetic tensor's ``--shape``, ``--nnz`` and ``--rank`` (NELL-2's
    shape and size, R = 16, by default)."""
    parser.add_argument("--device", default=device)
    parser.add_argument("--shape", type=int, nargs="+", default=list(NELL2_SHAPE))
    parser.add_argument("--nnz", type=float, default=NELL2_NNZ)
    parser.add_argument("--rank", type=int, default=16)
    return parser
