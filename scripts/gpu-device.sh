#!/usr/bin/env bash
# What runs ON the GPU machine, in one call of the device tool, from the
# repository root with .devbin/ carried (scripts/gpu-build.sh fills it):
#
#   .devbin/gpu-device.sh [perf|flagcoll|flagpcie|smalltune|flagtune|storetune|quick|dev|full]
#
# perf (the default) is the one to run: it compiles gpu/kernels with the
# machine's nvcc (every mode does, when nvcc exists, and runs on that PTX;
# the files come back in $OUT), runs every GPU test, and measures the four
# collectives and the FlexLink comparison beside NCCL (~5.5 min). Every
# mode sets FLEXLINK_GPU_KERNEL_TIMEOUT=10s so a broken kernel ends fast.
# The older modes (quick, dev, full) are described below; their allreduce
# runs pin the handshake allreduce (FLEXLINK_GPU_FLAG_BYTES=0), the path
# that takes the PCIe share.
#
# Logs go to $OUT (8 files at most): topo.txt, tests.log (the GPU tests with
# FLEXLINK_REQUIRE_GPU=1, so a skip is a failure; direct-pcie forces a PCIe
# share through the real shared staging buffers, direct-pull runs allgather
# and alltoall as SM pulls), bench-<op>.log (flexbench
# --device gpu --backend both: flexlink and NCCL in the same processes, with
# the busbw ratio per size and, after each flexlink row, the link shares of
# its last call), variants.log (other settings, among them the pull
# allgather and alltoall, FLEXLINK_GPU_ALLGATHER/ALLTOALL=pull) and anchor.log (NCCL through
# PyTorch). Every step has its own time limit; together under 600 s.
#
# The FlexLink must-show is in bench-allreduce.log and bench-allgather.log:
# 64 MiB to 1 GiB with FLEXLINK_LINKS=nvlink, then with nvlink,pcie (the
# balancer learning the PCIe share; FLEXLINK_DEBUG=INFO logs the shares in
# force), both beside NCCL. The profile the balancer learnt is printed at
# the end of bench-allgather.log.
#   quick  tests + the must-show, fewer iterations            (~3 min)
#   dev    tests + the must-show + 1-16 MiB + 2 more ops + variants (~5 min)
#   full   dev + gpu/nccl package tests + the anchor          (~7 min)
#   perf   kernels from nvcc, every GPU test, the four collectives and the FlexLink comparison beside NCCL (~5.5 min)
#   check  kernels from nvcc, every GPU test, allreduce and allgather 64 KiB-1 GiB beside NCCL (~4 min)
#   flagcoll  flag kernels against the copy-lane paths for reduce-scatter, allgather, alltoall (~5 min)
#   flagpcie  the flag allreduce's PCIe part: fixed shares, block counts, the balancer (~3.5 min)
#   flagtune, storetune   the experiments behind the flag allreduce's and the store allgather's defaults
#   ceprobe  scripts/ce_pipeline_probe.cu (link ceilings, and an allreduce on copy engines ordered by
#            stream memory operations: docs/PERF.md tables K, L), then allreduce 64 MiB-1 GiB beside NCCL (~1.5 min;
#            NO_NVCC=1 saves the kernels' compile, the probe still needs nvcc)
#   rooted   kernels from nvcc, every GPU test, then broadcast, reduce and sendrecv 64 KiB-1 GiB
#            beside NCCL, in and out of place (~5 min)
#   rootedtune  broadcast and reduce 256 KiB-16 MiB, 200 calls a row: flag kernels up to 4 MiB
#            (the default) and up to 16 MiB, beside NCCL (~2 min)
set -uo pipefail
B=.devbin
OUT=${OUT:-/tmp/flexlink-out}
mkdir -p "$OUT"
mode=${1:-perf}
case $mode in
perf | check | flagcoll | flagpcie | smalltune | flagtune | storetune | quick | dev | full | ceprobe | rooted | rootedtune) ;;
*)
	echo "gpu-device.sh: unknown mode $mode (perf, check, flagcoll, flagpcie, smalltune, flagtune, storetune, quick, dev, full, ceprobe, rooted, rootedtune)" >&2
	exit 2
	;;
esac
NP=2 # the experiments below compare two GPUs over NVLink (gpu-multi.sh: every GPU)
. "$(dirname "$0")/gpu-common.sh"
if [ "$mode" = quick ]; then must=(-n 10 -w 3); fi

