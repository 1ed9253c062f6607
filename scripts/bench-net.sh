#!/usr/bin/env bash
# The network transport on emulated hosts (scripts/testcluster: 2 network
# namespaces, 2 NICs each, sshd each), every figure from this one run, each
# pair of figures measured back to back and the whole set REPEATS times,
# interleaved; the summary gives medians (the machine's cores are shared,
# so single runs swing):
#  1. one rail, unlimited veth, tcp provider (2 sockets per connection):
#     - one way: flexbench broadcast in place with 2 ranks (rank 0 sends,
#       rank 1 receives: one link, one direction) against iperf3 one way, with one
#       stream and with as many streams as the provider has sockets;
#     - both ways: flexbench sendrecv (each rank sends and receives at
#       once; GB/s per direction) against iperf3 --bidir (per direction);
#     at 4 MiB and 64 MiB;
#  2. unlimited: allreduce 64 MiB, 2 hosts x 1 rank, flexlink on both rails
#     and on one, against OpenMPI 4.1 (tcp btl on both rails, and on rail0
#     only) over the same hostfile;
#  3. rails limited to RATE (default 1gbit): sendrecv 64 MiB over 1 rail
#     against 2 rails, and iperf3 on one rail.
#  The ucx provider (UCX_TLS=tcp) the same way, beside ucx_perftest tag_bw
#  (UCX's own one-way figure on the same rail).
# Needs root, iproute2, openssh-server, iperf3, OpenMPI.
# Usage: scripts/bench-net.sh [outdir]
#   ITERS=10 REPEATS=3 RATE=1gbit NAME=nnet NET=10.82 (the cluster's name and subnet)
#   XENV="FLEXLINK_X=v ..." (more settings for every flexlink run)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/bench-net}
iters=${ITERS:-10} repeats=${REPEATS:-3} rate=${RATE:-1gbit}
name=${NAME:-nnet} net=${NET:-10.82} socks=2
mkdir -p "$out"
bin=$(mktemp -d /tmp/flexlink-bench-XXXXXX)
chmod 755 "$bin"
trap 'scripts/testcluster down --name $name >/dev/null 2>&1 || true; rm -rf "$bin"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

go build -o "$bin/bin/" ./cmd/flexrun ./cmd/flexbench || exit 1
CGO_ENABLED=1 go build -tags mpi -o "$bin/bin/flexbench-mpi" ./cmd/flexbench || exit 1
eval "$(scripts/testcluster up 2 --rails 2 --name "$name" --net "$net")"
read -r h1 h2 <<<"$TC_HOSTS"
printf '%s slots=1\n%s slots=1\n' "$h1" "$h2" > "$out/hostfile"
ns1=${name}h1 ns2=${name}h2

sum="$out/summary.txt" raw="$out/runs.txt"
: > "$raw"
echo "# $(date -u '+%F %H:%M UTC'), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), no GPU, load $(cut -d' ' -f1-3 /proc/loadavg); 2 emulated hosts x 1 rank; $iters iterations, $repeats repeats, medians" | tee "$sum"

