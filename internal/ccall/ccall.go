// Package ccall calls C functions found at run time (dlsym's addresses:
// the CUDA driver's entry points, UCX's) from Go: through small C
// trampolines where cgo is on, through purego where it is not. Every
// argument is passed as an integer or a pointer (uintptr); a pointer to
// Go memory must stay alive for the call, which the callers ensure with
// go:uintptrescapes on their own variadic wrappers.
package ccall

import "fmt"

// MaxArgs is the most arguments Call passes.
const MaxArgs = 12

// tooMany is Call's panic for more than MaxArgs arguments: a binding's
// bug, never the program's input.
func tooMany(n int) string { return fmt.Sprintf("ccall: %d arguments, at most %d", n, MaxArgs) }
