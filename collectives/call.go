package collectives

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
)

// window is how many transfers an algorithm keeps in flight per direction,
// and depth how many scratch chunks it receives into: enough for the next
// chunk's transfer to overlap the current chunk's reduction, few enough to
// keep scratch at a few chunks per operation.
const (
	window = 8
	depth  = 4
)

// call is the state of one collective on one rank: its header, the
// transfers it posted and has not yet seen finish, and its scratch.
//
// Waiting is the heart of "nothing hangs": whatever an algorithm waits
// for, call watches every transfer it has in flight, so the first failure
// anywhere (a dead peer on the other side of the ring, a tag mismatch)
// ends the collective at once instead of after some unrelated wait, and
// the context bounds all of it.
type call struct {
	e          *Engine
	ctx        context.Context
	h          header
	rank, size int
	es         int // element size in bytes (1 when the kind has no dtype)

	pend    []*xfer
	scratch []Buffer
	cases   []reflect.SelectCase
}

// xfer is one posted send or receive.
type xfer struct {
	req  fabric.Request
	peer int
	send bool
	done bool // seen complete (successfully: a failure ends the call)
}

func (c *call) tag(step uint64) fabric.Tag { return c.h.tag(c.e.comm, step) }

// send posts b to peer with the call's header and step.
func (c *call) send(peer int, step uint64, b Buffer) *xfer {
	return c.post(&xfer{req: c.e.p.Send(peer, c.tag(step), b), peer: peer, send: true})
}

// recv posts b for the next message from peer, expecting the call's header
// and step.
func (c *call) recv(peer int, step uint64, b Buffer) *xfer {
	return c.post(&xfer{req: c.e.p.Recv(peer, c.tag(step), b), peer: peer})
}

func (c *call) post(x *xfer) *xfer {
	c.pend = append(c.pend, x)
	return x
}

// poll notes every finished transfer without blocking and returns the
// first failure.
func (c *call) poll() error {
	kept := c.pend[:0]
	var first error
	for _, x := range c.pend {
		select {
		case <-x.req.Done():
			if err := x.req.Err(); err != nil {
				if first == nil {
					first = c.failure(x, err)
				}
				kept = append(kept, x) // still referenced by the link's error path
				continue
			}
			x.done = true
		default:
			kept = append(kept, x)
		}
	}
	clear(c.pend[len(kept):])
	c.pend = kept
	return first
}

// waitAny blocks until at least one of targets has finished successfully,
// any transfer of the call fails, or the context ends. Targets that are
// nil or already done satisfy it at once, and so does an empty list.
func (c *call) waitAny(targets ...*xfer) error {
	if len(targets) == 0 {
		return c.poll()
	}
	for {
		if err := c.poll(); err != nil {
			return err
		}
		for _, t := range targets {
			if t == nil || t.done {
				return nil
			}
		}
		if err := c.block(); err != nil {
			return err
		}
	}
}

// wait blocks until x has finished (see waitAny).
func (c *call) wait(x *xfer) error { return c.waitAny(x) }

// waitAll blocks until every transfer of the call has finished.
func (c *call) waitAll() error {
	for {
		if err := c.poll(); err != nil {
			return err
		}
		if len(c.pend) == 0 {
			return nil
		}
		if err := c.block(); err != nil {
			return err
		}
	}
}

// block waits until some pending transfer finishes or the context ends.
func (c *call) block() error {
	switch len(c.pend) {
	case 0:
		return nil
	case 1:
		select {
		case <-c.pend[0].req.Done():
			return nil
		case <-c.ctx.Done():
			return c.ctxErr()
		}
	}
	c.cases = append(c.cases[:0], reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.ctx.Done())})
	for _, x := range c.pend {
		c.cases = append(c.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(x.req.Done())})
	}
	i, _, _ := reflect.Select(c.cases)
	if i == 0 {
		return c.ctxErr()
	}
	return nil
}

// ctxErr says what the call was still waiting for when its context ended.
func (c *call) ctxErr() error {
	var what []string
	seen := map[string]int{}
	for _, x := range c.pend {
		d := x.String()
		if seen[d] == 0 {
			what = append(what, d)
		}
		seen[d]++
	}
	for i, d := range what {
		if k := seen[d]; k > 1 {
			what[i] = fmt.Sprintf("%s (%d messages)", d, k)
		}
	}
	return fmt.Errorf("waiting for %s: %w", strings.Join(what, ", "), fabric.CtxErr(c.ctx))
}

