//go:build !cgo

package cu

import "github.com/ebitengine/purego"

// rawCall calls the C function at fn with args and returns its result
// register: purego.SyscallN, where cgo is not available (raw_cgo.go).
func rawCall(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}
