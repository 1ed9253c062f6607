package cufake

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// Stream memory operations: cuStreamWriteValue32 stores a word when the
// stream reaches it; cuStreamWaitValue32 holds the stream until a word
// satisfies a condition. Streams run on the caller's goroutine here, so a
// wait blocks it, as a GPU stream would stall, until another goroutine
// (a rank, a host thread writing mapped memory) makes the condition true,
// or WaitValueTimeout passes (then the call fails, where a GPU would hang).
// In a capture each is a node.

// WaitValueTimeout bounds a cuStreamWaitValue32 on the fake driver.
const WaitValueTimeout = 60 * time.Second

// word resolves the aligned 32-bit word at addr. Held: f.mu.
func (f *Fake) word(fn string, addr cu.DevPtr) (*uint32, error) {
	if addr%4 != 0 {
		return nil, fail(fn, cu.ErrorInvalidValue, "address %#x is not 4-byte aligned", uint64(addr))
	}
	b, _, err := f.resolve(fn, addr, 4)
	if err != nil {
		return nil, err
	}
	return (*uint32)(unsafe.Pointer(&b[0])), nil
}

func (f *Fake) StreamWriteValue32(s cu.Stream, addr cu.DevPtr, v uint32, flags uint32) error {
	const fn = "cuStreamWriteValue32"
	f.mu.Lock()
	w, err := f.word(fn, addr)
	if err == nil {
		_, err = f.streamDev(fn, s)
	}
	if err != nil {
		f.mu.Unlock()
		return err
	}
	run := func() error { atomic.StoreUint32(w, v); f.Poke(); return nil }
	captured, err := f.record(fn, s, run)
	f.mu.Unlock()
	if captured || err != nil {
		return err
	}
	return run()
}

func (f *Fake) StreamWaitValue32(s cu.Stream, addr cu.DevPtr, v uint32, flags uint32) error {
	const fn = "cuStreamWaitValue32"
	cond := flags &^ (1 << 30) // CU_STREAM_WAIT_VALUE_FLUSH changes nothing here
	if cond > cu.WaitValueNOR {
		return fail(fn, cu.ErrorInvalidValue, "flags %#x", flags)
	}
	f.mu.Lock()
	w, err := f.word(fn, addr)
	if err == nil {
		_, err = f.streamDev(fn, s)
	}
	if err != nil {
		f.mu.Unlock()
		return err
	}
	run := func() error { return f.waitValue(fn, w, v, cond) }
	captured, err := f.record(fn, s, run)
	f.mu.Unlock()
	if captured || err != nil {
		return err
	}
	return run()
}

// waitValue blocks until the word w satisfies cond against v: woken by
// Poke (copies, kernels, value writes), and looking again every
// millisecond for host stores to mapped memory, which do not poke.
func (f *Fake) waitValue(fn string, w *uint32, v, cond uint32) error {
	deadline := time.NewTimer(WaitValueTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		changed := f.Changed()
		x := atomic.LoadUint32(w)
		var ok bool
		switch cond {
		case cu.WaitValueGEQ:
			ok = int32(x-v) >= 0
		case cu.WaitValueEQ:
			ok = x == v
		case cu.WaitValueAND:
			ok = x&v != 0
		case cu.WaitValueNOR:
			ok = ^(x | v) != 0
		}
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-deadline.C:
			return fail(fn, cu.ErrorLaunchTimeout, "word is %#x, waited %v for condition %d against %#x", x, WaitValueTimeout, cond, v)
		}
	}
}
