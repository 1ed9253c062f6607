package capi

import (
	"fmt"
	"sync"
	"testing"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestGroupsReused: groups one after another reuse their bookkeeping (the
// group, its works, the point-to-point lists: group.go, run.go), with
// sizes that grow and shrink between them; every group's results are its
// own. Each group has, per rank, a send to the other rank, the matching
// receive and an allreduce, from one thread (nccl-tests -g 2), then the
// same from a thread per rank, each in a group of its own.
func TestGroupsReused(t *testing.T) {
	f := newDevFixture(t, 2, gpufake.Config{})
	const most = 1024
	var send, recv, sum [2]*gpu.Buffer
	for r := range 2 {
		send[r], recv[r], sum[r] = f.alloc(r, 4*most, false), f.alloc(r, 4*most, false), f.alloc(r, 4*most, false)
	}
	value := func(round, r, i int) float32 { return float32((round*7+r*13+i)%199) - 90 }
	calls := func(round, r, count int) []Call {
		s := f.ss[r].Handle()
		return []Call{
			{Kind: Send, Send: devPtr(send[r]), Count: uint64(count), Type: ncclFloat32, Root: 1 - r, Stream: s},
			{Kind: Recv, Recv: devPtr(recv[r]), Count: uint64(count), Type: ncclFloat32, Root: 1 - r, Stream: s},
			{Kind: AllReduce, Send: devPtr(send[r]), Recv: devPtr(sum[r]), Count: uint64(count), Type: ncclFloat32, Stream: s},
		}
	}
	for round, count := range []int{16, most, 4, 300, 1, most} {
		for _, threads := range []bool{false, true} {
			t.Run(fmt.Sprintf("round%d/threads=%v", round, threads), func(t *testing.T) {
				for r := range 2 {
					v := make([]float32, count)
					for i := range v {
						v[i] = value(round, r, i)
					}
					f.upload(r, send[r], float32s(v))
				}
				if threads {
					var wg sync.WaitGroup
					errs := make([]error, 2)
					for r := range 2 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							errs[r] = groupOf(f.l, tidOf(r), f.hs[r], calls(round, r, count))
						}()
					}
					wg.Wait()
					for r, err := range errs {
						if err != nil {
							t.Fatalf("rank %d: %v", r, err)
						}
					}
				} else {
					f.l.GroupStart(fixtureTid)
					for r := range 2 {
						for _, c := range calls(round, r, count) {
							if err := f.l.Coll(fixtureTid, f.hs[r], c); err != nil {
								t.Fatalf("rank %d: %v", r, err)
							}
						}
					}
					if err := f.l.GroupEnd(fixtureTid); err != nil {
						t.Fatal(err)
					}
				}
				for r := range 2 {
					got, total := fromFloat32s(f.download(r, recv[r], 4*count)), fromFloat32s(f.download(r, sum[r], 4*count))
					for i := range count {
						if want := value(round, 1-r, i); got[i] != want {
							t.Fatalf("rank %d: received element %d = %v, want %v (rank %d's)", r, i, got[i], want, 1-r)
						}
						if want := value(round, 0, i) + value(round, 1, i); total[i] != want {
							t.Fatalf("rank %d: sum element %d = %v, want %v", r, i, total[i], want)
						}
					}
				}
			})
		}
	}
}

// groupOf makes calls on communicator h inside one group of thread tid.
func groupOf(l *Library, tid int, h uintptr, calls []Call) error {
	l.GroupStart(tid)
	var first error
	for _, c := range calls {
		if err := l.Coll(tid, h, c); err != nil && first == nil {
			first = err
		}
	}
	if err := l.GroupEnd(tid); err != nil && first == nil {
		first = err
	}
	return first
}

// TestCollOutsideGroups: GroupsOpen says whether any thread has a group
// open; a call made for tid 0 (no thread, as cmd/libnccl passes when
// none has) runs at once while another thread's group is open, and that
// thread's own call waits for its group's end.
func TestCollOutsideGroups(t *testing.T) {
	l, hs := hostLib(t, 1)
	const other = 5
	in := f64s(4, func(i int) float64 { return float64(3*i + 1) })
	now, deferred := make([]float64, len(in)), make([]float64, len(in))
	call := func(out []float64) Call {
		return Call{Kind: AllReduce, Send: ptr(in), Recv: ptr(out), Count: uint64(len(in)), Type: ncclFloat64}
	}
	if l.GroupsOpen() {
		t.Fatal("GroupsOpen before any ncclGroupStart")
	}
	l.GroupStart(other)
	if !l.GroupsOpen() {
		t.Fatal("GroupsOpen false with thread 5's group open")
	}
	if err := l.Coll(0, hs[0], call(now)); err != nil {
		t.Fatal(err)
	}
	if err := l.Coll(other, hs[0], call(deferred)); err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if now[i] != in[i] {
			t.Fatalf("the call for no thread: element %d = %v before the other thread's group ended, want %v", i, now[i], in[i])
		}
		if deferred[i] != 0 {
			t.Fatalf("thread 5's call ran before its group ended: element %d = %v", i, deferred[i])
		}
	}
	if err := l.GroupEnd(other); err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if deferred[i] != in[i] {
			t.Fatalf("thread 5's call after its group: element %d = %v, want %v", i, deferred[i], in[i])
		}
	}
	if l.GroupsOpen() {
		t.Fatal("GroupsOpen after the only group ended")
	}
}

// TestGroupBookkeepingNoAllocs: once warm, a group's own bookkeeping on
// one communicator (start, queue a call, end, split by communicator, give
// the group back) allocates nothing, and neither does a call's check for
// a group when none is open.
func TestGroupBookkeepingNoAllocs(t *testing.T) {
	l, hs := hostLib(t, 1)
	c := l.handles.get(hs[0])
	const tid = 9
	w := l.newWork(c, Call{Kind: AllReduce})
	steps := []struct {
		name string
		f    func()
	}{
		{"no group open", func() {
			if l.groups.queue(tid, w) {
				t.Fatal("queued with no group open")
			}
		}},
		{"a group of one call", func() {
			l.groups.start(tid)
			if !l.groups.queue(tid, w) {
				t.Fatal("not queued inside a group")
			}
			g, err := l.groups.end(tid)
			if err != nil || g == nil {
				t.Fatalf("end: %v, %v", g, err)
			}
			if order, by := g.byComm(); len(order) != 1 || order[0] != c || len(by[0]) != 1 || by[0][0] != w {
				t.Fatalf("byComm: %v, %v", order, by)
			}
			g.done()
		}},
	}
	for _, st := range steps {
		st.f()
		if n := testing.AllocsPerRun(200, st.f); n != 0 {
			t.Errorf("%s: %v allocations, want 0", st.name, n)
		}
	}
}
