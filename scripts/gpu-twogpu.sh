#!/usr/bin/env bash
# Issue 29's rows on two GPUs (nvidia-h200-x2), both libraries in one run,
# from the repository root with bin/flexrun and build/nccl carried:
#
#   bash scripts/gpu-twogpu.sh NCCL_TESTS_SRC
#
# nccl-tests is built against the installed NCCL header (as users build
# it) and each binary runs at 2 MPI ranks, one per GPU, first on NCCL and
# then on flexlink's library (LD_PRELOAD), eager and replayed (-G 10),
# 8 B-1 MiB with -c 1 (every result checked). PARTS picks:
#   small  the nine binaries, both libraries, eager and -G 10 (default)
#   async  all_reduce and all_gather on flexlink with FLEXLINK_GPU_ENQUEUE=async
#   large  all_reduce, all_gather, reduce_scatter, alltoall 1 MiB-1 GiB, both
#          (LARGEF: the size factor, 4; LARGEASYNC=1 adds flexlink with
#          FLEXLINK_GPU_ENQUEUE=async, as flexlink-async)
#   torch  tests/torch/graph_capture.py, enqueue.py, compile_tp.py at 2 ranks
#   torchasync  enqueue.py at 2 ranks with FLEXLINK_GPU_ENQUEUE=async
#   torchnccl  enqueue.py at 2 ranks on torch's own NCCL (the anchor)
#   coll   the flag kernels' per-peer limit: the collectives but allreduce,
#          1 MiB-128 MiB, NCCL, flexlink, and flexlink with
#          FLEXLINK_GPU_FLAG_COLL_BYTES=$COLL (flexlink-coll; default 16 MiB)
#   tests  .devbin/direct.test (go test -c ./collectives/direct, carried):
#          TestGPUProcs' flag cases and TestGPUProcsCapture, the sweep
#          against the float64 reference at 2 ranks
#   lines  all_reduce and all_gather on flexlink with FLEXLINK_GPU_FLAG_LINES=0
#   mps    works on one GPU too: under an MPS daemon of the script's own,
#          direct.test TestGPUProcsEnqueue (the sweep at 2 and 4 ranks on
#          GPU 0: flag kernels and lines) and TestGPUProcsMismatch, then
#          the nine binaries on flexlink at 2 and 4 ranks on GPU 0 (-c 1;
#          NCCL refuses ranks sharing a GPU; MPSRANKS="" skips them,
#          MPSRANKS=2 runs 2 only); TestGPUProcsMismatch again
#          without MPS (the leader path)
#   profile  rank 0's CPU profile of flexlink's library (FLEXLINK_CPU_PROFILE)
#          over PROFN (20000) eager 8-byte all_reduce and sendrecv calls, to
#          $OUT/prof-<test>.pb.gz (go tool pprof -top FILE)
#   again  all_reduce and all_gather once more, the libraries alternating
#          (eager times move with the host's noise from run to run)
#   record replayed (-G 10) all_reduce, all_gather, broadcast, reduce and
#          sendrecv with each FLEXLINK_GPU_GRAPH_RECORD (chain, branch, auto),
#          beside NCCL
#   ab     another build of flexlink's library beside this one (LIBB: its
#          path, a libnccl.so.2 built from a variant), as flexlink-b, and
#          NCCL: ABTESTS (default the seven collectives and sendrecv)
#          from ABB to ABE (default 64K, 1M), eager and -G 10
#   kab    the kernels as committed (KERNELSA, a copy of gpu/kernels/fatbin;
#          default .devbin/fatbin-a, carried) beside those of this tree
#          (KERNELS=1 compiles them), both through this library, as
#          flexlink-a and flexlink, and NCCL: ABTESTS (default
#          all_reduce all_gather broadcast sendrecv) from ABB to ABE
#          (default 8, 64K), replayed (-G 10; KABEAGER=1 adds eager)
#   cputime  all_reduce, broadcast and sendrecv 8 B-64 KiB eager with -C 1
#          (host time per call instead of the GPU's), both libraries
#   iters  sendrecv and all_reduce eager 8 B-32 KiB at -n 200, 2000 and
#          20000 (-w 20) and -n 200 -w 2000, both libraries: whether a
#          row's time is the steady state's or the first calls' (the
#          twenty-third session's eager sendrecv: 13 us at -n 200, 8.9 at
#          -n 20000)
#   timeline  scripts/eager_timeline.c (built here with mpicc against the
#          installed NCCL): eager 8-byte allreduce and grouped send/recv,
#          2000 calls each between timing events, both libraries twice,
#          alternating: the host's time per call, the stream's time in a
#          call and between calls (PARTS=timeline alone skips nccl-tests)
#   nodes  scripts/graph_node_probe.cu: what an event record, a copy or a
#          second kernel beside a small kernel costs, replayed and eager
#          (one GPU; PARTS=nodes alone skips building nccl-tests)
# KERNELS=1 first compiles gpu/kernels (scripts/gpu-kernels.sh) and runs on
# those kernels, bringing them back as $OUT/fatbin.tar. KPATCH=FILE first
# applies a patch (patch -p1) to the machine's copy of the tree: a kernel
# variant, compiled by KERNELS=1 and measured against the committed
# kernels by PARTS=kab (scripts/patches/*.diff; to keep it, apply the same
# patch here and commit it with the fatbin.tar it brought back).
# Rows go to $OUT/twogpu.log, every step's whole output to
# $OUT/twogpu-steps.log (default OUT=/tmp/flexlink-out).
set -uo pipefail
src=${1:?usage: gpu-twogpu.sh NCCL_TESTS_SRC}
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUDA_CACHE_MAXSIZE=4294967296
LIB=$PWD/build/nccl/lib/libnccl.so.2
[ -n "${FLEXLINK_GPU_KERNELS:-}" ] || export FLEXLINK_GPU_KERNELS=$PWD/gpu/kernels/fatbin
STEPLOG=$OUT/twogpu-steps.log
source scripts/gpu-step.sh
LOG=$OUT/twogpu.log
: >"$LOG"
PARTS=${PARTS:-small}
part() { [[ " $PARTS " == *" $1 "* ]]; }

