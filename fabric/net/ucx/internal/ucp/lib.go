// Package ucp is the part of UCX's UCP API that the ucx provider uses,
// loaded at run time from libucp.so.0 with purego (no cgo). Struct layouts,
// field-mask bits and status codes come from the installed headers through
// gen.sh (zz_layout_generated.go); nothing is typed by hand.
//
// Thread safety: none. UCP objects are created with UCS_THREAD_MODE_SINGLE,
// so every call on a context, its worker and their endpoints must come from
// the one OS thread that created them (the provider's progress goroutine,
// locked to its thread).
//
// Memory: buffers are passed as addresses. The caller keeps what they point
// at alive and unmoved until the request that uses them completes (Go's heap
// does not move objects; the provider keeps a reference in its request).
// Parameter structs are built in Go memory and read by UCX only during the
// call.
package ucp

//go:generate sh gen.sh

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/flexlink/flexlink/internal/ccall"
	"github.com/flexlink/flexlink/internal/errs"
)

// DefaultLibrary is the library Load opens when given "".
const DefaultLibrary = "libucp.so.0"

type sym int

const (
	sConfigRead sym = iota
	sConfigRelease
	sInitVersion
	sCleanup
	sWorkerCreate
	sWorkerDestroy
	sWorkerGetAddress
	sWorkerReleaseAddress
	sWorkerProgress
	sEpCreate
	sEpCloseNbx
	sEpFlushNbx
	sTagSendSyncNbx
	sTagRecvNbx
	sTagProbeNb
	sTagMsgRecvNbx
	sRequestCheckStatus
	sTagRecvRequestTest
	sRequestCancel
	sRequestFree
	sMemMap
	sMemUnmap
	sStatusString
	sGetVersionString
	numSyms
)

var symNames = [numSyms]string{
	sConfigRead:           "ucp_config_read",
	sConfigRelease:        "ucp_config_release",
	sInitVersion:          "ucp_init_version",
	sCleanup:              "ucp_cleanup",
	sWorkerCreate:         "ucp_worker_create",
	sWorkerDestroy:        "ucp_worker_destroy",
	sWorkerGetAddress:     "ucp_worker_get_address",
	sWorkerReleaseAddress: "ucp_worker_release_address",
	sWorkerProgress:       "ucp_worker_progress",
	sEpCreate:             "ucp_ep_create",
	sEpCloseNbx:           "ucp_ep_close_nbx",
	sEpFlushNbx:           "ucp_ep_flush_nbx",
	sTagSendSyncNbx:       "ucp_tag_send_sync_nbx",
	sTagRecvNbx:           "ucp_tag_recv_nbx",
	sTagProbeNb:           "ucp_tag_probe_nb",
	sTagMsgRecvNbx:        "ucp_tag_msg_recv_nbx",
	sRequestCheckStatus:   "ucp_request_check_status",
	sTagRecvRequestTest:   "ucp_tag_recv_request_test",
	sRequestCancel:        "ucp_request_cancel",
	sRequestFree:          "ucp_request_free",
	sMemMap:               "ucp_mem_map",
	sMemUnmap:             "ucp_mem_unmap",
	sStatusString:         "ucs_status_string",
	sGetVersionString:     "ucp_get_version_string",
}

// Opaque UCP handles.
type (
	Context uintptr // ucp_context_h
	Worker  uintptr // ucp_worker_h
	Ep      uintptr // ucp_ep_h
	Request uintptr // a request pointer; 0 means completed at once
	Message uintptr // ucp_tag_message_h; 0 means nothing matched
	Memh    uintptr // ucp_mem_h; 0 means none
)

// Status is a ucs_status_t.
type Status int8

// RecvInfo is ucp_tag_recv_info_t.
type RecvInfo struct {
	SenderTag uint64
	Length    int
}

// Error is a failed UCP call.
type Error struct {
	Func   string
	Status Status
	Text   string // ucs_status_string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (status %d)", e.Func, e.Text, e.Status)
}

// Lib is libucp loaded with its entry points resolved.
type Lib struct {
	path string
	fn   [numSyms]uintptr
}

