package capi

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestDeviceRandomCalls runs seeded random sequences of device calls
// through the C library on the fake driver, as PyTorch makes them: every
// collective and grouped send/recv, every type and op, sizes from one
// element to past the flag kernels' limits, on the world's communicators
// or a split's (colors r%2, ranks in reverse order; on 3 ranks one of them
// has one rank; now and then destroyed and split again), views at any element offset
// into a few allocations (send and receive sometimes in one), in place and
// out of place, calls from one thread in a group (nccl-tests -g) or from
// each rank's own thread outside any group, bursts of up to three calls
// enqueued before any is waited for, each rank's on either of two streams
// (the fake driver runs a stream's work as it is enqueued, so this checks
// the calls' bookkeeping across streams, not races between them), and
// allocations freed and made again at the same address between calls. Before each call every
// byte of every allocation is set at random; after it the outputs must
// equal a reference computed here in float64 (exact integer arithmetic
// for integers; every input is a small integer, so float results are
// exact too but for avg and float8 products) and every other byte must be
// as it was: nothing written out of bounds, no input changed. A third of
// the grouped calls are captured in a CUDA graph (a random capture mode)
// and replayed twice with new inputs; a call flexlink cannot capture must
// be refused as such, and the communicators go on.
func TestDeviceRandomCalls(t *testing.T) {
	for _, tc := range []struct {
		n      int
		calls  int
		env    []string
		noPeer bool // GPUs without peer access (PCIe only, no P2P): the staged paths
	}{
		{2, 60, nil, false},
		{3, 40, nil, false},
		{4, 40, nil, false},
		{2, 40, []string{"FLEXLINK_GPU_ENQUEUE", "async"}, false},
		{4, 30, []string{"FLEXLINK_GPU_ENQUEUE", "async"}, false},
		{3, 30, []string{"FLEXLINK_GPU_FLAG_BYTES", "0"}, false},
		{2, 30, []string{"FLEXLINK_GPU_FLAG_BYTES", "0", "FLEXLINK_GPU_ALLREDUCE", "push"}, false},
		{2, 30, nil, true},
		{3, 30, nil, true},
	} {
		for seed := range *soakSeeds {
			t.Run(fmt.Sprintf("n=%d/%v/nopeer=%v/seed=%d", tc.n, tc.env, tc.noPeer, seed), func(t *testing.T) {
				mix := uint64(tc.n*1000 + len(tc.env) + seed*7919)
				if tc.noPeer {
					mix += 500
				}
				s := newSoak(t, tc.n, mix, gpufake.Config{ReuseFreed: true, NoPeer: tc.noPeer}, tc.env)
				for i := range tc.calls {
					s.step(i)
				}
			})
		}
	}
}

// soakSeeds is how many seeds each case runs (make test: one; a longer
// hunt: go test ./capi -run TestDeviceRandomCalls -args -soak.seeds=20).
var soakSeeds = flag.Int("soak.seeds", 1, "seeds per case of TestDeviceRandomCalls")

// soakPool is the bytes of one allocation per rank that the calls carve
// their views from.
const soakPool = 3 << 20

type soak struct {
	t      *testing.T
	f      *devFixture
	rng    *rand.Rand
	n      int
	pools  [][2]*gpu.Buffer // [rank][allocation]
	second []*gpu.Stream    // each rank's second stream (the fixture's is the first)
	lays   [2]layout        // the world, and its split
	colors []int            // the split's colors by rank
	noFlag bool             // FLEXLINK_GPU_FLAG_BYTES=0: the flag kernels are off
	staged bool             // no peer access: the staged plane, which captures nothing
}

// layout is one communicator per rank: the world's, or one of a split's.
type layout struct {
	h      []uintptr // rank r's handle
	sub    []int     // rank r's rank in it
	group  [][]int   // rank r's communicator's members, world ranks in its rank order
	noFlag bool      // FLEXLINK_GPU_FLAG_BYTES=0: the flag kernels are off
}

