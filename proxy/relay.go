package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

// Stats counts what a proxy did (one call's, or the totals).
type Stats struct {
	NIC      string `json:"nic"`      // the proxy's own NIC, which sent Bytes
	Bytes    int64  `json:"bytes"`    // payload bytes sent on the NIC
	Messages int64  `json:"messages"` // network messages sent
	Relayed  int64  `json:"relayed"`  // of them, messages of another local rank
	Received int64  `json:"received"` // network messages received
	Receives int64  `json:"receives"` // receives (IRecv) posted
	Buffers  int64  `json:"buffers"`  // buffers in them (Buffers/Receives per receive)
	Gathered int64  `json:"gathered"` // of Relayed, messages the caller gathered here (GPU hand-off)
}

func (s *Stats) add(o *Stats) {
	for _, f := range [][2]*int64{{&s.Bytes, &o.Bytes}, {&s.Messages, &o.Messages}, {&s.Relayed, &o.Relayed},
		{&s.Received, &o.Received}, {&s.Receives, &o.Receives}, {&s.Buffers, &o.Buffers}, {&s.Gathered, &o.Gathered}} {
		atomic.AddInt64(f[0], atomic.LoadInt64(f[1]))
	}
}

func (s *Stats) snapshot() Stats {
	var o Stats
	o.add(s)
	return o
}

// String is the counters as one line.
func (s Stats) String() string {
	per := 0.0
	if s.Receives > 0 {
		per = float64(s.Buffers) / float64(s.Receives)
	}
	return fmt.Sprintf("nic=%s bytes=%d messages=%d relayed=%d received=%d receives=%d buffers_per_receive=%.2f gathered=%d",
		s.NIC, s.Bytes, s.Messages, s.Relayed, s.Received, s.Receives, per, s.Gathered)
}

func appendLen(b []byte, n int) []byte { return binary.LittleEndian.AppendUint64(b, uint64(n)) }

// staged is one chunk a local sender handed this relay (total, last,
// from: for a group message, its length, whether this is its last chunk,
// and the sender).
type staged struct {
	buf   *[]byte
	n     int
	flow  CreditKey
	total int
	last  bool
	from  int
}

// relay serves the local senders whose messages this rank carries: one
// reader per sender takes their lengths and chunks (in the order the
// sender handed them) into staging slots, each under a credit of its
// (sender, destination host) flow; one writer per destination sends the
// chunks of all its senders round by round (round k: chunk k of every
// sender that has one, ascending senders), tagged with the sender.
func (c *a2a) relay(local []int) {
	cfg := &c.p.cfg
	me := cfg.Rank
	c.st.NIC = c.p.NIC()
	// The maps are complete before any goroutine reads them.
	lens := map[int]map[int]int{}
	ready := map[int]chan struct{}{}
	queues := map[[2]int]chan staged{}
	dsts := map[int][]int{}
	for _, s := range local {
		ds := c.dstsVia(s, me)
		if len(ds) == 0 {
			continue
		}
		dsts[s] = ds
		lens[s] = map[int]int{}
		ready[s] = make(chan struct{})
		for _, d := range ds {
			queues[[2]int{s, d}] = make(chan staged, cfg.Credits)
		}
		switch {
		case s == me:
			for _, d := range ds {
				lens[s][d] = len(c.send[d])
			}
			close(ready[s])
		case c.gathered != nil:
			for _, d := range ds {
				b, ok := c.gathered[[2]int{s, d}]
				if !ok {
					c.fail(fmt.Errorf("rank %d relay: rank %d's message for rank %d was not gathered here: %w", me, s, d, errs.ErrMismatch))
					return
				}
				lens[s][d] = len(b)
			}
			close(ready[s])
		}
	}
	for _, s := range local {
		if ds := dsts[s]; len(ds) > 0 && s != me && c.gathered == nil {
			l, r := lens[s], ready[s]
			c.goWait(func() error { return c.read(s, ds, l, r, queues) })
		}
	}
	for d, h := range cfg.Hosts {
		if h == cfg.Hosts[me] {
			continue
		}
		var senders []int
		for _, s := range local {
			if cfg.Via(s, d) == me {
				senders = append(senders, s)
			}
		}
		if len(senders) > 0 {
			c.goWait(func() error { return c.write(d, senders, lens, ready, queues) })
		}
	}
}

func (c *a2a) read(s int, ds []int, lens map[int]int, ready chan struct{}, queues map[[2]int]chan staged) error {
	cfg := &c.p.cfg
	me := cfg.Rank
	sizes := make([]byte, 8*len(ds))
	if err := cfg.Local.Recv(s, localTag(tagSizes, c.seq, 0, 0), sizes).Wait(c.ctx); err != nil {
		return fmt.Errorf("rank %d relay: lengths from local rank %d: %w", me, s, err)
	}
	for i, d := range ds {
		lens[d] = int(binary.LittleEndian.Uint64(sizes[8*i:]))
	}
	close(ready)
	for _, d := range ds {
		flow := CreditKey{Sender: s, DstHost: cfg.Hosts[d]}
		for k := range c.p.chunks(lens[d]) {
			if err := c.p.credits.Acquire(c.ctx, flow); err != nil {
				return fmt.Errorf("rank %d relay: rank %d's data for rank %d: %w", me, s, d, err)
			}
			buf := c.p.stage.Get().(*[]byte)
			n := min(cfg.Chunk, lens[d]-k*cfg.Chunk)
			if err := cfg.Local.Recv(s, localTag(tagData, c.seq, d, k), (*buf)[:n]).Wait(c.ctx); err != nil {
				return fmt.Errorf("rank %d relay: rank %d's data for rank %d (chunk %d): %w", me, s, d, k, err)
			}
			select {
			case queues[[2]int{s, d}] <- staged{buf: buf, n: n, flow: flow}:
			case <-c.ctx.Done():
				return c.cause()
			}
		}
	}
	return nil
}