{
	nvidia-smi topo -m
	nvidia-smi --query-gpu=index,name,memory.used --format=csv
} >>"$LOG" 2>&1
if [ -n "${KPATCH:-}" ]; then
	{ patch -p1 -i "$KPATCH" || git apply "$KPATCH"; } >>"$STEPLOG" 2>&1 || { stamp "KPATCH $KPATCH does not apply" | tee -a "$LOG"; exit 1; }
	stamp "applied $KPATCH" | tee -a "$LOG"
fi
if [ "${KERNELS:-0}" = 1 ]; then
	stamp "compiling gpu/kernels"
	step kernels timeout 400 bash scripts/gpu-kernels.sh /tmp/flexlink-fatbin/fatbin
	tail -3 "$STEPLOG" >>"$LOG"
	tar -C /tmp/flexlink-fatbin -cf "$OUT/fatbin.tar" fatbin
	export FLEXLINK_GPU_KERNELS=/tmp/flexlink-fatbin/fatbin
fi
[ "$PARTS" = nodes ] || [ "$PARTS" = timeline ] || nccl_tests_build "$src"

# one LIB TEST ARGS...: one nccl-tests run at 2 MPI ranks, one per GPU;
# its rows and #wrong line to $LOG under a header, the whole output to
# $STEPLOG through step.
one() {
	local lib=$1 t=$2 pre=()
	shift 2
	[[ "$lib" == flexlink* ]] && pre=(-x LD_PRELOAD=$LIB -x FLEXLINK_GPU_FLAG_LINES)
	[[ "$lib" == flexlink-b ]] && pre=(-x LD_PRELOAD=${LIBB:?LIBB: the other library} -x FLEXLINK_GPU_FLAG_LINES)
	[[ "$lib" == flexlink-a ]] && local -x FLEXLINK_GPU_KERNELS=$KERNELSA # the other kernels (part kab)
	echo "-- 2 GPUs $lib $t $*" >>"$LOG"
	step "$lib $t $*" timeout 120 mpirun --allow-run-as-root --bind-to none "${pre[@]}" -x NCCL_NVLS_ENABLE -x FLEXLINK_GPU_KERNELS \
		-x CUDA_CACHE_MAXSIZE -x FLEXLINK_GPU_ENQUEUE -x FLEXLINK_GPU_FLAG_COLL_BYTES -x FLEXLINK_GPU_GRAPH_RECORD -np 2 $B/${t}_perf -g 1 -c 1 "$@"
	grep -E "^ +[0-9]|Out of bounds|Avg bus" <(tail -n +1 "$STEPLOG" | tac | sed '/^== /q' | tac) >>"$LOG"
}
# pair LIB TEST: one eager run and one replayed (-G 10), 8 B-1 MiB.
pair() {
	one "$1" "$2" -b 8 -e 1M -f 2 -n 200 -w 20
	one "$1" "$2" -b 8 -e 1M -f 2 -n 200 -w 20 -G 10
}
export FLEXLINK_GPU_GRAPH_RECORD=${FLEXLINK_GPU_GRAPH_RECORD:-auto}
export FLEXLINK_GPU_ENQUEUE=${FLEXLINK_GPU_ENQUEUE:-sync} FLEXLINK_GPU_FLAG_LINES=${FLEXLINK_GPU_FLAG_LINES:-1} FLEXLINK_GPU_FLAG_COLL_BYTES=${FLEXLINK_GPU_FLAG_COLL_BYTES:--1}

