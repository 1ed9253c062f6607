package collectives

// inPlaceColumn is how many chunks of an in-place reduce-scatter are
// accumulated in scratch at a time.
const inPlaceColumn = 8

// Ring reduce-scatter: n-1 steps of the ring pipeline (ring.go). Block b
// of send is every rank's contribution to rank b's result. In step s rank
// r sends its running partial sum of block r-s-1 and receives the left
// neighbour's partial of block r-s-2, adds its own contribution and keeps
// it for the next step; the partial of block r completes at rank r in the
// last step, since block r's partial starts at rank r+1 and travels n-1
// hops. Every link carries (n-1)/n of the data.
//
// Where the running partial lives: the partial received in step s is sent
// on in step s+1, and the one received in step s+1 may overwrite it only
// once that send has finished (waitSend). Out of place the partial lives in
// recv, which is free until the last step writes the result. In place recv
// is this rank's own block of send, still needed by the last step, so the
// partial lives in scratch, inPlaceColumn chunks of each block at a time
// (one ring pass per column), which bounds scratch to a few chunks.
//
// With several rings (Config.Rings) each block is split into one part per
// ring and part l of every block is reduced along ring l, blocks numbered
// by the rank at each position of that ring, all rings at once.
func reduceScatterRing(c *call, send, recv Buffer, rc int, inPlace bool) error {
	n := c.size
	rings := c.rings()
	parts := split(rc, len(rings))
	ce := c.chunkElems(parts[0].n) // part 0 is the longest
	k := chunks(parts[0].n, ce)
	cols := k
	var tmp Buffer
	if inPlace && n > 2 {
		cols = min(k, inPlaceColumn)
		var err error
		if tmp, err = c.alloc(len(rings) * cols * ce * c.es); err != nil {
			return err
		}
	}
	for c0 := 0; c0 < k; c0 += cols {
		lanes := make([]ringLane, len(rings))
		for l, ring := range rings {
			var acc Buffer
			if tmp != nil {
				acc = tmp.Slice(l*cols*ce*c.es, cols*ce*c.es)
			}
			p := reduceScatterLane(c, send, recv, rc, parts[l], ring, ce, c0, min(cols, k-c0), acc, inPlace)
			p.stepBase, p.stride = l*(n-1)*k+c0, k
			lanes[l] = laneOn(c, ring, p)
		}
		if err := runRings(c, lanes); err != nil {
			return err
		}
	}
	return nil
}

// reduceScatterLane is the pass of chunks c0..c0+cols-1 of part (elements
// of each block) over ring, this rank at position r on it; tmp, when not
// nil, holds the running partials of those chunks (in place).
func reduceScatterLane(c *call, send, recv Buffer, rc int, part span, ring []int, ce, c0, cols int, tmp Buffer, inPlace bool) *ringPass {
	n, r := c.size, ringPos(ring, c.rank)
	sub := func(ch int) span { return chunkOf(part, ch, ce) }
	block := func(pos, ch int) Buffer {
		sp := sub(ch)
		sp.off += ring[mod(pos, n)] * rc
		return c.bytes(send, sp)
	}
	out := func(ch int) Buffer { return c.bytes(recv, sub(ch)) }
	acc := func(ch int) Buffer {
		if tmp == nil {
			return out(ch)
		}
		return tmp.Slice((ch-c0)*ce*c.es, sub(ch).n*c.es)
	}
	return &ringPass{
		steps: n - 1, chunks: cols,
		slots: ringSlots{n: depth, bytes: ce * c.es,
			use:     func(int) bool { return true },
			recvLen: func(_, ch int) int { return sub(c0+ch).n * c.es }},
		sendBuf: func(s, ch int) Buffer {
			if s == 0 {
				return block(r-1, c0+ch)
			}
			return acc(c0 + ch)
		},
		process: func(s, ch int, slot Buffer) error {
			g := c0 + ch
			if s < n-2 {
				dst := acc(g)
				if err := c.copyBuf(dst, block(r-s-2, g)); err != nil {
					return err
				}
				return c.reduce(dst, slot)
			}
			dst := out(g)
			if !inPlace {
				if err := c.copyBuf(dst, block(r, g)); err != nil {
					return err
				}
			}
			if err := c.reduce(dst, slot); err != nil {
				return err
			}
			return c.finish(dst)
		},
		waitSend: func(s int) bool { return s >= 1 },
	}
}