if [ "$mode" = rooted ]; then
	# Broadcast and reduce (root 0; flag kernels up to 4 MiB) and sendrecv
	# (ring neighbours), beside NCCL in the same processes, after every GPU
	# test (their sweep has broadcasts and reduces of every root between
	# the symmetric collectives).
	{
		stamp "GPU tests"
		ranktests 240 'TestGPU(Procs|OneProcess)' 40
		for op in broadcast reduce sendrecv; do
			stamp "$op 64 KiB-1 GiB, defaults, beside NCCL"
			bench 100 $op --backend both -b 64K -e 1G -f 4 "${must[@]}"
		done
		stamp done
	} >"$OUT/rooted.log" 2>&1
	grep -v '^#  ' "$OUT/rooted.log"
	exit 0
fi

if [ "$mode" = rootedtune ]; then
	{
		for op in broadcast reduce; do
			stamp "$op 256 KiB-16 MiB, defaults (flag kernels up to 16 MiB since the sixth session; 4 MiB before), beside NCCL"
			bench 60 $op --backend both -b 256K -e 16M -f 2 -n 200 -w 20
			stamp "$op 256 KiB-16 MiB, FLEXLINK_GPU_FLAG_COLL_BYTES=16 MiB (rooted calls up to 64 MiB)"
			FLEXLINK_GPU_FLAG_COLL_BYTES=16777216 bench 40 $op -b 256K -e 16M -f 2 -n 200 -w 20
		done
		stamp done
	} >"$OUT/rootedtune.log" 2>&1
	grep -v '^#  ' "$OUT/rootedtune.log"
	exit 0
fi

if [ "$mode" = ceprobe ]; then
	# Can copy engines, ordered by cuStreamWaitValue64/WriteValue64 instead
	# of host handshakes, beat the flag kernel's SM stores (issue 7)? The
	# probe checks every result; NCCL's allreduce in the same call is the
	# anchor for its figures.
	{
		stamp "ce_pipeline_probe"
		cc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1)
		if [ -z "$cc" ]; then
			echo "no nvcc on this machine: the probe needs it"
		elif "$cc" -O3 -arch=sm_90 -std=c++17 -o /tmp/ce_pipeline_probe $B/ce_pipeline_probe.cu -lcuda; then
			timeout "$(budget 300 || echo 5)" /tmp/ce_pipeline_probe
			echo "probe exit $?"
		fi
		stamp "allreduce 64 MiB-1 GiB: flexlink NVLink only and defaults, beside NCCL"
		FLEXLINK_LINKS=nvlink bench 90 allreduce --backend both -b 64M -e 1G -f 4 "${must[@]}"
		bench 90 allreduce --backend both -b 64M -e 1G -f 4 "${must[@]}"
		stamp done
	} >"$OUT/ceprobe.log" 2>&1
	cat "$OUT/ceprobe.log"
	exit 0
fi

if [ "$mode" = smalltune ]; then
	{
		stamp "rank tests: flag"
		FLEXLINK_CACHE_DIR=/tmp/flexlink-cache-tests timeout 60 $B/direct.test -test.run 'TestGPUProcs/direct-flag' -test.timeout 55s 2>&1 | tail -3
		stamp "allreduce 1 MiB-1 GiB, 1 GiB buffers, defaults, beside NCCL"
		bench 40 allreduce --backend both -b 1M -e 1G -f 4 -n 50 -w 10
		stamp "allreduce 1 MiB, 1 MiB buffers, defaults, beside NCCL"
		bench 20 allreduce --backend both -b 1M -e 1M -n 200 -w 50
	} >"$OUT/bench-allreduce.log" 2>&1
	summary 80 "$OUT"/bench-allreduce.log
	exit 0
fi

