package capi

import (
	"math"

	"github.com/flexlink/flexlink/dtype"
)

// ncclDataType_t values of NCCL 2.28's public header.
const (
	ncclInt8        = 0
	ncclUint8       = 1
	ncclInt32       = 2
	ncclUint32      = 3
	ncclInt64       = 4
	ncclUint64      = 5
	ncclFloat16     = 6
	ncclFloat32     = 7
	ncclFloat64     = 8
	ncclBfloat16    = 9
	ncclFloat8e4m3  = 10
	ncclFloat8e5m2  = 11
	ncclNumTypes    = 12
	ncclNumOps      = 5 // ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg
	ncclMaxRedOp    = math.MaxInt32
	maxPreMulSumOps = 1 << 16
)

// DataType converts an ncclDataType_t: every type of NCCL 2.28. Unknown
// codes fail with ncclInvalidArgument. The float8 types reduce on GPUs of
// compute capability 9.0 and later only, as in NCCL: a reduction of them on
// an older device fails when the call runs (package gpu names the type).
func DataType(code int32) (dtype.DType, error) {
	switch code {
	case ncclInt8:
		return dtype.Int8, nil
	case ncclUint8:
		return dtype.Uint8, nil
	case ncclInt32:
		return dtype.Int32, nil
	case ncclUint32:
		return dtype.Uint32, nil
	case ncclInt64:
		return dtype.Int64, nil
	case ncclUint64:
		return dtype.Uint64, nil
	case ncclFloat16:
		return dtype.Float16, nil
	case ncclFloat32:
		return dtype.Float32, nil
	case ncclFloat64:
		return dtype.Float64, nil
	case ncclBfloat16:
		return dtype.BFloat16, nil
	case ncclFloat8e4m3:
		return dtype.Float8E4M3, nil
	case ncclFloat8e5m2:
		return dtype.Float8E5M2, nil
	}
	return 0, fail(InvalidArgument, "invalid datatype %d (valid: 0 to %d)", code, ncclNumTypes-1)
}

// builtinOp converts the operators every communicator knows. NCCL numbers
// Max before Min.
func builtinOp(code int32) (dtype.Op, bool) {
	switch code {
	case 0:
		return dtype.Sum, true
	case 1:
		return dtype.Prod, true
	case 2:
		return dtype.Max, true
	case 3:
		return dtype.Min, true
	case 4:
		return dtype.Avg, true
	}
	return 0, false
}
