//go:build !amd64 || purego

package reduce

import "github.com/flexlink/flexlink/dtype"

// reduceFast has no vector kernels on this architecture: it does nothing and
// leaves the whole buffer to reduceGo.
func reduceFast(dst, src []byte, dt dtype.DType, op dtype.Op) int { return 0 }

// finishFast has no vector kernels here either.
func finishFast(dst []byte, dt dtype.DType, n int) int { return 0 }