func newSoak(t *testing.T, n int, seed uint64, cfg gpufake.Config, env []string) *soak {
	f := newDevFixture(t, n, cfg, env...)
	s := &soak{t: t, f: f, rng: rand.New(rand.NewPCG(seed, 31)), n: n, staged: cfg.NoPeer}
	for i := 0; i+1 < len(env); i += 2 {
		s.noFlag = s.noFlag || env[i] == "FLEXLINK_GPU_FLAG_BYTES" && env[i+1] == "0"
	}
	for r := range n {
		s.pools = append(s.pools, [2]*gpu.Buffer{f.alloc(r, soakPool, false), f.alloc(r, soakPool, false)})
		s.second = append(s.second, newStream(t, f.dvs[r]))
	}
	// The split: colors r%2 (on 2 ranks one color), keys reversed, so
	// ranks differ from the world's; on 3 ranks one communicator has one
	// rank.
	world := make([]int, n)
	s.lays[0] = layout{h: f.hs}
	for r := range n {
		world[r] = r
		s.lays[0].sub = append(s.lays[0].sub, r)
	}
	for range n {
		s.lays[0].group = append(s.lays[0].group, world)
	}
	colors := make([]int, n)
	for r := range colors {
		colors[r] = r % 2
		if n == 2 {
			colors[r] = 0
		}
	}
	s.colors = colors
	s.split() // eachRank destroys what is live at the end
	for r := range n {
		var g []int
		for q := n - 1; q >= 0; q-- { // keys reversed
			if colors[q] == colors[r] {
				g = append(g, q)
			}
		}
		s.lays[1].group = append(s.lays[1].group, g)
		s.lays[1].sub = append(s.lays[1].sub, slices.Index(g, r))
	}
	return s
}

// split makes the split's communicators (colors s.colors, keys reversed).
func (s *soak) split() {
	s.lays[1].h = eachRank(s.t, s.f.l, "split", s.n, nil, func(r int) (uintptr, error) {
		return s.f.l.Split(tidOf(r), s.f.hs[r], s.colors[r], s.n-r, DefaultConfig())
	})
}

// resplit destroys the split's communicators and makes them again, as a
// program that drops a process group and creates it anew: the new ones
// must not see the old ones' state (flag regions, calls, buffers).
func (s *soak) resplit() {
	eachRank(s.t, s.f.l, "destroy", s.n, nil, func(r int) (uintptr, error) { return 0, s.f.l.Destroy(s.lays[1].h[r]) })
	s.split()
}

// view is count elements at byte offset off of allocation a.
type view struct {
	a, off, count int
}

func (v view) bytes(dt dtype.DType) (int, int) { return v.off, v.off + v.count*dt.Size() }

// soakCall is one random call, as every rank makes it.
type soakCall struct {
	kind       Kind
	dt         dtype.DType
	op         dtype.Op
	count      int // NCCL's count argument
	root       int
	shift      int // send/recv: rank r sends to r+shift, receives from r-shift
	send, recv []view
	inPlace    bool
	grouped    bool
	stream     []int // rank r's call is on its stream stream[r] (of two)
	lay        int   // the world's communicators (0) or the split's (1)
}

// rootOf is the root (rooted calls) of rank r's communicator, a rank of it.
func (c *soakCall) rootOf(s *soak, r int) int { return c.root % len(s.lays[c.lay].group[r]) }

var soakKinds = []Kind{AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Gather, Scatter, Send}

// ncclOp is NCCL's code of op.
func ncclOp(op dtype.Op) int32 {
	return map[dtype.Op]int32{dtype.Sum: 0, dtype.Prod: 1, dtype.Max: 2, dtype.Min: 3, dtype.Avg: 4}[op]
}

// pickCount: how many elements of NCCL's count a call takes, its biggest
// buffer at most limit bytes: tiny, within the flag kernels' limits, and
// past them.
func (s *soak) pickCount(dt dtype.DType, per, limit int) int {
	var bytes int
	switch s.rng.IntN(4) {
	case 0:
		return 1 + s.rng.IntN(16)
	case 1:
		bytes = 64 + s.rng.IntN(16<<10)
	case 2:
		bytes = 16<<10 + s.rng.IntN(240<<10)
	default:
		bytes = 256<<10 + s.rng.IntN(768<<10)
	}
	c := min(bytes, limit) / dt.Size() / per
	return max(c, 1)
}

