package shm

import (
	"bytes"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flexlink/flexlink/internal/errs"
)

// Single copy for large messages (Linux Cross-Memory Attach).
//
// Through the rings a message is copied twice: by the sender into the ring
// and by the receiver out of it, and on a host with fewer cores than ranks
// both copies compete for the same CPUs. For a message of at least
// FLEXLINK_SHM_CMA_BYTES the sender instead puts only a 64-byte frame in
// the ring that says where the payload lies in its memory; the receiver,
// once a Recv is posted for it, pulls the bytes straight into the receive
// buffer with process_vm_readv and then counts the message in the
// direction's shared "acked" word, waking the sender. The send completes
// only then: until it does, the buffer belongs to the link (fabric.Link's
// contract), and Go's collector neither moves heap objects nor frees one
// that the pending request still references.
//
// process_vm_readv needs ptrace access to the peer (same user, and Yama's
// ptrace_scope or a container's seccomp policy may still forbid it), so
// each side probes it once while connecting: it reads the peer's copy of
// the peer's handshake nonce, at an address the peer announced. A
// direction uses single copy only if its sender enabled it and its
// receiver's probe read the right bytes; otherwise it stays on the copy
// path for the life of the link.
//
// A receiver that finds the sender gone fails the receive: ESRCH from the
// kernel means the process exited, and the sender's "closed" word, checked
// after the last piece, means it may already have reused the buffer.

const (
	// cmaPiece bounds one process_vm_readv call, so that a huge message
	// still lets the reader notice Abort and peer loss between pieces and
	// the kernel pins a bounded number of the peer's pages at a time.
	cmaPiece = 4 << 20
	// Frame kinds, in the header word at offKind.
	kindCopy = 0 // the payload follows the header in the ring
	kindCMA  = 1 // the payload stays in the sender; offAddr says where
	offKind  = 48
	offAddr  = 56
)

// readvFunc reads len(local) bytes (or fewer) of process pid's memory at
// remote into local, returning how many it read. Tests substitute one that
// fails like a system that forbids process_vm_readv.
type readvFunc func(pid int, local []byte, remote uint64) (int, error)

// processRead is readvFunc through the process_vm_readv system call.
func processRead(pid int, local []byte, remote uint64) (int, error) {
	if len(local) == 0 {
		return 0, nil
	}
	liov := []unix.Iovec{{Base: &local[0]}}
	liov[0].SetLen(len(local))
	riov := []unix.RemoteIovec{{Base: uintptr(remote), Len: len(local)}}
	return unix.ProcessVMReadv(pid, liov, riov, 0)
}

// cmaConfig is what the handshake decided for one link.
type cmaConfig struct {
	sendMin int       // smallest message sent by single copy; 0: none are
	recv    bool      // the peer may send single-copy frames (our probe of it worked)
	read    readvFunc // nil when recv is false
}

func (c cmaConfig) String() string {
	out, in := "off", "off"
	if c.sendMin > 0 {
		out = fmt.Sprintf(">=%d B", c.sendMin)
	}
	if c.recv {
		in = "on"
	}
	return fmt.Sprintf("single-copy out %s, in %s", out, in)
}

// probeWord is a heap copy of a handshake nonce that the peer reads to test
// process_vm_readv. The caller keeps it alive (runtime.KeepAlive) until the
// peer has read it; the heap does not move it.
type probeWord struct{ b [nonceBytes]byte }

func newProbeWord(nonce [nonceBytes]byte) *probeWord { return &probeWord{b: nonce} }

func (p *probeWord) addr() uint64 { return uint64(uintptr(unsafe.Pointer(&p.b[0]))) }

// probePeer reads the peer's probe word at addr and checks that it holds
// want (the peer's nonce, which the caller got from the peer).
func probePeer(read readvFunc, pid int, addr uint64, want []byte) error {
	got := make([]byte, len(want))
	n, err := read(pid, got, addr)
	switch {
	case err != nil:
		return fmt.Errorf("process_vm_readv of pid %d: %w", pid, err)
	case n != len(want) || !bytes.Equal(got, want):
		return fmt.Errorf("process_vm_readv of pid %d read %d bytes that are not its handshake nonce", pid, n)
	}
	return nil
}

// pull copies a single-copy message of the peer at addr into dst, piece
// by piece.
func (l *link) pull(dst []byte, addr uint64) error {
	for off := 0; off < len(dst); {
		if err := l.check(false); err != nil {
			return err
		}
		k := min(len(dst)-off, cmaPiece)
		n, err := l.cma.read(l.who.pid, dst[off:off+k], addr+uint64(off))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ESRCH):
			return l.peerGone("peer process exited during a single-copy read")
		case err == nil && n == 0:
			err = unix.EFAULT
			fallthrough
		case err != nil:
			l.Abort(fmt.Errorf("shm link to rank %d (host %s): single-copy read of %d bytes at %#x from pid %d: %w: %w",
				l.who.rank, l.who.host, k, addr+uint64(off), l.who.pid, err, errs.ErrPeerLost))
			return l.check(false)
		}
		off += n
		l.in.pulled.Add(uint64(n))
		if l.in.pullHook != nil {
			l.in.pullHook(off)
		}
	}
	// The sender gives its buffer back when it aborts or closes: bytes
	// read after that are not the message.
	return l.check(false)
}

// ack tells the sender that the oldest single-copy message it is waiting
// for is done with (read, or dropped on a mismatch).
func (l *link) ack() {
	r := l.in.ring.r
	r.acked.Store(r.acked.Load() + 1) // the consumer is its only writer
	wake(r.ackWait)
}

// ackLoop completes single-copy sends as the peer acknowledges them.
func (l *link) ackLoop() {
	defer l.wg.Done()
	r := l.out.ring.r
	for {
		n, err := l.out.acks.next()
		if err != nil {
			return
		}
		if err := l.await(func() bool { return r.acked.Load() >= n }, r.ackWait, false); err != nil {
			l.out.acks.fail(err, r.acked.Load())
			return
		}
		l.out.acks.complete(r.acked.Load())
	}
}
