package gpu

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/flexlink/flexlink/gpu/internal/cu"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/pause"
)

// Stream is an ordered queue of device work (a non-blocking CUstream: it
// does not synchronise with the legacy default stream). Its methods enqueue
// and return; see the package comment for what that means for the memory
// they name.
type Stream struct {
	dev *Device
	h   cu.Stream

	mu     sync.Mutex
	closed bool

	args atomic.Pointer[launchArgs] // Launch's spare parameter block
}

// newStream is Device.NewStream.
func newStream(dv *Device) (*Stream, error) {
	var h cu.Stream
	err := dv.do(func(api cu.API) (e error) { h, e = api.StreamCreate(cu.StreamNonBlocking); return })
	if err != nil {
		return nil, fmt.Errorf("%s: new stream: %w", dv, err)
	}
	return &Stream{dev: dv, h: h}, nil
}

// Device is the stream's GPU.
func (s *Stream) Device() *Device { return s.dev }

// Close destroys the stream. Work already enqueued still completes. A second
// Close returns an error wrapping errs.ErrClosed.
func (s *Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%s: close stream: %w", s.dev, errs.ErrClosed)
	}
	if err := s.dev.do(func(api cu.API) error { return api.StreamDestroy(s.h) }); err != nil {
		return fmt.Errorf("%s: close stream: %w", s.dev, err)
	}
	s.closed = true
	return nil
}

// enqueue runs f, which enqueues work on s, in the device's context,
// naming the stream's operation in errors. The thread keeps its capture
// mode (capture.go): a capture records the work whatever the mode.
func (s *Stream) enqueue(what string, f func(api cu.API) error) error {
	return s.enqueueNamed(func() string { return what }, f)
}

// enqueueNamed is enqueue with the operation's name made only for an
// error: a launch's or a peer copy's name is built from its arguments, a
// string per call otherwise (issue 29).
func (s *Stream) enqueueNamed(what func() string, f func(api cu.API) error) error {
	if err := s.dev.doAsync(f); err != nil {
		return fmt.Errorf("%s: %s: %w", s.dev, what(), err)
	}
	return nil
}

// query runs f, a synchronisation or query of s, like enqueue but with
// the thread in relaxed capture mode (Device.do): it never invalidates a
// capture of another stream.
func (s *Stream) query(what string, f func(api cu.API) error) error {
	if err := s.dev.do(f); err != nil {
		return fmt.Errorf("%s: %s: %w", s.dev, what, err)
	}
	return nil
}

// Synchronize blocks (the OS thread, not the Go scheduler) until all work
// enqueued so far has completed; it returns the first asynchronous error.
func (s *Stream) Synchronize() error {
	return s.query("synchronize", func(api cu.API) error { return api.StreamSynchronize(s.h) })
}

// SynchronizeCtx waits, like Synchronize, for all work enqueued so far,
// but never past ctx (see pollDone). Past ctx it returns an error wrapping
// ctx's error and errs.ErrTimeout.
func (s *Stream) SynchronizeCtx(ctx context.Context) error {
	if err := pollDone(ctx, s.Done); err != nil {
		return fmt.Errorf("%s: synchronize stream: %w", s.dev, err)
	}
	return nil
}

// SynchronizeCtx waits, like Synchronize, for the work e captured, but
// never past ctx (see pollDone).
func (e *Event) SynchronizeCtx(ctx context.Context) error {
	if err := pollDone(ctx, e.Done); err != nil {
		return fmt.Errorf("%s: synchronize event: %w", e.dev, err)
	}
	return nil
}

// pollDone polls done until it reports true or fails, never past ctx: a
// blocking cuStreamSynchronize could not be interrupted if the work waits
// on another process that never delivers. It yields between polls for the
// first 200 µs, then sleeps a sixteenth of the time waited so far (10 µs
// to 1 ms), so it oversleeps the work by about 6 % at most. The sleeps are
// internal/pause's: a Go timer under a millisecond sleeps a whole
// millisecond when the process is otherwise idle, which cost a 256 MiB call
// on one GPU 1.1 ms of its 1.4 (docs/PERF.md).
func pollDone(ctx context.Context, done func() (bool, error)) error {
	start := time.Now()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("still busy: %w (%w)", ctx.Err(), errs.ErrTimeout)
		}
		waited := time.Since(start)
		if waited < 200*time.Microsecond {
			runtime.Gosched()
			continue
		}
		pause.Sleep(min(max(waited/16, 10*time.Microsecond), time.Millisecond))
	}
}

