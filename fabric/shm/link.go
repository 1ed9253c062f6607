package shm

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/internal/linkq"
	"github.com/flexlink/flexlink/internal/errs"
)

const (
	// frameBytes is the header before every message in a ring: the 32-byte
	// tag, the length, a sequence number. Payloads are padded to align so
	// that every copy starts on a cache line.
	frameBytes = 64
	align      = 64
	// maxChunk bounds how much a side copies before publishing its counter.
	maxChunk = 256 << 10
	// spinFor is how long a waiting side polls the ring before it sleeps on
	// the futex; it covers a small message's round trip. Oversubscribed
	// hosts do not spin at all (spinBudget).
	spinFor = 50 * time.Microsecond
	// checkEvery is the longest a sleeping side goes without checking that
	// the link still stands and the peer process lives.
	checkEvery = 200 * time.Millisecond
	// inlineMax is the largest message Send may write in the caller.
	inlineMax = 64 << 10
	// maxMessage rejects frame lengths that can only come from corruption.
	maxMessage = 1 << 46
)

// op is one posted Send or Recv.
type op = linkq.Op

// link is one rank's end of a shared-memory link: a producer on the ring
// towards the peer, a consumer on the ring from it, one progress goroutine
// for each, one that completes single-copy sends as the peer acknowledges
// them (cma.go), and a watcher on the control socket, whose end of file
// says at once that the peer process died or closed the link.
type link struct {
	who   peerID
	mem   mapping
	out   sender
	in    receiver
	cma   cmaConfig
	spin  time.Duration // how long await polls before it sleeps
	live  liveness
	st    status
	props fabric.Props
	log   hclog.Logger

	wg        sync.WaitGroup
	closeOnce sync.Once
}

// peerID names the peer in errors and logs.
type peerID struct {
	rank, pid int
	host      string
}

// mapping is the shared segment as this end sees it, with the locks that
// let Close unmap it while inline senders, Abort and the discovery of the
// peer's loss may still be touching it.
type mapping struct {
	seg          *segment
	mine, theirs *atomic.Uint32 // closed flags in the segment
	mapMu        sync.RWMutex   // Close's unmap waits for inline senders
	wakeMu       sync.RWMutex   // Close's unmap waits for stop and peerGone, which touch the segment's words
}

// sender is the sending half: posted sends, the producer end of the ring
// towards the peer, the frame sequence, and the single-copy sends waiting
// for the peer's acknowledgement.
type sender struct {
	q    *linkq.Queue
	ring producer
	seq  uint64
	acks *ackQueue
}

// receiver is the receiving half: posted receives, the consumer end of the
// ring from the peer, and the frame sequence it expects.
type receiver struct {
	q    *linkq.Queue
	ring consumer
	seq  uint64
	// pulled counts the bytes received by single copy; pullHook, when set
	// (by tests, before the receive is posted), runs after each piece.
	pulled   atomic.Uint64
	pullHook func(pulled int)
}

// liveness is what tells this end that the peer went away: the control
// socket (its end of file) and the peer's process.
type liveness struct {
	ctl  *net.UnixConn
	proc *procWatch
}

// status is how the link ended, if it has: stopped here (Abort, Close) or
// the peer lost. The flags let the hot paths check without the lock.
type status struct {
	mu      sync.Mutex
	stopErr error // set once by Abort or Close
	lostErr error // set once when the peer is found gone
	stopped atomic.Bool
	lost    atomic.Bool
}

// stop records err as the reason the link stopped; it reports false when
// it had already stopped.
func (s *status) stop(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopErr != nil {
		return false
	}
	s.stopErr = err
	s.stopped.Store(true)
	return true
}

// lose records, once, the peer's loss with the error mk makes, and
// returns that error; first is set for the call that recorded it on a
// link that had not stopped.
func (s *status) lose(mk func() error) (err error, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lostErr == nil {
		s.lostErr = mk()
		s.lost.Store(true)
		first = s.stopErr == nil
	}
	return s.lostErr, first
}

// err is the stop's reason, else the loss's, else nil.
func (s *status) err() error {
	switch {
	case s.stopped.Load():
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.stopErr
	case s.lost.Load():
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.lostErr
	}
	return nil
}

type linkConfig struct {
	who  peerID
	side int // 0: dialer, 1: listener
	seg  *segment
	ctl  *net.UnixConn
	log  hclog.Logger
	cma  cmaConfig
	spin time.Duration
}

func newLink(c linkConfig) *link {
	l := &link{
		who:  c.who,
		mem:  mapping{seg: c.seg, mine: c.seg.closed(c.side), theirs: c.seg.closed(1 - c.side)},
		out:  sender{q: linkq.New(), acks: newAckQueue()},
		in:   receiver{q: linkq.New()},
		live: liveness{ctl: c.ctl, proc: watchProc(c.who.pid)},
		log:  c.log, cma: c.cma, spin: c.spin,
	}
	chunk := min(c.seg.ringBytes/4, maxChunk)
	l.out.ring = producer{r: c.seg.ring(c.side), chunk: chunk, wait: l.waitSpace}
	l.in.ring = consumer{r: c.seg.ring(1 - c.side), chunk: chunk, wait: l.waitData}
	l.props = fabric.Props{
		Kind:      fabric.KindShm,
		Bandwidth: 6e9,
		Latency:   2 * time.Microsecond,
		Desc: fmt.Sprintf("shm %s memfd ring %d KiB, %v, pid %d <-> rank %d pid %d",
			c.who.host, c.seg.ringBytes>>10, c.cma, os.Getpid(), c.who.rank, c.who.pid),
	}
	l.wg.Add(4)
	go l.sendLoop()
	go l.recvLoop()
	go l.ackLoop()
	go l.watch()
	return l
}