if part small; then
	stamp "nine binaries, 8 B-1 MiB, NCCL then flexlink, eager and -G 10"
	for t in all_reduce all_gather reduce_scatter alltoall sendrecv broadcast reduce gather scatter; do
		for lib in NCCL flexlink; do pair $lib $t; done
	done
fi
if part tests; then
	stamp "direct.test: the flag sweep at 2 ranks against the float64 reference"
	step "TestGPUProcs flag cases" env FLEXLINK_REQUIRE_GPU=1 timeout 300 .devbin/direct.test -test.run '^TestGPUProcs$/^(direct-flag|direct-flag-all|direct-flag-wrap)$' -test.v -test.timeout 290s
	step "TestGPUProcsCapture" env FLEXLINK_REQUIRE_GPU=1 timeout 200 .devbin/direct.test -test.run '^TestGPUProcsCapture$' -test.v -test.timeout 190s
	grep -E "^(--- |    --- |ok|FAIL|PASS)" "$STEPLOG" | tail -20 >>"$LOG"
fi
if part lines; then
	stamp "flexlink FLEXLINK_GPU_FLAG_LINES=0"
	for t in all_reduce all_gather; do
		FLEXLINK_GPU_FLAG_LINES=0 pair flexlink-nolines $t
	done
fi
if part again; then
	stamp "all_reduce and all_gather again, alternating"
	for t in all_reduce all_gather; do
		for lib in flexlink NCCL; do pair $lib $t; done
	done
fi
if part mps; then
	stamp "under MPS on GPU 0"
	if mps_start; then
		step "TestGPUProcsEnqueue, MPS" env FLEXLINK_REQUIRE_GPU=1 timeout 240 .devbin/direct.test -test.run '^TestGPUProcsEnqueue$' -test.v -test.timeout 230s
		step "TestGPUProcsMismatch, MPS" env FLEXLINK_REQUIRE_GPU=1 timeout 150 .devbin/direct.test -test.run '^TestGPUProcsMismatch$' -test.v -test.timeout 140s
		grep -E "^(--- |    --- |ok|FAIL|PASS)|against .*after" "$STEPLOG" | tail -24 >>"$LOG"
		for np in ${MPSRANKS-2 4}; do
			for t in all_reduce all_gather reduce_scatter alltoall sendrecv broadcast reduce gather scatter; do
				echo "-- GPU 0 MPS flexlink $t np $np" >>"$LOG"
				step "flexlink $t np $np MPS" timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_TESTS_DEVICE=0 -x LD_PRELOAD=$LIB \
					-x NCCL_NVLS_ENABLE -x FLEXLINK_GPU_KERNELS -x CUDA_CACHE_MAXSIZE -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -x FLEXLINK_GPU_FLAG_LINES \
					-np $np $B/${t}_perf -g 1 -c 1 -b 8 -e 1M -f 4 -n 50 -w 5
				grep -E "^ +[0-9]|Out of bounds" <(tail -n +1 "$STEPLOG" | tac | sed '/^== /q' | tac) >>"$LOG"
			done
		done
		mps_stop
	fi
	step "TestGPUProcsMismatch, no MPS" env FLEXLINK_REQUIRE_GPU=1 timeout 150 .devbin/direct.test -test.run '^TestGPUProcsMismatch$' -test.v -test.timeout 140s
	grep -E "^(--- |    --- |ok|FAIL|PASS)|against .*after" "$STEPLOG" | tail -12 >>"$LOG"
