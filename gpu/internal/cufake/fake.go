// Package cufake is a fake CUDA driver (a cu.API) for tests on machines
// without a GPU. Device memory is host byte slices behind made-up device
// addresses; streams run every operation at once, in call order; kernels run
// as Go functions registered by name; modules accept PTX text and know the
// entry points it declares, so a launch of a kernel the PTX lacks fails as
// it would on a GPU.
//
// It checks what the real driver checks and tests tend to get wrong: the
// calling OS thread must have a current context for context-bound calls,
// streams, events and memory must belong to that context's device (or to a
// peer whose access was enabled), and sizes must fit allocations.
package cufake

import (
	"fmt"
	"regexp"
	"sync"
	"syscall"
	"unsafe"

	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// Config describes the fake machine.
type Config struct {
	Devices      int    // number of GPUs (default 2)
	MemPerDevice uint64 // bytes of memory each (default 1 GiB)
	Name         string // device name (default "Fake GPU")
	ComputeMajor int    // compute capability (default 9.0)
	ComputeMinor int
	SMs          int  // multiprocessors (default 4)
	NoPeer       bool // when set, no device can access another's memory
	MPS          bool // when set, the devices report CU_DEVICE_ATTRIBUTE_MPS_ENABLED (an MPS server shares their contexts)
	// ReuseFreed, when set, makes cuMemAlloc place an allocation at the
	// address of a freed one of the same rounded size when there is one,
	// as CUDA's allocator often does (PyTorch's caching allocator after
	// empty_cache): tests of stale mappings use it.
	ReuseFreed bool
	// IPCRefused, when set, is asked by cuIpcGetMemHandle with the
	// allocation's address; true fails the export as the driver fails it
	// for memory that cannot be exported (VMM memory, stream-ordered
	// pools). It runs under the driver's lock: it must not call the driver.
	IPCRefused func(p uintptr) bool

	// LaunchFault, when set, is asked before each kernel launch (device
	// and kernel name); a non-nil answer fails that cuLaunchKernel with
	// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES and runs nothing. Tests use it to
	// fail one launch of a sequence. It runs under the driver's lock: it
	// must not call the driver.
	LaunchFault func(dev int, name string) error

	// CopyStuck, when set, is asked by each cuMemcpyHtoDAsync with its
	// destination and size; true accepts the copy and never performs it,
	// as a copy queued behind work that never completes. Tests of abort
	// paths that must not depend on a copy use it. It runs under the
	// driver's lock: it must not call the driver.
	CopyStuck func(dst uintptr, n uint64) bool
}

// KernelFunc runs a kernel on the host. params are as passed to
// cuLaunchKernel: params[i] points at the i-th argument's value.
type KernelFunc func(f *Fake, grid, block [3]uint32, params []unsafe.Pointer) error

// Fake is the fake driver. It is safe for concurrent use: mu guards
// everything but poke, which has its own lock.
type Fake struct {
	cfg Config

	mu    sync.Mutex
	next  uint64 // handle counter
	mem   memState
	ctx   ctxState
	code  codeState
	sched schedState
	capt  captState // stream capture and graphs (capture.go)
	poke  pokeState
}

// memState is device memory, pinned host memory and their IPC exports.
type memState struct {
	cursor []uint64                   // per device: where its next allocation or mapping goes (offset from its base)
	used   []uint64                   // bytes allocated per device
	allocs map[cu.DevPtr]*alloc       // by base address
	host   map[uintptr]*hostRange     // pinned or registered host ranges, by start
	ipc    map[cu.IPCHandle]cu.DevPtr // exported allocations
	opened map[cu.DevPtr]bool         // mappings made by IpcOpenMemHandle
	freed  map[freedKey][]cu.DevPtr   // freed allocations' addresses (Config.ReuseFreed)
}

// ctxState is which context each OS thread has current, the primary
// contexts' references, and peer access.
type ctxState struct {
	current map[int]cu.Context // OS thread id -> current context
	retains []int              // primary context references per device
	peers   map[[2]int]bool    // [from, to] access enabled
}

// codeState is the loaded modules, their functions, the kernels' host
// implementations and what tests read back about launches.
type codeState struct {
	modules map[cu.Module]*module
	funcs   map[cu.Function]string  // kernel name
	kernels map[string]KernelFunc   // host implementations
	launchN map[string]int          // launches per kernel name, for tests
	loaded  map[cu.Function]bool    // functions whose code is on the device (FuncLoad or a first launch)
	lazy    int                     // launches that loaded their function (lazy loading's first launch)
	lastDim map[string][2][3]uint32 // last grid and block per kernel
	entryRE *regexp.Regexp          // finds .entry names in PTX
}

// schedState is streams, events and the fake clock they are timed by.
type schedState struct {
	streams map[cu.Stream]int         // device
	events  map[cu.Event]*event       // recorded events
	ipcEv   map[cu.IPCHandle]cu.Event // exported events
	clock   float32                   // fake milliseconds; each stream operation takes 1
}

// pokeState wakes waiters on memory written (Poke).
type pokeState struct {
	chMu    sync.Mutex    // guards changed
	changed chan struct{} // closed by the next Poke (memory written)
}

// freedKey is a device and a rounded allocation size.
type freedKey struct {
	dev  int
	size uint64
}

type alloc struct {
	dev  int
	data []byte
	id   uint64 // serial of the allocation (its IPC handle names it)
}

type hostRange struct {
	data       []byte // Go memory for MemHostAlloc, nil for registered ranges
	n          uint64
	registered bool
}

type event struct {
	dev      int
	flags    uint32
	recorded bool
	at       float32
	capture  uint64 // id of the capture its last record was made in (0: none)
}

type module struct {
	dev     int
	entries map[string]bool
}

// New makes a fake driver.
func New(cfg Config) *Fake {
	if cfg.Devices == 0 {
		cfg.Devices = 2
	}
	if cfg.MemPerDevice == 0 {
		cfg.MemPerDevice = 1 << 30
	}
	if cfg.Name == "" {
		cfg.Name = "Fake GPU"
	}
	if cfg.ComputeMajor == 0 {
		cfg.ComputeMajor = 9
	}
	if cfg.SMs == 0 {
		cfg.SMs = 4
	}
	return &Fake{
		cfg: cfg, next: 1,
		mem: memState{
			used: make([]uint64, cfg.Devices), cursor: make([]uint64, cfg.Devices),
			allocs: map[cu.DevPtr]*alloc{}, host: map[uintptr]*hostRange{},
			ipc: map[cu.IPCHandle]cu.DevPtr{}, opened: map[cu.DevPtr]bool{},
		},
		ctx: ctxState{current: map[int]cu.Context{}, retains: make([]int, cfg.Devices), peers: map[[2]int]bool{}},
		code: codeState{
			modules: map[cu.Module]*module{}, funcs: map[cu.Function]string{}, kernels: map[string]KernelFunc{},
			launchN: map[string]int{}, lastDim: map[string][2][3]uint32{}, loaded: map[cu.Function]bool{},
			entryRE: regexp.MustCompile(`\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*)`),
		},
		sched: schedState{streams: map[cu.Stream]int{}, events: map[cu.Event]*event{}, ipcEv: map[cu.IPCHandle]cu.Event{}},
		capt:  newCaptState(),
	}
}

// RegisterKernel gives the host implementation of the kernel called name.
func (f *Fake) RegisterKernel(name string, fn KernelFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.code.kernels[name] = fn
}

// Launches reports how many times kernel name was launched, and the grid and
// block of the last launch.
func (f *Fake) Launches(name string) (n int, grid, block [3]uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.code.lastDim[name]
	return f.code.launchN[name], d[0], d[1]
}

// LazyLoads counts launches that loaded their function's code (the first
// launch of a function no FuncLoad loaded), as the driver's lazy loading
// does: on a real GPU such a launch may wait for the context to go idle.
func (f *Fake) LazyLoads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.code.lazy
}