// pick is a random call whose views lie in bytes [lo, lo+span) of each
// allocation, on a random stream of each rank.
func (s *soak) pick(lo, span int, grouped bool) soakCall {
	c := soakCall{kind: soakKinds[s.rng.IntN(len(soakKinds))], grouped: grouped}
	for range s.n {
		c.stream = append(c.stream, s.rng.IntN(2))
	}
	all := dtype.All()
	c.dt = all[s.rng.IntN(len(all))]
	ops := dtype.Ops()
	c.op = ops[s.rng.IntN(len(ops))]
	c.root = s.rng.IntN(s.n)  // of each communicator: modulo its size
	c.shift = s.rng.IntN(s.n) // 0: to itself; modulo the size
	c.lay = s.rng.IntN(2)
	c.count = s.pickCount(c.dt, s.n, span/3)
	lens := func(r int) (sendN, recvN int) {
		m := len(s.lays[c.lay].group[r])
		sendN, recvN = c.count, c.count
		switch c.kind {
		case AllGather, Gather:
			recvN = c.count * m
		case ReduceScatter, Scatter:
			sendN = c.count * m
		case AllToAll:
			sendN, recvN = c.count*m, c.count*m
		}
		return sendN, recvN
	}
	c.inPlace = c.kind != AllToAll && c.kind != Send && s.rng.IntN(3) == 0
	es := c.dt.Size()
	for r := range s.n {
		sendN, recvN := lens(r)
		sr := s.lays[c.lay].sub[r]
		if c.inPlace {
			big := max(sendN, recvN)
			v := view{a: s.rng.IntN(2), off: lo + es*s.rng.IntN((span-big*es)/es)}
			recv := view{v.a, v.off, recvN}
			send := view{v.a, v.off, sendN}
			switch c.kind {
			case AllGather, Gather: // NCCL's in place: the send is the rank's block of the receive
				send.off += sr * c.count * es
			case ReduceScatter, Scatter:
				recv.off += sr * c.count * es
			}
			c.send, c.recv = append(c.send, send), append(c.recv, recv)
			continue
		}
		// Out of place: two views that do not overlap, in one allocation
		// or in two.
		sa, ra := s.rng.IntN(2), s.rng.IntN(2)
		sb, rb := sendN*es, recvN*es
		if sa == ra {
			first := es * s.rng.IntN((span-sb-rb)/es+1)
			gap := es * s.rng.IntN((span-sb-rb-first)/es+1)
			first += lo
			if s.rng.IntN(2) == 0 {
				c.send, c.recv = append(c.send, view{sa, first, sendN}), append(c.recv, view{ra, first + sb + gap, recvN})
			} else {
				c.recv, c.send = append(c.recv, view{ra, first, recvN}), append(c.send, view{sa, first + rb + gap, sendN})
			}
			continue
		}
		c.send = append(c.send, view{sa, lo + es*s.rng.IntN((span-sb)/es+1), sendN})
		c.recv = append(c.recv, view{ra, lo + es*s.rng.IntN((span-rb)/es+1), recvN})
	}
	return c
}

// input is rank r's element i of its send view: a small integer (exact
// in every type, and so are their sums and products over 4 ranks).
func (c *soakCall) input(seed, r, i int) float64 {
	h := uint64(seed)*0x9e3779b97f4a7c15 ^ uint64(r)*0xbf58476d1ce4e5b9 ^ uint64(i)*0x94d049bb133111eb
	h ^= h >> 29
	switch {
	case c.op == dtype.Prod:
		return float64(1 + h%3)
	case c.dt.IsFloat8():
		return float64(h % 3)
	case c.dt == dtype.Uint8 || c.dt == dtype.Uint32 || c.dt == dtype.Uint64:
		return float64(h % 16)
	}
	return float64(int(h%17) - 8)
}

