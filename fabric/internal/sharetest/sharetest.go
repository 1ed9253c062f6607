// Package sharetest is what the tests of the shares that ride with a
// plane's links (fabric/pcieshare, fabric/netshare) set up alike: a host
// that serves both, the all-gather a plane runs for Open, ranks run at
// once, and device buffers loaded and read back. Tests only.
package sharetest

import (
	"context"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/gpu"
)

// Host is a communicator's side of a share (pcieshare.Host,
// netshare.Host and netshare.JobAuth) for ranks on one host, "fakehost",
// of communicator "test" in a job that never ends.
type Host struct{ done chan struct{} }

// NewHost returns a Host.
func NewHost() Host { return Host{done: make(chan struct{})} }

func (Host) Log() hclog.Logger          { return hclog.NewNullLogger() }
func (Host) Host() string               { return "fakehost" }
func (Host) PeerHost(int) string        { return "fakehost" }
func (Host) Name() string               { return "test" }
func (Host) ID() uint64                 { return 7 }
func (Host) JobErr() error              { return nil }
func (h Host) JobDone() <-chan struct{} { return h.done }
func (Host) JobAuth() ([]byte, string)  { return []byte("sharetest"), "job" }

// Agree returns, for each of n ranks, the all-gather a plane gives a
// share's Open (pcieshare.Agree): rank r's mine lands at all[r*len(mine):]
// of every rank's all, once every rank has called it; a call ends early
// with its ctx. Each rank calls its function once.
func Agree(n int) []func(ctx context.Context, mine, all []byte) error {
	var mu sync.Mutex
	var got [][]byte
	have := 0
	ready := make(chan struct{})
	fs := make([]func(ctx context.Context, mine, all []byte) error, n)
	for r := range n {
		fs[r] = func(ctx context.Context, mine, all []byte) error {
			mu.Lock()
			if got == nil {
				got = make([][]byte, n)
			}
			got[r] = append([]byte(nil), mine...)
			if have++; have == n {
				close(ready)
			}
			mu.Unlock()
			select {
			case <-ready:
			case <-ctx.Done():
				return ctx.Err()
			}
			at := 0
			for _, m := range got {
				at += copy(all[at:], m)
			}
			return nil
		}
	}
	return fs
}

// OnAll runs f for ranks 0 to n-1 at once and fails the test on any
// rank's error, naming it.
func OnAll(t *testing.T, n int, f func(r int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(r) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// Pattern is n bytes whose byte i is i*mul+add (mod 256).
func Pattern(n, mul, add int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*mul + add)
	}
	return b
}

// Upload allocates a buffer of len(data) bytes on s's device and copies
// data into it on s.
func Upload(t *testing.T, dev *gpu.Device, s *gpu.Stream, data []byte) *gpu.Buffer {
	t.Helper()
	b, err := dev.Alloc(len(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CopyHtoD(b, data); err != nil {
		t.Fatal(err)
	}
	return b
}

// Download is b's bytes, copied on s.
func Download(t *testing.T, s *gpu.Stream, b *gpu.Buffer) []byte {
	t.Helper()
	out := make([]byte, b.Len())
	if err := s.CopyDtoH(out, b); err != nil {
		t.Fatal(err)
	}
	return out
}

// Streams makes one stream on each device.
func Streams(t *testing.T, devs ...*gpu.Device) []*gpu.Stream {
	t.Helper()
	ss := make([]*gpu.Stream, len(devs))
	for i, d := range devs {
		s, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		ss[i] = s
	}
	return ss
}