# busbw of the out-of-place column of the last data row.
busbw() { awk '!/^#/ && NF>=9 && $1 ~ /^[0-9]+$/ {bw=$8} END {print bw+0}' "$1"; }
# busbw of the in-place column of the last data row: the one-way link
# figure (an out-of-place broadcast also copies send to recv on the root,
# 64 MiB of local memmove that is no link's work).
busbw_in() { awk '!/^#/ && NF>=13 && $1 ~ /^[0-9]+$/ {bw=$12} END {print bw+0}' "$1"; }
ratio() { awk "BEGIN{ if ($2 > 0) printf \"%.2f\", $1/$2; else print \"-\" }"; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
flex() { # file env... -- flexbench args
	local f=$1; shift; local env=()
	while [ "$1" != -- ]; do env+=(-x "$1"); shift; done; shift
	local inplace=--no-inplace
	[ "${1:-}" = broadcast ] && inplace= # both columns: busbw_in reads the in-place one
	timeout 120 "$bin/bin/flexrun" --ssh-args "-F $TC_SSH_CONFIG" --prefix "$bin" -H "$h1:1,$h2:1" "${env[@]}" \
		"$bin/bin/flexbench" "$@" $inplace -n "$iters" -w 2 > "$f" 2>&1 || echo "# failed: exit $?" >> "$f"
}
iperf() { # rail [iperf3 args] -> GB/s h1 -> h2 for 4 s (--bidir: the mean of both directions)
	local r=$1; shift
	ip netns exec "$ns2" iperf3 -s -1 -B "$net.$r.2" >/dev/null 2>&1 &
	sleep 0.5
	ip netns exec "$ns1" iperf3 -c "$net.$r.2" -t 4 "$@" -J 2>/dev/null | python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]
bps = [e["sum_received"]["bits_per_second"]]
if "sum_received_bidir_reverse" in e:
    bps.append(e["sum_received_bidir_reverse"]["bits_per_second"])
print("%.3f" % (sum(bps) / len(bps) / 8e9))' || echo 0
	wait
}
perftest() { # size -> GB/s one way, ucx_perftest tag_bw h1 -> h2 on rail0
	local n=$(( $(numfmt --from=iec "$1") >= 64<<20 ? 20 : 200 ))
	ip netns exec "$ns2" env UCX_TLS=tcp UCX_NET_DEVICES=rail0 timeout 60 ucx_perftest -p 13347 >/dev/null 2>&1 &
	sleep 0.5
	ip netns exec "$ns1" env UCX_TLS=tcp UCX_NET_DEVICES=rail0 timeout 60 ucx_perftest "$net.0.2" -p 13347 \
		-t tag_bw -s "$(numfmt --from=iec "$1")" -n "$n" 2>/dev/null |
		awk '/^Final:/ {printf "%.3f\n", $6 * 1048576 / 1e9; ok=1} END {if (!ok) print 0}'
	wait
}
perftest2() { # size -> GB/s per direction, two ucx_perftest tag_bw pairs at once, h1 -> h2 and h2 -> h1 on rail0
	local b; b=$(numfmt --from=iec "$1")
	local n=$(( b >= 64<<20 ? 20 : 200 )) t; t=$(mktemp -d)
	ip netns exec "$ns2" env UCX_TLS=tcp UCX_NET_DEVICES=rail0 timeout 60 ucx_perftest -p 13348 >/dev/null 2>&1 &
	ip netns exec "$ns1" env UCX_TLS=tcp UCX_NET_DEVICES=rail0 timeout 60 ucx_perftest -p 13349 >/dev/null 2>&1 &
	sleep 0.5
	ip netns exec "$ns1" env UCX_TLS=tcp UCX_NET_DEVICES=rail0 timeout 60 ucx_perftest "$h2" -p 13348 -t tag_bw -s "$b" -n "$n" >"$t/a" 2>/dev/null &
	ip netns exec "$ns2" env UCX_TLS=tcp UCX_NET_DEVICES=rail0 timeout 60 ucx_perftest "$h1" -p 13349 -t tag_bw -s "$b" -n "$n" >"$t/b" 2>/dev/null &
	wait
	cat "$t/a" "$t/b" | awk '/^Final:/ {s += $6 * 1048576 / 1e9; k++} END {if (k == 2) printf "%.3f\n", s / 2; else print 0}'
	rm -rf "$t"
}
declare -A v # key -> space-separated figures
add() { v[$1]="${v[$1]:-} $2"; echo "$1 $2" >> "$raw"; }
nenv=(FLEXLINK_NET_IFNAME=rail FLEXLINK_NET=tcp FLEXLINK_NET_SOCKETS=$socks ${XENV:-})

