package direct

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/comm"
)

// Shared by the fake-driver tests (ranks as goroutines) and the GPU tests
// (ranks as processes): one collective call on every rank, its inputs, and
// the float64 reference every output element is checked against.

// devCase is one call.
type devCase struct {
	kind    plane.Kind
	count   int // NCCL meaning for kind
	dt      dtype.DType
	op      dtype.Op
	root    int
	inPlace bool
	shift   int // varies the inputs (replays with new inputs)
}

func (c devCase) String() string {
	s := fmt.Sprintf("%s/%d/%s", c.kind, c.count, c.dt)
	if c.kind == plane.AllReduce || c.kind == plane.ReduceScatter || c.kind == plane.Reduce {
		s += "/" + c.op.String()
	}
	if c.kind == plane.Broadcast || c.kind == plane.Reduce {
		s += fmt.Sprintf("/root%d", c.root)
	}
	if c.inPlace {
		s += "/inplace"
	}
	return s
}

// counts are the send and recv element counts of c on n ranks.
func (c devCase) counts(n int) (send, recv int) {
	switch c.kind {
	case plane.AllGather:
		return c.count, n * c.count
	case plane.ReduceScatter:
		return n * c.count, c.count
	case plane.AllToAll:
		return n * c.count, n * c.count
	}
	return c.count, c.count
}

// input is rank r's send element i: small integers, so every dtype holds
// every partial result exactly and the reference is exact.
func (c devCase) input(r, i, n int) float64 {
	i += c.shift
	switch c.op {
	case dtype.Prod:
		if c.kind == plane.AllReduce || c.kind == plane.ReduceScatter || c.kind == plane.Reduce {
			if i%n == r {
				return 2
			}
			return 1
		}
	case dtype.Min, dtype.Max:
		return float64((r*3 + i) % 7)
	}
	return float64((r*5 + i) % 11)
}

// fold reduces element i over the ranks in float64.
func (c devCase) fold(i, n int) float64 {
	return dtype.Round(dtype.Fold(c.op, c.dt, n, func(r int) float64 { return c.input(r, i, n) }), c.dt)
}

// expect is rank me's recv element i (ok=false: not defined there).
func (c devCase) expect(me, i, n int) (float64, bool) {
	switch c.kind {
	case plane.AllReduce:
		return c.fold(i, n), true
	case plane.ReduceScatter:
		return c.fold(me*c.count+i, n), true
	case plane.Reduce:
		return c.fold(i, n), me == c.root
	case plane.AllGather:
		return c.input(i/c.count, i%c.count, n), true
	case plane.Broadcast:
		return c.input(c.root, i, n), true
	case plane.AllToAll:
		return c.input(i/c.count, me*c.count+i%c.count, n), true
	}
	return 0, false
}

// devRank is one rank's side of a test: its communicators, GPU and stream.
type devRank struct {
	c    *comm.Comm
	dc   *plane.DeviceComm
	s    *gpu.Stream
	a, b *gpu.Buffer // test buffers, each large enough for every case
}

// runDevCase runs c on this rank: fills send, calls the collective, copies
// recv back, and returns how many elements differ from the reference. The
// buffers are cut from r.a and r.b, allocated once per rank, as a program
// reuses its buffers (and as the direct plane's mapping cache expects).
func runDevCase(ctx context.Context, r *devRank, c devCase) (wrong int, err error) {
	send, recv, host, err := prepDevCase(r, c)
	if err != nil {
		return 0, err
	}
	if err := callDev(ctx, r.dc, c, send, recv, r.s); err != nil {
		return 0, err
	}
	return checkDevCase(r, c, send, recv, host)
}

// prepDevCase fills c's send buffer (and the fill of the rest) on r.s and
// returns the buffers and the input.
func prepDevCase(r *devRank, c devCase) (send, recv *gpu.Buffer, host []byte, err error) {
	n, me, sz := r.c.Size(), r.c.Rank(), c.dt.Size()
	sc, rc := c.counts(n)
	if max(sc, rc)*sz > min(r.a.Len(), r.b.Len()) {
		return nil, nil, nil, fmt.Errorf("case %v needs %d bytes, the test buffers hold %d", c, max(sc, rc)*sz, r.a.Len())
	}
	host = make([]byte, sc*sz)
	for i := 0; i < sc; i++ {
		dtype.Put(host, i, c.dt, c.input(me, i, n))
	}
	send, recv = r.a.Sub(0, sc*sz), r.b.Sub(0, rc*sz)
	if c.inPlace {
		switch {
		case sc == rc:
			recv = send
		case rc > sc: // allgather: send is block me of recv
			recv, send = r.a.Sub(0, rc*sz), r.a.Sub(me*sc*sz, sc*sz)
		default: // reducescatter: recv is block me of send
			recv = r.a.Sub(me*rc*sz, rc*sz)
		}
	}
	if err := r.s.Memset(r.b, 0xEE); err != nil {
		return nil, nil, nil, err
	}
	if err := r.s.Memset(r.a, 0xEE); err != nil {
		return nil, nil, nil, err
	}
	if err := r.s.CopyHtoD(send, host); err != nil {
		return nil, nil, nil, err
	}
	return send, recv, host, nil
}

