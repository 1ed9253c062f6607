package direct

import "github.com/flexlink/flexlink/collectives/plane"

// HostWaits reports whether Do would wait on the host for o
// (plane.HostWaiter), so that a DeviceComm with enqueue-and-return hands
// such calls to its engine (collectives/plane/async.go). It is pure and
// runs while no call is in flight. Calls that do not wait: captures, one
// rank's copies, and the flag kernels once their region is made (making
// it is two host all-gathers with the peers). Everything else waits: the
// leader path of ranks sharing a GPU (for the stream to drain and for the
// leader), and the handshake paths (ready and done messages).
func (p *directPlane) HostWaits(o *plane.Op) bool {
	switch {
	case o.Capture != 0:
		return false
	case p.n == 1 && o.Kind != plane.Group && o.Kind != plane.AllToAllv:
		return false
	case p.shared != nil && o.Kind != plane.Group:
		return true
	case o.Kind == plane.AllToAll && overlaps(o.Send, o.Recv):
		return true // staged in place through the scratch, then maybe a handshake
	case p.flag.Takes(o):
		return !p.flag.RegionReady(o.Count * o.DT.Size())
	case p.flag.P2P(o):
		return !p.flag.RegionReady(o.P2P[0].Buf.Len())
	}
	return true
}

var _ plane.HostWaiter = (*directPlane)(nil)
