package nccl

import (
	"fmt"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
)

// dataType is an ncclDataType_t.
type dataType int32

// redOp is an ncclRedOp_t.
type redOp int32

// ncclType maps a flexlink element type to its ncclDataType_t (values from
// nccl.h). A type NCCL lacks gives an error wrapping errs.ErrNotSupported.
func ncclType(dt dtype.DType) (dataType, error) {
	switch dt {
	case dtype.Int8:
		return 0, nil // ncclInt8
	case dtype.Uint8:
		return 1, nil // ncclUint8
	case dtype.Int32:
		return 2, nil // ncclInt32
	case dtype.Uint32:
		return 3, nil // ncclUint32
	case dtype.Int64:
		return 4, nil // ncclInt64
	case dtype.Uint64:
		return 5, nil // ncclUint64
	case dtype.Float16:
		return 6, nil // ncclFloat16
	case dtype.Float32:
		return 7, nil // ncclFloat32
	case dtype.Float64:
		return 8, nil // ncclFloat64
	case dtype.BFloat16:
		return 9, nil // ncclBfloat16 (NCCL 2.10 and later)
	case dtype.Float8E4M3:
		return 10, nil // ncclFloat8e4m3 (NCCL 2.24 and later, sm_90 and later)
	case dtype.Float8E5M2:
		return 11, nil // ncclFloat8e5m2
	}
	return 0, fmt.Errorf("element type %v: %w", dt, errs.ErrNotSupported)
}

// ncclOp maps a flexlink reduction to its ncclRedOp_t (values from nccl.h;
// NCCL numbers Max before Min, the other way round from package dtype). An
// operator NCCL lacks gives an error wrapping errs.ErrNotSupported.
func ncclOp(op dtype.Op) (redOp, error) {
	switch op {
	case dtype.Sum:
		return 0, nil // ncclSum
	case dtype.Prod:
		return 1, nil // ncclProd
	case dtype.Max:
		return 2, nil // ncclMax
	case dtype.Min:
		return 3, nil // ncclMin
	case dtype.Avg:
		return 4, nil // ncclAvg (NCCL 2.10 and later)
	}
	return 0, fmt.Errorf("reduction %v: %w", op, errs.ErrNotSupported)
}
