#!/usr/bin/env bash
# Issue 29's open questions on a one-GPU machine (nvidia-h200), from the
# repository root with bin/flexrun and build/nccl carried:
#
#   bash scripts/gpu-async-probe.sh NCCL_TESTS_SRC
#
#  1. where a 4-rank PyTorch DDP job on one GPU stops with
#     FLEXLINK_GPU_ENQUEUE=async (tests/torch/failures.py's training loop):
#     libnccl dumps its goroutines after FLEXLINK_STACK_DUMP_AFTER;
#  2. torch.compile(mode="reduce-overhead") of a tensor-parallel MLP with
#     functional collectives (tests/torch/compile_tp.py): 1 rank on torch's
#     NCCL and on flexlink, 2 and 4 ranks on flexlink;
#  3. per-call time of 2 MPI ranks sharing the GPU on each shared-GPU path
#     (leader, events) and enqueue mode, eager and -G, and, where CUDA MPS
#     is installed, the same under an MPS daemon of this script's own (its
#     own pipe directory; quit at the end; no GPU setting is changed).
# Logs go to $OUT (default /tmp/flexlink-out).
set -uo pipefail
src=${1:?usage: gpu-async-probe.sh NCCL_TESTS_SRC}
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUDA_CACHE_MAXSIZE=4294967296
LIB=$PWD/build/nccl/lib/libnccl.so.2
[ -n "${FLEXLINK_GPU_KERNELS:-}" ] || export FLEXLINK_GPU_KERNELS=$PWD/gpu/kernels/fatbin
FR=(bin/flexrun --oversubscribe --nccl --nccl-lib "$PWD/build/nccl/lib")
STEPLOG=$OUT/probe.log
source scripts/gpu-step.sh
: >"$STEPLOG"
PARTS=${PARTS:-ddp compile paths}
part() { [[ " $PARTS " == *" $1 "* ]]; }

if part ddp; then
	stamp "4-rank DDP, async, stack dump after 25 s"
	timeout 70 env FLEXLINK_GPU_ENQUEUE=async FLEXLINK_STACK_DUMP_AFTER=25s "${FR[@]}" -np 4 python3 tests/torch/failures.py kill >"$OUT/async-ddp.log" 2>&1 &
	job=$!
	sleep 35
	if kill -0 $job 2>/dev/null; then # still running after the dump: the native stacks of every rank
		gdb=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
		for pid in $(pgrep -f "tests/torch/failures.py"); do
			echo "=== pid $pid: $(tr '\0' ' ' </proc/$pid/cmdline | cut -c1-80)"
			[ -n "$gdb" ] && timeout 30 "$gdb" -p "$pid" -batch -ex "thread apply all bt 14" 2>&1 | grep -E "^Thread|^#" | cut -c1-220 | head -700
		done >"$OUT/async-ddp-native.txt" 2>&1
		[ -n "$gdb" ] || echo "no gdb or cuda-gdb here" >>"$OUT/async-ddp-native.txt"
	fi
	wait $job
	echo "exit $? ($(wc -l <"$OUT/async-ddp.log") lines in async-ddp.log)"
	grep -E "^flexrun:|KILL-AT|step|goroutines after" "$OUT/async-ddp.log" | cut -c1-200 | head -12
fi

if part compile; then
	stamp "torch.compile reduce-overhead TP MLP"
	step "compile_tp.py 1 rank, torch's NCCL" timeout 300 python3 tests/torch/compile_tp.py
	step "compile_tp.py 1 rank, flexlink" timeout 300 env LD_PRELOAD=$LIB python3 tests/torch/compile_tp.py
	step "compile_tp.py 2 ranks, flexlink" timeout 300 "${FR[@]}" -np 2 python3 tests/torch/compile_tp.py
	step "compile_tp.py 4 ranks, flexlink" timeout 300 "${FR[@]}" -np 4 python3 tests/torch/compile_tp.py
fi

if part paths; then
	[ -x /tmp/nccl-tests/build/all_reduce_perf ] || { rm -rf /tmp/nccl-tests && cp -r "$src" /tmp/nccl-tests; }
	cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
	step build timeout 300 make -s -j16 -C /tmp/nccl-tests MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NCCL_HOME=/usr CUDA_HOME=/usr/local/cuda \
		NVCC_GENCODE="-gencode=arch=compute_$cap,code=sm_$cap"
	B=/tmp/nccl-tests/build
	paths() { # $1: label
		for shared in leader events; do
			for mode in sync async; do
				for g in "" "-G 10"; do
					echo "-- $1 FLEXLINK_GPU_SHARED=$shared FLEXLINK_GPU_ENQUEUE=$mode ${g:-eager}" | tee -a "$STEPLOG"
					timeout 60 mpirun --allow-run-as-root --oversubscribe -x NCCL_TESTS_DEVICE=0 -x LD_PRELOAD=$LIB -x NCCL_NVLS_ENABLE \
						-x FLEXLINK_GPU_KERNELS -x CUDA_CACHE_MAXSIZE -x FLEXLINK_GPU_SHARED=$shared -x FLEXLINK_GPU_ENQUEUE=$mode \
						-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY \
						-np 2 $B/all_reduce_perf -b 8 -e 1M -f 32 -g 1 -c 1 -n 20 -w 3 $g 2>&1 | grep -E "^ +[0-9]|Out of bounds|rror" | tee -a "$STEPLOG"
				done
			done
		done
	}
	stamp "2 ranks on one GPU: time per allreduce by path"
	export CUDA_MPS_PIPE_DIRECTORY="" CUDA_MPS_LOG_DIRECTORY=""
	paths "no MPS"
	if mps_start; then # scripts/gpu-step.sh: a daemon of the script's own
		stamp "the same under CUDA MPS"
		paths "MPS"
		mps_stop
	fi
fi
stamp "done: $fails failed"
