#!/usr/bin/env bash
# What runs ON a one-GPU machine (nvidia-h100-x1, nvidia-h200), from the
# repository root with .devbin/ (scripts/gpu-build.sh) and, for the nccl and
# torch modes, build/nccl (make libnccl) and .devbin/nccl-tests (a checkout
# of NVIDIA/nccl-tests) carried:
#
#   .devbin/gpu-one.sh tests   every GPU test on the one GPU with
#                              FLEXLINK_REQUIRE_GPU=1 (tests that need two
#                              GPUs skip, naming what is missing), flexbench's
#                              check with 1 rank, 2 and 4 ranks sharing the
#                              GPU, and 2 ranks posing as two hosts (the
#                              network transport across "hosts") (~5 min;
#                              NET_ONLY=1: only the cross-"host" parts)
#   .devbin/gpu-one.sh shared  ranks sharing the one GPU (issue 20): the
#                              device-to-device copy ceiling (gpu.test
#                              TestGPU/bandwidth/local), TestGPUProcsShared,
#                              flexbench allreduce/allgather/alltoall 1 KiB to
#                              256 MiB with 2 and 4 ranks on the leader path
#                              (the default) and 2 ranks on the event
#                              protocol (FLEXLINK_GPU_SHARED=events), then
#                              nccl-tests through libnccl.so.2 with 2 MPI
#                              ranks on the GPU when build/nccl is carried
#                              (~6 min)
#   .devbin/gpu-one.sh pxn     the PXN GPU hand-off (issue 18): rank.test
#                              TestDeviceAllToAllPXNRealGPU and
#                              TestGroupPXNRealGPU (ranks in one
#                              process: the hand-off must fall back), then
#                              flexbench alltoall on GPU buffers with 4
#                              processes on GPU 0 posing as 2 hosts x 2,
#                              PXN off, PXN 2 with the shm hand-off and PXN
#                              2 with FLEXLINK_PXN_GPU_HANDOFF=1, twice,
#                              interleaved (~4 min)
#   .devbin/gpu-one.sh nccl    nccl-tests against flexlink's libnccl.so.2 and
#                              the system NCCL, 1 process and 2 MPI ranks on
#                              GPU 0 (scripts/nccl-device.sh) (~8 min)
#   .devbin/gpu-one.sh torch   PyTorch DDP and collectives, 2 ranks under
#                              flexrun on the one GPU with our library
#                              preloaded (~3 min)
#
# Logs go to $OUT; the summary lines come last in the output.
set -uo pipefail
B=.devbin
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
mode=${1:-tests}
NP=1
PTXOUT=${PTXOUT:-/tmp/flexlink-ptx} # the PTX stays on the machine: $OUT holds at most 8 files
. "$(dirname "$0")/gpu-common.sh"
export FLEXLINK_CACHE_DIR=/tmp/flexlink-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1

wrong() { # the #wrong column of flexbench's table is the last number of each data row
	awk '/^ *[0-9]/ && NF > 8 { w += $NF } END { print "#wrong total " w+0 }' "$1"
}

