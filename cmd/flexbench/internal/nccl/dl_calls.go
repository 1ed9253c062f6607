package nccl

import (
	"unsafe"

	"github.com/ebitengine/purego"
)

// The api methods of dl: one NCCL call each. Pointers handed to NCCL as
// uintptr are converted in the argument list of d.call, which is marked
// go:uintptrescapes, so what they point at stays alive and in place for the
// duration of the call. C int and enum arguments travel in a full register;
// the callee reads the low 32 bits.

// call invokes entry point s and returns its ncclResult_t.
//
//go:uintptrescapes
func (d *dl) call(s sym, args ...uintptr) Result {
	r, _, _ := purego.SyscallN(d.fn[s], args...)
	return Result(int32(uint32(r)))
}

func (d *dl) getVersion() (int, Result) {
	var v int32
	r := d.call(sGetVersion, uintptr(unsafe.Pointer(&v)))
	return int(v), r
}

func (d *dl) getUniqueID() (UniqueID, Result) {
	var id UniqueID
	r := d.call(sGetUniqueID, uintptr(unsafe.Pointer(&id)))
	return id, r
}

func (d *dl) commInitRank(nranks int, id UniqueID, rank int) (commHandle, Result) {
	var c uintptr
	r := Result(d.commInitRankFn(&c, int32(nranks), cUniqueID{id}, int32(rank)))
	return commHandle(c), r
}

func (d *dl) commDestroy(c commHandle) Result { return d.call(sCommDestroy, uintptr(c)) }

func (d *dl) allReduce(send, recv uintptr, count uint64, dt dataType, op redOp, c commHandle, stream uintptr) Result {
	return d.call(sAllReduce, send, recv, uintptr(count), uintptr(dt), uintptr(op), uintptr(c), stream)
}

func (d *dl) allGather(send, recv uintptr, sendCount uint64, dt dataType, c commHandle, stream uintptr) Result {
	return d.call(sAllGather, send, recv, uintptr(sendCount), uintptr(dt), uintptr(c), stream)
}

func (d *dl) reduceScatter(send, recv uintptr, recvCount uint64, dt dataType, op redOp, c commHandle, stream uintptr) Result {
	return d.call(sReduceScatter, send, recv, uintptr(recvCount), uintptr(dt), uintptr(op), uintptr(c), stream)
}

func (d *dl) broadcast(send, recv uintptr, count uint64, dt dataType, root int, c commHandle, stream uintptr) Result {
	return d.call(sBroadcast, send, recv, uintptr(count), uintptr(dt), uintptr(root), uintptr(c), stream)
}

func (d *dl) reduce(send, recv uintptr, count uint64, dt dataType, op redOp, root int, c commHandle, stream uintptr) Result {
	return d.call(sReduce, send, recv, uintptr(count), uintptr(dt), uintptr(op), uintptr(root), uintptr(c), stream)
}

func (d *dl) send(buf uintptr, count uint64, dt dataType, peer int, c commHandle, stream uintptr) Result {
	return d.call(sSend, buf, uintptr(count), uintptr(dt), uintptr(peer), uintptr(c), stream)
}

func (d *dl) recv(buf uintptr, count uint64, dt dataType, peer int, c commHandle, stream uintptr) Result {
	return d.call(sRecv, buf, uintptr(count), uintptr(dt), uintptr(peer), uintptr(c), stream)
}

func (d *dl) groupStart() Result { return d.call(sGroupStart) }

func (d *dl) groupEnd() Result { return d.call(sGroupEnd) }

func (d *dl) errorString(r Result) string { return d.errorStringFn(int32(r)) }

func (d *dl) lastError(c commHandle) string {
	if d.lastErrorFn == nil {
		return ""
	}
	return d.lastErrorFn(uintptr(c))
}
