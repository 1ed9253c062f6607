package ucp

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/flexlink/flexlink/internal/testenv"
)

// TestLayoutUpToDate regenerates the layouts from the installed headers
// and compares them with the committed file: a stale offset or mask bit
// would corrupt memory inside UCX.
func TestLayoutUpToDate(t *testing.T) {
	if _, err := os.Stat("/usr/include/ucp/api/ucp.h"); err != nil {
		testenv.Missing(t, "libucx-dev", "no <ucp/api/ucp.h> to check the generated layouts against")
	}
	testenv.LookPath(t, "cc", "cc")
	gofmt := testenv.LookPath(t, "gofmt", "gofmt")
	dir := t.TempDir()
	bin := filepath.Join(dir, "layout")
	if out, err := exec.Command("cc", "-Wall", "-Werror", "-o", bin, "../gen/layout.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	raw, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "out.go")
	if err := os.WriteFile(src, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command(gofmt, src).Output()
	if err != nil {
		t.Fatalf("gofmt: %v", err)
	}
	want, err := os.ReadFile("zz_layout_generated.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("zz_layout_generated.go differs from the installed headers' layouts: run go generate in %s", "fabric/net/ucx/internal/ucp")
	}
}
