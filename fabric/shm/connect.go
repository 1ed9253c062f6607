package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

// dial runs the dialer's side of the handshake against peer's socket.
func (e *endpoint) dial(ctx context.Context, peer int, name string) (l fabric.Link, err error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", "@"+name)
	if err != nil {
		return nil, fmt.Errorf("dial shm socket @%s: %w", name, lostIfGone(err))
	}
	conn := c.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	var seg *segment
	defer func() {
		if !stop() && err == nil {
			err = fabric.CtxErr(ctx)
			l.Close()
			l = nil
		}
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", fabric.CtxErr(ctx), err)
			}
			conn.Close()
			if l == nil && seg != nil {
				seg.unmap()
			}
		}
	}()
	pid, err := peerCred(conn)
	if err != nil {
		return nil, err
	}
	h := hello{from: e.cfg.Rank, to: peer, ringBytes: e.ringBytes, nonce: newNonce(), job: e.cfg.JobID, comm: e.cfg.Comm}
	var probe *probeWord // read by the listener before M4
	if e.cma.bytes > 0 {
		probe = newProbeWord(h.nonce)
		h.probe = probe.addr()
	}
	defer runtime.KeepAlive(probe)
	m1 := h.marshal()
	if _, err := conn.Write(m1); err != nil {
		return nil, fmt.Errorf("send hello to pid %d: %w", pid, lostIfGone(err))
	}
	m2, fds, err := readPacket(conn)
	closeFds(fds)
	if err != nil {
		return nil, fmt.Errorf("read proof from pid %d: %w", pid, lostIfGone(err))
	}
	if len(m2) != m2Body+macBytes || !validProof(m2[m2Body:], e.cfg.Secret, "listener", m1, m2[:m2Body]) {
		return nil, fmt.Errorf("process %d at shm socket @%s did not prove job membership: %w", pid, name, errs.ErrAuth)
	}
	okL := e.cma.canPull(e.log, peer, pid, binary.LittleEndian.Uint64(m2[nonceBytes:m2Body]), m2[:nonceBytes])
	fd, seg, err := createSegment("flexlink-"+sanitize(e.cfg.JobID, 40), e.ringBytes)
	if err != nil {
		return nil, err
	}
	m3 := []byte{boolByte(okL)}
	m3 = append(m3, proof(e.cfg.Secret, "dialer", m1, m2[:m2Body], m3)...)
	_, _, err = conn.WriteMsgUnix(m3, unix.UnixRights(fd), nil)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("send segment to pid %d: %w", pid, lostIfGone(err))
	}
	m4, fds, err := readPacket(conn)
	closeFds(fds)
	if err != nil {
		return nil, fmt.Errorf("wait for rank %d (pid %d) to accept: %w", peer, pid, lostIfGone(err))
	}
	if len(m4) != 2 || m4[0] != 0 || m4[1] > 1 {
		return nil, fmt.Errorf("rank %d (pid %d) refused the link: %q", peer, pid, m4)
	}
	conn.SetDeadline(time.Time{})
	return newLink(linkConfig{who: peerID{rank: peer, pid: pid, host: e.cfg.Host}, side: 0, seg: seg, ctl: conn, log: e.log,
		cma: e.cma.config(m4[1] == 1, okL), spin: e.spin}), nil
}

// acceptLoop starts answering dialers and filing the proven ones for
// their rank's Connect.
func (e *endpoint) acceptLoop() {
	e.lb.Accept(e.ln.AcceptUnix, func(conn *net.UnixConn) error {
		from, a, err := e.answer(conn)
		if err != nil {
			return err
		}
		err = e.lb.File(conn, from, func(_ *accepted, dup bool) (*accepted, error) {
			if dup {
				return nil, errors.New("dialed twice")
			}
			return a, nil
		})
		if err != nil {
			a.release()
			return fmt.Errorf("rank %d dialed twice, or the endpoint closed", from)
		}
		return nil
	}, func(err error) {
		e.log.Error("accept on shm socket failed; no more links can be made", "socket", e.name, "error", err)
	}, func(_ *net.UnixConn, err error) {
		if u := (unproven{}); errors.As(err, &u) {
			e.drops.Drop(u.err)
			return
		}
		e.log.Warn("dropped shm connection from a rank of the job", "socket", e.name, "error", err)
	})
}

