package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

func (l *link) waitSpace(ready func() bool, w *atomic.Uint32) error {
	return l.await(ready, w, false)
}

func (l *link) waitData(ready func() bool, w *atomic.Uint32) error {
	return l.await(ready, w, true)
}

// await spins on ready for l.spin, then sleeps on the futex word w in
// slices of checkEvery, checking between them that the link stands. When
// the peer is gone and drain is set, data it wrote before still counts.
func (l *link) await(ready func() bool, w *atomic.Uint32, drain bool) error {
	fail := func(err error) error {
		if drain && !l.st.stopped.Load() && ready() {
			return nil
		}
		return err
	}
	until := time.Now().Add(l.spin)
	for i := 1; l.spin > 0; i++ {
		if ready() {
			return nil
		}
		if i%64 == 0 {
			if err := l.check(false); err != nil {
				return fail(err)
			}
			if time.Now().After(until) {
				break
			}
			runtime.Gosched()
		}
	}
	for {
		w.Store(1)
		if ready() {
			w.Store(0)
			return nil
		}
		if err := l.check(false); err != nil {
			return fail(err)
		}
		futexWait(w, 1, checkEvery)
		if err := l.check(true); err != nil {
			return fail(err)
		}
	}
}

func padded(n uint64) uint64 { return (n + align - 1) &^ (align - 1) }

func (l *link) sendLoop() {
	defer l.wg.Done()
	for {
		o, err := l.out.q.PopOwn()
		if err != nil {
			return
		}
		l.post(o, l.singleCopy(len(o.Buf)))
		l.out.q.Release()
	}
}

// post writes o's frame and completes its request: a copied message's at
// once, a single-copy one's when the peer acknowledges it (ackLoop). The
// caller owns the ring end.
func (l *link) post(o op, cma bool) {
	if !cma {
		o.Req.Complete(l.writeFrame(o, false))
		return
	}
	if !l.out.acks.add(o) {
		return
	}
	if err := l.writeFrame(o, true); err != nil {
		o.Req.Complete(err)
	}
}

// writeFrame writes o's header and, unless cma is set, its payload. A
// single-copy frame carries the payload's address in this process instead.
func (l *link) writeFrame(o op, cma bool) error {
	var h [frameBytes]byte
	for i, w := range o.Tag {
		binary.LittleEndian.PutUint64(h[8*i:], w)
	}
	n := uint64(len(o.Buf))
	binary.LittleEndian.PutUint64(h[32:], n)
	binary.LittleEndian.PutUint64(h[40:], l.out.seq)
	l.out.seq++
	if cma {
		binary.LittleEndian.PutUint64(h[offKind:], kindCMA)
		binary.LittleEndian.PutUint64(h[offAddr:], uint64(uintptr(unsafe.Pointer(&o.Buf[0]))))
	}
	if err := l.out.ring.write(h[:], frameBytes); err != nil {
		return err
	}
	if cma {
		l.out.ring.publish()
		return nil
	}
	if err := l.out.ring.write(o.Buf, n); err != nil {
		return err
	}
	if err := l.out.ring.write(nil, padded(n)-n); err != nil {
		return err
	}
	l.out.ring.publish()
	return nil
}

func (l *link) recvLoop() {
	defer l.wg.Done()
	for {
		o, err := l.in.q.PopOwn()
		if err != nil {
			return
		}
		err = l.readFrame(o)
		o.Req.Complete(err)
		l.in.q.Release()
		if err != nil && !errors.Is(err, errs.ErrMismatch) {
			l.in.q.Fail(err)
		}
	}
}

// readFrame takes the next message out of the ring (or, for a single-copy
// frame, out of the sender's memory) into o's buffer. A message with
// another tag or length than o expects is consumed and dropped (a
// single-copy one acknowledged unread), and o fails with errs.ErrMismatch.
func (l *link) readFrame(o op) error {
	var h [frameBytes]byte
	if err := l.in.ring.read(h[:], frameBytes); err != nil {
		return err
	}
	var tag fabric.Tag
	for i := range tag {
		tag[i] = binary.LittleEndian.Uint64(h[8*i:])
	}
	n := binary.LittleEndian.Uint64(h[32:])
	kind := binary.LittleEndian.Uint64(h[offKind:])
	seq := binary.LittleEndian.Uint64(h[40:])
	if seq != l.in.seq || n > maxMessage || kind != kindCopy && (kind != kindCMA || !l.cma.recv || n == 0) {
		err := fmt.Errorf("corrupt frame (sequence %d, want %d; length %d; kind %d)", seq, l.in.seq, n, kind)
		l.Abort(fmt.Errorf("shm link to rank %d (host %s): %w: %w", l.who.rank, l.who.host, err, errs.ErrPeerLost))
		return l.check(false)
	}
	l.in.seq++
	dst := o.Buf
	var mismatch error
	switch {
	case tag != o.Tag:
		dst, mismatch = nil, fmt.Errorf("recv over shm: %w", &fabric.TagMismatchError{Peer: l.who.rank, Want: o.Tag, Got: tag})
	case n != uint64(len(o.Buf)):
		dst, mismatch = nil, fmt.Errorf("recv from rank %d over shm (host %s): message has %d bytes, receive posted for %d: %w",
			l.who.rank, l.who.host, n, len(o.Buf), errs.ErrMismatch)
	}
	if kind == kindCMA {
		l.in.ring.release()
		if dst != nil {
			if err := l.pull(dst, binary.LittleEndian.Uint64(h[offAddr:])); err != nil {
				return err
			}
		}
		l.ack()
		return mismatch
	}
	if err := l.in.ring.read(dst, n); err != nil {
		return err
	}
	if err := l.in.ring.read(nil, padded(n)-n); err != nil {
		return err
	}
	l.in.ring.release()
	return mismatch
}

// watch waits on the control socket. The peer never writes to it after the
// handshake, so any return means its end closed: the process died, or it
// closed the link.
func (l *link) watch() {
	defer l.wg.Done()
	var b [16]byte
	for {
		n, err := l.live.ctl.Read(b[:])
		if err != nil || n == 0 {
			break
		}
	}
	if !l.st.stopped.Load() {
		l.peerGone("control socket closed")
	}
}
