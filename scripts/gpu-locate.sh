#!/usr/bin/env bash
# Issue 29 item 4 on the GPU machine (nvidia-h200): the C library's
# small-message fast path against the real driver. From the repository
# root with build/nccl (make libnccl) carried:
#
#   bash scripts/gpu-locate.sh [ITERS]
#
# builds capi/testdata/nccl_locate.c against the machine's CUDA runtime
# and flexlink's libnccl.so.2 and runs it on GPU 0: allreduces on
# cudaMalloc'd buffers freed and allocated again at the same address (a
# new CU_POINTER_ATTRIBUTE_BUFFER_ID: results must be the new bytes), on
# ncclMemAlloc'd memory and on host buffers, then the host time per call
# of an 8-byte allreduce on device buffers. NCCL_DEBUG is unset: the run
# must print nothing on stderr (the library is silent by default).
# Output in $OUT/locate.log; exit status that of nccl_locate.
set -uo pipefail
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
iters=${1:-20000}
for f in build/nccl/lib/*.xz; do # gpu-build.sh compresses the library
	[ -e "$f" ] && xz -d -f "$f"
done
[ -f build/nccl/lib/libnccl.so.2 ] || make -s libnccl
export FLEXLINK_GPU_KERNELS=${FLEXLINK_GPU_KERNELS:-$PWD/gpu/kernels/fatbin}
unset NCCL_DEBUG FLEXLINK_DEBUG
cuda=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}
cc -O2 -Wall -Iinclude -I"$cuda/include" -o "$OUT/nccl_locate" capi/testdata/nccl_locate.c \
	-Lbuild/nccl/lib -l:libnccl.so.2 -Wl,-rpath,"$PWD/build/nccl/lib" -L"$cuda/lib64" -lcudart || exit 1
"$OUT/nccl_locate" "$iters" >"$OUT/locate.log" 2>"$OUT/locate.err"
rc=$?
cat "$OUT/locate.log"
if [ -s "$OUT/locate.err" ]; then
	echo "stderr (want none with NCCL_DEBUG unset):"
	cat "$OUT/locate.err"
	[ "$rc" -eq 0 ] && rc=1
fi
echo "nccl_locate exit $rc"
exit "$rc"
