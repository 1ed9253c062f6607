package plane

import "testing"

// TestKindWhat: the constant call names match "gpu " + the kind's name
// for every kind, so logs and errors name calls as before.
func TestKindWhat(t *testing.T) {
	for k := AllReduce; k <= AllToAllv; k++ {
		if got, want := k.what(), "gpu "+k.String(); got != want {
			t.Errorf("kind %d: what() = %q, want %q", k, got, want)
		}
	}
}

// TestOneRankInPlace: only a one-rank collective whose recv is its send
// skips the capture query (the direct plane enqueues nothing for it).
func TestOneRankInPlace(t *testing.T) {
	dev := fakeDevice(t)
	a, err1 := dev.Alloc(64)
	b, err2 := dev.Alloc(64)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	for _, c := range []struct {
		name string
		n    int
		o    Op
		want bool
	}{
		{"allreduce in place", 1, Op{Kind: AllReduce, Send: a, Recv: a}, true},
		{"allreduce out of place", 1, Op{Kind: AllReduce, Send: a, Recv: b}, false},
		{"two ranks", 2, Op{Kind: AllReduce, Send: a, Recv: a}, false},
		{"group", 1, Op{Kind: Group, Send: a, Recv: a}, false},
		{"alltoallv", 1, Op{Kind: AllToAllv, Send: a, Recv: a}, false},
		{"no recv", 1, Op{Kind: Broadcast, Send: a}, false},
	} {
		if got := oneRankInPlace(c.n, &c.o); got != c.want {
			t.Errorf("%s: oneRankInPlace = %v, want %v", c.name, got, c.want)
		}
	}
}
