package capi

import (
	"testing"

	"github.com/flexlink/flexlink/dtype"
)

// TestDataTypeEveryNCCLType: every ncclDataType_t code maps to a distinct
// dtype of the same element size as NCCL's, and every dtype has a code.
func TestDataTypeEveryNCCLType(t *testing.T) {
	sizes := map[int32]int{ncclInt8: 1, ncclUint8: 1, ncclInt32: 4, ncclUint32: 4, ncclInt64: 8, ncclUint64: 8,
		ncclFloat16: 2, ncclFloat32: 4, ncclFloat64: 8, ncclBfloat16: 2, ncclFloat8e4m3: 1, ncclFloat8e5m2: 1}
	seen := map[dtype.DType]int32{}
	for code := int32(0); code < ncclNumTypes; code++ {
		dt, err := DataType(code)
		if err != nil {
			t.Fatalf("DataType(%d): %v", code, err)
		}
		if dt.Size() != sizes[code] {
			t.Errorf("DataType(%d) = %v of %d bytes, NCCL's is %d", code, dt, dt.Size(), sizes[code])
		}
		if prev, dup := seen[dt]; dup {
			t.Errorf("codes %d and %d both map to %v", prev, code, dt)
		}
		seen[dt] = code
	}
	for _, dt := range dtype.All() {
		if _, ok := seen[dt]; !ok {
			t.Errorf("%v has no ncclDataType_t", dt)
		}
	}
}
