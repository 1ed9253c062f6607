package plane

import (
	"errors"
	"fmt"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// CUDA graph capture of device calls. A call on a stream that is being
// captured runs only where the plane can enqueue work that replays
// correctly with no host involvement (Capturer; the direct plane's flag
// kernels and its one-rank copies). Anything else is refused before the
// call touches the communicator, with an error wrapping ErrNotCapturable
// that names what and why: the communicator stays usable, and the
// capture is not invalidated.
//
// Replays count as calls: each replay runs the captured calls again, in
// the same order, and every rank must make the same sequence of calls
// (eager ones and replays together), as for eager calls alone. A rank's
// eager calls and replays may be on different streams: the direct plane
// orders them on the device (collectives/direct/capture.go).

// ErrNotCapturable is wrapped by the error of a call refused on a
// capturing stream. It wraps errs.ErrNotSupported.
var ErrNotCapturable = fmt.Errorf("cannot run under CUDA graph capture: %w", errs.ErrNotSupported)

// captureOf checks s's capture state for o before o runs: o.Capture is
// set when s is capturing and the plane can take o; an error (wrapping
// ErrNotCapturable) when it cannot or the capture was invalidated.
func (d *DeviceComm) captureOf(o *Op, s *gpu.Stream) error {
	ci, err := s.Capture()
	if err != nil {
		return fmt.Errorf("rank %d: gpu %s: %w", d.c.Rank(), o.Kind, err)
	}
	if ci.Invalidated {
		return fmt.Errorf("rank %d: gpu %s: the stream's CUDA graph capture was invalidated before this call: %w", d.c.Rank(), o.Kind, ErrNotCapturable)
	}
	if !ci.Active {
		return nil
	}
	why := fmt.Sprintf("the %s plane copies through host memory and synchronises", d.path)
	if c, ok := d.plane.(Capturer); ok {
		why = c.CaptureBlocker(o)
	}
	if why != "" {
		return fmt.Errorf("rank %d: gpu %s on a capturing stream (capture %d): %s: %w", d.c.Rank(), o.Kind, ci.ID, why, ErrNotCapturable)
	}
	o.Capture = ci.ID
	return nil
}

// IsNotCapturable reports whether err refused a call on a capturing
// stream (the communicator is unharmed).
func IsNotCapturable(err error) bool { return errors.Is(err, ErrNotCapturable) }
