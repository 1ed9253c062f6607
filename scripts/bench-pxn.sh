#!/usr/bin/env bash
# PXN all-to-all on an emulated rail-optimised cluster (scripts/testcluster:
# 2 network namespaces x 4 ranks, 4 rails as 4 bridges, each NIC limited to
# RATE, and a spine: the root namespace forwarding between rails, limited
# to SPINE in all, i.e. 4:1 oversubscribed with the defaults). All from one
# run: flexbench alltoall busbw (nccl-tests formula, (n-1)/n x algbw) at
# 1-64 MiB per rank with
#   - FLEXLINK_PXN=2 (rail-aligned relays, multi-receives),
#   - FLEXLINK_PXN=0 (each rank sends from its own NIC; cross-rail through the spine),
#   - FLEXLINK_PXN=off with FLEXLINK_NET_RAILS=0 (every pair over all 4 rails, multilink),
#   - OpenMPI MPI_Alltoall (flexbench --backend mpi, tcp btl on the 4 rails),
#   - OpenMPI with each rank's tcp btl on its own rail only (NCCL's layout),
# the bytes the spine forwarded in each, and the PXN counters.
# Needs root, iproute2, openssh-server, OpenMPI.
# Usage: scripts/bench-pxn.sh [outdir]   (ITERS=5 RATE=400mbit SPINE=400mbit)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/bench-pxn}
iters=${ITERS:-5} rate=${RATE:-400mbit} spine=${SPINE:-400mbit}
name=pxn net=10.81
mkdir -p "$out"
bin=$(mktemp -d /tmp/flexlink-bench-pxn-XXXXXX)
chmod 755 "$bin"
trap 'scripts/testcluster down --name $name >/dev/null 2>&1 || true; rm -rf "$bin"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

go build -o "$bin/bin/" ./cmd/flexrun ./cmd/flexbench || exit 1
CGO_ENABLED=1 go build -tags mpi -o "$bin/bin/flexbench-mpi" ./cmd/flexbench || exit 1
eval "$(scripts/testcluster up 2 --rails 4 --rate "$rate" --spine "$spine" --name $name --net $net)"
read -r h1 h2 <<<"$TC_HOSTS"
printf '%s slots=4\n%s slots=4\n' "$h1" "$h2" > "$out/hostfile"

sum="$out/summary.txt"
echo "# $(date -u +%F), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), no GPU; 2 emulated hosts x 4 ranks, 4 rails of $rate each, spine $spine in all; $iters iterations" | tee "$sum"

spinebytes() { local s=0 r; for r in 0 1 2 3; do s=$((s + $(cat /sys/class/net/${name}br$r/statistics/tx_bytes))); done; echo $s; }
sizes=(-b 1M -e 64M -f 4)
run() { # label file cmd...
	local label=$1 f=$2; shift 2
	local b0; b0=$(spinebytes)
	timeout 600 "$@" > "$f" 2>&1 || echo "# failed: exit $?" >> "$f"
	echo "# spine forwarded $(( $(spinebytes) - b0 )) bytes during this run" >> "$f"
	echo "== $label: $(tail -1 "$f")" | tee -a "$sum"
}
flex() { # label file env... -- flexbench args
	local label=$1 f=$2; shift 2; local env=()
	while [ "$1" != -- ]; do env+=(-x "$1"); shift; done; shift
	run "$label" "$f" "$bin/bin/flexrun" --ssh-args "-F $TC_SSH_CONFIG" --prefix "$bin" -H "$h1:4,$h2:4" \
		-x FLEXLINK_NET=tcp -x FLEXLINK_NET_IFNAME=rail "${env[@]}" "$bin/bin/flexbench" "$@" --no-inplace -n "$iters" -w 1
}
flex "PXN 2" "$out/alltoall_pxn2.txt" FLEXLINK_PXN=2 -- alltoall "${sizes[@]}"
flex "PXN 0" "$out/alltoall_pxn0.txt" FLEXLINK_PXN=0 -- alltoall "${sizes[@]}"
flex "PXN off, 4 rails per pair" "$out/alltoall_off.txt" FLEXLINK_PXN=off FLEXLINK_NET_RAILS=0 -- alltoall "${sizes[@]}"
run "OpenMPI" "$out/alltoall_mpi.txt" timeout 600 mpirun --hostfile "$out/hostfile" -np 8 --mca plm_rsh_agent "ssh -F $TC_SSH_CONFIG" --mca plm_rsh_no_tree_spawn 1 \
	--mca oob_tcp_if_include "$net.0.0/24" --mca btl self,vader,tcp --mca btl_tcp_if_include "$net.0.0/24,$net.1.0/24,$net.2.0/24,$net.3.0/24" --bind-to none \
	"$bin/bin/flexbench-mpi" alltoall --backend mpi "${sizes[@]}" --no-inplace -n "$iters" -w 1
# OpenMPI in NCCL's layout: each rank's tcp btl on its own rail only (local
# rank i on rail i, as flexlink's PXN 0 and 2), so cross-rail messages
# cross the spine. Not the anchor of the goal (the line above is what an
# OpenMPI user runs); it shows what PXN's relays buy against the same layout.
printf '#!/bin/sh\nexport OMPI_MCA_btl_tcp_if_include=rail$OMPI_COMM_WORLD_LOCAL_RANK\nexec "$@"\n' > "$bin/bin/ownnic"
chmod 755 "$bin/bin/ownnic"
run "OpenMPI, own NIC per rank" "$out/alltoall_mpi_own.txt" timeout 600 mpirun --hostfile "$out/hostfile" -np 8 --mca plm_rsh_agent "ssh -F $TC_SSH_CONFIG" --mca plm_rsh_no_tree_spawn 1 \
	--mca oob_tcp_if_include "$net.0.0/24" --mca btl self,vader,tcp --bind-to none \
	"$bin/bin/ownnic" "$bin/bin/flexbench-mpi" alltoall --backend mpi "${sizes[@]}" --no-inplace -n "$iters" -w 1

# busbw per size in MB/s (flexbench prints GB/s with 2 decimals), from the
# out-of-place time: bytes / time x (n-1)/n, n = 8.
col() { awk '!/^#/ && NF>=9 && $1 ~ /^[0-9]+$/ && $6 > 0 {printf "%s %.1f\n", $1, $1 / $6 * 7 / 8}' "$1"; }
{
	printf "%12s %10s %10s %10s %10s %12s   (busbw MB/s)\n" bytes pxn2 pxn0 off_4rails openmpi openmpi_own
	join <(col "$out/alltoall_pxn2.txt") <(col "$out/alltoall_pxn0.txt") | join - <(col "$out/alltoall_off.txt") | join - <(col "$out/alltoall_mpi.txt") |
		join - <(col "$out/alltoall_mpi_own.txt") | awk '{printf "%12s %10s %10s %10s %10s %12s\n", $1, $2, $3, $4, $5, $6}'
} | tee -a "$sum"
grep -h "^#  *all\|^# PXN\|bufs/rcv" "$out/alltoall_pxn2.txt" "$out/alltoall_pxn0.txt" | tee -a "$sum"
