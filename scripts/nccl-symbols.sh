#!/usr/bin/env bash
# nccl-symbols.sh WHEEL_OR_DIR [LIB]: checks that every nccl* symbol a
# PyTorch build needs is exported by flexlink's libnccl.so.2.
#
# WHEEL_OR_DIR is a torch wheel (pip download torch==2.11.0 --no-deps: a
# .whl zip) or an installed torch directory (python3 -c 'import torch,
# os; print(os.path.dirname(torch.__file__))'). Every shared library in it
# (libtorch_cuda.so and any other) is read with nm -D; the nccl*/pnccl*
# symbols they leave undefined must be defined by LIB (default: this
# checkout's build/nccl/lib/libnccl.so.2, from make libnccl). torch loads
# libtorch_cuda.so with RTLD_NOW, so one missing symbol fails
# `import torch` under LD_PRELOAD.
#
# Prints what each library needs and the missing symbols; exits 1 when
# any is missing, 2 on a usage or tool error.
set -euo pipefail

usage() { echo "usage: $0 WHEEL_OR_DIR [LIB]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
src=$1
lib=${2:-$(cd "$(dirname "$0")/.." && pwd)/build/nccl/lib/libnccl.so.2}
command -v nm >/dev/null || { echo "$0: nm (binutils) is needed" >&2; exit 2; }
[[ -f $lib ]] || { echo "$0: $lib: no such library (run make libnccl)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ -f $src ]]; then
  # A wheel: extract only its shared libraries.
  python3 - "$src" "$tmp/wheel" <<'PY' || { echo "$0: $src: not a wheel (zip) I can read" >&2; exit 2; }
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if re.search(r"\.so(\.[0-9.]+)?$", name):
            z.extract(name, sys.argv[2])
PY
  dir=$tmp/wheel
elif [[ -d $src ]]; then
  dir=$src
else
  echo "$0: $src: neither a wheel nor a directory" >&2
  exit 2
fi

nm -D --defined-only "$lib" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/exported"

: >"$tmp/needed"
found=0
while IFS= read -r -d '' so; do
  case $(basename "$so") in libnccl.so*) continue ;; esac
  syms=$(nm -D --undefined-only "$so" 2>/dev/null | awk '{ print $NF }' | sed 's/@.*//' | grep -E '^p?nccl' | sort -u || true)
  [[ -n $syms ]] || continue
  found=1
  echo "${so#"$dir"/}: $(wc -l <<<"$syms") nccl symbols"
  printf '%s\n' "$syms" >>"$tmp/needed"
done < <(find "$dir" -type f -name '*.so*' -print0 | sort -z)

if [[ $found == 0 ]]; then
  echo "$0: no library in $src needs an nccl* symbol (is it a CUDA build of torch?)" >&2
  exit 2
fi
sort -u -o "$tmp/needed" "$tmp/needed"
missing=$(comm -23 "$tmp/needed" "$tmp/exported")
total=$(wc -l <"$tmp/needed")
if [[ -n $missing ]]; then
  echo "missing from $lib ($(wc -l <<<"$missing") of $total):"
  printf '  %s\n' $missing
  exit 1
fi
echo "all $total nccl symbols are exported by $lib"
