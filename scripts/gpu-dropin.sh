#!/usr/bin/env bash
# Issue 27's checks of the drop-in library on a one-GPU machine (nvidia-h200),
# from the repository root with .devbin/ (scripts/gpu-build.sh) and build/nccl
# (make libnccl; built with -tags nonvml,flexlink_noptx it carries no PTX)
# carried:
#
#   bash scripts/gpu-dropin.sh
#
#  1. the kernels: the committed ones (gpu/kernels/fatbin); NVCC=1 compiles them with
#     the machine's nvcc instead (~3 min) and the two files come back in $OUT;
#  2. the nccl* symbols the installed torch's libraries need, against our
#     libnccl.so.2 (scripts/nccl-symbols.sh) -> $OUT/symbols.log;
#  3. two ranks load the kernels once, so later processes find them in the
#     driver's cache instead of compiling them each (~90 s);
#  4. tests/torch/diag_groups.py: which torch calls leave an NCCL group open
#     on their thread, with the real NCCL (1 rank) and ours (2 ranks, group
#     starts and ends traced) -> $OUT/diag.log;
#  5. GPU memory per extra communicator (tests/torch/mem_per_comm.py), torch's
#     NCCL at 1 rank and ours at 2 and 4 -> $OUT/mem.log;
#  6. the PyTorch suite (scripts/torch-suite.sh, tests/torch) in what is
#     left of the call's 10 minutes; RUNS picks runs as there.
set -uo pipefail
B=.devbin
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
NP=1
[ -n "${NVCC:-}" ] || export NO_NVCC=1
. "$(dirname "$0")/gpu-common.sh"
export CUDA_CACHE_MAXSIZE=4294967296 FLEXLINK_GPU_KERNEL_TIMEOUT=120s FLEXLINK_TIMEOUT=300s
[ -f "$OUT/kernels.log" ] && cat "$OUT/kernels.log"
echo "kernels: $FLEXLINK_GPU_KERNELS"
stamp "symbols"
torchdir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
bash scripts/nccl-symbols.sh "$torchdir" build/nccl/lib/libnccl.so.2 >"$OUT/symbols.log" 2>&1
echo "nccl-symbols exit $?"
tail -3 "$OUT/symbols.log"
stamp "warm the kernel cache (2 ranks)"
timeout 240 $B/flexrun -np 2 --oversubscribe $B/flexbench allreduce --device gpu -b 1M -e 1M -n 2 -w 1 2>&1 | tail -3
if [ -z "${NO_DIAG:-}" ]; then
	stamp "diag_groups"
	{
		for c in control estimator a2a_equal_u32 a2a_uneven_u32 gather_u32 scatter_u32 reduce_scatter_u32; do
			echo "== $c: NCCL, 1 rank"
			RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 timeout 60 python3 tests/torch/diag_groups.py $c 2>&1 | grep -E "^rank|Error" | head -5
			echo "== $c: flexlink, 2 ranks"
			FLEXLINK_DEBUG=TRACE timeout 60 $B/flexrun -np 2 --oversubscribe --nccl --nccl-lib $PWD/build/nccl/lib -x FLEXLINK_DEBUG=TRACE python3 tests/torch/diag_groups.py $c 2>&1 |
				grep -E "^rank|ncclGroup|deferred|Error|flexrun:" | cut -c1-240 | head -30
		done
	} >"$OUT/diag.log" 2>&1
	cat "$OUT/diag.log"
fi
stamp "memory per communicator"
{
	echo "== torch's NCCL, 1 rank"
	RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29556 timeout 90 python3 tests/torch/mem_per_comm.py 2>&1 | grep -E "mem_per_comm|Error" | head -3
	for n in 2 4; do
		echo "== flexlink, $n ranks"
		timeout 120 $B/flexrun -np $n --oversubscribe --nccl --nccl-lib $PWD/build/nccl/lib -x NCCL_DEBUG=INFO python3 tests/torch/mem_per_comm.py 2>&1 |
			grep -E "mem_per_comm|serves rank 0|Error|flexrun:" | cut -c1-300 | head -12
	done
} >"$OUT/mem.log" 2>&1
cat "$OUT/mem.log"
stamp "torch suite"
left=$((570 - ($(date +%s) - T0)))
OUT=$OUT DEADLINE=$left bash scripts/torch-suite.sh
echo "torch-suite exit $?"
stamp done
