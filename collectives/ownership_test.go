package collectives_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// ownerPeers wraps a rank's Peers and checks fabric.Link's ownership
// contract as the algorithms use it: a buffer posted for a receive is not
// read (sent from) or posted again until that receive is done, and a
// buffer being sent is not posted for a receive until that send is done.
// Real links rely on it: shm and tcp write a posted receive's buffer from
// their own goroutines (go test -race once caught the ring allreduce
// sending from a chunk whose allgather receive was already posted).
type ownerPeers struct {
	collectives.Peers
	mu      sync.Mutex
	pending []owned
	bad     []string
}

type owned struct {
	lo, hi uintptr
	send   bool
	req    fabric.Request
}

func (p *ownerPeers) check(send bool, b collectives.Buffer) {
	if b == nil || b.Len() == 0 {
		return
	}
	lo := b.(collectives.HostBuffer).Addr()
	hi := lo + uintptr(b.Len())
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.pending[:0]
	for _, o := range p.pending {
		select {
		case <-o.req.Done():
			continue
		default:
		}
		kept = append(kept, o)
		if lo < o.hi && o.lo < hi && (!send || !o.send) {
			p.bad = append(p.bad, fmt.Sprintf("rank %d: %s of %d bytes overlaps a pending %s", p.Rank(), verb(send), b.Len(), verb(o.send)))
		}
	}
	p.pending = kept
}

func verb(send bool) string {
	if send {
		return "send"
	}
	return "receive"
}

func (p *ownerPeers) note(send bool, b collectives.Buffer, r fabric.Request) fabric.Request {
	if b != nil && b.Len() > 0 {
		lo := b.(collectives.HostBuffer).Addr()
		p.mu.Lock()
		p.pending = append(p.pending, owned{lo: lo, hi: lo + uintptr(b.Len()), send: send, req: r})
		p.mu.Unlock()
	}
	return r
}

func (p *ownerPeers) Send(peer int, tag fabric.Tag, b collectives.Buffer) fabric.Request {
	p.check(true, b)
	return p.note(true, b, p.Peers.Send(peer, tag, b))
}

func (p *ownerPeers) Recv(peer int, tag fabric.Tag, b collectives.Buffer) fabric.Request {
	p.check(false, b)
	return p.note(false, b, p.Peers.Recv(peer, tag, b))
}

// TestBufferOwnership runs every collective, in and out of place, over
// links that deliver late (so receives stay pending), and fails on any
// transfer that touches a buffer another pending transfer owns.
func TestBufferOwnership(t *testing.T) {
	opt := fake.Options{Seed: 7, Latency: 50_000, Jitter: 50_000}
	for _, coll := range collNames {
		for _, n := range []int{2, 3, 5} {
			for _, algo := range []string{"ring", "rd"} {
				t.Run(fmt.Sprintf("%s/n=%d/%s", coll, n, algo), func(t *testing.T) {
					m := worldtest.FakeMesh(n, opt)
					w := &world{n: n, nw: m.Net, abort: m.Abort}
					peers := make([]*ownerPeers, n)
					for r := range n {
						peers[r] = &ownerPeers{Peers: collectives.NewLinkPeers(r, n, m.Links[r])}
						w.engines = append(w.engines, collectives.NewEngine(0xc0ffee, peers[r], collectives.HostMemory{}, sweepConfig(algo)))
					}
					for _, inPlace := range []bool{false, true} {
						for _, count := range []int{1, 7, 64, 300} {
							c := collCase{coll: coll, dt: dtype.Float32, op: dtype.Sum, count: count, inPlace: inPlace, seed: uint64(count)}
							if !runCase(t, w, c) {
								return
							}
						}
					}
					for _, p := range peers {
						for _, b := range p.bad {
							t.Error(b)
						}
					}
				})
			}
		}
	}
}
