#!/usr/bin/env bash
# Every GPU of the machine (issue 8: nvidia-h200-x4 or -x8), in one call of
# the device tool, from the repository root with .devbin/ carried
# (scripts/gpu-build.sh fills it):
#
#   NCCL_NVLS_ENABLE=0 bash .devbin/gpu-multi.sh [measure|tune]
#
# measure (the default) is issue 8's run:
# topo.txt     nvidia-smi topo -m and flexinfo's view of the same host
# tests.log    the GPU tests at NP ranks (TestGPUProcs runs one process per
#              GPU; FLEXLINK_REQUIRE_GPU=1, so a skip is a failure), then the
#              flag-kernel cases at 2 ranks (CUDA_VISIBLE_DEVICES=0,1)
# bench-<op>.log  flexbench --device gpu --backend both (flexlink and NCCL
#              in the same processes, the busbw ratio per size, each link's
#              share after every flexlink row), 1 MiB to 1 GiB: NVLink only
#              (FLEXLINK_LINKS=nvlink), then NVLink + PCIe (the defaults:
#              the balancer decides the PCIe share)
# variants.log the one-shot/two-shot limit of the flag allreduce, the store
#              allgather with its PCIe share, and the four collectives on
#              two of the GPUs beside NCCL (the 2-GPU figures, same run)
# small runs the flag kernels' GPU tests and the four collectives 64 KiB to
# 64 MiB beside NCCL (~2.5 min with NO_NVCC=1; a fresh machine spends
# 50-100 s of it JIT-compiling the PTX in the first test processes).
# net (issues 17 and 18 on 2+ GPUs): the GPU all-to-all through the PXN
# proxy with 2 emulated hosts x 2 ranks spread over the GPUs
# (rank.test TestDeviceAllToAllPXNRealGPU), TestGPUProcs' flag, push and
# pull cases (in-place all-to-all included), and flexbench with 2 ranks
# posing as hosts h0 on GPU 0 and h1 on GPU 1 over the network transport
# and the four collectives' shares with FLEXLINK_LINKS=nvlink,pcie,net
# beside the defaults and NCCL (~5 min).
# tune runs the GPU tests, then every path of each collective at NP ranks
# (flag kernels one- and two-shot, pull, push, store), the defaults beside
# NCCL, and the defaults on two of the GPUs: what the N-rank defaults were
# chosen from. Both modes bring back ptx.tgz (the PTX they ran on).
# Every step has its own time limit, cut short so that all end by DEADLINE
# (575 s; a step that would start later is skipped and says so). NP
# defaults to the GPUs this process may use (CUDA_VISIBLE_DEVICES, else
# every GPU nvidia-smi lists; at most 8).
set -uo pipefail
B=.devbin
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
if [ -z "${NP:-}" ] && [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
	NP=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
fi
NP=${NP:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
NP=$((NP > 8 ? 8 : NP))
if [ "$NP" -lt 2 ]; then
	echo "gpu-multi.sh: $NP GPUs here; this run needs at least 2" >&2
	exit 1
fi
DEADLINE=575
PTXOUT=/tmp/flexlink-ptx # 8 files come back: the PTX only matters after a kernel change (gpu-device.sh check)
. "$(dirname "$0")/gpu-common.sh"

mode=${1:-measure}
case $mode in
measure | tune | small | net) ;;
*)
	echo "gpu-multi.sh: unknown mode $mode (measure, tune, small)" >&2
	exit 2
	;;
esac
{
	stamp "topology, $NP GPUs"
	nvidia-smi topo -m
	nvidia-smi --query-gpu=index,name,pci.bus_id,memory.used,memory.total --format=csv
	nvidia-smi nvlink -s -i 0 2>&1 | head -24
	stamp flexinfo
	timeout 30 $B/flexinfo 2>&1 | head -60
	cat "$OUT/kernels.log" 2>/dev/null
} >"$OUT/topo.txt" 2>&1
rm -f "$OUT/kernels.log"
export FLEXLINK_CACHE_DIR=/tmp/flexlink-cache
rm -rf "$FLEXLINK_CACHE_DIR"
T1G=1099511627776 # "every size"

if [ "$mode" = small ]; then
	# The flag kernels' tests and the small and middle sizes beside NCCL.
	{
		stamp "rank tests at $NP ranks"
		ranktests 200 'TestGPUProcs/(direct-flag$|direct-flag-all)' 12 # the first processes JIT the PTX: 50-100 s
	} >"$OUT/tests.log" 2>&1
	for op in allreduce allgather reducescatter alltoall; do
		{
			stamp "$op 64 KiB-64 MiB, $NP ranks, defaults, beside NCCL"
			bench 25 $op --backend both -b 64K -e 64M -f 4 "${must[@]}"
		} >"$OUT/bench-${op/reducescatter/rs}.log" 2>&1
	done
	stamp done >>"$OUT/tests.log"
	summary 200
	exit 0
