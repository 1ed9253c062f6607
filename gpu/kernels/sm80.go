//go:build !flexlink_nosm80

package kernels

import _ "embed"

//go:embed reduce_sm80.ptx
var reduceSM80 string