func (c *a2a) write(d int, senders []int, lens map[int]map[int]int, ready map[int]chan struct{}, queues map[[2]int]chan staged) error {
	cfg := &c.p.cfg
	me := cfg.Rank
	nch := map[int]int{}
	rounds := 0
	for _, s := range senders {
		select {
		case <-ready[s]:
		case <-c.ctx.Done():
			return c.cause()
		}
		nch[s] = c.p.chunks(lens[s][d])
		rounds = max(rounds, nch[s])
	}
	if rounds == 0 {
		return nil
	}
	sc, err := c.p.conns.to(c.ctx, d, connOwn)
	if err != nil {
		return fmt.Errorf("rank %d relay to rank %d on %s: %w", me, d, cfg.Hosts[d], err)
	}
	for k := range rounds {
		for _, s := range senders {
			if nch[s] <= k {
				continue
			}
			var b []byte
			var done func()
			switch {
			case s == me:
				b = c.p.chunk(c.send[d], k)
			case c.gathered != nil:
				b = c.p.chunk(c.gathered[[2]int{s, d}], k)
				atomic.AddInt64(&c.st.Gathered, 1)
			default:
				var st staged
				select {
				case st = <-queues[[2]int{s, d}]:
				case <-c.ctx.Done():
					return c.cause()
				}
				b = (*st.buf)[:st.n]
				done = func() { c.p.stage.Put(st.buf); c.p.credits.Release(st.flow) }
			}
			op := c.p.eng.Post(c.ctx, func() (net.Request, error) { return sc.ISend(b, uint64(s), nil) })
			atomic.AddInt64(&c.st.Messages, 1)
			atomic.AddInt64(&c.st.Bytes, int64(len(b)))
			if s != me {
				atomic.AddInt64(&c.st.Relayed, 1)
			}
			c.goWait(func() error {
				_, err := op.Wait(c.ctx)
				if err != nil {
					return fmt.Errorf("rank %d relay to rank %d on %s (rank %d's chunk %d) from %s: %w", me, d, cfg.Hosts[d], s, k, c.p.NIC(), err)
				}
				if done != nil {
					done()
				}
				return nil
			})
		}
	}
	return nil
}

// receive posts this rank's multi-receives: per relay that carries
// messages for it, per round, one IRecv for up to MaxRecvs of the relay's
// senders (ascending), each buffer tagged with its sender.
func (c *a2a) receive() {
	cfg := &c.p.cfg
	me := cfg.Rank
	byVia := map[int][]int{}
	for s, h := range cfg.Hosts {
		if h != cfg.Hosts[me] && len(c.recv[s]) > 0 {
			v := cfg.Via(s, me)
			byVia[v] = append(byVia[v], s)
		}
	}
	for v, senders := range byVia {
		c.goWait(func() error {
			rc, err := c.p.conns.from(c.ctx, own(v))
			if err != nil {
				return fmt.Errorf("rank %d: receive from relay rank %d on %s: %w", me, v, cfg.Hosts[v], err)
			}
			rounds := 0
			for _, s := range senders {
				rounds = max(rounds, c.p.chunks(len(c.recv[s])))
			}
			for k := range rounds {
				var members []int
				for _, s := range senders {
					if c.p.chunks(len(c.recv[s])) > k {
						members = append(members, s)
					}
				}
				for batch := range slices.Chunk(members, cfg.MaxRecvs) {
					c.postRecv(rc, v, k, batch)
				}
			}
			return nil
		})
	}
}

func (c *a2a) postRecv(rc net.RecvConn, v, k int, senders []int) {
	bufs := make([][]byte, len(senders))
	tags := make([]uint64, len(senders))
	for i, s := range senders {
		bufs[i], tags[i] = c.p.chunk(c.recv[s], k), uint64(s)
	}
	op := c.p.eng.Post(c.ctx, func() (net.Request, error) { return rc.IRecv(bufs, tags, nil) })
	atomic.AddInt64(&c.st.Receives, 1)
	atomic.AddInt64(&c.st.Buffers, int64(len(bufs)))
	me := c.p.cfg.Rank
	c.goWait(func() error {
		sizes, err := op.Wait(c.ctx)
		if err != nil {
			return fmt.Errorf("rank %d: receive from relay rank %d on %s (senders %v, chunk %d): %w", me, v, c.p.cfg.Hosts[v], senders, k, err)
		}
		for i, n := range sizes {
			if n != len(bufs[i]) {
				return fmt.Errorf("rank %d: rank %d's chunk %d via rank %d has %d bytes, want %d: %w", me, senders[i], k, v, n, len(bufs[i]), errs.ErrMismatch)
			}
		}
		atomic.AddInt64(&c.st.Received, int64(len(bufs)))
		return nil
	})
}

func (c *a2a) cause() error { return context.Cause(c.ctx) }
