package tcp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"flexlink/fabric"
	"flexlink/internal/errs"
)

// maxBatch is how many queued parts a writer hands to one writev.
const maxBatch = 32

// writer owns the sending half of one socket.
type writer struct {
	l     *link
	i     int
	conn  *net.TCPConn
	mu    sync.Mutex
	parts []part
	shut  bool          // the writer has ended; push refuses
	ready chan struct{} // capacity 1: parts were pushed
}

// push queues p, or reports false when the writer has ended.
func (w *writer) push(p part) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shut {
		return false
	}
	w.parts = append(w.parts, p)
	select {
	case w.ready <- struct{}{}:
	default:
	}
	return true
}

// take removes up to maxBatch queued parts.
func (w *writer) take(into []part) []part {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := min(len(w.parts), maxBatch)
	into = append(into[:0], w.parts[:n]...)
	clear(w.parts[:n])
	w.parts = w.parts[n:]
	return into
}

func (w *writer) run() {
	l := w.l
	defer l.wg.Done()
	beat := max(l.timeout/5, time.Millisecond)
	tick := time.NewTicker(beat)
	defer tick.Stop()
	hdrs := make([]byte, maxBatch*hdrBytes)
	var batch []part
	var bufs net.Buffers
	last := time.Now()
	for {
		if batch = w.take(batch); len(batch) > 0 {
			err := l.failure(&l.txErr)
			if err == nil {
				bufs = bufs[:0]
				for j := range batch {
					h := hdrs[j*hdrBytes : (j+1)*hdrBytes]
					batch[j].h.put(h)
					bufs = append(bufs, h)
					if len(batch[j].data) > 0 {
						bufs = append(bufs, batch[j].data)
					}
				}
				if _, werr := bufs.WriteTo(w.conn); werr != nil {
					err = l.failTx(l.lost(w.i, werr))
				}
				last = time.Now()
			}
			for j := range batch {
				batch[j].op.done(err)
			}
			clear(batch)
			continue
		}
		select {
		case <-w.ready:
		case now := <-tick.C:
			if now.Sub(last) >= beat {
				var h [hdrBytes]byte
				(&header{kind: kindHeartbeat}).put(h[:])
				if _, err := w.conn.Write(h[:]); err != nil {
					l.failTx(l.lost(w.i, err))
				}
				last = now
			}
		case <-l.txDead:
			w.mu.Lock()
			w.shut = true
			rest := w.parts
			w.parts = nil
			w.mu.Unlock()
			err := l.failure(&l.txErr)
			for _, p := range rest {
				p.op.done(err)
			}
			return
		}
	}
}

// reader owns the receiving half of one socket.
type reader struct {
	l      *link
	i      int
	br     *bufio.Reader
	assign chan assignment // readers 1..k-1: where their next part goes
	gone   chan struct{}   // closed when serve returns (every assignment it took is answered)
}

// assignment tells reader i where the part of message seq goes (dst nil:
// discard it) and where to report.
type assignment struct {
	seq  uint64
	dst  []byte
	n    uint64
	done chan<- error
}

// header returns the next data frame's header, skipping heartbeats.
func (r *reader) header() (header, error) {
	var b [hdrBytes]byte
	for {
		if _, err := io.ReadFull(r.br, b[:]); err != nil {
			return header{}, r.l.lost(r.i, err)
		}
		h, err := parseHeader(b[:])
		if err != nil {
			return h, fmt.Errorf("tcp link to %s, socket %d: corrupt stream: %v: %w", r.l.who, r.i, err, errs.ErrPeerLost)
		}
		if h.kind == kindData {
			return h, nil
		}
	}
}

// body reads n bytes into dst, or discards them when dst is nil.
func (r *reader) body(dst []byte, n uint64) error {
	var err error
	if dst != nil {
		_, err = io.ReadFull(r.br, dst)
	} else {
		_, err = r.br.Discard(int(n))
	}
	if err != nil {
		return r.l.lost(r.i, err)
	}
	return nil
}