// Live counts what is allocated and not freed: device allocations (IPC
// mappings included), host ranges, streams, events, modules and primary
// context references.
func (f *Fake) Live() (allocs, host, streams, events, modules, contexts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.ctx.retains {
		contexts += r
	}
	return len(f.mem.allocs), len(f.mem.host), len(f.sched.streams), len(f.sched.events), len(f.code.modules), contexts
}

// Changed returns a channel that is closed the next time device memory is
// written through the driver (copies, memsets) or a kernel implementation
// calls Poke: a kernel that waits for a word another kernel or the host
// writes takes it, checks the word, and waits on it, as a GPU kernel would
// spin.
func (f *Fake) Changed() <-chan struct{} {
	f.poke.chMu.Lock()
	defer f.poke.chMu.Unlock()
	if f.poke.changed == nil {
		f.poke.changed = make(chan struct{})
	}
	return f.poke.changed
}

// Poke wakes everything waiting on Changed: a kernel implementation has
// stored to memory that another may be waiting on.
func (f *Fake) Poke() {
	f.poke.chMu.Lock()
	defer f.poke.chMu.Unlock()
	if f.poke.changed != nil {
		close(f.poke.changed)
		f.poke.changed = nil
	}
}

// Mem returns the device memory [p, p+n) as a byte slice that aliases it.
// Kernel implementations use it to reach their operands.
func (f *Fake) Mem(p cu.DevPtr, n uint64) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, _, err := f.resolve("kernel", p, n)
	return b, err
}

