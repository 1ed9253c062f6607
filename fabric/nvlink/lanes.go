package nvlink

import "github.com/flexlink/flexlink/gpu"

// Lanes are the streams a rank's copy engines work through toward one
// peer. A single cuMemcpyAsync runs on one copy engine; spreading a large
// copy over several streams lets the driver use several engines, and keeps
// copies toward different peers running at once. Which lane carries what
// is the caller's policy; Lanes only tracks which lanes have work enqueued
// since they were last joined into another stream.
type Lanes struct {
	streams []*gpu.Stream
	end     []*gpu.Event // recorded when the lane is joined back into a stream
	used    []bool       // lane has work enqueued since the last join
}

// NewLanes makes n lanes on dev.
func NewLanes(dev *gpu.Device, n int) (*Lanes, error) {
	l := &Lanes{streams: make([]*gpu.Stream, n), end: make([]*gpu.Event, n), used: make([]bool, n)}
	for i := range l.streams {
		var err error
		if l.streams[i], err = dev.NewStream(); err != nil {
			l.Close()
			return nil, err
		}
		if l.end[i], err = dev.NewEvent(false); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// Len is the number of lanes.
func (l *Lanes) Len() int { return len(l.streams) }

// Stream is lane k's stream, without marking it used.
func (l *Lanes) Stream(k int) *gpu.Stream { return l.streams[k] }

// Use marks lane k as having work to join and returns its stream.
func (l *Lanes) Use(k int) *gpu.Stream {
	l.used[k] = true
	return l.streams[k]
}

// Used reports whether lane k has work enqueued since the last Join.
func (l *Lanes) Used(k int) bool { return l.used[k] }

// Join makes s wait for every lane used since the last Join, in lane
// order, and marks them unused.
func (l *Lanes) Join(s *gpu.Stream) error {
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
	return nil
}

// Close waits for every lane's work, then releases the streams and events;
// it returns the first error.
func (l *Lanes) Close() error {
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
