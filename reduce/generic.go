package reduce

import (
	"encoding/binary"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
)

// reduceGo reduces with portable Go loops, unrolled four ways. It serves
// non-amd64 machines, CPUs without AVX2, the (dtype, op) pairs with no
// vector kernel (int64 prod), and the tails the vector kernels leave.
//
// The loops work on typed slices. A *T must be aligned for T (checkptr,
// which -race enables, enforces it), so buffers that are not element-aligned
// go through aligned stack buffers, 512 bytes at a time.
func reduceGo(dst, src []byte, dt dtype.DType, op dtype.Op) {
	if len(dst) == 0 {
		return
	}
	size := uintptr(dt.Size())
	if uintptr(unsafe.Pointer(&dst[0]))%size == 0 && uintptr(unsafe.Pointer(&src[0]))%size == 0 {
		reduceTyped(dst, src, dt, op)
		return
	}
	var bd, bs [64]uint64 // 512 bytes each, 8-byte aligned
	db := unsafe.Slice((*byte)(unsafe.Pointer(&bd[0])), len(bd)*8)
	sb := unsafe.Slice((*byte)(unsafe.Pointer(&bs[0])), len(bs)*8)
	for len(dst) > 0 {
		n := copy(db, dst)
		copy(sb, src[:n])
		reduceTyped(db[:n], sb[:n], dt, op)
		copy(dst, db[:n])
		dst, src = dst[n:], src[n:]
	}
}

// as views an element-aligned byte slice as a slice of T.
func as[T any](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

func reduceTyped(dst, src []byte, dt dtype.DType, op dtype.Op) {
	switch dt {
	case dtype.Int8, dtype.Uint8:
		if op == dtype.Sum || op == dtype.Avg {
			sumBytes(dst, src)
		} else if dt == dtype.Int8 {
			loopInt(as[int8](dst), as[int8](src), op)
		} else {
			loopInt(dst, src, op)
		}
	case dtype.Int32:
		loopInt(as[int32](dst), as[int32](src), op)
	case dtype.Int64:
		loopInt(as[int64](dst), as[int64](src), op)
	case dtype.Uint32:
		loopInt(as[uint32](dst), as[uint32](src), op)
	case dtype.Uint64:
		loopInt(as[uint64](dst), as[uint64](src), op)
	case dtype.Float8E4M3:
		loopF8(dst, src, op, dtype.F8E4M3ToFloat32, dtype.Float32ToF8E4M3)
	case dtype.Float8E5M2:
		loopF8(dst, src, op, dtype.F8E5M2ToFloat32, dtype.Float32ToF8E5M2)
	case dtype.Float32:
		loopFloat(as[float32](dst), as[float32](src), op)
	case dtype.Float64:
		loopFloat(as[float64](dst), as[float64](src), op)
	case dtype.Float16:
		loopF16(as[uint16](dst), as[uint16](src), op)
	case dtype.BFloat16:
		loopBF16(as[uint16](dst), as[uint16](src), op)
	}
}

// sumBytes adds bytes (int8 and uint8 wrap to the same bits) eight at a
// time in 64-bit words: add the low seven bits of each byte, so no carry
// crosses a byte, then put each top bit back with XOR.
func sumBytes(d, s []byte) {
	const high = 0x8080808080808080
	ne := binary.NativeEndian
	s = s[:len(d)]
	i := 0
	for ; i+8 <= len(d); i += 8 {
		a, b := ne.Uint64(d[i:]), ne.Uint64(s[i:])
		ne.PutUint64(d[i:], (a&^high+b&^high)^(a^b)&high)
	}
	for ; i < len(d); i++ {
		d[i] += s[i]
	}
}

// loopInt is opInt over slices, with the op hoisted out of the loop.
func loopInt[T integer](d, s []T, op dtype.Op) {
	s = s[:len(d)]
	i := 0
	switch op {
	case dtype.Sum, dtype.Avg:
		for ; i+4 <= len(d); i += 4 {
			d[i], d[i+1], d[i+2], d[i+3] = d[i]+s[i], d[i+1]+s[i+1], d[i+2]+s[i+2], d[i+3]+s[i+3]
		}
	case dtype.Prod:
		for ; i+4 <= len(d); i += 4 {
			d[i], d[i+1], d[i+2], d[i+3] = d[i]*s[i], d[i+1]*s[i+1], d[i+2]*s[i+2], d[i+3]*s[i+3]
		}
	case dtype.Min:
		for ; i+4 <= len(d); i += 4 {
			d[i], d[i+1], d[i+2], d[i+3] = min(d[i], s[i]), min(d[i+1], s[i+1]), min(d[i+2], s[i+2]), min(d[i+3], s[i+3])
		}
	case dtype.Max:
		for ; i+4 <= len(d); i += 4 {
			d[i], d[i+1], d[i+2], d[i+3] = max(d[i], s[i]), max(d[i+1], s[i+1]), max(d[i+2], s[i+2]), max(d[i+3], s[i+3])
		}
	}
	for ; i < len(d); i++ {
		d[i] = opInt(d[i], s[i], op)
	}
}

// loopFloat is opFloat over slices, with the op hoisted out of the loop.
func loopFloat[T float](d, s []T, op dtype.Op) {
	s = s[:len(d)]
	i := 0
	switch op {
	case dtype.Sum, dtype.Avg:
		for ; i+4 <= len(d); i += 4 {
			d[i], d[i+1], d[i+2], d[i+3] = d[i]+s[i], d[i+1]+s[i+1], d[i+2]+s[i+2], d[i+3]+s[i+3]
		}
	case dtype.Prod:
		for ; i+4 <= len(d); i += 4 {
			d[i], d[i+1], d[i+2], d[i+3] = d[i]*s[i], d[i+1]*s[i+1], d[i+2]*s[i+2], d[i+3]*s[i+3]
		}
	case dtype.Min:
		for ; i+4 <= len(d); i += 4 {
			d[i], d[i+1], d[i+2], d[i+3] = fmin(d[i], s[i]), fmin(d[i+1], s[i+1]), fmin(d[i+2], s[i+2]), fmin(d[i+3], s[i+3])
		}
	case dtype.Max:
		for ; i+4 <= len(d); i += 4 {
			d[i], d[i+1], d[i+2], d[i+3] = fmax(d[i], s[i]), fmax(d[i+1], s[i+1]), fmax(d[i+2], s[i+2]), fmax(d[i+3], s[i+3])
		}
	}
	for ; i < len(d); i++ {
		d[i] = opFloat(d[i], s[i], op)
	}
}

// loopF16 reduces float16 through float32. The conversions are called
// directly (not through function values) so that they can be inlined.
func loopF16(d, s []uint16, op dtype.Op) {
	s = s[:len(d)]
	for i := range d {
		d[i] = dtype.Float32ToFloat16(opFloat(dtype.Float16ToFloat32(d[i]), dtype.Float16ToFloat32(s[i]), op))
	}
}

// loopBF16 reduces bfloat16 through float32.
func loopBF16(d, s []uint16, op dtype.Op) {
	s = s[:len(d)]
	for i := range d {
		d[i] = dtype.Float32ToBFloat16(opFloat(dtype.BFloat16ToFloat32(d[i]), dtype.BFloat16ToFloat32(s[i]), op))
	}
}

// loopF8 reduces a float8 type through float32 (see opF8).
func loopF8(d, s []byte, op dtype.Op, toF32 func(uint8) float32, fromF32 func(float32) uint8) {
	s = s[:len(d)]
	for i := range d {
		d[i] = fromF32(opFloat(toF32(d[i]), toF32(s[i]), op))
	}
}
