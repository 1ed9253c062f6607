#!/usr/bin/env bash
# Host-memory collectives at 64 MiB, 2 and 4 ranks on this machine: two
# flexbench binaries (A, B: say the last commit's and this tree's) and
# OpenMPI 4.1 (vader) back to back, the set REPEATS times interleaved;
# prints every figure, the medians and their ratios. CHECK=0 passes -c 0
# (no check of each result, whose refill of the buffers between
# iterations costs every library a third of its speed here).
# Usage: A=/tmp/flexbench-old B=bin/flexbench REPEATS=3 CHECK=0 scripts/bench-host-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
a=${A:?set A to a flexbench binary} b=${B:-bin/flexbench} repeats=${REPEATS:-3} iters=${ITERS:-20} check=${CHECK:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
go build -o bin/ ./cmd/flexrun
[ -x bin/flexbench-mpi ] || CGO_ENABLED=1 go build -tags mpi -o bin/flexbench-mpi ./cmd/flexbench
busbw() { awk '!/^#/ && NF>=13 {bw=$8} END {print bw+0}'; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "# $(date -u '+%F %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); 64 MiB float, $iters iterations, -c $check, $repeats repeats; A=$a B=$b"
declare -A fig
for rep in $(seq "$repeats"); do
	for np in 2 4; do
		for op in allreduce allgather alltoall; do
			args=("$op" -b 64M -e 64M -d float -n "$iters" -w 3 -c "$check")
			fig[a$op$np]+=" $(bin/flexrun -np "$np" --oversubscribe "$a" "${args[@]}" | busbw)"
			fig[b$op$np]+=" $(bin/flexrun -np "$np" --oversubscribe "$b" "${args[@]}" | busbw)"
			fig[m$op$np]+=" $(mpirun -np "$np" --oversubscribe --bind-to none --mca btl self,vader bin/flexbench-mpi "${args[@]}" --backend mpi | busbw)"
		done
	done
done
echo "| op, ranks | A busbw GB/s | B | OpenMPI | A / OpenMPI | B / OpenMPI | B / A |"
echo "|---|---|---|---|---|---|---|"
for np in 2 4; do
	for op in allreduce allgather alltoall; do
		x=$(echo "${fig[a$op$np]}" | median) y=$(echo "${fig[b$op$np]}" | median) m=$(echo "${fig[m$op$np]}" | median)
		r() { awk "BEGIN{printf \"%.2f\", $1/$2}"; }
		echo "| $op $np | $x [${fig[a$op$np]# }] | $y [${fig[b$op$np]# }] | $m [${fig[m$op$np]# }] | $(r "$x" "$m") | $(r "$y" "$m") | $(r "$y" "$x") |"
	done
done
