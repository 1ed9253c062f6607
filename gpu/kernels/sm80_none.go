//go:build flexlink_nosm80 || flexlink_noptx

package kernels

// reduceSM80 is left out of Hopper-only builds (tag flexlink_nosm80).
const reduceSM80 = ""
