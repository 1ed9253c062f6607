// Package mem is the bottom of the data plane: the Buffer interface that host
// bytes and device memory both implement. It imports nothing of flexlink, so
// every layer (gpu, fabric link packages, collectives) can name a buffer
// without importing the layers above it.
package mem

// Buffer is a range of memory the data plane can move and reduce: host bytes
// or device memory. Lengths and offsets are in bytes.
//
// Contract: Slice shares memory with the receiver (no copy) and panics when
// the range is out of bounds (a programming error, not an input error).
// Implementations are values that may be copied; the memory they name is
// owned by whoever allocated it.
type Buffer interface {
	Len() int
	// Slice returns the sub-range [off, off+n).
	Slice(off, n int) Buffer
}

// Prefix is b's first n bytes: b itself when it holds exactly n (a slice
// of a slice-backed Buffer is a new interface value, an allocation on a
// call's path), else b.Slice(0, n).
func Prefix(b Buffer, n int) Buffer {
	if b.Len() == n {
		return b
	}
	return b.Slice(0, n)
}