func (x *xfer) String() string {
	if x.send {
		return fmt.Sprintf("send to rank %d", x.peer)
	}
	return fmt.Sprintf("recv from rank %d", x.peer)
}

// failure wraps a transfer's error, decoding tag mismatches.
func (c *call) failure(x *xfer, err error) error {
	if tm, ok := fabric.AsTagMismatch(err); ok {
		return mismatch(c.rank, x.peer, tm)
	}
	return fmt.Errorf("%s: %w", x, err)
}

// alloc returns n bytes of scratch, freed when the call ends.
func (c *call) alloc(n int) (Buffer, error) {
	b, err := c.e.m.Alloc(n)
	if err != nil {
		return nil, fmt.Errorf("scratch of %d bytes: %w", n, err)
	}
	c.scratch = append(c.scratch, b)
	return b, nil
}

// allocN returns k scratch buffers of n bytes each.
func (c *call) allocN(k, n int) ([]Buffer, error) {
	bs := make([]Buffer, k)
	for i := range bs {
		var err error
		if bs[i], err = c.alloc(n); err != nil {
			return nil, err
		}
	}
	return bs, nil
}

// release frees the scratch, unless a transfer that may still use it is
// pending (after a failure: the links are aborted by the runtime, and host
// scratch is then collected; device scratch goes with the communicator).
func (c *call) release() {
	if len(c.pend) > 0 {
		return
	}
	for _, b := range c.scratch {
		c.e.m.Free(b)
	}
	c.scratch = nil
}

// Memory helpers that name what failed.

func (c *call) copyBuf(dst, src Buffer) error {
	if dst.Len() == 0 {
		return nil
	}
	if err := c.e.m.Copy(dst, src); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	return nil
}

func (c *call) reduce(dst, src Buffer) error {
	if dst.Len() == 0 {
		return nil
	}
	if err := c.e.m.Reduce(dst, src, c.h.dt, c.h.op); err != nil {
		return fmt.Errorf("reduce: %w", err)
	}
	return nil
}

func (c *call) finish(dst Buffer) error {
	if dst.Len() == 0 || c.h.op != dtype.Avg {
		return nil
	}
	if err := c.e.m.Finish(dst, c.h.dt, c.h.op, c.size); err != nil {
		return fmt.Errorf("finish %s: %w", c.h.op, err)
	}
	return nil
}

// mod is the non-negative remainder, for ring arithmetic.
func mod(a, n int) int { return ((a % n) + n) % n }

// span is a range of elements.
type span struct{ off, n int }

// split divides count elements into parts spans that differ in length by
// at most one (the first count%parts get the extra element).
func split(count, parts int) []span {
	s := make([]span, parts)
	base, extra := count/parts, count%parts
	off := 0
	for i := range s {
		n := base
		if i < extra {
			n++
		}
		s[i] = span{off, n}
		off += n
	}
	return s
}

// chunkOf is chunk ch (of ce elements) of a span; chunks past the end are
// empty.
func chunkOf(sp span, ch, ce int) span {
	lo := min(ch*ce, sp.n)
	hi := min(lo+ce, sp.n)
	return span{sp.off + lo, hi - lo}
}

// chunkElems is the chunk size in elements for data whose longest piece
// is longest elements: Config's chunk, but no more than needed, so small
// messages do not allocate chunk-sized scratch.
func (c *call) chunkElems(longest int) int {
	return max(1, min(c.e.cfg.chunkElems(c.es), longest))
}

// chunks is how many chunks of ce elements cover n elements (at least 1).
func chunks(n, ce int) int { return max(1, (n+ce-1)/ce) }

// bytes returns the part of b holding the elements of sp.
func (c *call) bytes(b Buffer, sp span) Buffer { return b.Slice(sp.off*c.es, sp.n*c.es) }

// fifo bounds the transfers an algorithm keeps in flight: push waits for
// the oldest once more than window are queued.
type fifo []*xfer

func (q *fifo) push(c *call, x *xfer) error {
	*q = append(*q, x)
	for len(*q) > window {
		if err := c.wait((*q)[0]); err != nil {
			return err
		}
		(*q)[0] = nil
		*q = (*q)[1:]
	}
	return nil
}
