package reduce

import "flexlink/dtype"

// reduceGo reduces with portable Go loops. It serves non-amd64 machines,
// CPUs without AVX2, the (dtype, op) pairs with no vector kernel, and the
// tails the vector kernels leave.
func reduceGo(dst, src []byte, dt dtype.DType, op dtype.Op) {
	refLoop(dst, src, dt, op)
}
