// Package collectives holds the algorithms (ring, recursive doubling, direct
// all-to-all, grouped send/recv) written against two small interfaces: Peers
// ("move these bytes to that rank") and Memory ("reduce and copy these
// buffers"). Host memory and GPU memory each implement them, so one copy of
// every algorithm drives both data planes.
package collectives

import (
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/mem"
)

// Buffer is a range of memory the data plane can move and reduce (see
// mem.Buffer for the contract): host bytes (HostBuffer) or device memory.
type Buffer = mem.Buffer

// Peers moves bytes between this rank and the other ranks of one
// communicator. Send and Recv follow fabric.Link's contract (per-peer FIFO,
// tag checked by the receiver, buffers owned by the transfer until Done).
type Peers interface {
	Rank() int
	Size() int
	Send(peer int, tag fabric.Tag, b Buffer) fabric.Request
	Recv(peer int, tag fabric.Tag, b Buffer) fabric.Request
}

// Memory copies and reduces buffers of one kind and allocates scratch space.
// Calls are synchronous from the caller's point of view: when one returns,
// its effect is visible to later Peers transfers and Memory calls (a GPU
// implementation orders them on its stream).
type Memory interface {
	// Alloc returns scratch space of n bytes; Free gives it back.
	Alloc(n int) (Buffer, error)
	Free(b Buffer)
	// Copy copies src into dst (same length; may not overlap unless equal).
	Copy(dst, src Buffer) error
	// Reduce sets dst[i] = dst[i] op src[i] for every element of type dt.
	// Avg reduces as Sum; Finish divides afterwards.
	Reduce(dst, src Buffer, dt dtype.DType, op dtype.Op) error
	// Finish applies the op's last step to a fully reduced buffer: for Avg it
	// divides by n (integer types divide with truncation); for the others it
	// does nothing.
	Finish(dst Buffer, dt dtype.DType, op dtype.Op, n int) error
}
