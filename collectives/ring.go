package collectives

import "fmt"

// The ring pipeline shared by ring allreduce, reduce-scatter and
// allgather.
//
// Ranks form a ring (rank r sends to r+1 and receives from r-1). The data
// is cut into Size() segments, one per rank, and each segment into chunks
// of Config.ChunkBytes. A pass has `steps` steps; in step s every rank
// sends chunk c of one segment to its right neighbour and receives chunk c
// of another from its left neighbour, for every c. Which segments, where
// they come from and what happens to a received chunk is the algorithm's
// business (the callbacks); the pass only schedules the messages.
//
// Message m = s*chunks + c. On each link messages are posted, and hence
// matched, in increasing m, on both sides. Dependencies follow the data:
// the send of (s, c) for s > 0 forwards what was received as (s-1, c), so
// it waits until message m-chunks has been received and processed. This
// is what pipelines the ring: while chunk c is being reduced, chunk c+1 is
// already on the wire, and chunk c moves on to the next rank as soon as it
// is reduced, without waiting for the rest of its segment.
//
// Bounds keep memory and the number of requests small: at most `window`
// sends and at most `slots` (or `window`) receives in flight. Received
// chunks land in one of `slots` scratch chunks (for reduction) or straight
// in the user's buffer. An algorithm that overwrites, while processing
// (s, c), the memory that the send of (s, c) reads sets waitSend; the
// pass then processes (s, c) only after that send finished. Neither bound
// can deadlock: everything message m waits for on any rank concerns
// messages with smaller numbers (or the same number one hop to the left),
// and scratch is freed by processing alone, never by a later send.
type ringPass struct {
	steps, chunks int
	// tag step of message (s, c) is stepBase + s*stride + c.
	stepBase, stride int
	// slots says which steps receive into scratch chunks, and how many.
	slots ringSlots
	// recvInto is where message (s, c) lands when not in scratch.
	recvInto func(s, c int) Buffer
	// sendBuf is what message (s, c) sends.
	sendBuf func(s, c int) Buffer
	// process runs, in message order, once message (s, c) has arrived;
	// slot is its scratch chunk (nil when received in place).
	process func(s, c int, slot Buffer) error
	// waitSend reports whether processing step s overwrites what the send
	// of the same (s, c) reads.
	waitSend func(s int) bool
	// recvAfter, when set, names for a step s that receives in place the
	// earlier step whose send of the same chunk reads that memory (-1:
	// none). A posted receive's buffer belongs to the link until it
	// completes (fabric.Link's contract), so the receive of (s, c) is
	// posted only once that send has finished. The data could not arrive
	// earlier anyway (it is computed from what that send carries), but
	// only the link knows that, through the peers; the race detector, and
	// a link that writes a posted buffer early, do not.
	recvAfter func(s int) int
}

// ringSlots are the scratch chunks a ring pass receives into (for
// reduction) instead of in place.
type ringSlots struct {
	// n is the number of scratch chunks of bytes each; 0 receives every
	// step in place (recvInto).
	n, bytes int
	// use reports whether step s receives into scratch (else recvInto).
	use func(s int) bool
	// recvLen is the length of message (s, c) when received into scratch.
	recvLen func(s, c int) int
}

// ringLane is one ring of a multi-ring pass (the channels of
// Config.Rings): its pass, and this rank's neighbours on that ring.
type ringLane struct {
	p           *ringPass
	left, right int
}

// runRing runs one pass on the rank-order ring.
func runRing(c *call, p *ringPass) error {
	return runRings(c, []ringLane{{p: p, left: mod(c.rank-1, c.size), right: mod(c.rank+1, c.size)}})
}

