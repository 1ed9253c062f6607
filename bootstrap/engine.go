package bootstrap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// engine is the job's rendezvous state, shared by the TCP server and the
// in-process store: it matches collectives by sequence number, keeps the
// key/value table, and fails the whole job on an abort or a lost rank. It
// does no I/O: results go to each member's sink, which must not block and
// must not call back into the engine.
type engine struct {
	log hclog.Logger
	// keepOnLoss: a lost rank does not fail the job (ServerConfig.KeepOnLoss).
	keepOnLoss bool
	onEvent    func(Event) // ServerConfig.OnEvent; nil: none

	mu      sync.Mutex
	members []member
	ops     map[uint64]*pendingOp
	kv      map[string][]byte
	waiters map[string][]waiter
	failed  *failure
}

// sink receives what the engine sends one rank.
type sink interface{ deliver(o *outMsg) }

// outMsg is a message for one or more ranks; frame() encodes it once.
type outMsg struct {
	m     message
	once  sync.Once
	frame []byte
}

func newOut(m message) *outMsg { return &outMsg{m: m} }

func (o *outMsg) encoded() []byte {
	o.once.Do(func() { o.frame = marshal(o.m) })
	return o.frame
}

type member struct {
	sink   sink
	host   string
	joined bool
	left   bool   // said goodbye (or was lost, with keepOnLoss)
	lost   string // with keepOnLoss: why the rank was lost ("" while it was not)
	next   uint64 // one past the highest collective sequence it contributed to
	// transient: the rank's current session is a transient one
	// (ServerConfig.Transient): it takes part in no collective, and its
	// goodbye or loss ends only itself.
	transient bool
	// session numbers the rank's sessions (joins), from 1; a message,
	// goodbye or loss of an earlier session (a transient one replaced by
	// a newer join) is ignored.
	session uint64
}

type pendingOp struct {
	kind  collKind
	root  uint32
	first int // rank whose call fixed kind and root
	parts [][]byte
	have  []bool
	n     int
}

type waiter struct {
	rank    int
	session uint64
	id      uint64
}

func newEngine(size int, log hclog.Logger, keepOnLoss bool, onEvent func(Event)) *engine {
	return &engine{
		log:        log,
		keepOnLoss: keepOnLoss,
		onEvent:    onEvent,
		members:    make([]member, size),
		ops:        make(map[uint64]*pendingOp),
		kv:         make(map[string][]byte),
		waiters:    make(map[string][]waiter),
	}
}

// join admits rank and returns the session its later messages, goodbye
// and loss name. onJoined runs under the engine's lock before anything is
// delivered to s (the server queues its welcome there). A rank joins
// once; a second join of the same rank is refused. Transient sessions
// (ServerConfig.Transient) are not the rank's join: one may start
// whenever the rank has not joined for good, and replaces the rank's
// transient session still open, if any.
func (e *engine) join(rank int, host string, transient bool, s sink, onJoined func()) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := &e.members[rank]
	if m.joined && !m.transient {
		return 0, fmt.Errorf("rank %d already joined from host %q", rank, m.host)
	}
	m.session++
	m.joined, m.host, m.sink, m.transient, m.left = true, host, s, transient, false
	onJoined()
	e.emit(Event{Kind: EventJoined, Rank: rank, Host: host})
	if e.failed != nil {
		s.deliver(newOut(e.failed.msg()))
	}
	return m.session, nil
}

// current reports whether session is rank's session now and still open.
func (e *engine) current(rank int, session uint64) bool {
	m := &e.members[rank]
	return m.session == session && !m.left
}

// staying reports whether rank has joined for good (not as a transient
// session).
func (m *member) staying() bool { return m.joined && !m.transient }