func (s *soak) step(i int) {
	t := s.t
	if s.rng.IntN(8) == 0 { // the caching allocator gave a block back and took it again
		a := s.rng.IntN(2)
		for r := range s.n {
			s.pools[r][a] = s.f.reallocAt(t, r, s.pools[r][a])
		}
	}
	if s.rng.IntN(12) == 0 {
		s.resplit()
	}
	grouped := s.rng.IntN(2) == 0
	if grouped && s.rng.IntN(3) == 0 {
		s.captured(i, s.pick(0, soakPool, true))
		return
	}
	// A burst: up to three calls enqueued before any is waited for, each
	// rank's on either of its streams, on disjoint bytes.
	k := 1 + s.rng.IntN(3)
	burst := make([]soakCall, k)
	seeds := make([]int, k)
	var what strings.Builder
	for j := range burst {
		burst[j] = s.pick(j*(soakPool/k), soakPool/k, grouped)
		seeds[j] = 10*i + j
		c := burst[j]
		fmt.Fprintf(&what, "call %d.%d: %v %v %v count %d root %d shift %d in place %v grouped %v streams %v send %v recv %v; ",
			i, j, c.kind, c.dt, c.op, c.count, c.root, c.shift, c.inPlace, c.grouped, c.stream, c.send, c.recv)
	}
	before := s.prepare(burst, seeds)
	if err := s.run(burst); err != nil {
		t.Fatalf("%s: %v", what.String(), err)
	}
	s.check(burst, seeds, before, what.String())
}

// captured captures c in a CUDA graph (as nccl-tests -G), a random
// capture mode, and replays it twice with new inputs.
func (s *soak) captured(i int, c soakCall) {
	t := s.t
	what := fmt.Sprintf("call %d: %v %v %v count %d root %d shift %d in place %v send %v recv %v",
		i, c.kind, c.dt, c.op, c.count, c.root, c.shift, c.inPlace, c.send, c.recv)
	mode := []gpu.CaptureMode{gpu.CaptureGlobal, gpu.CaptureThreadLocal, gpu.CaptureRelaxed}[s.rng.IntN(3)]
	xs, err := s.f.captureGroupOn(s.lays[c.lay].h, mode, func(r int, st uintptr) []Call {
		calls := s.calls(c, r)
		for k := range calls {
			calls[k].Stream = st
		}
		return calls
	})
	if err != nil && s.capturable(c) {
		t.Fatalf("%s: capture (%v): %v", what, mode, err)
	}
	if err != nil { // refused, said so, and the communicators go on
		if !strings.Contains(err.Error(), "cannot run under CUDA graph capture") {
			t.Fatalf("%s: capture (%v) refused with %v, want it to say the call cannot be captured", what, mode, err)
		}
		return
	}
	if !s.capturable(c) {
		t.Fatalf("%s: captured (%v), though this test expects a refusal: update capturable", what, mode)
	}
	defer func() {
		for _, x := range xs {
			x.Close()
		}
	}()
	for rep := range 2 {
		seeds := []int{10*i + rep}
		before := s.prepare([]soakCall{c}, seeds)
		if err := s.f.replay(xs); err != nil {
			t.Fatalf("%s: replay %d: %v", what, rep, err)
		}
		s.check([]soakCall{c}, seeds, before, fmt.Sprintf("%s, captured (%v), replay %d", what, mode, rep))
	}
}

// capturable reports whether flexlink captures c on every rank's
// communicator: a one-rank communicator's calls and a send and receive of
// a rank to itself (copies); nothing else on GPUs without peer access (the
// staged plane); else, while the flag kernels are
// on (FLEXLINK_GPU_FLAG_BYTES not 0), every collective, and grouped
// send/recv (and gather and scatter, which are made of them) on two ranks
// only.
func (s *soak) capturable(c soakCall) bool {
	for r := range s.n {
		m := len(s.lays[c.lay].group[r])
		switch {
		case m == 1 || c.kind == Send && c.shift%m == 0:
		case s.staged:
			return false
		case s.noFlag:
			return false
		case (c.kind == Gather || c.kind == Scatter || c.kind == Send) && m > 2:
			return false
		}
	}
	return true
}

// prepare sets every byte of every allocation at random, then the calls'
// inputs (call j's from seeds[j]), and returns what it wrote.
func (s *soak) prepare(calls []soakCall, seeds []int) [][2][]byte {
	before := make([][2][]byte, s.n)
	for r := range s.n {
		for a := range 2 {
			b := make([]byte, soakPool)
			for j := 0; j < len(b); j += 8 {
				x := s.rng.Uint64()
				for k := 0; k < 8 && j+k < len(b); k++ {
					b[j+k] = byte(x >> (8 * k))
				}
			}
			before[r][a] = b
		}
		for j, c := range calls {
			if s.sendsHere(c, r) {
				v := c.send[r]
				for e := range v.count {
					dtype.Put(before[r][v.a][v.off:], e, c.dt, c.input(seeds[j], r, e))
				}
			}
		}
		for a := range 2 {
			s.f.upload(r, s.pools[r][a], before[r][a])
		}
		if err := s.f.ss[r].Synchronize(); err != nil { // before a call on the second stream
			s.t.Fatal(err)
		}
	}
	return before
}