fi
if part profile; then
	stamp "CPU profiles of rank 0, 20000 eager 8-byte calls"
	for t in all_reduce sendrecv; do
		step "profile $t" timeout 120 mpirun --allow-run-as-root --bind-to none -x LD_PRELOAD=$LIB -x NCCL_NVLS_ENABLE -x FLEXLINK_GPU_KERNELS \
			-x CUDA_CACHE_MAXSIZE -x FLEXLINK_GPU_FLAG_LINES -x FLEXLINK_CPU_PROFILE_SECONDS=60 -np 2 \
			sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then export FLEXLINK_CPU_PROFILE='"$OUT/prof-$t.pb.gz"'; fi; exec '"$B/${t}_perf"' -g 1 -b 8 -e 8 -n '"${PROFN:-20000}"' -w 100'
		grep -E "^ +[0-9]" <(tail -n +1 "$STEPLOG" | tac | sed '/^== /q' | tac) >>"$LOG"
	done
fi
if part async; then
	stamp "flexlink FLEXLINK_GPU_ENQUEUE=async"
	for t in all_reduce all_gather; do
		FLEXLINK_GPU_ENQUEUE=async pair flexlink $t
	done
fi
if part large; then
	stamp "1 MiB-1 GiB, NCCL then flexlink"
	for t in all_reduce all_gather reduce_scatter alltoall; do
		for lib in NCCL flexlink; do
			one $lib $t -b 1M -e 1G -f "${LARGEF:-4}" -n 20 -w 5
		done
		[ "${LARGEASYNC:-0}" = 1 ] && FLEXLINK_GPU_ENQUEUE=async one flexlink-async $t -b 1M -e 1G -f "${LARGEF:-4}" -n 20 -w 5
	done
fi
if part torch; then
	stamp "torch at 2 ranks, one GPU each"
	R=(bin/flexrun --nccl --nccl-lib "$PWD/build/nccl/lib" -np 2 python3)
	step "graph_capture.py" env REPLAYS=1000 timeout 240 "${R[@]}" tests/torch/graph_capture.py
	step "enqueue.py" timeout 120 "${R[@]}" tests/torch/enqueue.py
	step "compile_tp.py" timeout 200 "${R[@]}" tests/torch/compile_tp.py
fi
if part coll; then
	stamp "the flag kernels' per-peer limit: FLEXLINK_GPU_FLAG_COLL_BYTES=${COLL:=16777216}"
	for t in all_gather reduce_scatter alltoall sendrecv broadcast reduce gather scatter; do
		for lib in NCCL flexlink; do one $lib $t -b 1M -e 128M -f 2 -n 20 -w 5; done
		FLEXLINK_GPU_FLAG_COLL_BYTES=$COLL one flexlink-coll $t -b 1M -e 128M -f 2 -n 20 -w 5
	done
fi
if part torchnccl; then
	stamp "torch enqueue.py at 2 ranks, torch's own NCCL"
	step "enqueue.py NCCL" timeout 120 bin/flexrun -np 2 python3 tests/torch/enqueue.py
fi
if part torchasync; then
	stamp "torch enqueue.py at 2 ranks, FLEXLINK_GPU_ENQUEUE=async"
	step "enqueue.py async" env FLEXLINK_GPU_ENQUEUE=async timeout 120 bin/flexrun --nccl --nccl-lib "$PWD/build/nccl/lib" -np 2 python3 tests/torch/enqueue.py
