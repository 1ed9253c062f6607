package cufake

import (
	"unsafe"

	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// Streams, events, modules and launches. Every stream operation has already
// completed when its call returns, so queries report done and waits return
// at once; each operation advances a fake clock by one millisecond, which
// events record.

func (f *Fake) StreamCreate(flags uint32) (cu.Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev, err := f.ctxDev("cuStreamCreate")
	if err != nil {
		return 0, err
	}
	s := cu.Stream(f.handle())
	f.sched.streams[s] = dev
	return s, nil
}

func (f *Fake) knownStream(fn string, s cu.Stream) error {
	if _, ok := f.sched.streams[s]; !ok && s != 0 {
		return fail(fn, cu.ErrorInvalidHandle, "unknown stream %#x", uint64(s))
	}
	return nil
}

func (f *Fake) StreamDestroy(s cu.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.knownStream("cuStreamDestroy", s); err != nil {
		return err
	}
	delete(f.sched.streams, s)
	return nil
}

func (f *Fake) StreamSynchronize(s cu.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.knownStream("cuStreamSynchronize", s); err != nil {
		return err
	}
	return f.syncStream("cuStreamSynchronize", s)
}

func (f *Fake) StreamQuery(s cu.Stream) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.knownStream("cuStreamQuery", s); err != nil {
		return false, err
	}
	if err := f.syncStream("cuStreamQuery", s); err != nil {
		return false, err
	}
	return true, nil
}

func (f *Fake) StreamWaitEvent(s cu.Stream, e cu.Event) error {
	return f.streamWait("cuStreamWaitEvent", s, e, false)
}

// streamWait is cuStreamWaitEvent: with nothing asynchronous, a wait only
// matters to captures (capture.go): a wait on an event recorded in a
// capture joins s to it; a wait in a capture on an event recorded outside
// is an isolation error unless external (a wait node).
func (f *Fake) streamWait(fn string, s cu.Stream, e cu.Event, external bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.knownStream(fn, s); err != nil {
		return err
	}
	ev, err := f.event(fn, e)
	if err != nil {
		return err
	}
	c := f.capturing(s)
	if c != nil && c.invalidated != "" {
		return fail(fn, cu.ErrorCaptureInvalidated, "capture %d was invalidated: %s", c.id, c.invalidated)
	}
	if c == nil && external {
		return fail(fn, cu.ErrorInvalidValue, "CU_EVENT_WAIT_EXTERNAL outside a capture")
	}
	if ev.capture != 0 {
		var from *capture
		for _, sc := range f.capt.streams {
			if sc.id == ev.capture {
				from = sc
			}
		}
		switch {
		case from == nil:
			return fail(fn, cu.ErrorCapturedEvent, "the event was recorded in capture %d, which has ended", ev.capture)
		case c == nil:
			f.capt.streams[s] = from // a fork: s joins the capture
		case c != from:
			c.invalidate("a wait on an event of another capture")
			from.invalidate("a wait on its event from another capture")
			return fail(fn, cu.ErrorCaptureIsolation, "event of capture %d waited on in capture %d", from.id, c.id)
		}
		return nil
	}
	if c != nil && ev.recorded && !external {
		c.invalidate(fn + " on an event recorded outside the capture")
		return fail(fn, cu.ErrorCaptureIsolation, "a capture may wait on an event recorded outside it only as an external wait (CU_EVENT_WAIT_EXTERNAL)")
	}
	return nil
}

func (f *Fake) event(fn string, e cu.Event) (*event, error) {
	ev, ok := f.sched.events[e]
	if !ok {
		return nil, fail(fn, cu.ErrorInvalidHandle, "unknown event %#x", uint64(e))
	}
	return ev, nil
}

func (f *Fake) EventCreate(flags uint32) (cu.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev, err := f.ctxDev("cuEventCreate")
	if err != nil {
		return 0, err
	}
	if flags&cu.EventInterprocess != 0 && flags&cu.EventDisableTiming == 0 {
		return 0, fail("cuEventCreate", cu.ErrorInvalidValue, "interprocess events must disable timing")
	}
	e := cu.Event(f.handle())
	f.sched.events[e] = &event{dev: dev, flags: flags}
	return e, nil
}