// check compares every allocation with before, the calls' outputs put in.
func (s *soak) check(calls []soakCall, seeds []int, before [][2][]byte, what string) {
	for r := range s.n {
		if err := s.second[r].Synchronize(); err != nil {
			s.t.Fatalf("%s: rank %d: %v", what, r, err)
		}
		after := [2][]byte{s.f.download(r, s.pools[r][0], soakPool), s.f.download(r, s.pools[r][1], soakPool)}
		want := [2][]byte{append([]byte(nil), before[r][0]...), append([]byte(nil), before[r][1]...)}
		writes := make([]bool, len(calls))
		for j, c := range calls {
			if v, out := c.expected(s, seeds[j], r); out != nil {
				writes[j] = true
				for e, x := range out {
					dtype.Put(want[v.a][v.off:], e, c.dt, x)
				}
			}
		}
		for a := range 2 {
			if bad, c := firstDiff(calls, writes, r, a, after[a], want[a]); bad >= 0 {
				s.t.Fatalf("%s: rank %d allocation %d byte %d (call %v %v %v) is %#x, want %#x (was %#x)",
					what, r, a, bad, c.kind, c.dt, c.op, after[a][bad], want[a][bad], before[r][a][bad])
			}
		}
	}
}

// sendsHere reports whether rank r's send view holds input for c.
func (s *soak) sendsHere(c soakCall, r int) bool {
	switch c.kind {
	case Broadcast, Scatter:
		return s.lays[c.lay].sub[r] == c.rootOf(s, r)
	}
	return true
}

// firstDiff is the first byte of rank r's allocation a where got differs
// from want (-1 when none) and the call whose view holds it, if any.
// writes[k]: rank r gets output from calls[k]. Output that is not exact
// (soakCall.inexact) may differ by the type's tolerance: avg's division,
// and float8 products (3·3·3 is 27, which E5M2 rounds to 28, but 3·3
// rounds to 8 first: every step rounds, as NCCL's do).
func firstDiff(calls []soakCall, writes []bool, r, a int, got, want []byte) (int, soakCall) {
	for j := range got {
		if got[j] == want[j] {
			continue
		}
		var in *soakCall
		inexact := false
		for k := range calls {
			if v := calls[k].recv[r]; v.a == a {
				if lo, hi := v.bytes(calls[k].dt); j >= lo && j < hi {
					in, inexact = &calls[k], writes[k] && calls[k].inexact()
				}
			}
		}
		if in == nil {
			return j, soakCall{}
		}
		if !inexact {
			return j, *in
		}
		lo, _ := in.recv[r].bytes(in.dt)
		e := (j - lo) / in.dt.Size()
		g, w := dtype.Get(got[lo:], e, in.dt), dtype.Get(want[lo:], e, in.dt)
		if !(math.Abs(g-w) <= dtype.Tolerance(in.dt)*math.Max(1, math.Abs(w))) { // a NaN fails
			return j, *in
		}
	}
	return -1, soakCall{}
}

func reducing(k Kind) bool { return k == AllReduce || k == ReduceScatter || k == Reduce }

// inexact reports whether c's reduced values may differ from the
// reference by rounding: avg of a float type, and float8 products and
// avg (sums, min and max of these inputs are exact in every type).
func (c *soakCall) inexact() bool {
	return reducing(c.kind) && c.dt.IsFloat() && (c.op == dtype.Avg || c.dt.IsFloat8() && c.op == dtype.Prod)
}

