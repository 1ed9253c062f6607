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
	mu      sync.Mutex
	cfg     Config
	links   linkSet
	classes []class
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
	p := &Planner{cfg: cfg, links: linkSet{specs: slices.Clone(links), excluded: make([]bool, len(links))}}
	p.links.profile = make([]model, len(links))
	probed := make([]int, len(links))
	for i, s := range links {
		var mine []Probe
		for _, pr := range probes {
			if pr.Link == s.ID {
				mine = append(mine, pr)
			}
		}
		p.links.profile[i], probed[i] = fitModel(priorModel(s), mine), len(mine)
	}
	p.classes = make([]class, cfg.numClasses())
	for k := range p.classes {
		c := &p.classes[k]
		c.est, c.watch = slices.Clone(p.links.profile), watches(p.links.profile)
		for i := range c.watch {
			c.watch[i].n = probed[i] // a nominal prior counts for nothing
		}
		c.shares = p.links.target(c.est, cfg.classBytes(k), cfg.SplitOverhead.Seconds()).shares
	}
	p.threshold = p.links.findThreshold(p.cfg.SplitOverhead.Seconds())
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
func (p *Planner) Links() []LinkSpec { return slices.Clone(p.links.specs) }

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
			if t := m.time(float64(bytes)); !p.links.excluded[i] && t < bt {
				best, bt = i, t
			}
		}
		if best < 0 {
			return nil
		}
		return []Share{{Link: p.links.specs[best].ID, Fraction: 1}}
	}
	var out []Share
	for i, s := range c.shares {
		if s > 0 && !p.links.excluded[i] {
			out = append(out, Share{Link: p.links.specs[i].ID, Fraction: s})
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
	measured := make([]bool, len(p.links.specs))
	jumped := false
	for _, o := range obs {
		i := p.links.index(o.Link)
		if i < 0 || p.links.excluded[i] || o.Bytes <= 0 || o.Duration <= 0 {
			continue
		}
		measured[i] = true
		jumped = c.update(&p.cfg, i, float64(o.Bytes), o.Duration.Seconds()) || jumped
	}
	for i := range p.links.specs {
		if !measured[i] {
			// Geometric decay: a link measured 50× slower than its profile
			// comes back within tens of calls, not hundreds.
			c.est[i].cost *= math.Pow(p.links.profile[i].cost/c.est[i].cost, p.cfg.Decay)
			c.watch[i].n = 0 // a guess now, not a measurement
		}
	}
	step := p.cfg.Step
	if jumped {
		// A change of regime is not noise: damping it would only make the
		// transfers wait on the slowed link for more calls.
		step = 1
	}
	c.step(&p.links, &p.cfg, float64(max(bytes, 1)), step)
}

// Exclude takes a failed link out of every split at once: each class is
// re-planned over the remaining links without damping (a dead link cannot
// wait for a moving average). Unknown ids are ignored.
func (p *Planner) Exclude(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.links.index(id)
	if i < 0 || p.links.excluded[i] {
		return
	}
	p.links.excluded[i] = true
	p.replan()
}

// Admit brings an excluded link back. Its estimates restart from the
// profile (what it did before failing says little about the repaired
// link) and every class is re-planned with it.
func (p *Planner) Admit(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.links.index(id)
	if i < 0 || !p.links.excluded[i] {
		return
	}
	p.links.excluded[i] = false
	for k := range p.classes {
		c := &p.classes[k]
		c.est[i], c.watch[i] = p.links.profile[i], watch{last: p.links.profile[i].cost}
	}
	p.replan()
}

// Excluded reports whether link id is excluded.
func (p *Planner) Excluded(id int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.links.index(id)
	return i >= 0 && p.links.excluded[i]
}

func (p *Planner) replan() {
	for k := range p.classes {
		c := &p.classes[k]
		if t := p.links.target(c.est, p.cfg.classBytes(k), p.cfg.SplitOverhead.Seconds()); t.shares != nil {
			c.shares = t.shares
		} else {
			clear(c.shares)
		}
	}
	p.threshold = p.links.findThreshold(p.cfg.SplitOverhead.Seconds())
}

// Split divides a message of bytes into parts by the current Shares. The
// parts cover [0, bytes) exactly, in link order, without overlap; every
// boundary between parts is a multiple of align (4096 keeps pages whole
// for copy engines, an element size keeps elements whole), so only the
// last part's length may be unaligned. A link whose share rounds to
// nothing gets no part. A message of zero bytes gets one empty part on the
// link Shares picks. It returns nil when every link is excluded.
func (p *Planner) Split(bytes, align int) []Part {
	return p.SplitAs(bytes, bytes, align)
}

// SplitAs divides bytes, a range of a message of class bytes, by the
// shares of messages of that size (Split's rules otherwise): a part of a
// large message goes by what the planner learnt of the message's size,
// not of the part's.
func (p *Planner) SplitAs(class, bytes, align int) []Part {
	return divide(p.Shares(class), bytes, align)
}
