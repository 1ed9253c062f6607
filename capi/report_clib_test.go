package capi

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// ncclStub is a libnccl.so.2 that is not flexlink's (PyTorch's wheel
// brings NVIDIA's, found through its RPATH): every call fails loudly.
// flexrun --nccl-lib must put flexlink's ahead of it (LD_PRELOAD).
const ncclStub = `#include <stdio.h>
#include <stdlib.h>
static void stub(const char *f) { fprintf(stderr, "the stub libnccl.so.2 was called: %s\n", f); exit(99); }
int ncclGetUniqueId(void *id) { stub("ncclGetUniqueId"); return 1; }
int ncclCommInitRank(void *c, int n, char id[128], int r) { stub("ncclCommInitRank"); return 1; }
int ncclAllReduce(const void *s, void *r, unsigned long n, int t, int o, void *c, void *st) { stub("ncclAllReduce"); return 1; }
const char *ncclGetLastError(void *c) { stub("ncclGetLastError"); return ""; }
`

// TestCLibraryVerdict is TestFlexrunVerdictLibnccl through the C library,
// as a PyTorch job meets it: a C program linked against another
// libnccl.so.2 (a stub, as PyTorch's wheel brings NVIDIA's) runs as 3
// ranks under flexrun --nccl-lib with flexlink's preloaded; rank 1
// withholds the fifth allreduce and the others time out in it
// (FLEXLINK_TIMEOUT=2s). flexrun's verdict names rank 1, from the other
// ranks' reports, and the job ends within seconds of the timeout.
func TestCLibraryVerdict(t *testing.T) {
	cc := testenv.LookPath(t, "C compiler", "cc")
	w := newCWorkshop(t)
	dir := w.dir
	libDir, stubDir := w.libnccl(), filepath.Join(dir, "stub")
	if err := os.MkdirAll(stubDir, 0o755); err != nil {
		t.Fatal(err)
	}
	stubSrc := filepath.Join(dir, "stub.c")
	if err := os.WriteFile(stubSrc, []byte(ncclStub), 0o644); err != nil {
		t.Fatal(err)
	}
	w.run(cc, "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", filepath.Join(stubDir, "libnccl.so.2"), stubSrc)
	prog := w.program(cc, "nccl_withhold", stubDir)
	flexrun := w.flexrun()

	const timeout = 2 * time.Second
	cmd := exec.CommandContext(w.ctx, flexrun, "-np", "3", "--oversubscribe", "--kill-grace", "1s", "--nccl-lib", libDir,
		"-x", "FLEXLINK_TIMEOUT="+timeout.String(), prog, filepath.Join(dir, "id"), "1")
	code, elapsed, lines, stderr := runFlexrun(t, cmd)
	first := regexp.MustCompile(`^rank 1 \(host \S+, pid \d+\) did not take part in AllReduce #5 on communicator nccl@\S+/w: ranks 0, 2 timed out waiting for it(; terminating 1 other rank)?$`)
	second := regexp.MustCompile(`^ranks 0, 2 stopped: timed out waiting for rank 1$`)
	if code != 1 {
		t.Errorf("exit status %d, want 1 (the waiting ranks')", code)
	}
	if len(lines) == 0 || !first.MatchString(lines[0]) {
		t.Errorf("flexrun's first line does not match %q", first)
	}
	if len(lines) < 2 || !second.MatchString(lines[1]) {
		t.Errorf("flexrun's second line does not match %q", second)
	}
	for _, r := range []int{0, 2} {
		if want := "rank " + strconv.Itoa(r) + ": allreduce 5: ncclAllReduce rank " + strconv.Itoa(r) + " of 3: rank 1 has not called AllReduce #5"; !strings.Contains(stderr.String(), want) {
			t.Errorf("rank %d's own error does not say %q", r, want)
		}
	}
	if limit := timeout + 10*time.Second; elapsed > limit {
		t.Errorf("the job took %v, want at most %v", elapsed, limit)
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr.String())
	}
}
