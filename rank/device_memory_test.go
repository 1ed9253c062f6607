package rank

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// The GPU memory a DeviceComm holds, from the fake driver's accounting
// (cuMemGetInfo counts every cuMemAlloc): flag regions are made on first
// use, and a communicator on a device that already has one (a split, a
// two-rank communicator of a pair, as PyTorch makes them) gets one small
// region: at most 16 MiB more (issue 27). Suspend gives the memory back,
// Resume and the next calls bring it back with right results.

const (
	memLimit  = 16 << 20 // bytes an extra communicator may add (issue 27)
	arSmall   = 1 << 17  // int64 elements: 1 MiB, the small region
	arLarge   = 1 << 22  // int64 elements: 32 MiB, the large region (flagSmallMax)
	gpuMemEnv = "60s"
)

var gpuVars = map[string]string{"FLEXLINK_TRANSPORT": "shm", "FLEXLINK_GPU_KERNEL_TIMEOUT": gpuMemEnv}

// used is the device memory allocated on dev.
func used(dev *gpu.Device) (int64, error) {
	free, total, err := dev.MemInfo()
	return int64(total) - int64(free), err
}

// allReduces runs an int64 sum allreduce of each count on dc and checks
// every element (rank r sends (r+1)*(i%7+seed)).
func allReduces(ctx context.Context, dc *DeviceComm, s *gpu.Stream, seed int, counts ...int) error {
	n, me := dc.Comm().Size(), dc.Comm().Rank()
	for _, count := range counts {
		send := make([]int64, count)
		for i := range send {
			send[i] = int64(me+1) * int64(i%7+seed)
		}
		got, err := deviceRun(dc.GPU(), s, send, count, func(sb, rb *gpu.Buffer) error {
			return dc.AllReduce(ctx, sb, rb, count, dtype.Int64, dtype.Sum, s)
		})
		if err != nil {
			return fmt.Errorf("allreduce of %d: %w", count, err)
		}
		for i, v := range got {
			if want := int64(n*(n+1)/2) * int64(i%7+seed); v != want {
				return fmt.Errorf("allreduce of %d (seed %d): element %d = %d, want %d", count, seed, i, v, want)
			}
		}
		if err := dc.AsyncError(); err != nil {
			return err
		}
	}
	return nil
}

// TestDeviceCommMemory: a world of four ranks (one fake GPU each) makes
// its regions on first use and holds the configured sizes; a split of two
// and a two-rank communicator of ranks 0 and 1 on the same GPUs each add
// at most 16 MiB, after small and large allreduces on them, all right.
func TestDeviceCommMemory(t *testing.T) {
	const n = 4
	pair := worldtest.Plan(worldtest.Spec{N: 2, Env: gpuVars}) // the two-rank communicator of ranks 0 and 1
	var mu sync.Mutex
	report := map[string][]int64{}
	note := func(what string, r int, b int64) {
		mu.Lock()
		defer mu.Unlock()
		if report[what] == nil {
			report[what] = make([]int64, n)
		}
		report[what][r] = b
	}
	gpuWorld(t, n, func(ctx context.Context, c *Comm, dev *gpu.Device, s *gpu.Stream) error {
		me := c.Rank()
		// step measures what making a DeviceComm on comm and running a small
		// and a large allreduce on it adds on this rank's GPU.
		step := func(what string, comm *Comm, limit int64) (*DeviceComm, error) {
			before, err := used(dev)
			if err != nil {
				return nil, err
			}
			dc, err := comm.Device(ctx, dev)
			if err != nil {
				return nil, err
			}
			if dc.Path() != "direct" {
				return dc, fmt.Errorf("%s: plane %q, want direct", what, dc.Path())
			}
			if m := dc.Memory(); m.Bytes != 0 {
				return dc, fmt.Errorf("%s: %d bytes held before any call (%v), want none: regions are made on first use", what, m.Bytes, m)
			}
			if err := allReduces(ctx, dc, s, 1, arSmall, arLarge); err != nil {
				return dc, fmt.Errorf("%s: %w", what, err)
			}
			after, err := used(dev)
			if err != nil {
				return dc, err
			}
			note(what, me, after-before)
			if m := dc.Memory(); m.Bytes != after-before {
				return dc, fmt.Errorf("%s: Memory says %d bytes (%v), the driver %d", what, m.Bytes, m, after-before)
			}
			if limit > 0 && after-before > limit {
				return dc, fmt.Errorf("%s: %d bytes more on gpu %d, want at most %d (%v)", what, after-before, me, limit, dc.Memory())
			}
			return dc, nil
		}
		world, err := step("world", c, 0)
		if world != nil {
			defer world.Close(ctx)
		}
		if err != nil {
			return err
		}
		sub, err := c.Split(ctx, me/2, me)
		if err != nil {
			return err
		}
		defer sub.Close()
		split, err := step("split", sub, memLimit)
		if split != nil {
			defer split.Close(ctx)
		}
		if err != nil {
			return err
		}
		if me < 2 {
			pc, err := New(ctx, pair.Store(me), pair.Options(me))
			if err != nil {
				return err
			}
			defer pc.Close()
			two, err := step("pair", pc, memLimit)
			if two != nil {
				defer two.Close(ctx)
			}
			if err != nil {
				return err
			}
		}
		// The world still runs right beside them.
		return allReduces(ctx, world, s, 3, arSmall, arLarge)
	})
	for _, what := range []string{"world", "split", "pair"} {
		t.Logf("%s: bytes of gpu memory per rank %v", what, report[what])
	}
}

