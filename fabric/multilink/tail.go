package multilink

// The tail of a large message (Options.Tail). The planner splits the
// head, the first 1-Tail of the message, by its shares, and the first
// half of the tail the same way, at once (each link then has a part
// queued behind its head part, so it never idles while that part's
// completion travels back). The rest is cut into pieces handed out as
// the links complete their parts: one more to a link each time one of its
// parts of the message completes. A piece is the larger of tailPiece and
// half the link's share of what is left, so pieces follow the shares
// while the links keep to them, shrink as the message ends, and the links
// finish within about a small piece of each other.
// Only links that complete parts of the message get pieces: a link the
// planner gave no share stays out.
//
// Only the last Send hands out its tail (the message numbered out.seq-1,
// while its rest is short of its length): a Send flushes the tail left of
// the one before (split by the shares, like a head), so a message's bytes
// never queue behind a later message's on a link. In a stream of
// messages (a pipelined collective) only the last one keeps its tail; in
// an exchange of one message per call (an all-to-all's block) every one
// does.

const (
	maxTail        = 0.5
	defaultTailMin = 4 << 20
	// tailPiece is the smallest piece (rounded up to Options.Align): each
	// costs a frame and an ack.
	tailPiece = 64 << 10
)

// tailStart is where the tail of an n-byte message starts: n when it has
// none (Tail off, a small message, fewer than two live links, or a tail
// smaller than one aligned unit).
func (c *channel) tailStart(n int) int {
	if c.opt.Tail <= 0 || n < c.opt.TailMin || c.liveLinks() < 2 {
		return n
	}
	// The head ends on the Align grid, so every split of the tail does.
	head := (n - int(float64(n)*c.opt.Tail) + c.opt.Align - 1) / c.opt.Align * c.opt.Align
	return min(head, n)
}

// shareOf is link j's share of a message of n bytes by the planner (0
// when the planner would not use it), for the size of j's pieces: while
// the links run at the rates the planner knows, each link's pieces follow
// its share, and the order in which they deliver moves the rest.
func (c *channel) shareOf(n, j int) float64 {
	for _, s := range c.bal.planner.Shares(n) {
		if s.Link == j {
			return s.Fraction
		}
	}
	return 0
}

// liveLinks counts the links that have not failed (c.mu held).
func (c *channel) liveLinks() int {
	n := 0
	for _, d := range c.st.dead {
		if !d {
			n++
		}
	}
	return n
}

// startTailLocked sends the first half of m's tail at once, split by the
// planner's shares like the head (so over the links the head went to):
// each link has a piece queued behind its head part and never idles while
// that part's completion travels back. The second half goes in pieces as
// the links deliver (pieceLocked).
func (c *channel) startTailLocked(m *outMsg) {
	first := (len(m.buf) - m.rest) / 2 / c.opt.Align * c.opt.Align
	if first <= 0 {
		return
	}
	off := m.rest
	m.rest += first
	c.splitLocked(m, off, first, len(m.buf))
}

// pieceLocked sends the next piece of m's tail over link j, when any is
// left and j is alive.
func (c *channel) pieceLocked(m *outMsg, j int) {
	left := len(m.buf) - m.rest
	if left <= 0 || c.st.err != nil || c.st.dead[j] {
		return
	}
	share := c.shareOf(len(m.buf), j)
	if share <= 0 {
		return // the planner would not use j (the others hand the tail out)
	}
	// Half the link's share of what is left; at least tailPiece, but never
	// more than its share: a link of a small share takes no more.
	mine := int(float64(left) * share)
	n := max(mine/2, min(tailPiece, mine))
	n = (max(n, 1) + c.opt.Align - 1) / c.opt.Align * c.opt.Align
	n = min(n, left)
	off := m.rest
	m.rest += n
	c.issueLocked(m, j, off, n)
}

// flushTailLocked sends what is left of the last Send's tail, split by
// the planner's shares: a new Send's bytes must not go ahead of it.
func (c *channel) flushTailLocked() {
	if m := c.out.msgs[c.out.seq-1]; c.out.seq > 0 && m != nil {
		c.sendRestLocked(m)
	}
}

// tailStalledLocked sends what is left of m's tail when no part of m is
// out any more: no completion is coming to hand it out (the links that
// carried it failed after their parts were acknowledged).
func (c *channel) tailStalledLocked(m *outMsg) {
	if m.pending == 0 {
		c.sendRestLocked(m)
	}
}

// sendRestLocked sends what is left of m's tail at once, split by the
// planner's shares for m's size.
func (c *channel) sendRestLocked(m *outMsg) {
	if m.rest >= len(m.buf) || c.st.err != nil {
		return
	}
	off := m.rest
	m.rest = len(m.buf)
	c.splitLocked(m, off, len(m.buf)-off, len(m.buf))
}
