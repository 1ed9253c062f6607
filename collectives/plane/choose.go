package plane

import (
	"context"
	"fmt"
	"strings"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// Setting up a DeviceComm takes two all-gathers over the host links:
//
//  1. every rank's GPU PCI bus id, so each rank can find its peers' GPUs
//     among the devices its own driver sees and ask the driver whether it
//     can reach them (peer access), without creating contexts on them;
//  2. every rank's verdict (can it use the direct plane with every peer?).
//     All ranks must pick the same plane, so the direct plane is used only
//     when every verdict is yes; then direct.New exchanges the IPC handles
//     of its events, staging buffers and flag regions.

const busIDBytes = 64 // PCI bus id, NUL-padded

// Candidate is the fast plane Choose offers: Blocker says why this rank
// cannot use it with every peer ("" when it can; bus[r] is rank r's GPU PCI
// bus id), New makes it once every rank said "".
type Candidate struct {
	Blocker func(bus []string) string
	New     func(ctx context.Context, bus []string) (Plane, error)
}

// Choose prepares collectives on dev's buffers. It is collective: every
// rank of c calls it (each with its own GPU); the ranks exchange where their
// GPUs are and what they can reach, and agree on a data plane: the
// candidate ("direct") when every rank can use it, else fallback
// ("staged"). mode (FLEXLINK_GPU_PATH: auto, direct or staged) can force
// one; forcing direct where a rank cannot use it is an error.
func Choose(ctx context.Context, c Caller, dev *gpu.Device, mode string, fast Candidate, fallback func() Plane) (*DeviceComm, error) {
	if dev == nil {
		return nil, fmt.Errorf("rank %d: device communicator: nil device", c.Rank())
	}
	var dc *DeviceComm
	err := c.Run(ctx, "gpu setup", func(ctx context.Context) error {
		var err error
		dc, err = choose(ctx, c, dev, mode, fast, fallback)
		return err
	})
	return dc, err
}

func choose(ctx context.Context, c Caller, dev *gpu.Device, mode string, fast Candidate, fallback func() Plane) (*DeviceComm, error) {
	n := c.Size()
	mine := make([]byte, busIDBytes)
	copy(mine, dev.PCIBusID())
	all := make([]byte, n*busIDBytes)
	if err := c.Engine().AllGather(ctx, collectives.HostBuffer(mine), collectives.HostBuffer(all), busIDBytes, dtype.Uint8); err != nil {
		return nil, fmt.Errorf("exchange gpu bus ids: %w", err)
	}
	bus := make([]string, n)
	for r := range bus {
		bus[r] = strings.TrimRight(string(all[r*busIDBytes:(r+1)*busIDBytes]), "\x00")
	}
	why := ""
	if mode == "staged" {
		why = "FLEXLINK_GPU_PATH=staged"
	} else {
		why = fast.Blocker(bus)
	}
	if why != "" && mode == "direct" {
		return nil, fmt.Errorf("FLEXLINK_GPU_PATH=direct: %s: %w", why, errs.ErrNotSupported)
	}
	verdict := []byte{0}
	if why == "" {
		verdict[0] = 1
	}
	verdicts := make([]byte, n)
	if err := c.Engine().AllGather(ctx, collectives.HostBuffer(verdict), collectives.HostBuffer(verdicts), 1, dtype.Uint8); err != nil {
		return nil, fmt.Errorf("exchange gpu plane verdicts: %w", err)
	}
	for r, v := range verdicts {
		if v != 1 && why == "" {
			why = fmt.Sprintf("rank %d on %s cannot use the direct path", r, c.PeerHost(r))
		}
	}
	if why != "" {
		if mode == "direct" {
			return nil, fmt.Errorf("FLEXLINK_GPU_PATH=direct: %s: %w", why, errs.ErrNotSupported)
		}
		c.Log().Info("gpu data plane", "comm", c.Name(), "path", "staged", "why", why, "gpu", dev.String())
		return NewDeviceComm(c, dev, "staged", fallback()), nil
	}
	p, err := fast.New(ctx, bus)
	if err != nil {
		return nil, err
	}
	c.Log().Info("gpu data plane", "comm", c.Name(), "path", "direct", "gpu", dev.String())
	return NewDeviceComm(c, dev, "direct", p), nil
}
