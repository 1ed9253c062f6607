package plane

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/flog"
	"github.com/hashicorp/go-hclog"
)

// queueCaller is a communicator of 2 ranks whose queue runs each call at
// once on the caller's thread, as comm.Comm's does.
type queueCaller struct {
	fakeCaller
	mu sync.Mutex
}

func (q *queueCaller) Rank() int                { return 0 }
func (q *queueCaller) CheckPeer(p int) error    { return nil }
func (q *queueCaller) CheckRoot(root int) error { return nil }
func (q *queueCaller) Run(ctx context.Context, _ string, f func(context.Context) error) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return f(ctx)
}

// checkPlane checks, in every call it is handed, that the Op describes
// the buffers it was made from (a record reused across calls or shared
// by two threads would not).
type checkPlane struct {
	fakePlane
	calls int
}

// bufKey carries, in a call's context, the buffer the caller passed.
type bufKey struct{}

func (p *checkPlane) Do(ctx context.Context, o *Op, _ *gpu.Stream) error {
	p.calls++
	want, _ := ctx.Value(bufKey{}).(*gpu.Buffer)
	switch {
	case o.Kind == AllReduce && o.Send != want, o.Kind == Group && len(o.P2P) > 0 && o.P2P[0].Buf != want:
		return fmt.Errorf("%s: the plane was handed another call's buffer", o.Kind)
	}
	switch o.Kind {
	case AllReduce:
		if o.Send.Len() != o.Count*o.DT.Size() || o.Recv.Len() != o.Send.Len() || len(o.P2P) != 0 {
			return fmt.Errorf("allreduce of %d: send %d bytes, recv %d, %d p2p entries", o.Count, o.Send.Len(), o.Recv.Len(), len(o.P2P))
		}
	case Group:
		if len(o.P2P) != 2 || !o.P2P[0].Send || o.P2P[1].Send || o.P2P[0].Buf.Len() != o.P2P[1].Buf.Len() || o.Send != nil || o.Count != 0 {
			return fmt.Errorf("group: %+v", *o)
		}
	}
	return nil
}

// TestDeviceCallNoAllocs: once warm, a DeviceComm's allreduce and grouped
// send/recv make no heap allocation of their own (issue 29's fast path:
// the Op, the P2P entries and the queue's function come from the call
// record), and each call's Op is its own: a plane sees exactly the call
// it is handed, from one thread or from several at once.
func TestDeviceCallNoAllocs(t *testing.T) {
	dev := fakeDevice(t)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bufs := make([]*gpu.Buffer, 4)
	for i := range bufs {
		if bufs[i], err = dev.Alloc(64 * (i + 1)); err != nil {
			t.Fatal(err)
		}
		defer bufs[i].Free()
	}
	lg := flog.New(&hclog.LoggerOptions{Level: hclog.Info}, flog.Default)
	p := &checkPlane{}
	d := NewDeviceComm(&queueCaller{fakeCaller: fakeCaller{lg: lg}}, dev, "direct", p)
	calls := []struct {
		name string
		f    func(ctx context.Context, b *gpu.Buffer) error
	}{
		{"allreduce", func(ctx context.Context, b *gpu.Buffer) error {
			return d.AllReduce(ctx, b, b, b.Len()/4, dtype.Float32, dtype.Sum, s)
		}},
		{"send/recv", func(ctx context.Context, b *gpu.Buffer) error {
			return d.Group(ctx, s, SendTo(1, b), RecvFrom(1, b))
		}},
	}
	ctx0 := context.WithValue(context.Background(), bufKey{}, bufs[0])
	for _, c := range calls {
		if err := c.f(ctx0, bufs[0]); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n := testing.AllocsPerRun(200, func() {
			if err := c.f(ctx0, bufs[0]); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", c.name, n)
		}
	}
	// Four threads at once, each on its own buffer: the plane sees each
	// call's own buffer (the caller's context says which), never another
	// thread's Op.
	var wg sync.WaitGroup
	errs := make(chan error, len(bufs))
	for _, b := range bufs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.WithValue(context.Background(), bufKey{}, b)
			for i := range 500 {
				if err := calls[i%2].f(ctx, b); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
