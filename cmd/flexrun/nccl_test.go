package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNCCLPreload(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libnccl.so.2")
	if err := os.WriteFile(lib, []byte("not really a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, existing, want, err string
	}{
		{"found", dir, "", "LD_PRELOAD=" + lib, ""},
		{"ahead of an existing preload", dir, "/x/libfoo.so", "LD_PRELOAD=" + lib + ":/x/libfoo.so", ""},
		{"missing", filepath.Join(dir, "nope"), "", "", "no libnccl.so.2 in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ncclPreload(tc.dir, tc.existing)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestNCCLFlag: --nccl-lib DIR puts DIR's libnccl.so.2 in every rank's
// LD_PRELOAD; a DIR without it is an error before any rank starts.
func TestNCCLFlag(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libnccl.so.2")
	// An empty shared object would make the probe fail to start; preload
	// the C library itself under that name, which the loader accepts.
	libc, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Fatalf("this test preloads glibc's libc.so.6 and needs its path: %v", err)
	}
	if err := os.Symlink(libc, lib); err != nil {
		t.Fatal(err)
	}
	for _, p := range reports(t, flexrun(t, runOpts{}, "-np", "2", "--oversubscribe", "--nccl-lib", dir, bins.probe, "env"), 2) {
		if got := p.Env["LD_PRELOAD"]; got != lib {
			t.Errorf("rank %d: LD_PRELOAD=%q, want %q", p.Rank, got, lib)
		}
	}
	r := flexrun(t, runOpts{}, "-np", "1", "--nccl-lib", filepath.Join(dir, "none"), bins.probe, "env")
	if r.code == 0 || !strings.Contains(r.stderr, "no libnccl.so.2") {
		t.Errorf("missing library: exit %d, stderr %q", r.code, r.stderr)
	}
}
