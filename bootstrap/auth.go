package bootstrap

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"io"
	"net"

	"github.com/flexlink/flexlink/internal/auth"
	"github.com/flexlink/flexlink/internal/errs"
)

// Authentication is a challenge–response in both directions over
// internal/auth.Proof (HMAC-SHA256 keyed by the job secret, which never
// crosses the wire):
//
//	client → server  hello{rank, size, job, host, client nonce}
//	server → client  challenge{server nonce, Proof("server", client nonce, server nonce, job, rank, size)}
//	client           checks the server's proof (a false server is refused here)
//	client → server  proof{Proof("client", server nonce, client nonce, job, rank, size)}
//	server → client  welcome, or reject{class, text}
//
// The role labels keep one side's proof from being replayed as the
// other's; fresh nonces on both sides keep old proofs from being replayed
// at all.
const (
	labelClient = "flexlink bootstrap v2 client"
	labelServer = "flexlink bootstrap v2 server"
)

// proofParts are what a proof binds: the two nonces (the verifier's
// first), the job, the rank and the job's size.
func proofParts(first, second [nonceLen]byte, job string, rank, size uint32) [][]byte {
	return [][]byte{first[:], second[:], []byte(job), auth.U64(uint64(rank)), auth.U64(uint64(size))}
}

func proof(secret []byte, label string, first, second [nonceLen]byte, job string, rank, size uint32) [macLen]byte {
	var out [macLen]byte
	copy(out[:], auth.Proof(secret, label, proofParts(first, second, job, rank, size)...))
	return out
}

// validProof reports, in constant time, whether p is proof(secret, label, ...).
func validProof(p [macLen]byte, secret []byte, label string, first, second [nonceLen]byte, job string, rank, size uint32) bool {
	return auth.Valid(p[:], secret, label, proofParts(first, second, job, rank, size)...)
}

func newNonce() ([nonceLen]byte, error) {
	var n [nonceLen]byte
	_, err := io.ReadFull(rand.Reader, n[:])
	return n, err
}

// writeMsg writes one message and flushes it.
func writeMsg(w *bufio.Writer, m message) error {
	if _, err := w.Write(marshal(m)); err != nil {
		return err
	}
	return w.Flush()
}

// readMsg reads one frame of at most max bytes and decodes it.
func readMsg(r *bufio.Reader, max int) (message, error) {
	f, err := readFrame(r, max)
	if err != nil {
		return nil, err
	}
	return decodeMsg(f)
}

// clientHandshake authenticates cfg's rank to the server and waits for its
// welcome. The caller bounds it with deadlines on the connection.
func clientHandshake(br *bufio.Reader, bw *bufio.Writer, cfg *DialConfig) error {
	cn, err := newNonce()
	if err != nil {
		return fmt.Errorf("nonce: %w", err)
	}
	rank, size := uint32(cfg.Rank), uint32(cfg.Size)
	if err := writeMsg(bw, helloMsg{Rank: rank, Size: size, Job: cfg.JobID, Host: cfg.Host, Nonce: cn}); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	m, err := readMsg(br, maxHandshakeFrame)
	if err != nil {
		return fmt.Errorf("read challenge: %w", err)
	}
	var ch challengeMsg
	switch v := m.(type) {
	case challengeMsg:
		ch = v
	case rejectMsg:
		return newWireError(v.Class, "refused by server: "+v.Text)
	default:
		return fmt.Errorf("got %s instead of challenge: %w", m.msgType(), errMalformed)
	}
	if !validProof(ch.Proof, cfg.Secret, labelServer, cn, ch.Nonce, cfg.JobID, rank, size) {
		return fmt.Errorf("server could not prove the job secret: %w", errs.ErrAuth)
	}
	mine := proof(cfg.Secret, labelClient, ch.Nonce, cn, cfg.JobID, rank, size)
	if err := writeMsg(bw, proofMsg{Proof: mine}); err != nil {
		return fmt.Errorf("send proof: %w", err)
	}
	m, err = readMsg(br, maxHandshakeFrame)
	if err != nil {
		return fmt.Errorf("read welcome: %w", err)
	}
	switch v := m.(type) {
	case welcomeMsg:
		return nil
	case rejectMsg:
		return newWireError(v.Class, "refused by server: "+v.Text)
	}
	return fmt.Errorf("got %s instead of welcome: %w", m.msgType(), errMalformed)
}

// rejection is a handshake failure that the server reports to the client
// before dropping it.
type rejection struct {
	class class
	text  string
}

func (r *rejection) Error() string { return r.text }

// serverHandshake reads a hello, checks it against the job, challenges the
// client and checks its proof. It returns the client's hello once the
// client has proved the secret. Errors of type *rejection should be sent
// to the client; others mean the connection is unusable or hostile.
func serverHandshake(br *bufio.Reader, bw *bufio.Writer, cfg *ServerConfig) (helloMsg, error) {
	m, err := readMsg(br, maxHandshakeFrame)
	if err != nil {
		return helloMsg{}, fmt.Errorf("read hello: %w", err)
	}
	h, ok := m.(helloMsg)
	if !ok {
		return helloMsg{}, fmt.Errorf("got %s instead of hello: %w", m.msgType(), errMalformed)
	}
	switch {
	case h.Job != cfg.JobID:
		return h, &rejection{classMismatch, fmt.Sprintf("job id %q is not this job's", h.Job)}
	case int(h.Size) != cfg.Size:
		return h, &rejection{classMismatch, fmt.Sprintf("rank %d says the job has %d ranks, the server %d", h.Rank, h.Size, cfg.Size)}
	case int(h.Rank) >= cfg.Size:
		return h, &rejection{classMismatch, fmt.Sprintf("rank %d out of range [0,%d)", h.Rank, cfg.Size)}
	}
	sn, err := newNonce()
	if err != nil {
		return h, fmt.Errorf("nonce: %w", err)
	}
	mine := proof(cfg.Secret, labelServer, h.Nonce, sn, h.Job, h.Rank, h.Size)
	if err := writeMsg(bw, challengeMsg{Nonce: sn, Proof: mine}); err != nil {
		return h, fmt.Errorf("send challenge: %w", err)
	}
	m, err = readMsg(br, maxHandshakeFrame)
	if err != nil {
		return h, fmt.Errorf("read proof: %w", err)
	}
	p, ok := m.(proofMsg)
	if !ok {
		return h, fmt.Errorf("got %s instead of proof: %w", m.msgType(), errMalformed)
	}
	if !validProof(p.Proof, cfg.Secret, labelClient, sn, h.Nonce, h.Job, h.Rank, h.Size) {
		return h, &rejection{classAuth, fmt.Sprintf("rank %d from host %q: wrong proof of the job secret", h.Rank, h.Host)}
	}
	return h, nil
}

// remoteHost is a connection's peer address for logs.
func remoteHost(c net.Conn) string {
	if a := c.RemoteAddr(); a != nil {
		return a.String()
	}
	return "?"
}
