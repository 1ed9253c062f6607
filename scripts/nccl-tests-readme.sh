#!/usr/bin/env bash
# The README's nccl-tests recipe, as written, on a one-GPU machine with the
# real NCCL installed (header and library) and flexlink's build/nccl carried:
#
#   bash scripts/nccl-tests-readme.sh NCCL_TESTS_SRC
#
# NCCL_TESTS_SRC is a checkout of NVIDIA/nccl-tests (not part of this
# repository). It builds nccl-tests against the installed NCCL (only for
# this machine's GPU, to save time), runs all_reduce_perf on our library
# with 1 process (also with -R 2: window registration) and with 2 MPI ranks
# sharing GPU 0, and checks that a build against our header stops with our
# one #error. Each step prints PASS or FAIL; exit 1 on any FAIL.
set -uo pipefail
src=${1:?usage: nccl-tests-readme.sh NCCL_TESTS_SRC}
export NCCL_NVLS_ENABLE=0 CUDA_CACHE_MAXSIZE=4294967296
LIB=$PWD/build/nccl/lib/libnccl.so.2
# A library built with -tags flexlink_noptx (scripts/gpu-build.sh's way, to
# carry less) takes the kernels from the tree; make libnccl embeds them.
[ -n "${FLEXLINK_GPU_KERNELS:-}" ] || export FLEXLINK_GPU_KERNELS=$PWD/gpu/kernels/fatbin
fails=0
step() { # step NAME CMD...: run, then PASS/FAIL on exit 0 and no "FAILED" or "#wrong" count in the output
	local name=$1 out
	shift
	out=$("$@" 2>&1)
	local rc=$?
	echo "$out" | grep -E "^#|Out of bounds|Avg bus|error|Error" | tail -8
	if [ $rc -eq 0 ] && ! echo "$out" | grep -q "FAILED"; then echo "PASS $name"; else echo "FAIL $name (exit $rc)"; fails=$((fails + 1)); fi
}
[ -x /tmp/nccl-tests/build/all_reduce_perf ] || { rm -rf /tmp/nccl-tests && cp -r "$src" /tmp/nccl-tests; }
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
gen="-gencode=arch=compute_$cap,code=sm_$cap"
MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi
step build timeout 300 make -s -j16 -C /tmp/nccl-tests MPI=1 MPI_HOME=$MPI_HOME NCCL_HOME=/usr CUDA_HOME=/usr/local/cuda NVCC_GENCODE="$gen"
B=/tmp/nccl-tests/build
step "all_reduce_perf 1 process" timeout 120 env LD_PRELOAD=$LIB $B/all_reduce_perf -b 8 -e 64M -f 4 -g 1
step "all_reduce_perf 1 process -R 2" timeout 120 env LD_PRELOAD=$LIB $B/all_reduce_perf -b 8 -e 64M -f 4 -g 1 -R 2
step "alltoall_perf 1 process" timeout 120 env LD_PRELOAD=$LIB $B/alltoall_perf -b 8 -e 16M -f 4 -g 1
step "all_reduce_perf 2 MPI ranks on GPU 0" timeout 180 mpirun --allow-run-as-root -np 2 --oversubscribe -x NCCL_TESTS_DEVICE=0 -x LD_PRELOAD=$LIB -x NCCL_NVLS_ENABLE -x FLEXLINK_GPU_KERNELS -x CUDA_CACHE_MAXSIZE \
	$B/all_reduce_perf -b 8 -e 16M -f 4 -g 1
# Against our header: one #error from nccl_device.h.
rm -rf /tmp/nccl-tests-ours && cp -r "$src" /tmp/nccl-tests-ours
out=$(timeout 120 make -s -C /tmp/nccl-tests-ours NCCL_HOME=$PWD/build/nccl CUDA_HOME=/usr/local/cuda NVCC_GENCODE="$gen" 2>&1)
n=$(echo "$out" | grep -c "error")
echo "$out" | grep "error" | head -3
if echo "$out" | grep -q "nccl_device.h" && [ "$n" -le 3 ]; then echo "PASS build against our header stops at our #error ($n error lines)"; else echo "FAIL build against our header: $n error lines"; fails=$((fails + 1)); fi
echo "nccl-tests-readme: $fails failed"
[ $fails -eq 0 ]
