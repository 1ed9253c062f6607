package capi

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/rank"
)

// Comm is one ncclComm_t: a rank.Comm, with a DeviceComm when the process
// has a GPU. Its state moves from initialising to ready or failed; calls on
// it wait for nothing but check the state.
type Comm struct {
	lib    *Library
	handle uintptr
	nranks int
	rank   int
	dev    int // CUDA device ordinal, -1 without a GPU
	cfg    Config

	ctx    context.Context // ends on abort or destroy
	cancel context.CancelFunc
	ready  chan struct{} // closed when initialisation has finished

	made            // set before ready is closed, read-only after
	state           // guarded by mu
	views hostViews // the last host buffers of its calls (run.go)
	prog  progress  // its collectives counted, for naming withheld ones (withheld.go)
	// stream is the caller's stream of the last call on device buffers,
	// wrapped (run.go).
	stream atomic.Pointer[gpu.Stream]
}

// made is what a communicator's initialisation produced, and the device
// scratch of PreMulSum calls (run.go), freed when the communicator is.
type made struct {
	stage   stage // device scratch of PreMulSum and bounced calls (stage.go)
	rc      *rank.Comm
	dc      *rank.DeviceComm
	gpuDev  *gpu.Device
	srv     *served
	served  servedBy // which ranks' process serves the rendezvous (served_by.go)
	fam     *family  // the communicators that share this one's world (abort.go)
	initErr error
}

// state is what changes while the communicator is used (under mu).
type state struct {
	mu       sync.Mutex
	asyncErr error // first failure of work in flight (ncclCommGetAsyncError)
	last     string
	inflight int // groups still running in the background
	ops      map[int32]RedOp
	nextOp   int32
	aborted  bool
	revoked  bool // ncclCommRevoke (revoke.go), or ncclCommShrink with NCCL_SHRINK_ABORT
	// ended is set (under mu) with asyncErr, aborted or revoked, and read
	// without it: a call on a healthy communicator takes no lock to learn
	// that it is.
	ended atomic.Bool
}

func (l *Library) newComm(nranks, r, dev int, cfg Config) *Comm {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Comm{lib: l, nranks: nranks, rank: r, dev: dev, cfg: cfg, ctx: ctx, cancel: cancel,
		ready: make(chan struct{}), state: state{ops: map[int32]RedOp{}, nextOp: ncclNumOps}}
	l.handles.add(c)
	return c
}

// finish ends initialisation with err (nil: ready).
func (c *Comm) finish(rc *rank.Comm, dc *rank.DeviceComm, err error) {
	c.rc, c.dc, c.initErr = rc, dc, err
	if err == nil && c.fam == nil {
		c.fam = &family{world: rc, srv: c.srv, served: c.served, n: 1}
	}
	if err != nil {
		c.note(err)
	}
	if err == nil && rc != nil && c.prog.store != nil && c.nranks > 1 {
		go c.answerStalls()
		go c.watchStalls()
	}
	close(c.ready)
	if err == nil && rc != nil && c.lib.opt.Announce != nil { // rc is nil for a NOCOLOR split
		path := "host buffers"
		if dc != nil {
			path = "GPU " + fmt.Sprint(c.dev) + ", " + dc.Memory().String()
		}
		c.lib.opt.Announce(fmt.Sprintf("flexlink libnccl (NCCL %d API) serves rank %d of %d on %s, %s", Version, c.rank, c.nranks, rc.Host(), path))
	}
}

// note records err as the communicator's last and asynchronous error; a
// lost rendezvous names the ranks whose process served it.
func (c *Comm) note(err error) {
	if c.fam != nil {
		err = c.fam.served.explain(err)
	}
	c.mu.Lock()
	if c.asyncErr == nil {
		c.asyncErr = err
		c.ended.Store(true)
	}
	c.last = err.Error()
	c.mu.Unlock()
}

