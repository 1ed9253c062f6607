package collectives

// Ring allgather: n-1 steps of the ring pipeline (ring.go). Block b of
// recv is rank b's contribution. In step s rank r forwards block r-s (its
// own at s = 0, then the one it received in step s-1) and receives block
// r-s-1 straight into recv, so each block travels n-1 hops around the
// ring, chunk by chunk, and every link carries (n-1)/n of the result: the
// bandwidth optimum. No scratch: nothing is reduced.
//
// The caller has already put this rank's block in place.
func allGatherRing(c *call, recv Buffer, sendCount int) error {
	n, r := c.size, c.rank
	ce := c.chunkElems(sendCount)
	k := chunks(sendCount, ce)
	block := func(b, ch int) Buffer {
		return c.bytes(recv, chunkOf(span{mod(b, n) * sendCount, sendCount}, ch, ce))
	}
	return runRing(c, &ringPass{
		steps: n - 1, chunks: k, stride: k,
		slots:    ringSlots{use: func(int) bool { return false }},
		recvInto: func(s, ch int) Buffer { return block(r-s-1, ch) },
		sendBuf:  func(s, ch int) Buffer { return block(r-s, ch) },
		process:  func(int, int, Buffer) error { return nil },
	})
}
