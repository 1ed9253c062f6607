package capi

import (
	"fmt"

	"flexlink/dtype"
)

// RedOp is a reduction as a call sees it: a built-in operator, or a
// PreMulSum (an operator made by ncclRedOpCreatePreMulSum), which
// multiplies every input by Scalar and sums.
type RedOp struct {
	Op        dtype.Op
	PreMul    bool
	Scalar    float64
	ScalarPtr uintptr // device scalar (ncclScalarDevice): read by the GPU path
}

// redOp resolves an operator code: a built-in one or a PreMulSum of this
// communicator.
func (c *Comm) redOp(code int32) (RedOp, error) {
	if op, ok := builtinOp(code); ok {
		return RedOp{Op: op}, nil
	}
	c.mu.Lock()
	op, ok := c.ops[code]
	c.mu.Unlock()
	if !ok {
		return RedOp{}, fail(InvalidArgument, "invalid reduction operator %d (built-in: 0 sum, 1 prod, 2 max, 3 min, 4 avg; others come from ncclRedOpCreatePreMulSum on this communicator)", code)
	}
	return op, nil
}

// CreatePreMulSum is ncclRedOpCreatePreMulSum with a host scalar (already
// converted to float64 by the caller) for dtype code dt.
func (l *Library) CreatePreMulSum(h uintptr, scalar float64, dt int32) (int32, error) {
	c, err := l.handles.comm(h, "ncclRedOpCreatePreMulSum")
	if err != nil {
		return 0, err
	}
	d, err := DataType(dt)
	if err != nil {
		return 0, fmt.Errorf("ncclRedOpCreatePreMulSum: %w", err)
	}
	if !d.IsFloat() {
		return 0, fail(InvalidArgument, "ncclRedOpCreatePreMulSum: datatype %s: flexlink supports PreMulSum on floating-point types only", d)
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
	c.ops[code] = RedOp{Op: dtype.Sum, PreMul: true, Scalar: scalar}
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
