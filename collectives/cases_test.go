package collectives_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
)

// A case is one collective call, made on every rank, with inputs derived
// from its seed and the rank; it knows how to run itself on one rank and
// how to check every rank's output against a serial reference.
type collCase struct {
	coll    string
	dt      dtype.DType
	op      dtype.Op
	count   int
	inPlace bool
	root    int
	seed    uint64
}

func (c collCase) String() string {
	place := "out"
	if c.inPlace {
		place = "in"
	}
	return fmt.Sprintf("%s/%s/%s/count=%d/%s-place/root=%d/seed=%d", c.coll, c.dt, c.op, c.count, place, c.root, c.seed)
}

const garbage = 0xa5 // fills output buffers, so unwritten output shows

// inLen is the number of elements of rank r's input.
func (c collCase) inLen(n, r int) int {
	switch c.coll {
	case "reducescatter", "alltoall":
		return n * c.count
	case "broadcast":
		if r != c.root {
			return 0
		}
	}
	return c.count
}

// outLen is the number of elements of rank r's output.
func (c collCase) outLen(n, r int) int {
	switch c.coll {
	case "allgather", "alltoall":
		return n * c.count
	case "reduce":
		if r != c.root {
			return c.count // must stay untouched
		}
	}
	return c.count
}

func (c collCase) input(n, r int) []byte {
	b := make([]byte, c.inLen(n, r)*c.dt.Size())
	fill(b, c.dt, c.op, c.inLen(n, r), c.seed*1000+uint64(r))
	return b
}

// result is what one rank ends with: its output and its input buffer
// after the call (checked unchanged where it must be).
type result struct {
	out, in []byte
}

// exec runs the case on rank r.
func (c collCase) exec(ctx context.Context, e *collectives.Engine, n, r int) (result, error) {
	es := c.dt.Size()
	in := c.input(n, r)
	send := bytes.Clone(in)
	out := bytes.Repeat([]byte{garbage}, c.outLen(n, r)*es)
	H := func(b []byte) collectives.Buffer { return collectives.HostBuffer(b) }
	sameBuffer := c.seed%2 == 1 // for allgather/reducescatter: pass the whole buffer as the in-place alias
	var err error
	switch c.coll {
	case "allreduce":
		if c.inPlace {
			out, send = send, nil
			err = e.AllReduce(ctx, H(out), H(out), c.count, c.dt, c.op)
		} else {
			err = e.AllReduce(ctx, H(send), H(out), c.count, c.dt, c.op)
		}
	case "allgather":
		if c.inPlace {
			mine := out[r*c.count*es : (r+1)*c.count*es]
			copy(mine, in)
			s := H(mine)
			if sameBuffer {
				s = H(out)
			}
			send = nil
			err = e.AllGather(ctx, s, H(out), c.count, c.dt)
		} else {
			err = e.AllGather(ctx, H(send), H(out), c.count, c.dt)
		}
	case "reducescatter":
		if c.inPlace {
			mine := send[r*c.count*es : (r+1)*c.count*es]
			rv := H(mine)
			if sameBuffer {
				rv = H(send)
			}
			err = e.ReduceScatter(ctx, H(send), rv, c.count, c.dt, c.op)
			out = mine
		} else {
			err = e.ReduceScatter(ctx, H(send), H(out), c.count, c.dt, c.op)
		}
	case "broadcast":
		var s collectives.Buffer // nil on non-roots: not read
		if r == c.root {
			s = H(send)
			if c.inPlace {
				out, send = send, nil
				s = H(out)
			}
		}
		err = e.Broadcast(ctx, s, H(out), c.count, c.dt, c.root)
	case "reduce":
		if c.inPlace && r == c.root {
			out, send = send, nil
			err = e.Reduce(ctx, H(out), H(out), c.count, c.dt, c.op, c.root)
		} else {
			err = e.Reduce(ctx, H(send), H(out), c.count, c.dt, c.op, c.root)
		}
	case "alltoall":
		if c.inPlace {
			out, send = send, nil
			err = e.AllToAll(ctx, H(out), H(out), c.count, c.dt)
		} else {
			err = e.AllToAll(ctx, H(send), H(out), c.count, c.dt)
		}
	default:
		panic(c.coll)
	}
	return result{out: out, in: send}, err
}

// check verifies every rank's result against the reference computed from
// all ranks' inputs (regenerated here, independently of the run).
func (c collCase) check(n int, res []result) error {
	es := c.dt.Size()
	inputs := make([][]byte, n)
	for r := range n {
		inputs[r] = c.input(n, r)
	}
	block := func(b []byte, i int) []byte { return b[i*c.count*es : (i+1)*c.count*es] }
	for r := range n {
		in := res[r].in
		if in == nil {
			continue
		}
		if c.coll == "reducescatter" && c.inPlace { // only this rank's block may change
			for q := range n {
				if q != r && !bytes.Equal(block(in, q), block(inputs[r], q)) {
					return fmt.Errorf("rank %d: in-place reducescatter modified block %d of send", r, q)
				}
			}
			continue
		}
		if !bytes.Equal(in, inputs[r]) {
			return fmt.Errorf("rank %d: the send buffer was modified", r)
		}
	}
	reduced := func(r int, got []byte, blk int) error {
		ins := make([][]byte, n)
		for q := range n {
			ins[q] = inputs[q]
			if blk >= 0 {
				ins[q] = block(inputs[q], blk)
			}
		}
		for i := range c.count {
			if err := checkReduced(got, i, ins, i, c.dt, c.op); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
		}
		return nil
	}
	for r := range n {
		got := res[r].out
		var err error
		switch c.coll {
		case "allreduce":
			err = reduced(r, got, -1)
			if err == nil && !bytes.Equal(got, res[0].out) {
				err = fmt.Errorf("rank %d's result differs from rank 0's (allreduce must be bit-identical on all ranks)", r)
			}
		case "reducescatter":
			err = reduced(r, got, r)
		case "reduce":
			if r == c.root {
				err = reduced(r, got, -1)
			} else if !bytes.Equal(got, bytes.Repeat([]byte{garbage}, len(got))) {
				err = fmt.Errorf("rank %d: reduce wrote recv on a non-root rank", r)
			}
		case "allgather":
			for q := range n {
				if !bytes.Equal(block(got, q), inputs[q]) {
					err = fmt.Errorf("rank %d: block %d is not rank %d's input", r, q, q)
					break
				}
			}
		case "broadcast":
			if !bytes.Equal(got, inputs[c.root]) {
				err = fmt.Errorf("rank %d: recv is not root %d's input", r, c.root)
			}
		case "alltoall":
			for q := range n {
				if !bytes.Equal(block(got, q), block(inputs[q], r)) {
					err = fmt.Errorf("rank %d: block %d is not block %d of rank %d's input", r, q, r, q)
					break
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