func (c *Comm) lastErr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// usable returns the communicator once it is ready: a communicator still
// initialising (non-blocking), failed or aborted refuses calls.
func (c *Comm) usable(fn string) error {
	select {
	case <-c.ready:
	default:
		return fail(InvalidUsage, "%s: communicator %#x is still initialising (non-blocking init): poll ncclCommGetAsyncError until it returns ncclSuccess", fn, c.handle)
	}
	if c.initErr != nil {
		return fail(ResultOf(c.initErr), "%s: communicator %#x failed to initialise: %w", fn, c.handle, c.initErr)
	}
	if !c.ended.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted {
		return fail(InvalidUsage, "%s: communicator %#x was aborted", fn, c.handle)
	}
	if c.revoked {
		return fail(InvalidUsage, "%s: communicator %#x (rank %d of %d) was revoked: destroy it or shrink it", fn, c.handle, c.rank, c.nranks)
	}
	if c.asyncErr != nil {
		return fail(ResultOf(c.asyncErr), "%s: communicator rank %d of %d has failed: %w", fn, c.rank, c.nranks, c.asyncErr)
	}
	return nil
}

// bootstrapTimeout bounds joining a communicator.
func (l *Library) bootstrapTimeout() time.Duration {
	d, err := l.env.Duration("FLEXLINK_BOOTSTRAP_TIMEOUT")
	if err != nil || d <= 0 {
		return 60 * time.Second
	}
	return d
}

// InitRank is ncclCommInitRank(Config) for the calling thread tid. It
// returns the new handle; with the result InProgress (non-blocking config)
// or inside a group, initialisation goes on after it returns.
func (l *Library) InitRank(tid, nranks int, id UniqueID, r int, cfg Config) (uintptr, error) {
	return l.InitRankEarly(tid, nranks, id, r, cfg, nil)
}

// InitRankEarly is InitRank that gives made the handle as soon as it
// exists, before the rank joins the others: NCCL stores the communicator
// in the caller's ncclComm_t first, so another thread (torch's watchdog)
// can ncclCommAbort an initialisation that waits for a rank that never
// comes; the blocked call then fails at once.
func (l *Library) InitRankEarly(tid, nranks int, id UniqueID, r int, cfg Config, made func(h uintptr)) (uintptr, error) {
	if nranks < 1 {
		return 0, fail(InvalidArgument, "ncclCommInitRank: nranks %d must be at least 1", nranks)
	}
	if r < 0 || r >= nranks {
		return 0, fail(InvalidArgument, "ncclCommInitRank: rank %d is out of range for %d ranks", r, nranks)
	}
	info, err := decodeID(id)
	if err != nil {
		return 0, err
	}
	dev := -1
	if l.opt.Memory != nil {
		dev = l.opt.Memory.CurrentDevice()
	}
	c := l.newComm(nranks, r, dev, cfg)
	if made != nil {
		made(c.handle)
	}
	run := func() { c.finish(c.join(info)) }
	if l.groups.in(tid) {
		l.groups.deferInit(tid, c, run)
		return c.handle, nil
	}
	if !cfg.IsBlocking() {
		go run()
		return c.handle, fail(InProgress, "initialising")
	}
	run()
	if c.initErr != nil {
		l.handles.remove(c.handle)
		return 0, fail(ResultOf(c.initErr), "ncclCommInitRank rank %d of %d: %w", r, nranks, c.initErr)
	}
	return c.handle, nil
}

