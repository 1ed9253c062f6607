//go:build flexlink_noptx

package kernels

// A build tagged flexlink_noptx carries no PTX (FLEXLINK_GPU_PTX names it).
var reduceSM90 string
