package rank

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// GPU kernels are loaded family by family, when a call first needs one
// (issue 28): a one-rank communicator's collectives and a communicator's
// host-buffer collectives load none; a float32 allreduce loads the
// float32 family and no other dtype's; an int64 one then adds int64's.

// gpuWorld runs body on every rank of an n-rank world (gpuVars), rank r
// on fake GPU r (2 GiB each) with a stream of its own.
func gpuWorld(t *testing.T, n int, body func(ctx context.Context, c *Comm, dev *gpu.Device, s *gpu.Stream) error) {
	t.Helper()
	drv, err := gpufake.Open(gpufake.Config{Devices: n, MemPerDevice: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: gpuVars}, New, func(c *Comm) error {
		dev, err := drv.Device(c.Rank())
		if err != nil {
			return err
		}
		s, err := dev.NewStream()
		if err != nil {
			return err
		}
		defer s.Close()
		return body(context.Background(), c, dev, s)
	}))
}

// families lists the kernel families dev has loaded.
func families(dev *gpu.Device) []string {
	var out []string
	for _, l := range dev.KernelLoads() {
		out = append(out, l.Family)
	}
	return out
}

// everyCollective runs each device collective once on dc (int64, small).
func everyCollective(ctx context.Context, dc *DeviceComm, s *gpu.Stream) error {
	n := dc.Comm().Size()
	const count = 64
	send := make([]int64, count*n)
	for i := range send {
		send[i] = int64(i + 1)
	}
	for _, call := range []struct {
		name   string
		sendN  int
		recvN  int
		launch func(sb, rb *gpu.Buffer) error
	}{
		{"allreduce", count, count, func(sb, rb *gpu.Buffer) error {
			return dc.AllReduce(ctx, sb, rb, count, dtype.Int64, dtype.Sum, s)
		}},
		{"allgather", count, count * n, func(sb, rb *gpu.Buffer) error {
			return dc.AllGather(ctx, sb, rb, count, dtype.Int64, s)
		}},
		{"reducescatter", count * n, count, func(sb, rb *gpu.Buffer) error {
			return dc.ReduceScatter(ctx, sb, rb, count, dtype.Int64, dtype.Sum, s)
		}},
		{"broadcast", count, count, func(sb, rb *gpu.Buffer) error {
			return dc.Broadcast(ctx, sb, rb, count, dtype.Int64, 0, s)
		}},
		{"reduce", count, count, func(sb, rb *gpu.Buffer) error {
			return dc.Reduce(ctx, sb, rb, count, dtype.Int64, dtype.Sum, 0, s)
		}},
		{"alltoall", count * n, count * n, func(sb, rb *gpu.Buffer) error {
			return dc.AllToAll(ctx, sb, rb, count, dtype.Int64, s)
		}},
	} {
		if _, err := deviceRun(dc.GPU(), s, send[:call.sendN], call.recvN, call.launch); err != nil {
			return fmt.Errorf("%s: %w", call.name, err)
		}
	}
	return nil
}

func TestKernelsLoadedLazily(t *testing.T) {
	t.Run("one rank loads none", func(t *testing.T) {
		gpuWorld(t, 1, func(ctx context.Context, c *Comm, dev *gpu.Device, s *gpu.Stream) error {
			dc, err := c.Device(ctx, dev)
			if err != nil {
				return err
			}
			defer dc.Close(ctx)
			if err := everyCollective(ctx, dc, s); err != nil {
				return err
			}
			if f := families(dev); len(f) != 0 {
				return fmt.Errorf("a one-rank communicator loaded kernel families %v, want none", f)
			}
			return nil
		})
	})
	t.Run("host buffers load none, a dtype loads its family", func(t *testing.T) {
		gpuWorld(t, 2, func(ctx context.Context, c *Comm, dev *gpu.Device, s *gpu.Stream) error {
			dc, err := c.Device(ctx, dev)
			if err != nil {
				return err
			}
			defer dc.Close(ctx)
			host := []float32{1, 2, 3, 4}
			if err := c.AllReduce(ctx, Of(host), Of(host), dtype.Sum); err != nil {
				return err
			}
			if host[3] != 8 {
				return fmt.Errorf("host allreduce: element 3 = %v, want 8", host[3])
			}
			if f := families(dev); len(f) != 0 {
				return fmt.Errorf("host-buffer collectives loaded kernel families %v, want none", f)
			}
			fb, err := dev.Alloc(4 * 256)
			if err != nil {
				return err
			}
			defer fb.Free()
			if err := dc.AllReduce(ctx, fb, fb, 256, dtype.Float32, dtype.Sum, s); err != nil {
				return err
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			got := families(dev)
			if !slices.Contains(got, "f32") || slices.ContainsFunc(got, func(f string) bool { return f != "f32" && f != "common" }) {
				return fmt.Errorf("a float32 allreduce loaded %v, want f32 (and at most common)", got)
			}
			if err := everyCollective(ctx, dc, s); err != nil { // int64
				return err
			}
			got = families(dev)
			if !slices.Contains(got, "i64") || slices.ContainsFunc(got, func(f string) bool { return f != "f32" && f != "i64" && f != "common" }) {
				return fmt.Errorf("float32 then int64 collectives loaded %v, want f32, i64 (and at most common)", got)
			}
			for _, l := range dev.KernelLoads() {
				if l.Bytes == 0 || l.From == "" || (l.Code != "sass" && l.Code != "ptx") {
					return fmt.Errorf("kernel load %+v: want its size, source and code", l)
				}
			}
			return nil
		})
	})
}