func (f *Fake) EventDestroy(e cu.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.event("cuEventDestroy", e); err != nil {
		return err
	}
	delete(f.sched.events, e)
	return nil
}

func (f *Fake) EventRecord(e cu.Event, s cu.Stream) error {
	return f.eventRecord("cuEventRecord", e, s, false)
}

// eventRecord records e on s; in a capture the event belongs to it, or,
// external, a record node records it at each replay.
func (f *Fake) eventRecord(fn string, e cu.Event, s cu.Stream, external bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev, err := f.event(fn, e)
	if err != nil {
		return err
	}
	dev, err := f.streamDev(fn, s)
	if err != nil {
		return err
	}
	if ev.dev != dev {
		return fail(fn, cu.ErrorInvalidHandle, "event of device %d recorded on a stream of device %d", ev.dev, dev)
	}
	if f.capturing(s) == nil && external {
		return fail(fn, cu.ErrorInvalidValue, "CU_EVENT_RECORD_EXTERNAL outside a capture")
	}
	if c := f.capturing(s); c != nil && !external {
		if c.invalidated != "" {
			return fail(fn, cu.ErrorCaptureInvalidated, "capture %d was invalidated: %s", c.id, c.invalidated)
		}
		ev.capture = c.id
		return nil
	}
	replay := func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		ev.recorded, ev.at, ev.capture = true, f.sched.clock, 0
		return nil
	}
	if captured, err := f.record(fn, s, replay); captured || err != nil {
		return err
	}
	ev.recorded, ev.at, ev.capture = true, f.sched.clock, 0
	return nil
}

func (f *Fake) EventSynchronize(e cu.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev, err := f.event("cuEventSynchronize", e)
	if err != nil {
		return err
	}
	if err := f.capturedEvent("cuEventSynchronize", ev); err != nil {
		return err
	}
	return f.unsafeCall("cuEventSynchronize")
}

func (f *Fake) EventQuery(e cu.Event) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev, err := f.event("cuEventQuery", e)
	if err != nil {
		return false, err
	}
	if err := f.capturedEvent("cuEventQuery", ev); err != nil {
		return false, err
	}
	if err := f.unsafeCall("cuEventQuery"); err != nil {
		return false, err
	}
	return true, nil
}

func (f *Fake) EventElapsedTime(start, end cu.Event) (float32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, err := f.event("cuEventElapsedTime", start)
	if err != nil {
		return 0, err
	}
	b, err := f.event("cuEventElapsedTime", end)
	if err != nil {
		return 0, err
	}
	if (a.flags|b.flags)&cu.EventDisableTiming != 0 || !a.recorded || !b.recorded {
		return 0, fail("cuEventElapsedTime", cu.ErrorInvalidHandle, "events must be recorded timing events")
	}
	return b.at - a.at, nil
}

func (f *Fake) IpcGetEventHandle(e cu.Event) (cu.IPCHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ctxDev("cuIpcGetEventHandle"); err != nil {
		return cu.IPCHandle{}, err
	}
	ev, err := f.event("cuIpcGetEventHandle", e)
	if err != nil {
		return cu.IPCHandle{}, err
	}
	if ev.flags&cu.EventInterprocess == 0 {
		return cu.IPCHandle{}, fail("cuIpcGetEventHandle", cu.ErrorInvalidValue, "event was not created interprocess")
	}
	h := ipcHandle('e', uint64(e))
	f.sched.ipcEv[h] = e
	return h, nil
}

func (f *Fake) IpcOpenEventHandle(h cu.IPCHandle) (cu.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev, err := f.ctxDev("cuIpcOpenEventHandle")
	if err != nil {
		return 0, err
	}
	src, ok := f.sched.ipcEv[h]
	if _, live := f.sched.events[src]; !ok || !live {
		return 0, fail("cuIpcOpenEventHandle", cu.ErrorInvalidHandle, "unknown or destroyed event handle")
	}
	e := cu.Event(f.handle())
	f.sched.events[e] = &event{dev: dev, flags: f.sched.events[src].flags}
	return e, nil
}

