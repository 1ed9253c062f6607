package flagplane

import (
	"errors"
	"fmt"
	"sync"

	"github.com/flexlink/flexlink/gpu"
)

// CUDA graph capture (collectives/direct/capture.go says what replays). A
// rank's flag kernels must run one after another, replays and eager calls
// alike. Every flag call ends by recording Plane.last; in a capture the
// record is an event record node on a side branch of the graph
// (RecordBranch: after the call's kernel and after the capture's previous
// record, so the records keep their order while the kernels' chain does
// not wait for them: 0.05 µs a replayed call where a record in the chain
// cost 0.6 on an H200), and the capture's first flag call starts with an
// event wait node on last (WaitExternal), so each replay waits for the
// latest flag call enqueued before it and records its own end; once a
// plane has captured, every eager flag call waits on last too, whatever
// its stream. Two streams of one capture are joined with an
// event recorded in the capture (flagCapture.ev). A capture that holds a
// flag call holds the plane's device memory for the graph's life
// (graphHolds).

// flagCapture is the flag plane's capture state.
type flagCapture struct {
	any bool          // a flag call was captured: eager calls always wait on last
	id  uint64        // the capture of the latest captured flag call
	s   *gpu.Stream   // its stream
	ev  *gpu.Event    // joins a second stream of one capture (made on first use)
	rec gpu.GraphNode // the capture's latest record of last (recordCaptured)
}

// captureBegin orders a flag call on s, in capture id, after the rank's
// previous flag call (see the file's comment).
func (f *Plane) captureBegin(id uint64, s *gpu.Stream) error {
	c := &f.capt
	if c.id != id {
		if err := f.holds.hold(s); err != nil {
			return err
		}
		c.id, c.s, c.any, c.rec = id, s, true, gpu.GraphNode{}
		return s.WaitExternal(f.last)
	}
	if c.s == s {
		return nil
	}
	if c.ev == nil {
		ev, err := f.dev.NewEvent(false)
		if err != nil {
			return err
		}
		c.ev = ev
	}
	if err := c.s.Record(c.ev); err != nil {
		return err
	}
	c.s = s
	return s.Wait(c.ev)
}

// recordCaptured ends a captured flag call on s, whose kernels ran grid
// blocks (0: several kernels): last is recorded at each replay once the
// call's kernels and the capture's earlier records are, in the stream's
// chain or on a side branch (FLEXLINK_GPU_GRAPH_RECORD; auto: a branch for
// one block). The records stay in order either way: a branch record
// follows the capture's previous branch record, and a chain record
// follows everything before it on s.
func (f *Plane) recordCaptured(s *gpu.Stream, grid int) error {
	branch := f.graphRecord == "branch" || (f.graphRecord == "auto" || f.graphRecord == "") && grid == 1
	if !branch {
		return s.RecordExternal(f.last)
	}
	rec, err := s.RecordBranch(f.last, f.capt.rec)
	if err != nil {
		return err
	}
	f.capt.rec = rec
	return nil
}

// graphHolds counts the graphs that hold the flag plane's device memory,
// and keeps what the plane let go of (Close, Release) while one does.
type graphHolds struct {
	log  func(msg string, args ...any)
	mu   sync.Mutex
	n    int
	kept []func() error // frees, run when n drops to 0
	done chan struct{}  // closed once the kept frees have run (made with the first)
}

// hold makes the graph s is capturing hold the plane's memory until the
// graph is destroyed.
func (h *graphHolds) hold(s *gpu.Stream) error {
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
	if err := s.HoldForGraph(h.unhold); err != nil {
		h.mu.Lock()
		h.n--
		h.mu.Unlock()
		return fmt.Errorf("hold the flag regions for the graph: %w", err)
	}
	return nil
}

// unhold is a graph's user object destructor: it runs on a driver thread,
// which must not call the driver, so the frees run on a goroutine.
func (h *graphHolds) unhold() {
	h.mu.Lock()
	h.n--
	var run []func() error
	var done chan struct{}
	if h.n == 0 {
		run, h.kept, done, h.done = h.kept, nil, h.done, nil
	}
	h.mu.Unlock()
	if len(run) > 0 {
		go func() {
			var err error
			for _, free := range run {
				err = errors.Join(err, free())
			}
			if err != nil && h.log != nil {
				h.log("gpu flag memory kept for CUDA graphs: free after the last graph", "error", err)
			}
			close(done)
		}()
	}
}

// freed returns a channel closed once the memory kept for the graphs has
// been freed (tests); nil when nothing is kept.
func (h *graphHolds) freed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

// keep hands free to the graphs when one holds the plane's memory and
// reports whether it did; otherwise the caller frees now.
func (h *graphHolds) keep(free func() error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return false
	}
	h.kept = append(h.kept, free)
	if h.done == nil {
		h.done = make(chan struct{})
	}
	return true
}

// held reports how many graphs hold the plane's memory (tests).
func (h *graphHolds) held() (graphs, kept int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n, len(h.kept)
}
