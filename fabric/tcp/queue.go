package tcp

import (
	"sync"

	"flexlink/fabric"
)

// op is one posted Recv.
type op struct {
	req *fabric.Req
	tag fabric.Tag
	buf []byte
}

// queue holds posted receives in FIFO order until reader 0 takes them.
// Once failed, it completes everything queued and everything pushed later
// with its error.
type queue struct {
	mu    sync.Mutex
	ops   []op
	err   error
	ready chan struct{} // capacity 1: something was pushed, or err was set
}

func newQueue() *queue { return &queue{ready: make(chan struct{}, 1)} }

func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop waits for the oldest operation, or returns the queue's error.
func (q *queue) pop() (op, error) {
	for {
		q.mu.Lock()
		if q.err != nil {
			q.mu.Unlock()
			return op{}, q.err
		}
		if len(q.ops) > 0 {
			o := q.ops[0]
			q.ops[0] = op{}
			q.ops = q.ops[1:]
			q.mu.Unlock()
			return o, nil
		}
		q.mu.Unlock()
		<-q.ready
	}
}

// fail sets the queue's error (the first one sticks) and completes every
// queued operation with it. The operation a progress goroutine holds is
// that goroutine's to complete.
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

// push posts a receive and returns its request.
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
