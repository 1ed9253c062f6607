//go:build mpi

package main

// The MPI anchor: the same benchmark loop and checks, with the collectives
// done by the MPI library (Debian's OpenMPI), started by mpirun. gompi
// (github.com/sbromberger/gompi) starts and stops MPI; it has no allgather,
// reduce-scatter or all-to-all and works on typed slices only, so the few
// calls below go to the C API directly through cgo on byte buffers.

/*
#cgo pkg-config: ompi
#include <mpi.h>
#include <stdint.h>
#include <string.h>

static MPI_Datatype flexDtype(int d) {
	switch (d) {
	case 0: return MPI_INT8_T;
	case 1: return MPI_UINT8_T;
	case 2: return MPI_INT32_T;
	case 3: return MPI_INT64_T;
	case 6: return MPI_FLOAT;
	case 7: return MPI_DOUBLE;
	case 8: return MPI_UINT32_T;
	case 9: return MPI_UINT64_T;
	}
	return MPI_DATATYPE_NULL;
}

static MPI_Op flexOp(int o) {
	switch (o) {
	case 0: return MPI_SUM;
	case 1: return MPI_PROD;
	case 2: return MPI_MIN;
	case 3: return MPI_MAX;
	}
	return MPI_OP_NULL;
}

static void *inplace(void *s, void *r) { return s == r ? MPI_IN_PLACE : s; }

static int flexAllreduce(void *s, void *r, int n, int d, int o) {
	return MPI_Allreduce(inplace(s, r), r, n, flexDtype(d), flexOp(o), MPI_COMM_WORLD);
}
static int flexAllgather(void *s, void *r, int n, int d, int inpl) {
	return MPI_Allgather(inpl ? MPI_IN_PLACE : s, n, flexDtype(d), r, n, flexDtype(d), MPI_COMM_WORLD);
}
// In place, MPI leaves the block at the start of the buffer; NCCL (and so
// flexbench's check) wants it at this rank's offset: move it there.
static int flexReduceScatter(void *s, void *r, int n, int d, int o, int inpl) {
	if (!inpl)
		return MPI_Reduce_scatter_block(s, r, n, flexDtype(d), flexOp(o), MPI_COMM_WORLD);
	int rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, s, n, flexDtype(d), flexOp(o), MPI_COMM_WORLD);
	MPI_Aint lb, ext;
	MPI_Type_get_extent(flexDtype(d), &lb, &ext);
	memmove(r, s, (size_t)n * ext);
	return rc;
}
static int flexBcast(void *s, void *r, int n, int d, int root, int me) {
	if (me == root && s != r) {
		MPI_Aint lb, ext;
		MPI_Type_get_extent(flexDtype(d), &lb, &ext);
		memcpy(r, s, (size_t)n * ext);
	}
	return MPI_Bcast(r, n, flexDtype(d), root, MPI_COMM_WORLD);
}
static int flexReduce(void *s, void *r, int n, int d, int o, int root, int me) {
	return MPI_Reduce(me == root ? inplace(s, r) : s, r, n, flexDtype(d), flexOp(o), root, MPI_COMM_WORLD);
}
static int flexAlltoall(void *s, void *r, int n, int d) {
	return MPI_Alltoall(inplace(s, r), n, flexDtype(d), r, n, flexDtype(d), MPI_COMM_WORLD);
}
static int flexSendrecv(void *s, void *r, int n, int d, int to, int from) {
	if (s == r)
		return MPI_Sendrecv_replace(r, n, flexDtype(d), to, 7, from, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	return MPI_Sendrecv(s, n, flexDtype(d), to, 7, r, n, flexDtype(d), from, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}
static int flexBarrier(void) { return MPI_Barrier(MPI_COMM_WORLD); }
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"unsafe"

	mpi "github.com/sbromberger/gompi"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/rank"
)

type mpiBackend struct {
	me, n int
	hosts []string
}

func openBackend(ctx context.Context, name string) (backend, error) {
	switch name {
	case "mpi":
		mpi.Start(false)
		b := &mpiBackend{me: mpi.WorldRank(), n: mpi.WorldSize()}
		h, _ := os.Hostname()
		b.hosts = make([]string, b.n)
		for i := range b.hosts {
			b.hosts[i] = h // mpirun on one host in this benchmark; names are informational
		}
		return b, nil
	case "flexlink":
		c, err := rank.Init(ctx)
		if err != nil {
			return nil, err
		}
		return flexBackend{c}, nil
	}
	return nil, fmt.Errorf("--backend %s: want flexlink or mpi", name)
}

func (b *mpiBackend) name() string      { return "mpi" }
func (b *mpiBackend) rank() int         { return b.me }
func (b *mpiBackend) size() int         { return b.n }
func (b *mpiBackend) host(r int) string { return b.hosts[r] }
func (b *mpiBackend) close() error      { mpi.Stop(); return nil }

func (b *mpiBackend) barrier(context.Context) error { return code("barrier", C.flexBarrier()) }

func (b *mpiBackend) reduceF64(_ context.Context, v float64, op dtype.Op) (float64, error) {
	x := []float64{v}
	err := code("allreduce", C.flexAllreduce(unsafe.Pointer(&x[0]), unsafe.Pointer(&x[0]), 1, C.int(dtype.Float64), C.int(op)))
	return x[0], err
}

func ptr(d rank.Data) unsafe.Pointer {
	b := d.Buf.(collectives.HostBuffer).Bytes()
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func (b *mpiBackend) run(_ context.Context, spec *opSpec, send, recv rank.Data, op dtype.Op, root int) error {
	dt := send.Type
	if dt == dtype.Float16 || dt == dtype.BFloat16 || dt.IsFloat8() || op == dtype.Avg {
		return fmt.Errorf("mpi backend: %v/%v has no MPI equivalent", dt, op)
	}
	s, r, d, o := ptr(send), ptr(recv), C.int(dt), C.int(op)
	switch spec.name {
	case "allreduce":
		return code(spec.name, C.flexAllreduce(s, r, C.int(send.Count), d, o))
	case "allgather":
		inpl := C.int(0)
		if uintptr(s) == uintptr(r)+uintptr(b.me*send.Count*dt.Size()) {
			inpl = 1
		}
		return code(spec.name, C.flexAllgather(s, r, C.int(send.Count), d, inpl))
	case "reducescatter":
		inpl := C.int(0)
		if uintptr(r) == uintptr(s)+uintptr(b.me*recv.Count*dt.Size()) {
			inpl = 1
		}
		return code(spec.name, C.flexReduceScatter(s, r, C.int(recv.Count), d, o, inpl))
	case "broadcast":
		return code(spec.name, C.flexBcast(s, r, C.int(recv.Count), d, C.int(root), C.int(b.me)))
	case "reduce":
		return code(spec.name, C.flexReduce(s, r, C.int(send.Count), d, o, C.int(root), C.int(b.me)))
	case "alltoall":
		return code(spec.name, C.flexAlltoall(s, r, C.int(send.Count/b.n), d))
	case "sendrecv":
		return code(spec.name, C.flexSendrecv(s, r, C.int(send.Count), d, C.int((b.me+1)%b.n), C.int((b.me+b.n-1)%b.n)))
	}
	return fmt.Errorf("mpi backend: %s not supported", spec.name)
}

func code(what string, rc C.int) error {
	if rc != 0 {
		return fmt.Errorf("MPI %s failed with code %d", what, int(rc))
	}
	return nil
}