func (l *link) Peer() int           { return l.who.rank }
func (l *link) Props() fabric.Props { return l.props }

// Send queues buf for the peer. A copied message's request completes once
// the whole message is in the ring; a single-copy one's once the peer has
// pulled it (cma.go). A small message, or a single-copy frame, that finds
// nothing queued and room in the ring is written at once, by the caller.
func (l *link) Send(tag fabric.Tag, buf []byte) fabric.Request {
	cma := l.singleCopy(len(buf))
	if !cma && len(buf) > inlineMax || !l.out.q.TryOwn() {
		return l.out.q.Push(tag, buf)
	}
	if r := l.sendInline(tag, buf, cma); r != nil {
		l.out.q.Release()
		return r
	}
	return l.out.q.PushRelease(tag, buf)
}

// singleCopy reports whether an n-byte message goes by single copy.
func (l *link) singleCopy(n int) bool { return l.cma.sendMin > 0 && n >= l.cma.sendMin }

// sendInline writes the message's frame if the ring has room for it now
// and returns its request, or nil when it wrote nothing. The caller owns
// the ring end.
func (l *link) sendInline(tag fabric.Tag, buf []byte, cma bool) fabric.Request {
	l.mem.mapMu.RLock()
	defer l.mem.mapMu.RUnlock()
	need := uint64(frameBytes)
	if !cma {
		need += padded(uint64(len(buf)))
	}
	if l.mem.seg.mem == nil || l.st.stopped.Load() || l.st.lost.Load() || !l.out.ring.hasRoom(need) {
		return nil
	}
	if !cma {
		if l.writeFrame(op{Tag: tag, Buf: buf}, false) != nil {
			return nil
		}
		return fabric.DoneReq(nil)
	}
	o := op{Req: fabric.NewReq(), Tag: tag, Buf: buf}
	l.post(o, true)
	return o.Req
}

// Recv queues buf for the next message; the request completes once the
// message has been copied into it (or failed its tag or size check).
func (l *link) Recv(tag fabric.Tag, buf []byte) fabric.Request { return l.in.q.Push(tag, buf) }

// Abort fails every pending and later request with err and tells the peer,
// whose requests then fail with errs.ErrPeerLost.
func (l *link) Abort(err error) { l.stop(err) }

// Close aborts with errs.ErrClosed, waits for the progress goroutines to
// leave the shared memory, and unmaps it.
func (l *link) Close() error {
	l.stop(fmt.Errorf("shm link to rank %d: %w", l.who.rank, errs.ErrClosed))
	var err error
	l.closeOnce.Do(func() {
		l.wg.Wait()
		l.live.proc.close()
		l.mem.mapMu.Lock()
		l.mem.wakeMu.Lock()
		err = l.mem.seg.unmap()
		l.mem.wakeMu.Unlock()
		l.mem.mapMu.Unlock()
	})
	return err
}

func (l *link) stop(err error) {
	if !l.st.stop(err) {
		return
	}
	l.out.q.Fail(err)
	l.in.q.Fail(err)
	// An abort (another goroutine) may run while Close unmaps: the words
	// live in the segment, so touch them only while it is mapped.
	l.mem.wakeMu.RLock()
	if l.mem.seg.mem != nil {
		l.mem.mine.Store(1)
	}
	// Only after the closed word is set, so that a peer still pulling one
	// of these buffers sees it and drops what it read.
	l.out.acks.fail(err, 0)
	if l.mem.seg.mem != nil {
		l.wakeAll()
	}
	l.mem.wakeMu.RUnlock()
	l.live.ctl.Close()
}

// peerGone records that the peer is gone and fails sending at once;
// receiving fails when the ring holds no more whole messages.
func (l *link) peerGone(why string) error {
	err, first := l.st.lose(func() error {
		return fmt.Errorf("shm link to rank %d (host %s, pid %d): %s: %w",
			l.who.rank, l.who.host, l.who.pid, why, errs.ErrPeerLost)
	})
	if first {
		l.log.Debug("shm peer gone", "peer", l.who.rank, "pid", l.who.pid, "why", why)
	}
	l.out.q.Fail(err)
	l.mem.wakeMu.RLock()
	defer l.mem.wakeMu.RUnlock()
	if l.mem.seg.mem == nil {
		l.out.acks.fail(err, 0)
		return err
	}
	l.out.acks.fail(err, l.out.ring.r.acked.Load())
	l.wakeAll()
	return err
}

// wakeAll wakes every sleeper on the link's six futex words (in this
// process and the peer's), so that they re-check the link's state.
func (l *link) wakeAll() {
	for _, r := range []*ring{l.out.ring.r, l.in.ring.r} {
		for _, w := range []*atomic.Uint32{r.dataWait, r.spaceWait, r.ackWait} {
			w.Store(0)
			futexWake(w)
		}
	}
}

// check returns the error that ends a wait: the local stop, or the peer's
// loss. full also asks the kernel whether the peer process still runs.
func (l *link) check(full bool) error {
	if err := l.st.err(); err != nil {
		return err
	}
	switch {
	case l.mem.theirs.Load() != 0:
		return l.peerGone("peer closed the link")
	case full && !l.live.proc.alive():
		return l.peerGone("peer process exited")
	}
	return nil
}
