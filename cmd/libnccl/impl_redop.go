package main

/*
#include <stdlib.h>
#include "helpers.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"flexlink/capi"
	"flexlink/dtype"
)

func xGroupSimulateEnd(info unsafe.Pointer) C.ncclResult_t {
	return unsupported("ncclGroupSimulateEnd", "flexlink has no cost model to simulate a group with (the group stays open)")
}

func xRedOpCreatePreMulSum(op *C.ncclRedOp_t, scalar unsafe.Pointer, dt C.ncclDataType_t, residence C.ncclScalarResidence_t, c C.ncclComm_t) C.ncclResult_t {
	if op == nil || scalar == nil {
		return nullArg("ncclRedOpCreatePreMulSum", "op or scalar")
	}
	if residence != 1 {
		return unsupported("ncclRedOpCreatePreMulSum with ncclScalarDevice", "the scalar must be host-immediate (ncclScalarHostImmediate)")
	}
	d, err := capi.DataType(int32(dt))
	if err != nil {
		return res(fmt.Errorf("ncclRedOpCreatePreMulSum: %w", err))
	}
	var v float64
	switch d {
	case dtype.Float32:
		v = float64(*(*float32)(scalar))
	case dtype.Float64:
		v = *(*float64)(scalar)
	case dtype.Float16:
		v = float64(dtype.Float16ToFloat32(*(*uint16)(scalar)))
	case dtype.BFloat16:
		v = float64(dtype.BFloat16ToFloat32(*(*uint16)(scalar)))
	}
	code, err := lib().CreatePreMulSum(handle(c), v, int32(dt))
	if err != nil {
		return res(err)
	}
	*op = C.ncclRedOp_t(code)
	return ok
}

func xRedOpDestroy(op C.ncclRedOp_t, c C.ncclComm_t) C.ncclResult_t {
	return res(lib().DestroyRedOp(handle(c), int32(op)))
}
