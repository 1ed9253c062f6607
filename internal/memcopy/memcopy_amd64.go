package memcopy

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// hasNT: the non-temporal loop needs AVX2 (VMOVNTDQ on 32-byte registers).
var hasNT = cpu.X86.HasAVX2

// ntCopy copies n bytes (a multiple of ntStep) from src to dst (aligned
// to ntAlign) with non-temporal stores, then fences them. The ranges must
// not overlap.
//
//go:noescape
func ntCopy(dst, src unsafe.Pointer, n uintptr)
