package collectives

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

func TestTagRoundTrip(t *testing.T) {
	for _, h := range []header{
		{kind: kindAllReduce, algo: algoRing, dt: dtype.Float32, op: dtype.Avg, count: 1<<48 - 1, root: noRoot, seq: 1<<40 - 1},
		{kind: kindBroadcast, algo: algoTree, dt: dtype.BFloat16, op: noField, count: 0, root: maxRoot, seq: 7},
		{kind: kindP2P, algo: algoDirect, dt: noField, op: noField, count: 12345, root: noRoot, seq: 1},
	} {
		for _, step := range []uint64{0, 1, guardStep} {
			comm, got, gotStep, ok := decodeTag(h.tag(0xfeed, step))
			if !ok || comm != 0xfeed || got != h || gotStep != step {
				t.Errorf("decode(tag(%+v, %d)) = %#x %+v %d %v", h, step, comm, got, gotStep, ok)
			}
		}
	}
}

// TestMismatchMessage checks the error built from two tags: sentinel, both
// ranks in order, both calls, and exactly the fields that differ.
func TestMismatchMessage(t *testing.T) {
	base := header{kind: kindAllReduce, algo: algoRing, dt: dtype.Float32, op: dtype.Sum, count: 1000, root: noRoot, seq: 5}
	for _, tc := range []struct {
		name    string
		change  func(h *header)
		differs string
	}{
		{"count", func(h *header) { h.count = 999 }, "differs: count;"},
		{"dtype", func(h *header) { h.dt = dtype.Int32 }, "differs: dtype;"},
		{"op", func(h *header) { h.op = dtype.Max }, "differs: op;"},
		{"root", func(h *header) { h.kind, h.root = kindReduce, 2 }, "differs: collective, root;"},
		{"seq", func(h *header) { h.seq = 6 }, "differs: call number;"},
		{"algo", func(h *header) { h.algo = algoRD }, "differs: algorithm (ranks must share"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := base
			tc.change(&other)
			// rank 3 received other's tag from rank 2
			err := mismatch(3, 2, &fabric.TagMismatchError{Peer: 2, Want: base.tag(1, 4), Got: other.tag(1, 4)})
			msg := err.Error()
			if !errors.Is(err, errs.ErrMismatch) {
				t.Fatalf("%v does not wrap ErrMismatch", err)
			}
			want := "rank 2 called " + other.String() + ", rank 3 called " + base.String()
			if !strings.Contains(msg, want) || !strings.Contains(msg, tc.differs) {
				t.Fatalf("message %q\nwant it to contain %q and %q", msg, want, tc.differs)
			}
		})
	}
	err := mismatch(0, 1, &fabric.TagMismatchError{Peer: 1, Want: base.tag(1, 4), Got: base.tag(1, 9)})
	if !strings.Contains(err.Error(), "message step (4 vs 9") {
		t.Fatalf("step-only difference: %v", err)
	}
	if s := base.String(); s != "allreduce count=1000 float sum (call #5, ring)" {
		t.Fatalf("header string %q", s)
	}
}

// TestTreeLinks checks that the binomial tree of every size reaches every
// position exactly once and that parent and child agree.
func TestTreeLinks(t *testing.T) {
	for n := 1; n <= 33; n++ {
		seen := make([]int, n)
		for v := range n {
			parent, children := treeLinks(v, n)
			if (v == 0) != (parent < 0) {
				t.Fatalf("n=%d: position %d has parent %d", n, v, parent)
			}
			for _, ch := range children {
				if p, _ := treeLinks(ch, n); p != v {
					t.Fatalf("n=%d: %d lists child %d whose parent is %d", n, v, ch, p)
				}
				seen[ch]++
			}
		}
		for v := 1; v < n; v++ {
			if seen[v] != 1 {
				t.Fatalf("n=%d: position %d is a child %d times", n, v, seen[v])
			}
		}
	}
}

func TestSplitChunks(t *testing.T) {
	for _, tc := range []struct{ count, parts, ce int }{{0, 3, 4}, {1, 8, 1}, {7, 3, 2}, {1000, 8, 5}, {1003, 4, 16}} {
		covered := make([]int, tc.count)
		for _, sp := range split(tc.count, tc.parts) {
			if sp.n > split(tc.count, tc.parts)[0].n {
				t.Fatalf("%+v: span %+v longer than the first", tc, sp)
			}
			for ch := range chunks(sp.n, tc.ce) {
				c := chunkOf(sp, ch, tc.ce)
				if c.n > tc.ce {
					t.Fatalf("%+v: chunk %+v larger than %d", tc, c, tc.ce)
				}
				for i := c.off; i < c.off+c.n; i++ {
					covered[i]++
				}
			}
		}
		for i, k := range covered {
			if k != 1 {
				t.Fatalf("%+v: element %d covered %d times", tc, i, k)
			}
		}
	}
}
