package direct

import "flexlink/gpu"

// Copy lanes: the streams a rank's copy engines work through toward one
// peer. A single cuMemcpyAsync runs on one copy engine; splitting a large
// push into FLEXLINK_GPU_COPY_STREAMS slices on as many streams lets the
// driver spread it over several engines, and keeps pushes toward different
// peers (and this rank's own kernels on the caller's stream) running at
// once. Each peer has two groups of lanes: group 0 for a collective's first
// pushes, group 1 for the pushes of results that follow reductions
// (allreduce), so the second never queues behind the first.

// lanes is one peer's copy streams: streams[g*width+i] is lane i of group g.
type lanes struct {
	streams []*gpu.Stream
	end     []*gpu.Event // recorded when the lane is joined back into s
	used    []bool       // lane has work enqueued since the last join
}

func newLanes(dev *gpu.Device, width int) (*lanes, error) {
	l := &lanes{streams: make([]*gpu.Stream, 2*width), end: make([]*gpu.Event, 2*width), used: make([]bool, 2*width)}
	for i := range l.streams {
		var err error
		if l.streams[i], err = dev.NewStream(); err != nil {
			l.close()
			return nil, err
		}
		if l.end[i], err = dev.NewEvent(false); err != nil {
			l.close()
			return nil, err
		}
	}
	return l, nil
}

func (l *lanes) close() error {
	var first error
	for i, s := range l.streams {
		if s == nil {
			continue
		}
		if err := s.Synchronize(); err != nil && first == nil {
			first = err
		}
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
		if l.end[i] != nil {
			if err := l.end[i].Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// copyOn enqueues dst = src on lane i (mod width) of group g toward peer j,
// after event after (nil: no wait) and returns the stream used.
func (p *directPlane) copyOn(j, g, i int, dst, src *gpu.Buffer, after *gpu.Event) (*gpu.Stream, error) {
	l := p.lanes[j]
	k := g*p.width + i%p.width
	s := l.streams[k]
	if after != nil {
		if err := s.Wait(after); err != nil {
			return nil, err
		}
	}
	l.used[k] = true
	p.px.cur[linkNVLink] += int64(dst.Len())
	if p.stores && aligned16(dst, src) {
		return s, s.Copy(dst, src) // FLEXLINK_GPU_ALLGATHER/ALLTOALL=store: a kernel on the lane
	}
	return s, s.CopyDtoD(dst, src)
}

// copy2On is copyOn for the store allgather's fused push: dst (the peer's)
// = local = src, one kernel on lane 0 of group 0 toward peer j.
func (p *directPlane) copy2On(j int, dst, local, src *gpu.Buffer, after *gpu.Event) error {
	l := p.lanes[j]
	s := l.streams[0]
	if err := s.Wait(after); err != nil {
		return err
	}
	l.used[0] = true
	p.px.cur[linkNVLink] += int64(dst.Len())
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
func (p *directPlane) split(j, g int, dst, src *gpu.Buffer, after *gpu.Event) error {
	n := dst.Len()
	w := p.width
	if n < w*minSlice {
		w = max(1, n/minSlice)
	}
	per := (n/w + blockAlign - 1) / blockAlign * blockAlign
	for i, off := 0, 0; off < n; i, off = i+1, off+per {
		m := min(per, n-off)
		if _, err := p.copyOn(j, g, i, dst.Sub(off, m), src.Sub(off, m), after); err != nil {
			return err
		}
	}
	return nil
}

// joinCopies makes s wait for every lane used since the last join (first
// timing the lanes of pushes whose NVLink part is measured, see
// gpu_pcie_probe.go).
func (p *directPlane) joinCopies(s *gpu.Stream) error {
	if err := p.probeLaneEnds(); err != nil {
		return err
	}
	for _, l := range p.lanes {
		if l == nil {
			continue
		}
		for k, used := range l.used {
			if !used {
				continue
			}
			l.used[k] = false
			if err := l.streams[k].Record(l.end[k]); err != nil {
				return err
			}
			if err := s.Wait(l.end[k]); err != nil {
				return err
			}
		}
	}
	return nil
}
