package kernels

// ReducePTX returns the whole-file PTX for a device of compute capability
// major.minor (reduce_sm90.ptx for 9.0 and later, reduce_sm80.ptx for 8.x),
// or ok=false. It serves until the compiled families are committed.
func ReducePTX(major, minor int) (ptx []byte, ok bool) {
	switch {
	case major >= 9 && reduceSM90 != "":
		return []byte(reduceSM90), true
	case major == 8 && reduceSM80 != "":
		return []byte(reduceSM80), true
	}
	return nil, false
}

// HasPTX reports whether this build carries the whole-file PTX.
func HasPTX() bool { return reduceSM90 != "" }

// HasSM80 reports whether this build carries the compute_80 whole-file PTX.
func HasSM80() bool { return reduceSM80 != "" }
