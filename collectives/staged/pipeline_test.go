package staged_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/collectives/staged"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// pipeChunk is the tests' pipeline chunk: calls of a few hundred KiB span
// several chunks.
const pipeChunk = 64 << 10

// TestPipelinedAcrossHosts: ranks on the fake driver, each declared on a
// host of its own, so their host collectives run over the network
// transport (tcp provider on loopback); the staged plane pipelines in
// 64 KiB chunks (and, on float64, in chunks of an odd size). Every
// collective it pipelines runs with counts that do not divide into chunks,
// that divide exactly, and that are too small to pipeline, in place and
// out of place; results are checked element by element against a float64
// reference, and the plane's counters show which calls ran pipelined.
// Three ranks make the per-block cuts of allgather and reduce-scatter meet
// more than two blocks, and the groups a ring.
func TestPipelinedAcrossHosts(t *testing.T) {
	for _, tc := range []struct {
		ranks, chunk int
		dt           dtype.DType
	}{
		{2, pipeChunk, dtype.Float32},
		{3, pipeChunk, dtype.Float32},
		{2, 50_001, dtype.Float64}, // not a whole number of elements: chunks of 50,000 bytes
	} {
		t.Run(fmt.Sprintf("%d-hosts/chunk-%d/%s", tc.ranks, tc.chunk, tc.dt), func(t *testing.T) {
			pipelinedAcrossHosts(t, tc.ranks, tc.chunk, tc.dt)
		})
	}
}

func pipelinedAcrossHosts(t *testing.T, n, chunk int, dt dtype.DType) {
	planes := make([]plane.Plane, n)
	acrossHosts(t, n, func(ctx context.Context, c *comm.Comm, dev *gpu.Device, r int) error {
		planes[r] = staged.NewChunked(c, dev, chunk)
		dc, err := plane.Choose(ctx, c, dev, "staged", plane.Candidate{}, func() plane.Plane { return planes[r] })
		if err != nil {
			return err
		}
		defer dc.Close(ctx)
		s, err := dev.NewStream()
		if err != nil {
			return err
		}
		defer s.Close()
		x := &caseRun{ctx: ctx, dc: dc, dev: dev, s: s, rank: r, size: n, dt: dt}
		if err := x.collectives(); err != nil {
			return err
		}
		return x.groups()
	})
	// Two pipelined counts (one not a multiple of the chunk), in place and
	// out of place; the small count runs unpipelined.
	want := map[plane.Kind]int{
		plane.AllReduce: 4, plane.Broadcast: 4, plane.Reduce: 4,
		plane.AllGather: 4, plane.ReduceScatter: 4, plane.Group: len(groupCases) - 1,
	}
	for r, p := range planes {
		if p == nil {
			continue
		}
		for k, w := range want {
			if got := staged.Piped(p, k); got != w {
				t.Errorf("rank %d: %d %s calls pipelined, want %d", r, got, k, w)
			}
		}
	}
}

// acrossHosts runs body on n ranks, each on its own fake GPU and declared
// on its own host, over the tcp provider on loopback.
func acrossHosts(t *testing.T, n int, body func(ctx context.Context, c *comm.Comm, dev *gpu.Device, r int) error) {
	t.Helper()
	drv, err := gpufake.Open(gpufake.Config{Devices: n})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env := map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo", "FLEXLINK_GPU_PATH": "staged"}
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: env, Host: worldtest.OwnHost, Timeout: 90 * time.Second}, comm.New, func(c *comm.Comm) error {
		dev, err := drv.Device(c.Rank())
		if err != nil {
			return err
		}
		return body(ctx, c, dev, c.Rank())
	}))
}

// caseRun is one rank's side of the pipeline cases.
type caseRun struct {
	ctx        context.Context
	dc         *plane.DeviceComm
	dev        *gpu.Device
	s          *gpu.Stream
	rank, size int
	dt         dtype.DType // float32 or float64
	call       int         // numbers the calls, so that no result can be left over in the staging
}

// val is element i of rank r's input in the current call: small integers,
// exact in float32, different in every call.
func (x *caseRun) val(r, i int) float64 { return float64((r+1)*(i%1013) - 300 + 100*x.call) }

// fill allocates a device buffer of count float32 elements, element i
// being f(i).
func (x *caseRun) fill(count int, f func(i int) float64) (*gpu.Buffer, error) {
	b, err := x.dev.Alloc(count * x.dt.Size())
	if err != nil {
		return nil, err
	}
	in := make([]byte, count*x.dt.Size())
	for i := range count {
		dtype.Put(in, i, x.dt, f(i))
	}
	if err := x.s.CopyHtoD(b, in); err != nil {
		return nil, err
	}
	return b, x.s.Synchronize()
}

// check compares b's count float32 elements with the float64 reference want.
func (x *caseRun) check(what string, b *gpu.Buffer, count int, want func(i int) float64) error {
	out := make([]byte, count*x.dt.Size())
	if err := x.s.CopyDtoH(out, b.Sub(0, count*x.dt.Size())); err != nil {
		return err
	}
	if err := x.s.Synchronize(); err != nil {
		return err
	}
	for i := range count {
		if got := dtype.Get(out, i, x.dt); math.Abs(got-want(i)) > 1e-3 {
			return fmt.Errorf("%s: element %d is %v, want %v", what, i, got, want(i))
		}
	}
	return nil
}

