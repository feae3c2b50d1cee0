#!/usr/bin/env bash
# A tensor whose resident copies do not fit one GPU: fitted resident on P GPUs of one host (one
# MPI process each, each generating its own part) and streamed through one GPU, the same fits
# from the same start (CP-ALS and CP-APR MU, NELL-2-shaped parts stacked along mode 0).
#
#   SKTF_SYNTH_METHOD=compiled bash benchmarks/beyond_one_gpu.sh OUTDIR [P] [resident|streamed|all]
#
# The nonzeros per part are chosen from the device's memory: P parts need 15 % more than the
# 90 % of one device's memory above which `prepare` streams a tensor (88 bytes a nonzero for a
# 3-way fp64 tensor: the uploaded nonzeros, two orders and three copies).  Writes
# OUTDIR/beyond_resident_P{P}.json (bench_distributed.py --weak --stacked, P = 1 and P) and
# OUTDIR/beyond_streamed_P{P}.json (bench_streamed.py --parts P, streamed only, no cap set:
# the backend's own plan for a tensor larger than the device; its last model has as many
# iterations as the distributed fits' last, 1 + 3, so that their last losses compare).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?an output folder}
P=${2:-4}
what=${3:-all}
mkdir -p "$out"
per=$(python3 - "$P" <<'PY'
import sys
from sktensor_fast.backends import get_backend
P = int(sys.argv[1])
mem = int(get_backend("gpu").device.global_mem_size)
per = int(1.15 * 0.9 * mem / (88 * P))
print(-(-per // 10_000_000) * 10_000_000)
PY
)
threads=$(( $(nproc) / P ))
echo "P=$P, $per nonzeros per part ($(( P * per )) in all), $threads threads per process"
if [ "$what" != streamed ]; then
  python3 "$here/bench_distributed.py" --device gpu --shape nell2 --nnz "$per" --procs 1 "$P" \
      --weak --stacked --no-serial --iters 3 --repeat 1 --threads "$threads" \
      --algos cpals cpapr \
      --out "$out/beyond_resident_P$P.json"
fi
if [ "$what" != resident ]; then
  python3 "$here/bench_streamed.py" --device gpu --nnz "$per" --parts "$P" --kinds streamed \
      --cap-fraction 0 --start random --algos cpals cpapr --iters 4 --repeat 1 \
      --out "$out/beyond_streamed_P$P.json"
fi
