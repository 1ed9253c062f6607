//go:build !flexlink_noptx

package kernels

import _ "embed"

//go:embed reduce_sm90.ptx
var reduceSM90 string
