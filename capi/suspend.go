package capi

import (
	"errors"

	"github.com/flexlink/flexlink/rank"
)

// SuspendMem is NCCL_SUSPEND_MEM (nccl.h, NCCL 2.29 and later): release
// the communicator's dynamic GPU memory. It is the only suspend flag.
const SuspendMem = 0x01

// Suspend is ncclCommSuspend(comm, flags): with NCCL_SUSPEND_MEM it gives
// back the communicator's GPU memory (rank.DeviceComm.Suspend: the flag
// regions, scratch, the mappings of the peers' buffers; and this library's
// PreMulSum/bounce scratch), as vLLM's sleep
// mode asks. It is collective, as NCCL's: every rank of the communicator
// calls it. Until Resume, calls on the communicator fail
// (ncclInvalidUsage, naming the suspension) and leave it usable. Other
// flags are refused with ncclInvalidArgument; a communicator without a
// GPU holds no GPU memory, and suspends at once.
func (l *Library) Suspend(h uintptr, flags int) error {
	c, err := l.handles.comm(h, "ncclCommSuspend")
	if err != nil {
		return err
	}
	if flags != SuspendMem {
		return fail(InvalidArgument, "ncclCommSuspend: flags %#x: only NCCL_SUSPEND_MEM (%#x) is supported", flags, SuspendMem)
	}
	if err := c.usable("ncclCommSuspend"); err != nil {
		return err
	}
	if c.dc == nil {
		return nil
	}
	if err := c.dc.Suspend(c.ctx); err != nil {
		return suspendErr("ncclCommSuspend", c, err)
	}
	// The peers have dropped their mappings of this rank's buffers (the
	// collective suspend): the C library's own scratch (PreMulSum, bounced
	// buffers) goes back too, and is made again by the next call needing it.
	c.stage.free()
	return nil
}

// Resume is ncclCommResume(comm): the communicator is usable again, its
// GPU memory made again as the calls need it. Collective, as Suspend;
// resuming a communicator that is not suspended is ncclInvalidUsage.
func (l *Library) Resume(h uintptr) error {
	c, err := l.handles.comm(h, "ncclCommResume")
	if err != nil {
		return err
	}
	if err := c.usable("ncclCommResume"); err != nil {
		return err
	}
	if c.dc == nil {
		return nil
	}
	if err := c.dc.Resume(c.ctx); err != nil {
		return suspendErr("ncclCommResume", c, err)
	}
	return nil
}

// suspendErr is the result of a failed Suspend or Resume: a usage error
// of this rank (suspended twice, resumed when not suspended) refuses the
// call and leaves the communicator as it was; anything else failed the
// collective and the communicator with it.
func suspendErr(fn string, c *Comm, err error) error {
	if errors.Is(err, rank.ErrSuspended) || errors.Is(err, rank.ErrNotSuspended) {
		return fail(InvalidUsage, "%s rank %d of %d: %w", fn, c.rank, c.nranks, err)
	}
	c.note(err)
	return fail(ResultOf(err), "%s rank %d of %d: %w", fn, c.rank, c.nranks, err)
}
