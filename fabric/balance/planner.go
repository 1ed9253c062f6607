package balance

import (
	"fmt"
	"math"
	"slices"
	"sync"
)

// Planner holds the shares of every size class and the estimates they were
// computed from. It is deterministic: the same calls in the same order give
// the same shares. Its methods are safe for concurrent use (a mutex, no
// goroutines), so one planner may serve a channel's concurrent sends.
type Planner struct {
	mu       sync.Mutex
	cfg      Config
	specs    []LinkSpec
	profile  []model // stage 1 result per link: the prior of stage 2
	excluded []bool
	classes  []class
	// threshold: below this many bytes one link is used (from the profile).
	threshold int
}

// class is one size class's stage-2 state, slices indexed like specs.
type class struct {
	est    []model // cost estimates (lat is the profile's)
	watch  []watch
	shares []float64
}

// NewPlanner builds a planner for links from a stage-1 profile: probes
// (any number per link, of one or more sizes) replace a link's nominal
// figures; links without probes keep them. cfg's zero fields take
// DefaultConfig's values.
func NewPlanner(links []LinkSpec, probes []Probe, cfg Config) (*Planner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := validateSpecs(links); err != nil {
		return nil, err
	}
	p := &Planner{cfg: cfg, specs: slices.Clone(links), excluded: make([]bool, len(links))}
	p.profile = make([]model, len(links))
	probed := make([]int, len(links))
	for i, s := range links {
		var mine []Probe
		for _, pr := range probes {
			if pr.Link == s.ID {
				mine = append(mine, pr)
			}
		}
		p.profile[i], probed[i] = fitModel(priorModel(s), mine), len(mine)
	}
	p.classes = make([]class, cfg.numClasses())
	for k := range p.classes {
		c := &p.classes[k]
		c.est, c.watch = slices.Clone(p.profile), watches(p.profile)
		for i := range c.watch {
			c.watch[i].n = probed[i] // a nominal prior counts for nothing
		}
		c.shares = p.target(c.est, cfg.classBytes(k)).shares
	}
	p.threshold = p.findThreshold()
	return p, nil
}

func validateSpecs(links []LinkSpec) error {
	if len(links) == 0 || len(links) > MaxLinks {
		return fmt.Errorf("balance: %d links, want 1..%d", len(links), MaxLinks)
	}
	seen := map[int]bool{}
	for _, s := range links {
		if seen[s.ID] {
			return fmt.Errorf("balance: link id %d appears twice", s.ID)
		}
		seen[s.ID] = true
		if !(s.Bandwidth > 0) || math.IsInf(s.Bandwidth, 0) || s.Latency < 0 {
			return fmt.Errorf("balance: link %d (%s): nominal bandwidth %g B/s and latency %v must be positive and finite",
				s.ID, s.Kind, s.Bandwidth, s.Latency)
		}
	}
	return nil
}

// Links returns the link specs the planner was built with.
func (p *Planner) Links() []LinkSpec { return slices.Clone(p.specs) }

// Threshold is the message size in bytes from which a split over more than
// one link is predicted to finish sooner than the best single link (from
// the stage-1 profile and SplitOverhead); math.MaxInt when never.
func (p *Planner) Threshold() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.threshold
}

// Shares returns how a message of bytes is split: one entry per link that
// gets bytes, in the order of the planner's links, fractions summing to 1.
// Below the Threshold it is the single link predicted fastest for that
// size. It returns nil when every link is excluded.
func (p *Planner) Shares(bytes int) []Share {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sharesLocked(bytes)
}

func (p *Planner) sharesLocked(bytes int) []Share {
	c := &p.classes[p.cfg.classOf(bytes)]
	if bytes < p.threshold {
		best, bt := -1, math.Inf(1)
		for i, m := range c.est {
			if t := m.time(float64(bytes)); !p.excluded[i] && t < bt {
				best, bt = i, t
			}
		}
		if best < 0 {
			return nil
		}
		return []Share{{Link: p.specs[best].ID, Fraction: 1}}
	}
	var out []Share
	for i, s := range c.shares {
		if s > 0 && !p.excluded[i] {
			out = append(out, Share{Link: p.specs[i].ID, Fraction: s})
		}
	}
	return out
}

// Observe feeds back one transfer of bytes (the whole message) and the
// measurement of each link's part. Observations of links the planner does
// not know, or has excluded, are ignored. Observe moves the shares of the
// message's size class (stage 2, see the package comment).
func (p *Planner) Observe(bytes int, obs []Observation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.cfg.classOf(bytes)
	c := &p.classes[k]
	measured := make([]bool, len(p.specs))
	jumped := false
	for _, o := range obs {
		i := p.index(o.Link)
		if i < 0 || p.excluded[i] || o.Bytes <= 0 || o.Duration <= 0 {
			continue
		}
		measured[i] = true
		jumped = p.update(c, i, float64(o.Bytes), o.Duration.Seconds()) || jumped
	}
	for i := range p.specs {
		if !measured[i] {
			// Geometric decay: a link measured 50× slower than its profile
			// comes back within tens of calls, not hundreds.
			c.est[i].cost *= math.Pow(p.profile[i].cost/c.est[i].cost, p.cfg.Decay)
			c.watch[i].n = 0 // a guess now, not a measurement
		}
	}
	step := p.cfg.Step
	if jumped {
		// A change of regime is not noise: damping it would only make the
		// transfers wait on the slowed link for more calls.
		step = 1
	}
	p.step(c, float64(max(bytes, 1)), step)
}

// step moves class c's shares the fraction frac of the way toward the best
// split for bytes.
func (p *Planner) step(c *class, bytes, frac float64) {
	tgt := p.target(c.est, bytes)
	if tgt.shares == nil {
		return
	}
	hedged := false
	if h, ok := p.hedge(c, bytes); ok {
		tgt, frac, hedged = h, 1, true
	}
	overhead := p.cfg.SplitOverhead.Seconds()
	now := finishTime(c.est, p.live(c.shares), bytes, overhead)
	if !hedged && now <= tgt.time*(1+p.cfg.Deadband) {
		return // hysteresis: not worth moving
	}
	// pess is, for each link whose share is capped below, the pessimistic
	// cost its capped share is sized with (0: not capped).
	next, pess := make([]float64, len(c.shares)), make([]float64, len(c.shares))
	sum := 0.0
	for i, s := range p.live(c.shares) {
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
			next[i] = math.Min(s, math.Max(0, T-c.est[i].lat)/(pess[i]*(1+p.cfg.JumpRatio))/bytes)
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

// target is the best split for bytes under estimates m over live links.
func (p *Planner) target(m []model, bytes float64) plan {
	usable := make([]bool, len(m))
	for i := range usable {
		usable[i] = !p.excluded[i]
	}
	return bestPlan(m, usable, bytes, p.cfg.SplitOverhead.Seconds())
}

// live returns shares with excluded links zeroed.
func (p *Planner) live(shares []float64) []float64 {
	out := slices.Clone(shares)
	for i := range out {
		if p.excluded[i] {
			out[i] = 0
		}
	}
	return out
}

func (p *Planner) index(id int) int {
	return slices.IndexFunc(p.specs, func(s LinkSpec) bool { return s.ID == id })
}
