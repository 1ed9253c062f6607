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

// EvenLengths is an all-to-all's lengths table of n ranks (lengths[s][d]:
// what s sends d) with l everywhere.
func EvenLengths(n, l int) [][]int {
	out := make([][]int, n)
	for s := range out {
		out[s] = make([]int, n)
		for d := range out[s] {
			out[s][d] = l
		}
	}
	return out
}

// AllToAllBuffers are rank r's send and receive buffers in an all-to-all
// of lengths (as EvenLengths), byte i of what s sends d being value(s, d, i).
func AllToAllBuffers(lengths [][]int, r int, value func(s, d, i int) byte) (send, recv [][]byte) {
	n := len(lengths)
	send, recv = make([][]byte, n), make([][]byte, n)
	for d := range n {
		send[d] = make([]byte, lengths[r][d])
		for i := range send[d] {
			send[d][i] = value(r, d, i)
		}
		recv[d] = make([]byte, lengths[d][r])
	}
	return send, recv
}
