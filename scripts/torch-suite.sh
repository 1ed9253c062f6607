#!/usr/bin/env bash
# flexlink's PyTorch suite (tests/torch, docs/TORCH.md) on a one-GPU machine.
# Run from the repository root with .devbin/ (flexrun, from
# scripts/gpu-build.sh) and build/nccl (make libnccl) carried:
#
#   bash scripts/torch-suite.sh            # every run below, ~8 min
#   RUNS="coll-np2 train-np2" bash scripts/torch-suite.sh   # some of them
#
# Every rank uses cuda:0 (ranks share the GPU). flexlink's runs go through
# `flexrun --nccl` (our libnccl.so.2 preloaded); the real NCCL of torch's
# wheel runs the same programs as 1 rank, in the background, for
# comparison (NCCL refuses ranks sharing a GPU). Runs:
#
#   coll-np2 coll-np4      tests/torch/test_collectives.py, every section but abort
#   train-np2 train-np4    tests/torch/test_training.py (DDP, FSDP2, TP, PP)
#   abort-np2 abort-np4    test_collectives.py --only abort (alone: a library
#                          that ends the job on a sub-group abort hides nothing else)
#   nonblocking-np2        TORCH_NCCL_USE_COMM_NONBLOCKING=1, --quick basic,p2p,groups,premul
#   reghook-np2            TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1, --quick basic,realloc
#   expandable-np2         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, --quick basic,realloc
#   lazy-np2 lazy-np4      init_process_group without device_id, --quick basic,p2p,groups,threads
#   nccl-coll-np1 nccl-train-np1 nccl-abort-np1 nccl-expandable-np1   the real NCCL, 1 rank
#
# Logs (in $OUT, default /tmp/torch-suite-out): torch-flexlink.log (our runs,
# one after another), torch-nccl.log (the real NCCL's), torch-summary.log
# (the table below and every FAIL line). Each check prints `PASS name`,
# `FAIL name: detail` or `SKIP name: reason` (rank 0, after the ranks
# agree); a run that dies or hangs is a FAIL naming the check it was in.
# Exit 0: no FAIL; 1: a FAIL or a run that did not finish; 3: no FAIL, but
# some runs were not started for lack of time.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/torch-suite-out}
mkdir -p "$OUT"
T0=$(date +%s)
DEADLINE=${DEADLINE:-570} # seconds after the start by which every run has ended (the device call's limit is 600)
TMP=$(mktemp -d /tmp/torch-suite.XXXXXX) # per-run output: $OUT keeps at most a few files
RES=$TMP/results
: >"$RES"

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-2147483648} # keep the JIT-compiled kernels between processes
export FLEXLINK_CACHE_DIR=${FLEXLINK_CACHE_DIR:-/tmp/flexlink-cache}

