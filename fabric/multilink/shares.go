package multilink

import (
	"math/bits"
	"slices"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
)

// shareStep is how far a link's share must move before OnShares hears of
// it again: the shares settle within a few messages and then jitter by
// less, so the log gets a line when they settle and when they move.
const shareStep = 0.02

// balancer is a channel's planner, with what it is told and what it said
// (c.mu held).
type balancer struct {
	planner  *balance.Planner
	links    []fabric.Link // the channel's: their rates and latencies
	onShares func(bytes int, shares []balance.Share)
	// reported holds, per size class, the shares last given to onShares.
	reported map[int][]balance.Share
}

// observe hands the planner the timings of a message of bytes, sent
// cleanly (no part resent), and reports its shares.
func (b *balancer) observe(bytes int, obs []balance.Observation) {
	if obs := b.rated(perLink(obs)); obs != nil { // nil: a link's rate is not known yet
		b.planner.Observe(bytes, obs)
	}
	b.noteShares(bytes)
}

// noteShares hands the planner's shares for messages of bytes to
// Options.OnShares: once per size class (powers of two) and again
// whenever a link's share moves by shareStep or more since the last
// report of that class.
func (b *balancer) noteShares(bytes int) {
	if b.onShares == nil {
		return
	}
	class := bits.Len(uint(bytes))
	now := b.planner.Shares(bytes)
	if last, ok := b.reported[class]; ok && balance.SameShares(last, now, shareStep) {
		return
	}
	if b.reported == nil {
		b.reported = map[int][]balance.Share{}
	}
	b.reported[class] = now
	b.onShares(bytes, now)
}

// PlannerConfig is the balancer configuration for a channel over links:
// balance.DefaultConfig, made noise-tolerant when a link is a network
// link (kind net or tcp). Over the network a part's time includes the
// receiver's posting, the peer's scheduling on shared cores and TCP's own
// pacing, so single timings scatter by tens of percent: there a
// measurement is a change of regime only beyond twice the estimate, the
// estimates average over more samples, the shares move in smaller steps,
// (Parts over links that measure their own rate are observed at that
// rate, see balancer.rated.)
func PlannerConfig(links []fabric.Link) balance.Config {
	cfg := balance.DefaultConfig()
	if OverNet(links) {
		cfg.JumpRatio = netJumpRatio
		cfg.Alpha = netAlpha
		cfg.Step = netStep
	}
	return cfg
}

// OverNet reports whether any of links is a network link (kind net or
// tcp).
func OverNet(links []fabric.Link) bool {
	return slices.ContainsFunc(links, func(l fabric.Link) bool {
		k := l.Props().Kind
		return k == fabric.KindNet || k == fabric.KindTCP
	})
}

const (
	netJumpRatio = 1.0
	netAlpha     = 0.1
	netStep      = 0.25
)

// perLink sums the observations of each link (a message with a tail has
// several parts on one link, whose service times follow one another): the
// planner learns a link's rate from its whole share of the message.
func perLink(obs []balance.Observation) []balance.Observation {
	out := obs[:0:0]
	for _, o := range obs {
		if o.Bytes <= 0 || o.Duration <= 0 {
			continue // the planner ignores such an observation: so does the sum
		}
		i := slices.IndexFunc(out, func(x balance.Observation) bool { return x.Link == o.Link })
		if i < 0 {
			out = append(out, o)
			continue
		}
		out[i].Bytes += o.Bytes
		out[i].Duration += o.Duration
	}
	return out
}
