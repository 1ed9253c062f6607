#!/bin/sh
# Regenerates zz_layout_generated.go from the installed UCX headers
# (libucx-dev): compiles ../gen/layout.c with the system C compiler, runs it,
# gofmt's the output. Run through `go generate` in this directory.
set -eu
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$cc -Wall -Werror -o "$tmp/layout" ../gen/layout.c
"$tmp/layout" > "$tmp/out.go"
gofmt "$tmp/out.go" > zz_layout_generated.go
