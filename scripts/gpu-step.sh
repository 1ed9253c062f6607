# Sourced by the GPU check scripts (gpu-graphs.sh, gpu-enqueue.sh): stamp,
# and step, which runs one check, appends its output to $STEPLOG, shows
# its telling lines and counts failures in $fails.
# shellcheck shell=bash
T0=$(date +%s)
stamp() { echo "== $(($(date +%s) - T0))s $*"; }
fails=0
# step NAME CMD...: PASS on exit 0 with no FAILED, SLOW or WRONG line and
# no non-zero "Out of bounds" (#wrong) count.
step() {
	local name=$1 out rc wrong
	shift
	out=$("$@" 2>&1)
	rc=$?
	{ echo "== $name"; echo "$out"; } >>"$STEPLOG"
	echo "$out" | grep -E "Out of bounds|Avg bus|SLOW|WRONG|ENQUEUE rank 0 .* iter 1|error|Error|FAIL|PASS|GRAPH-END|^flexrun:" | cut -c1-300 | tail -8
	wrong=$(echo "$out" | grep -E "^# Out of bounds values" | grep -vE ": 0 OK" | head -1)
	if [ $rc -eq 0 ] && ! echo "$out" | grep -qE "FAILED|^SLOW|^WRONG" && [ -z "$wrong" ]; then
		echo "PASS $name"
	else
		echo "FAIL $name (exit $rc)"
		fails=$((fails + 1))
	fi
}

# nccl_tests_build SRC builds nccl-tests from the checkout SRC in
# /tmp/nccl-tests against the installed NCCL's header (as users build it),
# for this GPU's architecture, as a step, and sets B to its build folder.
nccl_tests_build() {
	local cap
	[ -x /tmp/nccl-tests/build/all_reduce_perf ] || { rm -rf /tmp/nccl-tests && cp -r "$1" /tmp/nccl-tests; }
	cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
	step build timeout 300 make -s -j"$(nproc)" -C /tmp/nccl-tests MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NCCL_HOME=/usr CUDA_HOME=/usr/local/cuda \
		NVCC_GENCODE="-gencode=arch=compute_$cap,code=sm_$cap"
	B=/tmp/nccl-tests/build
}

# mps_start starts a CUDA MPS daemon of the script's own (its own pipe and
# log directories under /tmp/flexlink-mps; it changes no GPU setting) and
# exports CUDA_MPS_PIPE_DIRECTORY so that the processes started after it
# share the GPU through it; mps_stop quits it. mps_start fails (and leaves
# nothing running) where MPS is not installed.
mps_start() {
	command -v nvidia-cuda-mps-control >/dev/null || { echo "no nvidia-cuda-mps-control here"; return 1; }
	export CUDA_MPS_PIPE_DIRECTORY=/tmp/flexlink-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/flexlink-mps/log
	mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
	nvidia-cuda-mps-control -d || { unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; return 1; }
}
mps_stop() {
	[ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && echo quit | nvidia-cuda-mps-control
	unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
