package main

/*
#include <stdlib.h>
#include "helpers.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/flexlink/flexlink/capi"
)

// ncclSimInfo_t: size_t size, unsigned magic, unsigned version, float
// estimatedTime (microseconds).
const (
	simInfoMagic = 0x74685283
	simInfoBytes = 8 + 4 + 4 + 4
)

// xGroupSimulateEnd ends the thread's group like ncclGroupEnd but runs none
// of its calls (deferred initialisations do run) and writes the estimated
// time of the group into info->estimatedTime. The group is closed whatever
// the result.
func xGroupSimulateEnd(info unsafe.Pointer) C.ncclResult_t {
	if info == nil {
		// NCCL: a NULL simInfo makes this a plain ncclGroupEnd.
		return res(lib().GroupEnd(tid()))
	}
	size := *(*C.size_t)(info)
	magic := *(*uint32)(unsafe.Add(info, 8))
	est, err := lib().GroupSimulateEnd(tid()) // closes the group first, whatever the simInfo holds
	if err != nil {
		return res(err)
	}
	if size < simInfoBytes || magic != simInfoMagic {
		return res(&capi.Error{Code: capi.InvalidArgument, Err: fmt.Errorf("ncclGroupSimulateEnd: simInfo of %d bytes with magic %#x: initialise it with NCCL_SIM_INFO_INITIALIZER", uint64(size), magic)})
	}
	if est >= 0 {
		*(*float32)(unsafe.Add(info, 16)) = float32(est.Seconds() * 1e6)
	}
	return ok
}

func xRedOpCreatePreMulSum(op *C.ncclRedOp_t, scalar unsafe.Pointer, dt C.ncclDataType_t, residence C.ncclScalarResidence_t, c C.ncclComm_t) C.ncclResult_t {
	if op == nil || scalar == nil {
		return nullArg("ncclRedOpCreatePreMulSum", "op or scalar")
	}
	d, err := capi.DataType(int32(dt))
	if err != nil {
		return res(fmt.Errorf("ncclRedOpCreatePreMulSum: %w", err))
	}
	var host []byte
	var ptr uintptr
	if residence == capi.ScalarHostImmediate {
		// NCCL reads sizeof(datatype) bytes now, in the op's datatype.
		host = C.GoBytes(scalar, C.int(d.Size()))
	} else {
		ptr = uintptr(scalar)
	}
	code, err := lib().CreatePreMulSum(handle(c), host, ptr, int(residence), int32(dt))
	if err != nil {
		return res(err)
	}
	*op = C.ncclRedOp_t(code)
	return ok
}

func xRedOpDestroy(op C.ncclRedOp_t, c C.ncclComm_t) C.ncclResult_t {
	return res(lib().DestroyRedOp(handle(c), int32(op)))
}
