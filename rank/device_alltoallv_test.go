package rank

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/testenv"
	"github.com/flexlink/flexlink/internal/worldtest"
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
		level   string
		per     int  // ranks per host
		handoff bool // FLEXLINK_PXN_GPU_HANDOFF
	}{{"off", 2, false}, {"0", 2, false}, {"2", 2, false}, {"2", 4, false}, {"2", 2, true}, {"2", 4, true}} {
		t.Run(fmt.Sprintf("pxn=%s/2x%d/handoff=%v", tc.level, tc.per, tc.handoff), func(t *testing.T) {
			n := 2 * tc.per
			drv, err := gpufake.Open(gpufake.Config{Devices: n})
			if err != nil {
				t.Fatal(err)
			}
			defer drv.Close()
			host := worldtest.PerHost(tc.per)
			vars := map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + testenv.SecondNIC(t), "FLEXLINK_PXN": tc.level}
			if tc.handoff {
				vars["FLEXLINK_PXN_GPU_HANDOFF"] = "1"
			}
			worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: vars, Host: host}, New, func(c *Comm) error {
				dev, err := drv.Device(c.Rank())
				if err != nil {
					return err
				}
				return deviceAllToAlls(c, dev, tc.level, tc.handoff)
			}))
		})
	}
}

// TestDeviceAllToAllPXNHandoffNoPeer: FLEXLINK_PXN_GPU_HANDOFF=1 on GPUs
// that cannot reach each other (a relay's staging cannot be mapped): the
// host falls back to the shm hand-off, every result right, nothing
// gathered.
func TestDeviceAllToAllPXNHandoffNoPeer(t *testing.T) {
	const per = 2
	n := 2 * per
	drv, err := gpufake.Open(gpufake.Config{Devices: n, NoPeer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	host := worldtest.PerHost(per)
	vars := map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + testenv.SecondNIC(t),
		"FLEXLINK_PXN": "2", "FLEXLINK_PXN_GPU_HANDOFF": "1"}
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: vars, Host: host}, New, func(c *Comm) error {
		dev, err := drv.Device(c.Rank())
		if err != nil {
			return err
		}
		return deviceAllToAlls(c, dev, "2", false)
	}))
}

// a2aCount is the number of elements rank s sends rank d in the AllToAllv
// (0 for some pairs; everything sent to the last rank is 0).
func a2aCount(s, d, n int) int {
	if d == n-1 {
		return 0
	}
	return (s*5 + d*3) % 7 * 211
}

// openDevice is c's DeviceComm on dev and a stream of dev; done closes
// both.
func openDevice(ctx context.Context, c *Comm, dev *gpu.Device) (*DeviceComm, *gpu.Stream, func(), error) {
	dc, err := c.Device(ctx, dev)
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := dev.NewStream()
	if err != nil {
		dc.Close(ctx)
		return nil, nil, nil, err
	}
	return dc, s, func() { s.Close(); dc.Close(ctx) }, nil
}

func a2aValue(s, d, i int) int64 { return int64(s)<<40 | int64(d)<<20 | int64(i) }

