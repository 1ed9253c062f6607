package multilink_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/multilink"
)

// eagerLink makes a fake link behave like a transport that completes sends
// on local buffering (tcp): Send copies the message and completes at once,
// and the copy waits in the fake network until the peer receives it.
// Failing the network (FailLink) drops every copy not yet delivered, whose
// sends had long succeeded. Once a buffered send has failed, later sends
// fail too, as a broken connection's do.
type eagerLink struct {
	fabric.Link
	mu  sync.Mutex
	err error // the first failure of a buffered send
}

func (l *eagerLink) Send(tag fabric.Tag, buf []byte) fabric.Request {
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil {
		return fabric.DoneReq(err)
	}
	r := l.Link.Send(tag, bytes.Clone(buf))
	go func() {
		<-r.Done()
		if err := r.Err(); err != nil {
			l.mu.Lock()
			if l.err == nil {
				l.err = err
			}
			l.mu.Unlock()
		}
	}()
	return fabric.DoneReq(nil)
}

// frozen is a clock that never moves: the planner keeps its even priors,
// so every large message is split over every link, the same way each run.
func frozen() time.Time { return time.Unix(1e9, 0) }

// newEagerRig joins ranks 0 and 1 by one fake network per entry of deliver,
// each wrapped in eagerLinks; deliver[i], when not nil, is link i's
// OnDeliver hook. Both sides report link failures to log (which may be
// nil).
func newEagerRig(t *testing.T, deliver []func(from, to, n int), mo multilink.Options, log *failureLog) *rig {
	t.Helper()
	r := &rig{}
	var la, lb []fabric.Link
	for _, d := range deliver {
		nw := fake.NewNetwork(2, fake.Options{OnDeliver: d})
		r.nets = append(r.nets, nw)
		la, lb = append(la, &eagerLink{Link: nw.Link(0, 1)}), append(lb, &eagerLink{Link: nw.Link(1, 0)})
	}
	ma, mb := mo, mo
	if log != nil {
		ma.OnLinkFailure, mb.OnLinkFailure = log.report("a"), log.report("b")
	}
	r.a = multilink.New(1, la, nil, ma)
	r.b = multilink.New(0, lb, nil, mb)
	t.Cleanup(func() { r.a.Close(); r.b.Close() })
	return r
}

// transfer sends n messages of size bytes from r.a to r.b, window at a
// time, and compares every received message with its source buffer. It
// gives up after 10s: a lost part shows as a receive that never completes.
func transfer(t *testing.T, r *rig, n, size, window int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Message i is src[i*7:][:size]: each differs from the others, and
	// making them costs one payload, not n (it counts under -race).
	src := linktest.Payload(uint64(size), size+7*n)
	msgs, got := make([][]byte, n), make([][]byte, n)
	sends, recvs := make([]fabric.Request, n), make([]fabric.Request, n)
	post := func(i int) {
		msgs[i], got[i] = src[i*7:][:size], make([]byte, size)
		recvs[i] = r.b.Recv(linktest.TagOf(i), got[i])
		sends[i] = r.a.Send(linktest.TagOf(i), msgs[i])
	}
	for i := range min(window, n) {
		post(i)
	}
	for i := range n {
		if err := fabric.WaitAll(ctx, recvs[i], sends[i]); err != nil {
			t.Fatalf("message %d of %d bytes: %v", i, size, err)
		}
		if !bytes.Equal(got[i], msgs[i]) {
			t.Fatalf("message %d of %d bytes: received bytes differ from the source buffer", i, size)
		}
		if i+window < n {
			post(i + window)
		}
	}
}

// TestEagerLinkFailsMidTransfer: over links whose sends complete on local
// buffering, a link that dies drops what it had buffered, parts whose
// sends had completed long before. Only acknowledgements tell the sender
// that they never arrived: every byte must still be received exactly, and
// each side must report the failure through OnLinkFailure.
func TestEagerLinkFailsMidTransfer(t *testing.T) {
	type kill struct {
		link  int // which link dies
		from  int // counting frames from rank 0 (parts) or 1 (acks)
		after int // when the after-th such frame is delivered
	}
	for _, tc := range []struct {
		name  string
		links int
		kills []kill
		size  int
	}{
		{"TwoLinks/FirstDiesOnPart", 2, []kill{{0, 0, 3}}, 1<<20 + 333},
		{"TwoLinks/SecondDiesOnPart", 2, []kill{{1, 0, 7}}, 4 << 20},
		{"TwoLinks/DiesOnAck", 2, []kill{{1, 1, 4}}, 1<<20 + 333},
		{"ThreeLinks/MiddleDiesOnPart", 3, []kill{{1, 0, 5}}, 3<<20 + 1},
		{"ThreeLinks/LastDiesOnAck", 3, []kill{{2, 1, 2}}, 2 << 20},
		{"ThreeLinks/TwoDie", 3, []kill{{0, 0, 2}, {2, 0, 9}}, 1<<20 + 333},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r *rig
			deliver := make([]func(from, to, n int), tc.links)
			fired := make([]atomic.Bool, len(tc.kills))
			for k, kl := range tc.kills {
				var frames atomic.Int64
				deliver[kl.link] = func(from, to, n int) {
					if from == kl.from && n == frameBytes && frames.Add(1) == int64(kl.after) {
						fired[k].Store(true)
						r.nets[kl.link].FailLink(0, 1)
					}
				}
			}
			log := newFailureLog()
			r = newEagerRig(t, deliver, multilink.Options{Now: frozen}, log)
			transfer(t, r, 12, tc.size, 3)
			var want []string
			for k, kl := range tc.kills {
				if !fired[k].Load() {
					t.Fatalf("link %d never carried frame %d from rank %d; the failure never fired", kl.link, kl.after, kl.from)
				}
				want = append(want, fmt.Sprintf("a:%d", kl.link), fmt.Sprintf("b:%d", kl.link))
			}
			got := log.await(t, len(want))
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("failures reported %v, want %v (each side once per dead link)", got, want)
			}
			transfer(t, r, 3, tc.size, 2) // and it carries on over the rest
		})
	}
}

