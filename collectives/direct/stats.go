package direct

import (
	"sync"

	"github.com/flexlink/flexlink/fabric"
)

// linkStats counts the bytes a call pushes over each link (NVLink, then
// each staged share) and keeps the last finished call's counts for
// LinkShares, which another goroutine may read while the next call runs.
// The lanes and the shares add to the current call's counts; the plane
// begins and ends the call; the flag plane sets a finished call's counts
// whole.
type linkStats struct {
	n     int                   // links counted: NVLink and the shares (set at setup)
	kinds [1 + maxShares]string // their names in LinkShares (set at setup)
	cur   [1 + maxShares]int64  // this call's pushed bytes (run lock only)
	mu    sync.Mutex
	last  [1 + maxShares]int64 // the last finished call's
}

// linkNVLink is NVLink's index in linkStats; share k's is 1+k.
const linkNVLink = 0

func (st *linkStats) begin() { st.cur = [1 + maxShares]int64{} }

func (st *linkStats) add(link, n int) { st.cur[link] += int64(n) }

// end publishes the finished call's bytes per link.
func (st *linkStats) end() {
	st.mu.Lock()
	st.last = st.cur
	st.mu.Unlock()
}

// set publishes a flag call's counts, which were not added up in cur:
// nvl over NVLink, pcie over the flag kernels' PCIe part, counted as the
// PCIe share's link.
func (st *linkStats) set(nvl, pcie int64) {
	st.mu.Lock()
	st.last = [1 + maxShares]int64{nvl}
	for k := 1; k < st.n; k++ {
		if st.kinds[k] == string(fabric.KindPCIe) {
			st.last[k] = pcie
		}
	}
	st.mu.Unlock()
}

// shares is the last call's pushed bytes per link kind as fractions
// (empty when it pushed nothing): nvlink and every share of the plane.
func (st *linkStats) shares() map[string]float64 {
	st.mu.Lock()
	last := st.last
	st.mu.Unlock()
	out := map[string]float64{}
	var total int64
	for _, b := range last[:st.n] {
		total += b
	}
	if total > 0 {
		for k, b := range last[:st.n] {
			out[st.kinds[k]] = float64(b) / float64(total)
		}
	}
	return out
}
