package ucx

import (
	"testing"
	"time"
)

// TestAbortFresh: a connection aborted (or closed) right after it was
// made, on either side, while UCX may still be wiring it up, fails its
// requests and leaves the provider working: no UCX assertion, the next
// connection carries data.
func TestAbortFresh(t *testing.T) {
	for _, same := range []bool{false, true} {
		a, b := open(t), open(t)
		if same { // both ends on one provider, as ranks in one process share it
			b = a
		}
		abortFresh(t, a, b)
	}
}

func abortFresh(t *testing.T, a, b *Provider) {
	for i := range 20 {
		ctx := ctxT(t, 20*time.Second)
		l, err := b.Listen(ctx, loDev(t, b))
		if err != nil {
			t.Fatal(err)
		}
		s, err := a.Connect(ctx, loDev(t, a), l.Handle())
		if err != nil {
			t.Fatal(err)
		}
		switch i % 6 {
		case 0:
			s.Abort(errTest)
		case 1:
			s.Close()
		case 2:
			r, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			r.Abort(errTest)
			s.Abort(errTest)
		case 3:
			if _, err := s.ISend(make([]byte, 1<<20), 1, nil); err != nil {
				t.Fatal(err)
			}
			s.Abort(errTest)
		case 4: // a hello the receiver refuses: both ends abort at once
			r, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.ISend(make([]byte, 64), 1, nil); err != nil {
				t.Fatal(err)
			}
			go r.Abort(errTest)
			s.Abort(errTest)
		case 5: // requests refused (a tag over the bits), then both ends abort
			r, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.ISend(make([]byte, 64), MaxUserTag+1, nil); err == nil {
				t.Fatal("a send with a tag over the user bits was taken")
			}
			if _, err := r.IRecv([][]byte{make([]byte, 64)}, []uint64{MaxUserTag + 1}, nil); err == nil {
				t.Fatal("a receive with a tag over the user bits was taken")
			}
			go r.Abort(errTest)
			s.Abort(errTest)
		}
		l.Close()
	}
	s, r := pair(t, a, b)
	want := pattern(make([]byte, 100<<10), 7)
	got := make([]byte, len(want))
	q, err := r.IRecv([][]byte{got}, []uint64{3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sq, err := s.ISend(want, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sq.Wait(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Wait(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("the next connection delivered other bytes")
	}
}
