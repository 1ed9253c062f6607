package shm

import (
	"sync"

	"flexlink/fabric"
)

// op is one posted Send or Recv.
type op struct {
	req *fabric.Req
	tag fabric.Tag
	buf []byte
}

// queue holds the posted operations of one direction in FIFO order until
// they are worked on, and hands out the right to work on the ring end: to
// the progress goroutine (pop), or to a caller that finds nothing queued
// and does the work at once (tryOwn). Once failed, it completes everything
// queued and everything pushed later with its error.
type queue struct {
	mu    sync.Mutex
	ops   []op
	err   error
	owned bool          // the ring end is being worked on
	ready chan struct{} // capacity 1: something was pushed or released, or err was set
}

func newQueue() *queue { return &queue{ready: make(chan struct{}, 1)} }

func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// push posts an operation and returns its request.
func (q *queue) push(tag fabric.Tag, buf []byte) fabric.Request {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return fabric.DoneReq(q.err)
	}
	r := fabric.NewReq()
	q.ops = append(q.ops, op{req: r, tag: tag, buf: buf})
	q.signal()
	return r
}

// tryOwn takes the ring end if nothing is queued and nobody works on it.
// The caller must call release (or pushRelease).
func (q *queue) tryOwn() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil || q.owned || len(q.ops) > 0 {
		return false
	}
	q.owned = true
	return true
}

// release gives the ring end back.
func (q *queue) release() {
	q.mu.Lock()
	q.owned = false
	if len(q.ops) > 0 {
		q.signal()
	}
	q.mu.Unlock()
}

// pushRelease posts an operation and gives the ring end back, at once, so
// that no later operation can overtake it.
func (q *queue) pushRelease(tag fabric.Tag, buf []byte) fabric.Request {
	r := q.push(tag, buf)
	q.release()
	return r
}

// pop waits for the oldest operation and the ring end, or returns the
// queue's error. The caller must call release after the operation.
func (q *queue) pop() (op, error) {
	for {
		q.mu.Lock()
		if q.err != nil {
			q.mu.Unlock()
			return op{}, q.err
		}
		if len(q.ops) > 0 && !q.owned {
			o := q.ops[0]
			q.ops[0] = op{}
			q.ops = q.ops[1:]
			q.owned = true
			q.mu.Unlock()
			return o, nil
		}
		q.mu.Unlock()
		<-q.ready
	}
}

// fail sets the queue's error (the first one sticks) and completes every
// queued operation with it. The operation being worked on is its worker's
// to complete.
func (q *queue) fail(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	ops := q.ops
	q.ops = nil
	err = q.err
	q.mu.Unlock()
	for _, o := range ops {
		o.req.Complete(err)
	}
	q.signal()
}
