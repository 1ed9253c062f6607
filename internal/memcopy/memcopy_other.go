//go:build !amd64

package memcopy

import "unsafe"

// hasNT is false: other architectures use the built-in copy.
const hasNT = false

func ntCopy(dst, src unsafe.Pointer, n uintptr) {
	panic("memcopy: no non-temporal copy on this architecture")
}
