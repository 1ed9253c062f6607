package collectives

// Ring allgather: n-1 steps of the ring pipeline (ring.go). Block b of
// recv is rank b's contribution. In step s rank r forwards block r-s (its
// own at s = 0, then the one it received in step s-1) and receives block
// r-s-1 straight into recv, so each block travels n-1 hops around the
// ring, chunk by chunk, and every link carries (n-1)/n of the result: the
// bandwidth optimum. No scratch: nothing is reduced.
//
// With several rings (Config.Rings) each block is split into one part per
// ring, and part l of every block travels ring l, blocks numbered by the
// rank at each position of that ring.
//
// With own nil the caller has already put this rank's block in place;
// otherwise own is that block (the send buffer, out of place): step 0
// sends from it, so the copy into recv may run meanwhile.
func allGatherRing(c *call, recv, own Buffer, sendCount int) error {
	n := c.size
	rings := c.rings()
	parts := split(sendCount, len(rings))
	ce := c.chunkElems(parts[0].n) // part 0 is the longest
	k := chunks(parts[0].n, ce)
	lanes := make([]ringLane, len(rings))
	for l, ring := range rings {
		part, r := parts[l], ringPos(ring, c.rank)
		block := func(pos, ch int) Buffer {
			sp := chunkOf(part, ch, ce)
			sp.off += ring[mod(pos, n)] * sendCount
			return c.bytes(recv, sp)
		}
		lanes[l] = laneOn(c, ring, &ringPass{
			steps: n - 1, chunks: k, stride: k, stepBase: l * (n - 1) * k,
			slots:    ringSlots{use: func(int) bool { return false }},
			recvInto: func(s, ch int) Buffer { return block(r-s-1, ch) },
			sendBuf: func(s, ch int) Buffer {
				if s == 0 && own != nil {
					return c.bytes(own, chunkOf(part, ch, ce))
				}
				return block(r-s, ch)
			},
			process: func(int, int, Buffer) error { return nil },
		})
	}
	return runRings(c, lanes)
}