// join dials the id's rendezvous (serving it first when this process made
// the id) and builds the communicator over it.
func (c *Comm) join(info idInfo) (*rank.Comm, *rank.DeviceComm, error) {
	l := c.lib
	srv, err := l.ids.serve(info, c.nranks, l.log)
	if err != nil {
		return nil, nil, err
	}
	c.srv = srv
	ctx, cancel := context.WithTimeout(c.ctx, l.bootstrapTimeout())
	defer cancel()
	host, _ := os.Hostname()
	lg := commLogger(l.opt.Logger, l.env, host, c.rank)
	cfg, err := l.rendezvousDial(info, c.rank, c.nranks, host, lg.Named("bootstrap")) // FLEXLINK_LIVENESS_TIMEOUT
	if err != nil {
		l.ids.unserve(srv)
		c.srv = nil
		return nil, nil, err
	}
	store, err := bootstrap.Dial(ctx, cfg)
	if err != nil {
		l.ids.unserve(srv)
		c.srv = nil
		return nil, nil, fmt.Errorf("rank %d of %d on %s: join the rendezvous at %s (served by the process that called ncclGetUniqueId, from its own ncclCommInitRank): %w", c.rank, c.nranks, host, info.Server(), err)
	}
	c.prog.store, c.prog.key = store, "w"
	if c.served, err = learnServedBy(ctx, store, info.Server(), host, srv != nil); err != nil {
		_ = store.Close()
		l.ids.unserve(srv)
		c.srv = nil
		return nil, nil, fmt.Errorf("rank %d of %d: %w", c.rank, c.nranks, err)
	}
	rc, err := rank.New(ctx, store, rank.Options{Env: l.env, Host: host, JobID: info.JobID(), Secret: info.Secret, Logger: lg})
	if err != nil {
		_ = store.Close()
		l.ids.unserve(srv)
		c.srv = nil
		return nil, nil, fmt.Errorf("rank %d of %d: %w", c.rank, c.nranks, err)
	}
	dc, err := c.attachGPU(ctx, rc)
	if err != nil {
		_ = rc.Close()
		l.ids.unserve(srv)
		c.srv = nil
		return nil, nil, err
	}
	return rc, dc, nil
}

// attachGPU makes the DeviceComm (collective) when the process has a GPU.
func (c *Comm) attachGPU(ctx context.Context, rc *rank.Comm) (*rank.DeviceComm, error) {
	if c.dev < 0 {
		return nil, nil
	}
	drv, err := c.lib.drv.open(c.lib.opt)
	if err != nil || drv == nil {
		// No usable driver: the communicator serves host buffers only.
		c.dev = -1
		return nil, nil
	}
	dv, err := drv.Device(c.dev)
	if err != nil {
		return nil, fail(UnhandledCudaError, "rank %d: GPU %d: %w", c.rank, c.dev, err)
	}
	dc, err := rc.Device(ctx, dv)
	if err != nil {
		return nil, fmt.Errorf("rank %d: GPU %d: %w", c.rank, c.dev, err)
	}
	c.gpuDev = dv
	return dc, nil
}

// InitAll is ncclCommInitAll: ndev ranks in this process, rank i on
// devices[i] (nil: 0..ndev-1), joined through an in-process store.
func (l *Library) InitAll(ndev int, devices []int) ([]uintptr, error) {
	if ndev < 1 {
		return nil, fail(InvalidArgument, "ncclCommInitAll: ndev %d must be at least 1", ndev)
	}
	if devices != nil && len(devices) != ndev {
		return nil, fail(InvalidArgument, "ncclCommInitAll: %d devices listed for %d ranks", len(devices), ndev)
	}
	info, err := newIDInfo(netipZero())
	if err != nil {
		return nil, fail(SystemError, "ncclCommInitAll: %w", err)
	}
	stores := bootstrap.NewInProc(ndev)
	comms := make([]*Comm, ndev)
	var wg sync.WaitGroup
	for i := range ndev {
		dev := -1
		if l.opt.Memory != nil {
			dev = i
			if devices != nil {
				dev = devices[i]
			}
		}
		c := l.newComm(ndev, i, dev, DefaultConfig())
		comms[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(c.ctx, l.bootstrapTimeout())
			defer cancel()
			host, _ := os.Hostname()
			c.prog.store, c.prog.key = stores[i], "w"
			rc, err := rank.New(ctx, stores[i], rank.Options{Env: l.env, JobID: info.JobID(), Secret: info.Secret, Logger: commLogger(l.opt.Logger, l.env, host, i)})
			if err != nil {
				c.finish(nil, nil, fmt.Errorf("rank %d of %d: %w", i, ndev, err))
				return
			}
			dc, err := c.attachGPU(ctx, rc)
			if err != nil {
				_ = rc.Close()
				rc = nil
			}
			c.finish(rc, dc, err)
		}()
	}
	wg.Wait()
	hs := make([]uintptr, ndev)
	var first error
	for i, c := range comms {
		hs[i] = c.handle
		if c.initErr != nil && first == nil {
			first = c.initErr
		}
	}
	if first != nil {
		for _, c := range comms {
			l.destroyQuiet(c)
		}
		return nil, fail(ResultOf(first), "ncclCommInitAll: %w", first)
	}
	return hs, nil
}

