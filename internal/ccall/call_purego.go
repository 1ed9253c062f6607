//go:build !cgo

package ccall

import "github.com/ebitengine/purego"

// Call calls the C function at fn with args (at most MaxArgs) and returns
// its result register: purego.SyscallN, where cgo is not available
// (call_cgo.go).
func Call(fn uintptr, args ...uintptr) uintptr {
	if len(args) > MaxArgs {
		panic(tooMany(len(args)))
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}
