# Sourced by gpu-device.sh (two GPUs) and gpu-multi.sh (every GPU of the
# machine) on the GPU machine, from the repository root with .devbin/
# carried: the environment every run shares, stamp, the kernels
# (FLEXLINK_GPU_KERNELS points at them; `compiled` says whether this machine
# compiled them, NVCC=1), and the bench and ranktests helpers. Needs B, OUT
# and NP set by the caller; compiled kernels go to PTXOUT (default OUT).
# shellcheck shell=bash
export NCCL_NVLS_ENABLE=0 FLEXLINK_REQUIRE_GPU=1 FLEXLINK_TIMEOUT=120s FLEXLINK_GPU_KERNEL_TIMEOUT=${FLEXLINK_GPU_KERNEL_TIMEOUT:-10s}
T0=$(date +%s)
PTXOUT=${PTXOUT:-$OUT}
mkdir -p "$PTXOUT"
stamp() { echo "== $(($(date +%s) - T0))s $*"; }
# gpu-build.sh compresses the binaries and the library (the device tool
# carries 64 MiB): decompress what came compressed.
for f in "$B"/*.xz build/nccl/lib/*.xz; do
	[ -e "$f" ] || continue
	xz -d -f "$f" && chmod +x "${f%.xz}"
done

# Kernels: the compiled ones of the working tree (gpu/kernels/fatbin; the
# binaries carry none: gpu-build.sh builds them with the tag
# flexlink_noptx). NVCC=1 compiles them again with this machine's nvcc
# (scripts/gpu-kernels.sh, ~40 s) into $PTXOUT/fatbin and runs on those;
# $OUT/fatbin.tar brings them back to commit after a kernel change.
unset FLEXLINK_GPU_PTX
export FLEXLINK_GPU_KERNELS=$PWD/gpu/kernels/fatbin
compiled=0
if [ -n "${NVCC:-}" ]; then
	if bash scripts/gpu-kernels.sh "$PTXOUT/fatbin" >"$OUT/kernels.log" 2>&1; then
		export FLEXLINK_GPU_KERNELS=$PTXOUT/fatbin
		compiled=1
		tar -C "$PTXOUT" -cf "$OUT/fatbin.tar" fatbin
	else
		echo "scripts/gpu-kernels.sh failed: running on the committed kernels ($OUT/kernels.log)"
	fi
fi
if [ ! -f "$FLEXLINK_GPU_KERNELS/MANIFEST" ]; then
	echo "$0: no compiled kernels at $FLEXLINK_GPU_KERNELS (run from the repository root with the tree)" >&2
	exit 1
fi

iters=(-n 10 -w 3) # sizes that only show the path works
must=(-n 20 -w 5)  # the must-show: enough calls for the balancer to settle
DEADLINE=${DEADLINE:-590} # seconds after T0 by which every step has ended (the device call's limit is 600)
budget() { # budget LIMIT: LIMIT, or less where the deadline is nearer; fails when under 5 s are left
	local left=$((DEADLINE - ($(date +%s) - T0)))
	if [ "$left" -lt 5 ]; then
		echo "== skipped: ${left}s left before the ${DEADLINE}s deadline" >&2
		return 1
	fi
	echo $(($1 < left ? $1 : left))
}

bench() { # bench LIMIT OP ARGS...: NP ranks, one per GPU
	local limit op=$2
	limit=$(budget "$1") || return 0
	shift 2
	timeout "$limit" $B/flexrun -np "$NP" $B/flexbench "$op" --device gpu "$@" 2>&1 | grep -v 'link up'
	echo "flexbench exit ${PIPESTATUS[0]}"
}

ranktests() { # ranktests LIMIT PATTERN LINES: the GPU tests of package rank matching PATTERN
	local limit
	limit=$(budget "$1") || return 0
	FLEXLINK_CACHE_DIR=/tmp/flexlink-cache-tests timeout "$limit" $B/direct.test -test.run "$2" -test.v -test.timeout "$((limit - 3))s" 2>&1 |
		grep -v '^=== RUN' | grep -v 'link up' | tail -"$3"
	echo "direct.test exit ${PIPESTATUS[0]}"
}

summary() { # summary LINES [FILE...]: the lines of the logs (default: all in $OUT) worth reading in the tool's reply
	local n=$1
	shift
	[ $# -gt 0 ] || set -- "$OUT"/*.log
	grep -h -e '^==' -e ratio -e exit -e '^--- ' -e '^    --- ' -e 'cases over' -e panic -e error -e 'wrong elements' \
		-e ' flexlink/direct' -e ' nccl$' -e shares -e 'gpu memory' -e '^ok' -e '^FAIL' -e '^PASS' -e 'up to' \
		-e 'Out of bounds' -e 'pcie: ' "$@" | grep -v '\[INFO\]' | head -"$n"
}
