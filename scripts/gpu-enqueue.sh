#!/usr/bin/env bash
# Issue 29's enqueue-and-return checks on a one-GPU machine (nvidia-h200),
# from the repository root with bin/flexrun and build/nccl carried (make
# build libnccl, or the flexlink_noptx builds with gpu/kernels/fatbin):
#
#   bash scripts/gpu-enqueue.sh NCCL_TESTS_SRC
#
# Ranks sharing the GPU meet inside it only under CUDA MPS (docs/GPU.md):
# the multi-rank checks run under an MPS daemon of the script's own
# (mps_start, scripts/gpu-step.sh), with FLEXLINK_GPU_ENQUEUE=async.
#
#  1. tests/torch/enqueue.py at 1 rank (beside torch's own NCCL) and at 2
#     and 4 ranks under MPS: all_reduce behind a 300 ms kernel returns in at
#     most 100 us, runs after the kernel, and is right; 2 ranks without MPS
#     (the leader path: the call waits for the kernel) is the control;
#  2. nccl-tests built against the installed NCCL header, every binary at
#     2 MPI ranks under MPS, eager and (GRAPHS) -G 10, all_reduce and
#     alltoall at 4, -c 1;
#  3. tests/torch/failures.py (scripts/gpu-failures.sh), without MPS.
# Each step prints PASS or FAIL; logs go to $OUT (default /tmp/flexlink-out).
set -uo pipefail
src=${1:?usage: gpu-enqueue.sh NCCL_TESTS_SRC}
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUDA_CACHE_MAXSIZE=4294967296
# Enqueue-and-return at every size is opt-in (FLEXLINK_GPU_ENQUEUE, docs/GPU.md): on here.
export FLEXLINK_GPU_ENQUEUE=${FLEXLINK_GPU_ENQUEUE:-async}
LIB=$PWD/build/nccl/lib/libnccl.so.2
if [ ! -f "$LIB" ] && [ -f "$LIB.xz" ]; then xz -d -k "$LIB.xz"; fi
[ -n "${FLEXLINK_GPU_KERNELS:-}" ] || export FLEXLINK_GPU_KERNELS=$PWD/gpu/kernels/fatbin
FR=(bin/flexrun --oversubscribe --nccl --nccl-lib "$PWD/build/nccl/lib")
STEPLOG=$OUT/enqueue.log
source scripts/gpu-step.sh
: >"$OUT/enqueue.log"

# PARTS picks the parts to run (default all): torch, nccl, failures.
PARTS=${PARTS:-torch nccl failures}
part() { [[ " $PARTS " == *" $1 "* ]]; }
if part torch; then
stamp "a 300 ms kernel before all_reduce"
step "enqueue.py 1 rank, torch's NCCL" timeout 120 python3 tests/torch/enqueue.py
step "enqueue.py 1 rank, flexlink" timeout 120 env LD_PRELOAD=$LIB python3 tests/torch/enqueue.py
if mps_start; then
	step "enqueue.py 2 ranks, flexlink, MPS" timeout 180 "${FR[@]}" -np 2 python3 tests/torch/enqueue.py
	step "enqueue.py 4 ranks, flexlink, MPS" timeout 300 "${FR[@]}" -np 4 python3 tests/torch/enqueue.py
	mps_stop
fi
step "enqueue.py 2 ranks, no MPS: the leader path (expected SLOW)" timeout 180 "${FR[@]}" -np 2 python3 tests/torch/enqueue.py
fails=$((fails - 1)) # the run without MPS is the control: it must be SLOW
grep -q "^SLOW" <(sed -n '/no MPS: the leader path/,$p' "$OUT/enqueue.log") || { echo "FAIL control: without MPS the call did not wait"; fails=$((fails + 2)); }

fi

if part nccl; then
stamp "build nccl-tests against the installed NCCL"
[ -x /tmp/nccl-tests/build/all_reduce_perf ] || { rm -rf /tmp/nccl-tests && cp -r "$src" /tmp/nccl-tests; }
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi
step build timeout 300 make -s -j16 -C /tmp/nccl-tests MPI=1 MPI_HOME=$MPI_HOME NCCL_HOME=/usr CUDA_HOME=/usr/local/cuda \
	NVCC_GENCODE="-gencode=arch=compute_$cap,code=sm_$cap"
B=/tmp/nccl-tests/build
mps_start || echo "no MPS: the 2- and 4-rank runs take the leader path"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x NCCL_TESTS_DEVICE=0 -x LD_PRELOAD=$LIB -x NCCL_NVLS_ENABLE -x FLEXLINK_GPU_KERNELS -x CUDA_CACHE_MAXSIZE -x FLEXLINK_GPU_ENQUEUE -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY)
stamp "nccl-tests, 2 MPI ranks on GPU 0, eager and -G 10"
# GRAPHS: the binaries also run with -G 10 (default: three, to fit a
# device session; GRAPHS="all_reduce ... scatter" for every one).
GRAPHS=${GRAPHS:-all_reduce all_gather reduce_scatter alltoall sendrecv broadcast reduce gather scatter}
for t in all_reduce all_gather reduce_scatter alltoall sendrecv broadcast reduce gather scatter; do
	step "${t}_perf 2 MPI ranks" timeout 180 "${MPIRUN[@]}" -np 2 $B/${t}_perf -b 8 -e 4M -f 8 -g 1 -c 1 -n 5 -w 2
	if [[ " $GRAPHS " == *" $t "* ]]; then
		step "${t}_perf -G 10, 2 MPI ranks" timeout 180 "${MPIRUN[@]}" -np 2 $B/${t}_perf -b 8 -e 1M -f 8 -g 1 -G 10 -c 1 -n 5 -w 2
	fi
done
stamp "nccl-tests, 4 MPI ranks on GPU 0"
for t in all_reduce alltoall; do
	step "${t}_perf 4 MPI ranks" timeout 240 "${MPIRUN[@]}" -np 4 $B/${t}_perf -b 8 -e 1M -f 8 -g 1 -c 1 -n 5 -w 2
done
mps_stop
fi

if part failures; then
	stamp "failures (scripts/gpu-failures.sh)"
	bash scripts/gpu-failures.sh 2>&1 | tee -a "$OUT/enqueue.log" | grep -E "^(PASS|FAIL)|WITHHELD|^flexrun" | cut -c1-400
	[ "${PIPESTATUS[0]}" -eq 0 ] || fails=$((fails + 1))
fi
stamp "done: $fails failed"
[ $fails -eq 0 ]
