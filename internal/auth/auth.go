// Package auth is flexlink's one proof of the job secret, and the repo's
// only HMAC. Every connection a job accepts (the bootstrap's
// challenge–response, shm, and the network connection layer
// fabric/net/hello that netlink, the PXN proxy and the GPU plane's net
// share use) proves that its dialer holds the per-job secret with Proof:
// an HMAC-SHA256 keyed with the secret over what the proof is for and the
// parts that bind it to one job, one communicator, one listener and one
// sender. The secret itself is never sent. A job started without flexrun
// derives its secret from the user's key file with Proof too.
package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// Size is the length of a proof in bytes.
const Size = sha256.Size

// Proof returns the HMAC-SHA256, keyed with secret, of purpose and parts,
// each written as a 4-byte little-endian length and its bytes, so that no
// two different lists give the same input ("ab","c" differs from
// "a","bc"). purpose names the kind of proof ("flexlink netlink hello"),
// so a proof made for one kind of connection is worthless for another.
// Proof never fails; an empty secret gives a proof anyone can compute (a
// job without a secret is not authenticated).
func Proof(secret []byte, purpose string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	var n [4]byte
	write := func(p []byte) {
		binary.LittleEndian.PutUint32(n[:], uint32(len(p)))
		m.Write(n[:])
		m.Write(p)
	}
	write([]byte(purpose))
	for _, p := range parts {
		write(p)
	}
	return m.Sum(nil)
}

// Valid reports, in time independent of where they differ, whether proof
// is Proof(secret, purpose, parts...).
func Valid(proof, secret []byte, purpose string, parts ...[]byte) bool {
	return hmac.Equal(proof, Proof(secret, purpose, parts...))
}

// U64 is v as 8 little-endian bytes, for a number among Proof's parts.
func U64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
