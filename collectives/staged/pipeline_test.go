package staged_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"flexlink/bootstrap"
	"flexlink/collectives/plane"
	"flexlink/collectives/staged"
	"flexlink/dtype"
	"flexlink/gpu"
	"flexlink/gpu/gpufake"
	"flexlink/internal/comm"
	"flexlink/internal/settings"
)

// TestPipelinedAcrossHosts: two ranks on the fake driver, declared on two
// hosts, so their host collectives run over the network transport (tcp
// provider on loopback); the staged plane pipelines allreduces and
// broadcasts in 64 KiB chunks (a count that does not divide into chunks,
// in place and out of place). Results are checked element by element
// against a float64 reference.
func TestPipelinedAcrossHosts(t *testing.T) {
	const n, chunk = 2, 64 << 10
	drv, err := gpufake.Open(gpufake.Config{Devices: n})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	stores := bootstrap.NewInProc(n)
	job := fmt.Sprintf("staged%d-%d", os.Getpid(), time.Now().UnixNano())
	env := settings.Map(map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo", "FLEXLINK_GPU_PATH": "staged"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				c, err := comm.New(ctx, stores[r], comm.Options{Env: env, Host: fmt.Sprintf("h%d", r), JobID: job, Secret: []byte("staged-test")})
				if err != nil {
					return err
				}
				defer c.Close()
				dev, err := drv.Device(r)
				if err != nil {
					return err
				}
				dc, err := plane.Choose(ctx, c, dev, "staged", plane.Candidate{}, func() plane.Plane { return staged.NewChunked(c, dev, chunk) })
				if err != nil {
					return err
				}
				defer dc.Close(ctx)
				return pipelineCases(ctx, dc, dev, r)
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func pipelineCases(ctx context.Context, dc *plane.DeviceComm, dev *gpu.Device, rank int) error {
	s, err := dev.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	val := func(r, i int) float64 { return float64((r+1)*(i%1013)) - 300 }
	for _, count := range []int{100_003, 16_384 * 3} { // 6.1 chunks; exactly 3 chunks (still pipelined)
		for _, inPlace := range []bool{false, true} {
			bytes := count * 4
			in := make([]byte, bytes)
			for i := range count {
				dtype.Put(in, i, dtype.Float32, val(rank, i))
			}
			send, err := dev.Alloc(bytes)
			if err != nil {
				return err
			}
			recv := send
			if !inPlace {
				if recv, err = dev.Alloc(bytes); err != nil {
					return err
				}
			}
			check := func(what string, want func(i int) float64) error {
				out := make([]byte, bytes)
				if err := s.CopyDtoH(out, recv); err != nil {
					return err
				}
				if err := s.Synchronize(); err != nil {
					return err
				}
				for i := range count {
					if got := dtype.Get(out, i, dtype.Float32); math.Abs(got-want(i)) > 1e-3 {
						return fmt.Errorf("%s count %d in place %v: element %d is %v, want %v", what, count, inPlace, i, got, want(i))
					}
				}
				return nil
			}
			if err := s.CopyHtoD(send, in); err != nil {
				return err
			}
			if err := dc.AllReduce(ctx, send, recv, count, dtype.Float32, dtype.Sum, s); err != nil {
				return err
			}
			if err := check("allreduce", func(i int) float64 { return val(0, i) + val(1, i) }); err != nil {
				return err
			}
			if err := s.CopyHtoD(send, in); err != nil {
				return err
			}
			if err := dc.Broadcast(ctx, send, recv, count, dtype.Float32, 1, s); err != nil {
				return err
			}
			if err := check("broadcast from rank 1", func(i int) float64 { return val(1, i) }); err != nil {
				return err
			}
			send.Free()
			if !inPlace {
				recv.Free()
			}
		}
	}
	return nil
}