// unproven is the error of a connection dropped before its dialer proved
// the job secret: a foreign or stale process, or a scan. Such drops are
// counted and warned about at most once a minute (endpoint.drops); a
// dialer that proved itself and then failed is warned about each time.
type unproven struct{ err error }

func (u unproven) Error() string { return u.err.Error() }
func (u unproven) Unwrap() error { return u.err }

// answer runs the listener's side of the handshake up to mapping the
// segment; Connect sends the confirmation.
func (e *endpoint) answer(conn *net.UnixConn) (int, *accepted, error) {
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	pid, err := peerCred(conn)
	if err != nil {
		return 0, nil, unproven{err}
	}
	m1, fds, err := readPacket(conn)
	closeFds(fds)
	if err != nil {
		return 0, nil, unproven{fmt.Errorf("pid %d: read hello: %w", pid, err)}
	}
	h, err := parseHello(m1)
	switch {
	case err != nil:
		return 0, nil, unproven{fmt.Errorf("pid %d: %w", pid, err)}
	case h.job != e.cfg.JobID || h.comm != e.cfg.Comm:
		return 0, nil, unproven{fmt.Errorf("pid %d: hello for job %q communicator %q, this is job %q communicator %q",
			pid, h.job, h.comm, e.cfg.JobID, e.cfg.Comm)}
	case h.to != e.cfg.Rank || h.from < 0 || h.from >= h.to:
		return 0, nil, unproven{fmt.Errorf("pid %d: hello from rank %d to rank %d reached rank %d", pid, h.from, h.to, e.cfg.Rank)}
	}
	if err := checkRingBytes(h.ringBytes); err != nil {
		return 0, nil, unproven{fmt.Errorf("rank %d (pid %d): %w", h.from, pid, err)}
	}
	nonce := newNonce()
	var probe *probeWord // read by the dialer before M3
	m2 := append(nonce[:], 0, 0, 0, 0, 0, 0, 0, 0)
	if e.cma.bytes > 0 {
		probe = newProbeWord(nonce)
		binary.LittleEndian.PutUint64(m2[nonceBytes:], probe.addr())
	}
	if _, err := conn.Write(append(m2, proof(e.cfg.Secret, "listener", m1, m2)...)); err != nil {
		return 0, nil, unproven{fmt.Errorf("rank %d (pid %d): send proof: %w", h.from, pid, err)}
	}
	m3, fds, err := readPacket(conn)
	runtime.KeepAlive(probe)
	if err != nil {
		return 0, nil, unproven{fmt.Errorf("rank %d (pid %d): read proof: %w", h.from, pid, err)}
	}
	defer closeFds(fds)
	if len(m3) != 1+macBytes || m3[0] > 1 || !validProof(m3[1:], e.cfg.Secret, "dialer", m1, m2, m3[:1]) {
		return 0, nil, unproven{fmt.Errorf("rank %d (pid %d) did not prove job membership: %w", h.from, pid, errs.ErrAuth)}
	}
	if len(fds) != 1 {
		return 0, nil, fmt.Errorf("rank %d (pid %d) passed %d descriptors, want 1", h.from, pid, len(fds))
	}
	seg, err := mapSegment(fds[0], h.ringBytes)
	if err != nil {
		return 0, nil, fmt.Errorf("rank %d (pid %d): %w", h.from, pid, err)
	}
	if !seg.valid() {
		seg.unmap()
		return 0, nil, fmt.Errorf("rank %d (pid %d) passed a segment without the flexlink stamp", h.from, pid)
	}
	okD := e.cma.canPull(e.log, h.from, pid, h.probe, h.nonce[:])
	conn.SetDeadline(time.Time{})
	return h.from, &accepted{conn: conn, seg: seg, pid: pid, cma: e.cma.config(m3[0] == 1, okD)}, nil
}

// lostIfGone marks a handshake error caused by the peer going away (its end
// of the socket closed or reset, or its listening socket gone: a dial
// refused) as errs.ErrPeerLost, so callers and
// flexrun tell a lost peer from a local failure.
func lostIfGone(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w: %w", err, errs.ErrPeerLost)
	}
	return err
}
