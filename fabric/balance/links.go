package balance

import (
	"math"
	"slices"
)

// linkSet is a planner's links: their specs, the stage-1 profile (the
// prior of every estimate) and which are excluded. Slices are indexed
// alike; a link's position is its index, its id is the caller's.
type linkSet struct {
	specs    []LinkSpec
	profile  []model // stage 1 result per link: the prior of stage 2
	excluded []bool
}

func (ls *linkSet) index(id int) int {
	return slices.IndexFunc(ls.specs, func(s LinkSpec) bool { return s.ID == id })
}

// target is the best split for bytes under estimates m over live links
// (overhead: Config.SplitOverhead in seconds).
func (ls *linkSet) target(m []model, bytes, overhead float64) plan {
	usable := make([]bool, len(m))
	for i := range usable {
		usable[i] = !ls.excluded[i]
	}
	return bestPlan(m, usable, bytes, overhead)
}

// live returns shares with excluded links zeroed.
func (ls *linkSet) live(shares []float64) []float64 {
	out := slices.Clone(shares)
	for i := range out {
		if ls.excluded[i] {
			out[i] = 0
		}
	}
	return out
}

// findThreshold returns the smallest message size for which the best split
// (under the profile, with overhead seconds per extra part) uses more than one link, or math.MaxInt when even a
// message of 1 TiB is best sent over one link. The benefit of splitting
// grows with the size while the overhead is fixed, so the answer is found
// by bisection.
func (ls *linkSet) findThreshold(overhead float64) int {
	usable := slices.Clone(ls.excluded)
	for i := range usable {
		usable[i] = !usable[i]
	}
	splits := func(b int) bool {
		pl := bestPlan(ls.profile, usable, float64(b), overhead)
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
