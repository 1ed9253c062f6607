package proxy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// helloLen is a proxy hello's size: the connecting proxy's rank (u64),
// the connection's kind (u64) and an HMAC-SHA256 proof of the job secret.
const helloLen = 16 + sha256.Size

// connKind is what a proxy connection carries.
type connKind int

const (
	connOwn   connKind = iota // the proxy's all-to-all messages (and its relayed ones)
	connGroup                 // a relay's group stream to one destination (stream.go)
	connCTS                   // a destination's clear-to-send to one relay (cts.go)
)

func (k connKind) String() string {
	return [...]string{"all-to-all", "group stream", "clear-to-send"}[k]
}

// peerKey names a proxy connection: the rank of the proxy that connected
// (From) and what the connection carries.
type peerKey struct {
	From int
	Kind connKind
}

// own is the all-to-all connection of proxy r.
func own(r int) peerKey { return peerKey{From: r, Kind: connOwn} }

// helloTimeout bounds how long an accepted connection may stay silent
// before its hello; a silent or wrong one is dropped.
const helloTimeout = 10 * time.Second // as the bootstrap's handshake

// Auth is what a proxy proves to the proxy it connects to: that it holds
// the job's secret, for this job and this communicator's listener. Without
// it a process that reached the listener could pose as any rank and inject
// data into an all-to-all.
type Auth struct {
	Secret []byte // the per-job secret (never sent)
	JobID  string
	Key    string // the communicator's handle prefix (Config.Key)
}

// proof is the HMAC a proxy computes for connection k to the listener
// whose handle is handle.
func (a Auth) proof(k peerKey, handle []byte) []byte {
	m := hmac.New(sha256.New, a.Secret)
	for _, part := range [][]byte{[]byte("flexlink proxy hello"), []byte(a.JobID), []byte(a.Key), handle,
		binary.LittleEndian.AppendUint64(nil, uint64(k.From)), binary.LittleEndian.AppendUint64(nil, uint64(k.Kind))} {
		m.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(part))))
		m.Write(part)
	}
	return m.Sum(nil)
}

// hello is the first message a proxy sends on connection k to the
// listener whose handle is handle.
func (a Auth) hello(k peerKey, handle []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(k.From))
	b = binary.LittleEndian.AppendUint64(b, uint64(k.Kind))
	return append(b, a.proof(k, handle)...)
}

// check returns the connection named by hello b that reached the listener
// whose handle is handle, among size ranks.
func (a Auth) check(b, handle []byte, size int) (peerKey, error) {
	if len(b) != helloLen {
		return peerKey{}, fmt.Errorf("proxy hello of %d bytes, want %d", len(b), helloLen)
	}
	from, kind := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	if from >= uint64(size) {
		return peerKey{}, fmt.Errorf("proxy hello from rank %d of %d", from, size)
	}
	if kind > uint64(connCTS) {
		return peerKey{}, fmt.Errorf("proxy hello from rank %d for a connection of kind %d", from, kind)
	}
	k := peerKey{From: int(from), Kind: connKind(kind)}
	if !hmac.Equal(b[16:], a.proof(k, handle)) {
		return peerKey{}, errors.New("proxy hello without a valid proof of the job secret")
	}
	return k, nil
}
