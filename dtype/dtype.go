// Package dtype names the element types and reduction operators that
// collectives understand, with their sizes and names (as nccl-tests spells them).
package dtype

import (
	"fmt"
	"strings"
)

// DType is an element type.
type DType uint8

const (
	Int8 DType = iota
	Uint8
	Int32
	Int64
	Float16
	BFloat16
	Float32
	Float64
	// Added after the first eight, so the codes above (carried in message
	// tags and flag-kernel signatures) keep their values.
	Uint32
	Uint64
	Float8E4M3 // OCP FP8 E4M3 ("fn"): no infinities, NaN is S.1111.111, max 448
	Float8E5M2 // OCP FP8 E5M2: IEEE-like, max finite 57344
	numDTypes
)

// All lists every DType, for sweeps.
func All() []DType {
	return []DType{Int8, Uint8, Int32, Int64, Float16, BFloat16, Float32, Float64,
		Uint32, Uint64, Float8E4M3, Float8E5M2}
}

var dtypeNames = [...]string{"int8", "uint8", "int32", "int64", "half", "bfloat16", "float", "double",
	"uint32", "uint64", "f8e4m3", "f8e5m2"}

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Int8, Uint8, Float8E4M3, Float8E5M2:
		return 1
	case Float16, BFloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// Valid reports whether d is a known type.
func (d DType) Valid() bool { return d < numDTypes }

// IsFloat reports whether d is a floating-point type (float8 included).
func (d DType) IsFloat() bool {
	switch d {
	case Float16, BFloat16, Float32, Float64, Float8E4M3, Float8E5M2:
		return true
	}
	return false
}

// IsFloat8 reports whether d is one of the 8-bit float types. NCCL reduces
// them only on compute capability 9.0 and later; so does flexlink's GPU
// path.
func (d DType) IsFloat8() bool { return d == Float8E4M3 || d == Float8E5M2 }

func (d DType) String() string {
	if d.Valid() {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType accepts nccl-tests names (float, half, double, bfloat16, int32,
// uint64, f8e4m3, f8e5m2…) and Go-ish or PyTorch aliases (float32, float16,
// float64, bf16, int, uint8, float8_e4m3fn, fp8e5m2…).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "int8", "char":
		return Int8, nil
	case "uint8":
		return Uint8, nil
	case "int32", "int":
		return Int32, nil
	case "int64":
		return Int64, nil
	case "half", "float16", "fp16":
		return Float16, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "float", "float32", "fp32":
		return Float32, nil
	case "double", "float64", "fp64":
		return Float64, nil
	case "uint32", "u32":
		return Uint32, nil
	case "uint64", "u64":
		return Uint64, nil
	case "f8e4m3", "fp8e4m3", "float8e4m3", "float8_e4m3", "float8_e4m3fn", "e4m3":
		return Float8E4M3, nil
	case "f8e5m2", "fp8e5m2", "float8e5m2", "float8_e5m2", "e5m2":
		return Float8E5M2, nil
	}
	return 0, fmt.Errorf("unknown dtype %q (want one of %s)", s, strings.Join(dtypeNames[:], ", "))
}

// Op is a reduction operator.
type Op uint8

const (
	Sum Op = iota
	Prod
	Min
	Max
	Avg
	numOps
)

// Ops lists every Op, for sweeps.
func Ops() []Op { return []Op{Sum, Prod, Min, Max, Avg} }

var opNames = [...]string{"sum", "prod", "min", "max", "avg"}

// Valid reports whether o is a known operator.
func (o Op) Valid() bool { return o < numOps }

func (o Op) String() string {
	if o.Valid() {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// ParseOp accepts sum, prod, min, max, avg.
func ParseOp(s string) (Op, error) {
	for i, n := range opNames {
		if strings.EqualFold(s, n) {
			return Op(i), nil
		}
	}
	return 0, fmt.Errorf("unknown op %q (want one of %s)", s, strings.Join(opNames[:], ", "))
}