// match is reader 0's loop: it pairs each message with the next posted
// receive and collects the parts from the other readers.
func (r *reader) match() {
	l := r.l
	defer l.wg.Done()
	k := len(l.readers)
	resp := make([]chan error, k) // reader i's answers
	for i := range resp {
		resp[i] = make(chan error, 1)
	}
	for {
		h, err := r.header()
		if err != nil {
			l.fail(err)
			return
		}
		o, err := l.rxq.Pop()
		if err != nil {
			return
		}
		parts := stripes(h.total, k)
		if h.seq != l.rxSeq || h.part != parts[0] {
			err := fmt.Errorf("tcp link to %s: corrupt stream: message %d (want %d) part of %d bytes (want %d): %w",
				l.who, h.seq, l.rxSeq, h.part, parts[0], errs.ErrPeerLost)
			o.Req.Complete(l.fail(err))
			return
		}
		l.rxSeq++
		dst := o.Buf
		var mismatch error
		switch {
		case h.tag != o.Tag:
			dst, mismatch = nil, fmt.Errorf("recv over tcp: %w", &fabric.TagMismatchError{Peer: l.peer, Want: o.Tag, Got: h.tag})
		case h.total != uint64(len(o.Buf)):
			dst, mismatch = nil, fmt.Errorf("recv from %s over tcp: message has %d bytes, receive posted for %d: %w",
				l.who, h.total, len(o.Buf), errs.ErrMismatch)
		}
		err = r.collect(h, parts, dst, resp)
		if err != nil {
			o.Req.Complete(l.fail(err))
			return
		}
		o.Req.Complete(mismatch)
	}
}

// collect hands parts 1.. to their readers, reads part 0, and waits for
// all. It returns only when no reader can still write into dst: each
// assigned reader has answered, or has left without taking the assignment
// (the link failed; nothing reads into that part).
func (r *reader) collect(h header, parts []uint64, dst []byte, resp []chan error) error {
	l := r.l
	var sent []int
	var err error
	off := parts[0]
	for i := 1; i < len(parts) && parts[i] > 0 && err == nil; i++ {
		a := assignment{seq: h.seq, n: parts[i], done: resp[i]}
		if dst != nil {
			a.dst = dst[off : off+parts[i]]
		}
		off += parts[i]
		select {
		case l.readers[i].assign <- a:
			sent = append(sent, i)
		case <-l.rxDead:
			err = l.failure(&l.rxErr)
		}
	}
	if err == nil {
		var first []byte
		if dst != nil {
			first = dst[:parts[0]]
		}
		if err = r.body(first, parts[0]); err != nil {
			l.fail(err) // close the sockets now: the other readers answer at once
		}
	}
	for _, i := range sent {
		if e := l.answer(i, resp[i]); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// answer waits for reader i's answer to its assignment, or for reader i to
// leave: if it left without answering, it never took the assignment.
func (l *link) answer(i int, resp chan error) error {
	select {
	case e := <-resp:
		return e
	case <-l.readers[i].gone:
		select {
		case e := <-resp:
			return e
		default:
			return l.failure(&l.rxErr) // it left on the link's failure
		}
	}
}

// serve is the loop of readers 1..k-1: read the next part's header, wait
// for reader 0 to say where it goes, read it there.
func (r *reader) serve() {
	l := r.l
	defer l.wg.Done()
	defer close(r.gone)
	for {
		h, err := r.header()
		if err != nil {
			// Nothing more comes on this socket: sending is over, but
			// messages whole on socket 0 may still be received.
			l.failTx(err)
			for {
				select {
				case a := <-r.assign:
					a.done <- err
				case <-l.rxDead:
					return
				}
			}
		}
		select {
		case a := <-r.assign:
			if h.seq != a.seq || h.part != a.n {
				err = fmt.Errorf("tcp link to %s, socket %d: corrupt stream: part of message %d with %d bytes, want message %d with %d: %w",
					l.who, r.i, h.seq, h.part, a.seq, a.n, errs.ErrPeerLost)
			} else {
				err = r.body(a.dst, a.n)
			}
			a.done <- err
			if err != nil {
				l.fail(err)
				return
			}
		case <-l.rxDead:
			return
		}
	}
}
