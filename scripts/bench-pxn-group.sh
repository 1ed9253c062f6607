#!/usr/bin/env bash
# bench-pxn-group.sh [OUT]: an all-to-all made of one Group of a send and
# a receive per peer (PyTorch's all_to_all_single over send/recv), timed by
# proxy/pxntest's a2a program (-bench ... -group-bench), on the emulated
# rail-optimized cluster (2 hosts x 4 ranks, 4 rate-limited rails, spine),
# with PXN 2 through the relays' group service. With BASE=<git revision>
# the same runs of that revision's build are interleaved with this tree's
# (before/after on the same machine state). ROUNDS (3) runs of each; every
# run prints a busbw table (bytes per rank, us per call, GB/s). XENV adds
# settings to both (e.g. XENV="FLEXLINK_NET_SOCKETS=4"), A2AARGS arguments
# to the program (e.g. A2AARGS=-barrier: a barrier after each call).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/bench-pxn-group}
rounds=${ROUNDS:-3} iters=${ITERS:-10} sizes=${SIZES:-8192,65536,1048576,16777216}
rate=${RATE:-400mbit} spine=${SPINE:-100mbit}
name=pxg net=10.83
mkdir -p "$out"
tmp=$(mktemp -d /tmp/flexlink-bench-pxg-XXXXXX)
chmod 755 "$tmp"
trap 'scripts/testcluster down --name $name >/dev/null 2>&1 || true; git worktree remove --force "$tmp/base-src" >/dev/null 2>&1; rm -rf "$tmp"' EXIT

build() { # src dir
	(cd "$1" && go build -o "$2/bin/" ./cmd/flexrun && go build -o "$2/bin/a2a" ./proxy/pxntest/testdata/a2a) || exit 1
}
kinds=(after)
build . "$tmp/after"
if [ -n "${BASE:-}" ]; then
	git worktree add --detach "$tmp/base-src" "$BASE" >/dev/null 2>&1 || exit 1
	# The base runs this tree's benchmark program (its flags), built
	# against the base's packages.
	rm -rf "$tmp/base-src/proxy/pxntest/testdata/a2a" && cp -r proxy/pxntest/testdata/a2a "$tmp/base-src/proxy/pxntest/testdata/"
	build "$tmp/base-src" "$tmp/before"
	kinds=(before after)
fi
eval "$(scripts/testcluster up 2 --rails 4 --rate "$rate" --spine "$spine" --name $name --net $net)"
read -r h1 h2 <<<"$TC_HOSTS"
xenv=()
for e in ${XENV:-}; do xenv+=(-x "$e"); done
sum="$out/summary.txt"
echo "# $(date -u '+%F %H:%M') UTC, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg); 2 hosts x 4 ranks, 4 rails of $rate, spine $spine; a2a -bench $sizes -iters $iters -group-bench ${A2AARGS:-}, FLEXLINK_PXN=2; XENV=${XENV:-none}; BASE=${BASE:-none} ($(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty) after)" | tee "$sum"
for r in $(seq "$rounds"); do
	for k in "${kinds[@]}"; do
		f="$out/$k-$r.txt"
		timeout 600 "$tmp/$k/bin/flexrun" --ssh-args "-F $TC_SSH_CONFIG" --prefix "$tmp/$k" -H "$h1:4,$h2:4" \
			-x FLEXLINK_NET=tcp -x FLEXLINK_NET_IFNAME=rail -x FLEXLINK_PXN=2 -x FLEXLINK_PXN_GROUP=1 "${xenv[@]}" \
			"$tmp/$k/bin/a2a" -bench "$sizes" -iters "$iters" -group-bench ${A2AARGS:-} > "$f" 2>&1 || echo "# failed: exit $?" >> "$f"
		echo "== $k run $r" | tee -a "$sum"
		grep -E '^ +[0-9]+ ' "$f" | tee -a "$sum"
		grep -h "pxn counters" "$f" | awk '{for(i=1;i<=NF;i++){split($i,a,"="); if(a[1]=="received")rv+=a[2]; if(a[1]=="receives")rs+=a[2]}} END{if(rs>0) printf "# received %d in %d receives (%.2f per receive)\n", rv, rs, rv/rs}' | tee -a "$sum"
	done
done
