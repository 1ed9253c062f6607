package proxy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// helloLen is a proxy hello's size: the sender's rank (u64) and an
// HMAC-SHA256 proof of the job secret.
const helloLen = 8 + sha256.Size

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

// proof is the HMAC a sender of rank from computes for the listener whose
// handle is handle.
func (a Auth) proof(from int, handle []byte) []byte {
	m := hmac.New(sha256.New, a.Secret)
	for _, part := range [][]byte{[]byte("flexlink proxy hello"), []byte(a.JobID), []byte(a.Key), handle, binary.LittleEndian.AppendUint64(nil, uint64(from))} {
		m.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(part))))
		m.Write(part)
	}
	return m.Sum(nil)
}

// hello is the first message a proxy sends on a connection to the
// listener whose handle is handle.
func (a Auth) hello(from int, handle []byte) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, uint64(from)), a.proof(from, handle)...)
}

// check returns the sender's rank of hello b that reached the listener
// whose handle is handle, among size ranks.
func (a Auth) check(b, handle []byte, size int) (int, error) {
	if len(b) != helloLen {
		return 0, fmt.Errorf("proxy hello of %d bytes, want %d", len(b), helloLen)
	}
	from := binary.LittleEndian.Uint64(b)
	if from >= uint64(size) {
		return 0, fmt.Errorf("proxy hello from rank %d of %d", from, size)
	}
	if !hmac.Equal(b[8:], a.proof(int(from), handle)) {
		return 0, errors.New("proxy hello without a valid proof of the job secret")
	}
	return int(from), nil
}
