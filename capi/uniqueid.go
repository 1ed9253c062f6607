package capi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/settings"
)

// UniqueIDBytes is NCCL_UNIQUE_ID_BYTES.
const UniqueIDBytes = 128

// UniqueID is an ncclUniqueId: what every rank of a new communicator passes
// to ncclCommInitRank. flexlink's layout (big-endian):
//
//	offset  0  magic "FLXN"
//	offset  4  layout version (1)
//	offset  5  reserved (0)
//	offset  6  port of the rendezvous (2 bytes)
//	offset  8  address of the rendezvous (16 bytes, IPv4-mapped for IPv4)
//	offset 24  per-job secret (32 random bytes)
//	offset 56  nonce (8 random bytes): names the job (bootstrap job id,
//	           shared-memory segments) and tells ids apart
//	offset 64  zero
//	offset 124 CRC-32 (IEEE) of bytes 0..123
//
// The process that made the id (ncclGetUniqueId) serves the rendezvous, a
// bootstrap.Server, from its first ncclCommInitRank with the id. The
// secret never crosses the wire: ranks prove they know it with an HMAC
// challenge (package bootstrap), and data links are authenticated with it.
// Whoever can read the id can join the job, as with NCCL: pass it over a
// channel you trust (MPI, torch's store).
type UniqueID [UniqueIDBytes]byte

var idMagic = [4]byte{'F', 'L', 'X', 'N'}

const (
	idVersion   = 1
	secretBytes = 32
	nonceBytes  = 8
	crcOffset   = UniqueIDBytes - 4
)

// idInfo is a decoded UniqueID.
type idInfo struct {
	Addr   netip.AddrPort
	Secret []byte
	Nonce  [nonceBytes]byte
}

// Server is the rendezvous's host:port.
func (i idInfo) Server() string { return i.Addr.String() }

// JobID is the nonce in hex (the bootstrap's job id).
func (i idInfo) JobID() string { return "nccl-" + hex.EncodeToString(i.Nonce[:]) }

// newIDInfo makes a fresh id naming addr with a random secret and nonce.
func newIDInfo(addr netip.AddrPort) (idInfo, error) {
	info := idInfo{Addr: addr, Secret: make([]byte, secretBytes)}
	if _, err := rand.Read(info.Secret); err != nil {
		return idInfo{}, fmt.Errorf("unique id: random secret: %w", err)
	}
	if _, err := rand.Read(info.Nonce[:]); err != nil {
		return idInfo{}, fmt.Errorf("unique id: random nonce: %w", err)
	}
	return info, nil
}

// encode lays the id out as documented on UniqueID.
func (i idInfo) encode() UniqueID {
	var id UniqueID
	copy(id[0:4], idMagic[:])
	id[4] = idVersion
	binary.BigEndian.PutUint16(id[6:8], i.Addr.Port())
	a16 := i.Addr.Addr().As16()
	copy(id[8:24], a16[:])
	copy(id[24:56], i.Secret)
	copy(id[56:64], i.Nonce[:])
	binary.BigEndian.PutUint32(id[crcOffset:], crc32.ChecksumIEEE(id[:crcOffset]))
	return id
}

// decodeID checks and decodes an id. Anything that is not an id made by
// flexlink's ncclGetUniqueId (another library's, zeroes, a corrupted copy)
// fails with ncclInvalidArgument.
func decodeID(id UniqueID) (idInfo, error) {
	if !bytes.Equal(id[0:4], idMagic[:]) {
		return idInfo{}, fail(InvalidArgument, "invalid ncclUniqueId: not made by flexlink's ncclGetUniqueId (magic %q); was another NCCL library loaded on some rank?", id[0:4])
	}
	if id[4] != idVersion {
		return idInfo{}, fail(InvalidArgument, "invalid ncclUniqueId: layout version %d, this library reads %d (mixed flexlink versions?)", id[4], idVersion)
	}
	if got, want := binary.BigEndian.Uint32(id[crcOffset:]), crc32.ChecksumIEEE(id[:crcOffset]); got != want {
		return idInfo{}, fail(InvalidArgument, "invalid ncclUniqueId: checksum %08x, want %08x (the id was corrupted on its way to this rank)", got, want)
	}
	var a16 [16]byte
	copy(a16[:], id[8:24])
	info := idInfo{
		Addr:   netip.AddrPortFrom(netip.AddrFrom16(a16).Unmap(), binary.BigEndian.Uint16(id[6:8])),
		Secret: bytes.Clone(id[24:56]),
	}
	copy(info.Nonce[:], id[56:64])
	if info.Addr.Port() == 0 {
		return idInfo{}, fail(InvalidArgument, "invalid ncclUniqueId: no rendezvous port")
	}
	return info, nil
}

// reservePort finds a free TCP port on all interfaces for the rendezvous
// (FLEXLINK_PORT_RANGE from env, the library's settings):
// the first free one of FLEXLINK_PORT_RANGE from its top (away from the
// listeners that take the range from the bottom), else an ephemeral one.
// The server starts only at the first ncclCommInitRank (it must know the
// number of ranks), so the port is released in between; another process
// taking it meanwhile makes the server fail to start, with an error
// naming the port.
func reservePort(env settings.Env) (int, error) {
	pr, err := env.Ports()
	if err != nil {
		return 0, fmt.Errorf("unique id: %w", err)
	}
	l, err := pr.ListenFromTop(context.Background(), "tcp", "")
	if err != nil {
		return 0, fmt.Errorf("unique id: find a free port: %w", err)
	}
	defer l.Close()
	_, p, err := net.SplitHostPort(l.Addr().String())
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}

