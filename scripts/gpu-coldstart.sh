#!/usr/bin/env bash
# Issue 28's must-show on a one-GPU machine (nvidia-h200): the time from
# process start to the first finished allreduce, with the driver's kernel
# cache off (CUDA_CACHE_DISABLE=1) and warm, 1, 2 and 4 ranks on the one
# GPU, through flexbench and through PyTorch on flexlink's libnccl
# (flexrun --nccl), beside torch's own NCCL at 1 rank; then a short DDP run
# at 2 ranks on flexlink and on gloo. From the repository root, with
# .devbin/ (scripts/gpu-build.sh) and build/nccl (make libnccl, tag
# flexlink_noptx) carried:
#
#   bash scripts/gpu-coldstart.sh            # the committed kernels (gpu/kernels/fatbin)
#   KERNELS=1 bash scripts/gpu-coldstart.sh  # first compile them here (scripts/gpu-kernels.sh) into $OUT/fatbin
#
# Each row: the command's wall time (flexrun start to exit: launch,
# rendezvous, init, first call, teardown) and, for torch, the script's own
# FIRST line (tests/torch/first_allreduce.py: process start to import,
# init and the first all_reduce).
set -uo pipefail
B=.devbin
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 FLEXLINK_TIMEOUT=120s FLEXLINK_GPU_KERNEL_TIMEOUT=60s
for f in "$B"/*.xz build/nccl/lib/*.xz; do
	[ -e "$f" ] || continue
	xz -d -f "$f" && chmod +x "${f%.xz}"
done
unset FLEXLINK_GPU_PTX
export FLEXLINK_GPU_KERNELS=$PWD/gpu/kernels/fatbin
if [ -n "${KERNELS:-}" ]; then
	# compiled into /tmp, brought back as one tar (the device tool returns few files)
	if bash scripts/gpu-kernels.sh /tmp/fatbin >"$OUT/kernels.log" 2>&1; then
		export FLEXLINK_GPU_KERNELS=/tmp/fatbin
		tar -C /tmp -cf "$OUT/fatbin.tar" fatbin
	fi
	cat "$OUT/kernels.log"
fi
echo "kernels: $FLEXLINK_GPU_KERNELS"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
if [ -x "$B/gpu.test" ]; then
	echo "== gpu.test on these kernels"
	FLEXLINK_REQUIRE_GPU=1 timeout 300 "$B/gpu.test" -test.run 'TestGPU' -test.count=1 2>&1 | tail -5
fi
lib=$PWD/build/nccl/lib
row() { # row LABEL CMD...: one line with the wall time and what the run said
	local label=$1 t0 t1 out rc
	shift
	t0=$(date +%s.%N)
	out=$(timeout 300 "$@" 2>&1)
	rc=$?
	t1=$(date +%s.%N)
	printf '%-34s rc=%d wall=%6.2fs %s\n' "$label" $rc "$(awk "BEGIN{print $t1 - $t0}")" \
		"$(echo "$out" | grep -oE 'FIRST .*' | head -1)"
	echo "$out" | grep -E 'loaded GPU kernels' | head -3 | sed 's/^/    /'
	[ $rc -eq 0 ] || echo "$out" | tail -5 | sed 's/^/    ! /'
}
for cache in off warm; do
	if [ $cache = off ]; then
		export CUDA_CACHE_DISABLE=1
	else
		unset CUDA_CACHE_DISABLE
		export CUDA_CACHE_PATH=$OUT/cudacache
		rm -rf "$CUDA_CACHE_PATH"
		# prime: one run of each kind fills the cache
		timeout 300 $B/flexrun -np 2 --oversubscribe $B/flexbench allreduce --device gpu -b 8 -e 8 -n 1 -w 0 >/dev/null 2>&1
		timeout 300 $B/flexrun -np 2 --oversubscribe --nccl --nccl-lib "$lib" python3 tests/torch/first_allreduce.py >/dev/null 2>&1
		python3 tests/torch/first_allreduce.py >/dev/null 2>&1
	fi
	echo "== kernel cache $cache"
	for np in 1 2 4; do
		row "flexbench np=$np cache=$cache" $B/flexrun -np $np --oversubscribe -x FLEXLINK_DEBUG=INFO -x FLEXLINK_DEBUG_SUBSYS=ALL \
			$B/flexbench allreduce --device gpu -b 8 -e 8 -n 1 -w 0
	done
	for np in 1 2 4; do
		row "torch flexlink np=$np cache=$cache" $B/flexrun -np $np --oversubscribe --nccl --nccl-lib "$lib" \
			python3 tests/torch/first_allreduce.py
	done
	row "torch NCCL np=1 cache=$cache" python3 tests/torch/first_allreduce.py
	row "DDP flexlink np=2 cache=$cache" $B/flexrun -np 2 --oversubscribe --nccl --nccl-lib "$lib" \
		python3 tests/torch/first_allreduce.py --ddp 200
	row "DDP gloo np=2 cache=$cache" $B/flexrun -np 2 --oversubscribe \
		python3 tests/torch/first_allreduce.py --backend gloo --ddp 200
done
