package gpu_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/gpu/internal/cufake"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestSharedHost: memory made on one device and opened through /proc (here
// by the same process, as a peer process would) is the same memory, a D2H
// into one mapping and an H2D out of the other move the data between two
// devices, and Close gives every registration and mapping back.
func TestSharedHost(t *testing.T) {
	drv, err := gpufake.Open(gpufake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	fake := drv.Backend().(*cufake.Fake)
	d0, _ := drv.Device(0)
	d1, _ := drv.Device(1)
	_, hostBefore, _, _, _, _ := fake.Live()

	a, err := d0.NewSharedHost(10000)
	if err != nil {
		t.Fatal(err)
	}
	if a.Len()%4096 != 0 || a.Len() < 10000 {
		t.Fatalf("length %d: want whole pages", a.Len())
	}
	b, err := d1.OpenSharedHost(a.Ref())
	if err != nil {
		t.Fatal(err)
	}
	if &a.Bytes()[0] == &b.Bytes()[0] {
		t.Fatal("the peer got the creator's mapping, not its own")
	}
	// Another length or inode is refused.
	bad := a.Ref()
	bad.Ino++
	if _, err := d1.OpenSharedHost(bad); err == nil {
		t.Fatal("a wrong inode was accepted")
	}

	s0, _ := d0.NewStream()
	s1, _ := d1.NewStream()
	defer s0.Close()
	defer s1.Close()
	src, _ := d0.Alloc(4096)
	dst, _ := d1.Alloc(4096)
	defer src.Free()
	defer dst.Free()
	want := bytes.Repeat([]byte("pcie"), 1024)
	if err := s0.CopyHtoD(src, want); err != nil {
		t.Fatal(err)
	}
	if err := s0.CopyDtoH(a.Bytes()[4096:8192], src); err != nil {
		t.Fatal(err)
	}
	if err := s1.CopyHtoD(dst, b.Bytes()[4096:8192]); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	if err := s1.CopyDtoH(got, dst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("data did not cross the shared mapping")
	}

	if err := a.CloseFD(); err != nil {
		t.Fatal(err)
	}
	if _, err := d1.OpenSharedHost(a.Ref()); err == nil {
		t.Fatal("opened after the creator closed its descriptor")
	}
	for _, h := range []*gpu.SharedHost{b, a} {
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); !errors.Is(err, errs.ErrClosed) {
		t.Fatalf("second close: %v, want ErrClosed", err)
	}
	if _, h, _, _, _, _ := fake.Live(); h != hostBefore {
		t.Fatalf("%d host ranges registered after close, %d before", h, hostBefore)
	}
}

// sharedHostChildEnv carries the reference to the helper process of
// TestSharedHostProcesses (a test-only variable, not a setting).
const sharedHostChildEnv = "GPU_SHAREDHOST_CHILD_REF"

// TestSharedHostProcesses: another process opens the memory through
// /proc/<pid>/fd/<fd>, sees what this one wrote and writes back, as a PCIe
// receiver opens its sender's staging buffer.
func TestSharedHostProcesses(t *testing.T) {
	drv, err := gpufake.Open(gpufake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	d0, _ := drv.Device(0)
	h, err := d0.NewSharedHost(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	copy(h.Bytes(), "from the creator")
	ref := h.Ref()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSharedHostChild$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %d %d", sharedHostChildEnv, ref.PID, ref.FD, ref.Len, ref.Ino))
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestSharedHostChild")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if got := string(h.Bytes()[4096 : 4096+14]); got != "from the child" {
		t.Fatalf("the child's write reads %q here", got)
	}
}

// TestSharedHostChild is the helper process of TestSharedHostProcesses;
// run on its own it does nothing.
func TestSharedHostChild(t *testing.T) {
	v := os.Getenv(sharedHostChildEnv)
	if v == "" {
		return
	}
	var ref gpu.SharedHostRef
	if _, err := fmt.Sscan(v, &ref.PID, &ref.FD, &ref.Len, &ref.Ino); err != nil {
		t.Fatal(err)
	}
	if ref.PID == os.Getpid() {
		t.Fatal("not another process")
	}
	drv, err := gpufake.Open(gpufake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	d1, _ := drv.Device(1)
	h, err := d1.OpenSharedHost(ref)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if got := string(h.Bytes()[:16]); got != "from the creator" {
		t.Fatalf("read %q", got)
	}
	copy(h.Bytes()[4096:], "from the child")
}
