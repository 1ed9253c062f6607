package balance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/flexlink/flexlink/fabric"
)

// This file is the test bench: links simulated from a true model (latency,
// bandwidth that may change at given calls, seeded multiplicative noise),
// and an optimum computed independently of the planner (bisection on the
// finish time over every subset of links, not the planner's water filling).

// simLink is one simulated link: what the planner is told (spec, the
// nominal prior) and what it really does.
type simLink struct {
	spec LinkSpec
	lat  time.Duration
	bw   float64
	// slow lists [from, to) call ranges where the bandwidth is divided by
	// factor (contention).
	slow []slowdown
}

type slowdown struct {
	from, to int
	factor   float64
}

func (l simLink) bwAt(call int) float64 {
	bw := l.bw
	for _, s := range l.slow {
		if call >= s.from && call < s.to {
			bw /= s.factor
		}
	}
	return bw
}

// nominal makes a link spec with an id equal to its index.
func nominal(id int, kind fabric.Kind, gbps float64, lat time.Duration) LinkSpec {
	return LinkSpec{ID: id, Kind: kind, Bandwidth: gbps * 1e9, Latency: lat}
}

// scenario is one simulation: links, message size, noise and length.
type scenario struct {
	name   string
	links  []simLink
	bytes  int
	align  int
	noise  float64 // each duration is multiplied by 1 + noise·U(−1,1)
	calls  int
	seed   uint64
	probes bool // profile every link with 2 sizes × 3 noisy probes first
	cfg    Config
	// settleWithin, when > 0, tightens maxConvergeCalls for this scenario.
	settleWithin int
}

// phases returns the calls at which the truth changes, starting with 0.
func (sc scenario) phases() []int {
	at := []int{0}
	for _, l := range sc.links {
		for _, s := range l.slow {
			at = append(at, s.from, s.to)
		}
	}
	return at
}

// step is one call of a simulation.
type step struct {
	call    int
	shares  []float64 // per link, as planned
	simTime float64   // seconds: noisy finish time of the call
	plan    float64   // seconds: noise-free finish time of the planned split
	opt     float64   // seconds: noise-free finish time of the best split
	best    []float64 // shares of the best split
}

// run drives planner p through the scenario: plan, simulate, observe.
func (sc scenario) run(p *Planner) []step {
	rng := rand.New(rand.NewPCG(sc.seed, 0x5eed))
	overhead := p.cfg.SplitOverhead.Seconds()
	var out []step
	for call := range sc.calls {
		parts := p.Split(sc.bytes, sc.align)
		st := step{call: call, shares: make([]float64, len(sc.links))}
		var obs []Observation
		used := 0
		for _, pt := range parts {
			l := sc.links[pt.Link]
			st.shares[pt.Link] += float64(pt.Len) / float64(sc.bytes)
			d := l.lat.Seconds() + float64(pt.Len)/l.bwAt(call)
			d *= 1 + sc.noise*(2*rng.Float64()-1)
			st.simTime = math.Max(st.simTime, d)
			used++
			obs = append(obs, Observation{Link: pt.Link, Bytes: int64(pt.Len), Duration: time.Duration(d * 1e9)})
		}
		st.simTime += overhead * float64(used-1)
		st.plan = sc.trueTime(call, st.shares, overhead)
		st.opt, st.best = sc.optimum(call, overhead)
		out = append(out, st)
		p.Observe(sc.bytes, obs)
	}
	return out
}

// probesFor profiles every link alone at two sizes, three times each.
func (sc scenario) probesFor() []Probe {
	if !sc.probes {
		return nil
	}
	rng := rand.New(rand.NewPCG(sc.seed, 0x9406e))
	var out []Probe
	for _, l := range sc.links {
		for _, b := range []int{1 << 20, 16 << 20} {
			for range 3 {
				d := (l.lat.Seconds() + float64(b)/l.bwAt(0)) * (1 + sc.noise*(2*rng.Float64()-1))
				out = append(out, Probe{Link: l.spec.ID, Bytes: int64(b), Duration: time.Duration(d * 1e9)})
			}
		}
	}
	return out
}

func (sc scenario) specs() []LinkSpec {
	var out []LinkSpec
	for _, l := range sc.links {
		out = append(out, l.spec)
	}
	return out
}

// trueTime is the noise-free finish time of shares at call.
func (sc scenario) trueTime(call int, shares []float64, overhead float64) float64 {
	t, used := 0.0, 0
	for i, s := range shares {
		if s > 0 {
			l := sc.links[i]
			t = math.Max(t, l.lat.Seconds()+s*float64(sc.bytes)/l.bwAt(call))
			used++
		}
	}
	return t + overhead*float64(used-1)
}

// optimum finds the best split at call by brute force: for every subset
// of links, bisect on the common finish time T until the bytes that the
// subset moves by T, Σ (T − lat)·bw, equal the message.
func (sc scenario) optimum(call int, overhead float64) (float64, []float64) {
	n := len(sc.links)
	B := float64(sc.bytes)
	bestT, best := math.Inf(1), []float64(nil)
	for set := 1; set < 1<<n; set++ {
		moved := func(T float64) float64 {
			s := 0.0
			for i, l := range sc.links {
				if set&(1<<i) != 0 {
					s += math.Max(0, T-l.lat.Seconds()) * l.bwAt(call)
				}
			}
			return s
		}
		lo, hi := 0.0, 1.0
		for moved(hi) < B {
			hi *= 2
		}
		for range 200 {
			mid := (lo + hi) / 2
			if moved(mid) < B {
				lo = mid
			} else {
				hi = mid
			}
		}
		shares := make([]float64, n)
		used := 0
		for i, l := range sc.links {
			if set&(1<<i) != 0 {
				shares[i] = math.Max(0, hi-l.lat.Seconds()) * l.bwAt(call) / B
				if shares[i] > 0 {
					used++
				}
			}
		}
		if T := hi + overhead*float64(used-1); T < bestT {
			bestT, best = T, shares
		}
	}
	return bestT, best
}

// golden renders a trace for testdata/*.golden: one line per call with the
// shares, the simulated time and how far the plan is from the optimum.
func (sc scenario) golden(tr []step) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: %d bytes, align %d, noise ±%.0f%%, seed %d, probes %v\n", sc.name, sc.bytes, sc.align, sc.noise*100, sc.seed, sc.probes)
	for _, l := range sc.links {
		fmt.Fprintf(&b, "# link %d %s: prior %.1f GB/s %v, true %.1f GB/s %v", l.spec.ID, l.spec.Kind, l.spec.Bandwidth/1e9, l.spec.Latency, l.bw/1e9, l.lat)
		for _, s := range l.slow {
			fmt.Fprintf(&b, ", /%g in calls [%d,%d)", s.factor, s.from, s.to)
		}
		b.WriteString("\n")
	}
	b.WriteString("# call shares... sim_us plan/opt\n")
	for _, st := range tr {
		fmt.Fprintf(&b, "%3d", st.call)
		for _, s := range st.shares {
			fmt.Fprintf(&b, " %.4f", s)
		}
		fmt.Fprintf(&b, " %8.1f %.4f\n", st.simTime*1e6, st.plan/st.opt)
	}
	return b.String()
}
