#!/usr/bin/env bash
# Host-memory collectives at 64 MiB, 2 and 4 ranks on this machine:
# flexlink with its defaults, a variant, and OpenMPI 4.1 (vader), each
# triple back to back, the set REPEATS times interleaved; prints every
# figure and the medians' ratios. The variant is this tree's flexbench
# with VARIANT (settings, space separated), or another flexbench binary,
# A (say the last commit's), with its defaults. CHECK=0 passes -c 0 (no
# check of each result, whose refill of the buffers between iterations
# costs every library about a third of its speed here).
# Usage: VARIANT="FLEXLINK_SHM_CMA_BYTES=0 FLEXLINK_CHUNK_BYTES=1M" REPEATS=3 scripts/bench-host-variant.sh
#        A=/tmp/flexbench-of-HEAD~1 CHECK=0 scripts/bench-host-variant.sh
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${VARIANT:-} alt=${A:-} repeats=${REPEATS:-3} iters=${ITERS:-10} check=${CHECK:-1}
[ -n "$variant$alt" ] || { echo "set VARIANT to the settings to compare, or A to another flexbench binary" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
go build -o bin/ ./cmd/flexrun ./cmd/flexbench
CGO_ENABLED=1 go build -tags mpi -o bin/flexbench-mpi ./cmd/flexbench
xs=(); for v in $variant; do xs+=(-x "$v"); done
busbw() { awk '!/^#/ && NF>=13 {bw=$8} END {print bw+0}'; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "# $(date -u '+%F %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); 64 MiB float, $iters iterations, -c $check, $repeats repeats; variant: ${variant:-$alt}"
declare -A fig
for rep in $(seq "$repeats"); do
	for np in 2 4; do
		for op in allreduce allgather alltoall; do
			args=("$op" -b 64M -e 64M -d float -n "$iters" -w 3 -c "$check")
			fig[d$op$np]+=" $(bin/flexrun -np "$np" --oversubscribe bin/flexbench "${args[@]}" | busbw)"
			fig[v$op$np]+=" $(bin/flexrun -np "$np" --oversubscribe "${xs[@]}" "${alt:-bin/flexbench}" "${args[@]}" | busbw)"
			fig[m$op$np]+=" $(mpirun -np "$np" --oversubscribe --bind-to none --mca btl self,vader bin/flexbench-mpi "${args[@]}" --backend mpi | busbw)"
		done
	done
done
echo "| op, ranks | defaults busbw GB/s | variant | OpenMPI | defaults / OpenMPI | variant / OpenMPI | defaults / variant |"
echo "|---|---|---|---|---|---|---|"
for np in 2 4; do
	for op in allreduce allgather alltoall; do
		d=$(echo "${fig[d$op$np]}" | median) v=$(echo "${fig[v$op$np]}" | median) m=$(echo "${fig[m$op$np]}" | median)
		r() { awk "BEGIN{printf \"%.2f\", $1/$2}"; }
		echo "| $op $np | $d [${fig[d$op$np]# }] | $v [${fig[v$op$np]# }] | $m [${fig[m$op$np]# }] | $(r "$d" "$m") | $(r "$v" "$m") | $(r "$d" "$v") |"
	done
done
