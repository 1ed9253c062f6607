package collectives

// Ring allreduce: a reduce-scatter followed by an allgather, run as one
// pipelined ring pass of 2(n-1) steps (see ring.go).
//
// The count elements are split into n segments. In reduce-scatter step s
// (0 <= s < n-1) rank r sends segment r-s and receives segment r-s-1,
// which it reduces into recv: after n-1 steps rank r holds segment r+1
// reduced over all ranks. In allgather step t (s = n-1+t) rank r sends
// segment r+1-t and receives segment r-t, already final, straight into
// recv. Every rank moves 2(n-1)/n of the data, the bandwidth optimum, and
// the reduction of one chunk overlaps the transfer of the next.
//
// Every element is reduced in the same order (along the ring, starting at
// its segment's owner's right neighbour) and then copied, so all ranks end
// with bit-identical results. Avg divides each segment once, by its owner,
// before the allgather.
//
// Out of place, recv is written only where a chunk is reduced (recv = send
// op incoming, one copy and one reduction) or received, so send is read
// once and never copied wholesale.
//
// With several rings (Config.Rings) the count elements are first split
// into one part per ring, and each part runs the algorithm above on its
// own ring at once (runRings), segments numbered by position on that
// ring: every element is still reduced in one fixed order, so the results
// stay bit-identical on every rank.
func allReduceRing(c *call, send, recv Buffer, count int, inPlace bool) error {
	rings := c.rings()
	parts := split(count, len(rings))
	longest := split(parts[0].n, c.size)[0].n // part 0's segment 0 is the longest
	ce := c.chunkElems(longest)
	k := chunks(longest, ce)
	lanes := make([]ringLane, len(rings))
	for l, ring := range rings {
		p := allReduceLane(c, send, recv, parts[l], ring, ce, k, inPlace, true)
		p.stepBase = l * p.steps * p.stride
		lanes[l] = laneOn(c, ring, p)
	}
	return runRings(c, lanes)
}

// allReduceLane is the pass of the elements in part over ring (all the
// communicator's ranks, or some of them: allReduceHier), this rank at
// position r on it, in chunks of ce elements (k per segment). finish:
// the segment a rank holds after the reduce-scatter is the reduction over
// every rank of the communicator (Avg divides it there).
func allReduceLane(c *call, send, recv Buffer, part span, ring []int, ce, k int, inPlace, finish bool) *ringPass {
	n, r := len(ring), ringPos(ring, c.rank)
	segs := split(part.n, n)
	for i := range segs {
		segs[i].off += part.off
	}
	chunk := func(b Buffer, seg, ch int) Buffer { return c.bytes(b, chunkOf(segs[mod(seg, n)], ch, ce)) }
	src := send
	if inPlace {
		src = recv
	}
	rs := n - 1 // reduce-scatter steps
	return &ringPass{
		steps: 2 * rs, chunks: k, stride: k,
		// Out of place, the reduce-scatter's chunks land straight in recv
		// (segment r-s-1 holds nothing yet and is sent only once reduced)
		// and the send chunk is reduced into them: no scratch and no copy
		// of send into recv (the operations are commutative, and so is
		// IEEE addition, bit for bit). In place, recv holds this rank's
		// own contribution: they land in scratch.
		slots: ringSlots{n: slotsIf(inPlace, depth), bytes: ce * c.es,
			use:     func(s int) bool { return inPlace && s < rs },
			recvLen: func(s, ch int) int { return chunkOf(segs[mod(r-s-1, n)], ch, ce).n * c.es }},
		recvInto: func(s, ch int) Buffer {
			if s < rs {
				return chunk(recv, r-s-1, ch)
			}
			return chunk(recv, r-(s-rs), ch)
		},
		sendBuf: func(s, ch int) Buffer {
			switch {
			case s == 0:
				return chunk(src, r, ch)
			case s < rs:
				return chunk(recv, r-s, ch)
			}
			return chunk(recv, r+1-(s-rs), ch)
		},
		// The allgather's receive of segment r-t (step rs+t) lands where
		// reduce-scatter step t sent it from (step 0 only in place).
		recvAfter: func(s int) int {
			if t := s - rs; t > 0 || t == 0 && inPlace {
				return t
			}
			return -1
		},
		process: func(s, ch int, slot Buffer) error {
			if s >= rs {
				return nil // allgather: received in place
			}
			dst, other := chunk(recv, r-s-1, ch), slot
			if !inPlace {
				other = chunk(send, r-s-1, ch) // dst holds the received chunk
			}
			if err := c.reduce(dst, other); err != nil {
				return err
			}
			if s == rs-1 && finish { // segment r+1 is complete
				return c.finish(dst)
			}
			return nil
		},
	}
}

// slotsIf is n scratch slots when on, else none.
func slotsIf(on bool, n int) int {
	if on {
		return n
	}
	return 0
}