// Done reports whether all work enqueued so far has completed, without
// blocking.
func (s *Stream) Done() (bool, error) {
	var done bool
	err := s.query("query stream", func(api cu.API) (e error) { done, e = api.StreamQuery(s.h); return })
	return done, err
}

// CopyHtoD copies src into dst (same length) from host memory. Pageable Go
// memory is staged by the driver before CopyHtoD returns; pinned memory
// (HostMem.Bytes) is read asynchronously and must not change until the
// stream has passed the copy.
func (s *Stream) CopyHtoD(dst *Buffer, src []byte) error {
	if err := s.local("copy host to device", dst, len(src)); err != nil || len(src) == 0 {
		return err
	}
	err := s.enqueue("copy host to device", func(api cu.API) error {
		return api.MemcpyHtoDAsync(dst.ptr, unsafe.Pointer(&src[0]), uint64(len(src)), s.h)
	})
	runtime.KeepAlive(src)
	return err
}

// CopyDtoH copies src into the host memory dst (same length). Into pageable
// Go memory the copy has completed when CopyDtoH returns; into pinned memory
// (HostMem.Bytes) it completes with the stream.
func (s *Stream) CopyDtoH(dst []byte, src *Buffer) error {
	if err := s.local("copy device to host", src, len(dst)); err != nil || len(dst) == 0 {
		return err
	}
	err := s.enqueue("copy device to host", func(api cu.API) error {
		return api.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), src.ptr, uint64(len(dst)), s.h)
	})
	runtime.KeepAlive(dst)
	return err
}

// CopyDtoD copies src into dst (same length) on the copy engines. Both may
// be on this stream's device, or one on a peer: then the copy goes over
// NVLink or PCIe peer-to-peer (cuMemcpyPeerAsync; enabling peer access first
// makes it direct, otherwise the driver stages it).
func (s *Stream) CopyDtoD(dst, src *Buffer) error {
	if dst.n != src.n {
		return fmt.Errorf("%s: copy device to device: dst has %d bytes, src %d: %w", s.dev, dst.n, src.n, errs.ErrMismatch)
	}
	if dst.dev != s.dev && src.dev != s.dev {
		return fmt.Errorf("%s: copy %s to %s: neither is this stream's device", s.dev, src.dev, dst.dev)
	}
	if dst.n == 0 {
		return nil
	}
	if dst.dev == src.dev {
		return s.enqueue("copy device to device", func(api cu.API) error {
			return api.MemcpyAsync(dst.ptr, src.ptr, uint64(dst.n), s.h)
		})
	}
	return s.enqueueNamed(func() string { return fmt.Sprintf("copy gpu %d to gpu %d", src.dev.ord, dst.dev.ord) }, func(api cu.API) error {
		return api.MemcpyPeerAsync(dst.ptr, dst.dev.ctx, src.ptr, src.dev.ctx, uint64(dst.n), s.h)
	})
}

// Memset sets every byte of dst (on this stream's device) to v.
func (s *Stream) Memset(dst *Buffer, v byte) error {
	if err := s.local("memset", dst, dst.n); err != nil || dst.n == 0 {
		return err
	}
	return s.enqueue("memset", func(api cu.API) error { return api.MemsetD8Async(dst.ptr, v, uint64(dst.n), s.h) })
}

// local checks that b is on the stream's device and has n bytes.
func (s *Stream) local(what string, b *Buffer, n int) error {
	if b.dev != s.dev {
		return fmt.Errorf("%s: %s: buffer is on %s", s.dev, what, b.dev)
	}
	if b.n != n {
		return fmt.Errorf("%s: %s: buffer has %d bytes, host side %d: %w", s.dev, what, b.n, n, errs.ErrMismatch)
	}
	return nil
}

// Event marks a point in a stream's work: record it on a stream, then wait
// for it on the host (Synchronize, Done), on another stream (Stream.Wait),
// or in another process (IPCHandle).
type Event struct {
	dev    *Device
	h      cu.Event
	timing bool

	mu     sync.Mutex
	closed bool
}

// newTimingEvent is Device.NewEvent.
func newTimingEvent(dv *Device, timing bool) (*Event, error) {
	var flags uint32 = cu.EventDisableTiming
	if timing {
		flags = 0
	}
	return newEvent(dv, flags, timing)
}

