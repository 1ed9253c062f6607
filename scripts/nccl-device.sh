#!/usr/bin/env bash
# Runs flexlink's libnccl.so.2 on the GPU machine (no Go there: build here
# with `make libnccl build` and carry build/nccl, bin/flexrun, this script
# and examples/torch_ddp.py).
#
#   scripts/nccl-device.sh NCCL_TESTS_SRC [NCCL_DIR]
#
# NCCL_TESTS_SRC: a checkout of NVIDIA/nccl-tests (fetched separately).
# NCCL_DIR: our include/ and lib/ (default build/nccl).
#
# 1. builds nccl-tests with MPI=1 against the system NCCL's header, as users
#    do: nccl-tests needs NCCL's device API (nccl_device.h), which flexlink
#    does not provide (a build against our header stops at its #error);
# 2. runs all_reduce, all_gather, reduce_scatter, alltoall, sendrecv and
#    broadcast -b 8 -e 256M -f 4 -c 1 with -g 1 on the system NCCL and on
#    ours (LD_PRELOAD), then as 2 and 4 MPI ranks on GPU 0
#    (NCCL_TESTS_DEVICE=0) on ours only;
# 3. runs examples/torch_ddp.py as 2 ranks under flexrun with LD_PRELOAD.
# Logs go to $OUT (default ./nccl-device-out); the summary ends the output.
set -uo pipefail
SRC=${1:?usage: $0 NCCL_TESTS_SRC [NCCL_DIR]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NCCL_DIR=$(cd "${2:-$ROOT/build/nccl}" && pwd)
OUT=${OUT:-$PWD/nccl-device-out}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# Ubuntu keeps OpenMPI's headers and libraries under /usr/lib/<arch>/openmpi:
# ask mpicc where mpi.h is.
if [ -z "${MPI_HOME:-}" ]; then
  inc=$(mpicc -showme:incdirs 2>/dev/null | tr ' ' '\n' | while read -r d; do [ -f "$d/mpi.h" ] && echo "$d" && break; done)
  MPI_HOME=$(dirname "${inc:-$(dirname "$(command -v mpicc)")/include}")
fi
GENCODE=${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90} # the machine's GPUs only: the build takes minutes for every arch
TESTS=${NCCL_TESTS:-all_reduce all_gather reduce_scatter alltoall sendrecv broadcast}
ARGS="-b 8 -e 256M -f 4 -c 1"
STEPS=${NCCL_STEPS:-g1 np2 np4 torch} # which parts run (gpu-one.sh splits them over device calls)
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
summary=()

build() { # name nccl_home
  local b=$OUT/nccl-tests-$1
  rm -rf "$b" && cp -r "$SRC" "$b"
  make -C "$b/src" -j16 MPI=1 MPI_HOME="$MPI_HOME" NCCL_HOME="$2" CUDA_HOME="$CUDA_HOME" NVCC_GENCODE="$GENCODE" >"$OUT/build-$1.log" 2>&1 ||
    { echo "build of nccl-tests against $1 failed: see $OUT/build-$1.log"; return 1; }
}

check() { # label log
  local wrong
  wrong=$(grep -E '# Out of bounds values|#wrong' -A0 "$2" | head -1)
  if grep -qE '^ *# Avg bus bandwidth' "$2" && ! grep -qE 'Out of bounds values : [1-9]' "$2"; then
    summary+=("PASS $1 ($(grep -E '# Avg bus bandwidth' "$2" | sed 's/.*: *//') GB/s avg busbw)")
  else
    summary+=("FAIL $1: see $2 ${wrong}")
    echo "== FAIL $1: the end of $2"
    grep -v '^ *$' "$2" | tail -25
  fi
}

OURS=0 SYS=0
if has g1 || has np2 || has np4; then
  NCCL_SYS=${NCCL_SYS:-/usr}
  # One build, against the system NCCL's header; ours runs it preloaded.
  build system "$NCCL_SYS" && SYS=1 && OURS=1
  has g1 || SYS=0
fi

for t in $TESTS; do
  if [ "$SYS" = 1 ]; then
    log=$OUT/system-$t-g1.log
    timeout 120 "$OUT/nccl-tests-system/build/${t}_perf" $ARGS -g 1 >"$log" 2>&1
    check "system NCCL ${t} -g 1" "$log"
  fi
  [ "$OURS" = 1 ] || continue
  log=$OUT/ours-$t-g1.log
  if has g1; then
    LD_LIBRARY_PATH=$NCCL_DIR/lib LD_PRELOAD=$NCCL_DIR/lib/libnccl.so.2 NCCL_DEBUG=INFO \
      timeout 120 "$OUT/nccl-tests-system/build/${t}_perf" $ARGS -g 1 >"$log" 2>&1
    check "flexlink ${t} -g 1" "$log"
  fi
  for np in 2 4; do
    has np$np || continue
    log=$OUT/ours-$t-np$np.log
    timeout 120 mpirun --allow-run-as-root --oversubscribe -np $np \
      -x NCCL_TESTS_DEVICE=0 -x LD_PRELOAD=$NCCL_DIR/lib/libnccl.so.2 -x LD_LIBRARY_PATH=$NCCL_DIR/lib \
      -x NCCL_NVLS_ENABLE -x NCCL_DEBUG=INFO \
      "$OUT/nccl-tests-system/build/${t}_perf" $ARGS -g 1 >"$log" 2>&1
    check "flexlink ${t} $np MPI ranks on GPU 0" "$log"
  done
done

# PyTorch DDP, 2 ranks sharing GPU 0, our library preloaded (torch's
# libtorch_cuda.so finds the wheel's NCCL through its RPATH, so
# LD_LIBRARY_PATH would not reach ours; LD_PRELOAD does).
log=$OUT/torch-ddp.log
FLEXRUN=${FLEXRUN:-$ROOT/bin/flexrun}
[ -x "$FLEXRUN" ] || FLEXRUN=$ROOT/.devbin/flexrun
has torch && timeout 300 "$FLEXRUN" -np 2 --oversubscribe --tag-output --nccl --nccl-lib "$NCCL_DIR/lib" \
  -x NCCL_DEBUG=INFO -x TORCH_DDP_DEVICE=0 \
  python3 "$ROOT/examples/torch_ddp.py" >"$log" 2>&1
if has torch; then
  if grep -q "torch_ddp: ok" "$log"; then summary+=("PASS torch DDP 2 ranks"); else summary+=("FAIL torch DDP: see $log"); tail -30 "$log"; fi
fi

echo "== nccl-device summary =="
printf '%s\n' "${summary[@]}"
! printf '%s\n' "${summary[@]}" | grep -q '^FAIL'
