package collectives

import "context"

// operands are a collective's buffers once checked, cut to the bytes the
// call uses.
type operands struct {
	send, recv Buffer
	// from and to: what a single rank copies (and finishes) for the whole
	// collective, e.g. send into recv, or for AllGather send into this
	// rank's slot of recv.
	from, to Buffer
	inPlace  bool // from and to are the same memory
}

// local copies from into to unless in place, and finishes to when the
// collective has an op.
func (o operands) local(c *call) error {
	if !o.inPlace {
		if err := c.copyBuf(o.to, o.from); err != nil {
			return err
		}
	}
	if c.h.op != noField {
		return c.finish(o.to)
	}
	return nil
}

// collective checks a call's arguments and buffers (bufs, given the
// bytes of one block), picks its algorithm and runs it: on one rank the
// local copy, for count 0 the header exchange, else body with small
// below Config.Threshold bytes and large at or above.
func (e *Engine) collective(ctx context.Context, h header, small, large algo, bufs func(n int) (operands, error), body func(c *call, o operands) error) error {
	if err := e.checkCommon(h, int(h.count)); err != nil {
		return err
	}
	n := int(h.count) * h.dt.Size()
	o, err := bufs(n)
	if err != nil {
		return err
	}
	h.algo = e.pick(h.count == 0, large)
	if h.algo == large && e.cfg.latency(n) {
		h.algo = small
	}
	return e.run(ctx, h, func(c *call) error {
		switch h.algo {
		case algoLocal:
			return o.local(c)
		case algoHeader:
			return c.headerRing()
		}
		return body(c, o)
	})
}

// pick returns the algorithm for a call: local on one rank, the header
// exchange for count 0, else alg.
func (e *Engine) pick(zero bool, alg algo) algo {
	switch {
	case e.sz == 1:
		return algoLocal
	case zero:
		return algoHeader
	}
	return alg
}

// sameSize checks send and recv of blocks blocks each: the same memory
// (in place) or apart.
func (e *Engine) sameSize(h header, send, recv Buffer, blocks int) func(n int) (operands, error) {
	return func(n int) (operands, error) {
		send, err := e.need(h, send, n*blocks, "send")
		if err != nil {
			return operands{}, err
		}
		if recv, err = e.need(h, recv, n*blocks, "recv"); err != nil {
			return operands{}, err
		}
		inPlace, err := e.sameOrApart(h, send, recv)
		return operands{send: send, recv: recv, from: send, to: recv, inPlace: inPlace}, err
	}
}

// rooted checks the buffers of a collective with a root: every rank's
// (named everyRank: "send" or "recv") and on root the other one too, which
// must be the same memory (in place) or apart. The local copy is send
// into recv.
func (e *Engine) rooted(h header, send, recv Buffer, everyRank string) func(n int) (operands, error) {
	return func(n int) (operands, error) {
		send, recv := send, recv
		all, other, otherName := &send, &recv, "recv"
		if everyRank == "recv" {
			all, other, otherName = &recv, &send, "send"
		}
		var err error
		if *all, err = e.need(h, *all, n, everyRank); err != nil {
			return operands{}, err
		}
		inPlace := false
		if e.rank == h.root {
			if *other, err = e.need(h, *other, n, otherName); err != nil {
				return operands{}, err
			}
			if inPlace, err = e.sameOrApart(h, send, recv); err != nil {
				return operands{}, err
			}
		}
		return operands{send: send, recv: recv, from: send, to: recv, inPlace: inPlace}, nil
	}
}

// needSlot checks whole (Size() blocks of n bytes) and part (n bytes). In
// place: part is whole's block of this rank (mine), or whole itself, which
// then stands for that block. part overlapping whole any other way is an
// argument error naming the block a what.
func (e *Engine) needSlot(h header, whole, part Buffer, n int, wholeName, partName, what string) (Buffer, Buffer, Buffer, bool, error) {
	whole, err := e.need(h, whole, n*e.sz, wholeName)
	if err != nil {
		return nil, nil, nil, false, err
	}
	mine := whole.Slice(e.rank*n, n)
	if samePrefix(part, whole) {
		return whole, mine, mine, true, nil
	}
	if part, err = e.need(h, part, n, partName); err != nil {
		return nil, nil, nil, false, err
	}
	inPlace := sameMemory(part, mine)
	if !inPlace && overlap(part, whole) {
		return nil, nil, nil, false, e.argErr(h, "%s overlaps %s without being this rank's %s of it", partName, wholeName, what)
	}
	return whole, mine, part, inPlace, nil
}

// sameOrApart reports whether send and recv are the same memory; sharing
// bytes any other way is an argument error.
func (e *Engine) sameOrApart(h header, send, recv Buffer) (bool, error) {
	inPlace := sameMemory(send, recv)
	if !inPlace && overlap(send, recv) {
		return false, e.argErr(h, "send and recv overlap without being the same memory")
	}
	return inPlace, nil
}
