package shm

import "sync/atomic"

// ring is one direction's single-producer/single-consumer byte ring in the
// shared segment. head and tail count bytes ever written and consumed; the
// producer owns head, the consumer owns tail, and each only reads the
// other's. Bytes in [tail, head) are readable, the rest of the ring is free.
// A side that waits sets its futex word to 1 and sleeps on it; the other
// side, after moving its counter, swaps the word to 0 and wakes it.
//
// acked counts the single-copy messages of this direction that the
// consumer has finished with (pulled, or dropped on a mismatch); it is the
// consumer's, and the producer sleeps on ackWait until it moves (cma.go).
type ring struct {
	buf                 []byte
	size                uint64
	head, tail          *atomic.Uint64
	dataWait, spaceWait *atomic.Uint32
	acked               *atomic.Uint64
	ackWait             *atomic.Uint32
}

// waitFunc blocks until ready() is true, sleeping on word; it returns an
// error when the link stops or the peer is lost first.
type waitFunc func(ready func() bool, word *atomic.Uint32) error

func (r *ring) copyIn(pos uint64, src []byte) {
	off := pos % r.size
	if n := copy(r.buf[off:], src); n < len(src) {
		copy(r.buf, src[n:])
	}
}

func (r *ring) copyOut(pos uint64, dst []byte) {
	off := pos % r.size
	if n := copy(dst, r.buf[off:]); n < len(dst) {
		copy(dst[n:], r.buf)
	}
}

// wake wakes the other side if it sleeps on w.
func wake(w *atomic.Uint32) {
	if w.Load() != 0 && w.Swap(0) != 0 {
		futexWake(w)
	}
}

// producer is the writing end of a ring. It publishes its head at least
// every chunk bytes, so a large message streams through a smaller ring while
// the consumer copies out behind it.
type producer struct {
	r     *ring
	head  uint64 // next byte to write
	pub   uint64 // head as last published
	tail  uint64 // consumer's tail as last seen
	chunk uint64
	wait  waitFunc
}

// write copies src into the ring, or when src is nil skips n bytes of
// padding, waiting for space as needed. It publishes whenever chunk bytes
// are pending and before it waits; the caller publishes at message end.
func (p *producer) write(src []byte, n uint64) error {
	for n > 0 {
		free := p.r.size - (p.head - p.tail)
		if free == 0 {
			if !p.hasSpace() {
				p.publish()
				if err := p.wait(p.hasSpace, p.r.spaceWait); err != nil {
					return err
				}
			}
			continue
		}
		k := min(n, free, p.chunk)
		if src != nil {
			p.r.copyIn(p.head, src[:k])
			src = src[k:]
		}
		p.head += k
		n -= k
		if p.head-p.pub >= p.chunk {
			p.publish()
		}
	}
	return nil
}

// hasRoom reports whether n bytes can be written without waiting.
func (p *producer) hasRoom(n uint64) bool {
	p.tail = p.r.tail.Load()
	return p.r.size-(p.head-p.tail) >= n
}

func (p *producer) hasSpace() bool {
	p.tail = p.r.tail.Load()
	return p.head-p.tail < p.r.size
}

// publish makes everything written so far visible to the consumer.
func (p *producer) publish() {
	if p.head == p.pub {
		return
	}
	p.pub = p.head
	p.r.head.Store(p.head)
	wake(p.r.dataWait)
}

// consumer is the reading end of a ring. It releases consumed space at
// least every chunk bytes.
type consumer struct {
	r     *ring
	tail  uint64 // next byte to read
	rel   uint64 // tail as last released
	head  uint64 // producer's head as last seen
	chunk uint64
	wait  waitFunc
}

// read copies n bytes out of the ring into dst (len(dst) == n), or when dst
// is nil discards them, waiting for data as needed.
func (c *consumer) read(dst []byte, n uint64) error {
	for n > 0 {
		avail := c.head - c.tail
		if avail == 0 {
			if !c.hasData() {
				c.release()
				if err := c.wait(c.hasData, c.r.dataWait); err != nil {
					return err
				}
			}
			continue
		}
		k := min(n, avail, c.chunk)
		if dst != nil {
			c.r.copyOut(c.tail, dst[:k])
			dst = dst[k:]
		}
		c.tail += k
		n -= k
		if c.tail-c.rel >= c.chunk {
			c.release()
		}
	}
	return nil
}

func (c *consumer) hasData() bool {
	c.head = c.r.head.Load()
	return c.head != c.tail
}

// release gives consumed space back to the producer.
func (c *consumer) release() {
	if c.tail == c.rel {
		return
	}
	c.rel = c.tail
	c.r.tail.Store(c.tail)
	wake(c.r.spaceWait)
}
