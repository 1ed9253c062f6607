#!/usr/bin/env bash
# What runs ON the GPU machine, in one call of the device tool, from the
# repository root with .devbin/ carried (scripts/gpu-build.sh fills it):
#
#   .devbin/gpu-device.sh [quick|dev|full]
#
# Logs go to $OUT (8 files at most): topo.txt, tests.log (the GPU tests with
# FLEXLINK_REQUIRE_GPU=1, so a skip is a failure), bench-<op>.log
# (flexbench --device gpu --backend both: flexlink and NCCL in the same
# processes, 1 MiB to 1 GiB, with the busbw ratio per size), variants.log
# (flexlink under other settings: push allreduce, 4 copy streams) and
# anchor.log (NCCL through PyTorch). Every step has its own time limit.
#   quick  tests + allreduce/allgather, fewer iterations  (~2 min)
#   dev    tests + 4 collectives + variants               (~4.5 min)
#   full   dev + gpu/nccl package tests + the anchor      (~6.5 min)
set -uo pipefail
B=.devbin
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
mode=${1:-full}
export NCCL_NVLS_ENABLE=0 FLEXLINK_REQUIRE_GPU=1 FLEXLINK_TIMEOUT=120s
T0=$(date +%s)
stamp() { echo "== $(($(date +%s) - T0))s $*"; }
iters=(-n 20 -w 5)
ops=(allreduce allgather reducescatter alltoall)
if [ "$mode" = quick ]; then iters=(-n 10 -w 3) ops=(allreduce allgather); fi
bench() { # bench LIMIT OP ARGS...: two ranks, one per GPU
	local limit=$1 op=$2
	shift 2
	timeout "$limit" $B/flexrun -np 2 $B/flexbench "$op" --device gpu "$@" 2>&1
	echo "flexbench exit $?"
}

{
	stamp topology
	nvidia-smi topo -m
	nvidia-smi --query-gpu=index,name,pci.bus_id,memory.used,memory.total --format=csv
	timeout 30 $B/flexinfo 2>&1 | head -40
} >"$OUT/topo.txt" 2>&1

{
	stamp rank tests
	timeout 90 $B/rank.test -test.run 'TestGPU(Procs|OneProcess)' -test.v -test.timeout 85s 2>&1 | grep -v '^=== RUN'
	echo "rank.test exit ${PIPESTATUS[0]}"
	if [ "$mode" = full ]; then
		stamp gpu and nccl package tests
		timeout 90 $B/gpu.test -test.timeout 85s 2>&1 | tail -5
		timeout 60 $B/nccl.test -test.timeout 55s 2>&1 | tail -5
	fi
} >"$OUT/tests.log" 2>&1

for op in "${ops[@]}"; do
	{
		stamp "flexbench $op"
		bench 75 "$op" --backend both -b 1M -e 1G -f 4 "${iters[@]}"
	} >"$OUT/bench-$op.log" 2>&1
done

if [ "$mode" != quick ]; then
	{
		stamp "allreduce, push algorithm"
		FLEXLINK_GPU_ALLREDUCE=auto bench 30 allreduce -b 16M -e 1G -f 4 "${iters[@]}"
		stamp "allreduce, push algorithm, 4 copy streams per peer"
		FLEXLINK_GPU_ALLREDUCE=auto FLEXLINK_GPU_COPY_STREAMS=4 bench 30 allreduce -b 64M -e 1G -f 4 "${iters[@]}"
		stamp "allgather, 4 copy streams per peer"
		FLEXLINK_GPU_COPY_STREAMS=4 bench 30 allgather -b 64M -e 1G -f 4 "${iters[@]}"
	} >"$OUT/variants.log" 2>&1
fi

if [ "$mode" = full ] && [ -f $B/nccl_baseline.py ]; then
	{
		stamp anchor
		PYTHONUNBUFFERED=1 timeout 120 python3 $B/nccl_baseline.py nccl 2>&1 | tail -40
	} >"$OUT/anchor.log" 2>&1
fi
stamp done >>"$OUT/tests.log"
grep -h "^==\|ratio\|Out of bounds\|exit\|^--- \|^    --- \|cases over\|wrong" "$OUT"/*.log | head -90
