package bootstrap

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/errs"
)

// NewInProc returns the stores of a job of size ranks that live in this
// process (ranks are goroutines), for tests. They behave as TCP stores do,
// including Abort, Close and loss (see LoseInProc); data is copied in and
// out, so no slice is shared between ranks or with the caller.
func NewInProc(size int) []Store { return newInProc(size, false) }

// NewInProcKeepOnLoss is NewInProc for a job that goes on after a loss
// (ServerConfig.KeepOnLoss): LoseInProc then fails only what needs the
// lost rank and publishes a loss record (NextLoss).
func NewInProcKeepOnLoss(size int) []Store { return newInProc(size, true) }

func newInProc(size int, keepOnLoss bool) []Store {
	if size <= 0 {
		panic(fmt.Sprintf("bootstrap: NewInProc(%d)", size))
	}
	eng := newEngine(size, hclog.NewNullLogger(), keepOnLoss, nil)
	stores := make([]Store, size)
	for r := range stores {
		tx := &inprocTx{eng: eng, rank: r}
		ep := newEndpoint(r, size, tx)
		tx.ep = ep
		host := fmt.Sprintf("inproc-%d", r)
		session, err := eng.join(r, host, false, sinkFunc(func(o *outMsg) { ep.handle(cloneMsg(o.m)) }), func() {})
		if err != nil {
			panic(err) // each rank joins once
		}
		tx.session = session
		stores[r] = ep
	}
	return stores
}

// LoseInProc simulates the loss of an in-process store's rank, as if its
// connection dropped without a goodbye: every other rank's pending and
// later calls fail with errs.ErrPeerLost naming it (with keepOnLoss: only
// collectives, and a loss record is published); its own calls fail with
// errs.ErrClosed. It returns an error if s is not from NewInProc.
func LoseInProc(s Store) error {
	ep, ok := s.(*endpoint)
	var tx *inprocTx
	if ok {
		tx, ok = ep.tx.(*inprocTx)
	}
	if !ok {
		return fmt.Errorf("bootstrap: LoseInProc: %T is not an in-process store", s)
	}
	// The store's error first: a call that finds the connection down then
	// reports it (sendError), not the bare cut.
	ep.failWith(fmt.Errorf("bootstrap: rank %d: connection cut: store %w", ep.rank, errs.ErrClosed))
	tx.mu.Lock()
	tx.down = true
	tx.mu.Unlock()
	tx.eng.lost(ep.rank, tx.session, "connection cut")
	return nil
}

// inprocTx hands one rank's messages straight to the engine.
type inprocTx struct {
	eng     *engine
	rank    int
	session uint64
	ep      *endpoint

	mu   sync.Mutex
	down bool
}

func (t *inprocTx) peer() string { return "in-process store" }

func (t *inprocTx) gone() <-chan struct{} { return nil }

func (t *inprocTx) send(m message) error {
	t.mu.Lock()
	down := t.down
	t.mu.Unlock()
	if down {
		return errConnDown
	}
	switch v := m.(type) {
	case byeMsg:
		t.eng.leave(t.rank, t.session)
	default:
		t.eng.handle(t.rank, t.session, cloneMsg(v))
	}
	return nil
}

func (t *inprocTx) sendWait(m message, _ time.Duration) error { return t.send(m) }

func (t *inprocTx) close() {
	t.mu.Lock()
	t.down = true
	t.mu.Unlock()
}

// cloneMsg copies the byte slices a message carries.
func cloneMsg(m message) message {
	switch v := m.(type) {
	case collMsg:
		v.Data = bytes.Clone(v.Data)
		return v
	case putMsg:
		v.Value = bytes.Clone(v.Value)
		return v
	case collResMsg:
		parts := make([][]byte, len(v.Parts))
		for i, p := range v.Parts {
			parts[i] = bytes.Clone(p)
			if parts[i] == nil {
				parts[i] = []byte{}
			}
		}
		v.Parts = parts
		return v
	case replyMsg:
		v.Value = bytes.Clone(v.Value)
		return v
	}
	return m
}