// Split is ncclCommSplit: collective over the parent's ranks. A rank that
// passes NCCL_SPLIT_NOCOLOR (any negative color) gets handle 0. A revoked
// parent splits too (revoke.go).
func (l *Library) Split(tid int, h uintptr, color, key int, cfg Config) (uintptr, error) {
	p, err := l.handles.comm(h, "ncclCommSplit")
	if err != nil {
		return 0, err
	}
	if err := p.usable("ncclCommSplit"); err != nil && !p.isRevoked() {
		return 0, err
	}
	if color < 0 {
		color = rank.NoColor
	}
	return l.child(p, "ncclCommSplit", "c"+fmt.Sprint(color), cfg, color >= 0, func() (*rank.Comm, error) { return p.split(color, key) })
}

// child makes the communicator that newComm returns from parent p (split
// or shrink), with its device plane when p has one; tag tells apart the
// children of one call on the members (withheld.go). In non-blocking mode
// (and when this rank gets a communicator at all: member) it returns at
// once with ncclInProgress; otherwise it waits. A nil communicator from
// newComm (a NOCOLOR rank) gives handle 0.
func (l *Library) child(p *Comm, fn, tag string, cfg Config, member bool, newComm func() (*rank.Comm, error)) (uintptr, error) {
	c := l.newComm(0, 0, p.dev, cfg)
	c.prog.store, c.prog.key = p.prog.store, p.prog.childKey(tag)
	run := func() {
		sub, err := newComm()
		if err != nil || sub == nil {
			c.finish(nil, nil, err)
			return
		}
		c.nranks, c.rank = sub.Size(), sub.Rank()
		c.fam = p.fam.join()
		var dc *rank.DeviceComm
		if p.dc != nil {
			dc, err = sub.Device(p.ctx, p.gpuDev)
			c.gpuDev = p.gpuDev
		}
		c.finish(sub, dc, err)
	}
	if !cfg.IsBlocking() && member {
		go run()
		return c.handle, fail(InProgress, "%s in progress", fn)
	}
	run()
	if c.initErr != nil || c.rc == nil {
		l.handles.remove(c.handle)
		if c.initErr != nil {
			p.note(c.initErr)
			return 0, fail(ResultOf(c.initErr), "%s rank %d of %d: %w", fn, p.rank, p.nranks, c.initErr)
		}
		return 0, nil
	}
	return c.handle, nil
}

// Destroy is ncclCommDestroy (and the end of ncclCommFinalize's work): it
// releases the communicator. The device plane's close is collective and
// bounded by a deadline, so a rank whose peers are gone does not hang.
func (l *Library) Destroy(h uintptr) error {
	c, err := l.handles.comm(h, "ncclCommDestroy")
	if err != nil {
		return err
	}
	<-c.ready
	// Closing the device plane waits for every member (no peer may still
	// write into this rank's regions when they are freed). Callers destroy
	// their communicators in their own order (PyTorch's shutdown walks a
	// map): each close goes on in the background after destroyWait, so
	// rank 0 closing A then B and rank 1 closing B then A both finish,
	// instead of each waiting out the close's limit on the other's order.
	done := make(chan struct{})
	l.closing.Add(1)
	go func() {
		defer l.closing.Done()
		defer close(done)
		l.destroyQuiet(c)
	}()
	select {
	case <-done:
	case <-time.After(destroyWait):
		l.log.Debug("ncclCommDestroy: the close goes on in the background, waiting for the other members", "rank", c.rank, "ranks", c.nranks)
	}
	return nil
}

