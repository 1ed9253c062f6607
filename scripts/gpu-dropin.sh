#!/usr/bin/env bash
# Issue 27's checks of the drop-in library on a one-GPU machine (nvidia-h200),
# from the repository root with .devbin/ (scripts/gpu-build.sh) and build/nccl
# (make libnccl; built with -tags nonvml,flexlink_noptx it carries no PTX)
# carried:
#
#   bash scripts/gpu-dropin.sh
#
#  1. the kernels compiled with the machine's nvcc (gpu-common.sh): the two
#     PTX files come back in $OUT and are what gpu/kernels commits;
#  2. the nccl* symbols the installed torch's libraries need, against our
#     libnccl.so.2 (scripts/nccl-symbols.sh) -> $OUT/symbols.log;
#  3. one process loads the kernels once, so the suite's ranks find them in
#     the driver's cache instead of compiling them each (~60 s);
#  4. the PyTorch suite (scripts/torch-suite.sh, tests/torch) in what is
#     left of the call's 10 minutes; RUNS picks runs as there.
set -uo pipefail
B=.devbin
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
NP=1
. "$(dirname "$0")/gpu-common.sh"
export CUDA_CACHE_MAXSIZE=4294967296 FLEXLINK_GPU_KERNEL_TIMEOUT=120s FLEXLINK_TIMEOUT=300s
cat "$OUT/kernels.log"
stamp "symbols"
torchdir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
bash scripts/nccl-symbols.sh "$torchdir" build/nccl/lib/libnccl.so.2 >"$OUT/symbols.log" 2>&1
echo "nccl-symbols exit $?"
tail -3 "$OUT/symbols.log"
stamp "warm the kernel cache"
timeout 200 $B/flexbench allreduce --device gpu -b 1M -e 1M -n 2 -w 1 2>&1 | tail -3
stamp "torch suite"
left=$((570 - ($(date +%s) - T0)))
OUT=$OUT DEADLINE=$left bash scripts/torch-suite.sh
echo "torch-suite exit $?"
stamp done