# gpu-build.sh carries the binaries (and possibly the library) compressed.
for f in .devbin/flexrun.xz build/nccl/lib/*.xz; do
	[ -e "$f" ] || continue
	xz -d -f "$f" && chmod +x "${f%.xz}"
done
FLEXRUN=.devbin/flexrun
[ -x "$FLEXRUN" ] || FLEXRUN=bin/flexrun
LIB=$PWD/build/nccl/lib
LOG=$OUT/torch-flexlink.log
NLOG=$OUT/torch-nccl.log
SUM=$OUT/torch-summary.log
: >"$LOG"
: >"$NLOG"

stamp() { echo "== $(($(date +%s) - T0))s $*"; }
want() { # want LABEL: whether RUNS (default: all) names the run
	[ -z "${RUNS:-}" ] && return 0
	case " $RUNS " in *" $1 "*) return 0 ;; esac
	return 1
}

{
	stamp "torch suite: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
	python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())' 2>&1
	echo "flexrun: $FLEXRUN; libnccl: $LIB/libnccl.so.2 ($(ls -l "$LIB/libnccl.so.2" 2>&1 | awk '{print $5}') bytes)"
} | tee -a "$LOG" "$NLOG"
if [ ! -x "$FLEXRUN" ] || [ ! -f "$LIB/libnccl.so.2" ]; then
	echo "torch-suite: need .devbin/flexrun (scripts/gpu-build.sh) and build/nccl/lib/libnccl.so.2 (make libnccl) carried" | tee -a "$LOG"
	exit 1
fi

# run LABEL RANKS LIMIT LOGFILE [VAR=value...] -- COMMAND...: one run, bounded
# by LIMIT seconds (less where the deadline is nearer); appends its output to
# LOGFILE and one result line to $RES.
run() {
	local label=$1 np=$2 limit=$3 log=$4
	shift 4
	local envs=()
	while [ "$1" != "--" ]; do
		envs+=("$1")
		shift
	done
	shift
	want "$label" || return 0
	local left=$((DEADLINE - ($(date +%s) - T0)))
	if [ "$left" -lt 25 ]; then
		echo "$label|$np|0|0|0|not started: ${left}s left before the ${DEADLINE}s deadline|0" >>"$RES"
		stamp "$label: not started, ${left}s left" >>"$log"
		return 0
	fi
	[ "$limit" -gt "$left" ] && limit=$left
	local out=$TMP/$label.out t=$(date +%s) rc
	stamp "$label ($np ranks, limit ${limit}s): ${envs[*]} $*" >>"$log"
	env ${envs[@]+"${envs[@]}"} timeout -k 10 "$limit" "$@" >"$out" 2>&1
	rc=$?
	cat "$out" >>"$log"
	local p f s state secs=$(($(date +%s) - t))
	p=$(grep -c '^PASS ' "$out")
	f=$(grep -c '^FAIL ' "$out")
	s=$(grep -c '^SKIP ' "$out")
	if grep -q '^SUITE-END' "$out" && [ "$rc" -le 1 ]; then
		state=complete
	else
		local last
		last=$(grep '^\.\. ' "$out" | tail -1 | cut -c4-)
		if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
			state="timed out after ${limit}s in ${last:-startup}"
		else
			state="ended early (exit $rc) in ${last:-startup}"
		fi
		echo "FAIL $label:run: $state" >>"$out"
		echo "FAIL $label:run: $state; the end of its output:" >>"$log"
		grep -v '^\(PASS\|\.\.\) ' "$out" | tail -15 >>"$log"
		f=$((f + 1))
	fi
	stamp "$label: exit $rc after ${secs}s: passed $p failed $f skipped $s ($state)" >>"$log"
	echo "$label|$np|$p|$f|$s|$state|$secs" >>"$RES"
	grep '^FAIL ' "$out" >>"$TMP/fails.$label"
}

C=tests/torch/test_collectives.py
T=tests/torch/test_training.py
FR=("$FLEXRUN" -np)
NCCLOPT=(--oversubscribe --nccl --nccl-lib "$LIB")

# The real NCCL, 1 rank, in the background (it needs no kernel compile).
(
	run nccl-coll-np1 1 150 "$NLOG" -- "${FR[@]}" 1 python3 $C --label nccl-coll-np1
	run nccl-train-np1 1 120 "$NLOG" -- "${FR[@]}" 1 python3 $T --label nccl-train-np1
	run nccl-abort-np1 1 60 "$NLOG" -- "${FR[@]}" 1 python3 $C --only abort --label nccl-abort-np1
	run nccl-expandable-np1 1 60 "$NLOG" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- \
		"${FR[@]}" 1 python3 $C --quick --only basic,realloc --label nccl-expandable-np1
) &
bg=$!

# flexlink: the first run also loads (JIT-compiles, ~60 s once) the kernels.
run coll-np2 2 240 "$LOG" -- "${FR[@]}" 2 "${NCCLOPT[@]}" python3 $C --label coll-np2
run train-np2 2 150 "$LOG" -- "${FR[@]}" 2 "${NCCLOPT[@]}" python3 $T --label train-np2
run coll-np4 4 200 "$LOG" -- "${FR[@]}" 4 "${NCCLOPT[@]}" python3 $C --label coll-np4
run train-np4 4 150 "$LOG" -- "${FR[@]}" 4 "${NCCLOPT[@]}" python3 $T --label train-np4
run abort-np2 2 60 "$LOG" -- "${FR[@]}" 2 "${NCCLOPT[@]}" python3 $C --only abort --label abort-np2
run nonblocking-np2 2 90 "$LOG" TORCH_NCCL_USE_COMM_NONBLOCKING=1 -- \
	"${FR[@]}" 2 "${NCCLOPT[@]}" python3 $C --quick --only basic,p2p,groups,premul --label nonblocking-np2
run reghook-np2 2 90 "$LOG" TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 -- \
	"${FR[@]}" 2 "${NCCLOPT[@]}" python3 $C --quick --only basic,realloc --label reghook-np2
run expandable-np2 2 90 "$LOG" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- \
	"${FR[@]}" 2 "${NCCLOPT[@]}" python3 $C --quick --only basic,realloc --label expandable-np2
run lazy-np2 2 90 "$LOG" -- "${FR[@]}" 2 "${NCCLOPT[@]}" python3 $C --lazy --quick --only basic,p2p,groups,threads --label lazy-np2
run abort-np4 4 60 "$LOG" -- "${FR[@]}" 4 "${NCCLOPT[@]}" python3 $C --only abort --label abort-np4
run lazy-np4 4 90 "$LOG" -- "${FR[@]}" 4 "${NCCLOPT[@]}" python3 $C --lazy --quick --only basic,p2p,groups,threads --label lazy-np4
wait "$bg"

# Summary: the FAIL lines, then one line per run.
{
	echo "== torch suite summary after $(($(date +%s) - T0))s (logs: torch-flexlink.log, torch-nccl.log)"
	nf=$(cat "$TMP"/fails.* 2>/dev/null | wc -l)
	if [ "$nf" -gt 0 ]; then
		echo "-- FAIL lines ($nf):"
		cat "$TMP"/fails.* | cut -c1-400 | head -80
	fi
	printf '%-22s %5s %6s %6s %7s %5s  %s\n' run ranks passed failed skipped secs state
	# The real NCCL's runs (nccl-*) are a reference, not a verdict: NCCL at
	# one rank has its own answers (a PreMulSum it does not apply, float8
	# avg refused), so they are totalled apart and do not set the exit.
	tp=0 tf=0 ts=0 bad=0 notrun=0 np_=0 nf_=0 ns_=0
	while IFS='|' read -r label np p f s state secs; do
		printf '%-22s %5s %6s %6s %7s %5s  %s\n' "$label" "$np" "$p" "$f" "$s" "$secs" "$state"
		case $label in
		nccl-*) np_=$((np_ + p)) nf_=$((nf_ + f)) ns_=$((ns_ + s)) ;;
		*)
			tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
			case $state in complete) ;; "not started"*) notrun=$((notrun + 1)) ;; *) bad=$((bad + 1)) ;; esac
			;;
		esac
	done <"$RES"
	echo "NCCL (reference, 1 rank): passed $np_ failed $nf_ skipped $ns_"
	echo "TOTAL flexlink passed $tp failed $tf skipped $ts; runs not finished $bad, not started $notrun"
	echo "$tf $notrun" >"$TMP/verdict"
} | tee "$SUM"
read -r tf notrun <"$TMP/verdict"
rm -rf "$TMP"
if [ "$tf" -gt 0 ]; then exit 1; fi
if [ "$notrun" -gt 0 ]; then exit 3; fi
exit 0
