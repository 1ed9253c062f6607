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
	numDTypes
)

// All lists every DType, for sweeps.
func All() []DType {
	return []DType{Int8, Uint8, Int32, Int64, Float16, BFloat16, Float32, Float64}
}

var dtypeNames = [...]string{"int8", "uint8", "int32", "int64", "half", "bfloat16", "float", "double"}

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Int8, Uint8:
		return 1
	case Float16, BFloat16:
		return 2
	case Int32, Float32:
		return 4
	case Int64, Float64:
		return 8
	}
	return 0
}

// Valid reports whether d is a known type.
func (d DType) Valid() bool { return d < numDTypes }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == Float16 || d == BFloat16 || d == Float32 || d == Float64 }

func (d DType) String() string {
	if d.Valid() {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType accepts nccl-tests names (float, half, double, bfloat16, int32…)
// and Go-ish aliases (float32, float16, float64, bf16, int, uint8…).
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
