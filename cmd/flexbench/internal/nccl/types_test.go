package nccl

import (
	"errors"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
)

// The expected values are nccl.h's enumerators, copied from the header, not
// from types.go.

func TestDataTypes(t *testing.T) {
	header := map[string]dataType{
		"ncclInt8": 0, "ncclUint8": 1, "ncclInt32": 2, "ncclUint32": 3, "ncclInt64": 4,
		"ncclUint64": 5, "ncclFloat16": 6, "ncclFloat32": 7, "ncclFloat64": 8, "ncclBfloat16": 9,
		"ncclFloat8e4m3": 10, "ncclFloat8e5m2": 11,
	}
	want := map[dtype.DType]string{
		dtype.Int8: "ncclInt8", dtype.Uint8: "ncclUint8", dtype.Int32: "ncclInt32", dtype.Int64: "ncclInt64",
		dtype.Float16: "ncclFloat16", dtype.BFloat16: "ncclBfloat16", dtype.Float32: "ncclFloat32", dtype.Float64: "ncclFloat64",
		dtype.Uint32: "ncclUint32", dtype.Uint64: "ncclUint64", dtype.Float8E4M3: "ncclFloat8e4m3", dtype.Float8E5M2: "ncclFloat8e5m2",
	}
	seen := map[dataType]dtype.DType{}
	for _, dt := range dtype.All() {
		got, err := ncclType(dt)
		if err != nil {
			t.Errorf("%v: %v", dt, err)
			continue
		}
		name, ok := want[dt]
		if !ok {
			t.Errorf("%v: no expectation; add it to this test", dt)
			continue
		}
		if got != header[name] {
			t.Errorf("%v -> %d, want %s = %d", dt, got, name, header[name])
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("%v and %v both map to %d", prev, dt, got)
		}
		seen[got] = dt
	}
	if _, err := ncclType(dtype.DType(200)); !errors.Is(err, errs.ErrNotSupported) {
		t.Errorf("unknown dtype: %v, want ErrNotSupported", err)
	}
}

func TestRedOps(t *testing.T) {
	want := map[dtype.Op]redOp{dtype.Sum: 0, dtype.Prod: 1, dtype.Max: 2, dtype.Min: 3, dtype.Avg: 4}
	for _, op := range dtype.Ops() {
		got, err := ncclOp(op)
		w, ok := want[op]
		switch {
		case err != nil:
			t.Errorf("%v: %v", op, err)
		case !ok:
			t.Errorf("%v: no expectation; add it to this test", op)
		case got != w:
			t.Errorf("%v -> %d, want %d", op, got, w)
		}
	}
	if _, err := ncclOp(dtype.Op(99)); !errors.Is(err, errs.ErrNotSupported) {
		t.Errorf("unknown op: %v, want ErrNotSupported", err)
	}
}

func TestResultNames(t *testing.T) {
	for r, name := range map[Result]string{
		0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
		4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
		8: "ncclTimeout", 9: "ncclResult(9)", -1: "ncclResult(-1)",
	} {
		if got := r.String(); got != name {
			t.Errorf("Result(%d) = %q, want %q", int32(r), got, name)
		}
	}
}
