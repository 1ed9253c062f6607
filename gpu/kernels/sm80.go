//go:build !flexlink_nosm80 && !flexlink_noptx

package kernels

import _ "embed"

//go:embed reduce_sm80.ptx
var reduceSM80 string
