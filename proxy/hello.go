package proxy

import (
	"encoding/binary"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric/net/hello"
)

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
const helloTimeout = hello.DefaultWait // as the bootstrap's handshake

// Auth is what a proxy proves to the proxy it connects to: that it holds
// the job's secret, for this job and this communicator's listener. Without
// it a process that reached the listener could pose as any rank and inject
// data into an all-to-all. The hello is fabric/net/hello's: the connecting
// proxy's rank, the connection's kind as its extra bytes, and the proof.
type Auth struct {
	Secret []byte // the per-job secret (never sent)
	JobID  string
	Key    string // the communicator's handle prefix (Config.Key)
	// Log gets one WARN a minute at most for connections dropped at
	// hello (a foreign process, a scan); nil: dropped silently.
	Log hclog.Logger
}

func (a Auth) config() hello.Config {
	return hello.Config{Secret: a.Secret, JobID: a.JobID, Purpose: "flexlink proxy hello", Scope: a.Key, Tag: helloTag}
}

// kindBytes is a connection kind as a hello's extra bytes.
func kindBytes(k connKind) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(k)) }

// peerOf is the connection a proved hello names, among size ranks.
func peerOf(h hello.Hello, size int) (peerKey, error) {
	if h.From < 0 || h.From >= size {
		return peerKey{}, fmt.Errorf("proxy hello from rank %d of %d", h.From, size)
	}
	if len(h.Extra) != 8 || binary.LittleEndian.Uint64(h.Extra) > uint64(connCTS) {
		return peerKey{}, fmt.Errorf("proxy hello from rank %d for a connection of kind %x", h.From, h.Extra)
	}
	return peerKey{From: h.From, Kind: connKind(binary.LittleEndian.Uint64(h.Extra))}, nil
}
