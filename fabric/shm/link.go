package shm

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"flexlink/fabric"
	"flexlink/fabric/internal/linkq"
	"flexlink/internal/errs"
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
	peer, peerPid int
	host          string
	side          int // 0: dialer, 1: listener
	seg           *segment
	tx            producer
	rx            consumer
	txq, rxq      *linkq.Queue
	acks          *ackQueue
	txSeq, rxSeq  uint64
	cma           cmaConfig
	spin          time.Duration // how long await polls before it sleeps
	ctl           *net.UnixConn
	proc          *procWatch
	mine, theirs  *atomic.Uint32 // closed flags in the segment
	props         fabric.Props
	log           hclog.Logger

	// cmaPulled counts the bytes received by single copy; pullHook, when
	// set (by tests, before the receive is posted), runs after each piece.
	cmaPulled atomic.Uint64
	pullHook  func(pulled int)

	mapMu   sync.RWMutex // Close's unmap waits for inline senders
	wakeMu  sync.RWMutex // Close's unmap waits for stop and peerGone, which touch the segment's words
	mu      sync.Mutex
	stopErr error // set once by Abort or Close
	lostErr error // set once when the peer is found gone
	stopped atomic.Bool
	lost    atomic.Bool

	wg        sync.WaitGroup
	closeOnce sync.Once
}

type linkConfig struct {
	peer, peerPid int
	host          string
	side          int
	seg           *segment
	ctl           *net.UnixConn
	log           hclog.Logger
	cma           cmaConfig
	spin          time.Duration
}

func newLink(c linkConfig) *link {
	l := &link{
		peer: c.peer, peerPid: c.peerPid, host: c.host, side: c.side,
		seg: c.seg, ctl: c.ctl, log: c.log,
		txq: linkq.New(), rxq: linkq.New(), acks: newAckQueue(),
		cma: c.cma, spin: c.spin,
		proc:   watchProc(c.peerPid),
		mine:   c.seg.closed(c.side),
		theirs: c.seg.closed(1 - c.side),
	}
	chunk := min(c.seg.ringBytes/4, maxChunk)
	l.tx = producer{r: c.seg.ring(c.side), chunk: chunk, wait: l.waitSpace}
	l.rx = consumer{r: c.seg.ring(1 - c.side), chunk: chunk, wait: l.waitData}
	l.props = fabric.Props{
		Kind:      fabric.KindShm,
		Bandwidth: 6e9,
		Latency:   2 * time.Microsecond,
		Desc: fmt.Sprintf("shm %s memfd ring %d KiB, %v, pid %d <-> rank %d pid %d",
			c.host, c.seg.ringBytes>>10, c.cma, os.Getpid(), c.peer, c.peerPid),
	}
	l.wg.Add(4)
	go l.sendLoop()
	go l.recvLoop()
	go l.ackLoop()
	go l.watch()
	return l
}

func (l *link) Peer() int           { return l.peer }
func (l *link) Props() fabric.Props { return l.props }

// Send queues buf for the peer. A copied message's request completes once
// the whole message is in the ring; a single-copy one's once the peer has
// pulled it (cma.go). A small message, or a single-copy frame, that finds
// nothing queued and room in the ring is written at once, by the caller.
func (l *link) Send(tag fabric.Tag, buf []byte) fabric.Request {
	cma := l.singleCopy(len(buf))
	if !cma && len(buf) > inlineMax || !l.txq.TryOwn() {
		return l.txq.Push(tag, buf)
	}
	if r := l.sendInline(tag, buf, cma); r != nil {
		l.txq.Release()
		return r
	}
	return l.txq.PushRelease(tag, buf)
}

// singleCopy reports whether an n-byte message goes by single copy.
func (l *link) singleCopy(n int) bool { return l.cma.sendMin > 0 && n >= l.cma.sendMin }

