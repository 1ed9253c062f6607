#!/usr/bin/env bash
# Issue 30, a withheld collective whose calls return once enqueued: the
# flag kernels take every eager call under CUDA MPS (one GPU) and on
# separate GPUs, so the waiting ranks' all_reduce returns and its kernel
# waits inside the GPU while rank 1 withholds it (tests/torch/failures.py
# withhold: a group with an 8 s timeout, rank 1 sleeps 60 s). The waiting
# ranks report rank 1 (capi/stalls_enqueued.go: after
# FLEXLINK_STALL_REPORT with no call of theirs, or at once when torch's
# watchdog aborts), and flexrun's verdict must name rank 1 as the cause,
# within the group timeout and a few seconds (before: whichever waiting
# rank torch's watchdog ended first). FLEXLINK_GPU_ENQUEUE=async makes
# every size enqueue. From the repository root with bin/flexrun and
# build/nccl carried (make build libnccl):
#
#   bash scripts/gpu-withheld-enqueued.sh          # MPS on GPU 0, and 2 GPUs when there are
#
# Prints PASS/FAIL per setting with what flexrun and the ranks said.
# The time limit is loose: torch's watchdog catches the 8 s timeout on
# time but takes the process down 60 s later, on its own NCCL too (2xH200,
# 2026-11-29: 79.6 s on flexlink, naming rank 1; 77.5 s on NCCL, naming
# rank 0, killed by the watchdog's abort). With 2+ GPUs the script runs
# that anchor after flexlink's job.
set -uo pipefail
source scripts/gpu-step.sh # mps_start, mps_stop
# Binaries built with -tags flexlink_noptx (the device tool's) embed no kernels.
[ -n "${FLEXLINK_GPU_KERNELS:-}" ] || export FLEXLINK_GPU_KERNELS=$PWD/gpu/kernels/fatbin
export NCCL_NVLS_ENABLE=0 FLEXLINK_GPU_ENQUEUE=async FLEXLINK_GPU_KERNEL_TIMEOUT=${FLEXLINK_GPU_KERNEL_TIMEOUT:-60s}
FR="bin/flexrun --oversubscribe --nccl --nccl-lib $PWD/build/nccl/lib"
now() { date +%s.%N; }

# check NAME NP: one withhold job, its verdict checked.
check() {
	local name=$1 np=$2 start out rc took first
	start=$(now)
	out=$(timeout 120 $FR -np "$np" python3 tests/torch/failures.py withhold 2>&1)
	rc=$?
	took=$(awk "BEGIN{print $(now) - $start}")
	echo "$out" | grep -E "WITHHELD-ERROR|^flexrun:" | cut -c1-400 | head -6
	first=$(echo "$out" | grep -E "^flexrun: " | head -1)
	if [ $rc -ne 0 ] && echo "$first" | grep -qE "^flexrun: rank 1 \(.*(did not take part in|\(it had not called it\))" && awk "BEGIN{exit !($took < 100)}"; then
		echo "PASS $name: flexrun names rank 1 as the withholder, ${took}s (exit $rc)"
	else
		echo "FAIL $name: flexrun's first line: ${first:-none}; ${took}s (exit $rc)"
		fails=$((fails + 1))
	fi
}

# PROBE=1: instead, where the waiting ranks are held: the 2-GPU job once
# with torch's logs, the library's goroutines at 20 s
# (FLEXLINK_STACK_DUMP_AFTER) and rank 0's native stacks at 25 s (gdb),
# all to $OUT/withheld-probe*.
if [ "${PROBE:-0}" = 1 ]; then
	OUT=${OUT:-/tmp/flexlink-out}
	mkdir -p "$OUT"
	start=$(now)
	TORCH_CPP_LOG_LEVEL=INFO TORCH_NCCL_TRACE_BUFFER_SIZE=0 FLEXLINK_STACK_DUMP_AFTER=20s timeout 120 $FR -np 2 --timestamp-output --tag-output python3 tests/torch/failures.py withhold >"$OUT/withheld-probe.log" 2>&1 &
	job=$!
	sleep 25
	gdb=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
	for pid in $(pgrep -f "tests/torch/failures.py withhold" | grep -v $job); do
		echo "=== pid $pid at $(awk "BEGIN{print $(now) - $start}") s: $(tr '\0' ' ' </proc/$pid/cmdline | cut -c1-80)"
		[ -n "$gdb" ] && timeout 30 "$gdb" -p "$pid" -batch -ex "thread apply all bt 16" 2>&1 | grep -E "^Thread|^#" | cut -c1-220 | head -400
	done >"$OUT/withheld-probe-native.txt" 2>&1
	wait $job
	echo "exit $? after $(awk "BEGIN{print $(now) - $start}") s"
	exit 0
fi

if [ "${MPS:-1}" = 0 ]; then
	echo "SKIP MPS: MPS=0"
elif mps_start; then
	check "withheld all_reduce, 4 ranks on GPU 0 under MPS" 4
	mps_stop
else
	echo "SKIP MPS: no MPS daemon here"
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" -ge 2 ]; then
	check "withheld all_reduce, $gpus ranks on $gpus GPUs" "$gpus"
	# The anchor: the same job on torch's own NCCL (its kernels wait inside
	# the GPU too); how long it takes to end is torch's part of the time.
	start=$(now)
	out=$(timeout 150 bin/flexrun -np "$gpus" python3 tests/torch/failures.py withhold 2>&1)
	rc=$?
	echo "$out" | grep -E "WITHHELD-ERROR|^flexrun:|taking the entire process down" | cut -c1-300 | head -6
	echo "ANCHOR torch's NCCL, $gpus ranks on $gpus GPUs: ended after $(awk "BEGIN{print $(now) - $start}")s (exit $rc)"
else
	echo "SKIP separate GPUs: $gpus GPU here"
fi
echo "done: $fails failed"
[ $fails -eq 0 ]
