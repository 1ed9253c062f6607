package balance

import (
	"math"
	"slices"
)

// Exclude takes a failed link out of every split at once: each class is
// re-planned over the remaining links without damping (a dead link cannot
// wait for a moving average). Unknown ids are ignored.
func (p *Planner) Exclude(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.index(id)
	if i < 0 || p.excluded[i] {
		return
	}
	p.excluded[i] = true
	p.replan()
}

// Admit brings an excluded link back. Its estimates restart from the
// profile (what it did before failing says little about the repaired
// link) and every class is re-planned with it.
func (p *Planner) Admit(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.index(id)
	if i < 0 || !p.excluded[i] {
		return
	}
	p.excluded[i] = false
	for k := range p.classes {
		c := &p.classes[k]
		c.est[i], c.watch[i] = p.profile[i], watch{last: p.profile[i].cost}
	}
	p.replan()
}

// Excluded reports whether link id is excluded.
func (p *Planner) Excluded(id int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.index(id)
	return i >= 0 && p.excluded[i]
}

func (p *Planner) replan() {
	for k := range p.classes {
		c := &p.classes[k]
		if t := p.target(c.est, p.cfg.classBytes(k)); t.shares != nil {
			c.shares = t.shares
		} else {
			clear(c.shares)
		}
	}
	p.threshold = p.findThreshold()
}

// findThreshold returns the smallest message size for which the best split
// (under the profile) uses more than one link, or math.MaxInt when even a
// message of 1 TiB is best sent over one link. The benefit of splitting
// grows with the size while the overhead is fixed, so the answer is found
// by bisection.
func (p *Planner) findThreshold() int {
	usable := slices.Clone(p.excluded)
	for i := range usable {
		usable[i] = !usable[i]
	}
	overhead := p.cfg.SplitOverhead.Seconds()
	splits := func(b int) bool {
		pl := bestPlan(p.profile, usable, float64(b), overhead)
		used := 0
		for _, s := range pl.shares {
			if s > 0 {
				used++
			}
		}
		return used > 1
	}
	lo, hi := 0, 1<<40 // splits(lo) false (nothing to split), splits(hi) decides
	if !splits(hi) {
		return math.MaxInt
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if splits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