for rep in $(seq "$repeats"); do
	# 1. Provider against the raw socket, one unlimited rail.
	add iperf1 "$(iperf 0)"
	add iperfP "$(iperf 0 -P $socks)"
	add iperfbidir "$(iperf 0 --bidir)"
	for sz in 4M 64M; do
		f="$out/broadcast_${sz}_$rep.txt"
		flex "$f" "${nenv[@]}" FLEXLINK_NET_RAILS=1 -- broadcast -b $sz -e $sz
		add "bcast$sz" "$(busbw_in "$f")"
		f="$out/sendrecv_${sz}_$rep.txt"
		flex "$f" "${nenv[@]}" FLEXLINK_NET_RAILS=1 -- sendrecv -b $sz -e $sz
		add "sendrecv$sz" "$(busbw "$f")"
	done
	# 2. Allreduce 64 MiB against OpenMPI (unlimited rails).
	f="$out/allreduce_flexlink_$rep.txt"
	flex "$f" "${nenv[@]}" FLEXLINK_NET_RAILS=0 -- allreduce -b 64M -e 64M
	add ar2 "$(busbw "$f")"
	f="$out/allreduce_flexlink_1rail_$rep.txt"
	flex "$f" "${nenv[@]}" FLEXLINK_NET_RAILS=1 -- allreduce -b 64M -e 64M
	add ar1 "$(busbw "$f")"
	m="$out/allreduce_mpi_$rep.txt"
	timeout 120 mpirun --hostfile "$out/hostfile" -np 2 --mca plm_rsh_agent "ssh -F $TC_SSH_CONFIG" --mca plm_rsh_no_tree_spawn 1 \
		--mca oob_tcp_if_include "$net.0.0/24" --mca btl self,vader,tcp --mca btl_tcp_if_include "$net.0.0/24,$net.1.0/24" --bind-to none \
		"$bin/bin/flexbench-mpi" allreduce --backend mpi -b 64M -e 64M --no-inplace -n "$iters" -w 2 > "$m" 2>&1 || echo "# failed: exit $?" >> "$m"
	add armpi "$(busbw "$m")"
	m="$out/allreduce_mpi_1rail_$rep.txt"
	timeout 120 mpirun --hostfile "$out/hostfile" -np 2 --mca plm_rsh_agent "ssh -F $TC_SSH_CONFIG" --mca plm_rsh_no_tree_spawn 1 \
		--mca oob_tcp_if_include "$net.0.0/24" --mca btl self,vader,tcp --mca btl_tcp_if_include "$net.0.0/24" --bind-to none \
		"$bin/bin/flexbench-mpi" allreduce --backend mpi -b 64M -e 64M --no-inplace -n "$iters" -w 2 > "$m" 2>&1 || echo "# failed: exit $?" >> "$m"
	add armpi1 "$(busbw "$m")"

	# 1b. The ucx provider (UCX_TLS=tcp) on the same rail, and UCX's own
	# tag bandwidth there (ucx_perftest): the provider's overhead.
	uenv=(FLEXLINK_NET_IFNAME=rail FLEXLINK_NET=ucx UCX_TLS=tcp UCX_NET_DEVICES=rail0 FLEXLINK_NET_RAILS=1 ${XENV:-})
	for sz in 4M 64M; do
		f="$out/broadcast_ucx_${sz}_$rep.txt"
		flex "$f" "${uenv[@]}" -- broadcast -b $sz -e $sz
		add "ucxb$sz" "$(busbw_in "$f")"
		f="$out/sendrecv_ucx_${sz}_$rep.txt"
		flex "$f" "${uenv[@]}" -- sendrecv -b $sz -e $sz
		add "ucxs$sz" "$(busbw "$f")"
		add "perftest$sz" "$(perftest $sz)"
		add "perftest2$sz" "$(perftest2 $sz)"
	done
done

# 3. Rate-limited rails: 1 against 2.
for h in "$ns1" "$ns2"; do for r in 0 1; do
	ip netns exec "$h" tc qdisc replace dev rail$r root tbf rate "$rate" burst 256kb latency 50ms
