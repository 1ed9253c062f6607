package direct

import (
	"fmt"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// The leader path's collectives (shared.go): every rank's buffers are on
// the leader's GPU (its own, or mapped from the other ranks), so each
// collective is a handful of single-GPU kernels on the leader's stream:
// reductions chained into one destination, then copies.
//
// A chain that reduces into rank r's recv starts with rank r's own send
// (r's block of it for a reduce-scatter): an in-place call's recv is that
// send, and the first kernel reads it before anything writes there.

// sharedCall is one call's buffers, for every rank: send[r] and recv[r]
// (nil where a rooted op gives rank r none), and AllToAllv's byte counts.
type sharedCall struct {
	o          *plane.Op // the leader's own op: kind, count, dtype, op, root
	n          int
	send, recv []*gpu.Buffer
	sb, rb     [][]int // AllToAllv: sb[r][j] bytes r sends j, rb[r][j] bytes r receives from j
}

// need checks that rank r gave a buffer of at least bytes for what.
func (sc *sharedCall) need(b *gpu.Buffer, r, bytes int, what string) error {
	if b == nil && bytes > 0 {
		return fmt.Errorf("rank %d gave no %s buffer for %s: %w", r, what, sc.o.Kind, errs.ErrMismatch)
	}
	if b != nil && b.Len() < bytes {
		return fmt.Errorf("rank %d's %s buffer has %d bytes, %s needs %d: %w", r, what, b.Len(), sc.o.Kind, bytes, errs.ErrMismatch)
	}
	return nil
}

// check validates every rank's buffers for the call (sizes come from the
// other ranks' messages, so a bad one must not reach a kernel).
func (sc *sharedCall) check() error {
	o, n := sc.o, sc.n
	blk := o.Count * o.DT.Size()
	sendB, recvB := blk, blk
	switch o.Kind {
	case plane.ReduceScatter:
		sendB = n * blk
	case plane.AllGather:
		recvB = n * blk
	case plane.AllToAll:
		sendB, recvB = n*blk, n*blk
	case plane.AllToAllv:
		return sc.checkV()
	}
	for r := 0; r < n; r++ {
		s, rv := sendB, recvB
		if (o.Kind == plane.Broadcast) && r != o.Root {
			s = 0
		}
		if o.Kind == plane.Reduce && r != o.Root {
			rv = 0
		}
		if err := sc.need(sc.send[r], r, s, "send"); err != nil {
			return err
		}
		if err := sc.need(sc.recv[r], r, rv, "recv"); err != nil {
			return err
		}
	}
	return nil
}

// checkV validates AllToAllv: what r sends j is what j receives from r,
// and every buffer holds its blocks.
func (sc *sharedCall) checkV() error {
	for r := 0; r < sc.n; r++ {
		if len(sc.sb[r]) != sc.n || len(sc.rb[r]) != sc.n {
			return fmt.Errorf("rank %d gave %d send and %d recv counts for %d ranks: %w", r, len(sc.sb[r]), len(sc.rb[r]), sc.n, errs.ErrMismatch)
		}
		ts, tr := 0, 0
		for j := 0; j < sc.n; j++ {
			if sc.sb[r][j] < 0 || sc.rb[r][j] < 0 {
				return fmt.Errorf("rank %d gave a negative count: %w", r, errs.ErrMismatch)
			}
			if sc.sb[r][j] != sc.rb[j][r] {
				return fmt.Errorf("rank %d sends rank %d %d bytes, rank %d expects %d: %w", r, j, sc.sb[r][j], j, sc.rb[j][r], errs.ErrMismatch)
			}
			ts, tr = ts+sc.sb[r][j], tr+sc.rb[r][j]
		}
		if err := sc.need(sc.send[r], r, ts, "send"); err != nil {
			return err
		}
		if err := sc.need(sc.recv[r], r, tr, "recv"); err != nil {
			return err
		}
	}
	return nil
}

// work enqueues the call on s (the leader's stream).
func (st *sharedState) work(sc *sharedCall, s *gpu.Stream) error {
	if err := sc.check(); err != nil {
		return err
	}
	o, n := sc.o, sc.n
	sz := o.DT.Size()
	blk := o.Count * sz
	if o.Kind != plane.AllToAllv && blk == 0 {
		return nil
	}
	switch o.Kind {
	case plane.AllReduce:
		if err := chain(s, sc.recv[0].Sub(0, blk), o, sc.send, 0, 0, blk); err != nil {
			return err
		}
		return fanOut(s, sc.recv[0].Sub(0, blk), sc.recv, 0, 0, blk)
	case plane.Reduce:
		return chain(s, sc.recv[o.Root].Sub(0, blk), o, sc.send, o.Root, 0, blk)
	case plane.ReduceScatter:
		for b := 0; b < n; b++ {
			if err := chain(s, sc.recv[b].Sub(0, blk), o, sc.send, b, b*blk, blk); err != nil {
				return err
			}
		}
		return nil
	case plane.AllGather:
		for b := 0; b < n; b++ {
			if err := copyUnlessSame(s, sc.recv[0].Sub(b*blk, blk), sc.send[b].Sub(0, blk)); err != nil {
				return err
			}
		}
		return fanOut(s, sc.recv[0].Sub(0, n*blk), sc.recv, 0, 0, n*blk)
	case plane.Broadcast:
		return fanOut(s, sc.send[o.Root].Sub(0, blk), sc.recv, -1, 0, blk)
	case plane.AllToAll, plane.AllToAllv:
		return st.allToAll(sc, s)
	}
	return fmt.Errorf("gpu: the shared-gpu path has no %s", o.Kind)
}

// chain enqueues dst = the reduction of bytes [off, off+n) of every rank's
// send, starting with rank first's (see the file comment), then o's finish.
func chain(s *gpu.Stream, dst *gpu.Buffer, o *plane.Op, send []*gpu.Buffer, first, off, n int) error {
	ranks := len(send)
	count := n / o.DT.Size()
	part := func(r int) *gpu.Buffer { return send[(first+r)%ranks].Sub(off, n) }
	if ranks == 1 {
		return copyUnlessSame(s, dst, part(0))
	}
	if err := s.Reduce(dst, part(0), part(1), count, o.DT, o.Op); err != nil {
		return err
	}
	for r := 2; r < ranks; r++ {
		if err := s.Reduce(dst, dst, part(r), count, o.DT, o.Op); err != nil {
			return err
		}
	}
	return s.Finish(dst, count, o.DT, o.Op, ranks)
}

// fanOut copies src into bytes [off, off+n) of every rank's recv but rank
// skip's, two destinations per kernel (src is read once for both).
func fanOut(s *gpu.Stream, src *gpu.Buffer, recv []*gpu.Buffer, skip, off, n int) error {
	var dsts []*gpu.Buffer
	for r, b := range recv {
		if r != skip && b.Ptr()+uintptr(off) != src.Ptr() {
			dsts = append(dsts, b.Sub(off, n))
		}
	}
	for len(dsts) >= 2 {
		if err := s.Copy2(dsts[0], dsts[1], src); err != nil {
			return err
		}
		dsts = dsts[2:]
	}
	if len(dsts) == 1 {
		return s.Copy(dsts[0], src)
	}
	return nil
}

// copyUnlessSame copies src into dst unless they are the same memory.
func copyUnlessSame(s *gpu.Stream, dst, src *gpu.Buffer) error {
	if dst.Ptr() == src.Ptr() {
		return nil
	}
	return s.Copy(dst, src)
}

// allToAll enqueues AllToAll and AllToAllv: block (s, d) from rank
// s's send into rank d's recv. A rank whose send and recv overlap (in
// place) has its send staged into the leader's scratch first, since the
// copies into its recv would overwrite blocks not yet read.
func (st *sharedState) allToAll(sc *sharedCall, s *gpu.Stream) error {
	n := sc.n
	sendOff, recvOff, size := sc.blocks()
	src := make([]*gpu.Buffer, n)
	copy(src, sc.send)
	staged := 0
	for r := 0; r < n; r++ {
		if overlaps(sc.send[r], sc.recv[r]) {
			staged += sendOff[r][n]
		}
	}
	if staged > 0 {
		if err := st.stage.grow(st.dev, staged); err != nil {
			return fmt.Errorf("in-place all-to-all staging of %d bytes: %w", staged, err)
		}
		scr := st.stage.buf
		at := 0
		for r := 0; r < n; r++ {
			if b := sendOff[r][n]; overlaps(sc.send[r], sc.recv[r]) {
				src[r] = scr.Sub(at, b)
				if err := s.Copy(src[r], sc.send[r].Sub(0, b)); err != nil {
					return err
				}
				at += b
			}
		}
	}
	for d := 0; d < n; d++ {
		for i := 0; i < n; i++ {
			from := (d + i) % n
			b := size[from][d]
			if b == 0 {
				continue
			}
			if err := s.Copy(sc.recv[d].Sub(recvOff[d][from], b), src[from].Sub(sendOff[from][d], b)); err != nil {
				return err
			}
		}
	}
	return nil
}

// blocks gives, for every rank r, the offset of its block for j in its send
// (sendOff[r][j]; sendOff[r][n] is its total) and of its block from j in
// its recv (recvOff[r][j]), and the bytes r sends j (size[r][j]).
func (sc *sharedCall) blocks() (sendOff, recvOff, size [][]int) {
	n := sc.n
	blk := sc.o.Count * sc.o.DT.Size()
	sendOff, recvOff, size = make([][]int, n), make([][]int, n), make([][]int, n)
	for r := 0; r < n; r++ {
		sendOff[r], recvOff[r], size[r] = make([]int, n+1), make([]int, n+1), make([]int, n)
		for j := 0; j < n; j++ {
			sb, rb := blk, blk
			if sc.sb != nil {
				sb, rb = sc.sb[r][j], sc.rb[r][j]
			}
			size[r][j] = sb
			sendOff[r][j+1] = sendOff[r][j] + sb
			recvOff[r][j+1] = recvOff[r][j] + rb
		}
	}
	return sendOff, recvOff, size
}

// overlaps reports whether a and b share any byte.
func overlaps(a, b *gpu.Buffer) bool {
	if a == nil || b == nil || a.Len() == 0 || b.Len() == 0 {
		return false
	}
	return a.Ptr() < b.Ptr()+uintptr(b.Len()) && b.Ptr() < a.Ptr()+uintptr(a.Len())
}