// checkDevCase copies c's recv back (after the work on r.s) and returns
// how many elements differ from the reference.
func checkDevCase(r *devRank, c devCase, send, recv *gpu.Buffer, host []byte) (wrong int, err error) {
	n, me, sz := r.c.Size(), r.c.Rank(), c.dt.Size()
	_, rc := c.counts(n)
	out := make([]byte, rc*sz)
	if err := r.s.CopyDtoH(out, recv); err != nil {
		return 0, err
	}
	if err := r.s.Synchronize(); err != nil {
		return 0, err
	}
	if c.kind == plane.Reduce && me != c.root {
		// Off root a reduce writes nothing: recv keeps the fill, or, in
		// place, the input.
		want := host
		if !c.inPlace {
			want = make([]byte, len(out))
			for i := range want {
				want[i] = 0xEE
			}
		}
		for i := range out {
			if out[i] != want[i] {
				if wrong == 0 {
					fmt.Printf("rank %d %v: byte %d of recv = %#x off root, want %#x (untouched)\n", me, c, i, out[i], want[i])
				}
				wrong++
			}
		}
		// Out of place, send too: Reduce passes no recv off root, and a
		// kernel that wrote there would land in send.
		if !c.inPlace {
			got := make([]byte, len(host))
			if err := r.s.CopyDtoH(got, send); err != nil {
				return 0, err
			}
			if err := r.s.Synchronize(); err != nil {
				return 0, err
			}
			for i := range got {
				if got[i] != host[i] {
					if wrong == 0 {
						fmt.Printf("rank %d %v: byte %d of send = %#x off root, want %#x (untouched)\n", me, c, i, got[i], host[i])
					}
					wrong++
				}
			}
		}
		return wrong, nil
	}
	tol := dtype.Tolerance(c.dt)
	for i := 0; i < rc; i++ {
		want, ok := c.expect(me, i, n)
		if !ok {
			continue
		}
		got := dtype.Get(out, i, c.dt)
		if math.IsNaN(got) || math.Abs(got-want) > tol*math.Max(1, math.Abs(want)) {
			if wrong < 3 {
				fmt.Printf("rank %d %v: element %d = %v, want %v\n", me, c, i, got, want)
			}
			wrong++
		}
	}
	return wrong, nil
}

// callDev issues c's collective on dc.
func callDev(ctx context.Context, dc *plane.DeviceComm, c devCase, send, recv *gpu.Buffer, s *gpu.Stream) error {
	switch c.kind {
	case plane.AllReduce:
		return dc.AllReduce(ctx, send, recv, c.count, c.dt, c.op, s)
	case plane.AllGather:
		return dc.AllGather(ctx, send, recv, c.count, c.dt, s)
	case plane.ReduceScatter:
		return dc.ReduceScatter(ctx, send, recv, c.count, c.dt, c.op, s)
	case plane.Broadcast:
		return dc.Broadcast(ctx, send, recv, c.count, c.dt, c.root, s)
	case plane.Reduce:
		return dc.Reduce(ctx, send, recv, c.count, c.dt, c.op, c.root, s)
	case plane.AllToAll:
		return dc.AllToAll(ctx, send, recv, c.count, c.dt, s)
	}
	return fmt.Errorf("no such case %v", c)
}

// devCases is the sweep: every op, every dtype for allreduce, every reduction
// op, odd counts, counts that reach multi-chunk and fan-out paths, in place
// and out of place.
func devCases(n int, big int) []devCase {
	var cs []devCase
	for _, dt := range dtype.All() {
		for _, op := range []dtype.Op{dtype.Sum, dtype.Prod, dtype.Min, dtype.Max, dtype.Avg} {
			cs = append(cs, devCase{kind: plane.AllReduce, count: 1000 + 3, dt: dt, op: op})
		}
	}
	for _, count := range []int{0, 1, 7, 4099, big / 16, big} { // big/16: flag kernels at 2 ranks, slots wrap
		for _, inPlace := range []bool{false, true} {
			f := dtype.Float32
			cs = append(cs,
				devCase{kind: plane.AllReduce, count: count, dt: f, op: dtype.Sum, inPlace: inPlace},
				devCase{kind: plane.AllGather, count: count, dt: f, inPlace: inPlace},
				devCase{kind: plane.ReduceScatter, count: count, dt: f, op: dtype.Max, inPlace: inPlace},
				devCase{kind: plane.Broadcast, count: count, dt: dtype.Int8, root: n - 1, inPlace: inPlace},
				devCase{kind: plane.Reduce, count: count, dt: dtype.BFloat16, op: dtype.Sum, root: n / 2, inPlace: inPlace},
			)
			cs = append(cs, devCase{kind: plane.AllToAll, count: count, dt: dtype.Int32, inPlace: inPlace})
		}
	}
	// Rooted calls with other roots, dtypes and ops, between symmetric ones
	// (the flag kernels' one-sided steps must leave the slot credits in
	// step for whatever follows).
	for _, count := range []int{5, 3001, big / 16} {
		cs = append(cs,
			devCase{kind: plane.Broadcast, count: count, dt: dtype.Float16, root: 0},
			devCase{kind: plane.Reduce, count: count, dt: dtype.Float32, op: dtype.Avg, root: 0},
			devCase{kind: plane.AllReduce, count: count, dt: dtype.Int32, op: dtype.Sum},
			devCase{kind: plane.Reduce, count: count, dt: dtype.Int32, op: dtype.Min, root: n - 1, inPlace: true},
			devCase{kind: plane.Broadcast, count: count, dt: dtype.Float64, root: n / 2, inPlace: true},
		)
	}
	cs = append(cs, devCase{kind: plane.ReduceScatter, count: 4097, dt: dtype.Float16, op: dtype.Avg},
		devCase{kind: plane.AllGather, count: big, dt: dtype.Float64})
	return cs
}

// onRanks runs f on every rank at once and returns the errors.
func onRanks(rs []*devRank, f func(r *devRank) error) []error {
	return eachRank(len(rs), func(i int) error { return f(rs[i]) })
}

// eachRank runs f(r) for every r in [0, n) at once and returns each one's
// error.
func eachRank(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errs
}

// testCtx bounds a test's collectives so a protocol bug fails instead of
// hanging.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
