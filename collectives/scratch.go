package collectives

import "sync"

// scratchCache keeps freed host scratch for the next call of the same
// size. A collective's scratch (receive slots, partial sums) is a few
// chunks per call; allocated anew, every call pays for zeroing them and,
// once the runtime has returned the pages to the kernel, for faulting
// them in again as the first receive writes them (measured: a 2-rank
// 4 MiB allreduce over tcp went from 1.6 to 2.2 GB/s, docs/PERF.md).
// Buffers under scratchMin are left to the allocator; at most scratchMax
// bytes are kept.
type scratchCache struct {
	mu    sync.Mutex
	free  map[int][][]byte // by length
	bytes int
}

const (
	scratchMin = 64 << 10
	scratchMax = 128 << 20
)

func newScratchCache() *scratchCache { return &scratchCache{free: map[int][][]byte{}} }

// get returns a kept buffer of n bytes, or nil (also on a nil cache).
func (c *scratchCache) get(n int) []byte {
	if c == nil || n < scratchMin {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.free[n]
	if len(l) == 0 {
		return nil
	}
	b := l[len(l)-1]
	c.free[n] = l[:len(l)-1]
	c.bytes -= n
	return b
}

// put keeps b when it is large enough and the cache has room.
func (c *scratchCache) put(b []byte) {
	n := len(b)
	if c == nil || n < scratchMin || cap(b) != n {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bytes+n > scratchMax {
		return
	}
	c.free[n] = append(c.free[n], b)
	c.bytes += n
}