// expected is world rank wr's output view and its values, or a nil slice when it
// receives nothing.
func (c *soakCall) expected(s *soak, seed, wr int) (view, []float64) {
	g, r, root := s.lays[c.lay].group[wr], s.lays[c.lay].sub[wr], c.rootOf(s, wr)
	n := len(g)
	in := func(q, j int) float64 { return c.input(seed, g[q], j) } // q: a rank of the communicator
	red := func(j int) float64 {
		return dtype.Round(dtype.Fold(c.op, c.dt, n, func(q int) float64 { return in(q, j) }), c.dt)
	}
	v := c.recv[wr]
	out := make([]float64, v.count)
	switch c.kind {
	case AllReduce:
		for j := range out {
			out[j] = red(j)
		}
	case Reduce:
		if r != root {
			return v, nil
		}
		for j := range out {
			out[j] = red(j)
		}
	case ReduceScatter:
		for j := range out {
			out[j] = red(r*c.count + j)
		}
	case AllGather:
		for j := range out {
			out[j] = in(j/c.count, j%c.count)
		}
	case Gather:
		if r != root {
			return v, nil
		}
		for j := range out {
			out[j] = in(j/c.count, j%c.count)
		}
	case Broadcast:
		for j := range out {
			out[j] = in(root, j)
		}
	case Scatter:
		for j := range out {
			out[j] = in(root, r*c.count+j)
		}
	case AllToAll:
		for j := range out {
			out[j] = in(j/c.count, r*c.count+j%c.count)
		}
	case Send:
		from := (r - c.shift%n + n) % n
		for j := range out {
			out[j] = in(from, j)
		}
	}
	return v, out
}

// calls is rank r's calls for c: one, or a send and a receive.
func (s *soak) calls(c soakCall, r int) []Call {
	ptr := func(v view) uintptr { return s.pools[r][v.a].Ptr() + uintptr(v.off) }
	st := s.f.ss[r].Handle()
	if c.stream[r] == 1 {
		st = s.second[r].Handle()
	}
	mk := func(k Kind, send, recv uintptr, count, root int) Call {
		return Call{Kind: k, Send: devAddr(send), Recv: devAddr(recv), Count: uint64(count), Type: ncclCode(s.t, c.dt), Op: ncclOp(c.op), Root: root, Stream: st}
	}
	if c.kind == Send {
		m, sr := len(s.lays[c.lay].group[r]), s.lays[c.lay].sub[r]
		return []Call{
			mk(Send, ptr(c.send[r]), 0, c.count, (sr+c.shift)%m),
			mk(Recv, 0, ptr(c.recv[r]), c.count, (sr-c.shift%m+m)%m),
		}
	}
	return []Call{mk(c.kind, ptr(c.send[r]), ptr(c.recv[r]), c.count, c.rootOf(s, r))}
}

// run makes the calls in order on every rank: from one thread, each in a
// group of every rank's part (nccl-tests -g), or from each rank's own
// thread (a group only around a send and its receive).
func (s *soak) run(burst []soakCall) error {
	if burst[0].grouped {
		for _, c := range burst {
			s.f.l.GroupStart(fixtureTid)
			var first error
			for r := range s.n {
				for _, call := range s.calls(c, r) {
					if err := s.f.l.Coll(fixtureTid, s.lays[c.lay].h[r], call); err != nil && first == nil {
						first = err
					}
				}
			}
			if err := s.f.l.GroupEnd(fixtureTid); err != nil && first == nil {
				first = err
			}
			if first != nil {
				return first
			}
		}
		return nil
	}
	errs := make([]error, s.n)
	var wg sync.WaitGroup
	for r := range s.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tid := 100 + r
			for _, c := range burst {
				calls := s.calls(c, r)
				if len(calls) > 1 {
					s.f.l.GroupStart(tid)
				}
				for _, call := range calls {
					if err := s.f.l.Coll(tid, s.lays[c.lay].h[r], call); err != nil && errs[r] == nil {
						errs[r] = err
					}
				}
				if len(calls) > 1 {
					if err := s.f.l.GroupEnd(tid); err != nil && errs[r] == nil {
						errs[r] = err
					}
				}
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// devAddr is a device address as the C caller passes it (nil for 0).
func devAddr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// ncclCode is dt's ncclDataType_t.
func ncclCode(t testing.TB, dt dtype.DType) int32 {
	for code := int32(0); code < ncclNumTypes; code++ {
		if d, err := DataType(code); err == nil && d == dt {
			return code
		}
	}
	t.Fatalf("%v has no ncclDataType_t", dt)
	return -1
}
