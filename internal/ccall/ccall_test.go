package ccall

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/flexlink/flexlink/internal/testenv"
)

// TestCallEveryArity calls C functions of 0 to MaxArgs arguments, each
// returning a sum of its arguments weighted by their places, so that a
// lost, swapped or truncated argument changes the result; with cgo (the
// trampolines) and without (purego): CGO_ENABLED=0 go test ./internal/ccall.
func TestCallEveryArity(t *testing.T) {
	var src strings.Builder
	src.WriteString("#include <stdint.h>\ntypedef uintptr_t u;\n")
	for n := 0; n <= MaxArgs; n++ {
		var params, sum []string
		for i := range n {
			params = append(params, fmt.Sprintf("u a%d", i))
			sum = append(sum, fmt.Sprintf("%d * a%d", i+1, i))
		}
		if n == 0 {
			params, sum = []string{"void"}, []string{"0x5eed"}
		}
		fmt.Fprintf(&src, "u f%d(%s) { return %s; }\n", n, strings.Join(params, ", "), strings.Join(sum, " + "))
	}
	so := testenv.CSharedLib(t, src.String())
	h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n <= MaxArgs; n++ {
		fn, err := purego.Dlsym(h, fmt.Sprintf("f%d", n))
		if err != nil {
			t.Fatal(err)
		}
		args := make([]uintptr, n)
		want := uintptr(0x5eed)
		if n > 0 {
			want = 0
		}
		for i := range args {
			args[i] = uintptr(1)<<(4*i) | uintptr(0xabc000000000) // high bits: no truncation to 32
			want += uintptr(i+1) * args[i]
		}
		if got := Call(fn, args...); got != want {
			t.Errorf("f%d: %#x, want %#x", n, got, want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Errorf("%d arguments: no panic", MaxArgs+1)
		}
	}()
	Call(0, make([]uintptr, MaxArgs+1)...)
}