// sum is the float64 reference of a sum over ranks of val.
func (x *caseRun) sum(i int) float64 {
	t := 0.0
	for r := range x.size {
		t += x.val(r, i)
	}
	return t
}

// collectives runs allreduce, broadcast, reduce, allgather and
// reduce-scatter for every count, in place and out of place.
func (x *caseRun) collectives() error {
	// 6.1 chunks; exactly 3 chunks (still pipelined); too small to pipeline.
	for _, count := range []int{100_003, 16_384 * 3, 1000} {
		for _, inPlace := range []bool{false, true} {
			for _, c := range []func(int, bool) error{x.allReduce, x.broadcast, x.reduce, x.allGather, x.reduceScatter} {
				if err := c(count, inPlace); err != nil {
					return fmt.Errorf("count %d in place %v: %w", count, inPlace, err)
				}
			}
		}
	}
	return nil
}

// run makes one call: pair's buffers for it (sc, rc, inPlace, inRecv,
// off), call on them, then check of them.
func (x *caseRun) run(sc, rc int, inPlace, inRecv bool, off int, call, check func(send, recv *gpu.Buffer) error) error {
	x.call++
	send, recv, free, err := x.pair(sc, rc, inPlace, inRecv, off)
	if err != nil {
		return err
	}
	defer free()
	if err := call(send, recv); err != nil {
		return err
	}
	return check(send, recv)
}

// pair allocates send (sc elements of rank's input) and recv (rc
// elements; at recv offset off of send's memory when in place, where
// inRecv says send lies inside recv rather than recv inside send).
func (x *caseRun) pair(sc, rc int, inPlace, inRecv bool, off int) (send, recv *gpu.Buffer, free func(), err error) {
	if !inPlace {
		if send, err = x.fill(sc, func(i int) float64 { return x.val(x.rank, i) }); err != nil {
			return nil, nil, nil, err
		}
		if recv, err = x.dev.Alloc(rc * x.dt.Size()); err != nil {
			return nil, nil, nil, err
		}
		return send, recv, func() { send.Free(); recv.Free() }, nil
	}
	if inRecv { // send is recv's elements [off, off+sc)
		if recv, err = x.fill(rc, func(i int) float64 { return x.val(x.rank, i-off) }); err != nil {
			return nil, nil, nil, err
		}
		return recv.Sub(off*x.dt.Size(), sc*x.dt.Size()), recv, func() { recv.Free() }, nil
	}
	if send, err = x.fill(sc, func(i int) float64 { return x.val(x.rank, i) }); err != nil {
		return nil, nil, nil, err
	}
	return send, send.Sub(off*x.dt.Size(), rc*x.dt.Size()), func() { send.Free() }, nil
}

func (x *caseRun) allReduce(count int, inPlace bool) error {
	return x.run(count, count, inPlace, false, 0, func(send, recv *gpu.Buffer) error {
		return x.dc.AllReduce(x.ctx, send, recv, count, x.dt, dtype.Sum, x.s)
	}, func(send, recv *gpu.Buffer) error {
		return x.check("allreduce", recv, count, x.sum)
	})
}

func (x *caseRun) broadcast(count int, inPlace bool) error {
	const root = 1
	return x.run(count, count, inPlace, false, 0, func(send, recv *gpu.Buffer) error {
		return x.dc.Broadcast(x.ctx, send, recv, count, x.dt, root, x.s)
	}, func(send, recv *gpu.Buffer) error {
		return x.check("broadcast from rank 1", recv, count, func(i int) float64 { return x.val(root, i) })
	})
}

func (x *caseRun) reduce(count int, inPlace bool) error {
	const root = 0
	return x.run(count, count, inPlace, false, 0, func(send, recv *gpu.Buffer) error {
		return x.dc.Reduce(x.ctx, send, recv, count, x.dt, dtype.Sum, root, x.s)
	}, func(send, recv *gpu.Buffer) error {
		if x.rank != root { // send is left as it was
			return x.check("reduce to rank 0 (non-root send)", send, count, func(i int) float64 { return x.val(x.rank, i) })
		}
		return x.check("reduce to rank 0", recv, count, x.sum)
	})
}

func (x *caseRun) allGather(count int, inPlace bool) error {
	return x.run(count, x.size*count, inPlace, true, x.rank*count, func(send, recv *gpu.Buffer) error {
		return x.dc.AllGather(x.ctx, send, recv, count, x.dt, x.s)
	}, func(send, recv *gpu.Buffer) error {
		return x.check("allgather", recv, x.size*count, func(i int) float64 { return x.val(i/count, i%count) })
	})
}

func (x *caseRun) reduceScatter(count int, inPlace bool) error {
	return x.run(x.size*count, count, inPlace, false, x.rank*count, func(send, recv *gpu.Buffer) error {
		return x.dc.ReduceScatter(x.ctx, send, recv, count, x.dt, dtype.Sum, x.s)
	}, func(send, recv *gpu.Buffer) error {
		return x.check("reducescatter", recv, count, func(i int) float64 { return x.sum(x.rank*count + i) })
	})
}
