package collectives

import "math/bits"

// Broadcast, two ways. Positions are relative to the root: v = r-root mod
// n, so the root is position 0.
//
// Chain (large messages): position v receives from v-1 and forwards to
// v+1, chunk by chunk. A chunk is forwarded as soon as it has arrived, so
// after a fill of n-1 chunk-hops every link streams at full bandwidth and
// the time is about size/bandwidth + (n-1)·chunk/bandwidth, whatever n.
// Chunks land straight in recv and are forwarded from there: no scratch.
//
// Binomial tree (small messages): position v receives from v minus its
// lowest set bit and sends to v+2^k for every 2^k below that bit, so the
// data reaches everyone in ceil(log2 n) rounds instead of n-1.

// broadcastChain runs the chain; recv already holds the data on the root.
func broadcastChain(c *call, recv Buffer, count int) error {
	n, r, root := c.size, c.rank, c.h.root
	v := mod(r-root, n)
	next, prev := mod(r+1, n), mod(r-1, n)
	ce := c.chunkElems(count)
	k := chunks(count, ce)
	piece := func(ch int) Buffer { return c.bytes(recv, chunkOf(span{0, count}, ch, ce)) }
	last := v == n-1
	recvs := make([]*xfer, k)
	sends := make([]*xfer, k)
	nextRecv, got, nextSend, sendsDone := 0, 0, 0, 0
	if v == 0 {
		nextRecv, got = k, k
	}
	for {
		if err := c.poll(); err != nil {
			return err
		}
		for sendsDone < nextSend && sends[sendsDone].done {
			sendsDone++
		}
		for got < nextRecv && recvs[got].done {
			got++
		}
		for nextRecv < k && nextRecv-got < window {
			recvs[nextRecv] = c.recv(prev, uint64(nextRecv), piece(nextRecv))
			nextRecv++
		}
		for !last && nextSend < got && nextSend-sendsDone < window {
			sends[nextSend] = c.send(next, uint64(nextSend), piece(nextSend))
			nextSend++
		}
		if got == k && (last || nextSend == k) {
			return c.waitAll()
		}
		var targets []*xfer
		if got < k {
			targets = append(targets, recvs[got])
		}
		if !last && nextSend < k && nextSend-sendsDone >= window {
			targets = append(targets, sends[sendsDone])
		}
		if err := c.waitAny(targets...); err != nil {
			return err
		}
	}
}

// treeLinks returns position v's parent (-1 for the root) and children in
// a binomial tree of n positions, farthest child first.
func treeLinks(v, n int) (parent int, children []int) {
	low := 1 << bits.Len(uint(n)) // the root "owns" every bit
	parent = -1
	if v > 0 {
		low = v & -v
		parent = v - low
	}
	for d := low >> 1; d > 0; d >>= 1 {
		if v+d < n {
			children = append(children, v+d)
		}
	}
	return parent, children
}

// broadcastTree runs the binomial tree piece by piece; recv already holds
// the data on the root.
func broadcastTree(c *call, recv Buffer, count int) error {
	n, r, root := c.size, c.rank, c.h.root
	parent, children := treeLinks(mod(r-root, n), n)
	ce := c.chunkElems(count)
	var inFlight fifo
	for p := range chunks(count, ce) {
		buf := c.bytes(recv, chunkOf(span{0, count}, p, ce))
		if parent >= 0 {
			if err := c.wait(c.recv(mod(parent+root, n), uint64(p), buf)); err != nil {
				return err
			}
		}
		for _, ch := range children {
			if err := inFlight.push(c, c.send(mod(ch+root, n), uint64(p), buf)); err != nil {
				return err
			}
		}
	}
	return c.waitAll()
}
