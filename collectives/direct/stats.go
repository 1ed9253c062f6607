package direct

import (
	"sync"

	"github.com/flexlink/flexlink/fabric/pcieshare"
)

// linkStats counts the bytes a call pushes over each link (NVLink, PCIe,
// and the NIC when the net part is on) and keeps the last finished call's
// counts for LinkShares, which another goroutine may read while the next
// call runs. The lanes and the PCIe and net parts add to the current
// call's counts; the plane begins and ends the call; the flag plane sets a
// finished call's counts whole.
type linkStats struct {
	cur  [3]int64 // this call's pushed bytes: nvlink, pcie, net (run lock only)
	net  bool     // the net part is on: LinkShares reports "net" (set at setup)
	mu   sync.Mutex
	last [3]int64 // the last finished call's
}

const (
	linkNVLink = pcieshare.LinkNVLink // link ids, in linkStats and for the planners
	linkPCIe   = pcieshare.LinkPCIe
	linkNet    = pcieshare.LinkRider // the net part rides with the PCIe pairs
)

func (st *linkStats) begin() { st.cur = [3]int64{} }

func (st *linkStats) add(link, n int) { st.cur[link] += int64(n) }

// end publishes the finished call's bytes per link.
func (st *linkStats) end() {
	st.mu.Lock()
	st.last = st.cur
	st.mu.Unlock()
}

// set publishes a finished call's counts that were not added up in cur.
func (st *linkStats) set(nvl, pcie int64) {
	st.mu.Lock()
	st.last = [3]int64{nvl, pcie}
	st.mu.Unlock()
}

// shares is the last call's pushed bytes per link kind as fractions
// (empty when it pushed nothing); "net" only when the net part is on.
func (st *linkStats) shares() map[string]float64 {
	st.mu.Lock()
	last := st.last
	st.mu.Unlock()
	out := map[string]float64{}
	if total := float64(last[linkNVLink] + last[linkPCIe] + last[linkNet]); total > 0 {
		out["nvlink"] = float64(last[linkNVLink]) / total
		out["pcie"] = float64(last[linkPCIe]) / total
		if st.net {
			out["net"] = float64(last[linkNet]) / total
		}
	}
	return out
}
