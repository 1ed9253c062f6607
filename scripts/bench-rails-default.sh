#!/usr/bin/env bash
# flexlink with its default network settings (every NIC: FLEXLINK_NET_RAILS
# defaults to all) against OpenMPI 4.1 (tcp btl on both subnets) on emulated
# hosts (scripts/testcluster): 2 hosts x 1 and x 2 ranks, 2 rails each,
# every NIC limited to RATE (tc tbf); allreduce and all-to-all at SIZE.
# Each pair of figures is measured back to back, the set REPEATS times,
# interleaved; the summary gives the medians of busbw and the ratio, and
# each host's bytes per rail during the flexlink runs (per-NIC counters).
# Needs root, iproute2, openssh-server, OpenMPI (issue 31's must-show).
# Usage: scripts/bench-rails-default.sh [outdir]
#   ITERS=10 REPEATS=3 RATE=1gbit SIZE=16M NAME=nrdef NET=10.87
#   VARIANT="FLEXLINK_ALGO=ring" also runs flexlink with that setting in
#   each round (a column of its own: what the defaults gain over it).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/bench-rails-default}
iters=${ITERS:-10} repeats=${REPEATS:-3} rate=${RATE:-1gbit} size=${SIZE:-16M}
name=${NAME:-nrdef} net=${NET:-10.87} variant=${VARIANT:-}
mkdir -p "$out"
bin=$(mktemp -d /tmp/flexlink-bench-XXXXXX)
chmod 755 "$bin"
trap 'scripts/testcluster down --name $name >/dev/null 2>&1 || true; rm -rf "$bin"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

go build -o "$bin/bin/" ./cmd/flexrun ./cmd/flexbench || exit 1
CGO_ENABLED=1 go build -tags mpi -o "$bin/bin/flexbench-mpi" ./cmd/flexbench || exit 1
eval "$(scripts/testcluster up 2 --rails 2 --rate "$rate" --name "$name" --net "$net")"
read -r h1 h2 <<<"$TC_HOSTS"

sum="$out/summary.txt"
echo "# $(date -u '+%F %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); 2 emulated hosts, 2 rails at $rate each; $size, $iters iterations, $repeats repeats, medians; flexlink with no settings" | tee "$sum"

# busbw FILE OP RANKS: the bus bandwidth of FILE's row in GB/s, to three
# decimals, from its time (flexbench prints two): size / time x the
# op's factor (nccl-tests': allreduce 2(n-1)/n, all-to-all (n-1)/n).
busbw() {
	awk -v op="$2" -v n="$3" '!/^#/ && NF>=9 && $1 ~ /^[0-9]+$/ && $6 > 0 {
		f = (op == "allreduce") ? 2 * (n - 1) / n : (n - 1) / n
		bw = $1 / ($6 * 1e3) * f
	} END { printf "%.3f\n", bw + 0 }' "$1"
}
ratio() { awk "BEGIN{ if ($2 > 0) printf \"%.2f\", $1/$2; else print \"-\" }"; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
railbytes() { # host rail -> tx bytes
	ip netns exec "${name}h$1" cat "/sys/class/net/rail$2/statistics/tx_bytes"
}
declare -A fig rails
for rep in $(seq 1 "$repeats"); do
	for per in 1 2; do
		printf '%s slots=%d\n%s slots=%d\n' "$h1" "$per" "$h2" "$per" > "$out/hostfile$per"
		for op in allreduce alltoall; do
			f="$out/${op}_${per}_flexlink_$rep.txt"
			b=($(railbytes 1 0) $(railbytes 1 1) $(railbytes 2 0) $(railbytes 2 1))
			timeout 120 "$bin/bin/flexrun" --ssh-args "-F $TC_SSH_CONFIG" --prefix "$bin" -H "$h1:$per,$h2:$per" \
				"$bin/bin/flexbench" "$op" -b "$size" -e "$size" --no-inplace -n "$iters" -w 2 > "$f" 2>&1 || echo "# failed: exit $?" >> "$f"
			a=($(railbytes 1 0) $(railbytes 1 1) $(railbytes 2 0) $(railbytes 2 1))
			rails[$op$per]="h1 rail0 $(( (a[0]-b[0])>>20 )) MiB, rail1 $(( (a[1]-b[1])>>20 )) MiB; h2 rail0 $(( (a[2]-b[2])>>20 )) MiB, rail1 $(( (a[3]-b[3])>>20 )) MiB"
			fig[fl$op$per]+=" $(busbw "$f" "$op" $((2 * per)))"
			if [ -n "$variant" ]; then
				v="$out/${op}_${per}_variant_$rep.txt"
				timeout 120 "$bin/bin/flexrun" --ssh-args "-F $TC_SSH_CONFIG" --prefix "$bin" -H "$h1:$per,$h2:$per" -x "$variant" \
					"$bin/bin/flexbench" "$op" -b "$size" -e "$size" --no-inplace -n "$iters" -w 2 > "$v" 2>&1 || echo "# failed: exit $?" >> "$v"
				fig[var$op$per]+=" $(busbw "$v" "$op" $((2 * per)))"
			fi
			m="$out/${op}_${per}_mpi_$rep.txt"
			timeout 120 mpirun --hostfile "$out/hostfile$per" -np $((2 * per)) --mca plm_rsh_agent "ssh -F $TC_SSH_CONFIG" --mca plm_rsh_no_tree_spawn 1 \
				--mca oob_tcp_if_include "$net.0.0/24" --mca btl self,vader,tcp --mca btl_tcp_if_include "$net.0.0/24,$net.1.0/24" --bind-to none \
				"$bin/bin/flexbench-mpi" "$op" --backend mpi -b "$size" -e "$size" --no-inplace -n "$iters" -w 2 > "$m" 2>&1 || echo "# failed: exit $?" >> "$m"
			fig[mpi$op$per]+=" $(busbw "$m" "$op" $((2 * per)))"
		done
	done
done
{
	printf '| %-28s | %-14s | %-14s | %-5s | %s |' "op, hosts x ranks" "flexlink busbw" "OpenMPI busbw" "ratio" "flexlink bytes per rail (last run)"
	[ -z "$variant" ] || printf ' %s busbw | defaults / it |' "$variant"
	echo
	for per in 1 2; do
		for op in allreduce alltoall; do
			fl=$(echo "${fig[fl$op$per]}" | median) mp=$(echo "${fig[mpi$op$per]}" | median)
			printf '| %-28s | %-14s | %-14s | %-5s | %s |' "$op $size, 2x$per" "$fl [${fig[fl$op$per]# }]" "$mp [${fig[mpi$op$per]# }]" "$(ratio "$fl" "$mp")" "${rails[$op$per]}"
			if [ -n "$variant" ]; then
				va=$(echo "${fig[var$op$per]}" | median)
				printf ' %s [%s] | %s |' "$va" "${fig[var$op$per]# }" "$(ratio "$fl" "$va")"
			fi
			echo
		done
	done
} | tee -a "$sum"
