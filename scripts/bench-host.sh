#!/usr/bin/env bash
# Host-memory benchmarks against the OpenMPI anchor, every figure from this
# one run: launch time (flexrun vs mpirun), and allreduce / allgather /
# alltoall bus bandwidth at 64 MiB with 2 and 4 ranks (flexlink vs OpenMPI),
# then a ratio table. Usage: scripts/bench-host.sh [outdir]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/bench-host}
mkdir -p "$out" bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpiflags=(--oversubscribe --bind-to none --mca btl self,vader)

go build -o bin/ ./cmd/flexrun ./cmd/flexbench ./examples/hello
CGO_ENABLED=1 go build -tags mpi -o bin/flexbench-mpi ./cmd/flexbench
mpicc -O2 -o bin/mpi_hello scripts/mpi_hello.c

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%F)" | tee "$out/summary.txt"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
timeit() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }

runs=${LAUNCH_RUNS:-11}
for i in $(seq "$runs"); do timeit bin/flexrun -np 8 --oversubscribe bin/hello; done | median > "$out/launch_flexrun_ms"
for i in $(seq "$runs"); do timeit mpirun -np 8 "${mpiflags[@]}" bin/mpi_hello; done | median > "$out/launch_mpirun_ms"
lf=$(cat "$out/launch_flexrun_ms"); lm=$(cat "$out/launch_mpirun_ms")
echo "launch -np 8 hello, median of $runs: flexrun ${lf} ms, mpirun ${lm} ms, ratio $(awk "BEGIN{printf \"%.2f\", $lf/$lm}")" | tee -a "$out/summary.txt"

iters=${ITERS:-10}
busbw() { # file -> out-of-place busbw of the last data row
	awk '!/^#/ && NF>=13 {bw=$8} END {print bw}' "$1"; }
printf "%-10s %5s %12s %12s %8s\n" op ranks flexlink_GBs openmpi_GBs ratio | tee -a "$out/summary.txt"
for op in allreduce allgather alltoall; do
	for np in 2 4; do
		f="$out/${op}_np${np}_flexlink.txt"; m="$out/${op}_np${np}_mpi.txt"
		bin/flexrun -np "$np" --oversubscribe bin/flexbench "$op" -b 64M -e 64M -d float -n "$iters" -w 3 > "$f"
		mpirun -np "$np" "${mpiflags[@]}" bin/flexbench-mpi "$op" --backend mpi -b 64M -e 64M -d float -n "$iters" -w 3 > "$m"
		a=$(busbw "$f"); b=$(busbw "$m")
		printf "%-10s %5s %12s %12s %8s\n" "$op" "$np" "$a" "$b" "$(awk "BEGIN{printf \"%.2f\", $a/$b}")" | tee -a "$out/summary.txt"
	done
done
