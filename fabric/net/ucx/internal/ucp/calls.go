package ucp

import (
	"unsafe"
)

// Init reads UCX's configuration from the environment (UCX_TLS,
// UCX_NET_DEVICES, ... are honoured as UCX documents them) and creates a
// context with tag matching.
func (l *Lib) Init() (Context, error) {
	var cfg uintptr
	if err := l.call(sConfigRead, 0, 0, uintptr(unsafe.Pointer(&cfg))); err != nil {
		return 0, err
	}
	defer l.raw(sConfigRelease, cfg)
	p := newParams(sizeofParams)
	p.set(offParamsFieldMask, szParamsFieldMask, paramFieldFeatures)
	p.set(offParamsFeatures, szParamsFeatures, featureTag)
	var ctx Context
	err := l.call(sInitVersion, APIMajor, APIMinor, uintptr(p.ptr()), cfg, uintptr(unsafe.Pointer(&ctx)))
	return ctx, err
}

// Cleanup is ucp_cleanup.
func (l *Lib) Cleanup(c Context) { l.raw(sCleanup, uintptr(c)) }

// WorkerCreate creates a single-threaded worker: only the calling OS thread
// may use it.
func (l *Lib) WorkerCreate(c Context) (Worker, error) {
	p := newParams(sizeofWorkerParams)
	p.set(offWorkerParamsFieldMask, szWorkerParamsFieldMask, workerParamFieldThreadMode)
	p.set(offWorkerParamsThreadMode, szWorkerParamsThreadMode, threadModeSingle)
	var w Worker
	err := l.call(sWorkerCreate, uintptr(c), uintptr(p.ptr()), uintptr(unsafe.Pointer(&w)))
	return w, err
}

// WorkerDestroy is ucp_worker_destroy.
func (l *Lib) WorkerDestroy(w Worker) { l.raw(sWorkerDestroy, uintptr(w)) }

// WorkerAddress returns a copy of the worker's address.
func (l *Lib) WorkerAddress(w Worker) ([]byte, error) {
	var a, n uintptr
	if err := l.call(sWorkerGetAddress, uintptr(w), uintptr(unsafe.Pointer(&a)), uintptr(unsafe.Pointer(&n))); err != nil {
		return nil, err
	}
	out := make([]byte, n)
	copy(out, unsafe.Slice((*byte)(cptr(a)), n))
	l.raw(sWorkerReleaseAddress, uintptr(w), a)
	return out, nil
}

// Progress is ucp_worker_progress: the number of events it processed.
func (l *Lib) Progress(w Worker) uint32 { return uint32(l.raw(sWorkerProgress, uintptr(w))) }

// EpCreate connects to the worker whose address is given, with peer error
// handling (requests on the endpoint fail when the peer goes away).
func (l *Lib) EpCreate(w Worker, addr []byte) (Ep, error) {
	p := newParams(sizeofEpParams)
	p.set(offEpParamsFieldMask, szEpParamsFieldMask, epParamFieldRemoteAddress|epParamFieldErrHandlingMode)
	p.set(offEpParamsAddress, szEpParamsAddress, uint64(uintptr(unsafe.Pointer(&addr[0]))))
	p.set(offEpParamsErrMode, szEpParamsErrMode, errHandlingModePeer)
	var ep Ep
	err := l.call(sEpCreate, uintptr(w), uintptr(p.ptr()), uintptr(unsafe.Pointer(&ep)))
	runtimeKeep(addr)
	return ep, err
}

// EpClose starts closing ep: flushing outstanding operations, or with force
// failing them (UCS_ERR_CANCELED). A non-zero Request must be polled and
// freed.
func (l *Lib) EpClose(ep Ep, force bool) (Request, error) {
	p := newParams(sizeofRequestParam)
	if force {
		p.set(offReqParamOpAttrMask, szReqParamOpAttrMask, opAttrFieldFlags)
		p.set(offReqParamFlags, szReqParamFlags, epCloseFlagForce)
	}
	return l.statusPtr(sEpCloseNbx, l.raw(sEpCloseNbx, uintptr(ep), uintptr(p.ptr())))
}

// EpFlush completes once every operation posted on ep has completed
// remotely and the endpoint's connection (wire-up) is established. A
// non-zero Request must be polled and freed.
func (l *Lib) EpFlush(ep Ep) (Request, error) {
	p := newParams(sizeofRequestParam)
	return l.statusPtr(sEpFlushNbx, l.raw(sEpFlushNbx, uintptr(ep), uintptr(p.ptr())))
}

func reqParam(memh Memh, info *[2]uint64, flags uint64) params {
	p := newParams(sizeofRequestParam)
	mask := flags
	if memh != 0 {
		mask |= opAttrFieldMemh
		p.set(offReqParamMemh, szReqParamMemh, uint64(memh))
	}
	if info != nil {
		mask |= opAttrFieldRecvInfo
		p.set(offReqParamRecvInfo, szReqParamRecvInfo, uint64(uintptr(unsafe.Pointer(info))))
	}
	p.set(offReqParamOpAttrMask, szReqParamOpAttrMask, mask)
	return p
}

