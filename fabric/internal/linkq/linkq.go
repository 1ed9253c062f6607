// Package linkq is the pending-request queue that the host transports
// (shm, tcp) share: posted operations of one direction wait in it in FIFO
// order until a worker takes them.
package linkq

import (
	"sync"

	"github.com/flexlink/flexlink/fabric"
)

// Op is one posted Send or Recv.
type Op struct {
	Req *fabric.Req
	Tag fabric.Tag
	Buf []byte
}

// Queue holds the posted operations of one direction in FIFO order until
// they are worked on. Optionally it hands out the right to work on the
// transport's end of the direction: to the progress goroutine (PopOwn), or
// to a caller that finds nothing queued and does the work at once (TryOwn).
// Once failed, it completes everything queued and everything pushed later
// with its error.
type Queue struct {
	mu    sync.Mutex
	ops   []Op
	err   error
	owned bool          // the end is being worked on
	ready chan struct{} // capacity 1: something was pushed or released, or err was set
}

// New returns an empty queue.
func New() *Queue { return &Queue{ready: make(chan struct{}, 1)} }

func (q *Queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Push posts an operation and returns its request.
func (q *Queue) Push(tag fabric.Tag, buf []byte) fabric.Request {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return fabric.DoneReq(q.err)
	}
	r := fabric.NewReq()
	q.ops = append(q.ops, Op{Req: r, Tag: tag, Buf: buf})
	q.signal()
	return r
}

// TryOwn takes the end if nothing is queued and nobody works on it.
// The caller must call Release (or PushRelease).
func (q *Queue) TryOwn() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil || q.owned || len(q.ops) > 0 {
		return false
	}
	q.owned = true
	return true
}

// Release gives the end back.
func (q *Queue) Release() {
	q.mu.Lock()
	q.owned = false
	if len(q.ops) > 0 {
		q.signal()
	}
	q.mu.Unlock()
}

// PushRelease posts an operation and gives the end back, at once, so
// that no later operation can overtake it.
func (q *Queue) PushRelease(tag fabric.Tag, buf []byte) fabric.Request {
	r := q.Push(tag, buf)
	q.Release()
	return r
}

// Pop waits for the oldest operation, or returns the queue's error. It
// ignores ownership: for a queue with a single worker that never calls
// TryOwn.
func (q *Queue) Pop() (Op, error) { return q.pop(false) }

// PopOwn waits for the oldest operation and the end, or returns the
// queue's error. The caller must call Release after the operation.
func (q *Queue) PopOwn() (Op, error) { return q.pop(true) }

func (q *Queue) pop(own bool) (Op, error) {
	for {
		q.mu.Lock()
		if q.err != nil {
			q.mu.Unlock()
			return Op{}, q.err
		}
		if len(q.ops) > 0 && !(own && q.owned) {
			o := q.ops[0]
			q.ops[0] = Op{}
			q.ops = q.ops[1:]
			if own {
				q.owned = true
			}
			q.mu.Unlock()
			return o, nil
		}
		q.mu.Unlock()
		<-q.ready
	}
}

// Fail sets the queue's error (the first one sticks) and completes every
// queued operation with it. The operation being worked on is its worker's
// to complete.
func (q *Queue) Fail(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	ops := q.ops
	q.ops = nil
	err = q.err
	q.mu.Unlock()
	for _, o := range ops {
		o.Req.Complete(err)
	}
	q.signal()
}
