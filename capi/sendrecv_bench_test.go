package capi

import (
	"testing"

	"github.com/flexlink/flexlink/gpu/gpufake"
)

// BenchmarkSendRecv2 is nccl-tests' sendrecv at 8 bytes on two ranks on two
// fake GPUs, each rank from a thread of its own as two processes make it:
// ncclGroupStart, ncclSend to the peer, ncclRecv from it, ncclGroupEnd (the
// flag kernels' exchange takes it). Per op, one group of each rank, the
// fake kernels' meeting included: the host cost of a grouped call beside
// BenchmarkPerCall2's single collective.
func BenchmarkSendRecv2(b *testing.B) {
	f, mem := newIDFixture(b, 2, gpufake.Config{})
	type pair struct{ send, recv Call }
	var calls [2]pair
	for r := range calls {
		send, recv := memAlloc(b, f.dvs[r], mem, 8, r), memAlloc(b, f.dvs[r], mem, 8, r)
		s := f.ss[r].Handle()
		calls[r] = pair{
			send: Call{Kind: Send, Send: devPtr(send), Count: 2, Type: ncclFloat32, Root: 1 - r, Stream: s},
			recv: Call{Kind: Recv, Recv: devPtr(recv), Count: 2, Type: ncclFloat32, Root: 1 - r, Stream: s},
		}
	}
	benchThreads(b, len(calls), func(r int) error {
		return groupOf(f.l, 10+r, f.hs[r], []Call{calls[r].send, calls[r].recv})
	})
}
