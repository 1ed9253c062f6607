#!/usr/bin/env bash
# Builds what the GPU machine runs (it has no Go toolchain) into .devbin/:
# the programs (flexbench, flexrun, flexinfo), the GPU test binaries
# (collectives/direct, gpu, cmd/flexbench/internal/nccl, rank: `go test -c`), the NCCL anchor script and
# scripts/gpu-device.sh. Carry .devbin with the device tool and run
#   NCCL_NVLS_ENABLE=0 bash .devbin/gpu-device.sh perf
# there. amd64 Linux; stripped, so the folder stays well under the tool's
# 64 MiB working-tree limit.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.devbin
mkdir -p "$out"
export GOOS=linux GOARCH=amd64
# No kernels in the binaries (tag flexlink_noptx): gpu-common.sh points
# FLEXLINK_GPU_KERNELS at the tree's gpu/kernels/fatbin (9 MB; the folder
# must stay under the tool's 64 MiB with the tree).
flags=(-trimpath -ldflags='-s -w' -tags flexlink_noptx)
go build "${flags[@]}" -o "$out/" ./cmd/flexbench ./cmd/flexinfo
if ! go build "${flags[@]}" -o "$out/" ./cmd/flexrun 2>"$out/flexrun-build.err"; then
	# Someone's launcher work in progress does not build: take flexrun's
	# packages as committed (a build overlay; the working tree is untouched).
	echo "flexrun: working tree does not build ($(head -1 "$out/flexrun-build.err")); using HEAD's launcher/ and cmd/flexrun/"
	tmp=$(mktemp -d)
	for dir in launcher cmd/flexrun; do
		for f in $(git ls-tree --name-only HEAD "$dir/"); do
			case $f in *.go) mkdir -p "$tmp/$(dirname "$f")"; git show "HEAD:$f" >"$tmp/$f" ;; esac
		done
	done
	python3 - "$tmp" <<'PY'
import json, os, subprocess, sys
tmp = sys.argv[1]
rep = {}
for d in ("launcher", "cmd/flexrun"):
    for f in os.listdir(d):
        if f.endswith(".go"):
            p = os.path.join(d, f)
            rep[os.path.abspath(p)] = os.path.join(tmp, p) if os.path.exists(os.path.join(tmp, p)) else ""
    for root, _, files in os.walk(os.path.join(tmp, d)):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), tmp)
            rep.setdefault(os.path.abspath(rel), os.path.join(root, f))
json.dump({"Replace": rep}, open(os.path.join(tmp, "overlay.json"), "w"))
PY
	go build "${flags[@]}" -overlay "$tmp/overlay.json" -o "$out/" ./cmd/flexrun
	rm -rf "$tmp"
fi
rm -f "$out/flexrun-build.err"
# gpu.test runs only its real-GPU tests there (TestGPU*, on FLEXLINK_GPU_KERNELS);
# its fake-driver tests need the embedded kernels and run here.
for pkg in collectives/direct gpu cmd/flexbench/internal/nccl rank; do
	go test -c "${flags[@]}" -o "$out/$(basename "$pkg").test" "./$pkg"
done
anchor=../shared/anchors/nccl_baseline.py
if [ -f "$anchor" ]; then cp "$anchor" "$out/"; fi
cp scripts/gpu-device.sh scripts/gpu-common.sh scripts/gpu-multi.sh scripts/gpu-one.sh "$out/"
cp scripts/pcie_sm_probe.cu scripts/ce_pipeline_probe.cu scripts/cuda_check.h "$out/"
# Compressed: the binaries come to ~50 MB, the tree to ~23 MB, and the
# device tool carries 64 MiB in all; gpu-one.sh decompresses them there.
(cd "$out" && for f in flexbench flexinfo flexrun *.test; do
	if [ -f "$f" ]; then xz -T2 -6 -f "$f"; fi
done)
du -sh "$out"
