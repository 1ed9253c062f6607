package rank

import (
	"context"
	"fmt"
	"testing"
	"unsafe"

	"flexlink/dtype"
	"flexlink/gpu"
	"flexlink/gpu/gpufake"
)

// TestDeviceAllToAllPXN: GPU buffers (one fake GPU per rank) on 2 emulated
// hosts × 2 and × 4 ranks over the network transport (loopback and the
// first NIC as two rails): DeviceComm.AllToAll and AllToAllv (uneven
// counts, some 0, a nil buffer where a rank receives nothing) on the
// staged plane, with PXN off (the host engine), at level 0 and at level 2
// (the proxy, relaying). Every element is checked against the sender's
// formula, and the PXN counters say whether the proxy ran and relayed.
func TestDeviceAllToAllPXN(t *testing.T) {
	for _, tc := range []struct {
		level string
		per   int // ranks per host
	}{{"off", 2}, {"0", 2}, {"2", 2}, {"2", 4}} {
		t.Run(fmt.Sprintf("pxn=%s/2x%d", tc.level, tc.per), func(t *testing.T) {
			n := 2 * tc.per
			drv, err := gpufake.Open(gpufake.Config{Devices: n})
			if err != nil {
				t.Fatal(err)
			}
			defer drv.Close()
			host := func(r int) string { return fmt.Sprintf("host%d", r/tc.per) }
			vars := map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "lo,eth,en", "FLEXLINK_PXN": tc.level}
			noErrors(t, runWorldHosts(t, n, vars, host, func(c *Comm) error {
				dev, err := drv.Device(c.Rank())
				if err != nil {
					return err
				}
				return deviceAllToAlls(c, dev, tc.level)
			}))
		})
	}
}

// a2aCount is the number of elements rank s sends rank d in the AllToAllv
// (0 for some pairs; everything sent to the last rank is 0).
func a2aCount(s, d, n int) int {
	if d == n-1 {
		return 0
	}
	return (s*5 + d*3) % 7 * 211
}

func a2aValue(s, d, i int) int64 { return int64(s)<<40 | int64(d)<<20 | int64(i) }

func deviceAllToAlls(c *Comm, dev *gpu.Device, level string) error {
	ctx := context.Background()
	n, me := c.Size(), c.Rank()
	dc, err := c.Device(ctx, dev)
	if err != nil {
		return err
	}
	defer dc.Close(ctx)
	if dc.Path() != "staged" {
		return fmt.Errorf("plane %q, want staged (ranks on two hosts)", dc.Path())
	}
	s, err := dev.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()

	// AllToAll, 3 calls (the proxy is made on the first, reused after).
	const blk = 1500
	for call := range 3 {
		send := make([]int64, n*blk)
		for d := range n {
			for i := range blk {
				send[d*blk+i] = a2aValue(me, d, i+call)
			}
		}
		got, err := deviceRun(dev, s, send, n*blk, func(sb, rb *gpu.Buffer) error {
			return dc.AllToAll(ctx, sb, rb, blk, dtype.Int64, s)
		})
		if err != nil {
			return fmt.Errorf("alltoall call %d: %w", call, err)
		}
		for src := range n {
			for i := range blk {
				if want := a2aValue(src, me, i+call); got[src*blk+i] != want {
					return fmt.Errorf("alltoall call %d: element %d from rank %d is %x, want %x", call, i, src, got[src*blk+i], want)
				}
			}
		}
	}

	// On 4 ranks (PXN off and 2), one in-place AllToAll whose blocks
	// (8 MiB and a few elements) take the staged plane's pipelined rounds:
	// 4 MiB, 4 MiB (the first slot again) and a partial one.
	if n == 4 && level != "0" {
		if err := bigAllToAll(ctx, dc, dev, s, me, n); err != nil {
			return err
		}
	}

	// AllToAllv with uneven counts.
	sc, rc := make([]int, n), make([]int, n)
	var send []int64
	nr := 0
	for q := range n {
		sc[q], rc[q] = a2aCount(me, q, n), a2aCount(q, me, n)
		for i := range sc[q] {
			send = append(send, a2aValue(me, q, i))
		}
		nr += rc[q]
	}
	got, err := deviceRun(dev, s, send, nr, func(sb, rb *gpu.Buffer) error {
		return dc.AllToAllv(ctx, sb, rb, sc, rc, dtype.Int64, s)
	})
	if err != nil {
		return fmt.Errorf("alltoallv: %w", err)
	}
	off := 0
	for src := range n {
		for i := range rc[src] {
			if want := a2aValue(src, me, i); got[off+i] != want {
				return fmt.Errorf("alltoallv: element %d from rank %d is %x, want %x", i, src, got[off+i], want)
			}
		}
		off += rc[src]
	}

	st, used := c.PXNCounters()
	if used != (level != "off") {
		return fmt.Errorf("PXN used: %v, want %v (%s)", used, level != "off", st)
	}
	// At level 2 local rank 0 (rail lo) relays its siblings' blocks for
	// the other host's ranks on rail lo; at level 0 nobody relays.
	if level == "2" && c.LocalRank() == 0 && st.Relayed == 0 || level == "0" && st.Relayed != 0 {
		return fmt.Errorf("PXN level %s: local rank %d relayed %d messages (%s)", level, c.LocalRank(), st.Relayed, st)
	}
	return nil
}

func bigAllToAll(ctx context.Context, dc *DeviceComm, dev *gpu.Device, s *gpu.Stream, me, n int) error {
	const blk = 1<<20 + 37 // int64 elements per block
	buf := make([]int64, n*blk)
	for d := range n {
		for i := range blk {
			buf[d*blk+i] = a2aValue(me, d, i)
		}
	}
	b, err := dev.Alloc(8 * len(buf))
	if err != nil {
		return err
	}
	defer b.Free()
	if err := s.CopyHtoD(b, i64Bytes(buf)); err != nil {
		return err
	}
	if err := dc.AllToAll(ctx, b, b, blk, dtype.Int64, s); err != nil {
		return fmt.Errorf("pipelined alltoall in place: %w", err)
	}
	if err := s.CopyDtoH(i64Bytes(buf), b); err != nil {
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	for src := range n {
		for i := range blk {
			if want := a2aValue(src, me, i); buf[src*blk+i] != want {
				return fmt.Errorf("pipelined alltoall in place: element %d from rank %d is %x, want %x", i, src, buf[src*blk+i], want)
			}
		}
	}
	return nil
}

// deviceRun uploads send into a GPU buffer, runs f on it and a GPU buffer
// of nr elements (nil when nr is 0), and downloads the result.
func deviceRun(dev *gpu.Device, s *gpu.Stream, send []int64, nr int, f func(sb, rb *gpu.Buffer) error) ([]int64, error) {
	var sb, rb *gpu.Buffer
	var err error
	if len(send) > 0 {
		if sb, err = dev.Alloc(8 * len(send)); err != nil {
			return nil, err
		}
		defer sb.Free()
		if err := s.CopyHtoD(sb, i64Bytes(send)); err != nil {
			return nil, err
		}
	}
	if nr > 0 {
		if rb, err = dev.Alloc(8 * nr); err != nil {
			return nil, err
		}
		defer rb.Free()
	}
	if err := f(sb, rb); err != nil {
		return nil, err
	}
	got := make([]int64, nr)
	if nr > 0 {
		if err := s.CopyDtoH(i64Bytes(got), rb); err != nil {
			return nil, err
		}
	}
	return got, s.Synchronize()
}

func i64Bytes(v []int64) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v))
}
