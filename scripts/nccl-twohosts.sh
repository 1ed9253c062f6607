#!/usr/bin/env bash
# The anchor for the "two hosts on one GPU" figures: on a one-GPU machine,
# 2 MPI ranks on GPU 0 posing as two hosts, the real NCCL over its socket
# transport on loopback (NCCL_HOSTID per rank, P2P and SHM off), and in
# the same run flexlink's flexbench the same way (FLEXLINK_HOSTNAME,
# tcp provider), 4 MiB and 64 MiB allreduce and allgather. Runs ON the GPU
# machine from the repository root with .devbin/ (scripts/gpu-build.sh)
# and .devbin/nccl-tests (a checkout of NVIDIA/nccl-tests) carried.
set -uo pipefail
B=.devbin
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
NP=2 NO_NVCC=1 PTXOUT=/tmp/flexlink-ptx
. "$(dirname "$0")/gpu-common.sh" # FLEXLINK_GPU_PTX: the committed PTX
for f in "$B"/*.xz; do [ -e "$f" ] && xz -d -f "$f" && chmod +x "${f%.xz}"; done
inc=$(mpicc -showme:incdirs 2>/dev/null | tr ' ' '\n' | while read -r d; do [ -f "$d/mpi.h" ] && echo "$d" && break; done)
MPI_HOME=$(dirname "${inc:-/usr/include}")
b=/tmp/nccl-tests-sys
rm -rf "$b" && cp -r "$B/nccl-tests" "$b"
make -C "$b/src" -j16 MPI=1 MPI_HOME="$MPI_HOME" NCCL_HOME=/usr CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} \
	NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 >"$OUT/build.log" 2>&1 ||
	{ echo "nccl-tests build failed"; tail -5 "$OUT/build.log"; }
export NCCL_NVLS_ENABLE=0
for t in all_reduce all_gather; do
	echo "== NCCL $t, 2 ranks as two hosts (socket transport on lo)"
	timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_TESTS_DEVICE=0 -x NCCL_NVLS_ENABLE \
		-x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 -x NCCL_NET=Socket -x NCCL_SOCKET_IFNAME=lo \
		sh -c 'NCCL_HOSTID=h$OMPI_COMM_WORLD_RANK exec '$b'/build/'$t'_perf -b 4M -e 64M -f 16 -g 1 -c 1 -n 5 -w 2' 2>&1 |
		grep -E '^ +[0-9]|Avg bus|Out of bounds|rror' | head -8
	op=${t/_/}
	echo "== flexlink $op, 2 ranks as two hosts (tcp provider on lo)"
	timeout 120 $B/flexrun -np 2 --oversubscribe -x FLEXLINK_NET=tcp sh -c \
		'FLEXLINK_HOSTNAME=h$FLEXLINK_RANK exec '$B'/flexbench '$op' --device gpu -b 4M -e 64M -f 16 -n 5 -w 2 -c 1' 2>&1 |
		grep -E '^ +[0-9]' | head -4
done
