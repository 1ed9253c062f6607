//go:build cgo

package ccall

/*
#include <stdint.h>
typedef uintptr_t fl_u;
static fl_u fl_c0(fl_u f) { return ((fl_u(*)(void))f)(); }
static fl_u fl_c1(fl_u f, fl_u a) { return ((fl_u(*)(fl_u))f)(a); }
static fl_u fl_c2(fl_u f, fl_u a, fl_u b) { return ((fl_u(*)(fl_u, fl_u))f)(a, b); }
static fl_u fl_c3(fl_u f, fl_u a, fl_u b, fl_u c) { return ((fl_u(*)(fl_u, fl_u, fl_u))f)(a, b, c); }
static fl_u fl_c4(fl_u f, fl_u a, fl_u b, fl_u c, fl_u d) {
	return ((fl_u(*)(fl_u, fl_u, fl_u, fl_u))f)(a, b, c, d);
}
static fl_u fl_c5(fl_u f, fl_u a, fl_u b, fl_u c, fl_u d, fl_u e) {
	return ((fl_u(*)(fl_u, fl_u, fl_u, fl_u, fl_u))f)(a, b, c, d, e);
}
static fl_u fl_c6(fl_u f, fl_u a, fl_u b, fl_u c, fl_u d, fl_u e, fl_u g) {
	return ((fl_u(*)(fl_u, fl_u, fl_u, fl_u, fl_u, fl_u))f)(a, b, c, d, e, g);
}
static fl_u fl_c12(fl_u f, fl_u a, fl_u b, fl_u c, fl_u d, fl_u e, fl_u g, fl_u h, fl_u i, fl_u j, fl_u k, fl_u l, fl_u m) {
	return ((fl_u(*)(fl_u, fl_u, fl_u, fl_u, fl_u, fl_u, fl_u, fl_u, fl_u, fl_u, fl_u, fl_u))f)(a, b, c, d, e, g, h, i, j, k, l, m);
}
*/
import "C"

// Call calls the C function at fn with args (at most MaxArgs, each
// passed as an integer or pointer) and returns its result register.
// Where cgo is available it goes through a C trampoline: 70-85 ns a call
// on the 2-core machine, against 165-275 ns and one allocation through
// purego.SyscallN (call_purego.go). Arities 7 to 11 use the 12-argument
// trampoline: under the x86-64 and AArch64 C calling conventions the
// callee never reads the arguments it does not declare, and the caller
// cleans its own stack (purego.SyscallN always passes 15).
func Call(fn uintptr, args ...uintptr) uintptr {
	if len(args) > MaxArgs {
		panic(tooMany(len(args)))
	}
	f := C.fl_u(fn)
	var a [MaxArgs]C.fl_u
	for i, v := range args {
		a[i] = C.fl_u(v)
	}
	switch len(args) {
	case 0:
		return uintptr(C.fl_c0(f))
	case 1:
		return uintptr(C.fl_c1(f, a[0]))
	case 2:
		return uintptr(C.fl_c2(f, a[0], a[1]))
	case 3:
		return uintptr(C.fl_c3(f, a[0], a[1], a[2]))
	case 4:
		return uintptr(C.fl_c4(f, a[0], a[1], a[2], a[3]))
	case 5:
		return uintptr(C.fl_c5(f, a[0], a[1], a[2], a[3], a[4]))
	case 6:
		return uintptr(C.fl_c6(f, a[0], a[1], a[2], a[3], a[4], a[5]))
	default:
		return uintptr(C.fl_c12(f, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11]))
	}
}
