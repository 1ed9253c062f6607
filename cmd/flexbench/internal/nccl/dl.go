package nccl

import (
	"fmt"
	"runtime"

	"github.com/ebitengine/purego"

	"github.com/flexlink/flexlink/internal/errs"
)

// DefaultLibrary is the NCCL library Open loads.
const DefaultLibrary = "libnccl.so.2"

// sym indexes dl.fn.
type sym int

const (
	sGetVersion sym = iota
	sGetUniqueID
	sCommInitRank
	sCommDestroy
	sAllReduce
	sAllGather
	sReduceScatter
	sBroadcast
	sReduce
	sSend
	sRecv
	sGroupStart
	sGroupEnd
	sGetErrorString
	sGetLastError // optional: NCCL 2.13 and later
	numSyms
)

// symbolNames lists the exported name of each entry point.
func symbolNames() [numSyms]string {
	return [numSyms]string{
		sGetVersion:     "ncclGetVersion",
		sGetUniqueID:    "ncclGetUniqueId",
		sCommInitRank:   "ncclCommInitRank",
		sCommDestroy:    "ncclCommDestroy",
		sAllReduce:      "ncclAllReduce",
		sAllGather:      "ncclAllGather",
		sReduceScatter:  "ncclReduceScatter",
		sBroadcast:      "ncclBroadcast",
		sReduce:         "ncclReduce",
		sSend:           "ncclSend",
		sRecv:           "ncclRecv",
		sGroupStart:     "ncclGroupStart",
		sGroupEnd:       "ncclGroupEnd",
		sGetErrorString: "ncclGetErrorString",
		sGetLastError:   "ncclGetLastError",
	}
}

// optional reports whether a library may lack entry point s.
func optional(s sym) bool { return s == sGetLastError }

// cUniqueID is ncclUniqueId as C declares it, a struct, so that purego
// passes it by value the way the C ABI passes a 128-byte struct: copied onto
// the stack on amd64, as a pointer to a copy on arm64.
type cUniqueID struct{ Internal UniqueID }

// dl is NCCL loaded from a shared library. It implements api.
type dl struct {
	fn [numSyms]uintptr

	// Calls purego's reflective caller makes: ncclCommInitRank takes
	// ncclUniqueId by value, and the two string functions return const
	// char*, which purego copies into a Go string.
	commInitRankFn func(comm *uintptr, nranks int32, id cUniqueID, rank int32) int32
	errorStringFn  func(r int32) string
	lastErrorFn    func(comm uintptr) string
}

// load opens the library at path and binds it. When dlopen fails the error
// wraps errs.ErrNotSupported and keeps dlopen's message. The library is never
// closed: NCCL keeps threads that do not survive dlclose.
func load(path string) (*dl, error) {
	// dlerror is per thread: stay on dlopen's thread so its message is
	// kept (a migration between the two lost it: "no libcuda: : ...").
	runtime.LockOSThread()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("no libnccl: %s: %w", err.Error(), errs.ErrNotSupported)
	}
	d, err := bind(func(name string) (uintptr, error) { return purego.Dlsym(h, name) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// bind resolves every entry point through lookup (dlsym, or a test's table).
// A missing required entry point gives an error wrapping
// errs.ErrNotSupported.
func bind(lookup func(name string) (uintptr, error)) (*dl, error) {
	d := &dl{}
	for s, name := range symbolNames() {
		p, err := lookup(name)
		if err == nil && p != 0 {
			d.fn[s] = p
			continue
		}
		if !optional(sym(s)) {
			return nil, fmt.Errorf("no %s (NCCL older than 2.10?): %w", name, errs.ErrNotSupported)
		}
	}
	purego.RegisterFunc(&d.commInitRankFn, d.fn[sCommInitRank])
	purego.RegisterFunc(&d.errorStringFn, d.fn[sGetErrorString])
	if d.fn[sGetLastError] != 0 {
		purego.RegisterFunc(&d.lastErrorFn, d.fn[sGetLastError])
	}
	return d, nil
}

var _ api = (*dl)(nil)
