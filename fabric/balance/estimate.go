package balance

import (
	"math"
	"slices"
)

// This file is stage 2's change detector: how one measurement moves a
// link's cost estimate, and how the split hedges while a slowdown is
// unconfirmed.

// watch is what the change detector remembers about one link of a class.
type watch struct {
	// last is the estimate when the link was last measured: the pessimistic
	// view that sizes the first part of a link coming back.
	last float64
	// prev is the estimate before a jump to a slower cost (0: none); the
	// next measurement undoes the jump if it agrees with prev.
	prev float64
	// faster is a measurement held back because it was much faster than
	// the estimate (0: none); a second one confirms it.
	faster float64
	// n counts the measurements the estimate rests on since it was last
	// reset (a jump, or the profile). While 1/n > Alpha the estimate is the
	// plain mean of those measurements, so that after a jump it settles as
	// fast as the noise allows instead of carrying one sample's noise for
	// 1/Alpha calls.
	n      int
	before int // n before the last jump to a slower cost
}

// update folds one measurement of link i into c's estimate and
// reports whether it jumped (a change of regime rather than noise).
//
// The detector is asymmetric because the costs of being wrong are: a link
// that became slower holds every transfer back, so one measurement beyond
// JumpRatio moves the estimate at once (and the next measurement undoes it
// if it is nearer the old estimate than the new: a lone outlier such as a
// page fault or a descheduled proxy thread; meanwhile hedge keeps the split
// safe under both); a link that became faster only leaves some bandwidth
// unused, so that waits for a second measurement.
func (c *class) update(cfg *Config, i int, bytes, dur float64) bool {
	est, w := c.est[i], &c.watch[i]
	defer func() { w.last = c.est[i].cost }()
	obs := math.Max(dur-est.lat, 0) / bytes
	band := 1 + cfg.JumpRatio
	near := func(ref float64) bool { return obs <= ref*band && obs >= ref/band }
	// The bytes' share of the predicted time says how much this sample
	// tells about bandwidth: a part so small that latency dominates barely
	// moves the estimate, and never makes it jump, instead of turning
	// noise on the latency into a wild cost.
	weight := bytes * est.cost / est.time(bytes)
	prev, faster := w.prev, w.faster
	w.prev, w.faster = 0, 0 // n and before carry over
	if prev != 0 {
		// A slow jump awaits this sample: whichever estimate it is nearer
		// (by ratio) wins. A band would not do: the part sized to test the
		// jump is small, and latency error blurs its cost.
		o := math.Max(obs, est.cost*1e-9)
		if math.Abs(math.Log(o/prev)) < math.Abs(math.Log(o/est.cost)) {
			c.est[i].cost, w.n = prev, w.before // a lone outlier: undo
			return true
		}
	}
	switch {
	case weight < 0.5 || near(est.cost):
		obs = math.Min(math.Max(obs, est.cost/band), est.cost*band)
		w.n++
		alpha := math.Max(cfg.Alpha, 1/float64(w.n))
		c.est[i].cost += alpha * weight * (obs - est.cost)
		return false
	case obs > est.cost:
		if w.n > 0 { // only a measured estimate can be worth returning to
			w.prev, w.before = est.cost, w.n
		}
		c.est[i].cost, w.n = obs, 1
	case faster != 0 && faster < est.cost: // confirmed faster
		c.est[i].cost, w.n = (faster+obs)/2, 2
	default:
		w.faster = obs
		return false
	}
	return true
}

// hedge plans for the call after a slow measurement that is not yet
// confirmed (a link whose watch.prev is set): it may be a lone outlier or
// the start of contention. Planning for either alone risks a large loss if
// the other is true (dropping NVLink's share for a page fault makes the
// next transfer crawl over PCIe), so the split is the mix of the two
// targets that minimises the worse of the two regrets — finish time over
// the best finish time under that hypothesis. The regrets are convex in
// the mixing weight, so a ternary search finds it.
func (c *class) hedge(ls *linkSet, cfg *Config, bytes float64) (plan, bool) {
	old := slices.Clone(c.est)
	any := false
	for i, w := range c.watch {
		if w.prev != 0 && !ls.excluded[i] {
			old[i].cost, any = w.prev, true
		}
	}
	if !any {
		return plan{}, false
	}
	overhead := cfg.SplitOverhead.Seconds()
	tNew, tOld := ls.target(c.est, bytes, overhead), ls.target(old, bytes, overhead)
	if tNew.shares == nil || tOld.shares == nil {
		return plan{}, false
	}
	mix := func(l float64) []float64 {
		x := make([]float64, len(tNew.shares))
		for i := range x {
			x[i] = l*tNew.shares[i] + (1-l)*tOld.shares[i]
		}
		return x
	}
	regret := func(l float64) float64 {
		x := mix(l)
		return math.Max(finishTime(c.est, x, bytes, overhead)/tNew.time, finishTime(old, x, bytes, overhead)/tOld.time)
	}
	lo, hi := 0.0, 1.0
	for range 60 {
		a, b := lo+(hi-lo)/3, hi-(hi-lo)/3
		if regret(a) <= regret(b) {
			hi = b
		} else {
			lo = a
		}
	}
	l := (lo + hi) / 2
	return plan{shares: mix(l), time: finishTime(c.est, mix(l), bytes, overhead)}, true
}

// step moves c's shares the fraction frac of the way toward the best
// split for bytes.
func (c *class) step(ls *linkSet, cfg *Config, bytes, frac float64) {
	overhead := cfg.SplitOverhead.Seconds()
	tgt := ls.target(c.est, bytes, overhead)
	if tgt.shares == nil {
		return
	}
	hedged := false
	if h, ok := c.hedge(ls, cfg, bytes); ok {
		tgt, frac, hedged = h, 1, true
	}
	now := finishTime(c.est, ls.live(c.shares), bytes, overhead)
	if !hedged && now <= tgt.time*(1+cfg.Deadband) {
		return // hysteresis: not worth moving
	}
	// pess is, for each link whose share is capped below, the pessimistic
	// cost its capped share is sized with (0: not capped).
	next, pess := make([]float64, len(c.shares)), make([]float64, len(c.shares))
	sum := 0.0
	for i, s := range ls.live(c.shares) {
		// A link the target drops leaves at once; the others move.
		if tgt.shares[i] > 0 {
			next[i] = s + frac*(tgt.shares[i]-s)
			if s == 0 {
				// Coming back (its estimate decayed toward the profile):
				// sized by the cost it was last measured at.
				pess[i] = c.watch[i].last
			}
		}
		sum += next[i]
	}
	for i := range next {
		next[i] /= sum
	}
	// A capped link gets at most what it could carry by the time the others
	// finish even at its pessimistic cost (JumpRatio is the noise
	// allowance): if the link is slow the probe costs only the split
	// overhead; if it is not, the measurement shows it.
	others := slices.Clone(next)
	for i := range others {
		if pess[i] != 0 {
			others[i] = 0
		}
	}
	T := finishTime(c.est, others, bytes, 0)
	var capped, rest float64
	for i, s := range next {
		if pess[i] != 0 {
			next[i] = math.Min(s, math.Max(0, T-c.est[i].lat)/(pess[i]*(1+cfg.JumpRatio))/bytes)
			capped += next[i]
		} else {
			rest += s
		}
	}
	for i := range next {
		if pess[i] == 0 && rest > 0 {
			next[i] *= (1 - capped) / rest
		}
	}
	c.shares = next
}

func watches(m []model) []watch {
	out := make([]watch, len(m))
	for i := range m {
		out[i].last = m[i].cost
	}
	return out
}
