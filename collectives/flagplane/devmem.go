package flagplane

import (
	"sync"

	"github.com/flexlink/flexlink/gpu"
)

// Which communicators of this process hold a device's full-size flag
// regions. The first communicator to make a small region on a device gets
// the configured one, the first to make a large region the configured
// large one; the others get a secondary region (lazy.go). A claim is
// held from the proposal until the plane frees its regions (Close,
// Release) or the ranks decline it. Only sizes depend on it: no region is
// shared, so a wrong guess costs speed or memory, never a result.
var devRegions = struct {
	mu   sync.Mutex
	held map[*gpu.Device]*[2]int // holders of the primary small and large region (0 or 1 each)
}{held: map[*gpu.Device]*[2]int{}}

// claimRegion claims dev's primary region i (0 small, 1 large) and reports
// whether it was free.
func claimRegion(dev *gpu.Device, i int) bool {
	devRegions.mu.Lock()
	defer devRegions.mu.Unlock()
	h := devRegions.held[dev]
	if h == nil {
		h = &[2]int{}
		devRegions.held[dev] = h
	}
	if h[i] > 0 {
		return false
	}
	h[i]++
	return true
}

// releaseRegion gives back a claim of claimRegion.
func releaseRegion(dev *gpu.Device, i int) {
	devRegions.mu.Lock()
	defer devRegions.mu.Unlock()
	h := devRegions.held[dev]
	if h == nil || h[i] == 0 {
		return
	}
	h[i]--
	if h[0] == 0 && h[1] == 0 {
		delete(devRegions.held, dev)
	}
}