if [ "$mode" = storetune ]; then
	{
		stamp "rank tests: flag, pull, store"
		ranktests 90 'TestGPUProcs/direct-(flag|pull|store)' 20
	} >"$OUT/tests.log" 2>&1
	export FLEXLINK_CACHE_DIR=/tmp/flexlink-cache
	for op in allgather alltoall; do
		{
			stamp "$op 64 MiB-1 GiB, pull, beside NCCL"
			FLEXLINK_GPU_ALLGATHER=pull FLEXLINK_GPU_ALLTOALL=pull bench 40 $op --backend both -b 64M -e 1G -f 4 "${must[@]}"
			stamp "$op 64 MiB-1 GiB, store, FLEXLINK_LINKS=nvlink"
			FLEXLINK_GPU_ALLGATHER=store FLEXLINK_GPU_ALLTOALL=store FLEXLINK_LINKS=nvlink bench 30 $op -b 64M -e 1G -f 4 "${must[@]}"
			stamp "$op 64 MiB-1 GiB, store, FLEXLINK_LINKS=nvlink,pcie (balancer)"
			FLEXLINK_GPU_ALLGATHER=store FLEXLINK_GPU_ALLTOALL=store FLEXLINK_LINKS=nvlink,pcie bench 40 $op -b 64M -e 1G -f 4 -n 40 -w 10
			stamp "$op 1 MiB-16 MiB: pull beside store, beside NCCL"
			FLEXLINK_GPU_ALLGATHER=pull FLEXLINK_GPU_ALLTOALL=pull bench 30 $op --backend both -b 1M -e 16M -f 4 "${must[@]}"
			FLEXLINK_GPU_ALLGATHER=store FLEXLINK_GPU_ALLTOALL=store bench 30 $op -b 1M -e 16M -f 4 "${must[@]}"
		} >"$OUT/bench-$op.log" 2>&1
	done
	stamp done >>"$OUT/tests.log"
	summary 150
	exit 0
fi

# The committed kernels match the committed sources (make test's
# TestCompiledKernelsMatchSources); NVCC=1 compiles them here instead.

if [ "$mode" = check ]; then
	# After a kernel change: the PTX (in $OUT, to commit), every GPU test,
	# and the two main collectives beside NCCL.
	{
		stamp "rank tests"
		ranktests 220 'TestGPU(Procs|OneProcess)' 40
		stamp "gpu package tests"
		timeout 60 $B/gpu.test -test.run '^TestGPU' -test.timeout 55s 2>&1 | tail -3
	} >"$OUT/tests.log" 2>&1
	export FLEXLINK_CACHE_DIR=/tmp/flexlink-cache
	for op in allreduce allgather; do
		{
			stamp "$op 64 KiB-1 GiB, defaults, beside NCCL"
			bench 45 $op --backend both -b 64K -e 1G -f 4 "${must[@]}"
		} >"$OUT/bench-$op.log" 2>&1
	done
	stamp done >>"$OUT/tests.log"
	summary 120
	exit 0
fi

if [ "$mode" = flagcoll ]; then
	# Flag kernels for reduce-scatter, allgather and alltoall: the GPU
	# tests, then each collective on flag kernels for every size and on the
	# copy-lane paths, beside NCCL (docs/PERF.md), then the allreduce.
	{
		stamp "rank tests"
		ranktests 200 'TestGPU(Procs|OneProcess)' 40
	} >"$OUT/tests.log" 2>&1
	export FLEXLINK_CACHE_DIR=/tmp/flexlink-cache
	for op in allgather reducescatter alltoall; do
		{
			stamp "$op 64 KiB-256 MiB, flag kernels for every size (FLEXLINK_GPU_FLAG_COLL_BYTES=1T), beside NCCL"
			FLEXLINK_GPU_FLAG_COLL_BYTES=1099511627776 bench 45 $op --backend both -b 64K -e 256M -f 4 "${must[@]}"
			stamp "$op 64 KiB-256 MiB, copy-lane paths (FLEXLINK_GPU_FLAG_COLL_BYTES=0)"
			FLEXLINK_GPU_FLAG_COLL_BYTES=0 bench 45 $op -b 64K -e 256M -f 4 "${must[@]}"
		} >"$OUT/bench-$op.log" 2>&1
	done
	{
		stamp "allreduce 64 KiB-1 GiB, defaults, beside NCCL"
		bench 45 allreduce --backend both -b 64K -e 1G -f 4 "${must[@]}"
		stamp "allreduce 64 MiB-1 GiB, FLEXLINK_GPU_FLAG_PCIE_BLOCKS=8 FLEXLINK_PCIE_SHARE=0 (idle PCIe blocks)"
		FLEXLINK_GPU_FLAG_PCIE_BLOCKS=8 FLEXLINK_PCIE_SHARE=0 bench 30 allreduce -b 64M -e 1G -f 4 "${must[@]}"
	} >"$OUT/bench-allreduce.log" 2>&1
	stamp done >>"$OUT/tests.log"
	summary 230
	exit 0