// TestDeviceCommsConcurrent: two threads per rank run allreduces at once,
// small and large, on two communicators of the same GPUs (the world and a
// split of every rank: PyTorch's two threads on two groups); every result
// is right, so no slot or counter is shared.
func TestDeviceCommsConcurrent(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			drv, err := gpufake.Open(gpufake.Config{Devices: n, MemPerDevice: 2 << 30})
			if err != nil {
				t.Fatal(err)
			}
			defer drv.Close()
			worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: gpuVars}, New, func(c *Comm) error {
				ctx := context.Background()
				dev, err := drv.Device(c.Rank())
				if err != nil {
					return err
				}
				sub, err := c.Split(ctx, 0, c.Size()-c.Rank()) // every rank, in reverse order
				if err != nil {
					return err
				}
				defer sub.Close()
				var dcs [2]*DeviceComm
				for i, comm := range []*Comm{c, sub} {
					if dcs[i], err = comm.Device(ctx, dev); err != nil {
						return err
					}
					defer dcs[i].Close(ctx)
				}
				errs := make([]error, 2)
				var wg sync.WaitGroup
				for i, dc := range dcs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						s, err := dev.NewStream()
						if err != nil {
							errs[i] = err
							return
						}
						defer s.Close()
						for round := range 4 {
							if err := allReduces(ctx, dc, s, 10*i+round, arSmall, 3000, arLarge); err != nil {
								errs[i] = fmt.Errorf("communicator %d, round %d: %w", i, round, err)
								return
							}
						}
					}()
				}
				wg.Wait()
				return errors.Join(errs...)
			}))
		})
	}
}

// TestDeviceCommSuspend: Suspend gives back every byte the DeviceComm
// held; calls while suspended fail with ErrSuspended and leave the
// communicator usable; Suspend twice and Resume without Suspend fail;
// after Resume small and large allreduces are right and the memory is back.
func TestDeviceCommSuspend(t *testing.T) {
	const n = 2
	gpuWorld(t, n, func(ctx context.Context, c *Comm, dev *gpu.Device, s *gpu.Stream) error {
		base, err := used(dev)
		if err != nil {
			return err
		}
		dc, err := c.Device(ctx, dev)
		if err != nil {
			return err
		}
		defer dc.Close(ctx)
		for cycle := range 2 {
			if err := allReduces(ctx, dc, s, cycle, arSmall, arLarge); err != nil {
				return fmt.Errorf("cycle %d, before suspend: %w", cycle, err)
			}
			held, err := used(dev)
			if err != nil {
				return err
			}
			if held-base < 128<<20 || dc.Memory().Bytes != held-base {
				return fmt.Errorf("cycle %d: %d bytes held, Memory %v: want both regions", cycle, held-base, dc.Memory())
			}
			if err := dc.Suspend(ctx); err != nil {
				return fmt.Errorf("cycle %d: suspend: %w", cycle, err)
			}
			if now, err := used(dev); err != nil || now != base {
				return fmt.Errorf("cycle %d: %d bytes held after suspend (%v), want none: %v", cycle, now-base, dc.Memory(), err)
			}
			if m := dc.Memory(); !m.Suspended || m.Bytes != 0 {
				return fmt.Errorf("cycle %d: Memory after suspend: %v", cycle, m)
			}
			for what, call := range map[string]func() error{
				"allreduce": func() error { return allReduces(ctx, dc, s, 0, arSmall) },
				"send":      func() error { return dc.Send(ctx, nil, 1-c.Rank(), s) },
				"suspend":   func() error { return dc.Suspend(ctx) },
			} {
				if err := call(); !errors.Is(err, ErrSuspended) {
					return fmt.Errorf("cycle %d: %s while suspended: %v, want ErrSuspended", cycle, what, err)
				}
			}
			if err := dc.Resume(ctx); err != nil {
				return fmt.Errorf("cycle %d: resume: %w", cycle, err)
			}
			if err := dc.Resume(ctx); !errors.Is(err, ErrNotSuspended) {
				return fmt.Errorf("cycle %d: a second resume: %v, want ErrNotSuspended", cycle, err)
			}
			if err := allReduces(ctx, dc, s, 5+cycle, 3000, arLarge, arSmall); err != nil {
				return fmt.Errorf("cycle %d, after resume: %w", cycle, err)
			}
		}
		// The host communicator was never broken.
		x := []float64{float64(c.Rank())}
		return c.AllReduce(ctx, Of(x), Of(x), dtype.Sum)
	})
}