fi

if [ "$mode" = net ]; then
	{
		stamp "rank.test: GPU all-to-all through the PXN proxy, 2 emulated hosts x 2 ranks over $NP GPUs"
		if limit=$(budget 150); then
			timeout "$limit" $B/rank.test -test.run '^TestDeviceAllToAllPXNRealGPU' -test.v -test.timeout $((limit - 3))s 2>&1 |
				grep -E -v '^\S+ \[(INFO|DEBUG)\]' | tail -30
		fi
		stamp "direct.test TestGPUProcs at $NP ranks (in-place all-to-all on the flag, push and pull paths)"
		ranktests 150 'TestGPUProcs/(direct-flag$|direct-push|direct-pull)' 20
	} >"$OUT/tests.log" 2>&1
	for op in allreduce allgather alltoall sendrecv; do
		stamp "flexbench $op, 2 ranks as hosts h0 (GPU 0) and h1 (GPU 1) over the network transport"
		limit=$(budget 60) || break
		timeout "$limit" $B/flexrun -np 2 -x FLEXLINK_NET=tcp sh -c \
			'FLEXLINK_HOSTNAME=h$FLEXLINK_RANK exec '$B'/flexbench '$op' --device gpu -b 1K -e 64M -f 16 -n 5 -w 2 -c 1' 2>&1 |
			grep -v 'link up' | head -40
	done >"$OUT/bench-twohosts-2gpu.log" 2>&1
	# The NIC as a third link within the host (FLEXLINK_LINKS=nvlink,pcie,net):
	# the balancer's shares per row beside the defaults and NCCL, 2 GPUs.
	for links in default nvlink,pcie,net; do
		for op in allgather allreduce; do
			stamp "$op, 2 GPUs, FLEXLINK_LINKS=$links, beside NCCL"
			if [ "$links" = default ]; then
				CUDA_VISIBLE_DEVICES=0,1 NP=2 bench 50 $op --backend both -b 64M -e 1G -f 4 -n 20 -w 5
			else
				CUDA_VISIBLE_DEVICES=0,1 NP=2 FLEXLINK_LINKS=$links bench 50 $op --backend both -b 64M -e 1G -f 4 -n 20 -w 5
			fi
		done
	done >"$OUT/bench-net-link.log" 2>&1
	summary 200
	exit 0
fi