fi

if [ "$mode" = flagpcie ]; then
	# The flag allreduce's PCIe part: its tests, then NVLink only, the
	# balancer and fixed shares, beside NCCL (docs/PERF.md).
	{
		stamp "rank tests: flag"
		ranktests 100 'TestGPUProcs/direct-flag' 20
	} >"$OUT/tests.log" 2>&1
	export FLEXLINK_CACHE_DIR=/tmp/flexlink-cache
	rm -rf "$FLEXLINK_CACHE_DIR"
	{
		stamp "allreduce 64 MiB-1 GiB, FLEXLINK_LINKS=nvlink, beside NCCL"
		FLEXLINK_LINKS=nvlink bench 40 allreduce --backend both -b 64M -e 1G -f 4 "${must[@]}"
		stamp "allreduce 64 MiB-1 GiB, FLEXLINK_GPU_FLAG_PCIE_BLOCKS=8 (balancer), beside NCCL"
		FLEXLINK_GPU_FLAG_PCIE_BLOCKS=8 bench 40 allreduce --backend both -b 64M -e 1G -f 4 -n 40 -w 10
		for v in ${PCIE_VARIANTS:-"8 0.04" "8 0.07" "8 0.10" "8 0.13" "4 0.07" "16 0.07" "16 0.10"}; do
			set -- $v
			stamp "allreduce 64 MiB-1 GiB, FLEXLINK_GPU_FLAG_PCIE_BLOCKS=$1 FLEXLINK_PCIE_SHARE=$2"
			FLEXLINK_GPU_FLAG_PCIE_BLOCKS=$1 FLEXLINK_PCIE_SHARE=$2 bench 30 allreduce -b 64M -e 1G -f 4 "${must[@]}"
		done
		stamp "allreduce 1 MiB-1 GiB, defaults (second run, cached profile), beside NCCL"
		bench 45 allreduce --backend both -b 1M -e 1G -f 4 -n 40 -w 10
	} >"$OUT/bench-allreduce.log" 2>&1
	stamp done >>"$OUT/tests.log"
	summary 150
	exit 0
fi

if [ "$mode" = flagtune ]; then
	{
		stamp "rank tests: flag allreduce"
		ranktests 60 'TestGPUProcs/direct-flag' 20
	} >"$OUT/tests.log" 2>&1
	{
		stamp "allreduce 8 KiB-1 GiB, flag (defaults), beside NCCL"
		bench 60 allreduce --backend both -b 8K -e 1G -f 4 "${must[@]}"
		for v in ${FLAG_VARIANTS:-"32 67108864" "64 67108864" "64 134217728" "128 134217728" "128 268435456"}; do
			set -- $v
			stamp "allreduce 16 MiB-1 GiB, flag, FLEXLINK_GPU_FLAG_BLOCKS=$1 FLEXLINK_GPU_FLAG_REGION_BYTES=$2"
			FLEXLINK_GPU_FLAG_BLOCKS=$1 FLEXLINK_GPU_FLAG_REGION_BYTES=$2 bench 30 allreduce -b 16M -e 1G -f 4 "${must[@]}"
		done
	} >"$OUT/bench-allreduce.log" 2>&1
	stamp done >>"$OUT/tests.log"
	summary 150
	exit 0
fi

if [ "$mode" = perf ] && [ -n "${nvcc:-}" ] && [ -f $B/pcie_sm_probe.cu ]; then
	# How fast kernels move data through pinned host memory (the flag
	# allreduce's PCIe part): docs/PERF.md.
	{
		stamp "pcie_sm_probe"
		"$nvcc" -O3 -arch=sm_90 -o /tmp/pcie_sm_probe $B/pcie_sm_probe.cu && timeout 60 /tmp/pcie_sm_probe
	} >"$OUT/pcieprobe.log" 2>&1
	cat "$OUT/pcieprobe.log"
fi

