//go:build flexlink_nosm80

package kernels

// reduceSM80 is left out of Hopper-only builds (tag flexlink_nosm80).
const reduceSM80 = ""
