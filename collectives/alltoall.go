package collectives

// Pairwise all-to-all. In step s (0 <= s < n) rank r exchanges blocks with
// rank p = s-r mod n, and p's partner in the same step is r: every step is
// a perfect matching (plus ranks paired with themselves, which copy
// locally), so each rank talks to one peer at a time and no link carries
// more than one block each way. Each exchange is cut into chunks, and up
// to `window` chunk exchanges are in flight across step boundaries, which
// keeps every link busy without flooding any.
//
// In place, the block for p and the block from p are the same memory: each
// outgoing chunk is first copied to scratch (one of `window` chunks, reused
// once its exchange finished) and the incoming chunk lands in its place.
func allToAllPairwise(c *call, send, recv Buffer, count int, inPlace bool) error {
	n, r := c.size, c.rank
	ce := c.chunkElems(count)
	k := chunks(count, ce)
	blk := func(b Buffer, peer, ch int) Buffer {
		sp := chunkOf(span{0, count}, ch, ce)
		sp.off += peer * count
		return c.bytes(b, sp)
	}
	var slots []Buffer
	if inPlace {
		var err error
		if slots, err = c.allocN(min(window, k*(n-1)), ce*c.es); err != nil {
			return err
		}
	}
	type exchange struct{ s, r *xfer }
	var q []exchange
	idx := 0
	for st := range n {
		p := mod(st-r, n)
		if p == r {
			continue // the own block is copied once the exchanges are posted (below)
		}
		for ch := range k {
			if len(q) == window { // the oldest exchange must finish (and free its scratch)
				if err := c.wait(q[0].s); err != nil {
					return err
				}
				if err := c.wait(q[0].r); err != nil {
					return err
				}
				q = q[1:]
			}
			in := blk(recv, p, ch)
			out := blk(send, p, ch)
			if inPlace {
				out = slots[idx%len(slots)].Slice(0, in.Len())
				if err := c.copyBuf(out, in); err != nil {
					return err
				}
			}
			q = append(q, exchange{c.send(p, uint64(ch), out), c.recv(p, uint64(ch), in)})
			idx++
		}
	}
	// The own block: copied while the links move the posted exchanges
	// (single-copy links pull in their own goroutines), not before them.
	if !inPlace {
		if err := c.copyBuf(c.bytes(recv, span{r * count, count}), c.bytes(send, span{r * count, count})); err != nil {
			return err
		}
	}
	return c.waitAll()
}