if [ "$mode" = perf ]; then
	# The shipped defaults beside NCCL (docs/PERF.md): every GPU test, then
	# the four collectives 64 KiB-1 GiB, then the FlexLink comparison
	# (NVLink only, NVLink + PCIe, NCCL) for allreduce and allgather
	# 64 MiB-1 GiB, and the flag region's slot size.
	{
		stamp "rank tests"
		ranktests 220 'TestGPU(Procs|OneProcess)' 40
		stamp "gpu package tests"
		timeout 60 $B/gpu.test -test.run '^TestGPU' -test.v -test.timeout 55s 2>&1 | grep -v '^=== RUN' | tail -8
	} >"$OUT/tests.log" 2>&1
	export FLEXLINK_CACHE_DIR=/tmp/flexlink-cache
	rm -rf "$FLEXLINK_CACHE_DIR"
	for op in allreduce allgather reducescatter alltoall; do
		{
			stamp "$op 64 KiB-1 GiB, defaults, beside NCCL"
			bench 45 $op --backend both -b 64K -e 1G -f 4 "${must[@]}"
		} >>"$OUT/bench-${op/reducescatter/rs-a2a}.log" 2>&1
	done
	mv "$OUT/bench-alltoall.log" /tmp/a2a.log && cat /tmp/a2a.log >>"$OUT/bench-rs-a2a.log" # 8 files come back
	{
		stamp "allreduce 1 MiB latency, defaults, beside NCCL (200 iterations)"
		bench 25 allreduce --backend both -b 1M -e 1M -n 200 -w 50
		stamp "allreduce 64 MiB-1 GiB, FLEXLINK_LINKS=nvlink, beside NCCL"
		FLEXLINK_LINKS=nvlink bench 40 allreduce --backend both -b 64M -e 1G -f 4 "${must[@]}"
		stamp "allreduce 64 MiB-1 GiB, flag kernel with its PCIe part (FLEXLINK_GPU_FLAG_PCIE_BLOCKS=8, balancer), beside NCCL"
		FLEXLINK_GPU_FLAG_PCIE_BLOCKS=8 bench 40 allreduce --backend both -b 64M -e 1G -f 4 -n 40 -w 10
		stamp "allreduce 64 MiB-1 GiB, handshake allreduce with copy-engine PCIe (FLEXLINK_GPU_FLAG_BYTES=0), beside NCCL"
		FLEXLINK_GPU_FLAG_BYTES=0 bench 40 allreduce --backend both -b 64M -e 1G -f 4 -n 40 -w 10
		stamp "allreduce 64 MiB-1 GiB, FLEXLINK_GPU_FLAG_REGION_BYTES=67108864 (256 KiB slots)"
		FLEXLINK_GPU_FLAG_REGION_BYTES=67108864 bench 30 allreduce -b 64M -e 1G -f 4 "${must[@]}"
		stamp "allgather 64 MiB-1 GiB, FLEXLINK_LINKS=nvlink, beside NCCL"
		FLEXLINK_LINKS=nvlink bench 40 allgather --backend both -b 64M -e 1G -f 4 "${must[@]}"
		stamp "allgather 64 MiB-1 GiB, FLEXLINK_LINKS=nvlink,pcie, beside NCCL"
		FLEXLINK_LINKS=nvlink,pcie bench 40 allgather --backend both -b 64M -e 1G -f 4 -n 40 -w 10
	} >"$OUT/flexlink.log" 2>&1
	stamp done >>"$OUT/tests.log"
	summary 260
	exit 0
fi

{
	stamp topology
	nvidia-smi topo -m
	nvidia-smi --query-gpu=index,name,pci.bus_id,memory.used,memory.total --format=csv
	timeout 30 $B/flexinfo 2>&1 | head -40
} >"$OUT/topo.txt" 2>&1

{
	stamp rank tests
	FLEXLINK_CACHE_DIR=/tmp/flexlink-cache-tests timeout 110 $B/direct.test -test.run 'TestGPU(Procs|OneProcess)' -test.v -test.timeout 105s 2>&1 | grep -v '^=== RUN'
	echo "direct.test exit ${PIPESTATUS[0]}"
	if [ "$mode" = full ]; then
		stamp gpu and nccl package tests
		timeout 90 $B/gpu.test -test.run '^TestGPU' -test.timeout 85s 2>&1 | tail -5
		timeout 60 $B/nccl.test -test.timeout 55s 2>&1 | tail -5
	fi
} >"$OUT/tests.log" 2>&1

