package shm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/flexlink/flexlink/internal/auth"
	"github.com/flexlink/flexlink/internal/errs"
)

// The connect handshake runs over a SOCK_SEQPACKET unix socket in the
// abstract namespace (nothing on disk), dialed by the lower rank:
//
//	M1 dialer→listener  hello: magic, from, to, ring bytes, probeD, nonceD, job, comm
//	M2 listener→dialer  nonceL, probeL, Proof("flexlink shm listener", M1, nonceL | probeL)
//	M3 dialer→listener  okL, Proof("flexlink shm dialer", M1, nonceL | probeL, okL) + the memfd (SCM_RIGHTS)
//	M4 listener→dialer  0, okD once the listener's Connect has taken the link
//
// Each side proves it holds the job secret before the other acts on
// anything it sent (Proof is auth.Proof keyed with the job secret, over the
// nonces each side chose, so a recorded handshake proves nothing later);
// the memfd goes only to a listener that proved it. A connection that does
// not prove itself is dropped with one rate-limited WARN (auth.Drops). The
// socket then stays open: its end of file tells each side the other is gone.
//
// probeD and probeL are the addresses of each side's copy of its nonce
// (0: single copy is off on that side). Once a side has checked the other's
// proof it reads the other's probe word with process_vm_readv and says in
// okL / okD (1 or 0) whether that worked, which decides whether the other
// may send it single-copy frames (cma.go).
const (
	helloMagic = "FLXSHM03"
	nonceBytes = 32
	macBytes   = auth.Size
	maxPacket  = 1024
)

type hello struct {
	from, to  int
	ringBytes uint64
	probe     uint64
	nonce     [nonceBytes]byte
	job, comm string
}

func (h *hello) marshal() []byte {
	b := make([]byte, 0, 64+len(h.job)+len(h.comm))
	b = append(b, helloMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.from))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.to))
	b = binary.LittleEndian.AppendUint64(b, h.ringBytes)
	b = binary.LittleEndian.AppendUint64(b, h.probe)
	b = append(b, h.nonce[:]...)
	b = append(b, byte(len(h.job)))
	b = append(b, h.job...)
	b = append(b, byte(len(h.comm)))
	return append(b, h.comm...)
}

func parseHello(b []byte) (*hello, error) {
	const fixed = len(helloMagic) + 4 + 4 + 8 + 8 + nonceBytes
	if len(b) < fixed+2 || string(b[:len(helloMagic)]) != helloMagic {
		return nil, errors.New("not a flexlink shm hello")
	}
	h := &hello{}
	p := b[len(helloMagic):]
	h.from = int(int32(binary.LittleEndian.Uint32(p)))
	h.to = int(int32(binary.LittleEndian.Uint32(p[4:])))
	h.ringBytes = binary.LittleEndian.Uint64(p[8:])
	h.probe = binary.LittleEndian.Uint64(p[16:])
	copy(h.nonce[:], p[24:])
	p = p[24+nonceBytes:]
	for _, s := range []*string{&h.job, &h.comm} {
		if len(p) < 1 || len(p) < 1+int(p[0]) {
			return nil, errors.New("truncated shm hello")
		}
		*s = string(p[1 : 1+int(p[0])])
		p = p[1+int(p[0]):]
	}
	if len(p) != 0 {
		return nil, errors.New("trailing bytes in shm hello")
	}
	return h, nil
}

// proof proves that role's side ("listener", "dialer") holds the secret;
// rest are the fields of M2 and M3 before their proofs.
func proof(secret []byte, role string, m1 []byte, rest ...[]byte) []byte {
	return auth.Proof(secret, "flexlink shm "+role, append([][]byte{m1}, rest...)...)
}

// validProof reports whether p is proof(secret, role, m1, rest...).
func validProof(p, secret []byte, role string, m1 []byte, rest ...[]byte) bool {
	return auth.Valid(p, secret, "flexlink shm "+role, append([][]byte{m1}, rest...)...)
}

// m2Body is the part of M2 before its MAC: nonceL and probeL.
const m2Body = nonceBytes + 8

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func newNonce() (n [nonceBytes]byte) {
	rand.Read(n[:])
	return n
}

// readPacket reads one packet (and any passed file descriptors, which the
// caller must close).
func readPacket(c *net.UnixConn) ([]byte, []int, error) {
	b := make([]byte, maxPacket)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		return nil, nil, err
	}
	var fds []int
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for i := range msgs {
				if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeFds(fds)
		return nil, nil, errors.New("oversized handshake packet")
	}
	if n == 0 {
		closeFds(fds)
		return nil, nil, errors.New("connection closed during handshake")
	}
	return b[:n], fds, nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// peerCred returns the pid of the process at the other end of c, after
// checking it runs as our user (only such a process may share our memory).
func peerCred(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("peer credentials: %w", cerr)
	}
	if int(cred.Uid) != os.Geteuid() {
		return 0, fmt.Errorf("peer runs as uid %d, not %d: %w", cred.Uid, os.Geteuid(), errs.ErrAuth)
	}
	return int(cred.Pid), nil
}