// destroyWait is how long ncclCommDestroy waits for the device plane's
// collective close before returning and letting it finish in the
// background.
const destroyWait = 2 * time.Second

func (l *Library) destroyQuiet(c *Comm) {
	l.handles.remove(c.handle)
	c.mu.Lock()
	aborted := c.aborted
	c.mu.Unlock()
	if c.dc != nil && !aborted {
		ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
		if err := c.dc.Close(ctx); err != nil {
			l.log.Debug("close device communicator", "rank", c.rank, "error", err)
		}
		cancel()
	}
	c.release()
	if !aborted {
		c.stage.free()
	}
	c.cancel()
}

// AsyncError is ncclCommGetAsyncError: InProgress while the communicator
// initialises or runs a non-blocking group, the first failure of its work
// otherwise (Success when none). Safe from any thread at any time.
func (l *Library) AsyncError(h uintptr) (Result, error) {
	c, err := l.handles.comm(h, "ncclCommGetAsyncError")
	if err != nil {
		return 0, err
	}
	select {
	case <-c.ready:
	default:
		return InProgress, nil
	}
	if c.initErr != nil {
		return ResultOf(c.initErr), nil
	}
	c.mu.Lock()
	ae, busy, revoked := c.asyncErr, c.inflight > 0, c.revoked
	c.mu.Unlock()
	if revoked {
		return Success, nil // the revoke is complete (NCCL: ncclSuccess once quiesced)
	}
	if ae == nil && c.rc != nil {
		// Another member ended the communicator (aborted, revoked or failed
		// it, or was lost): report it before the next call fails on it.
		if err := c.rc.Err(); err != nil {
			ae = fmt.Errorf("communicator rank %d of %d: %w", c.rank, c.nranks, err)
		}
	}
	if ae == nil && c.dc != nil {
		ae = c.dc.AsyncError()
	}
	if found := ae != nil && !c.ended.Load(); found {
		// Calls on device buffers end on the device: one that timed out
		// there (or whose communicator another member's timeout ended)
		// names the members behind this rank's last collective.
		// A lost member or a mismatch first heard of here (a host-only
		// communicator between calls, too) goes to flexrun's verdict as a
		// failed call's would (report.go).
		ae = c.nameWithheld(c.prog.latest(), ae)
		// First heard of here: it is the process's last error too
		// (ncclGetLastError(NULL)), as NCCL's WARN of it would make it.
		c.note(ae)
		l.last.set(c.lastErr())
	}
	if ae != nil {
		return ResultOf(ae), nil
	}
	if busy {
		return InProgress, nil
	}
	return Success, nil
}

// Info answers ncclCommCount, ncclCommUserRank and ncclCommCuDevice
// (dev is -1 on a communicator without a GPU).
func (l *Library) Info(h uintptr, fn string) (nranks, r, dev int, err error) {
	c, err := l.handles.comm(h, fn)
	if err != nil {
		return 0, 0, 0, err
	}
	select {
	case <-c.ready:
	default:
		return 0, 0, 0, fail(InvalidUsage, "%s: communicator %#x is still initialising", fn, h)
	}
	if c.initErr != nil {
		return 0, 0, 0, fail(ResultOf(c.initErr), "%s: communicator %#x failed to initialise: %w", fn, h, c.initErr)
	}
	return c.nranks, c.rank, c.dev, nil
}
