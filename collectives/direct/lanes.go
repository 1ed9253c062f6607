package direct

import (
	"github.com/flexlink/flexlink/fabric/nvlink"
	"github.com/flexlink/flexlink/gpu"
)

// Copy lanes: the streams a rank's copy engines work through toward one
// peer (nvlink.Lanes). A single cuMemcpyAsync runs on one copy engine;
// splitting a large push into FLEXLINK_GPU_COPY_STREAMS slices on as many
// streams lets the driver spread it over several engines, and keeps pushes
// toward different peers (and this rank's own kernels on the caller's
// stream) running at once. Each peer has two groups of lanes: group 0 for
// a collective's first pushes, group 1 for the pushes of results that
// follow reductions (allreduce), so the second never queues behind the
// first.
//
// laneSet is that policy: which lane a push takes, whether it runs as a
// copy-engine copy or a store kernel, and the count of NVLink bytes for
// LinkShares. The streams themselves are fabric/nvlink's.
type laneSet struct {
	peers  []*nvlink.Lanes // by peer (nil for me): lane g*width+i is lane i of group g
	width  int             // lanes per group (FLEXLINK_GPU_COPY_STREAMS)
	stores bool            // this call's lane copies are kernels (copyOn)
	stats  *linkStats      // counts the bytes pushed over NVLink
}

func newLaneSet(pr *peers, width int, stats *linkStats) (*laneSet, error) {
	ls := &laneSet{peers: make([]*nvlink.Lanes, pr.n), width: width, stats: stats}
	for j := 0; j < pr.n; j++ {
		if j == pr.me {
			continue
		}
		var err error
		if ls.peers[j], err = nvlink.NewLanes(pr.dev, 2*width); err != nil {
			ls.close()
			return nil, err
		}
	}
	return ls, nil
}

func (ls *laneSet) close() error {
	var first error
	for _, l := range ls.peers {
		if l != nil {
			if err := l.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// first is the lanes toward the lowest-numbered peer (nil: no peer).
func (ls *laneSet) first() *nvlink.Lanes {
	for _, x := range ls.peers {
		if x != nil {
			return x
		}
	}
	return nil
}

// onStream enqueues a small push on s itself (counted as NVLink bytes).
func (ls *laneSet) onStream(s *gpu.Stream, dst, src *gpu.Buffer) error {
	ls.stats.add(linkNVLink, dst.Len())
	if ls.stores && aligned16(dst, src) {
		return s.Copy(dst, src)
	}
	return s.CopyDtoD(dst, src)
}

// copyOn enqueues dst = src on lane i (mod width) of group g toward peer j,
// after event after (nil: no wait) and returns the stream used.
func (ls *laneSet) copyOn(j, g, i int, dst, src *gpu.Buffer, after *gpu.Event) (*gpu.Stream, error) {
	l := ls.peers[j]
	k := g*ls.width + i%ls.width
	s := l.Stream(k)
	if after != nil {
		if err := s.Wait(after); err != nil {
			return nil, err
		}
	}
	l.Use(k)
	ls.stats.add(linkNVLink, dst.Len())
	if ls.stores && aligned16(dst, src) {
		return s, s.Copy(dst, src) // FLEXLINK_GPU_ALLGATHER/ALLTOALL=store: a kernel on the lane
	}
	return s, s.CopyDtoD(dst, src)
}

// copy2On is copyOn for the store allgather's fused push: dst (the peer's)
// = local = src, one kernel on lane 0 of group 0 toward peer j.
func (ls *laneSet) copy2On(j int, dst, local, src *gpu.Buffer, after *gpu.Event) error {
	l := ls.peers[j]
	s := l.Stream(0)
	if err := s.Wait(after); err != nil {
		return err
	}
	l.Use(0)
	ls.stats.add(linkNVLink, dst.Len())
	if !aligned16(dst, local, src) {
		// The kernels store byte by byte unless every pointer is 16-byte
		// aligned (a block of an odd count of 2-byte elements): copy
		// engines do better then.
		if err := s.CopyDtoD(dst, src); err != nil {
			return err
		}
		return s.CopyDtoD(local, src)
	}
	return s.Copy2(dst, local, src)
}

// aligned16 reports whether every buffer starts on a 16-byte boundary, as
// the copy kernels' vector path needs.
func aligned16(bs ...*gpu.Buffer) bool {
	for _, b := range bs {
		if b.Ptr()%16 != 0 {
			return false
		}
	}
	return true
}

// split enqueues dst = src toward peer j on all lanes of group g, one slice
// each (256-byte aligned), every lane first waiting for after.
func (ls *laneSet) split(j, g int, dst, src *gpu.Buffer, after *gpu.Event) error {
	n := dst.Len()
	w := ls.width
	if n < w*minSlice {
		w = max(1, n/minSlice)
	}
	per := (n/w + blockAlign - 1) / blockAlign * blockAlign
	for i, off := 0, 0; off < n; i, off = i+1, off+per {
		m := min(per, n-off)
		if _, err := ls.copyOn(j, g, i, dst.Sub(off, m), src.Sub(off, m), after); err != nil {
			return err
		}
	}
	return nil
}

// join makes s wait for every lane used since the last join, peer by peer
// in rank order.
func (ls *laneSet) join(s *gpu.Stream) error {
	for _, l := range ls.peers {
		if l == nil {
			continue
		}
		if err := l.Join(s); err != nil {
			return err
		}
	}
	return nil
}
