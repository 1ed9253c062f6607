package collectives

import "math/bits"

// barrier is a dissemination barrier: in round k every rank sends an empty
// message to r+2^k and waits for one from r-2^k. After ceil(log2 n) rounds
// every rank has heard, directly or through others, from every rank, so
// none leaves before all have entered.
func (c *call) barrier() error {
	n, r := c.size, c.rank
	for k := range bits.Len(uint(n - 1)) {
		d := 1 << k
		s := c.send(mod(r+d, n), uint64(k), nil)
		if err := c.wait(c.recv(mod(r-d, n), uint64(k), nil)); err != nil {
			return err
		}
		if err := c.wait(s); err != nil {
			return err
		}
	}
	return nil
}

// guardStep is the step of guard messages.
const guardStep = mask40

// guard posts one empty message to the right neighbour and one from the
// left, carrying the header, without waiting for them. Collectives in
// which some rank would otherwise only send (broadcast: the root; reduce:
// the leaves) post it first, so that every rank receives in every
// collective: a mismatch is then caught by the call itself, on every rank
// next to the odd one, and two ranks that both believe they only send
// (two roots) cannot wait on each other forever. It costs one empty
// message per rank, overlapped with the data.
func (c *call) guard() {
	c.send(mod(c.rank+1, c.size), guardStep, nil)
	c.recv(mod(c.rank-1, c.size), guardStep, nil)
}

// headerRing is what a collective with count 0 does: only the guard. No
// data moves, but every rank checks its left neighbour's call, so a rank
// that called with another count, dtype, op, root or collective is still
// caught.
func (c *call) headerRing() error {
	c.guard()
	return c.waitAll()
}
