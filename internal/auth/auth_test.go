package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"testing"
)

// TestProofReference: Proof is HMAC-SHA256 over length-prefixed fields,
// computed here independently with crypto/hmac.
func TestProofReference(t *testing.T) {
	secret := []byte("job secret")
	m := hmac.New(sha256.New, secret)
	for _, f := range [][]byte{[]byte("purpose"), []byte("job"), {}, {1, 2, 3}} {
		m.Write([]byte{byte(len(f)), 0, 0, 0})
		m.Write(f)
	}
	want := m.Sum(nil)
	if got := Proof(secret, "purpose", []byte("job"), nil, []byte{1, 2, 3}); !bytes.Equal(got, want) || len(got) != Size {
		t.Fatalf("Proof = %x, want %x", got, want)
	}
	if !Valid(want, secret, "purpose", []byte("job"), nil, []byte{1, 2, 3}) {
		t.Fatal("Valid refuses a good proof")
	}
}

// TestProofBinds: changing the secret, the purpose, any part or where the
// parts split changes the proof.
func TestProofBinds(t *testing.T) {
	s := []byte("s")
	base := Proof(s, "p", []byte("ab"), []byte("c"))
	for name, other := range map[string][]byte{
		"secret":  Proof([]byte("t"), "p", []byte("ab"), []byte("c")),
		"purpose": Proof(s, "q", []byte("ab"), []byte("c")),
		"part":    Proof(s, "p", []byte("ab"), []byte("d")),
		"split":   Proof(s, "p", []byte("a"), []byte("bc")),
		"count":   Proof(s, "p", []byte("ab"), []byte("c"), nil),
		"number":  Proof(s, "p", []byte("ab"), []byte("c"), U64(1)),
	} {
		if bytes.Equal(base, other) {
			t.Errorf("another %s gives the same proof", name)
		}
		if Valid(other, s, "p", []byte("ab"), []byte("c")) {
			t.Errorf("the proof with another %s is accepted", name)
		}
	}
}
