#!/usr/bin/env bash
# Launch time across hosts: 2 emulated hosts x 4 ranks (scripts/testcluster:
# network namespaces with their own sshd), flexrun over ssh against mpirun
# over the same ssh, same hostfile, the same work (join, barrier, exit:
# examples/hello and scripts/mpi_hello.c). Prints the medians; every
# figure comes from this one run. Needs root, iproute2, openssh-server,
# OpenMPI. Usage: scripts/bench-launch-hosts.sh [outdir]   (RUNS=11)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/bench-launch-hosts}
runs=${RUNS:-11}
name=flb net=10.77
mkdir -p "$out"
bin=$(mktemp -d /tmp/flexlink-bench-XXXXXX)
chmod 755 "$bin"
trap 'scripts/testcluster down --name $name >/dev/null 2>&1 || true; rm -rf "$bin"' EXIT

go build -o "$bin/bin/" ./cmd/flexrun ./examples/hello
mpicc -O2 -o "$bin/bin/mpi_hello" scripts/mpi_hello.c
eval "$(scripts/testcluster up 2 --name $name --net $net)"
read -r h1 h2 <<<"$TC_HOSTS"
printf '%s slots=4\n%s slots=4\n' "$h1" "$h2" > "$out/hostfile"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
flexrun=("$bin/bin/flexrun" --hostfile "$out/hostfile" --ssh-args "-F $TC_SSH_CONFIG" --prefix "$bin" "$bin/bin/hello")
# OpenMPI: the same ssh, no tree spawn (the hosts have no ssh config of
# their own), its traffic on the hosts' subnet, shared memory within a host.
mpirun=(mpirun --hostfile "$out/hostfile" -np 8 --mca plm_rsh_agent "ssh -F $TC_SSH_CONFIG" --mca plm_rsh_no_tree_spawn 1
	--mca oob_tcp_if_include "$net.0.0/24" --mca btl self,vader,tcp --mca btl_tcp_if_include "$net.0.0/24" --bind-to none
	"$bin/bin/mpi_hello")

# Both must work before they are timed.
"${flexrun[@]}" > "$out/flexrun.out" 2>&1 || { cat "$out/flexrun.out"; exit 1; }
"${mpirun[@]}" > "$out/mpirun.out" 2>&1 || { cat "$out/mpirun.out"; exit 1; }
for f in flexrun mpirun; do
	n=$(grep -c '^hello from rank' "$out/$f.out" || true)
	[ "$n" = 8 ] || { echo "$f printed $n hello lines, want 8:"; cat "$out/$f.out"; exit 1; }
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
timeit() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1 || return 1; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }

for _ in $(seq "$runs"); do timeit "${flexrun[@]}"; done > "$out/flexrun_ms"
for _ in $(seq "$runs"); do timeit "${mpirun[@]}"; done > "$out/mpirun_ms"
lf=$(median < "$out/flexrun_ms")
lm=$(median < "$out/mpirun_ms")
{
	echo "# $(date -u +%F), $(nproc) cores, 2 hosts (network namespaces, sshd each) x 4 ranks, median of $runs"
	echo "flexrun over ssh: ${lf} ms   (runs: $(tr '\n' ' ' < "$out/flexrun_ms"))"
	echo "mpirun  over ssh: ${lm} ms   (runs: $(tr '\n' ' ' < "$out/mpirun_ms"))"
	echo "ratio flexrun/mpirun: $(awk "BEGIN{printf \"%.2f\", $lf/$lm}")"
} | tee "$out/summary.txt"