func (f *Fake) ModuleLoadData(image []byte) (cu.Module, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev, err := f.ctxDev("cuModuleLoadData")
	if err != nil {
		return 0, err
	}
	m := &module{dev: dev, entries: map[string]bool{}}
	for _, sub := range f.code.entryRE.FindAllSubmatch(image, -1) {
		m.entries[string(sub[1])] = true
	}
	if len(m.entries) == 0 {
		return 0, fail("cuModuleLoadData", cu.ErrorInvalidImage, "no .entry in %d bytes of PTX", len(image))
	}
	h := cu.Module(f.handle())
	f.code.modules[h] = m
	return h, nil
}

func (f *Fake) ModuleUnload(m cu.Module) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.code.modules[m]; !ok {
		return fail("cuModuleUnload", cu.ErrorInvalidHandle, "unknown module")
	}
	delete(f.code.modules, m)
	return nil
}

func (f *Fake) ModuleGetFunction(m cu.Module, name string) (cu.Function, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mod, ok := f.code.modules[m]
	if !ok {
		return 0, fail("cuModuleGetFunction", cu.ErrorInvalidHandle, "unknown module")
	}
	if !mod.entries[name] {
		return 0, fail("cuModuleGetFunction", cu.ErrorNotFound, "no kernel %q in the module", name)
	}
	fn := cu.Function(f.handle())
	f.code.funcs[fn] = name
	return fn, nil
}

// FuncLoad loads fn's code (see LazyLoads).
func (f *Fake) FuncLoad(fn cu.Function) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ctxDev("cuFuncLoad"); err != nil {
		return err
	}
	if _, ok := f.code.funcs[fn]; !ok {
		return fail("cuFuncLoad", cu.ErrorInvalidHandle, "unknown function")
	}
	f.code.loaded[fn] = true
	return nil
}

// LaunchKernel runs the kernel's registered host implementation at once
// (outside the fake's lock, so it may call Mem).
func (f *Fake) LaunchKernel(fn cu.Function, grid, block [3]uint32, sharedMem uint32, s cu.Stream, params []unsafe.Pointer) error {
	f.mu.Lock()
	name, ok := f.code.funcs[fn]
	dev, err := f.streamDev("cuLaunchKernel", s)
	impl := f.code.kernels[name]
	if err == nil && !ok {
		err = fail("cuLaunchKernel", cu.ErrorInvalidHandle, "unknown function")
	}
	if err == nil && impl == nil {
		err = fail("cuLaunchKernel", cu.ErrorNotSupported, "no host implementation of %s", name)
	}
	for i := 0; err == nil && i < 3; i++ {
		if grid[i] == 0 || block[i] == 0 {
			err = fail("cuLaunchKernel", cu.ErrorInvalidValue, "grid %v block %v", grid, block)
		}
	}
	if err == nil && block[0]*block[1]*block[2] > 1024 {
		err = fail("cuLaunchKernel", cu.ErrorInvalidValue, "block %v has more than 1024 threads", block)
	}
	if err == nil && !f.code.loaded[fn] {
		f.code.loaded[fn] = true
		f.code.lazy++
	}
	if err == nil && f.cfg.LaunchFault != nil {
		if ferr := f.cfg.LaunchFault(dev, name); ferr != nil {
			err = fail("cuLaunchKernel", cu.ErrorLaunchOutOfResources, "%s on device %d: %v", name, dev, ferr)
		}
	}
	if err == nil {
		if c := f.capturing(s); c != nil {
			// A launch node: the parameters' values are copied now (8
			// bytes each: every flexlink kernel takes 8-byte parameters).
			vals := make([]uint64, len(params))
			for i, p := range params {
				vals[i] = *(*uint64)(p)
			}
			_, err = f.record("cuLaunchKernel", s, func() error {
				ps := make([]unsafe.Pointer, len(vals))
				v := append([]uint64(nil), vals...)
				for i := range v {
					ps[i] = unsafe.Pointer(&v[i])
				}
				f.mu.Lock()
				f.code.launchN[name]++
				f.code.lastDim[name] = [2][3]uint32{grid, block}
				f.mu.Unlock()
				return impl(f, grid, block, ps)
			})
			f.mu.Unlock()
			return err
		}
		f.code.launchN[name]++
		f.code.lastDim[name] = [2][3]uint32{grid, block}
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return impl(f, grid, block, params)
}