func newEvent(dv *Device, flags uint32, timing bool) (*Event, error) {
	var h cu.Event
	err := dv.do(func(api cu.API) (e error) { h, e = api.EventCreate(flags); return })
	if err != nil {
		return nil, fmt.Errorf("%s: new event: %w", dv, err)
	}
	return &Event{dev: dv, h: h, timing: timing}, nil
}

// Record captures the work enqueued on s so far; e must belong to s's device.
func (s *Stream) Record(e *Event) error {
	if e.dev != s.dev {
		return fmt.Errorf("%s: record an event of %s", s.dev, e.dev)
	}
	return s.enqueue("record event", func(api cu.API) error { return api.EventRecord(e.h, s.h) })
}

// Wait makes work enqueued on s after this call wait until e has completed
// (e may belong to another device). The host does not block.
func (s *Stream) Wait(e *Event) error {
	return s.enqueue("wait for event", func(api cu.API) error { return api.StreamWaitEvent(s.h, e.h) })
}

// Synchronize blocks until the work e captured has completed.
func (e *Event) Synchronize() error {
	if err := e.dev.do(func(api cu.API) error { return api.EventSynchronize(e.h) }); err != nil {
		return fmt.Errorf("%s: synchronize event: %w", e.dev, err)
	}
	return nil
}

// Done reports, without blocking, whether the work e captured has completed.
func (e *Event) Done() (bool, error) {
	var done bool
	err := e.dev.do(func(api cu.API) (err error) { done, err = api.EventQuery(e.h); return })
	if err != nil {
		return false, fmt.Errorf("%s: query event: %w", e.dev, err)
	}
	return done, nil
}

// Since returns the GPU time between start's completion and e's (both
// timing events, both recorded and completed). Resolution is about 0.5 µs.
func (e *Event) Since(start *Event) (time.Duration, error) {
	if !e.timing || !start.timing {
		return 0, fmt.Errorf("%s: elapsed time: both events must be made with NewEvent(true)", e.dev)
	}
	var ms float32
	err := e.dev.do(func(api cu.API) (err error) { ms, err = api.EventElapsedTime(start.h, e.h); return })
	if err != nil {
		return 0, fmt.Errorf("%s: elapsed time: %w", e.dev, err)
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// Close destroys the event. A second Close returns an error wrapping
// errs.ErrClosed.
func (e *Event) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("%s: close event: %w", e.dev, errs.ErrClosed)
	}
	if err := e.dev.do(func(api cu.API) error { return api.EventDestroy(e.h) }); err != nil {
		return fmt.Errorf("%s: close event: %w", e.dev, err)
	}
	e.closed = true
	return nil
}

// Handle is the raw CUstream, for C libraries that take one (NCCL). It is
// valid until Close.
func (s *Stream) Handle() uintptr { return uintptr(s.h) }

// launchArgs holds a launch's parameters and the pointers to them, which
// cuLaunchKernel takes (every kernel of package gpu takes at most 16).
type launchArgs struct {
	vals   [launchArgsMax]uint64
	params [launchArgsMax]unsafe.Pointer
}

const launchArgsMax = 16

// Launch enqueues kernel f on s with grid × block threads and no dynamic
// shared memory. Every kernel parameter is 8 bytes: pass device pointers
// (Buffer.Ptr), 64-bit integers, or math.Float64bits of a double. f must be
// loaded on s's device.
func (s *Stream) Launch(f *Function, grid, block [3]uint32, args ...uint64) error {
	if f.mod.dev != s.dev {
		return fmt.Errorf("%s: launch %s: kernel is loaded on %s", s.dev, f.name, f.mod.dev)
	}
	// The values and the pointers to them, which the driver reads during
	// the call only (cu.API's LaunchKernel copies the values): the
	// stream's spare block, so a warm stream's launch allocates nothing
	// (issue 29), or a new one when another thread's launch on s holds it.
	var vals []uint64
	var params []unsafe.Pointer
	var a *launchArgs
	if len(args) <= launchArgsMax {
		if a = s.args.Swap(nil); a == nil {
			a = new(launchArgs)
		}
		vals, params = a.vals[:len(args)], a.params[:len(args)]
	} else {
		vals, params = make([]uint64, len(args)), make([]unsafe.Pointer, len(args))
	}
	copy(vals, args)
	for i := range vals {
		params[i] = unsafe.Pointer(&vals[i])
	}
	err := s.enqueueNamed(func() string { return "launch " + f.name }, func(api cu.API) error {
		return api.LaunchKernel(f.h, grid, block, 0, s.h, params)
	})
	if a != nil {
		s.args.Store(a)
	}
	return err
}
