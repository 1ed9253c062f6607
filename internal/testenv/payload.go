package testenv

import (
	"encoding/binary"
	"math/rand/v2"
)

// Payload returns n pseudo-random bytes determined by seed. Tests compare
// what arrived with what was sent, so any corruption, truncation or
// reordering of bytes shows. (fabric/linktest and fabric/net/nettest,
// which sit on different layers, both serve it.)
func Payload(seed uint64, n int) []byte {
	b := make([]byte, n+8)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n:n]
}
