package balance

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/flexlink/flexlink/fabric"
)

// MaxLinks is the most links one planner splits across. The best set of
// links is found by trying every subset, which stays cheap up to here; no
// GPU pair has more distinct paths than this.
const MaxLinks = 8

// LinkSpec describes one link before anything is measured.
type LinkSpec struct {
	// ID names the link in Shares, Parts and Observations. The multilink
	// channel uses the link's index in its slice of links.
	ID   int
	Kind fabric.Kind
	// Bandwidth (bytes/s, one direction) and Latency are the topology's
	// nominal figures: the prior for a link that was not probed.
	Bandwidth float64
	Latency   time.Duration
}

// Observation is one link's part of one transfer: how many bytes it moved
// and how long that took, timed by the caller (the planner reads no clock).
// For parts that start together Duration runs from the common start to the
// part's completion; a caller that queues parts behind each other on a link
// should time from the moment the link became free for this part.
type Observation struct {
	Link     int
	Bytes    int64
	Duration time.Duration
}

// Probe is an Observation made while profiling: one transfer over one link
// alone (stage 1).
type Probe = Observation

// Share is the fraction of a message's bytes that goes over one link.
type Share struct {
	Link     int
	Fraction float64
}

// FractionOf is link's fraction in s: 0 where s has no share for it.
func FractionOf(s []Share, link int) float64 {
	for _, x := range s {
		if x.Link == link {
			return x.Fraction
		}
	}
	return 0
}

// SameShares reports whether every link's fraction differs by less than
// tol between a and b (a link absent from one has fraction 0 there).
func SameShares(a, b []Share, tol float64) bool {
	for _, s := range [][]Share{a, b} {
		for _, x := range s {
			if math.Abs(FractionOf(a, x.Link)-FractionOf(b, x.Link)) >= tol {
				return false
			}
		}
	}
	return true
}

// Config tunes the planner. Zero fields take the defaults of
// DefaultConfig; the fields are exported so that a cached State carries
// the configuration it was learnt with.
type Config struct {
	// Size classes are powers of two from MinClassBytes to MaxClassBytes;
	// each keeps its own shares and estimates because a link's effective
	// bandwidth depends on the transfer size beyond what the linear model
	// captures (a staged PCIe copy pipelines better at large sizes).
	MinClassBytes int `json:"min_class_bytes"`
	MaxClassBytes int `json:"max_class_bytes"`
	// SplitOverhead is the fixed cost of every link beyond the first in a
	// split: the split descriptor, a second launch, the join. It sets the
	// size below which only one link is used.
	SplitOverhead time.Duration `json:"split_overhead"`
	// Alpha weighs a new measurement in the cost estimate: smaller is
	// smoother under noise, larger follows drift sooner.
	Alpha float64 `json:"alpha"`
	// JumpRatio separates noise from a change of regime: a measurement
	// more than this far (relative) from the estimate is not averaged in.
	// A slower one moves the estimate at once, provisionally (the next
	// split hedges between the old and the new estimate, and the next
	// measurement keeps or undoes the jump: a lone outlier such as a page
	// fault costs one hedged call); a faster one is held until a second
	// confirms it.
	JumpRatio float64 `json:"jump_ratio"`
	// Step is the fraction of the way toward the target split the shares
	// move in one call (damping).
	Step float64 `json:"step"`
	// Deadband: the shares move only when the target split is predicted to
	// finish more than this fraction sooner than the current one
	// (hysteresis).
	Deadband float64 `json:"deadband"`
	// Decay pulls, per call and geometrically, the estimate of a link that
	// was not measured toward its profile, so a link that lost its share
	// is tried again.
	Decay float64 `json:"decay"`
}

// DefaultConfig returns the configuration used for zero fields. The values
// were chosen with the simulations in this package's tests (see
// converge_test.go for what they must achieve).
func DefaultConfig() Config {
	return Config{
		MinClassBytes: 64 << 10,
		MaxClassBytes: 4 << 30,
		SplitOverhead: 10 * time.Microsecond,
		Alpha:         0.15,
		JumpRatio:     0.2,
		Step:          0.5,
		Deadband:      0.01,
		Decay:         0.1,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	pick := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	if c.MinClassBytes == 0 {
		c.MinClassBytes = d.MinClassBytes
	}
	if c.MaxClassBytes == 0 {
		c.MaxClassBytes = d.MaxClassBytes
	}
	if c.SplitOverhead == 0 {
		c.SplitOverhead = d.SplitOverhead
	}
	pick(&c.Alpha, d.Alpha)
	pick(&c.JumpRatio, d.JumpRatio)
	pick(&c.Step, d.Step)
	pick(&c.Deadband, d.Deadband)
	pick(&c.Decay, d.Decay)
	return c
}

func (c Config) validate() error {
	pow2 := func(n int) bool { return n > 0 && n&(n-1) == 0 }
	in01 := func(v float64) bool { return v > 0 && v <= 1 }
	switch {
	case !pow2(c.MinClassBytes) || !pow2(c.MaxClassBytes) || c.MaxClassBytes < c.MinClassBytes:
		return fmt.Errorf("balance: size classes %d..%d: want powers of two, min <= max", c.MinClassBytes, c.MaxClassBytes)
	case c.SplitOverhead < 0:
		return fmt.Errorf("balance: negative split overhead %v", c.SplitOverhead)
	case !in01(c.Alpha) || !in01(c.Step) || !in01(c.Decay):
		return fmt.Errorf("balance: alpha %g, step %g and decay %g must lie in (0,1]", c.Alpha, c.Step, c.Decay)
	case c.JumpRatio <= 0 || c.Deadband < 0:
		return fmt.Errorf("balance: jump ratio %g must be > 0 and deadband %g >= 0", c.JumpRatio, c.Deadband)
	}
	return nil
}

// numClasses is how many size classes c has.
func (c Config) numClasses() int {
	return bits.Len(uint(c.MaxClassBytes / c.MinClassBytes)) // min, 2·min, …, max
}

// classOf returns the size class of a message: class 0 holds messages up to
// MinClassBytes, class k those in (MinClassBytes·2^(k−1), MinClassBytes·2^k],
// the last class everything above.
func (c Config) classOf(bytes int) int {
	if bytes <= c.MinClassBytes {
		return 0
	}
	k := bits.Len(uint((bytes - 1) / c.MinClassBytes))
	return min(k, c.numClasses()-1)
}

// classBytes is the size a class's initial shares are planned for: the
// geometric middle of its range.
func (c Config) classBytes(k int) float64 {
	return float64(c.MinClassBytes) * float64(uint(1)<<k) / 1.4142135623730951
}
