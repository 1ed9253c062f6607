package collectives

import (
	"fmt"

	"github.com/flexlink/flexlink/internal/settings"
)

// Algorithm names accepted by Config.Algo (and FLEXLINK_ALGO).
const (
	AlgoAuto = "auto" // by size: latency-optimised below Threshold, bandwidth-optimised at or above (allreduce by host where Config.Hosts allows)
	AlgoRing = "ring" // bandwidth-optimised: one ring over every rank (allreduce never by host), chain broadcast/reduce
	AlgoRD   = "rd"   // latency-optimised: recursive doubling, binomial trees
	AlgoHier = "hier" // bandwidth-optimised, allreduce by host where Config.Hosts allows (allReduceHier), at every size
)

// Defaults used for zero fields of a Config.
const (
	DefaultThreshold = 64 << 10
	// DefaultChunkBytes is FLEXLINK_CHUNK_BYTES's default: 4 MiB chunks
	// moved more than 1 MiB ones across emulated hosts in every collective
	// measured (docs/PERF.md, 2026-11-28), and within a host once large
	// messages go single-copy (docs/PERF.md, "Host memory, eighteenth
	// session").
	DefaultChunkBytes = 4 << 20
	// MaxChunkBytes caps ChunkBytes so that an operation's scratch (at most
	// a dozen chunks, see call.go) stays under 64 MiB.
	MaxChunkBytes = 4 << 20
)

// Config chooses algorithms and pipelining. Every rank of a communicator
// must use the same Config: the algorithm is part of every message's
// header, so ranks that disagree fail with errs.ErrMismatch.
type Config struct {
	// Algo is auto, ring or rd ("" means auto).
	Algo string
	// Threshold is the message size in bytes below which auto uses the
	// latency-optimised algorithm (0: ring for every size).
	Threshold int
	// ChunkBytes is the pipeline chunk of ring and chain algorithms and
	// the piece size of tree algorithms (0: DefaultChunkBytes; larger than
	// MaxChunkBytes: MaxChunkBytes). Scratch per operation is a few chunks.
	ChunkBytes int
	// Rings are the rings (channels) that ring allreduce, reduce-scatter
	// and allgather run at once, each a permutation of the communicator's
	// ranks in the order data travels (rank Rings[l][i] sends to
	// Rings[l][i+1]); each ring carries about 1/len(Rings) of the bytes.
	// Nil or empty: one ring in rank order. The communicator core sets
	// them from its members' hosts and NICs (proxy/pxn.Rings), so that
	// every rail of a host carries a ring's cross-host hop.
	Rings [][]int
	// Hosts are the communicator's ranks by host (each host's in the order
	// its ring runs), when they span several: allreduce then reduces on
	// each host first, sends each reduced share between hosts from the
	// rank holding it, and gathers on the host (allReduceHier), when every
	// host has as many ranks, at least 2. Nil: the ranks' hosts are not
	// known, or they are one. The communicator core sets them.
	Hosts [][]int
}

// DefaultConfig is what an empty environment gives.
func DefaultConfig() Config {
	return Config{Algo: AlgoAuto, Threshold: DefaultThreshold, ChunkBytes: DefaultChunkBytes}
}

// ConfigFromEnv reads FLEXLINK_ALGO, FLEXLINK_ALGO_THRESHOLD and
// FLEXLINK_CHUNK_BYTES.
func ConfigFromEnv(env settings.Env) (Config, error) {
	c := Config{Algo: env.String("FLEXLINK_ALGO")}
	var err error
	if c.Threshold, err = env.Int("FLEXLINK_ALGO_THRESHOLD"); err != nil {
		return Config{}, err
	}
	if c.ChunkBytes, err = env.Int("FLEXLINK_CHUNK_BYTES"); err != nil {
		return Config{}, err
	}
	if err := c.validate(); err != nil {
		return Config{}, fmt.Errorf("settings: %w", err)
	}
	return c, nil
}

func (c Config) validate() error {
	switch c.Algo {
	case "", AlgoAuto, AlgoRing, AlgoRD, AlgoHier:
	default:
		return fmt.Errorf("FLEXLINK_ALGO=%q: want auto, ring, rd or hier", c.Algo)
	}
	if c.Threshold < 0 {
		return fmt.Errorf("FLEXLINK_ALGO_THRESHOLD=%d: must not be negative", c.Threshold)
	}
	if c.ChunkBytes < 0 {
		return fmt.Errorf("FLEXLINK_CHUNK_BYTES=%d: must not be negative", c.ChunkBytes)
	}
	return nil
}

// checkRings reports whether every ring is a permutation of 0..size-1.
func (c Config) checkRings(size int) error {
	for l, ring := range c.Rings {
		if len(ring) != size {
			return fmt.Errorf("collectives: ring %d has %d ranks, the communicator %d", l, len(ring), size)
		}
		seen := make([]bool, size)
		for _, r := range ring {
			if r < 0 || r >= size || seen[r] {
				return fmt.Errorf("collectives: ring %d (%v) is not an order of ranks 0..%d", l, ring, size-1)
			}
			seen[r] = true
		}
	}
	return nil
}

// latency reports whether a message of n bytes takes the latency-optimised
// algorithm.
func (c Config) latency(n int) bool {
	switch c.Algo {
	case AlgoRD:
		return true
	case AlgoRing, AlgoHier:
		return false
	}
	return n < c.Threshold
}

// byHost is rank's rings for a bandwidth-optimised allreduce by host
// (allReduceHier), or nil when it does not go by host.
func (c Config) byHost(rank int) *hierRings {
	if c.Algo == AlgoRing || c.Algo == AlgoRD {
		return nil
	}
	return c.hierRings(rank)
}

// checkHosts reports whether Hosts hold each of 0..size-1 once.
func (c Config) checkHosts(size int) error {
	if c.Hosts == nil {
		return nil
	}
	seen := make([]bool, size)
	n := 0
	for _, h := range c.Hosts {
		for _, r := range h {
			if r < 0 || r >= size || seen[r] {
				return fmt.Errorf("collectives: hosts %v are not a partition of ranks 0..%d", c.Hosts, size-1)
			}
			seen[r] = true
			n++
		}
	}
	if n != size {
		return fmt.Errorf("collectives: hosts %v are not a partition of ranks 0..%d", c.Hosts, size-1)
	}
	return nil
}

// chunkElems is the pipeline chunk in elements of size esize (at least 1).
func (c Config) chunkElems(esize int) int {
	cb := c.ChunkBytes
	if cb <= 0 {
		cb = DefaultChunkBytes
	}
	return max(1, min(cb, MaxChunkBytes)/esize)
}