fi
if part record; then
	stamp "FLEXLINK_GPU_GRAPH_RECORD: chain, branch, auto; replayed"
	for t in all_reduce all_gather broadcast reduce sendrecv; do
		one NCCL $t -b 8 -e 1M -f 2 -n 200 -w 20 -G 10
		for m in chain branch auto; do
			FLEXLINK_GPU_GRAPH_RECORD=$m one flexlink-$m $t -b 8 -e 1M -f 2 -n 200 -w 20 -G 10
		done
	done
fi
# abrows OTHER MODE...: ABTESTS from ABB to ABE in each MODE ("" eager,
# "-G 10" replayed): NCCL, OTHER (flexlink-b or flexlink-a) and flexlink.
abrows() {
	local other=$1 t g
	shift
	for t in $ABTESTS; do
		for g in "$@"; do
			for lib in NCCL "$other" flexlink; do one $lib $t -b $ABB -e $ABE -f 2 -n 200 -w 20 $g; done
		done
	done
}
if part ab; then
	: "${ABB:=64K}" "${ABE:=1M}" "${ABTESTS:=all_reduce all_gather reduce_scatter alltoall broadcast reduce sendrecv}"
	stamp "flexlink beside flexlink-b ($LIBB), $ABB-$ABE"
	abrows flexlink-b "" "-G 10"
fi
if part kab; then
	: "${KERNELSA:=$PWD/.devbin/fatbin-a}" "${ABB:=8}" "${ABE:=64K}" "${ABTESTS:=all_reduce all_gather broadcast sendrecv}"
	stamp "kernels $KERNELSA (flexlink-a) beside $FLEXLINK_GPU_KERNELS (flexlink), $ABB-$ABE"
	if [ "${KABEAGER:-0}" = 1 ]; then abrows flexlink-a "-G 10" ""; else abrows flexlink-a "-G 10"; fi
fi
if part iters; then
	stamp "eager sendrecv and all_reduce against the iteration count"
	for t in sendrecv all_reduce; do
		for nw in "200 20" "2000 20" "20000 20" "200 2000"; do
			set -- $nw
			for lib in NCCL flexlink; do one $lib $t -b 8 -e 32K -f 8 -n $1 -w $2; done
		done
	done
fi
if part cputime; then
	stamp "host time per call (-C 1), 2 ranks"
	for t in all_reduce broadcast sendrecv; do
		for lib in NCCL flexlink; do one $lib $t -b 8 -e 64K -f 8 -n 2000 -w 50 -C 1; done
	done
fi
if part timeline; then
	stamp "eager timeline: 8-byte allreduce and send/recv between timing events"
	step "build eager_timeline" mpicc -O2 -I/usr/local/cuda/include -o /tmp/eager_timeline scripts/eager_timeline.c -L/usr/local/cuda/lib64 -lcudart -lnccl
	for round in 1 2; do
		for lib in NCCL flexlink; do
			pre=()
			[ $lib = flexlink ] && pre=(-x LD_PRELOAD=$LIB -x FLEXLINK_GPU_FLAG_LINES)
			echo "-- timeline $lib round $round" >>"$LOG"
			step "timeline $lib $round" timeout 120 mpirun --allow-run-as-root --bind-to none "${pre[@]}" -x NCCL_NVLS_ENABLE -x FLEXLINK_GPU_KERNELS \
				-x CUDA_CACHE_MAXSIZE -np 2 /tmp/eager_timeline 2000
			grep "^TIMELINE" <(tail -n +1 "$STEPLOG" | tac | sed '/^== /q' | tac) >>"$LOG"
		done
	done
fi
if part nodes; then
	stamp "graph_node_probe"
	cc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1)
	step "build graph_node_probe" "$cc" -O3 -arch=sm_90 -std=c++17 -o /tmp/graph_node_probe scripts/graph_node_probe.cu
	step "graph_node_probe" timeout 60 /tmp/graph_node_probe 2000
	tail -n +1 "$STEPLOG" | tac | sed '/^== /q' | tac >>"$LOG"
fi
stamp "done: $fails failed" | tee -a "$LOG"
