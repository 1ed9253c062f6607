package nccl

// commHandle is an ncclComm_t.
type commHandle uintptr

// api is the NCCL entry points this package calls, in Go types: one method
// per C function, returning NCCL's result code untouched. dl implements it
// over libnccl; tests use a fake that records calls.
//
// Counts are element counts (size_t). Buffers and streams are device
// addresses and cudaStream_t values, never Go pointers. Methods other than
// getVersion, getUniqueID and errorString must run on the OS thread, and
// with the CUDA context, that the caller arranged (see Runner); lastError
// reads state of the calling thread.
type api interface {
	getVersion() (int, Result)
	getUniqueID() (UniqueID, Result)
	commInitRank(nranks int, id UniqueID, rank int) (commHandle, Result)
	commDestroy(c commHandle) Result

	allReduce(send, recv uintptr, count uint64, dt dataType, op redOp, c commHandle, stream uintptr) Result
	allGather(send, recv uintptr, sendCount uint64, dt dataType, c commHandle, stream uintptr) Result
	reduceScatter(send, recv uintptr, recvCount uint64, dt dataType, op redOp, c commHandle, stream uintptr) Result
	broadcast(send, recv uintptr, count uint64, dt dataType, root int, c commHandle, stream uintptr) Result
	reduce(send, recv uintptr, count uint64, dt dataType, op redOp, root int, c commHandle, stream uintptr) Result
	send(buf uintptr, count uint64, dt dataType, peer int, c commHandle, stream uintptr) Result
	recv(buf uintptr, count uint64, dt dataType, peer int, c commHandle, stream uintptr) Result
	groupStart() Result
	groupEnd() Result

	// errorString is ncclGetErrorString: a short description of r.
	errorString(r Result) string
	// lastError is ncclGetLastError (comm may be 0): the detail of the
	// calling thread's last failure, "" when the library lacks it (NCCL
	// before 2.13).
	lastError(c commHandle) string
}
