#!/usr/bin/env bash
# The network transport on emulated hosts (scripts/testcluster: 2 network
# namespaces, 2 NICs each, sshd each), every figure from this one run:
#  1. one rail, unlimited veth: iperf3 (the raw socket ceiling of the path)
#     against flexbench sendrecv (2 hosts x 1 rank) over FLEXLINK_NET=tcp
#     and =ucx (UCX_TLS=tcp), 4 MiB and 64 MiB;
#  2. rails limited to RATE (default 1gbit): sendrecv 64 MiB over 1 rail
#     (FLEXLINK_NET_RAILS=1) against 2 rails (=0), and iperf3 on one rail;
#  3. unlimited: allreduce 64 MiB, 2 hosts x 1 rank, flexlink against
#     OpenMPI 4.1 (tcp btl on rail0) over the same hostfile.
# Needs root, iproute2, openssh-server, iperf3, OpenMPI.
# Usage: scripts/bench-net.sh [outdir]   (ITERS=10 RATE=1gbit)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/bench-net}
iters=${ITERS:-10} rate=${RATE:-1gbit}
name=fnb net=10.83
mkdir -p "$out"
bin=$(mktemp -d /tmp/flexlink-bench-XXXXXX)
chmod 755 "$bin"
trap 'scripts/testcluster down --name $name >/dev/null 2>&1 || true; rm -rf "$bin"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

go build -o "$bin/bin/" ./cmd/flexrun ./cmd/flexbench || exit 1
CGO_ENABLED=1 go build -tags mpi -o "$bin/bin/flexbench-mpi" ./cmd/flexbench || exit 1
eval "$(scripts/testcluster up 2 --rails 2 --name $name --net $net)"
read -r h1 h2 <<<"$TC_HOSTS"
printf '%s slots=1\n%s slots=1\n' "$h1" "$h2" > "$out/hostfile"
ns1=${name}h1 ns2=${name}h2

sum="$out/summary.txt"
echo "# $(date -u +%F), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), no GPU; 2 emulated hosts x 1 rank, $iters iterations" | tee "$sum"

# busbw of the out-of-place column of the last data row.
busbw() { awk '!/^#/ && NF>=9 && $1 ~ /^[0-9]+$/ {bw=$8} END {print bw+0}' "$1"; }
ratio() { awk "BEGIN{ if ($2 > 0) printf \"%.2f\", $1/$2; else print \"-\" }"; }
flex() { # file env... -- flexbench args
	local f=$1; shift; local env=()
	while [ "$1" != -- ]; do env+=(-x "$1"); shift; done; shift
	timeout 120 "$bin/bin/flexrun" --ssh-args "-F $TC_SSH_CONFIG" --prefix "$bin" -H "$h1:1,$h2:1" "${env[@]}" \
		"$bin/bin/flexbench" "$@" --no-inplace -n "$iters" -w 2 > "$f" 2>&1 || echo "# failed: exit $?" >> "$f"
}
iperf() { # rail -> GB/s, one stream h1 -> h2 for 5 s
	ip netns exec "$ns2" iperf3 -s -1 -B "$net.$1.2" >/dev/null 2>&1 &
	sleep 0.5
	ip netns exec "$ns1" iperf3 -c "$net.$1.2" -t 5 -J 2>/dev/null |
		python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9))' || echo 0
	wait
}
nenv=(FLEXLINK_NET_IFNAME=rail)

# 1. Provider vs raw socket, one unlimited rail.
raw=$(iperf 0)
echo "raw socket ceiling, rail0 unlimited (iperf3, 1 stream, 5 s): $raw GB/s" | tee -a "$sum"
printf "%-28s %10s %10s %8s\n" provider bytes GB/s vs_raw | tee -a "$sum"
for p in tcp ucx; do
	for sz in 4M 64M; do
		f="$out/sendrecv_${p}_${sz}.txt"
		flex "$f" "${nenv[@]}" FLEXLINK_NET=$p UCX_TLS=tcp UCX_NET_DEVICES=rail0 FLEXLINK_NET_RAILS=1 -- sendrecv -b $sz -e $sz
		b=$(busbw "$f"); printf "%-28s %10s %10s %8s\n" "sendrecv FLEXLINK_NET=$p" "$sz" "$b" "$(ratio "$b" "$raw")" | tee -a "$sum"
	done
done

# 3. Allreduce 64 MiB against OpenMPI (unlimited rails).
f="$out/allreduce_flexlink.txt"; m="$out/allreduce_mpi.txt"
flex "$f" "${nenv[@]}" FLEXLINK_NET=tcp FLEXLINK_NET_RAILS=0 -- allreduce -b 64M -e 64M
timeout 120 mpirun --hostfile "$out/hostfile" -np 2 --mca plm_rsh_agent "ssh -F $TC_SSH_CONFIG" --mca plm_rsh_no_tree_spawn 1 \
	--mca oob_tcp_if_include "$net.0.0/24" --mca btl self,vader,tcp --mca btl_tcp_if_include "$net.0.0/24,$net.1.0/24" --bind-to none \
	"$bin/bin/flexbench-mpi" allreduce --backend mpi -b 64M -e 64M --no-inplace -n "$iters" -w 2 > "$m" 2>&1 || echo "# failed: exit $?" >> "$m"
a=$(busbw "$f"); o=$(busbw "$m")
echo "allreduce 64 MiB busbw, 2 rails unlimited: flexlink $a GB/s, OpenMPI $o GB/s (tcp btl on both rails), ratio $(ratio "$a" "$o")" | tee -a "$sum"

# 2. Rate-limited rails: 1 vs 2.
for h in "$ns1" "$ns2"; do for r in 0 1; do
	ip netns exec "$h" tc qdisc replace dev rail$r root tbf rate "$rate" burst 256kb latency 50ms
done; done
rawl=$(iperf 0)
f1="$out/sendrecv_rails1.txt"; f2="$out/sendrecv_rails2.txt"
flex "$f1" "${nenv[@]}" FLEXLINK_NET=tcp FLEXLINK_NET_RAILS=1 -- sendrecv -b 64M -e 64M
flex "$f2" "${nenv[@]}" FLEXLINK_NET=tcp FLEXLINK_NET_RAILS=0 -- sendrecv -b 64M -e 64M
b1=$(busbw "$f1"); b2=$(busbw "$f2")
echo "rails at $rate each: iperf3 one rail $rawl GB/s; sendrecv 64 MiB 1 rail $b1 GB/s, 2 rails $b2 GB/s, ratio $(ratio "$b2" "$b1")" | tee -a "$sum"