if [ "$mode" = tune ]; then
	# Which path is fastest at NP ranks, size by size (docs/PERF.md).
	{
		stamp "rank tests at $NP ranks"
		ranktests 150 'TestGPUProcs/(direct-flag$|direct-flag-all|direct-pull|direct-store-pcie)' 30
	} >"$OUT/tests.log" 2>&1
	{
		stamp "allreduce, defaults, beside NCCL"
		bench 35 allreduce --backend both -b 1M -e 1G -f 4 "${must[@]}"
		stamp "allreduce, handshake read allreduce (FLEXLINK_GPU_FLAG_BYTES=0; the default beyond two ranks before the two-shot)"
		FLEXLINK_GPU_FLAG_BYTES=0 bench 30 allreduce -b 1M -e 1G -f 4 "${must[@]}"
		stamp "allreduce, flag kernels one-shot for every size (FLEXLINK_GPU_FLAG_ONESHOT_BYTES=1T)"
		FLEXLINK_GPU_FLAG_BYTES=$T1G FLEXLINK_GPU_FLAG_ONESHOT_BYTES=$T1G bench 25 allreduce -b 256K -e 64M -f 4 "${must[@]}"
		stamp "allreduce, flag two-shot from 256 KiB (FLEXLINK_GPU_FLAG_ONESHOT_BYTES=128K)"
		FLEXLINK_GPU_FLAG_BYTES=$T1G FLEXLINK_GPU_FLAG_ONESHOT_BYTES=131072 bench 25 allreduce -b 256K -e 16M -f 4 "${must[@]}"
		stamp "allreduce, push (FLEXLINK_GPU_ALLREDUCE=push)"
		FLEXLINK_GPU_ALLREDUCE=push bench 25 allreduce -b 16M -e 1G -f 4 "${must[@]}"
	} >"$OUT/bench-allreduce.log" 2>&1
	for op in allgather alltoall; do
		{
			stamp "$op, defaults, beside NCCL"
			bench 35 $op --backend both -b 1M -e 1G -f 4 "${must[@]}"
			stamp "$op, flag kernels for every size (FLEXLINK_GPU_FLAG_COLL_BYTES=1T)"
			FLEXLINK_GPU_FLAG_COLL_BYTES=$T1G bench 25 $op -b 1M -e 1G -f 4 "${must[@]}"
			stamp "$op, pull"
			FLEXLINK_GPU_ALLGATHER=pull FLEXLINK_GPU_ALLTOALL=pull bench 25 $op -b 1M -e 1G -f 4 "${must[@]}"
			stamp "$op, push (copy engines)"
			FLEXLINK_GPU_ALLGATHER=push FLEXLINK_GPU_ALLTOALL=push bench 25 $op -b 16M -e 1G -f 4 "${must[@]}"
		} >"$OUT/bench-$op.log" 2>&1
	done
	{
		stamp "reducescatter, defaults, beside NCCL"
		bench 35 reducescatter --backend both -b 1M -e 1G -f 4 "${must[@]}"
		stamp "reducescatter, flag kernels for every size (FLEXLINK_GPU_FLAG_COLL_BYTES=1T)"
		FLEXLINK_GPU_FLAG_COLL_BYTES=$T1G bench 25 reducescatter -b 1M -e 1G -f 4 "${must[@]}"
		stamp "allgather, flag kernels for every size, FLEXLINK_GPU_FLAG_BLOCKS=64"
		FLEXLINK_GPU_FLAG_COLL_BYTES=$T1G FLEXLINK_GPU_FLAG_BLOCKS=64 bench 25 allgather -b 16M -e 1G -f 4 "${must[@]}"
		stamp "allgather, push, FLEXLINK_GPU_COPY_STREAMS=2"
		FLEXLINK_GPU_ALLGATHER=push FLEXLINK_GPU_COPY_STREAMS=2 bench 25 allgather -b 16M -e 1G -f 4 "${must[@]}"
		stamp "two GPUs (CUDA_VISIBLE_DEVICES=0,1): allreduce and allgather defaults beside NCCL"
		CUDA_VISIBLE_DEVICES=0,1 NP=2 bench 30 allreduce --backend both -b 1M -e 1G -f 4 "${must[@]}"
		CUDA_VISIBLE_DEVICES=0,1 NP=2 bench 30 allgather --backend both -b 1M -e 1G -f 4 "${must[@]}"
	} >"$OUT/bench-rs.log" 2>&1
	stamp done >>"$OUT/tests.log"
	summary 400
	exit 0
fi

{
	stamp "rank tests at $NP ranks"
	ranktests 200 'TestGPUProcs/(direct-flag$|direct-flag-all|direct-push|direct-pcie|direct-pull|direct-store-pcie)' 60
	stamp "rank tests at 2 ranks (CUDA_VISIBLE_DEVICES=0,1)"
	CUDA_VISIBLE_DEVICES=0,1 ranktests 100 'TestGPUProcs/direct-flag' 30
	stamp "gpu package tests"
	timeout 40 $B/gpu.test -test.run '^TestGPU' -test.timeout 35s 2>&1 | tail -4
} >"$OUT/tests.log" 2>&1

for op in allreduce allgather reducescatter alltoall; do
	{
		stamp "$op 1 MiB-1 GiB, $NP ranks, FLEXLINK_LINKS=nvlink, beside NCCL"
		FLEXLINK_LINKS=nvlink bench 35 $op --backend both -b 1M -e 1G -f 4 "${must[@]}"
		stamp "$op 1 MiB-1 GiB, $NP ranks, NVLink + PCIe (defaults, the balancer), beside NCCL"
		bench 40 $op --backend both -b 1M -e 1G -f 4 -n 40 -w 10
	} >"$OUT/bench-${op/reducescatter/rs}.log" 2>&1
done
{
	for v in 1048576 4194304; do
		stamp "allreduce 256 KiB-16 MiB, $NP ranks, FLEXLINK_GPU_FLAG_ONESHOT_BYTES=$v"
		FLEXLINK_GPU_FLAG_ONESHOT_BYTES=$v bench 25 allreduce -b 256K -e 16M -f 2 "${must[@]}"
	done
	stamp "allgather 64 MiB-1 GiB, $NP ranks, store with the PCIe share (FLEXLINK_GPU_ALLGATHER=store)"
	FLEXLINK_GPU_ALLGATHER=store bench 25 allgather -b 64M -e 1G -f 4 -n 40 -w 10
	for op in allreduce allgather reducescatter alltoall; do
		stamp "$op 64 KiB-1 GiB, 2 ranks (CUDA_VISIBLE_DEVICES=0,1), defaults, beside NCCL"
		CUDA_VISIBLE_DEVICES=0,1 NP=2 bench 30 $op --backend both -b 64K -e 1G -f 4 "${must[@]}"
	done
} >"$OUT/variants.log" 2>&1
stamp done >>"$OUT/tests.log"
summary 400
