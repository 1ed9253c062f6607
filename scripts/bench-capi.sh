#!/usr/bin/env bash
# The C API's per-call overhead on small host buffers beside the Go API, in
# one run on this machine: flexbench (Go API) and scripts/nccl_overhead.c
# (the same allreduce through flexlink's libnccl.so.2), 2 ranks over shm.
#   scripts/bench-capi.sh [ITERS]
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-2000}
make -s build libnccl >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -DFLEXLINK_NCCL_NO_CUDA -Ibuild/nccl/include -o "$tmp/nccl_overhead" scripts/nccl_overhead.c -Lbuild/nccl/lib -lnccl -Wl,-rpath,"$PWD/build/nccl/lib"
echo "== $(date -u +%F) $(nproc) cores; 2 ranks, allreduce float sum, host buffers (shm)"
echo "== Go API: flexbench"
bin/flexrun -np 2 --oversubscribe bin/flexbench allreduce -b 8 -e 64K -f 8 -n "$iters" -w 100 -c 1 --no-inplace | grep -E '^ +[0-9]'
echo "== C API: libnccl.so.2 (nccl_overhead.c)"
bin/flexrun -np 2 --oversubscribe "$tmp/nccl_overhead" "$tmp/id" "$iters"
