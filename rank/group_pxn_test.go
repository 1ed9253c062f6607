package rank

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/testenv"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// groupLen is how many int64 rank s sends rank d in the PXN group tests:
// uneven, 0 for some pairs (no entry on either side), and 0 -> 5 more
// than two staged chunks (9 MiB), so the GPU group is pipelined.
func groupLen(s, d int) int {
	if s == 0 && d == 5 {
		return 9<<20/8 + 3
	}
	return (s*7 + d*5) % 6 * 1733
}

func groupVal(s, d, i int) int64 { return int64(s)<<44 | int64(d)<<36 | int64(i) }

// TestGroupPXN: Comm.Group on host buffers and DeviceComm.Group on GPU
// buffers (one fake GPU per rank, the staged plane) on 2 emulated hosts ×
// 4 ranks, NICs lo and the first other NIC as two rails, FLEXLINK_PXN=2:
// every rank sends every other rank an uneven message (some none) in one
// group; with FLEXLINK_PXN_GROUP=1 the cross-rail ones go through the
// relays (the counters show it), with 0 over the communicator's links;
// every element checked.
func TestGroupPXN(t *testing.T) {
	const n, per = 8, 4
	for _, on := range []string{"1", "0"} {
		t.Run("group"+on, func(t *testing.T) {
			drv, err := gpufake.Open(gpufake.Config{Devices: n})
			if err != nil {
				t.Fatal(err)
			}
			defer drv.Close()
			vars := map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + testenv.SecondNIC(t), "FLEXLINK_PXN": "2", "FLEXLINK_PXN_GROUP": on}
			relayed, gpuRelayed := make([]int64, n), make([]int64, n) // all, and by the GPU group
			worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: vars, Host: worldtest.PerHost(per)}, New, func(c *Comm) error {
				if err := hostGroupPXN(c); err != nil {
					return fmt.Errorf("host buffers: %w", err)
				}
				dev, err := drv.Device(c.Rank())
				if err != nil {
					return err
				}
				// The counters once every relay is done (after a barrier).
				counted := func() int64 {
					st, _ := c.PXNCounters()
					return st.Relayed
				}
				if err := c.Barrier(context.Background()); err != nil {
					return err
				}
				before := counted()
				if err := deviceGroupPXN(c, dev); err != nil {
					return fmt.Errorf("gpu buffers: %w", err)
				}
				if err := c.Barrier(context.Background()); err != nil {
					return err
				}
				relayed[c.Rank()], gpuRelayed[c.Rank()] = counted(), counted()-before
				return nil
			}))
			var sum, gpu int64
			for r := range relayed {
				sum, gpu = sum+relayed[r], gpu+gpuRelayed[r]
			}
			t.Logf("relayed: %d network messages, %d of them for the GPU group", sum, gpu)
			if (on == "1") != (sum > 0) || (on == "1") != (gpu > 0) {
				t.Errorf("FLEXLINK_PXN_GROUP=%s: %d messages relayed, %d for the GPU group", on, sum, gpu)
			}
		})
	}
}

func hostGroupPXN(c *Comm) error {
	n, me := c.Size(), c.Rank()
	var ops []P2P
	recv := make([][]int64, n)
	for p := range n {
		if p == me {
			continue
		}
		if l := groupLen(me, p); l > 0 {
			b := make([]int64, l)
			for i := range b {
				b[i] = groupVal(me, p, i)
			}
			ops = append(ops, SendTo(p, Of(b)))
		}
		if l := groupLen(p, me); l > 0 {
			recv[p] = make([]int64, l)
			ops = append(ops, RecvFrom(p, Of(recv[p])))
		}
	}
	if err := c.Group(context.Background(), ops...); err != nil {
		return err
	}
	return checkGroup(me, recv, 0)
}

func checkGroup(me int, recv [][]int64, k int) error {
	for s, b := range recv {
		for i, x := range b {
			if want := groupVal(s, me, i+k); x != want {
				return fmt.Errorf("element %d from rank %d is %x, want %x", i, s, x, want)
			}
		}
	}
	return nil
}

func deviceGroupPXN(c *Comm, dev *gpu.Device) error {
	ctx := context.Background()
	n, me := c.Size(), c.Rank()
	dc, s, done, err := openDevice(ctx, c, dev)
	if err != nil {
		return err
	}
	defer done()
	var ops []DeviceP2P
	rbufs := make([]*gpu.Buffer, n)
	for p := range n {
		if p == me {
			continue
		}
		if l := groupLen(me, p); l > 0 {
			b := make([]int64, l)
			for i := range b {
				b[i] = groupVal(me, p, i+1)
			}
			sb, err := dev.Alloc(8 * l)
			if err != nil {
				return err
			}
			defer sb.Free()
			if err := s.CopyHtoD(sb, i64Bytes(b)); err != nil {
				return err
			}
			ops = append(ops, DeviceSendTo(p, sb))
		}
		if l := groupLen(p, me); l > 0 {
			if rbufs[p], err = dev.Alloc(8 * l); err != nil {
				return err
			}
			defer rbufs[p].Free()
			ops = append(ops, DeviceRecvFrom(p, rbufs[p]))
		}
	}
	if err := dc.Group(ctx, s, ops...); err != nil {
		return err
	}
	recv := make([][]int64, n)
	for p, rb := range rbufs {
		if rb != nil {
			recv[p] = make([]int64, rb.Len()/8)
			if err := s.CopyDtoH(i64Bytes(recv[p]), rb); err != nil {
				return err
			}
		}
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	return checkGroup(me, recv, 1)
}

// TestGroupPXNRealGPU: DeviceComm.Group on real GPU buffers through the
// PXN group service: 2 emulated hosts × 2 ranks of this process sharing
// the GPUs there are, NICs lo and the first other NIC as two rails,
// FLEXLINK_PXN=2; every rank sends every other an uneven message (some
// none) in one group, every element checked, and the relays carried the
// cross-rail ones.
func TestGroupPXNRealGPU(t *testing.T) {
	drv := realGPU(t)
	const n, per = 4, 2
	vars := map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + testenv.SecondNIC(t), "FLEXLINK_PXN": "2", "FLEXLINK_PXN_GROUP": "1"}
	relayed := make([]int64, n)
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: vars, Host: worldtest.PerHost(per)}, New, func(c *Comm) error {
		dev, err := drv.Device(c.Rank() % drv.DeviceCount())
		if err != nil {
			return err
		}
		if err := deviceGroupPXN(c, dev); err != nil {
			return err
		}
		if err := c.Barrier(context.Background()); err != nil { // every relay done
			return err
		}
		st, _ := c.PXNCounters()
		relayed[c.Rank()] = st.Relayed
		return nil
	}))
	var sum int64
	for _, r := range relayed {
		sum += r
	}
	t.Logf("relayed: %d network messages", sum)
	if sum == 0 {
		t.Error("nothing went through a relay")
	}
}

// realGPU opens the machine's GPU driver, closed when the test ends; the
// test is skipped (through testenv) where there is none.
func realGPU(t *testing.T) *gpu.Driver {
	t.Helper()
	drv, err := gpu.Open()
	if errors.Is(err, ErrNotSupported) {
		testenv.MissingHardware(t, "gpu", err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	return drv
}