// TagSendSync posts a synchronous tagged send of n bytes at addr: it
// completes once the receiver has matched (and, for rendezvous, received)
// it.
func (l *Lib) TagSendSync(ep Ep, addr uintptr, n int, tag uint64, memh Memh) (Request, error) {
	p := reqParam(memh, nil, 0)
	return l.statusPtr(sTagSendSyncNbx, l.raw(sTagSendSyncNbx, uintptr(ep), addr, uintptr(n), uintptr(tag), uintptr(p.ptr())))
}

// TagRecv posts a tagged receive into n bytes at addr for messages whose
// tag equals tag on the bits of mask. It always returns a request (poll it
// with RecvTest for the message's tag and length).
func (l *Lib) TagRecv(w Worker, addr uintptr, n int, tag, mask uint64, memh Memh) (Request, RecvInfo, error) {
	// Immediate completion is refused: the tag and length then come from
	// ucp_tag_recv_request_test, the one path that reliably reports them.
	p := reqParam(memh, nil, opAttrFlagNoImmCmpl)
	r, err := l.statusPtr(sTagRecvNbx, l.raw(sTagRecvNbx, uintptr(w), addr, uintptr(n), uintptr(tag), uintptr(mask), uintptr(p.ptr())))
	if err == nil && r == 0 {
		return 0, RecvInfo{}, &Error{Func: "ucp_tag_recv_nbx", Text: "completed at once despite UCP_OP_ATTR_FLAG_NO_IMM_CMPL"}
	}
	return r, RecvInfo{}, err
}

// TagProbe looks for an arrived message matching tag/mask and, when one is
// there, removes it from the unexpected queue: it must then be received
// with TagMsgRecv.
func (l *Lib) TagProbe(w Worker, tag, mask uint64) (Message, RecvInfo) {
	var info [2]uint64
	m := l.raw(sTagProbeNb, uintptr(w), uintptr(tag), uintptr(mask), 1, uintptr(unsafe.Pointer(&info)))
	return Message(m), recvInfo(&info)
}

// TagMsgRecv receives a probed message into n bytes at addr.
func (l *Lib) TagMsgRecv(w Worker, addr uintptr, n int, m Message, memh Memh) (Request, error) {
	p := reqParam(memh, nil, 0)
	return l.statusPtr(sTagMsgRecvNbx, l.raw(sTagMsgRecvNbx, uintptr(w), addr, uintptr(n), uintptr(m), uintptr(p.ptr())))
}

// Check is ucp_request_check_status: StatusInProgress, StatusOK or an
// error status.
func (l *Lib) Check(r Request) Status {
	return Status(int8(l.raw(sRequestCheckStatus, uintptr(r))))
}

// RecvTest is ucp_tag_recv_request_test.
func (l *Lib) RecvTest(r Request) (Status, RecvInfo) {
	var info [2]uint64
	st := Status(int8(l.raw(sTagRecvRequestTest, uintptr(r), uintptr(unsafe.Pointer(&info)))))
	return st, recvInfo(&info)
}

// Cancel asks UCX to cancel a receive that is not matched yet; it then
// completes with StatusErrCanceled.
func (l *Lib) Cancel(w Worker, r Request) { l.raw(sRequestCancel, uintptr(w), uintptr(r)) }

// Free releases a request (completed or not: an incomplete one is released
// when it completes).
func (l *Lib) Free(r Request) { l.raw(sRequestFree, uintptr(r)) }

// MemMap registers n bytes at addr with every transport of the context.
func (l *Lib) MemMap(c Context, addr uintptr, n int) (Memh, error) {
	p := newParams(sizeofMemMapParams)
	p.set(offMemMapFieldMask, szMemMapFieldMask, memMapFieldAddress|memMapFieldLength)
	p.set(offMemMapAddress, szMemMapAddress, uint64(addr))
	p.set(offMemMapLength, szMemMapLength, uint64(n))
	var m Memh
	err := l.call(sMemMap, uintptr(c), uintptr(p.ptr()), uintptr(unsafe.Pointer(&m)))
	return m, err
}

// MemUnmap is ucp_mem_unmap.
func (l *Lib) MemUnmap(c Context, m Memh) error { return l.call(sMemUnmap, uintptr(c), uintptr(m)) }

// Err builds the error for a completed request's status.
func (l *Lib) Err(op string, st Status) error {
	if st == StatusOK {
		return nil
	}
	return &Error{Func: op, Status: st, Text: l.StatusString(st)}
}

// recvInfo reads a ucp_tag_recv_info_t written into b.
func recvInfo(b *[2]uint64) RecvInfo {
	var _ [sizeofTagRecvInfo - 16]byte // b holds exactly the struct:
	var _ [16 - sizeofTagRecvInfo]byte // compiling fails otherwise
	p := params(b[:])
	return RecvInfo{
		SenderTag: p.get(offTagRecvInfoSenderTag, szTagRecvInfoSenderTag),
		Length:    int(p.get(offTagRecvInfoLength, szTagRecvInfoLength)),
	}
}