# The benchmarks share one profile cache: what the balancer learns in the
# allreduce run is the allgather run's starting point (stage 1).
export FLEXLINK_CACHE_DIR=/tmp/flexlink-cache
rm -rf "$FLEXLINK_CACHE_DIR"
for op in allreduce allgather; do
	{
		if [ "$mode" != quick ]; then
			stamp "flexbench $op 1-16 MiB (pushes below the pcie threshold: nvlink only)"
			bench 40 "$op" --backend both -b 1M -e 16M -f 4 "${iters[@]}"
		fi
		# The FlexLink comparison is made on the copy-engine pushes (the
		# path that takes the PCIe share; the allreduce pinned to the handshake
		# read allreduce, FLEXLINK_GPU_FLAG_BYTES=0); the default store allgather is
		# measured in the variants below.
		stamp "flexbench $op 64 MiB-1 GiB, push, FLEXLINK_LINKS=nvlink"
		FLEXLINK_GPU_FLAG_BYTES=0 FLEXLINK_GPU_ALLGATHER=push FLEXLINK_LINKS=nvlink bench 55 "$op" --backend both -b 64M -e 1G -f 4 "${must[@]}"
		stamp "flexbench $op 64 MiB-1 GiB, push, FLEXLINK_LINKS=nvlink,pcie"
		FLEXLINK_GPU_FLAG_BYTES=0 FLEXLINK_GPU_ALLGATHER=push FLEXLINK_LINKS=nvlink,pcie FLEXLINK_DEBUG=INFO bench 55 "$op" --backend both -b 64M -e 1G -f 4 "${must[@]}"
		if [ "$op" = allgather ]; then
			stamp "balancer profiles learnt (per size class: bytes, shares, GB/s per link)"
			python3 - "$FLEXLINK_CACHE_DIR" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/balance/*.json")):
    s = json.load(open(f))
    print(f.rsplit("/", 1)[1])
    kinds = [l["spec"]["Kind"] for l in s["links"]]
    for c in s["classes"]:
        if c["up_to"] >= 32 << 20:
            bw = " ".join("%s=%.0f" % (k, 1e-9 / e["s_per_byte"]) for k, e in zip(kinds, c["links"]))
            sh = " ".join("%s=%.3f" % (k, x) for k, x in zip(kinds, c["shares"]))
            print("  up to %5d MiB  shares %s  GB/s %s" % (c["up_to"] >> 20, sh, bw))
PY
		fi
	} >"$OUT/bench-$op.log" 2>&1
done

if [ "$mode" != quick ]; then
	for op in reducescatter alltoall; do
		{
			stamp "flexbench $op"
			bench 45 "$op" --backend both -b 4M -e 1G -f 4 "${iters[@]}"
		} >"$OUT/bench-$op.log" 2>&1
	done
	{
		stamp "allreduce, push algorithm (nvlink only by design)"
		FLEXLINK_GPU_FLAG_BYTES=0 FLEXLINK_GPU_ALLREDUCE=auto bench 20 allreduce -b 256M -e 1G -f 4 "${iters[@]}"
		stamp "allgather, fixed pcie share 0.08 (the anchor's best both-ways split)"
		FLEXLINK_PCIE_SHARE=0.08 bench 20 allgather -b 256M -e 1G -f 4 "${iters[@]}"
		stamp "allgather, nvlink only, 4 copy streams per peer"
		FLEXLINK_LINKS=nvlink FLEXLINK_GPU_COPY_STREAMS=4 bench 20 allgather -b 256M -e 1G -f 4 "${iters[@]}"
		stamp "allgather, pull: kernels read the peer's send over NVLink (no copy engines, no pcie share), beside NCCL"
		FLEXLINK_GPU_ALLGATHER=pull bench 45 allgather --backend both -b 64M -e 1G -f 4 "${must[@]}"
		stamp "alltoall, pull: kernels read block Rank() of the peer's send, beside NCCL"
		FLEXLINK_GPU_ALLTOALL=pull bench 40 alltoall --backend both -b 64M -e 1G -f 4 "${iters[@]}"
	} >"$OUT/variants.log" 2>&1
fi

if [ "$mode" = full ] && [ -f $B/nccl_baseline.py ]; then
	{
		stamp anchor
		PYTHONUNBUFFERED=1 timeout 120 python3 $B/nccl_baseline.py nccl 2>&1 | tail -40
	} >"$OUT/anchor.log" 2>&1
fi
stamp done >>"$OUT/tests.log"
summary 150
