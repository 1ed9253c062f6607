package gpu_test

import (
	"bytes"
	"testing"

	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestFakeCopyLocal: CopyLocal copies with a kernel up to 1 MiB and with
// the copy engine above, every byte and none past the destination, and
// does nothing for the same memory or no bytes.
func TestFakeCopyLocal(t *testing.T) {
	drv, calls, err := gpufake.OpenCounted(gpufake.Config{Devices: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	dv, err := drv.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	s := mustStream(t, dv)
	const max = 2<<20 + 64
	src, dst := mustAlloc(t, dv, max), mustAlloc(t, dv, max)
	pattern := make([]byte, max)
	for i := range pattern {
		pattern[i] = byte(i*7 + 3)
	}
	if err := s.CopyHtoD(src, pattern); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n, srcOff, dstOff int
		kernel, engine    int // launches and copy-engine copies expected
	}{
		{1, 0, 0, 1, 0}, {4099, 5, 3, 1, 0}, {1 << 20, 0, 64, 1, 0}, {1<<20 + 1, 0, 0, 0, 1}, {2 << 20, 64, 0, 0, 1}, {0, 0, 0, 0, 0},
	} {
		if err := s.Memset(dst, 0xEE); err != nil {
			t.Fatal(err)
		}
		before := calls.Counts()
		if err := s.CopyLocal(dst.Sub(tc.dstOff, tc.n), src.Sub(tc.srcOff, tc.n)); err != nil {
			t.Fatalf("%d bytes: %v", tc.n, err)
		}
		d := calls.Since(before)
		if d["LaunchKernel"] != tc.kernel || d["MemcpyAsync"] != tc.engine {
			t.Errorf("%d bytes: %d kernel launches and %d copy-engine copies, want %d and %d", tc.n, d["LaunchKernel"], d["MemcpyAsync"], tc.kernel, tc.engine)
		}
		got := make([]byte, max)
		if err := s.CopyDtoH(got, dst); err != nil {
			t.Fatal(err)
		}
		want := bytes.Repeat([]byte{0xEE}, max)
		copy(want[tc.dstOff:], pattern[tc.srcOff:tc.srcOff+tc.n])
		if !bytes.Equal(got, want) {
			t.Errorf("%d bytes from %d to %d: the destination is not the source's bytes alone", tc.n, tc.srcOff, tc.dstOff)
		}
	}
	before := calls.Counts()
	if err := s.CopyLocal(src.Sub(0, 4096), src.Sub(0, 4096)); err != nil {
		t.Fatal(err)
	}
	if d := calls.Since(before); len(d) != 0 {
		t.Errorf("a copy onto itself made driver calls %v", d)
	}
	if err := s.CopyLocal(dst.Sub(0, 8), src.Sub(0, 16)); err == nil {
		t.Error("a copy of unequal lengths was accepted")
	}
}