case $mode in
tests)
	{
		if [ -z "${NET_ONLY:-}" ]; then
		stamp "gpu.test (driver, kernels, memory, IPC; peer parts need 2 GPUs)"
		timeout "$(budget 120)" $B/gpu.test -test.run '^TestGPU' -test.v -test.timeout 115s 2>&1 |
			grep -E '^(--- |    --- |ok|FAIL|PASS|panic)|SKIP|missing hardware' | head -60
		stamp "direct.test (the direct plane: real processes on the one GPU)"
		timeout "$(budget 200)" $B/direct.test -test.run '^TestGPU(Procs|OneProcess)' -test.v -test.timeout 195s 2>&1 |
			grep -E '^(--- |    --- |ok|FAIL|PASS|panic)|missing hardware' | head -60
		stamp "direct.test exit ${PIPESTATUS[0]}"
		fi
		stamp "rank.test (GPU all-to-all and group through the PXN proxy, 2 emulated hosts on the one GPU)"
		timeout "$(budget 120)" $B/rank.test -test.run '^(TestDeviceAllToAllPXNRealGPU|TestGroupPXNRealGPU)$' -test.v -test.timeout 115s 2>&1 |
			grep -E -v '^\S+ \[(INFO|DEBUG)\]' | tail -30
	} >"$OUT/tests.log" 2>&1
	for np in $([ -n "${NET_ONLY:-}" ] || echo 1 2 4); do
		log=$OUT/bench-np$np.log
		for op in allreduce allgather alltoall; do
			stamp "flexbench $op, $np ranks on GPU 0"
			limit=$(budget 60) || break
			timeout "$limit" $B/flexrun -np $np --oversubscribe $B/flexbench $op --device gpu -b 1K -e 256M -f 16 -n 5 -w 2 -c 1 2>&1 | grep -v 'link up'
		done >"$log" 2>&1
		wrong "$log" >>"$log"
	done
	# Two ranks on one GPU posing as two hosts: the buffers cross "hosts"
	# over the network transport (staged through pinned host memory).
	log=$OUT/bench-twohosts.log
	# The staged pipeline's chunk (FLEXLINK_GPU_STAGED_CHUNK_BYTES): the
	# default, off (0) and 16 MiB, for the collectives it cuts.
	for spec in allreduce:default allreduce:0 allreduce:16777216 allgather:default allgather:0 \
		reducescatter:default reducescatter:0 alltoall:default sendrecv:default sendrecv:0; do
		op=${spec%%:*} chunk=${spec#*:}
		env=()
		[ "$chunk" = default ] || env=(-x FLEXLINK_GPU_STAGED_CHUNK_BYTES=$chunk)
		stamp "flexbench $op, 2 ranks as hosts h0 and h1 (network transport), staged chunk $chunk"
		limit=$(budget 60) || break
		timeout "$limit" $B/flexrun -np 2 --oversubscribe -x FLEXLINK_NET=tcp "${env[@]}" sh -c \
			'FLEXLINK_HOSTNAME=h$FLEXLINK_RANK FLEXLINK_DEBUG=INFO exec '$B'/flexbench '$op' --device gpu -b 1K -e 64M -f 16 -n 5 -w 2 -c 1' 2>&1 |
			grep -v 'link up' | grep -E -v '^\S+ \[INFO\]' | head -40
	done >"$log" 2>&1
	wrong "$log" >>"$log"
	summary 80 "$OUT"/tests.log "$OUT"/bench-*.log
	grep -h '#wrong total' "$OUT"/bench-*.log
	;;
shared)
	{
		stamp "gpu.test bandwidth/local (the device-to-device copy ceiling)"
		timeout "$(budget 90)" $B/gpu.test -test.run '^TestGPU$/^bandwidth$/^local$' -test.v -test.timeout 85s 2>&1 |
			grep -E 'GB/s|^(--- |    --- |ok|FAIL|PASS|panic)|SKIP'
		stamp "direct.test TestGPUProcsShared (2 and 4 processes on GPU 0)"
		timeout "$(budget 200)" $B/direct.test -test.run '^TestGPUProcsShared$' -test.v -test.timeout 195s 2>&1 |
			grep -E '^(--- |    --- |ok|FAIL|PASS|panic)|wrong|missing hardware' | head -40
	} >"$OUT/shared-tests.log" 2>&1
	for spec in 2:leader 4:leader 2:events; do
		np=${spec%%:*} how=${spec#*:}
		log=$OUT/bench-shared-np$np-$how.log
		for op in allreduce allgather alltoall; do
			stamp "flexbench $op, $np ranks on GPU 0, FLEXLINK_GPU_SHARED=$how"
			limit=$(budget 60) || break
			timeout "$limit" $B/flexrun -np $np --oversubscribe -x FLEXLINK_GPU_SHARED=$how $B/flexbench $op --device gpu -b 1K -e 256M -f 4 -n 10 -w 3 -c 1 2>&1 | grep -v 'link up'
		done >"$log" 2>&1
		wrong "$log" >>"$log"
	done
	if [ -d build/nccl ] && [ -d "$B/nccl-tests" ]; then
		OUT=$OUT/nccl NCCL_STEPS="${NCCL_STEPS:-np2}" timeout "$(budget 240)" bash scripts/nccl-device.sh "$B/nccl-tests" build/nccl 2>&1 | tail -30
	fi
	summary 80 "$OUT"/shared-tests.log "$OUT"/bench-shared-*.log
	grep -h '#wrong total' "$OUT"/bench-shared-*.log
	;;
pxn)
	{
		stamp "rank.test TestDeviceAllToAllPXNRealGPU (one process: with the hand-off asked for, it falls back), TestGroupPXNRealGPU"
		timeout "$(budget 120)" $B/rank.test -test.run '^(TestDeviceAllToAllPXNRealGPU|TestGroupPXNRealGPU)$' -test.v -test.timeout 115s 2>&1 |
			grep -E -v '^\S+ \[(INFO|DEBUG)\]' | tail -30
	} >"$OUT/pxn-tests.log" 2>&1
	nic2=$(ls /sys/class/net | grep -v -x lo | head -1) # no iproute2 there
	log=$OUT/bench-pxn-handoff.log
	for spec in off:0 2:0 2:1 off:0 2:0 2:1; do
		level=${spec%%:*} ho=${spec#*:}
		stamp "flexbench alltoall --device gpu, 4 processes on GPU 0 as hosts h0, h1 x 2 (rails lo, $nic2), FLEXLINK_PXN=$level FLEXLINK_PXN_GPU_HANDOFF=$ho"
		limit=$(budget 80) || break
		timeout "$limit" $B/flexrun -np 4 --oversubscribe -x FLEXLINK_NET=tcp -x "FLEXLINK_NET_IFNAME==lo,$nic2" \
			-x FLEXLINK_PXN=$level -x FLEXLINK_PXN_GPU_HANDOFF=$ho sh -c \
			'FLEXLINK_HOSTNAME=h$((FLEXLINK_RANK/2)) FLEXLINK_LOCAL_RANK=$((FLEXLINK_RANK%2)) FLEXLINK_LOCAL_SIZE=2 exec '$B'/flexbench alltoall --device gpu -b 64K -e 64M -f 4 -n 10 -w 3 -c 1' 2>&1 |
			grep -v 'link up'
	done >"$log" 2>&1
	wrong "$log" >>"$log"
	summary 80 "$OUT"/pxn-tests.log "$log"
	grep -h '#wrong total' "$log"
	;;
nccl)
	OUT=$OUT/nccl NCCL_STEPS="${NCCL_STEPS:-g1 np2}" timeout "$(budget 560)" bash scripts/nccl-device.sh "$B/nccl-tests" build/nccl 2>&1 | tail -40
	;;
torch)
	OUT=$OUT/nccl NCCL_STEPS="${NCCL_STEPS:-torch}" timeout "$(budget 560)" bash scripts/nccl-device.sh "$B/nccl-tests" build/nccl 2>&1 | tail -40
	;;
*)
	echo "gpu-one.sh: unknown mode $mode (tests, shared, pxn, nccl, torch)" >&2
	exit 2
	;;
esac
