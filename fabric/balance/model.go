package balance

import (
	"math"
	"slices"
)

// model is one link's linear cost model: a transfer of b bytes takes
// lat + b·cost seconds.
type model struct {
	lat  float64 // seconds
	cost float64 // seconds per byte
}

func (m model) time(bytes float64) float64 { return m.lat + bytes*m.cost }

// fitModel estimates a link's model from probes of that link. With probes
// of two or more sizes it fits latency and cost by least squares; with one
// size it keeps the prior's latency (a single size cannot separate the
// two) and derives the cost; with none, or when the fit is degenerate (a
// negative slope from noisy probes), it returns the prior.
func fitModel(prior model, probes []Probe) model {
	var n, sb, sd, sbb, sbd float64
	sizes := map[int64]bool{}
	for _, p := range probes {
		if p.Bytes <= 0 || p.Duration <= 0 {
			continue
		}
		b, d := float64(p.Bytes), p.Duration.Seconds()
		n++
		sb += b
		sd += d
		sbb += b * b
		sbd += b * d
		sizes[p.Bytes] = true
	}
	if n == 0 {
		return prior
	}
	mb, md := sb/n, sd/n
	if len(sizes) >= 2 {
		if v := sbb/n - mb*mb; v > 0 {
			cost := (sbd/n - mb*md) / v
			lat := md - cost*mb
			if cost > 0 && lat >= 0 {
				return model{lat: lat, cost: cost}
			}
			if cost > 0 { // intercept below zero: noise on tiny probes
				return model{lat: 0, cost: sbd / sbb}
			}
		}
	}
	lat := math.Min(prior.lat, md/2)
	return model{lat: lat, cost: (md - lat) / mb}
}

func priorModel(s LinkSpec) model {
	return model{lat: s.Latency.Seconds(), cost: 1 / s.Bandwidth}
}

// plan is one split: shares indexed like the planner's links (zero for
// links left out) and its predicted finish time.
type plan struct {
	shares []float64
	time   float64 // seconds, including SplitOverhead per extra link
}

// bestPlan returns the split of bytes over the links marked usable that
// finishes first under models m, trying every subset of those links. It
// allocates only the returned shares.
func bestPlan(m []model, usable []bool, bytes, overhead float64) plan {
	best := plan{time: math.Inf(1)}
	n := len(m)
	var idx [MaxLinks]int
	var x [MaxLinks]float64
	for set := 1; set < 1<<n; set++ {
		k := 0
		ok := true
		for i := range n {
			if set&(1<<i) != 0 {
				if !usable[i] {
					ok = false
					break
				}
				idx[k] = i
				k++
			}
		}
		if !ok {
			continue
		}
		t, used := waterFill(m, idx[:k], bytes, x[:k])
		t += overhead * float64(used-1)
		if t < best.time*(1-1e-12) {
			best.time = t
			if best.shares == nil {
				best.shares = make([]float64, n)
			} else {
				clear(best.shares)
			}
			for j, i := range idx[:k] {
				best.shares[i] = x[j]
			}
		}
	}
	return best
}

// waterFill splits bytes over the links idx so that every link that gets
// bytes finishes at the same time T: x_i·bytes = (T − lat_i)/cost_i. Links
// whose latency alone exceeds T get nothing. It writes the shares into x
// (parallel to idx) and returns T and the number of links used.
func waterFill(m []model, idx []int, bytes float64, x []float64) (float64, int) {
	order := slices.Clone(idx)
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case m[a].lat < m[b].lat:
			return -1
		case m[a].lat > m[b].lat:
			return 1
		}
		return 0
	})
	clear(x)
	if bytes <= 0 { // nothing to move: the lowest-latency link alone
		x[slices.Index(idx, order[0])] = 1
		return m[order[0]].lat, 1
	}
	// Admit links in order of latency; with the first k links the common
	// finish time is T = (bytes + Σ lat/cost) / Σ 1/cost. Stop when the
	// next link's latency is already past T: it could only finish later.
	var sumInv, sumLat float64
	T, used := 0.0, 0
	for k, i := range order {
		if k > 0 && m[i].lat >= T {
			break
		}
		sumInv += 1 / m[i].cost
		sumLat += m[i].lat / m[i].cost
		T = (bytes + sumLat) / sumInv
		used = k + 1
	}
	for _, i := range order[:used] {
		x[slices.Index(idx, i)] = (T - m[i].lat) / m[i].cost / bytes
	}
	return T, used
}

// finishTime predicts when a split with the given shares finishes.
func finishTime(m []model, shares []float64, bytes, overhead float64) float64 {
	t, used := 0.0, 0
	for i, s := range shares {
		if s <= 0 {
			continue
		}
		used++
		t = math.Max(t, m[i].time(s*bytes))
	}
	if used == 0 {
		return math.Inf(1)
	}
	return t + overhead*float64(used-1)
}
