package main

/*
#include <stdlib.h>
#include "api.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/flexlink/flexlink/capi"
)

// NCCL 2.30's parameter API over flexlink's parameters (capi.Params: the
// FLEXLINK_* settings and NCCL's logging variables, every one a string).
// A handle is the parameter's index plus one.

func paramHandle(i int) C.ncclParamHandle_t {
	return C.ncclParamHandle_t(C.fl_handle(C.uintptr_t(i + 1)))
}
func paramIndex(h C.ncclParamHandle_t) int { return int(C.fl_id(unsafe.Pointer(h))) - 1 }

func xParamBind(out *C.ncclParamHandle_t, key *C.char) C.ncclResult_t {
	if out == nil || key == nil {
		return nullArg("ncclParamBind", "out or key")
	}
	i, err := capi.ParamIndex(C.GoString(key))
	if err != nil {
		return res(err)
	}
	*out = paramHandle(i)
	return ok
}

// paramValue is the text of the parameter bound to h, for fn.
func paramValue(fn string, h C.ncclParamHandle_t) (string, error) {
	v, err := capi.ParamValue(cEnv, paramIndex(h))
	if err != nil {
		return "", fmt.Errorf("%s: %w", fn, err)
	}
	return v, nil
}

// typed is every typed getter: the handle must be bound, and the value is
// never of the asked type.
func typed(fn string, h C.ncclParamHandle_t, out unsafe.Pointer) C.ncclResult_t {
	if h == nil || out == nil {
		return nullArg(fn, "handle or out")
	}
	if _, err := paramValue(fn, h); err != nil {
		return res(err)
	}
	return res(capi.ParamTypeMismatch(fn, paramIndex(h)))
}

func xParamGetI8(h C.ncclParamHandle_t, out *C.int8_t) C.ncclResult_t {
	return typed("ncclParamGetI8", h, unsafe.Pointer(out))
}
func xParamGetI16(h C.ncclParamHandle_t, out *C.int16_t) C.ncclResult_t {
	return typed("ncclParamGetI16", h, unsafe.Pointer(out))
}
func xParamGetI32(h C.ncclParamHandle_t, out *C.int32_t) C.ncclResult_t {
	return typed("ncclParamGetI32", h, unsafe.Pointer(out))
}
func xParamGetI64(h C.ncclParamHandle_t, out *C.int64_t) C.ncclResult_t {
	return typed("ncclParamGetI64", h, unsafe.Pointer(out))
}
func xParamGetU8(h C.ncclParamHandle_t, out *C.uint8_t) C.ncclResult_t {
	return typed("ncclParamGetU8", h, unsafe.Pointer(out))
}
func xParamGetU16(h C.ncclParamHandle_t, out *C.uint16_t) C.ncclResult_t {
	return typed("ncclParamGetU16", h, unsafe.Pointer(out))
}
func xParamGetU32(h C.ncclParamHandle_t, out *C.uint32_t) C.ncclResult_t {
	return typed("ncclParamGetU32", h, unsafe.Pointer(out))
}
func xParamGetU64(h C.ncclParamHandle_t, out *C.uint64_t) C.ncclResult_t {
	return typed("ncclParamGetU64", h, unsafe.Pointer(out))
}

// threadStr hands s to C in the calling thread's buffer slot.
func threadStr(fn string, slot int, s string) (*C.char, error) {
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	p := C.fl_thread_str(C.int(slot), cs)
	if p == nil {
		return nil, &capi.Error{Code: capi.SystemError, Err: fmt.Errorf("%s: out of memory", fn)}
	}
	return p, nil
}

func xParamGetStr(h C.ncclParamHandle_t, out **C.char) C.ncclResult_t {
	if h == nil || out == nil {
		return nullArg("ncclParamGetStr", "handle or out")
	}
	v, err := paramValue("ncclParamGetStr", h)
	if err != nil {
		return res(err)
	}
	p, err := threadStr("ncclParamGetStr", 0, v)
	if err != nil {
		return res(err)
	}
	*out = p
	return ok
}

// xParamGet copies the text and its NUL, as NCCL does for a string
// parameter; a buffer too small fails with *n = 0.
func xParamGet(h C.ncclParamHandle_t, out unsafe.Pointer, maxLen C.int, n *C.int) C.ncclResult_t {
	if h == nil || out == nil || n == nil {
		return nullArg("ncclParamGet", "handle, out or len")
	}
	v, err := paramValue("ncclParamGet", h)
	if err != nil {
		return res(err)
	}
	if len(v)+1 > int(maxLen) {
		*n = 0
		return res(&capi.Error{Code: capi.InvalidArgument, Err: fmt.Errorf("ncclParamGet: the value takes %d bytes with its NUL, the buffer %d", len(v)+1, int(maxLen))})
	}
	b := unsafe.Slice((*byte)(out), len(v)+1)
	copy(b, v)
	b[len(v)] = 0
	*n = C.int(len(v) + 1)
	return ok
}

func xParamGetParameter(key *C.char, value **C.char, n *C.int) C.ncclResult_t {
	if key == nil || value == nil || n == nil {
		return nullArg("ncclParamGetParameter", "key, value or valueLen")
	}
	*value, *n = nil, 0
	i, err := capi.ParamIndex(C.GoString(key))
	if err != nil {
		return res(fmt.Errorf("ncclParamGetParameter: %w", err))
	}
	v, _ := capi.ParamValue(cEnv, i)
	p, err := threadStr("ncclParamGetParameter", 1, v)
	if err != nil {
		return res(err)
	}
	*value, *n = p, C.int(len(v))
	return ok
}

var (
	keysOnce sync.Once
	keys     **C.char // C array of every key, made once and never freed
	nkeys    int
)

func xParamGetAllParameterKeys(table ***C.char, n *C.int) C.ncclResult_t {
	if table == nil || n == nil {
		return nullArg("ncclParamGetAllParameterKeys", "table or tableLen")
	}
	keysOnce.Do(func() {
		ps := capi.Params()
		arr := (**C.char)(C.malloc(C.size_t(len(ps)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		for i, p := range ps {
			unsafe.Slice(arr, len(ps))[i] = C.CString(p.Key)
		}
		keys, nkeys = arr, len(ps)
	})
	*table, *n = keys, C.int(nkeys)
	return ok
}

func xParamDumpAll() { fmt.Fprint(os.Stdout, capi.ParamDump(cEnv)) }
