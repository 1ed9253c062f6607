//go:build flexlink_noptx

package kernels

import "embed"

// A build tagged flexlink_noptx carries no kernels (FLEXLINK_GPU_KERNELS or
// FLEXLINK_GPU_PTX names them).
var embedded embed.FS
