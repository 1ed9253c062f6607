package collectives

// Reduce to a root, two ways; positions are relative to the root as in
// broadcast.go, and the data flows the other way.
//
// Chain (large messages): position n-1 sends its data to n-2, which adds
// its own and passes the partial on, down to the root, chunk by chunk.
// A middle rank receives a chunk into scratch, adds its contribution in
// place and sends that scratch chunk on; the scratch is reused once that
// send finished. The chain has no cycle, so the bounded scratch cannot
// deadlock it. recv is written on the root only, as NCCL's contract says.
//
// Binomial tree (small messages): the broadcast tree run backwards. Each
// position receives its children's partials, adds them to its own, and
// sends the sum to its parent: ceil(log2 n) rounds.

// reduceChain runs the chain.
func reduceChain(c *call, send, recv Buffer, count int, inPlace bool) error {
	n, r := c.size, c.rank
	v := mod(r-c.h.root, n)
	toward, from := mod(r-1, n), mod(r+1, n) // positions v-1 and v+1
	ce := c.chunkElems(count)
	k := chunks(count, ce)
	sp := func(ch int) span { return chunkOf(span{0, count}, ch, ce) }
	sends := make([]*xfer, k)
	if v == n-1 { // start of the chain: send this rank's data as it is
		sendsDone := 0
		for ch := range k {
			for ch-sendsDone >= window {
				if err := c.wait(sends[sendsDone]); err != nil {
					return err
				}
				sendsDone++
			}
			sends[ch] = c.send(toward, uint64(ch), c.bytes(send, sp(ch)))
		}
		return c.waitAll()
	}
	slots, err := c.allocN(min(depth, k), ce*c.es)
	if err != nil {
		return err
	}
	recvs := make([]*xfer, k)
	slotOf := make([]Buffer, k)
	nextRecv, done := 0, 0
	for done < k {
		if err := c.poll(); err != nil {
			return err
		}
		// Post receives while a scratch chunk is free: processed, and (on a
		// middle rank) sent on.
		for nextRecv < k && nextRecv-done < len(slots) {
			if prev := nextRecv - len(slots); v > 0 && prev >= 0 && !sends[prev].done {
				break
			}
			slotOf[nextRecv] = slots[nextRecv%len(slots)].Slice(0, sp(nextRecv).n*c.es)
			recvs[nextRecv] = c.recv(from, uint64(nextRecv), slotOf[nextRecv])
			nextRecv++
		}
		if recvs[done] == nil || !recvs[done].done {
			var targets []*xfer
			if recvs[done] != nil {
				targets = append(targets, recvs[done])
			}
			if prev := nextRecv - len(slots); nextRecv < k && v > 0 && prev >= 0 && prev < done && !sends[prev].done {
				targets = append(targets, sends[prev])
			}
			if err := c.waitAny(targets...); err != nil {
				return err
			}
			continue
		}
		slot := slotOf[done]
		if v > 0 { // middle: add ours and pass on
			if err := c.reduce(slot, c.bytes(send, sp(done))); err != nil {
				return err
			}
			sends[done] = c.send(toward, uint64(done), slot)
		} else { // root: the result goes to recv
			dst := c.bytes(recv, sp(done))
			if !inPlace {
				if err := c.copyBuf(dst, c.bytes(send, sp(done))); err != nil {
					return err
				}
			}
			if err := c.reduce(dst, slot); err != nil {
				return err
			}
			if err := c.finish(dst); err != nil {
				return err
			}
		}
		recvs[done], slotOf[done] = nil, nil
		done++
	}
	return c.waitAll()
}

// reduceTree runs the binomial tree piece by piece.
func reduceTree(c *call, send, recv Buffer, count int, inPlace bool) error {
	n, r, root := c.size, c.rank, c.h.root
	parent, children := treeLinks(mod(r-root, n), n)
	ce := c.chunkElems(count)
	pieceBytes := min(count, ce) * c.es
	kids, err := c.allocN(len(children), pieceBytes)
	if err != nil {
		return err
	}
	var accs []Buffer // non-root with children: two partial sums, alternating
	if parent >= 0 && len(children) > 0 {
		if accs, err = c.allocN(2, pieceBytes); err != nil {
			return err
		}
	}
	var sentFrom [2]*xfer
	var leafSends fifo
	for p := range chunks(count, ce) {
		sp := chunkOf(span{0, count}, p, ce)
		mine := c.bytes(send, sp)
		var acc Buffer
		switch {
		case parent < 0:
			acc = c.bytes(recv, sp)
			if !inPlace {
				if err := c.copyBuf(acc, mine); err != nil {
					return err
				}
			}
		case len(children) == 0:
			acc = mine // a leaf sends its data as it is
		default:
			if err := c.wait(sentFrom[p%2]); err != nil { // acc is reused
				return err
			}
			acc = accs[p%2].Slice(0, sp.n*c.es)
			if err := c.copyBuf(acc, mine); err != nil {
				return err
			}
		}
		recvs := make([]*xfer, len(children))
		for i, ch := range children {
			recvs[i] = c.recv(mod(ch+root, n), uint64(p), kids[i].Slice(0, sp.n*c.es))
		}
		for i := range children {
			if err := c.wait(recvs[i]); err != nil {
				return err
			}
			if err := c.reduce(acc, kids[i].Slice(0, sp.n*c.es)); err != nil {
				return err
			}
		}
		if parent < 0 {
			if err := c.finish(acc); err != nil {
				return err
			}
			continue
		}
		x := c.send(mod(parent+root, n), uint64(p), acc)
		if len(children) > 0 {
			sentFrom[p%2] = x
		} else if err := leafSends.push(c, x); err != nil {
			return err
		}
	}
	return c.waitAll()
}