// handle applies one message from rank's session (coll, put, get,
// abort).
func (e *engine) handle(rank int, session uint64, msg message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.current(rank, session) {
		return
	}
	if e.failed != nil {
		// Nothing is served once the job failed; a put is still told to
		// the owner (it is evidence of how the rank's communicators
		// ended: Put sends it even then) but not kept. It is answered
		// with the job's failure once told: the rank then knows its word
		// has reached the owner before it exits (a process that exits
		// with unread data on its connection resets it, and the server
		// may lose what it had not read yet).
		if m, ok := msg.(putMsg); ok {
			_, dup := e.kv[m.Key]
			e.emit(Event{Kind: EventPut, Rank: rank, Host: e.members[rank].host, Key: m.Key, Value: m.Value, Dup: dup})
			e.members[rank].sink.deliver(newOut(replyMsg{ID: m.ID, Status: e.failed.Class, Text: truncate(e.failed.err().Error(), maxTextLen)}))
		}
		return
	}
	switch m := msg.(type) {
	case collMsg:
		if e.members[rank].transient {
			e.members[rank].sink.deliver(newOut(collResMsg{Seq: m.Seq, Kind: m.Kind, Status: classNotSupported,
				Text: fmt.Sprintf("%s #%d: rank %d joined as a transient member, which takes part in no collective", m.Kind, m.Seq, rank)}))
			return
		}
		e.contribute(rank, m)
	case putMsg:
		if err := reservedKey(m.Key); err != nil {
			e.members[rank].sink.deliver(newOut(replyMsg{ID: m.ID, Status: classNotSupported, Text: err.Error()}))
			return
		}
		e.put(rank, m)
	case getMsg:
		if text, ok := e.waitingFor(m.Key); ok {
			e.members[rank].sink.deliver(newOut(replyMsg{ID: m.ID, Value: []byte(text)}))
			return
		}
		if v, ok := e.kv[m.Key]; ok {
			e.members[rank].sink.deliver(newOut(replyMsg{ID: m.ID, Value: v}))
			return
		}
		e.waiters[m.Key] = append(e.waiters[m.Key], waiter{rank, session, m.ID})
	case abortMsg:
		if e.members[rank].transient {
			// It ends only its own session: a process that joined to
			// report has no say over the job.
			e.log.Debug("a transient member's abort ends only its session", "rank", rank, "error", m.Text)
			e.members[rank].left = true
			return
		}
		e.fail(failure{Class: m.Class, Rank: rank, Text: m.Text})
	}
}

func (e *engine) contribute(rank int, m collMsg) {
	size := len(e.members)
	if m.Kind == kBroadcast && int(m.Root) >= size {
		e.fail(failure{Class: classMismatch, Detected: true, Text: fmt.Sprintf("broadcast #%d: root %d out of range [0,%d)", m.Seq, m.Root, size)})
		return
	}
	op := e.ops[m.Seq]
	if op == nil {
		op = &pendingOp{kind: m.Kind, root: m.Root, first: rank, parts: make([][]byte, size), have: make([]bool, size)}
		e.ops[m.Seq] = op
	}
	if op.kind != m.Kind || op.root != m.Root {
		e.fail(failure{Class: classMismatch, Detected: true, Text: fmt.Sprintf("collective #%d: rank %d called %s, rank %d called %s",
			m.Seq, op.first, describe(op.kind, op.root), rank, describe(m.Kind, m.Root))})
		return
	}
	if op.have[rank] {
		e.fail(failure{Class: classMismatch, Detected: true, Text: fmt.Sprintf("collective #%d: rank %d contributed twice", m.Seq, rank)})
		return
	}
	op.have[rank] = true
	op.n++
	if op.kind != kBarrier && (op.kind == kAllGather || int(op.root) == rank) {
		op.parts[rank] = m.Data
	}
	e.members[rank].next = max(e.members[rank].next, m.Seq+1)
	for r := range e.members {
		if e.members[r].left && e.members[r].staying() && !op.have[r] {
			e.failOp(m.Seq, op, r)
			return
		}
	}
	if op.n < size {
		return
	}
	delete(e.ops, m.Seq)
	res := collResMsg{Seq: m.Seq, Kind: op.kind}
	switch op.kind {
	case kAllGather:
		res.Parts = op.parts
	case kBroadcast:
		res.Parts = [][]byte{op.parts[op.root]}
	}
	total := 64
	for _, p := range res.Parts {
		total += 4 + len(p)
	}
	if total > MaxFrameSize {
		res = collResMsg{Seq: m.Seq, Kind: op.kind, Status: classNotSupported,
			Text: fmt.Sprintf("%s #%d: result of %d bytes exceeds the %d-byte frame limit", op.kind, m.Seq, total, MaxFrameSize)}
	}
	out := newOut(res)
	for r := range e.members {
		if m := e.members[r]; m.staying() && !m.left {
			m.sink.deliver(out)
		}
	}
}

func describe(k collKind, root uint32) string {
	if k == kBroadcast {
		return fmt.Sprintf("broadcast(root %d)", root)
	}
	return k.String()
}

// failOp ends a collective that can never complete because rank gone said
// goodbye (or was lost, with keepOnLoss) without taking part; its
// contributors get an error.
func (e *engine) failOp(seq uint64, op *pendingOp, gone int) {
	delete(e.ops, seq)
	g := e.members[gone]
	res := collResMsg{Seq: seq, Kind: op.kind, Status: classClosed,
		Text: fmt.Sprintf("%s #%d: rank %d (host %s) closed its store without taking part", op.kind, seq, gone, g.host)}
	if g.lost != "" {
		res.Status, res.Text = classPeerLost, fmt.Sprintf("%s #%d: rank %d on host %s lost: %s", op.kind, seq, gone, g.host, g.lost)
	}
	out := newOut(res)
	for r, ok := range op.have {
		if ok && !e.members[r].left {
			e.members[r].sink.deliver(out)
		}
	}
}

