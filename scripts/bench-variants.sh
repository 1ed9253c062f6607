#!/usr/bin/env bash
# flexlink against itself with one setting changed, on emulated hosts
# (scripts/testcluster): 2 hosts x PER ranks, 2 rails; for each round, each
# op and each variant (a VAR=value exported to the ranks, or "none" for
# the defaults), one flexbench run at SIZE; prints each run's busbw. No
# anchor: it answers "does this setting help here", an A/B in the same
# rounds; the figures that count come with OpenMPI beside them
# (scripts/bench-rails-default.sh).
# Usage: [RATE=1gbit|none] [SIZE=16M] [PER=2] [REPS=2] [ITERS=5]
#        [OPS="allreduce alltoall"] [VARIANTS="none FLEXLINK_ALGO=ring"]
#        scripts/bench-variants.sh
# Needs root, iproute2, openssh-server (as testcluster does).
set -uo pipefail
cd "$(dirname "$0")/.."
name=${NAME:-abv} net=${NET:-10.92} rate=${RATE:-1gbit}
bin=$(mktemp -d /tmp/flexlink-variants-XXXXXX)
chmod 755 "$bin"
trap 'scripts/testcluster down --name $name >/dev/null 2>&1 || true; rm -rf "$bin"' EXIT
go build -o "$bin/bin/" ./cmd/flexrun ./cmd/flexbench || exit 1
rateargs=(--rate "$rate")
[ "$rate" = none ] && rateargs=()
eval "$(scripts/testcluster up 2 --rails 2 "${rateargs[@]}" --name "$name" --net "$net")"
read -r h1 h2 <<<"$TC_HOSTS"
per=${PER:-2}
echo "# $(date -u '+%F %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); 2 hosts x $per ranks, 2 rails, rate $rate, ${SIZE:-16M}"
for rep in $(seq 1 "${REPS:-2}"); do
	for op in ${OPS:-allreduce alltoall}; do
		for v in ${VARIANTS:-none FLEXLINK_ALGO=ring}; do
			x=()
			[ "$v" != none ] && x=(-x "$v")
			bw=$(timeout 120 "$bin/bin/flexrun" --ssh-args "-F $TC_SSH_CONFIG" --prefix "$bin" -H "$h1:$per,$h2:$per" "${x[@]}" \
				"$bin/bin/flexbench" "$op" -b "${SIZE:-16M}" -e "${SIZE:-16M}" --no-inplace -n "${ITERS:-5}" -w 2 2>&1 |
				awk '!/^#/ && NF>=9 && $1 ~ /^[0-9]+$/ {bw=$8} END {print bw+0}')
			echo "$op $v round $rep busbw $bw GB/s"
		done
	done
done
