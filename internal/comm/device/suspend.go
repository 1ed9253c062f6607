package device

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/flexlink/flexlink/collectives/direct"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// ErrSuspended is wrapped by the error of a call on a suspended device
// communicator.
var ErrSuspended = errors.New("device communicator is suspended (ncclCommSuspend): resume it first")

// ErrNotSuspended is wrapped by the error of Resume on a device
// communicator that is not suspended.
var ErrNotSuspended = errors.New("device communicator is not suspended")

// suspendable is the plane behind every DeviceComm New makes: the plane
// the ranks chose, and whether Suspend has released its memory. Calls on
// a suspended plane fail under the communicator's queue, so none slips in
// between a check and a suspend.
type suspendable struct {
	plane.Plane
	c plane.Caller

	mu        sync.Mutex
	suspended bool
}

// releaser is a plane that can give its device memory back between calls
// (collectives/direct).
type releaser interface {
	Release() error
	Memory() direct.Memory
}

func (s *suspendable) isSuspended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.suspended
}

// Do fails at once while suspended, else runs o on the plane.
func (s *suspendable) Do(ctx context.Context, o *plane.Op, st *gpu.Stream) error {
	if s.isSuspended() {
		return fmt.Errorf("rank %d on %s: gpu %s: %w", s.c.WorldRank(), s.c.Host(), o.Kind, ErrSuspended)
	}
	return s.Plane.Do(ctx, o, st)
}

// RunsAllToAllv forwards plane.VPlane.
func (s *suspendable) RunsAllToAllv() bool {
	vp, ok := s.Plane.(plane.VPlane)
	return ok && vp.RunsAllToAllv()
}

// CaptureBlocker forwards plane.Capturer (a plane without it cannot run
// under CUDA graph capture: the staged plane copies through host memory).
func (s *suspendable) CaptureBlocker(o *plane.Op) string {
	if cp, ok := s.Plane.(plane.Capturer); ok {
		return cp.CaptureBlocker(o)
	}
	return "this data plane copies through host memory and synchronises"
}

func wrap(c plane.Caller, p plane.Plane) plane.Plane { return &suspendable{Plane: p, c: c} }

func suspendState(d *plane.DeviceComm) (*suspendable, error) {
	s, ok := d.Plane().(*suspendable)
	if !ok {
		return nil, fmt.Errorf("rank %d: device communicator not made by device.New: %w", d.Comm().Rank(), errs.ErrNotSupported)
	}
	return s, nil
}

// Suspend releases d's device memory (ncclCommSuspend with
// NCCL_SUSPEND_MEM): on the direct plane the flag regions, the scratch and
// the mappings of the peers' buffers; the staged plane holds none between
// calls. It is collective, as NCCL's (every rank of the communicator calls
// it; they pass a barrier after each has waited for its own kernels, so no
// peer writes into memory being freed), and runs under the communicator's
// queue, after the calls enqueued before it. Calls made while suspended
// fail with an error wrapping ErrSuspended; suspending twice is an error.
// The streams of earlier calls need not be idle: the flag kernels are
// waited for here, and what remains on them touches only user buffers.
func Suspend(ctx context.Context, d *plane.DeviceComm) error {
	s, err := suspendState(d)
	if err != nil {
		return err
	}
	c := d.Comm()
	// Usage errors fail here, before the queue: an error inside Run ends
	// the communicator on every rank.
	if s.isSuspended() {
		return fmt.Errorf("rank %d on %s: gpu suspend: already suspended: %w", c.WorldRank(), c.Host(), ErrSuspended)
	}
	return c.Run(ctx, "gpu suspend", func(ctx context.Context) error {
		if s.isSuspended() {
			return fmt.Errorf("rank %d on %s: gpu suspend: %w", c.WorldRank(), c.Host(), ErrSuspended)
		}
		if err := s.Plane.Quiesce(); err != nil {
			return fmt.Errorf("rank %d on %s: gpu suspend: wait for this rank's kernels: %w", c.WorldRank(), c.Host(), err)
		}
		if err := c.Engine().Barrier(ctx); err != nil {
			return fmt.Errorf("rank %d on %s: gpu suspend: barrier: %w", c.WorldRank(), c.Host(), err)
		}
		s.mu.Lock()
		s.suspended = true
		s.mu.Unlock()
		if r, ok := s.Plane.(releaser); ok {
			if err := r.Release(); err != nil {
				return fmt.Errorf("rank %d on %s: gpu suspend: release memory: %w", c.WorldRank(), c.Host(), err)
			}
		}
		return nil
	})
}

// Resume undoes Suspend (ncclCommResume). It is collective too (a
// barrier, so every rank has resumed before any uses the communicator);
// the memory comes back as the calls need it: the flag regions with every
// rank at the first flag call after it. Resuming a communicator that is not
// suspended is an error.
func Resume(ctx context.Context, d *plane.DeviceComm) error {
	s, err := suspendState(d)
	if err != nil {
		return err
	}
	c := d.Comm()
	if !s.isSuspended() {
		return fmt.Errorf("rank %d on %s: gpu resume: %w", c.WorldRank(), c.Host(), ErrNotSuspended)
	}
	return c.Run(ctx, "gpu resume", func(ctx context.Context) error {
		if !s.isSuspended() {
			return fmt.Errorf("rank %d on %s: gpu resume: %w", c.WorldRank(), c.Host(), ErrNotSuspended)
		}
		if err := c.Engine().Barrier(ctx); err != nil {
			return fmt.Errorf("rank %d on %s: gpu resume: barrier: %w", c.WorldRank(), c.Host(), err)
		}
		s.mu.Lock()
		s.suspended = false
		s.mu.Unlock()
		return nil
	})
}

// Check fails, wrapping ErrSuspended, when d is suspended: the callers
// check before they queue a call, so a call on a suspended communicator is
// a usage error of this rank (Do checks again under the queue, where a
// failure ends the communicator on every rank).
func Check(d *plane.DeviceComm) error {
	s, err := suspendState(d)
	if err != nil || !s.isSuspended() {
		return nil
	}
	c := d.Comm()
	return fmt.Errorf("rank %d on %s: %w", c.WorldRank(), c.Host(), ErrSuspended)
}

// Memory is what a device communicator holds on its GPU.
type Memory struct {
	direct.Memory
	Path      string // "direct" or "staged"
	Suspended bool
}

// String is Memory in one line, for the NCCL_DEBUG=INFO announce and
// flexinfo: "direct plane, gpu memory 16 MiB: flag regions small 16 MiB
// (64 KiB slots, 128 blocks), large lazy (up to 128.02 MiB on first use);
// scratch 0 MiB".
func (m Memory) String() string {
	line := m.Path + " plane, "
	if m.Path != "direct" {
		line += "no gpu memory between calls"
	} else {
		line += m.Memory.String()
	}
	if m.Suspended {
		line += " (suspended)"
	}
	return line
}

// MemoryOf reports what d holds on its GPU now. Safe from any goroutine.
func MemoryOf(d *plane.DeviceComm) Memory {
	m := Memory{Path: d.Path()}
	s, err := suspendState(d)
	if err != nil {
		return m
	}
	m.Suspended = s.isSuspended()
	if r, ok := s.Plane.(releaser); ok {
		m.Memory = r.Memory()
	}
	return m
}