func deviceAllToAlls(c *Comm, dev *gpu.Device, level string, gathered bool) error {
	ctx := context.Background()
	n, me := c.Size(), c.Rank()
	dc, s, done, err := openDevice(ctx, c, dev)
	if err != nil {
		return err
	}
	defer done()
	if dc.Path() != "staged" {
		return fmt.Errorf("plane %q, want staged (ranks on two hosts)", dc.Path())
	}

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
	// 4 MiB, 4 MiB and a partial one (in the first slot again).
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
	if level == "2" && c.LocalRank() == 0 && c.LocalSize() > 1 && st.Relayed == 0 || level == "0" && st.Relayed != 0 {
		return fmt.Errorf("PXN level %s: local rank %d relayed %d messages (%s)", level, c.LocalRank(), st.Relayed, st)
	}
	// With the GPU hand-off every relayed message came from the relay's
	// staging (the senders copied them there), none over shm; without it
	// (or when it fell back) none did.
	if want := st.Relayed; gathered && st.Gathered != want || !gathered && st.Gathered != 0 {
		return fmt.Errorf("GPU hand-off %v: %d of %d relayed messages gathered (%s)", gathered, st.Gathered, st.Relayed, st)
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

// TestDeviceAllToAllPXNRankLost: 2 hosts × 2 ranks with fake GPUs and
// FLEXLINK_PXN=2; after one GPU all-to-all through the proxies, rank 1 (the
// relay of host0's rail eth) vanishes while the others are in the next
// one: every survivor fails with ErrPeerLost naming rank 1 within 5 s.
// With FLEXLINK_PXN_GPU_HANDOFF=1 the same holds while the ranks of a host
// exchange their hand-off messages and copy into each other's staging.
func TestDeviceAllToAllPXNRankLost(t *testing.T) {
	for _, handoff := range []string{"0", "1"} {
		t.Run("handoff="+handoff, func(t *testing.T) { pxnRankLost(t, handoff) })
	}
}

func pxnRankLost(t *testing.T, handoff string) {
	const n, per, blk, lost = 4, 2, 1500, 1
	drv, err := gpufake.Open(gpufake.Config{Devices: n})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	env := map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + testenv.SecondNIC(t), "FLEXLINK_PXN": "2",
		"FLEXLINK_PXN_GPU_HANDOFF": handoff}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := worldtest.Start(t, worldtest.Spec{N: n, Env: env, Host: worldtest.PerHost(per)}, New)
	type rankState struct {
		c    *Comm
		dc   *DeviceComm
		s    *gpu.Stream
		b    *gpu.Buffer
		err  error
		took time.Duration
	}
	rs := make([]rankState, n)
	worldtest.Each(w.Comms, func(r int, c *Comm) error {
		st := &rs[r]
		st.c = c
		st.err = func() error {
			dev, err := drv.Device(r)
			if err != nil {
				return err
			}
			if st.dc, err = st.c.Device(ctx, dev); err != nil {
				return err
			}
			if st.s, err = dev.NewStream(); err != nil {
				return err
			}
			if st.b, err = dev.Alloc(8 * n * blk); err != nil {
				return err
			}
			return st.dc.AllToAll(ctx, st.b, st.b, blk, dtype.Int64, st.s)
		}()
		return nil
	})
	var wg sync.WaitGroup
	for r := range rs {
		if rs[r].err != nil {
			t.Fatalf("rank %d, first all-to-all: %v", r, rs[r].err)
		}
	}
	if _, used := rs[0].c.PXNCounters(); !used {
		t.Fatal("the first all-to-all did not use PXN")
	}
	var gathered int64
	for r := range rs {
		st, _ := rs[r].c.PXNCounters()
		gathered += st.Gathered
	}
	if (gathered > 0) != (handoff == "1") {
		t.Fatalf("hand-off %s: %d relayed messages gathered in the first all-to-all", handoff, gathered)
	}
	var started sync.WaitGroup // every survivor is about to call
	for r := range n {
		if r == lost {
			continue
		}
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			st := &rs[r]
			start := time.Now()
			started.Done()
			st.err = st.dc.AllToAll(ctx, st.b, st.b, blk, dtype.Int64, st.s)
			st.took = time.Since(start)
		}()
	}
	started.Wait()
	rs[lost].c.c.AbortLinks(errors.New("simulated crash"))
	if err := w.Lose(lost); err != nil {
		t.Fatal(err)
	}
	w.Comms[lost] = nil // gone: the cleanup skips it
	wg.Wait()
	for r := range rs {
		if r == lost {
			continue
		}
		if err := rs[r].err; !errors.Is(err, ErrPeerLost) || !strings.Contains(err.Error(), "rank 1") {
			t.Errorf("rank %d: got %v, want ErrPeerLost naming rank 1", r, err)
		}
		t.Logf("rank %d after %v: %v", r, rs[r].took, rs[r].err)
		if rs[r].took > 5*time.Second {
			t.Errorf("rank %d failed after %v, want < 5 s", r, rs[r].took)
		}
		_ = rs[r].dc.Close(ctx) // fails at once: the job is aborted
	}
}

// TestDeviceAllToAllPXNRealGPU is TestDeviceAllToAllPXN on the machine's
// GPUs (skipped without one): 2 emulated hosts × 1 rank, or × 2 with two
// GPUs or more, rank r on GPU r mod the GPUs, PXN off, 0 and 2; every
// element checked. On a GPU machine:
//
//	FLEXLINK_REQUIRE_GPU=1 go test ./rank -run RealGPU -v
func TestDeviceAllToAllPXNRealGPU(t *testing.T) {
	drv := realGPU(t)
	// Two ranks per emulated host, sharing the GPUs there are (the staged
	// plane does not care), so that local rank 0 has a sibling to relay for.
	// With FLEXLINK_PXN_GPU_HANDOFF=1 the ranks, goroutines of this
	// process, cannot map each other's staging (the driver refuses CUDA IPC
	// within a process): the call must fall back to the shm hand-off
	// (nothing gathered) and still be right. The hand-off itself runs
	// across processes in the device script (scripts/gpu-one.sh).
	per := 2
	for _, tc := range []struct {
		level   string
		handoff bool
	}{{"off", false}, {"0", false}, {"2", false}, {"2", true}} {
		t.Run(fmt.Sprintf("pxn=%s/2x%d/handoff=%v", tc.level, per, tc.handoff), func(t *testing.T) {
			n := 2 * per
			host := worldtest.PerHost(per)
			vars := map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + testenv.SecondNIC(t), "FLEXLINK_PXN": tc.level}
			if tc.handoff {
				vars["FLEXLINK_PXN_GPU_HANDOFF"] = "1"
			}
			worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: vars, Host: host}, New, func(c *Comm) error {
				dev, err := drv.Device(c.Rank() % drv.DeviceCount())
				if err != nil {
					return err
				}
				return deviceAllToAlls(c, dev, tc.level, false)
			}))
		})
	}
}
