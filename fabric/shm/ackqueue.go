package shm

import "sync"

// ackQueue holds the single-copy sends whose frames are in the ring, in
// ring order, until the receiver acknowledges them. The receiver handles
// frames strictly in order, so its acknowledgement count n says that the
// first n single-copy messages ever sent on the link are done with: one
// shared counter replaces an acknowledgement frame per message, and needs
// no room in the reverse ring (which may be full of the receiver's own
// traffic waiting for us).
//
// Each entry keeps its buffer referenced until it completes, so the
// garbage collector cannot free memory that the peer may still be reading.
type ackQueue struct {
	mu      sync.Mutex
	pending []op   // oldest first; pending[0] is message done+1
	done    uint64 // acknowledgements applied
	err     error
	ready   chan struct{} // capacity 1: something was added, or err was set
}

func newAckQueue() *ackQueue { return &ackQueue{ready: make(chan struct{}, 1)} }

// add records a send whose frame is about to be written. It reports false,
// having completed o with the queue's error, once the queue has failed.
func (q *ackQueue) add(o op) bool {
	q.mu.Lock()
	if err := q.err; err != nil {
		q.mu.Unlock()
		o.Req.Complete(err)
		return false
	}
	q.pending = append(q.pending, o)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// next waits until a send is pending and returns the acknowledgement count
// that completes it, or the queue's error.
func (q *ackQueue) next() (uint64, error) {
	for {
		q.mu.Lock()
		switch {
		case q.err != nil:
			q.mu.Unlock()
			return 0, q.err
		case len(q.pending) > 0:
			n := q.done + 1
			q.mu.Unlock()
			return n, nil
		}
		q.mu.Unlock()
		<-q.ready
	}
}

// complete finishes, successfully, every send up to the acknowledgement
// count acked.
func (q *ackQueue) complete(acked uint64) {
	q.mu.Lock()
	var done []op
	for len(q.pending) > 0 && q.done < acked {
		done = append(done, q.pending[0])
		q.pending[0] = op{}
		q.pending = q.pending[1:]
		q.done++
	}
	q.mu.Unlock()
	for _, o := range done {
		o.Req.Complete(nil)
	}
}

// fail completes the sends up to acked successfully (the peer finished
// them before it went away) and every other one, now and later, with err
// (the first error sticks).
func (q *ackQueue) fail(err error, acked uint64) {
	q.complete(acked)
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	ops := q.pending
	q.pending = nil
	err = q.err
	q.mu.Unlock()
	for _, o := range ops {
		o.Req.Complete(err)
	}
	select {
	case q.ready <- struct{}{}:
	default:
	}
}
