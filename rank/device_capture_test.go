package rank

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
)

// TestDeviceCommCapture: the public API's capture on the fake driver. Two
// ranks capture an allreduce on a stream of their own, replay it with new
// inputs between eager calls, across a Suspend and Resume (the graph keeps
// the regions it captured, the eager calls make new ones: both stay right),
// then close the DeviceComm before the graph: the graph's destruction
// gives the memory back. A call the capture path cannot take fails with
// ErrNotCapturable and the DeviceComm goes on.
func TestDeviceCommCapture(t *testing.T) {
	const n, count = 2, 5000
	gpuWorld(t, n, func(ctx context.Context, c *Comm, dev *gpu.Device, s *gpu.Stream) error {
		cs, err := dev.NewStream()
		if err != nil {
			return err
		}
		defer cs.Close()
		base, err := used(dev)
		if err != nil {
			return err
		}
		sb, err := dev.Alloc(8 * count)
		if err != nil {
			return err
		}
		defer sb.Free()
		rb, err := dev.Alloc(8 * count)
		if err != nil {
			return err
		}
		defer rb.Free()
		dc, err := c.Device(ctx, dev)
		if err != nil {
			return err
		}
		closed := false
		defer func() {
			if !closed {
				dc.Close(ctx)
			}
		}()
		// round k: rank r sends (r+1)*(i%5+k); the sum is n(n+1)/2*(i%5+k).
		put := func(k int) error {
			h := make([]byte, 8*count)
			for i := range count {
				binary.LittleEndian.PutUint64(h[8*i:], uint64(int64(c.Rank()+1)*int64(i%5+k)))
			}
			return s.CopyHtoD(sb, h)
		}
		check := func(what string, k int) error {
			h := make([]byte, 8*count)
			if err := s.CopyDtoH(h, rb); err != nil {
				return err
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			for i := range count {
				if got, want := int64(binary.LittleEndian.Uint64(h[8*i:])), int64(n*(n+1)/2)*int64(i%5+k); got != want {
					return fmt.Errorf("%s round %d: element %d = %d, want %d", what, k, i, got, want)
				}
			}
			return nil
		}
		if err := cs.BeginCapture(gpu.CaptureGlobal); err != nil {
			return err
		}
		cerr := dc.AllReduce(ctx, sb, rb, count, dtype.Int64, dtype.Sum, cs)
		// Refused, with the capture still valid: a group of three.
		p := 1 - c.Rank()
		rerr := dc.Group(ctx, cs, DeviceSendTo(p, sb.Sub(0, 64)), DeviceSendTo(p, sb.Sub(64, 64)), DeviceRecvFrom(p, rb.Sub(0, 64)))
		g, err := cs.EndCapture()
		if err := errors.Join(cerr, err); err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		if !errors.Is(rerr, ErrNotCapturable) {
			return fmt.Errorf("a group of three on a capturing stream: %v, want ErrNotCapturable", rerr)
		}
		x, err := g.Instantiate()
		if err != nil {
			return err
		}
		if err := g.Close(); err != nil {
			return err
		}
		step := func(k int, eager bool) error {
			if err := put(k); err != nil {
				return err
			}
			what := "replay"
			if eager {
				what = "eager"
				err = dc.AllReduce(ctx, sb, rb, count, dtype.Int64, dtype.Sum, s)
			} else {
				err = x.Launch(s)
			}
			if err != nil {
				return fmt.Errorf("%s %d: %w", what, k, err)
			}
			return check(what, k)
		}
		for k := 1; k <= 4; k++ {
			if err := step(k, k%2 == 0); err != nil {
				return err
			}
		}
		if err := dc.Suspend(ctx); err != nil {
			return err
		}
		if err := dc.Resume(ctx); err != nil {
			return err
		}
		for k := 5; k <= 8; k++ {
			if err := step(k, k%2 == 0); err != nil {
				return fmt.Errorf("after suspend and resume: %w", err)
			}
		}
		if err := dc.Close(ctx); err != nil {
			return err
		}
		closed = true
		if now, err := used(dev); err != nil || now-base <= 2*8*count {
			return fmt.Errorf("%d bytes held after close with a live graph (%v): want the graph's regions kept", now-base, err)
		}
		if err := x.Close(); err != nil {
			return err
		}
		// The graph's destructor frees on a goroutine: poll the
		// accounting, with a bound.
		return pollUsed(dev, base+2*8*count)
	})
}

// pollUsed waits until dev's allocated bytes are want, polling (and
// yielding) for at most 10 s.
func pollUsed(dev *gpu.Device, want int64) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		now, err := used(dev)
		if err != nil || now == want {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d bytes held 10 s after the graph went, want %d", now, want)
		}
		runtime.Gosched()
	}
}
