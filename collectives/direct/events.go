package direct

import (
	"fmt"

	"github.com/flexlink/flexlink/gpu"
)

// eventSet is the IPC events of the per-call protocol (direct.go says when
// each is recorded and waited on, and why it may then be recorded again):
// this rank's own events, which it exports in the setup exchange, and its
// peers', opened here. Its record and wait helpers note each record before
// it happens and each wait after, for the trace test (TestGPUEventRecordOrder).
type eventSet struct {
	*peers
	ready   *gpu.Event     // mine
	done    []*gpu.Event   // done[j]: mine toward peer j
	pReady  []*gpu.Event   // pReady[j]: peer j's ready, opened here
	pDone   []*gpu.Event   // pDone[j]: peer j's done toward me, opened here
	startEv *gpu.Event     // recorded on s to release the copy lanes (not IPC)
	chunkEv *gpu.Event     // recorded on s after each reduced chunk (not IPC)
	pushEv  [][]*gpu.Event // pushEv[j][k]: mine, "chunk k of my push to j has landed"
	pPush   [][]*gpu.Event // pPush[j][k]: peer j's pushEv toward me, opened here
}

// traceRec is one record or wait of an IPC event: by rank actor, on the
// event owned by owner (toward peer to: a done event; -1: the ready event),
// for owner's call number call.
type traceRec struct {
	actor, owner, to int
	chunk            int // push events: the chunk; pcie slot k: -2-k; -1 otherwise
	call             uint64
	wait             bool
}

// newEventSet makes this rank's events; the peers' come with openPeers.
// On error the events made so far are in the returned set, for close.
func newEventSet(pr *peers) (ev *eventSet, err error) {
	n := pr.n
	ev = &eventSet{peers: pr, done: make([]*gpu.Event, n), pReady: make([]*gpu.Event, n), pDone: make([]*gpu.Event, n),
		pushEv: make([][]*gpu.Event, n), pPush: make([][]*gpu.Event, n)}
	if ev.ready, err = pr.dev.NewIPCEvent(); err != nil {
		return ev, err
	}
	if ev.startEv, err = pr.dev.NewEvent(false); err != nil {
		return ev, err
	}
	if ev.chunkEv, err = pr.dev.NewEvent(false); err != nil {
		return ev, err
	}
	for j := 0; j < n; j++ {
		if j == pr.me {
			continue
		}
		if ev.done[j], err = pr.dev.NewIPCEvent(); err != nil {
			return ev, err
		}
		ev.pushEv[j] = make([]*gpu.Event, pushChunks)
		for k := range ev.pushEv[j] {
			if ev.pushEv[j][k], err = pr.dev.NewIPCEvent(); err != nil {
				return ev, err
			}
		}
	}
	return ev, nil
}

// eventBlobBytes is the size of one rank's event handles in the setup
// exchange: ready, then done toward each rank, then the push events toward
// each rank (zeros where the rank is itself).
func eventBlobBytes(n int) int { return (1 + n + n*pushChunks) * gpu.IPCHandleSize }

// putHandles writes this rank's event handles into b (eventBlobBytes).
func (ev *eventSet) putHandles(b []byte) error {
	hs := gpu.IPCHandleSize
	put := func(slot int, e *gpu.Event) error {
		h, err := e.IPCHandle()
		copy(b[slot*hs:], h)
		return err
	}
	if err := put(0, ev.ready); err != nil {
		return err
	}
	for j := 0; j < ev.n; j++ {
		if j == ev.me {
			continue
		}
		if err := put(1+j, ev.done[j]); err != nil {
			return err
		}
		for k, e := range ev.pushEv[j] {
			if err := put(1+ev.n+j*pushChunks+k, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// openPeers opens, for every peer, its ready event and its done and push
// events toward this rank, from the setup exchange (stride bytes per rank:
// a verdict byte, then the handles).
func (ev *eventSet) openPeers(all []byte, stride int) error {
	hs := gpu.IPCHandleSize
	for j := 0; j < ev.n; j++ {
		if j == ev.me {
			continue
		}
		b := all[j*stride+1 : (j+1)*stride]
		open := func(slot int, what string) (*gpu.Event, error) {
			e, err := ev.dev.OpenIPCEvent(b[slot*hs : (slot+1)*hs])
			if err != nil {
				return nil, fmt.Errorf("open rank %d's %s event (on %s): %w", j, what, ev.c.PeerHost(j), err)
			}
			return e, nil
		}
		var err error
		if ev.pReady[j], err = open(0, "ready"); err != nil {
			return err
		}
		if ev.pDone[j], err = open(1+ev.me, "done"); err != nil {
			return err
		}
		ev.pPush[j] = make([]*gpu.Event, pushChunks)
		for k := range ev.pPush[j] {
			if ev.pPush[j][k], err = open(1+ev.n+ev.me*pushChunks+k, "push"); err != nil {
				return err
			}
		}
	}
	return nil
}

// recordReady records this rank's ready event on s for call.
func (ev *eventSet) recordReady(s *gpu.Stream, call uint64) error {
	ev.note(traceRec{actor: ev.me, owner: ev.me, to: -1, chunk: -1, call: call})
	return s.Record(ev.ready)
}

// waitReady makes s wait on peer j's ready event of its call number call.
func (ev *eventSet) waitReady(s *gpu.Stream, j int, call uint64) error {
	if err := s.Wait(ev.pReady[j]); err != nil {
		return err
	}
	ev.note(traceRec{actor: ev.me, owner: j, to: -1, chunk: -1, call: call, wait: true})
	return nil
}

// recordDone records this rank's done event toward peer j on s for call.
func (ev *eventSet) recordDone(s *gpu.Stream, j int, call uint64) error {
	ev.note(traceRec{actor: ev.me, owner: ev.me, to: j, chunk: -1, call: call})
	return s.Record(ev.done[j])
}

// waitDone makes s wait on peer j's done event toward this rank, of its
// call number call.
func (ev *eventSet) waitDone(s *gpu.Stream, j int, call uint64) error {
	if err := s.Wait(ev.pDone[j]); err != nil {
		return err
	}
	ev.note(traceRec{actor: ev.me, owner: j, to: ev.me, chunk: -1, call: call, wait: true})
	return nil
}

// recordPush records, on st, this rank's push event for chunk k toward
// peer j in call.
func (ev *eventSet) recordPush(st *gpu.Stream, j, k int, call uint64) error {
	ev.note(traceRec{actor: ev.me, owner: ev.me, to: j, chunk: k, call: call})
	return st.Record(ev.pushEv[j][k])
}

// waitPush makes s wait on peer j's push event for chunk k toward this
// rank, of its call number call.
func (ev *eventSet) waitPush(s *gpu.Stream, j, k int, call uint64) error {
	if err := s.Wait(ev.pPush[j][k]); err != nil {
		return err
	}
	ev.note(traceRec{actor: ev.me, owner: j, to: ev.me, chunk: k, call: call, wait: true})
	return nil
}

// close releases every event, this rank's and the opened ones.
func (ev *eventSet) close() error {
	var first error
	sets := [][]*gpu.Event{{ev.ready, ev.startEv, ev.chunkEv}, ev.done, ev.pReady, ev.pDone}
	sets = append(append(sets, ev.pushEv...), ev.pPush...)
	for _, set := range sets {
		for _, e := range set {
			if e != nil {
				if err := e.Close(); err != nil && first == nil {
					first = err
				}
			}
		}
	}
	return first
}
