#!/usr/bin/env bash
# gpu-readme.sh: the README's GPU command blocks, run as written on a GPU
# machine (tests/readme runs the blocks that need no GPU in `make test`).
# It runs every fenced block marked `<!-- readme-test: gpu -->` in
# README.md, in order, in one bash from the repository root, and prints
# PASS or FAIL per block (exit 1 when any fails).
#
# The GPU machines have no Go toolchain: build here, carry the results,
# and the blocks' `make` lines are then skipped (their outputs checked):
#
#   make libnccl && go build -o bin/ ./cmd/flexrun      # here
#   run(carry=["bin/flexrun", "build/nccl"]): bash scripts/gpu-readme.sh
#
# Needs on the GPU machine: the NVIDIA driver r580 or later, python3 with
# torch (CUDA build) and torchrun.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=$PWD/bin:$PATH NCCL_NVLS_ENABLE=0
have_go=0; command -v go >/dev/null && have_go=1

fail=0
python3 - <<'PY' >/tmp/gpu-readme.blocks
import re
lines = open("README.md").read().split("\n")
out, i = [], 0
while i < len(lines):
    if lines[i].startswith("```") and i > 0 and re.fullmatch(r"<!-- readme-test: gpu -->", lines[i - 1]):
        start, body = i + 1, []
        i += 1
        while not lines[i].startswith("```"):
            body.append(lines[i]); i += 1
        out.append("### README line %d\n%s" % (start, "\n".join(body)))
    i += 1
print("\n\0".join(out), end="")
PY
[ -s /tmp/gpu-readme.blocks ] || { echo "gpu-readme: no block of README.md is marked readme-test: gpu"; exit 1; }
while IFS= read -r -d '' blk || [ -n "$blk" ]; do
	head=$(printf '%s\n' "$blk" | head -1)
	body=$(printf '%s\n' "$blk" | tail -n +2)
	if [ $have_go = 0 ]; then
		# make lines need Go: check what they would have built instead.
		if printf '%s\n' "$body" | grep -q '^make '; then
			for f in bin/flexrun build/nccl/lib/libnccl.so.2; do
				[ -e "$f" ] || { echo "FAIL $head: no Go here and $f was not carried"; fail=1; continue 2; }
			done
		fi
		body=$(printf '%s\n' "$body" | grep -v '^make ')
	fi
	echo "== $head"
	if timeout 600 bash -euo pipefail -c "$body"; then
		echo "PASS $head"
	else
		echo "FAIL $head (exit $?)"; fail=1
	fi
done </tmp/gpu-readme.blocks
exit $fail
