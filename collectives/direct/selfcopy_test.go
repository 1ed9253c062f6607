package direct

import (
	"fmt"
	"testing"

	"github.com/flexlink/flexlink/collectives/plane"
)

// A group's send and receive to the rank itself beside its entries to the
// peer (a gather's or scatter's root, an all-to-all over sends and
// receives) is copied inside the flag kernel where one runs, and ahead
// of the handshake path where not (CopyLocal): the bytes arrive
// whole either way, nothing past them is written, and a group of copies
// to itself alone meets no peer.
func TestGPUFakeFlagSelfCopy(t *testing.T) {
	rs, ctx := flagPair(t)
	pattern := func(src, n, salt int) []byte {
		return bytesOf(n, func(i int) byte { return byte(src*37 + i*3 + salt) })
	}
	for k, tc := range []struct {
		shape string // gather (root 0), scatter (root 1), alltoall, self (copies alone)
		bytes int
		flag  bool
	}{
		{"gather", 1000, true}, {"scatter", 4096, true}, {"alltoall", 16384, true}, {"gather", 1, true},
		{"gather", 16385, false}, {"scatter", 20000, false}, {"alltoall", 30000, false}, {"self", 3000, false},
	} {
		n := tc.bytes
		before := planeCalls(rs)
		errs2 := onRanks(rs, func(r *devRank) error {
			me, peer := r.c.Rank(), 1-r.c.Rank()
			// a holds this rank's two blocks of n bytes (block t for rank
			// t), b receives two blocks (block s from rank s), 0xEE past them.
			if err := r.s.Memset(r.b, 0xEE); err != nil {
				return err
			}
			if err := r.s.CopyHtoD(r.a.Sub(0, 2*n), pattern(me, 2*n, k)); err != nil {
				return err
			}
			blk := func(i int) (send, recv plane.P2P) {
				return plane.SendTo(i, r.a.Sub(i*n, n)), plane.RecvFrom(i, r.b.Sub(i*n, n))
			}
			var ops []plane.P2P
			var want [2]bool // which blocks of b this rank receives
			selfS, selfR := blk(me)
			switch tc.shape {
			case "gather": // root 0 receives every rank's block 0
				if me == 0 {
					ops = []plane.P2P{plane.SendTo(0, r.a.Sub(0, n)), selfR, plane.RecvFrom(1, r.b.Sub(n, n))}
					want = [2]bool{true, true}
				} else {
					ops = []plane.P2P{plane.SendTo(0, r.a.Sub(0, n))}
				}
			case "scatter": // root 1 sends block t to rank t
				s0, _ := blk(0)
				if me == 1 {
					ops = []plane.P2P{s0, selfS, plane.RecvFrom(1, r.b.Sub(n, n))}
					want[1] = true
				} else {
					ops = []plane.P2P{plane.RecvFrom(1, r.b.Sub(0, n))}
					want[0] = true
				}
			case "alltoall":
				ps, pr := blk(peer)
				ops = []plane.P2P{selfR, pr, ps, selfS}
				want = [2]bool{true, true}
			case "self":
				ops = []plane.P2P{selfS, selfR}
				want[me] = true
			}
			if err := r.dc.Group(ctx, r.s, ops...); err != nil {
				return err
			}
			got := make([]byte, 2*n+1)
			if err := r.s.CopyDtoH(got, r.b.Sub(0, 2*n+1)); err != nil {
				return err
			}
			if err := r.s.Synchronize(); err != nil {
				return err
			}
			for blkI := range 2 {
				from := blkI // block s of b comes from rank s (its block for this rank)
				src := pattern(from, 2*n, k)
				at := me * n
				if tc.shape == "gather" {
					at = 0
				}
				if tc.shape == "scatter" {
					from, src, at = 1, pattern(1, 2*n, k), blkI*n
				}
				for i := range n {
					w := byte(0xEE)
					if want[blkI] {
						w = src[at+i]
					}
					if g := got[blkI*n+i]; g != w {
						return fmt.Errorf("block %d byte %d = %#x, want %#x (from rank %d)", blkI, i, g, w, from)
					}
				}
			}
			if got[2*n] != 0xEE {
				return fmt.Errorf("the byte past the blocks was written: %#x", got[2*n])
			}
			return nil
		})
		for i, r := range rs {
			if errs2[i] != nil {
				t.Fatalf("%s %d bytes: rank %d: %v", tc.shape, n, i, errs2[i])
			}
			if tc.shape == "self" {
				if p := r.dc.Plane().(*directPlane); p.flag.State().Calls != before[i][0] || p.seq.calls != before[i][1] {
					t.Errorf("copies to itself alone: rank %d met its peer", i)
				}
				continue
			}
			checkPath(t, fmt.Sprintf("%s %d bytes", tc.shape, n), i, r, before[i], 0, tc.flag)
		}
	}
}
