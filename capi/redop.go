package capi

import (
	"fmt"
	"math"

	"github.com/flexlink/flexlink/dtype"
)

// RedOp is a reduction as a call sees it: a built-in operator, or a
// PreMulSum (an operator made by ncclRedOpCreatePreMulSum), which
// multiplies every input by a scalar and sums. The scalar is read in the
// op's datatype, as NCCL reads it: sizeof(datatype) bytes, from host memory
// when the op is created (ncclScalarHostImmediate: Scalar), or from device
// memory when each call runs (ncclScalarDevice: ScalarPtr).
type RedOp struct {
	Op        dtype.Op
	PreMul    bool
	DType     dtype.DType // a PreMulSum's datatype: calls must use it
	Scalar    []byte      // host-immediate scalar, DType.Size() bytes
	ScalarPtr uintptr     // device scalar (ncclScalarDevice), 0 when host-immediate
}

// redOp resolves an operator code for a call on dt: a built-in one or a
// PreMulSum of this communicator made for dt.
func (c *Comm) redOp(code int32, dt dtype.DType) (RedOp, error) {
	if op, ok := builtinOp(code); ok {
		return RedOp{Op: op}, nil
	}
	c.mu.Lock()
	op, ok := c.ops[code]
	c.mu.Unlock()
	if !ok {
		return RedOp{}, refuse(InvalidArgument, "invalid reduction operator %d (built-in: 0 sum, 1 prod, 2 max, 3 min, 4 avg; others come from ncclRedOpCreatePreMulSum on this communicator)", code)
	}
	if op.DType != dt {
		return RedOp{}, refuse(InvalidArgument, "reduction operator %d is a PreMulSum made for %s, used on %s (NCCL: an operator serves the datatype it was created for)", code, op.DType, dt)
	}
	return op, nil
}

// Scalar residences (ncclScalarResidence_t).
const (
	ScalarDevice        = 0 // dereferenced on the device while each call runs
	ScalarHostImmediate = 1 // read from host memory before the create returns
)

// CreatePreMulSum is ncclRedOpCreatePreMulSum for dtype code dt: scalar is
// the host-immediate scalar's bytes (residence ScalarHostImmediate; at
// least dt's size, of which the first dt-size bytes are the value), or
// ptr the device address of the scalar (ScalarDevice). Every datatype
// takes it, as in NCCL: integers multiply with wrap-around, float8
// saturates (reduce.PreMul, the kernels' flexlink_premul_<t>).
func (l *Library) CreatePreMulSum(h uintptr, scalar []byte, ptr uintptr, residence int, dt int32) (int32, error) {
	c, err := l.handles.comm(h, "ncclRedOpCreatePreMulSum")
	if err != nil {
		return 0, err
	}
	d, err := DataType(dt)
	if err != nil {
		return 0, fmt.Errorf("ncclRedOpCreatePreMulSum: %w", err)
	}
	op := RedOp{Op: dtype.Sum, PreMul: true, DType: d}
	switch residence {
	case ScalarHostImmediate:
		if len(scalar) < d.Size() {
			return 0, fail(InvalidArgument, "ncclRedOpCreatePreMulSum: %d scalar bytes for %s", len(scalar), d)
		}
		op.Scalar = append([]byte(nil), scalar[:d.Size()]...)
	case ScalarDevice:
		if ptr == 0 {
			return 0, fail(InvalidArgument, "ncclRedOpCreatePreMulSum: the device scalar is NULL")
		}
		op.ScalarPtr = ptr
	default:
		return 0, fail(InvalidArgument, "ncclRedOpCreatePreMulSum: scalar residence %d (ncclScalarDevice 0, ncclScalarHostImmediate 1)", residence)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ops) >= maxPreMulSumOps {
		return 0, fail(InvalidUsage, "ncclRedOpCreatePreMulSum: %d operators already live on this communicator", len(c.ops))
	}
	code := c.nextOp
	for {
		if _, used := c.ops[code]; !used {
			break
		}
		code++
		if code == ncclMaxRedOp {
			code = ncclNumOps
		}
	}
	c.nextOp = code + 1
	if c.nextOp == math.MaxInt32 {
		c.nextOp = ncclNumOps
	}
	c.ops[code] = op
	return code, nil
}

// DestroyRedOp is ncclRedOpDestroy.
func (l *Library) DestroyRedOp(h uintptr, code int32) error {
	c, err := l.handles.comm(h, "ncclRedOpDestroy")
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.ops[code]; !ok {
		return fail(InvalidArgument, "ncclRedOpDestroy: operator %d was not created on this communicator (or was destroyed)", code)
	}
	delete(c.ops, code)
	return nil
}
