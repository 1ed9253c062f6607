package capi

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/hashicorp/go-hclog"

	"flexlink/bootstrap"
	"flexlink/gpu"
	"flexlink/internal/settings"
)

// Region is the device allocation a pointer falls in.
type Region struct {
	Device int     // CUDA device ordinal
	Base   uintptr // start of the allocation (cuMemGetAddressRange)
	Size   int     // its length in bytes
}

// Memory is what the library needs to know about the CUDA state of the
// process beyond package gpu: cmd/libnccl implements it with the driver
// API, tests with a table. Methods are called from the C caller's thread.
type Memory interface {
	// Locate reports whether p is device memory and which allocation holds
	// it; ok is false for host memory.
	Locate(p uintptr) (r Region, ok bool)
	// CurrentDevice is the calling thread's current CUDA device, as
	// cudaGetDevice reports it (0 when no context is current).
	CurrentDevice() int
	// Capturing reports whether stream is being captured into a CUDA graph.
	Capturing(stream uintptr) bool
	// Synchronize waits for the work queued on stream (for calls on host
	// buffers, which run at once).
	Synchronize(stream uintptr) error
}

// Options configure a Library. Zero values mean "from the environment".
type Options struct {
	Env settings.Env // nil: the process environment
	// Logger, when set, gets every line; nil: internal/flog loggers made
	// from FLEXLINK_DEBUG* or, where unset, NCCL_DEBUG* (ncclDebugEnv).
	Logger hclog.Logger
	// Memory tells device from host pointers; nil: no CUDA, every buffer
	// is host memory.
	Memory Memory
	// Driver opens the CUDA driver for device communicators; nil: gpu.Open.
	Driver func() (*gpu.Driver, error)
	// Announce, when set, receives the one line that says flexlink serves
	// the process (NCCL_DEBUG=INFO), once per communicator.
	Announce func(line string)
}

// Library is the state of the C library: communicator handles, groups per
// thread, the rendezvous this process serves, the last error. One per
// process (cmd/libnccl holds it); safe for concurrent use.
type Library struct {
	opt Options
	env settings.Env
	log hclog.Logger

	mu     sync.Mutex // guards the rest, the embedded groups included
	next   uintptr
	comms  map[uintptr]*Comm
	groups map[int]*group               // by OS thread id
	served map[[nonceBytes]byte]*served // ids this process made
	last   string                       // ncclGetLastError(NULL)
	driverState
	memRegistry
}

// driverState is the CUDA driver, opened once on first need.
type driverState struct {
	drv     *gpu.Driver
	drvErr  error
	drvDone bool
}

// memRegistry is the device memory the library knows by address.
type memRegistry struct {
	allocs  map[uintptr]*gpu.Buffer // ncclMemAlloc'd buffers by address
	wrapped map[uintptr]*gpu.Buffer // foreign allocations by base address
	regs    map[uintptr]bool        // ncclCommRegister handles
}

// served is the rendezvous of an id this process made: its server starts
// at the first ncclCommInitRank with the id (the number of ranks is known
// then) and stops when the last communicator made from it here is gone.
type served struct {
	info idInfo
	srv  *bootstrap.Server
	size int
	refs int
}

// New returns a Library.
func New(opt Options) *Library {
	l := &Library{
		opt:    opt,
		env:    opt.Env,
		log:    opt.Logger,
		next:   1,
		comms:  map[uintptr]*Comm{},
		groups: map[int]*group{},
		served: map[[nonceBytes]byte]*served{},
		memRegistry: memRegistry{
			allocs:  map[uintptr]*gpu.Buffer{},
			wrapped: map[uintptr]*gpu.Buffer{},
			regs:    map[uintptr]bool{},
		},
	}
	if l.env == nil {
		l.env = settings.OS()
	}
	l.env = ncclDebugEnv(l.env)
	if l.log == nil {
		l.log = processLogger(l.env)
	}
	return l
}

