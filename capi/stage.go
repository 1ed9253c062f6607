package capi

import (
	"sync"

	"github.com/flexlink/flexlink/gpu"
)

// stage is a communicator's device scratch for calls that cannot run on
// the caller's buffers as they are: a PreMulSum (the send buffer times the
// scalar goes here first, by a kernel on the caller's stream) and buffers
// that cannot be IPC-exported (VMM memory, as PyTorch's
// expandable_segments: copied in and out here on the caller's stream, so
// the peers map the scratch instead). The layout of one call's use:
// [0, scalarSlot) the scalar, then the send part, then the receive part.
//
// Reuse is ordered on the device, never by blocking the host: each call
// records an event after its work; the next call's stream waits for it
// before touching the scratch. Outgrown buffers are kept (peers may still
// map them) and freed with the communicator.
type stage struct {
	mu      sync.Mutex // held from acquire to release
	buf     *gpu.Buffer
	retired []*gpu.Buffer
	ev      *gpu.Event
	used    bool // ev was recorded
}

const (
	scalarSlot = 256
	stageAlign = 256
)

func alignUp(n int) int { return (n + stageAlign - 1) / stageAlign * stageAlign }

// acquire returns scratch of at least n bytes for a call on s, with s made
// to wait for the last call that used it. The caller must release(s) once
// its work is enqueued, also on error.
func (st *stage) acquire(dv *gpu.Device, s *gpu.Stream, n int) (*gpu.Buffer, error) {
	st.mu.Lock()
	if st.buf == nil || st.buf.Len() < n {
		b, err := dv.Alloc(max(alignUp(n), 1<<20))
		if err != nil {
			st.mu.Unlock()
			return nil, err
		}
		if st.buf != nil {
			st.retired = append(st.retired, st.buf)
		}
		st.buf = b
	}
	if st.ev == nil {
		ev, err := dv.NewEvent(false)
		if err != nil {
			st.mu.Unlock()
			return nil, err
		}
		st.ev = ev
	}
	if st.used {
		if err := s.Wait(st.ev); err != nil {
			st.mu.Unlock()
			return nil, err
		}
	}
	return st.buf, nil
}

// release records that the work enqueued on s so far is the scratch's last
// use, and unlocks it.
func (st *stage) release(s *gpu.Stream) error {
	defer st.mu.Unlock()
	if err := s.Record(st.ev); err != nil {
		return err
	}
	st.used = true
	return nil
}

// free gives every scratch buffer back, once the last call that used one
// has finished on its stream (the communicator is closed or suspended; a
// later call makes the scratch again). The peers must no longer map it.
func (st *stage) free() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ev != nil && st.used {
		_ = st.ev.Synchronize() // a failed stream fails its own calls; the memory goes back anyway
	}
	st.used = false
	for _, b := range append(st.retired, st.buf) {
		if b != nil {
			b.Free()
		}
	}
	st.buf, st.retired = nil, nil
	if st.ev != nil {
		st.ev.Close()
		st.ev = nil
	}
}

// graphScratch is scratch of n bytes for one call captured on s (a
// PreMulSum): the graph's own (gpu.Stream.GraphAlloc), freed with it.
func graphScratch(s *gpu.Stream, n int) (*gpu.Buffer, error) {
	return s.GraphAlloc(max(alignUp(n), stageAlign))
}