func (f *Fake) handle() uint64 { f.next++; return f.next }

// errText gives a result's name and description as the driver spells them.
func errText(code cu.Result) (name, desc string) {
	switch code {
	case cu.ErrorInvalidValue:
		return "CUDA_ERROR_INVALID_VALUE", "invalid argument"
	case cu.ErrorOutOfMemory:
		return "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"
	case cu.ErrorInvalidDevice:
		return "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"
	case cu.ErrorInvalidImage:
		return "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"
	case cu.ErrorInvalidContext:
		return "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"
	case cu.ErrorInvalidHandle:
		return "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"
	case cu.ErrorNotFound:
		return "CUDA_ERROR_NOT_FOUND", "named symbol not found"
	case cu.ErrorLaunchOutOfResources:
		return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"
	case cu.ErrorPeerAlreadyEnabled:
		return "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"
	case cu.ErrorHostAlreadyRegistered:
		return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"
	case cu.ErrorNotSupported:
		return "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"
	case cu.ErrorLaunchTimeout:
		return "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"
	case cu.ErrorIllegalState:
		return "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"
	case cu.ErrorCaptureUnsupported:
		return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"
	case cu.ErrorCaptureInvalidated:
		return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"
	case cu.ErrorCaptureIsolation:
		return "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "operation would make the legacy stream depend on a capturing blocking stream"
	case cu.ErrorCapturedEvent:
		return "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"
	case cu.ErrorCaptureUnmatched:
		return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not initiated in this stream"
	}
	return fmt.Sprintf("CUDA_ERROR_%d", int32(code)), "unknown error"
}

// fail builds the error the real driver would return; detail is appended to
// the description to make fake failures easy to diagnose.
func fail(fn string, code cu.Result, detail string, args ...any) error {
	name, desc := errText(code)
	return &cu.Error{Func: fn, Code: code, Name: name, Desc: desc + " (fake: " + fmt.Sprintf(detail, args...) + ")"}
}

// ctxDev returns the device of the calling thread's current context.
func (f *Fake) ctxDev(fn string) (int, error) {
	c, ok := f.ctx.current[syscall.Gettid()]
	if !ok || c == 0 {
		return 0, fail(fn, cu.ErrorInvalidContext, "no current context on this OS thread")
	}
	return int(c) - 1, nil
}

// resolve finds [p, p+n) inside one allocation.
func (f *Fake) resolve(fn string, p cu.DevPtr, n uint64) ([]byte, int, error) {
	for base, a := range f.mem.allocs {
		if p >= base && uint64(p-base)+n <= uint64(len(a.data)) {
			off := uint64(p - base)
			return a.data[off : off+n : off+n], a.dev, nil
		}
	}
	// Mapped host memory (MemHostGetDevicePointer): device address = host address.
	for start, r := range f.mem.host {
		if r.data != nil && uintptr(p) >= start && uint64(uintptr(p)-start)+n <= r.n {
			off := uint64(uintptr(p) - start)
			return r.data[off : off+n : off+n], -1, nil
		}
	}
	return nil, 0, fail(fn, cu.ErrorInvalidValue, "%#x+%d is not inside one allocation", uint64(p), n)
}

// reach checks that device dev may access memory of device owner.
func (f *Fake) reach(fn string, dev, owner int) error {
	if dev != owner && !f.ctx.peers[[2]int{dev, owner}] {
		return fail(fn, cu.ErrorInvalidValue, "device %d has no peer access to device %d", dev, owner)
	}
	return nil
}

// streamDev checks that s belongs to the current context and returns its device.
func (f *Fake) streamDev(fn string, s cu.Stream) (int, error) {
	dev, err := f.ctxDev(fn)
	if err != nil {
		return 0, err
	}
	if s == 0 {
		return dev, nil
	}
	sd, ok := f.sched.streams[s]
	if !ok {
		return 0, fail(fn, cu.ErrorInvalidHandle, "unknown stream %#x", uint64(s))
	}
	if sd != dev {
		return 0, fail(fn, cu.ErrorInvalidHandle, "stream of device %d used with device %d current", sd, dev)
	}
	f.sched.clock++
	return dev, nil
}