// runRings runs the passes of several rings at once, each on its own
// neighbours, as NCCL runs its channels: on hosts whose ranks own
// different NICs, each ring's cross-host hops leave from another rail
// (Config.Rings). Every lane has the same steps and chunks.
//
// The lanes' messages are numbered as one sequence, M = m*L + l for
// message m of lane l, and everything the single ring does in message
// order (posting sends, posting receives, processing) is done in M order.
// Two lanes may share a directed link (rank a is left of rank b on both):
// the sender then posts their messages in M order and so does the
// receiver, so the link's FIFO matches them. A message still waits only
// on messages with smaller numbers (the send of M forwards what M-L*chunks
// brought), which is the single ring's no-deadlock argument.
func runRings(c *call, lanes []ringLane) error {
	nl := len(lanes)
	p0 := lanes[0].p
	for _, ln := range lanes[1:] {
		if ln.p.steps != p0.steps || ln.p.chunks != p0.chunks {
			return fmt.Errorf("collectives: ring lanes differ in shape (%d×%d vs %d×%d)", ln.p.steps, ln.p.chunks, p0.steps, p0.chunks)
		}
	}
	total := p0.steps * p0.chunks * nl
	if total == 0 {
		return nil
	}
	dist := p0.chunks * nl // the send of M forwards what message M-dist brought
	sendWindow := window * nl
	var slots []Buffer
	recvWindow := window * nl
	if p0.slots.n > 0 {
		n := min(p0.slots.n*nl, max(p0.slots.n, maxRingSlots), total)
		var err error
		if slots, err = c.allocN(n, p0.slots.bytes); err != nil {
			return err
		}
		recvWindow = len(slots)
	}
	// at is message M's lane, step and chunk.
	at := func(m int) (*ringLane, int, int) {
		ln := &lanes[m%nl]
		i := m / nl
		return ln, i / ln.p.chunks, i % ln.p.chunks
	}
	step := func(m int) uint64 {
		ln, s, ch := at(m)
		return uint64(ln.p.stepBase + s*ln.p.stride + ch)
	}
	sends := make([]*xfer, total)
	recvs := make([]*xfer, total)
	slotOf := make([]Buffer, total)
	nextSend, nextRecv, sendsDone, done := 0, 0, 0, 0
	for done < total || nextSend < total {
		if err := c.poll(); err != nil {
			return err
		}
		for sendsDone < nextSend && sends[sendsDone].done {
			sendsDone++
		}
		gate := -1 // the send that the next receive waits for
		for nextRecv < total && nextRecv-done < recvWindow {
			ln, s, ch := at(nextRecv)
			if g := ln.p.sendFirst(s, ch); g >= 0 {
				if g = g*nl + nextRecv%nl; sends[g] == nil || !sends[g].done {
					gate = g
					break
				}
			}
			var b Buffer
			if ln.p.slots.use(s) {
				b = slots[nextRecv%len(slots)].Slice(0, ln.p.slots.recvLen(s, ch))
				slotOf[nextRecv] = b
			} else {
				b = ln.p.recvInto(s, ch)
			}
			recvs[nextRecv] = c.recv(ln.left, step(nextRecv), b)
			nextRecv++
		}
		for nextSend < total && nextSend-sendsDone < sendWindow && nextSend-dist < done {
			ln, s, ch := at(nextSend)
			sends[nextSend] = c.send(ln.right, step(nextSend), ln.p.sendBuf(s, ch))
			nextSend++
		}
		// Block until something this rank waits for moves.
		var targets []*xfer
		if gate >= 0 && sends[gate] != nil {
			targets = append(targets, sends[gate])
		}
		if done < total && recvs[done] != nil {
			ln, s, ch := at(done)
			sendOK := ln.p.waitSend == nil || !ln.p.waitSend(s) || (done < nextSend && sends[done].done)
			if recvs[done].done && sendOK {
				if err := ln.p.process(s, ch, slotOf[done]); err != nil {
					return err
				}
				recvs[done], slotOf[done] = nil, nil
				done++
				continue
			}
			if !recvs[done].done {
				targets = append(targets, recvs[done])
			}
			if !sendOK && done < nextSend {
				targets = append(targets, sends[done])
			}
		}
		if nextSend < total && nextSend-sendsDone >= sendWindow {
			targets = append(targets, sends[sendsDone])
		}
		if err := c.waitAny(targets...); err != nil {
			return err
		}
	}
	return c.waitAll()
}

// sendFirst is the message whose send must finish before the receive of
// (s, c) is posted (see recvAfter), or -1.
func (p *ringPass) sendFirst(s, c int) int {
	if p.recvAfter == nil || p.slots.use(s) {
		return -1
	}
	g := p.recvAfter(s)
	if g < 0 {
		return -1
	}
	return g*p.chunks + c
}

// maxRingSlots caps the scratch chunks of a multi-ring pass (each ring
// would take Config's depth): a dozen chunks, as for one ring at most.
const maxRingSlots = 3 * depth

// rings is the call's rings: Config.Rings, or the rank-order ring.
func (c *call) rings() [][]int {
	if len(c.e.cfg.Rings) > 0 {
		return c.e.cfg.Rings
	}
	ring := make([]int, c.size)
	for i := range ring {
		ring[i] = i
	}
	return [][]int{ring}
}

// ringPos is rank's position on ring (Config.checkRings made it one).
func ringPos(ring []int, rank int) int {
	for i, r := range ring {
		if r == rank {
			return i
		}
	}
	return -1
}

// laneOn is pass p on ring, with this rank's neighbours there.
func laneOn(c *call, ring []int, p *ringPass) ringLane {
	i := ringPos(ring, c.rank)
	return ringLane{p: p, left: ring[mod(i-1, len(ring))], right: ring[mod(i+1, len(ring))]}
}