done; done
for rep in $(seq "$repeats"); do
	add iperflim "$(iperf 0)"
	f="$out/sendrecv_rails1_$rep.txt"
	flex "$f" "${nenv[@]}" FLEXLINK_NET_RAILS=1 -- sendrecv -b 64M -e 64M
	add lim1 "$(busbw "$f")"
	f="$out/sendrecv_rails2_$rep.txt"
	flex "$f" "${nenv[@]}" FLEXLINK_NET_RAILS=0 -- sendrecv -b 64M -e 64M
	add lim2 "$(busbw "$f")"
done

m() { echo "${v[$1]:-}" | median; }
row() { printf "%-58s %8s %8s   %-34s\n" "$1" "$2" "$3" "runs: $4" | tee -a "$sum"; }
printf "%-58s %8s %8s   %s\n" "what (GB/s, medians)" value ratio "" | tee -a "$sum"
row "iperf3 rail0, 1 stream, one way" "$(m iperf1)" "" "${v[iperf1]}"
row "iperf3 rail0, $socks streams, one way" "$(m iperfP)" "" "${v[iperfP]}"
row "iperf3 rail0, --bidir, per direction" "$(m iperfbidir)" "" "${v[iperfbidir]}"
for sz in 4M 64M; do
	row "broadcast $sz (one way) / iperf3 1 stream" "$(m bcast$sz)" "$(ratio "$(m bcast$sz)" "$(m iperf1)")" "${v[bcast$sz]}"
	row "broadcast $sz (one way) / iperf3 $socks streams" "$(m bcast$sz)" "$(ratio "$(m bcast$sz)" "$(m iperfP)")" ""
	row "sendrecv $sz (per direction) / iperf3 --bidir" "$(m sendrecv$sz)" "$(ratio "$(m sendrecv$sz)" "$(m iperfbidir)")" "${v[sendrecv$sz]}"
	row "ucx_perftest tag_bw $sz (one way, UCX_TLS=tcp)" "$(m perftest$sz)" "" "${v[perftest$sz]}"
	row "ucx provider: broadcast $sz (one way) / iperf3 1 stream" "$(m ucxb$sz)" "$(ratio "$(m ucxb$sz)" "$(m iperf1)")" "${v[ucxb$sz]}"
	row "ucx provider: broadcast $sz (one way) / ucx_perftest" "$(m ucxb$sz)" "$(ratio "$(m ucxb$sz)" "$(m perftest$sz)")" ""
	row "ucx_perftest tag_bw $sz both ways at once (per direction)" "$(m perftest2$sz)" "" "${v[perftest2$sz]}"
	row "ucx provider: sendrecv $sz (per direction) / iperf3 --bidir" "$(m ucxs$sz)" "$(ratio "$(m ucxs$sz)" "$(m iperfbidir)")" "${v[ucxs$sz]}"
	row "ucx provider: sendrecv $sz (per direction) / ucx_perftest both ways" "$(m ucxs$sz)" "$(ratio "$(m ucxs$sz)" "$(m perftest2$sz)")" ""
done
row "allreduce 64M busbw, 2 rails / OpenMPI" "$(m ar2)" "$(ratio "$(m ar2)" "$(m armpi)")" "${v[ar2]}"
row "allreduce 64M busbw, 1 rail / OpenMPI" "$(m ar1)" "$(ratio "$(m ar1)" "$(m armpi)")" "${v[ar1]}"
row "allreduce 64M busbw, 1 rail / OpenMPI on rail0 only" "$(m ar1)" "$(ratio "$(m ar1)" "$(m armpi1)")" ""
row "allreduce 64M busbw, OpenMPI 4.1 tcp btl on both rails" "$(m armpi)" "" "${v[armpi]}"
row "allreduce 64M busbw, OpenMPI 4.1 tcp btl on rail0 only" "$(m armpi1)" "" "${v[armpi1]}"
row "rails at $rate: iperf3 one rail" "$(m iperflim)" "" "${v[iperflim]}"
row "rails at $rate: sendrecv 64M, 1 rail" "$(m lim1)" "" "${v[lim1]}"
row "rails at $rate: sendrecv 64M, 2 rails / 1 rail" "$(m lim2)" "$(ratio "$(m lim2)" "$(m lim1)")" "${v[lim2]}"