// advertisedAddr is the address other hosts reach this one at: the first
// up, non-loopback IPv4 address of an interface whose name starts with
// ifPrefix (any when ""), else the loopback address.
func advertisedAddr(ifPrefix string) netip.Addr {
	ifs, err := net.Interfaces()
	if err != nil {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		if ifPrefix != "" && !matchIfName(ifc.Name, ifPrefix) {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if pfx, err := netip.ParsePrefix(a.String()); err == nil && pfx.Addr().Is4() {
				return pfx.Addr()
			}
		}
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// matchIfName follows NCCL_SOCKET_IFNAME: a prefix, or ^prefix to exclude.
func matchIfName(name, spec string) bool {
	if len(spec) > 0 && spec[0] == '^' {
		return !hasPrefix(name, spec[1:])
	}
	return hasPrefix(name, spec)
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// netipZero is a placeholder rendezvous address for ids that never travel
// (ncclCommInitAll joins through an in-process store).
func netipZero() netip.AddrPort { return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0) }

// rendezvous are the ids this process made (ncclGetUniqueId), by nonce,
// and the servers of those in use; and, under flexrun, the process's word
// to flexrun's store about its communicators' ends (report.go).
type rendezvous struct {
	mu     sync.Mutex
	served map[[nonceBytes]byte]*served
	env    settings.Env // the library's (New sets it)
	report jobReport
}

// served is the rendezvous of an id this process made: its server starts
// at the first ncclCommInitRank with the id (the number of ranks is known
// then) and stops when the last communicator made from it here is gone.
type served struct {
	info idInfo
	srv  *bootstrap.Server
	size int
	refs int
}

// add records an id this process made.
func (r *rendezvous) add(info idInfo) {
	r.mu.Lock()
	r.served[info.Nonce] = &served{info: info}
	r.mu.Unlock()
}

// livenessTimeout is how long a member of a rendezvous and its server
// may each stay silent (paused, starved) before the other declares it
// lost: FLEXLINK_LIVENESS_TIMEOUT, as for flexrun's jobs (the bootstrap's
// own default, 1.5 s, would end a healthy job whose rank is stopped in a
// debugger or starved on a loaded host). A closed connection, a dead
// process, is noticed at once whatever it is.
func livenessTimeout(env settings.Env) (time.Duration, error) {
	d, err := env.Duration("FLEXLINK_LIVENESS_TIMEOUT")
	if err != nil {
		return 0, fail(InvalidArgument, "%w", err)
	}
	return d, nil
}

// rendezvousDial is how a rank joins the rendezvous of info as rank r of
// size, from host: with the same liveness limit as its server.
func (l *Library) rendezvousDial(info idInfo, r, size int, host string, log hclog.Logger) (bootstrap.DialConfig, error) {
	liveness, err := livenessTimeout(l.env)
	if err != nil {
		return bootstrap.DialConfig{}, err
	}
	return bootstrap.DialConfig{Addr: info.Server(), Rank: r, Size: size, Secret: info.Secret, JobID: info.JobID(),
		Host: host, Logger: log, PeerTimeout: liveness}, nil
}

// serve starts (once) the rendezvous of an id this process made and takes a
// reference on it; it returns nil, nil for ids made elsewhere.
func (r *rendezvous) serve(info idInfo, size int, log hclog.Logger) (*served, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.served[info.Nonce]
	if s == nil {
		return nil, nil
	}
	if s.srv == nil {
		liveness, err := livenessTimeout(r.env)
		if err != nil {
			return nil, err
		}
		listen := fmt.Sprintf(":%d", info.Addr.Port())
		// KeepOnLoss: a dead rank fails the communicators that hold it, and
		// the survivors may still make new ones (ncclCommShrink).
		// PeerTimeout: a member silent for the liveness limit is lost (a
		// dead one's connection ends, and that is noticed at once).
		srv, err := bootstrap.NewServer(bootstrap.ServerConfig{Addr: listen, Size: size, Secret: info.Secret, JobID: info.JobID(),
			KeepOnLoss: true, Logger: log.Named("rendezvous"), PeerTimeout: liveness})
		if err != nil {
			return nil, fail(SystemError, "start the rendezvous of this ncclUniqueId on port %d: %w", info.Addr.Port(), err)
		}
		s.srv, s.size = srv, size
	} else if s.size != size {
		return nil, fail(InvalidArgument, "ncclCommInitRank: nranks %d, but this process already started the id's rendezvous for %d ranks", size, s.size)
	}
	s.refs++
	return s, nil
}

// unserve drops a reference on s and stops its server with the last one.
func (r *rendezvous) unserve(s *served) {
	if s == nil {
		return
	}
	r.mu.Lock()
	s.refs--
	stop := s.refs == 0
	if stop {
		delete(r.served, s.info.Nonce)
	}
	r.mu.Unlock()
	if stop && s.srv != nil {
		_ = s.srv.Close()
	}
}
