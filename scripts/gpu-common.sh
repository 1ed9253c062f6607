# Sourced by gpu-device.sh (two GPUs) and gpu-multi.sh (every GPU of the
# machine) on the GPU machine, from the repository root with .devbin/
# carried: the environment every run shares, stamp, the kernels compiled
# with the machine's nvcc (FLEXLINK_GPU_PTX points at them; `compiled` says
# whether they were), and the bench and ranktests helpers. Needs B, OUT and
# NP set by the caller; the PTX goes to PTXOUT (default OUT).
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

# Kernels: where nvcc exists, compile gpu/kernels (carried as
# .devbin/kernels) to PTX, keep the files in $PTXOUT (they are what
# gpu/kernels commits) and run everything below on them.
K=$B/kernels # the kernel sources: the working tree's when the device tool copied it
if [ -f gpu/kernels/reduce.cu ]; then K=gpu/kernels; fi
if [ -d $K ] && [ -z "${NO_NVCC:-}" ]; then # NO_NVCC=1: run on the committed PTX (saves ~40 s when the kernels have not changed)
	nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1)
	{
		stamp "nvcc: ${nvcc:-none}"
		rm -f "$PTXOUT"/reduce_sm*.ptx # never an earlier call's PTX (PTXOUT may outlive the call)
		if [ -n "$nvcc" ]; then
			"$nvcc" --version | tail -2
			(cd $K && "$nvcc" -ptx -arch=sm_90 -O3 -std=c++17 -o "$PTXOUT/reduce_sm90.ptx" reduce.cu) &
			p90=$!
			(cd $K && "$nvcc" -ptx -arch=compute_80 -O3 -std=c++17 -o "$PTXOUT/reduce_sm80.ptx" reduce.cu) &
			p80=$!
			if ! wait $p90 || ! wait $p80; then
				echo "nvcc failed"
				rm -f "$PTXOUT"/reduce_sm*.ptx
			fi
			(cd $K && "$nvcc" -cubin -arch=sm_90 -O3 -std=c++17 -Xptxas -v -o /tmp/reduce.cubin reduce.cu 2>&1 | grep -A1 flexlink_flag_sum_f32 | head -4)
			ls -l "$PTXOUT"/*.ptx
		fi
		stamp kernels done
	} >"$OUT/kernels.log" 2>&1
	if [ -s "$PTXOUT/reduce_sm90.ptx" ]; then export FLEXLINK_GPU_PTX=$PTXOUT/reduce_sm90.ptx; fi
fi
# The binaries carry no PTX (gpu-build.sh: tag flexlink_noptx): without
# nvcc here, run on the committed PTX of the working tree.
compiled=1
if [ -z "${FLEXLINK_GPU_PTX:-}" ]; then
	compiled=0
	export FLEXLINK_GPU_PTX=$PWD/gpu/kernels/reduce_sm90.ptx
	if [ ! -f "$FLEXLINK_GPU_PTX" ]; then
		echo "$0: no nvcc here and no gpu/kernels/reduce_sm90.ptx (run from the repository root with the tree)" >&2
		exit 1
	fi
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
