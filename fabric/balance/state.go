package balance

import (
	"fmt"
	"math"
	"slices"

	"github.com/flexlink/flexlink/internal/errs"
)

// StateVersion is the version of State's JSON form; LoadProfile refuses
// other versions rather than guess.
const StateVersion = 1

// State is everything a planner has learnt, as plain data: written to the
// profile cache so that the next job between the same pair of GPUs starts
// from measured shares instead of nominal ones, and dumped with a bug
// report so that the planner's decisions replay on a machine without GPUs.
// Exclusions are not part of it: a failure belongs to a run, not to the
// hardware.
type State struct {
	Version int         `json:"version"`
	Config  Config      `json:"config"`
	Links   []LinkState `json:"links"`
	// Classes are in size order; Classes[k] holds messages up to
	// Config.MinClassBytes·2^k bytes.
	Classes []ClassState `json:"classes"`
}

// LinkState is one link: its spec and its stage-1 profile. Costs are kept
// in the planner's own units (seconds, seconds per byte) so that a restored
// planner decides exactly as the saved one would have.
type LinkState struct {
	Spec           LinkSpec `json:"spec"`
	LatencySec     float64  `json:"latency_s"`
	SecondsPerByte float64  `json:"s_per_byte"` // 1/bandwidth
}

// ClassState is one size class: shares and estimates per link, in the
// order of State.Links.
type ClassState struct {
	UpTo   int             `json:"up_to"`
	Shares []float64       `json:"shares"`
	Links  []EstimateState `json:"links"`
}

// EstimateState is one link's estimate in one class and what the change
// detector remembers (see class.update in estimate.go).
type EstimateState struct {
	SecondsPerByte float64 `json:"s_per_byte"`
	Last           float64 `json:"last,omitempty"`
	Prev           float64 `json:"prev,omitempty"`
	Faster         float64 `json:"faster,omitempty"`
	N              int     `json:"n,omitempty"`
	Before         int     `json:"before,omitempty"`
}

// State returns a copy of the planner's state.
func (p *Planner) State() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := State{Version: StateVersion, Config: p.cfg}
	for i, spec := range p.links.specs {
		s.Links = append(s.Links, LinkState{Spec: spec, LatencySec: p.links.profile[i].lat, SecondsPerByte: p.links.profile[i].cost})
	}
	for k, c := range p.classes {
		cs := ClassState{UpTo: p.cfg.MinClassBytes << k, Shares: slices.Clone(c.shares)}
		for i, m := range c.est {
			w := c.watch[i]
			cs.Links = append(cs.Links, EstimateState{SecondsPerByte: m.cost, Last: w.last, Prev: w.prev, Faster: w.faster, N: w.n, Before: w.before})
		}
		s.Classes = append(s.Classes, cs)
	}
	return s
}

// Restore rebuilds a planner from a State for the given links. It fails
// with an error wrapping errs.ErrMismatch when the state was learnt for
// another set of links (ids or kinds differ), so a stale cache entry is
// noticed and the caller profiles afresh.
func Restore(s State, links []LinkSpec) (*Planner, error) {
	if s.Version != StateVersion {
		return nil, fmt.Errorf("balance: state version %d, this build reads %d: %w", s.Version, StateVersion, errs.ErrMismatch)
	}
	cfg := s.Config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := validateSpecs(links); err != nil {
		return nil, err
	}
	if len(s.Links) != len(links) {
		return nil, fmt.Errorf("balance: state has %d links, want %d: %w", len(s.Links), len(links), errs.ErrMismatch)
	}
	for i, l := range s.Links {
		if l.Spec.ID != links[i].ID || l.Spec.Kind != links[i].Kind {
			return nil, fmt.Errorf("balance: state link %d is %d (%s), want %d (%s): %w",
				i, l.Spec.ID, l.Spec.Kind, links[i].ID, links[i].Kind, errs.ErrMismatch)
		}
	}
	if len(s.Classes) != cfg.numClasses() {
		return nil, fmt.Errorf("balance: state has %d size classes, config implies %d: %w", len(s.Classes), cfg.numClasses(), errs.ErrMismatch)
	}
	p := &Planner{cfg: cfg, links: linkSet{specs: slices.Clone(links), excluded: make([]bool, len(links))}}
	finite := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) }
	for _, l := range s.Links {
		if !finite(l.SecondsPerByte) || l.LatencySec < 0 {
			return nil, fmt.Errorf("balance: state link %d: %g s/byte, latency %gs", l.Spec.ID, l.SecondsPerByte, l.LatencySec)
		}
		p.links.profile = append(p.links.profile, model{lat: l.LatencySec, cost: l.SecondsPerByte})
	}
	for k, cs := range s.Classes {
		if len(cs.Shares) != len(links) || len(cs.Links) != len(links) {
			return nil, fmt.Errorf("balance: state class %d: %d shares and %d estimates for %d links", k, len(cs.Shares), len(cs.Links), len(links))
		}
		c := class{shares: slices.Clone(cs.Shares)}
		sum := 0.0
		for i, e := range cs.Links {
			if !finite(e.SecondsPerByte) || cs.Shares[i] < 0 {
				return nil, fmt.Errorf("balance: state class %d link %d: %g s/byte, share %g", k, i, e.SecondsPerByte, cs.Shares[i])
			}
			c.est = append(c.est, model{lat: p.links.profile[i].lat, cost: e.SecondsPerByte})
			last := e.Last
			if !finite(last) {
				last = e.SecondsPerByte
			}
			c.watch = append(c.watch, watch{last: last, prev: e.Prev, faster: e.Faster, n: e.N, before: e.Before})
			sum += cs.Shares[i]
		}
		if math.Abs(sum-1) > 1e-6 {
			return nil, fmt.Errorf("balance: state class %d: shares sum to %g, not 1", k, sum)
		}
		p.classes = append(p.classes, c)
	}
	p.threshold = p.links.findThreshold(p.cfg.SplitOverhead.Seconds())
	return p, nil
}
