package reduce

import "flexlink/dtype"

// reduceFast reduces a prefix of dst and src with vector kernels and
// returns its length in bytes; reduceGo does the rest.
func reduceFast(dst, src []byte, dt dtype.DType, op dtype.Op) int { return 0 }