// Report records err as the last error (ncclGetLastError) and returns its
// result code. A nil err gives Success and keeps the last error.
func (l *Library) Report(err error) Result {
	if err == nil {
		return Success
	}
	r := ResultOf(err)
	if r == InProgress {
		return r
	}
	l.mu.Lock()
	l.last = err.Error()
	l.mu.Unlock()
	l.log.Warn("nccl call failed", "result", r.String(), "error", err)
	return r
}

// LastError is ncclGetLastError(h): the text of the communicator's last
// failure when h names one that failed, else the process's last failure
// ("" when none).
func (l *Library) LastError(h uintptr) string {
	l.mu.Lock()
	c := l.comms[h]
	last := l.last
	l.mu.Unlock()
	if c != nil {
		if e := c.lastErr(); e != "" {
			return e
		}
	}
	return last
}

// GetUniqueID is ncclGetUniqueId: a fresh id naming a rendezvous this
// process will serve (see UniqueID).
func (l *Library) GetUniqueID() (UniqueID, error) {
	port, err := reservePort()
	if err != nil {
		return UniqueID{}, fail(SystemError, "ncclGetUniqueId: %w", err)
	}
	ip := advertisedAddr(l.env.String("FLEXLINK_SOCKET_IFNAME"))
	info, err := newIDInfo(netip.AddrPortFrom(ip, uint16(port)))
	if err != nil {
		return UniqueID{}, fail(SystemError, "ncclGetUniqueId: %w", err)
	}
	l.mu.Lock()
	l.served[info.Nonce] = &served{info: info}
	l.mu.Unlock()
	return info.encode(), nil
}

// serve starts (once) the rendezvous of an id this process made and takes a
// reference on it; it returns nil, nil for ids made elsewhere.
func (l *Library) serve(info idInfo, size int) (*served, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.served[info.Nonce]
	if s == nil {
		return nil, nil
	}
	if s.srv == nil {
		listen := fmt.Sprintf(":%d", info.Addr.Port())
		srv, err := bootstrap.NewServer(bootstrap.ServerConfig{Addr: listen, Size: size, Secret: info.Secret, JobID: info.JobID(), Logger: l.log.Named("rendezvous")})
		if err != nil {
			return nil, fail(SystemError, "start the rendezvous of this ncclUniqueId on port %d: %w", info.Addr.Port(), err)
		}
		s.srv, s.size = srv, size
	} else if s.size != size {
		return nil, fail(InvalidArgument, "ncclCommInitRank: nranks %d, but this process already started the id's rendezvous for %d ranks", size, s.size)
	}
	s.refs++
	return s, nil
}

// unserve drops a reference on s and stops its server with the last one.
func (l *Library) unserve(s *served) {
	if s == nil {
		return
	}
	l.mu.Lock()
	s.refs--
	stop := s.refs == 0
	if stop {
		delete(l.served, s.info.Nonce)
	}
	l.mu.Unlock()
	if stop && s.srv != nil {
		_ = s.srv.Close()
	}
}

// driver opens the CUDA driver once; nil when the library has no Memory
// (no CUDA in the process) or the driver cannot be opened.
func (l *Library) driver() (*gpu.Driver, error) {
	if l.opt.Memory == nil {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.drvDone {
		open := l.opt.Driver
		if open == nil {
			open = gpu.Open
		}
		l.drv, l.drvErr = open()
		l.drvDone = true
	}
	return l.drv, l.drvErr
}

// add registers c under a new handle.
func (l *Library) add(c *Comm) uintptr {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.next
	l.next++
	c.handle = h
	l.comms[h] = c
	return h
}

// remove forgets handle h.
func (l *Library) remove(h uintptr) {
	l.mu.Lock()
	delete(l.comms, h)
	l.mu.Unlock()
}

// comm looks up a handle. NULL and handles never issued or already
// destroyed fail with ncclInvalidArgument.
func (l *Library) comm(h uintptr, fn string) (*Comm, error) {
	if h == 0 {
		return nil, fail(InvalidArgument, "%s: comm is NULL", fn)
	}
	l.mu.Lock()
	c := l.comms[h]
	l.mu.Unlock()
	if c == nil {
		return nil, fail(InvalidArgument, "%s: comm %#x is not a live communicator (never created, or already destroyed)", fn, h)
	}
	return c, nil
}
