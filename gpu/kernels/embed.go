//go:build !flexlink_noptx

package kernels

import "embed"

// The compiled kernels (fatbin/). A build tagged flexlink_noptx leaves them out.
//
//go:embed fatbin
var embedded embed.FS