// Load opens the UCP library at path (DefaultLibrary when "") and resolves
// every entry point. When the library cannot be opened or lacks a symbol,
// the error wraps errs.ErrNotSupported and keeps dlopen's message. The
// library is never closed (UCX keeps global state and threads).
func Load(path string) (*Lib, error) {
	if path == "" {
		path = DefaultLibrary
	}
	// dlerror is per thread: stay on dlopen's thread so its message is kept.
	runtime.LockOSThread()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("no libucp (install libucx0): %s: %w", err.Error(), errs.ErrNotSupported)
	}
	l := &Lib{path: path}
	for s, name := range symNames {
		p, err := purego.Dlsym(h, name)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("%s has no %s (UCX older than 1.10?): %w", path, name, errs.ErrNotSupported)
		}
		l.fn[s] = p
	}
	return l, nil
}

// Path is the library Load opened.
func (l *Lib) Path() string { return l.path }

// Version is UCX's version string, e.g. "1.13.1".
func (l *Lib) Version() string {
	r, _, _ := purego.SyscallN(l.fn[sGetVersionString])
	return cString(r)
}

// StatusString is ucs_status_string.
func (l *Lib) StatusString(s Status) string {
	r, _, _ := purego.SyscallN(l.fn[sStatusString], uintptr(s))
	return cString(r)
}

// raw invokes entry point s. Pointer arguments converted to uintptr in the
// call's argument list stay alive for its duration (go:uintptrescapes).
//
//go:uintptrescapes
func (l *Lib) raw(s sym, args ...uintptr) uintptr {
	return ccall.Call(l.fn[s], args...)
}

// call invokes s and turns a ucs_status_t result into an error.
//
//go:uintptrescapes
func (l *Lib) call(s sym, args ...uintptr) error {
	r := ccall.Call(l.fn[s], args...)
	return l.check(s, Status(int8(r)))
}

func (l *Lib) check(s sym, st Status) error {
	if st == StatusOK {
		return nil
	}
	return &Error{Func: symNames[s], Status: st, Text: l.StatusString(st)}
}

// ptrErrFirst is (uintptr_t)UCS_ERR_LAST: status pointers at or above it
// are error codes.
const ptrErrFirst = ^uintptr(0) - uintptr(-statusErrLast-1)

// statusPtr splits a ucs_status_ptr_t: an error (UCS_PTR_IS_ERR), a request,
// or 0 for immediate completion.
func (l *Lib) statusPtr(s sym, p uintptr) (Request, error) {
	if p >= ptrErrFirst { // UCS_PTR_IS_ERR
		return 0, l.check(s, Status(int8(int64(p))))
	}
	return Request(p), nil
}

// cString copies a NUL-terminated C string.
func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	var b []byte
	for i := uintptr(0); i < 4096; i++ {
		c := *(*byte)(cptr(p + i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// cptr turns the address of C memory into a pointer (C memory does not
// move and is not Go's to collect).
func cptr(a uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&a)) }

// params is an 8-byte-aligned scratch struct of size n, written through set.
type params []uint64

func newParams(size uintptr) params { return make(params, (size+7)/8) }

func (p params) ptr() unsafe.Pointer { return unsafe.Pointer(&p[0]) }

// set writes v into the field at off whose width is sz bytes.
func (p params) set(off, sz uintptr, v uint64) {
	a := unsafe.Add(p.ptr(), off)
	switch sz {
	case 1:
		*(*uint8)(a) = uint8(v)
	case 2:
		*(*uint16)(a) = uint16(v)
	case 4:
		*(*uint32)(a) = uint32(v)
	case 8:
		*(*uint64)(a) = v
	default:
		panic(fmt.Sprintf("ucp: field width %d", sz))
	}
}

func (p params) get(off, sz uintptr) uint64 {
	a := unsafe.Add(p.ptr(), off)
	switch sz {
	case 4:
		return uint64(*(*uint32)(a))
	case 8:
		return *(*uint64)(a)
	default:
		panic(fmt.Sprintf("ucp: field width %d", sz))
	}
}