// TestSendCompletesOnAck: a Send completes only once its parts are
// acknowledged, one small ack frame per part, even where every link
// completes sends at once; with NoAcks over links that complete sends on
// delivery no ack is sent.
func TestSendCompletesOnAck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		eager  bool
		noAcks bool
		size   int
		acks   bool // one ack per part, or none at all
	}{
		{"Eager/Empty", true, false, 0, true},
		{"Eager/Inline", true, false, 100, true},
		{"Eager/Split", true, false, 8<<20 + 5, true},
		{"Rendezvous/Split", false, false, 8<<20 + 5, true},
		{"Rendezvous/NoAcks/Inline", false, true, 100, false},
		{"Rendezvous/NoAcks/Split", false, true, 8<<20 + 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var parts, acks atomic.Int64 // frames from rank 0, from rank 1
			count := func(from, to, n int) {
				switch {
				case n != frameBytes:
				case from == 0:
					parts.Add(1)
				default:
					acks.Add(1)
				}
			}
			mo := multilink.Options{Now: frozen, NoAcks: tc.noAcks}
			deliver := []func(from, to, n int){count, count, count}
			var r *rig
			if tc.eager {
				r = newEagerRig(t, deliver, mo, nil)
			} else {
				r = newRig(t, []fake.Options{{OnDeliver: count}, {OnDeliver: count}, {OnDeliver: count}}, nil, mo)
			}
			msg := linktest.Payload(3, tc.size)
			got := make([]byte, tc.size)
			recv := r.b.Recv(linktest.TagOf(1), got)
			linktest.AwaitOK(t, r.a.Send(linktest.TagOf(1), msg), "send")
			// Read both counts once the send is done: its acks (if any)
			// were delivered before it completed.
			p, a := parts.Load(), acks.Load()
			linktest.AwaitOK(t, recv, "recv")
			if !bytes.Equal(got, msg) {
				t.Fatal("received bytes differ from the source buffer")
			}
			switch {
			case p < 1:
				t.Fatalf("%d part frames delivered when the send completed, want at least 1", p)
			case tc.acks && a != p:
				t.Fatalf("%d acks delivered for %d parts when the send completed, want one per part", a, p)
			case !tc.acks && a != 0:
				t.Fatalf("%d acks delivered with NoAcks, want none", a)
			}
		})
	}
}

// TestSendWaitedBeforeRecv: rank 1 sends a large message and posts the
// receive for rank 0's; rank 0 waits for its own send before it posts the
// receive for rank 1's. Rank 0's readers hold rank 1's parts until that
// receive is posted, and the acks rank 0's send needs come after them on
// the same links: the readers must stage the parts instead, or nothing
// moves.
func TestSendWaitedBeforeRecv(t *testing.T) {
	for _, tc := range []struct {
		name  string
		eager bool
	}{{"Rendezvous", false}, {"Eager", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var r *rig
			if tc.eager {
				r = newEagerRig(t, make([]func(from, to, n int), 2), multilink.Options{Now: frozen}, nil)
			} else {
				r = newRig(t, []fake.Options{{}, {}}, nil, multilink.Options{Now: frozen})
			}
			x, y := linktest.Payload(1, 2<<20+7), linktest.Payload(2, 3<<20+9)
			gotX, gotY := make([]byte, len(x)), make([]byte, len(y))
			recvX := r.b.Recv(linktest.TagOf(1), gotX)
			sendY := r.b.Send(linktest.TagOf(2), y)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.a.Send(linktest.TagOf(1), x).Wait(ctx); err != nil {
				t.Fatalf("rank 0's send, waited before its receive is posted: %v", err)
			}
			recvY := r.a.Recv(linktest.TagOf(2), gotY)
			if err := fabric.WaitAll(ctx, recvX, sendY, recvY); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(gotX, x) || !bytes.Equal(gotY, y) {
				t.Fatal("received bytes differ from the source buffers")
			}
		})
	}
}

// TestConformanceAcks runs the Link conformance suite over links that
// complete sends on local buffering (acknowledgements make the channel's
// sends complete on delivery), and over rendezvous links with NoAcks.
func TestConformanceAcks(t *testing.T) {
	t.Run("ThreeEager", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) (fabric.Link, fabric.Link) {
			r := newEagerRig(t, make([]func(from, to, n int), 3), multilink.Options{}, nil)
			return r.a, r.b
		})
	})
	t.Run("ThreeIdealNoAcks", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) (fabric.Link, fabric.Link) {
			r := newRig(t, []fake.Options{{}, {}, {}}, nil, multilink.Options{NoAcks: true})
			return r.a, r.b
		})
	})
}