// put stores m's value; rank -1 is the engine itself (no reply).
func (e *engine) put(rank int, m putMsg) {
	s := sink(sinkFunc(func(*outMsg) {}))
	if rank >= 0 {
		s = e.members[rank].sink
	}
	if rank >= 0 {
		_, dup := e.kv[m.Key]
		e.emit(Event{Kind: EventPut, Rank: rank, Host: e.members[rank].host, Key: m.Key, Value: m.Value, Dup: dup})
	}
	if old, ok := e.kv[m.Key]; ok {
		if bytes.Equal(old, m.Value) {
			s.deliver(newOut(replyMsg{ID: m.ID}))
			return
		}
		s.deliver(newOut(replyMsg{ID: m.ID, Status: classMismatch,
			Text: fmt.Sprintf("key %q is already set to different bytes", m.Key)}))
		return
	}
	e.kv[m.Key] = m.Value
	s.deliver(newOut(replyMsg{ID: m.ID}))
	for _, w := range e.waiters[m.Key] {
		if e.current(w.rank, w.session) {
			e.members[w.rank].sink.deliver(newOut(replyMsg{ID: w.id, Value: m.Value}))
		}
	}
	delete(e.waiters, m.Key)
}

// leave records the goodbye of rank's session; collectives it never
// joined fail (a transient session's goodbye ends only itself).
func (e *engine) leave(rank int, session uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.current(rank, session) {
		return
	}
	e.members[rank].left = true
	e.emit(Event{Kind: EventLeft, Rank: rank, Host: e.members[rank].host})
	if e.members[rank].transient {
		return
	}
	for seq, op := range e.ops {
		if !op.have[rank] {
			e.failOp(seq, op, rank)
		}
	}
}

// lost reports that the connection of rank's session ended before its
// goodbye; the job fails with errs.ErrPeerLost naming the rank and its
// host. With keepOnLoss the job goes on: collectives that need the rank
// fail with errs.ErrPeerLost naming it, and the loss is published as the
// next loss record (LossKey) for the others to read. A transient
// session's loss ends only itself: it is told (EventLost), nothing fails.
func (e *engine) lost(rank int, session uint64, cause string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.members[rank]
	if !m.joined || !e.current(rank, session) {
		return
	}
	// Told even after the job failed: the owner orders the losses.
	e.emit(Event{Kind: EventLost, Rank: rank, Host: m.host, Text: cause})
	if m.transient {
		e.members[rank].left = true
		return
	}
	if e.failed != nil {
		return
	}
	e.members[rank].left = true // nothing more is delivered to it
	text := fmt.Sprintf("rank %d on host %s lost: %s", rank, m.host, cause)
	if !e.keepOnLoss {
		e.fail(failure{Class: classPeerLost, Detected: true, Text: text})
		return
	}
	e.log.Error("rank lost; the others go on", "rank", rank, "host", m.host, "cause", cause)
	e.members[rank].lost = cause
	for seq, op := range e.ops {
		if !op.have[rank] {
			e.failOp(seq, op, rank)
		}
	}
	n := 0
	for r := range e.members {
		if e.members[r].lost != "" {
			n++
		}
	}
	rec, _ := json.Marshal(Loss{Rank: rank, Host: m.host, Text: "bootstrap: " + text})
	e.put(-1, putMsg{Key: LossKey(n - 1), Value: rec})
}

// abort fails the job on behalf of rank (rankLauncher for the launcher).
func (e *engine) abort(rank int, c class, text string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fail(failure{Class: c, Rank: rank, Text: text})
}

// fail ends the job: every member still present is told; later requests
// are ignored (members fail them locally). Only the first failure counts.
func (e *engine) fail(f failure) {
	if e.failed != nil {
		return
	}
	e.failed = &f
	r := f.Rank
	if f.Detected {
		r = -1
	}
	e.emit(Event{Kind: EventFailed, Rank: r, Text: f.err().Error(), Err: f.err()})
	e.log.Error("job failed", "error", f.err())
	out := newOut(f.msg())
	for r := range e.members {
		if m := e.members[r]; m.joined && !m.left {
			m.sink.deliver(out)
		}
	}
	e.ops = nil
	e.waiters = nil
}
