package multilink

import (
	"math"
	"math/bits"

	"flexlink/fabric/balance"
)

// shareStep is how far a link's share must move before OnShares hears of
// it again: the shares settle within a few messages and then jitter by
// less, so the log gets a line when they settle and when they move.
const shareStep = 0.02

// noteSharesLocked hands the planner's shares for messages of bytes to
// Options.OnShares: once per size class (powers of two) and again
// whenever a link's share moves by shareStep or more since the last
// report of that class.
func (c *channel) noteSharesLocked(bytes int) {
	if c.opt.OnShares == nil {
		return
	}
	class := bits.Len(uint(bytes))
	now := c.planner.Shares(bytes)
	if last, ok := c.reported[class]; ok && !moved(last, now) {
		return
	}
	if c.reported == nil {
		c.reported = map[int][]balance.Share{}
	}
	c.reported[class] = now
	c.opt.OnShares(bytes, now)
}

// moved reports whether some link's fraction differs by shareStep or
// more between a and b (a link absent from one has fraction 0 there).
func moved(a, b []balance.Share) bool {
	frac := func(s []balance.Share, link int) float64 {
		for _, x := range s {
			if x.Link == link {
				return x.Fraction
			}
		}
		return 0
	}
	for _, s := range [][]balance.Share{a, b} {
		for _, x := range s {
			if math.Abs(frac(a, x.Link)-frac(b, x.Link)) >= shareStep {
				return true
			}
		}
	}
	return false
}
