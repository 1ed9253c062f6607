#!/usr/bin/env bash
# Issue 29's CUDA graph checks on a one-GPU machine (nvidia-h200) with the
# real NCCL installed (header and library), from the repository root with
# flexlink's build/nccl (make libnccl, or scripts/gpu-build.sh's) carried:
#
#   bash scripts/gpu-graphs.sh NCCL_TESTS_SRC
#
# NCCL_TESTS_SRC is a checkout of NVIDIA/nccl-tests. It is built against the
# installed NCCL's header, as users build it (scripts/nccl-tests-readme.sh
# does the same and shares /tmp/nccl-tests), then:
#  1. every perf binary with -G 10 -c 1 (capture 10 iterations in a CUDA
#     graph, replay, check) at 1 rank, on NCCL and on our library
#     (LD_PRELOAD), and without -G on ours, and -C 1 (host time per call)
#     beside NCCL's;
#  2. tests/torch/graph_capture.py at 1 rank on torch's NCCL and on ours
#     (torch.cuda.graph of all_reduce, all_gather_into_tensor,
#     reduce_scatter_tensor, all_to_all_single, broadcast, reduce; REPLAYS
#     replays with new inputs, each checked);
#  3. nccl-tests -G 10 -c 1 with 2 MPI ranks on GPU 0 (every binary) and 4
#     (all_reduce), and graph_capture.py at 2 ranks (flexrun --nccl): ranks
#     sharing a GPU replay on the flag kernels, each call waiting for the
#     other process's time slice without MPS (slow, milliseconds a call;
#     right);
#  4. on a machine of 2+ GPUs, with .devbin/direct.test carried:
#     TestGPUProcsCapture (the flag kernels captured and replayed, one
#     process per GPU).
# Each step prints PASS or FAIL (exit 0, no "FAILED", "#wrong" 0); exit 1
# on any FAIL of steps 1-2. Logs go to $OUT (default /tmp/flexlink-out).
set -uo pipefail
src=${1:?usage: gpu-graphs.sh NCCL_TESTS_SRC}
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUDA_CACHE_MAXSIZE=4294967296
LIB=$PWD/build/nccl/lib/libnccl.so.2
if [ ! -f "$LIB" ] && [ -f "$LIB.xz" ]; then xz -d -k "$LIB.xz"; fi
[ -n "${FLEXLINK_GPU_KERNELS:-}" ] || export FLEXLINK_GPU_KERNELS=$PWD/gpu/kernels/fatbin
STEPLOG=$OUT/graphs.log
source scripts/gpu-step.sh
: >"$OUT/graphs.log"

stamp "build nccl-tests against the installed NCCL"
[ -x /tmp/nccl-tests/build/all_reduce_perf ] || { rm -rf /tmp/nccl-tests && cp -r "$src" /tmp/nccl-tests; }
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi
step build timeout 300 make -s -j16 -C /tmp/nccl-tests MPI=1 MPI_HOME=$MPI_HOME NCCL_HOME=/usr CUDA_HOME=/usr/local/cuda \
	NVCC_GENCODE="-gencode=arch=compute_$cap,code=sm_$cap"
B=/tmp/nccl-tests/build

stamp "nccl-tests -G 10 -c 1, 1 rank: NCCL, then ours"
for t in all_reduce all_gather reduce_scatter alltoall sendrecv broadcast reduce gather scatter; do
	[ -x $B/${t}_perf ] || { echo "SKIP ${t}_perf (not built)"; continue; }
	step "${t}_perf -G 10 NCCL" timeout 120 $B/${t}_perf -b 8 -e 16M -f 8 -g 1 -G 10 -c 1
	step "${t}_perf -G 10 flexlink" timeout 120 env LD_PRELOAD=$LIB $B/${t}_perf -b 8 -e 16M -f 8 -g 1 -G 10 -c 1
	step "${t}_perf flexlink (eager)" timeout 120 env LD_PRELOAD=$LIB $B/${t}_perf -b 8 -e 16M -f 8 -g 1 -c 1
done

stamp "host time per call (-C 1), allreduce 8 B-64 KiB"
for lib in NCCL flexlink; do
	pre=()
	[ $lib = flexlink ] && pre=(env LD_PRELOAD=$LIB)
	echo "-- $lib"
	timeout 120 "${pre[@]}" $B/all_reduce_perf -b 8 -e 64K -f 4 -g 1 -C 1 -n 1000 -w 50 2>&1 | grep -E "^ +[0-9]" | tee -a "$OUT/graphs.log"
	echo "-- $lib -G 10"
	timeout 120 "${pre[@]}" $B/all_reduce_perf -b 8 -e 64K -f 4 -g 1 -G 10 -n 1000 -w 50 2>&1 | grep -E "^ +[0-9]" | tee -a "$OUT/graphs.log"
done

stamp "torch.cuda.graph, 1 rank: torch's NCCL, then ours"
export REPLAYS=${REPLAYS:-1000}
step "graph_capture.py NCCL" timeout 240 python3 tests/torch/graph_capture.py
step "graph_capture.py flexlink" timeout 240 env LD_PRELOAD=$LIB python3 tests/torch/graph_capture.py

if [ -x .devbin/flexrun ] || [ -f .devbin/flexrun.xz ]; then
	[ -x .devbin/flexrun ] || { xz -d -k .devbin/flexrun.xz && chmod +x .devbin/flexrun; }
	stamp "torch.cuda.graph, 2 ranks on GPU 0"
	step "graph_capture.py flexlink 2 ranks" env REPLAYS=100 timeout 240 .devbin/flexrun -np 2 --oversubscribe --nccl --nccl-lib "$PWD/build/nccl/lib" python3 tests/torch/graph_capture.py
fi

stamp "nccl-tests -G 10 -c 1, MPI ranks on GPU 0 (ours; NCCL refuses two ranks on one GPU)"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x NCCL_TESTS_DEVICE=0 -x LD_PRELOAD=$LIB -x NCCL_NVLS_ENABLE -x FLEXLINK_GPU_KERNELS -x CUDA_CACHE_MAXSIZE)
for t in all_reduce all_gather reduce_scatter alltoall sendrecv broadcast reduce gather scatter; do
	[ -x $B/${t}_perf ] || continue
	step "${t}_perf -G 10, 2 MPI ranks" timeout 180 "${MPIRUN[@]}" -np 2 $B/${t}_perf -b 8 -e 1M -f 8 -g 1 -G 10 -c 1 -n 5 -w 2
done
step "all_reduce_perf -G 10, 4 MPI ranks" timeout 240 "${MPIRUN[@]}" -np 4 $B/all_reduce_perf -b 8 -e 1M -f 8 -g 1 -G 10 -c 1 -n 5 -w 2
ngpu=$(nvidia-smi -L | wc -l)
if [ "$ngpu" -ge 2 ]; then
	# The flag kernels under capture need GPUs of their own: a 2+ GPU kind,
	# with .devbin/direct.test (scripts/gpu-build.sh) carried.
	[ -x .devbin/direct.test ] || { [ -f .devbin/direct.test.xz ] && xz -d -k .devbin/direct.test.xz && chmod +x .devbin/direct.test; }
	if [ -x .devbin/direct.test ]; then
		stamp "TestGPUProcsCapture on $ngpu GPUs"
		step TestGPUProcsCapture timeout 300 env FLEXLINK_REQUIRE_GPU=1 .devbin/direct.test -test.run 'TestGPUProcsCapture$' -test.v -test.timeout 290s
	fi
fi
stamp "done: $fails failed"
[ $fails -eq 0 ]
