// Package memcopy copies large host buffers faster than the built-in copy
// where the CPU allows: with non-temporal stores, which write around the
// caches. On this project's 2-core test machine (an Intel Xeon with AVX2)
// Go's copy moved 32 MiB at 8–10 GB/s, glibc's memcpy and the
// non-temporal loop here at 23–25 GB/s (docs/PERF.md, "Host memory,
// nineteenth session"); OpenMPI's shared-memory transport copies with
// memcpy. Small copies, which fit the caches and are read soon, stay on
// the built-in copy.
package memcopy

import "unsafe"

// ntMin is the smallest copy that takes the non-temporal path: below it
// the destination may still be in the caches when it is read, and the
// built-in copy was as fast or faster (in-cache 4 MiB: 19 GB/s both; 16
// MiB: 12 against 23).
const ntMin = 4 << 20

// ntAlign and ntStep are the loop's destination alignment and its bytes
// per iteration (four 32-byte stores).
const (
	ntAlign = 32
	ntStep  = 128
)

// Copy copies min(len(dst), len(src)) bytes from src to dst and returns
// that count, as the built-in copy does (overlapping slices included).
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < ntMin || !hasNT || raceEnabled || overlap(dst[:n], src[:n]) {
		return copy(dst, src)
	}
	d, s := unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src))
	head := int((ntAlign - uintptr(d)%ntAlign) % ntAlign)
	copy(dst[:head], src[:head])
	body := (n - head) / ntStep * ntStep
	ntCopy(unsafe.Add(d, head), unsafe.Add(s, head), uintptr(body))
	copy(dst[head+body:n], src[head+body:n])
	return n
}

// overlap reports whether a and b (both non-empty) share a byte.
func overlap(a, b []byte) bool {
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
