#!/usr/bin/env bash
# Issue 29's per-call table on a one-GPU machine (nvidia-h200), both
# libraries in one run, from the repository root with bin/flexrun and
# build/nccl carried:
#
#   bash scripts/gpu-percall.sh NCCL_TESTS_SRC
#
#  1. one rank, all_reduce_perf 8 B-64 KiB: NCCL then flexlink (LD_PRELOAD),
#     eager, replayed (-G 10) and host time per call (-C 1);
#  2. two MPI ranks sharing GPU 0 under an MPS daemon of the script's own
#     (NCCL refuses two ranks on one GPU: no anchor), FLEXLINK_GPU_ENQUEUE
#     sync and async, eager and -G 10;
#  3. WITHHOLD=1: tests/torch/failures.py withhold at 4 ranks, the whole
#     output kept (issue 30's verdict);
#  4. MPSGRAPHS=1: under MPS, every nccl-tests binary at 4 MPI ranks with
#     -G 10, and tests/torch/graph_capture.py at 2 ranks (REPLAYS=1000).
# PARTS picks parts 1 and 2 (default "one two").
# Lines go to $OUT/percall.log (default /tmp/flexlink-out).
set -uo pipefail
src=${1:?usage: gpu-percall.sh NCCL_TESTS_SRC}
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUDA_CACHE_MAXSIZE=4294967296
LIB=$PWD/build/nccl/lib/libnccl.so.2
[ -n "${FLEXLINK_GPU_KERNELS:-}" ] || export FLEXLINK_GPU_KERNELS=$PWD/gpu/kernels/fatbin
STEPLOG=$OUT/percall-steps.log
source scripts/gpu-step.sh
LOG=$OUT/percall.log
: >"$LOG"
rows() { grep -E "^ +[0-9]|Out of bounds" | tee -a "$LOG"; }

nccl_tests_build "$src"

PARTS=${PARTS:-one two}
part() { [[ " $PARTS " == *" $1 "* ]]; }
part one && stamp "1 rank: NCCL, then flexlink"
part one && for lib in NCCL flexlink; do
	pre=()
	[ $lib = flexlink ] && pre=(env LD_PRELOAD=$LIB)
	for mode in "" "-G 10" "-C 1"; do
		echo "-- 1 rank $lib ${mode:-eager}" | tee -a "$LOG"
		timeout 120 "${pre[@]}" $B/all_reduce_perf -b 8 -e 64K -f 4 -g 1 -n 1000 -w 50 $mode 2>&1 | rows
	done
done

part two && stamp "2 ranks on GPU 0 under MPS"
if part two && mps_start; then
	for enq in sync async; do
		for mode in "" "-G 10"; do
			echo "-- 2 ranks MPS FLEXLINK_GPU_ENQUEUE=$enq ${mode:-eager}" | tee -a "$LOG"
			timeout 120 mpirun --allow-run-as-root --oversubscribe -x NCCL_TESTS_DEVICE=0 -x LD_PRELOAD=$LIB -x NCCL_NVLS_ENABLE \
				-x FLEXLINK_GPU_KERNELS -x CUDA_CACHE_MAXSIZE -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -x FLEXLINK_GPU_ENQUEUE=$enq \
				-np 2 $B/all_reduce_perf -b 8 -e 64K -f 4 -g 1 -n 200 -w 20 -c 1 $mode 2>&1 | rows
		done
	done
	mps_stop
fi

if [ "${MPSGRAPHS:-0}" = 1 ] && mps_start; then
	stamp "under MPS: nccl-tests -G 10 at 4 MPI ranks, graph_capture.py at 2 ranks"
	for t in all_reduce all_gather reduce_scatter alltoall sendrecv broadcast reduce gather scatter; do
		step "${t}_perf -G 10, 4 MPI ranks, MPS" timeout 120 mpirun --allow-run-as-root --oversubscribe -x NCCL_TESTS_DEVICE=0 -x LD_PRELOAD=$LIB \
			-x NCCL_NVLS_ENABLE -x FLEXLINK_GPU_KERNELS -x CUDA_CACHE_MAXSIZE -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY \
			-np 4 $B/${t}_perf -b 8 -e 1M -f 8 -g 1 -G 10 -c 1 -n 5 -w 2
	done
	step "graph_capture.py 2 ranks, MPS" env REPLAYS=1000 timeout 240 bin/flexrun --oversubscribe --nccl --nccl-lib "$PWD/build/nccl/lib" -np 2 python3 tests/torch/graph_capture.py
	mps_stop
fi

if [ "${WITHHOLD:-0}" = 1 ]; then
	stamp "withheld all_reduce, 4 ranks (failures.py withhold)"
	start=$(date +%s.%N)
	timeout 120 bin/flexrun --oversubscribe --nccl --nccl-lib "$PWD/build/nccl/lib" -np 4 python3 tests/torch/failures.py withhold >"$OUT/withhold.log" 2>&1
	echo "exit $? after $(awk "BEGIN{print $(date +%s.%N) - $start}") s" | tee -a "$OUT/withhold.log"
	grep -E "WITHHELD|^flexrun:|rank [0-9].*(not called|withh)" "$OUT/withhold.log" | cut -c1-300 | head -12
	if mps_start; then # the calls return once enqueued: torch's 8 s watchdog sees the work time out
		stamp "withheld all_reduce, 4 ranks, MPS, FLEXLINK_GPU_ENQUEUE=async"
		start=$(date +%s.%N)
		timeout 120 env FLEXLINK_GPU_ENQUEUE=async bin/flexrun --oversubscribe --nccl --nccl-lib "$PWD/build/nccl/lib" -np 4 python3 tests/torch/failures.py withhold >"$OUT/withhold-mps.log" 2>&1
		echo "exit $? after $(awk "BEGIN{print $(date +%s.%N) - $start}") s" | tee -a "$OUT/withhold-mps.log"
		grep -E "WITHHELD|^flexrun:|rank [0-9].*(not called|withh)" "$OUT/withhold-mps.log" | cut -c1-300 | head -12
		mps_stop
	fi
fi
stamp "done: $fails failed"
