package collectives

import "math/bits"

// Recursive-doubling allreduce, the latency-optimised path for small
// messages: log2(n) rounds instead of the ring's 2(n-1), at the price of
// sending the whole message every round.
//
// With p the largest power of two <= n, the n-p "extra" ranks first fold
// their data into a partner (rank r+p into rank r), the p remaining ranks
// run recursive doubling (round k: exchange everything with rank r^2^k and
// reduce), and the partners hand the result back to the extra ranks.
// Within a round both partners compute a op b and b op a, which are equal
// (IEEE +, * and min/max are commutative), so every rank ends with
// bit-identical results.
//
// Data is processed in pieces of Config.ChunkBytes (bounding scratch to
// one piece); pieces run one after the other, since this path is meant for
// messages that fit in one.
func allReduceRD(c *call, send, recv Buffer, count int, inPlace bool) error {
	n, r := c.size, c.rank
	p := 1 << (bits.Len(uint(n)) - 1)
	rounds := bits.Len(uint(p)) - 1
	ce := c.chunkElems(count)
	pieces := chunks(count, ce)
	tmp, err := c.alloc(min(count, ce) * c.es)
	if err != nil {
		return err
	}
	for piece := range pieces {
		sp := chunkOf(span{0, count}, piece, ce)
		acc := c.bytes(recv, sp)
		scratch := tmp.Slice(0, sp.n*c.es)
		if !inPlace {
			if err := c.copyBuf(acc, c.bytes(send, sp)); err != nil {
				return err
			}
		}
		step := func(sub int) uint64 { return uint64(piece*64 + sub) }
		if r >= p { // extra rank: hand the data over, get the result back
			if err := c.wait(c.send(r-p, step(0), acc)); err != nil {
				return err
			}
			if err := c.wait(c.recv(r-p, step(63), acc)); err != nil {
				return err
			}
			continue
		}
		if r < n-p {
			if err := c.wait(c.recv(r+p, step(0), scratch)); err != nil {
				return err
			}
			if err := c.reduce(acc, scratch); err != nil {
				return err
			}
		}
		for k := range rounds {
			partner := r ^ 1<<k
			s := c.send(partner, step(1+k), acc)
			rv := c.recv(partner, step(1+k), scratch)
			if err := c.wait(s); err != nil { // acc is about to change
				return err
			}
			if err := c.wait(rv); err != nil {
				return err
			}
			if err := c.reduce(acc, scratch); err != nil {
				return err
			}
		}
		if err := c.finish(acc); err != nil {
			return err
		}
		if r < n-p {
			c.send(r+p, step(63), acc) // acc is final: no need to wait here
		}
	}
	return nil
}
