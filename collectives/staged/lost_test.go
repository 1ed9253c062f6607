package staged_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/collectives/staged"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestPipelinedPeerLost: rank 0 (on host h0) crashes (its links fail)
// while rank 1 runs a pipelined call that needs it; rank 1 fails within
// 5 s with an error naming rank 0, for every way the pipeline cuts a call.
func TestPipelinedPeerLost(t *testing.T) {
	const count = 1 << 20 // float32: 4 MiB, 64 chunks of 64 KiB
	cases := []struct {
		name string
		call func(ctx context.Context, dc *plane.DeviceComm, b *gpu.Buffer, s *gpu.Stream) error
	}{
		{"allreduce", func(ctx context.Context, dc *plane.DeviceComm, b *gpu.Buffer, s *gpu.Stream) error {
			return dc.AllReduce(ctx, b, b, count, dtype.Float32, dtype.Sum, s)
		}},
		{"reduce", func(ctx context.Context, dc *plane.DeviceComm, b *gpu.Buffer, s *gpu.Stream) error {
			return dc.Reduce(ctx, b, b, count, dtype.Float32, dtype.Sum, 0, s)
		}},
		{"allgather", func(ctx context.Context, dc *plane.DeviceComm, b *gpu.Buffer, s *gpu.Stream) error {
			return dc.AllGather(ctx, b.Sub(0, count*2), b, count/2, dtype.Float32, s)
		}},
		{"reducescatter", func(ctx context.Context, dc *plane.DeviceComm, b *gpu.Buffer, s *gpu.Stream) error {
			return dc.ReduceScatter(ctx, b, b.Sub(0, count*2), count/2, dtype.Float32, dtype.Sum, s)
		}},
		{"send-recv", func(ctx context.Context, dc *plane.DeviceComm, b *gpu.Buffer, s *gpu.Stream) error {
			return dc.Group(ctx, s, plane.SendTo(0, b.Sub(0, count*2)), plane.RecvFrom(0, b.Sub(count*2, count*2)))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{}) // rank 1 is about to call: rank 0 crashes then
			acrossHosts(t, 2, func(ctx context.Context, c *comm.Comm, dev *gpu.Device, r int) error {
				var p plane.Plane
				dc, err := plane.Choose(ctx, c, dev, "staged", plane.Candidate{}, func() plane.Plane {
					p = staged.NewChunked(c, dev, pipeChunk)
					return p
				})
				if err != nil {
					return err
				}
				if r == 0 {
					select {
					case <-started:
					case <-ctx.Done():
						return ctx.Err()
					}
					c.AbortLinks(errors.New("simulated crash"))
					return nil
				}
				defer dc.Close(ctx) // fails at once: the job is aborted
				s, err := dev.NewStream()
				if err != nil {
					return err
				}
				defer s.Close()
				b, err := dev.Alloc(count * 4)
				if err != nil {
					return err
				}
				defer b.Free()
				start := time.Now()
				close(started)
				err = tc.call(ctx, dc, b, s)
				took := time.Since(start)
				t.Logf("rank 1 after %v: %v", took, err)
				switch {
				case err == nil:
					return fmt.Errorf("%s succeeded without rank 0", tc.name)
				case !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), "rank 0"):
					return fmt.Errorf("got %w, want ErrPeerLost naming rank 0", err)
				case took > 5*time.Second:
					return fmt.Errorf("failed after %v, want < 5 s", took)
				case staged.Piped(p, kindOf(tc.name)) != 1:
					return fmt.Errorf("the call did not run pipelined")
				}
				return nil
			})
		})
	}
}

func kindOf(name string) plane.Kind {
	for k := plane.AllReduce; k <= plane.AllToAllv; k++ {
		if k.String() == name {
			return k
		}
	}
	return plane.Group
}
