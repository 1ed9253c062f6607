package nccl

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/testenv"
)

// TestGPU runs NCCL for real: a one-rank communicator on GPU 0, every
// collective over every element type (and every operator for the
// reductions). With one rank each collective leaves a copy of its input in
// recv, which the test checks after filling recv with other bytes. It skips
// through testenv where libnccl or the GPU is missing.
func TestGPU(t *testing.T) {
	lib, err := Open()
	if errors.Is(err, errs.ErrNotSupported) {
		testenv.MissingHardware(t, "gpu", err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	drv, err := gpu.Open()
	if errors.Is(err, errs.ErrNotSupported) {
		testenv.MissingHardware(t, "gpu", err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drv.Close(); err != nil {
			t.Error(err)
		}
	})
	dv, err := drv.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	cuda := openTestCUDA(t, 0)
	v, err := lib.Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: NCCL %d.%d.%d on %s", lib.Path(), v/10000, v/100%100, v%100, dv)

	id, err := lib.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	comm, err := lib.InitRankOn(1, 0, id, cuda.run)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dv.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	const count = 4099
	send, err := dv.Alloc(count * 8)
	if err != nil {
		t.Fatal(err)
	}
	recv, err := dv.Alloc(count * 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, err := range []error{comm.Destroy(), send.Free(), recv.Free(), s.Close()} {
			if err != nil {
				t.Error(err)
			}
		}
	})

	for _, dt := range dtype.All() {
		in := finiteElems(dt, count, uint64(dt)+1)
		if err := s.CopyHtoD(send.Sub(0, len(in)), in); err != nil {
			t.Fatal(err)
		}
		type coll struct {
			name string
			do   func() error
		}
		var colls []coll
		for _, op := range dtype.Ops() {
			colls = append(colls,
				coll{"allreduce " + op.String(), func() error { return comm.AllReduce(send.Ptr(), recv.Ptr(), count, dt, op, 0) }},
				coll{"reducescatter " + op.String(), func() error { return comm.ReduceScatter(send.Ptr(), recv.Ptr(), count, dt, op, 0) }},
				coll{"reduce " + op.String(), func() error { return comm.Reduce(send.Ptr(), recv.Ptr(), count, dt, op, 0, 0) }})
		}
		colls = append(colls,
			coll{"allgather", func() error { return comm.AllGather(send.Ptr(), recv.Ptr(), count, dt, 0) }},
			coll{"broadcast", func() error { return comm.Broadcast(send.Ptr(), recv.Ptr(), count, dt, 0, 0) }},
			coll{"alltoall", func() error { return comm.AllToAll(send.Ptr(), recv.Ptr(), count, dt, 0) }})
		for _, c := range colls {
			if err := s.Memset(recv, 0xa5); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil { // NCCL runs on another stream
				t.Fatal(err)
			}
			if err := c.do(); err != nil {
				t.Fatalf("%v %s: %v", dt, c.name, err)
			}
			if err := cuda.run(cuda.synchronize); err != nil {
				t.Fatalf("%v %s: %v", dt, c.name, err)
			}
			out := make([]byte, len(in))
			if err := s.CopyDtoH(out, recv.Sub(0, len(out))); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, in) {
				t.Errorf("%v %s on one rank: recv differs from send (first bytes %x, want %x)", dt, c.name, out[:16], in[:16])
			}
		}
	}

	// An argument only NCCL rejects (the method checks the root itself):
	// the error must carry NCCL's own text.
	err = comm.do(func() error {
		return comm.check("ncclBroadcast", comm.api.broadcast(send.Ptr(), recv.Ptr(), 1, 7, 5, comm.h, 0))
	})
	var e *Error
	if !errors.As(err, &e) || e.Code != InvalidArgument || e.Desc == "" {
		t.Errorf("broadcast with root 5 of 1: %v, want an ncclInvalidArgument *Error", err)
	}
	t.Logf("broadcast with root 5 of 1: %v", err)
}

// finiteElems returns count random elements of dt; floating-point ones are
// never NaN or infinite (NCCL may scale them, which need not keep NaN
// payloads).
func finiteElems(dt dtype.DType, count int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x6e63636c))
	b := make([]byte, count*dt.Size())
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	// Little-endian: the exponent's top bits are in the element's last byte.
	var expMask uint64
	switch dt {
	case dtype.Float16:
		expMask = 0x7c00
	case dtype.BFloat16:
		expMask = 0x7f80
	case dtype.Float32:
		expMask = 0x7f80_0000
	case dtype.Float64:
		expMask = 0x7ff0_0000_0000_0000
	case dtype.Float8E4M3:
		expMask = 0x78
	case dtype.Float8E5M2:
		expMask = 0x7c
	default:
		return b
	}
	size := dt.Size()
	for i := 0; i < len(b); i += size {
		var v uint64
		for k := size - 1; k >= 0; k-- {
			v = v<<8 | uint64(b[i+k])
		}
		if v&expMask == expMask { // Inf or NaN: clear the exponent's top bit
			v &^= expMask &^ (expMask >> 1)
		}
		for k := 0; k < size; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

func TestFiniteElems(t *testing.T) {
	for _, dt := range dtype.All() {
		b := finiteElems(dt, 1000, 1)
		if len(b) != 1000*dt.Size() {
			t.Fatalf("%v: %d bytes", dt, len(b))
		}
		bits := map[bool]int{}
		for i := 0; i < 1000; i++ {
			v := dtype.Get(b, i, dt)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%v element %d is %v", dt, i, v)
			}
			bits[v < 0]++
		}
		if dt != dtype.Uint8 && dt != dtype.Uint32 && dt != dtype.Uint64 && (bits[true] == 0 || bits[false] == 0) {
			t.Errorf("%v: signs %v: not random", dt, bits)
		}
	}
}
