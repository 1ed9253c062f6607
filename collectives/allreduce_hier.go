package collectives

// Hierarchical allreduce, for communicators whose ranks are spread evenly
// over several hosts (Config.Hosts): a reduce-scatter on each host's
// ring, an allreduce of each rank's reduced segment on the ring of the
// ranks holding that segment on the other hosts, and an allgather on each
// host's ring.
//
// Between hosts the flat ring moves 2(n-1)/n of the data out of every
// host (n ranks in all); this moves 2(h-1)/h (h hosts), and every rank
// of a host sends its own share, from its own NIC where it has one. With
// 2 hosts of 2 ranks: S out of each host instead of 1.5 S. The steps on a
// host go over shared memory, which is far faster than the network.
//
// Every element is still reduced once, in one fixed order (along its
// host ring, then along its cross ring), and then copied: every rank ends
// with bit-identical results. Avg divides once, in the cross ring's
// reduce-scatter, by the communicator's size.

// hierPhase2, hierPhase3: the step numbers of the second and third
// phases start here (the first starts at 0), so no two messages of a call
// on one link share a step whatever the segments' lengths (steps have 40
// bits; a phase never takes 2^36).
const (
	hierPhase2 = 1 << 36
	hierPhase3 = 2 << 36
)

// hierRings are a rank's host ring (the ranks of its host, in
// Config.Hosts's order) and its cross ring (the ranks at its position on
// every host, in host order).
type hierRings struct{ local, cross []int }

// hierRings is rank's, or nil when Config.Hosts does not give the
// communicator several hosts of as many ranks, at least 2 each.
func (c Config) hierRings(rank int) *hierRings {
	hs := c.Hosts
	if len(hs) < 2 || len(hs[0]) < 2 {
		return nil
	}
	h := &hierRings{}
	pos := -1
	for _, host := range hs {
		if len(host) != len(hs[0]) {
			return nil
		}
		if p := ringPos(host, rank); p >= 0 {
			h.local, pos = host, p
		}
	}
	if pos < 0 {
		return nil
	}
	for _, host := range hs {
		h.cross = append(h.cross, host[pos])
	}
	return h
}

func allReduceHier(c *call, send, recv Buffer, count int, inPlace bool) error {
	local, cross := c.e.hier.local, c.e.hier.cross
	m := len(local)
	all := span{0, count}
	segs := split(count, m)
	ce := c.chunkElems(segs[0].n)
	k := chunks(segs[0].n, ce)
	// 1: reduce-scatter on the host: this rank then holds segment p+1
	// reduced over its host (into recv; send is only read).
	rs := allReduceLane(c, send, recv, all, local, ce, k, inPlace, false)
	if err := runRing2(c, local, stepsOf(rs, 0, m-1), 0); err != nil {
		return err
	}
	// 2: allreduce of that segment with the ranks holding it elsewhere.
	seg := segs[mod(ringPos(local, c.rank)+1, m)]
	sub := split(seg.n, len(cross))[0].n
	ce2 := c.chunkElems(sub)
	ar := allReduceLane(c, recv, recv, seg, cross, ce2, chunks(sub, ce2), true, true)
	if err := runRing2(c, cross, ar, hierPhase2); err != nil {
		return err
	}
	// 3: allgather on the host, from the segments now final.
	ag := allReduceLane(c, recv, recv, all, local, ce, k, true, false)
	return runRing2(c, local, stepsOf(ag, m-1, m-1), hierPhase3)
}

// runRing2 runs pass p on ring from step number base.
func runRing2(c *call, ring []int, p *ringPass, base int) error {
	p.stepBase = base
	return runRings(c, []ringLane{laneOn(c, ring, p)})
}

// stepsOf is steps [from, from+n) of pass p as a pass of their own, run
// after the steps before from finished (in an earlier pass): a receive p
// gates on one of those sends is not gated.
func stepsOf(p *ringPass, from, n int) *ringPass {
	q := *p
	q.steps = n
	q.recvInto = func(s, ch int) Buffer { return p.recvInto(s+from, ch) }
	q.sendBuf = func(s, ch int) Buffer { return p.sendBuf(s+from, ch) }
	q.process = func(s, ch int, slot Buffer) error { return p.process(s+from, ch, slot) }
	q.slots.use = func(s int) bool { return p.slots.use(s + from) }
	q.slots.recvLen = func(s, ch int) int { return p.slots.recvLen(s+from, ch) }
	if p.waitSend != nil {
		q.waitSend = func(s int) bool { return p.waitSend(s + from) }
	}
	if p.recvAfter != nil {
		q.recvAfter = func(s int) int {
			if g := p.recvAfter(s + from); g >= from {
				return g - from
			}
			return -1
		}
	}
	used := false
	for s := range n {
		used = used || q.slots.use(s)
	}
	if !used {
		q.slots.n = 0
	}
	return &q
}