// sendInline writes the message's frame if the ring has room for it now
// and returns its request, or nil when it wrote nothing. The caller owns
// the ring end.
func (l *link) sendInline(tag fabric.Tag, buf []byte, cma bool) fabric.Request {
	l.mapMu.RLock()
	defer l.mapMu.RUnlock()
	need := uint64(frameBytes)
	if !cma {
		need += padded(uint64(len(buf)))
	}
	if l.seg.mem == nil || l.stopped.Load() || l.lost.Load() || !l.tx.hasRoom(need) {
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
func (l *link) Recv(tag fabric.Tag, buf []byte) fabric.Request { return l.rxq.Push(tag, buf) }

// Abort fails every pending and later request with err and tells the peer,
// whose requests then fail with errs.ErrPeerLost.
func (l *link) Abort(err error) { l.stop(err) }

// Close aborts with errs.ErrClosed, waits for the progress goroutines to
// leave the shared memory, and unmaps it.
func (l *link) Close() error {
	l.stop(fmt.Errorf("shm link to rank %d: %w", l.peer, errs.ErrClosed))
	var err error
	l.closeOnce.Do(func() {
		l.wg.Wait()
		l.proc.close()
		l.mapMu.Lock()
		l.wakeMu.Lock()
		err = l.seg.unmap()
		l.wakeMu.Unlock()
		l.mapMu.Unlock()
	})
	return err
}

func (l *link) stop(err error) {
	l.mu.Lock()
	if l.stopErr != nil {
		l.mu.Unlock()
		return
	}
	l.stopErr = err
	l.stopped.Store(true)
	l.mu.Unlock()
	l.txq.Fail(err)
	l.rxq.Fail(err)
	// An abort (another goroutine) may run while Close unmaps: the words
	// live in the segment, so touch them only while it is mapped.
	l.wakeMu.RLock()
	if l.seg.mem != nil {
		l.mine.Store(1)
	}
	// Only after the closed word is set, so that a peer still pulling one
	// of these buffers sees it and drops what it read.
	l.acks.fail(err, 0)
	if l.seg.mem != nil {
		l.wakeAll()
	}
	l.wakeMu.RUnlock()
	l.ctl.Close()
}

// peerGone records that the peer is gone and fails sending at once;
// receiving fails when the ring holds no more whole messages.
func (l *link) peerGone(why string) error {
	l.mu.Lock()
	if l.lostErr == nil {
		l.lostErr = fmt.Errorf("shm link to rank %d (host %s, pid %d): %s: %w",
			l.peer, l.host, l.peerPid, why, errs.ErrPeerLost)
		l.lost.Store(true)
		if l.stopErr == nil {
			l.log.Debug("shm peer gone", "peer", l.peer, "pid", l.peerPid, "why", why)
		}
	}
	err := l.lostErr
	l.mu.Unlock()
	l.txq.Fail(err)
	l.wakeMu.RLock()
	defer l.wakeMu.RUnlock()
	if l.seg.mem == nil {
		l.acks.fail(err, 0)
		return err
	}
	l.acks.fail(err, l.tx.r.acked.Load())
	l.wakeAll()
	return err
}

// wakeAll wakes every sleeper on the link's six futex words (in this
// process and the peer's), so that they re-check the link's state.
func (l *link) wakeAll() {
	for _, r := range []*ring{l.tx.r, l.rx.r} {
		for _, w := range []*atomic.Uint32{r.dataWait, r.spaceWait, r.ackWait} {
			w.Store(0)
			futexWake(w)
		}
	}
}

// check returns the error that ends a wait: the local stop, or the peer's
// loss. full also asks the kernel whether the peer process still runs.
func (l *link) check(full bool) error {
	if l.stopped.Load() {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.stopErr
	}
	switch {
	case l.lost.Load():
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.lostErr
	case l.theirs.Load() != 0:
		return l.peerGone("peer closed the link")
	case full && !l.proc.alive():
		return l.peerGone("peer process exited")
	}
	return nil
}
