package direct

import (
	"context"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/collectives/staged"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/comm"
)

// deviceComm is rank.Comm.Device for the tests (internal/comm/device
// imports this package, so the tests cannot): the same choice, plane.Choose
// between this package's plane and the staged one, with the settings read
// from the communicator's environment.
func deviceComm(ctx context.Context, c *comm.Comm, dev *gpu.Device) (*plane.DeviceComm, error) {
	cfg, err := ReadConfig(c.Env())
	if err != nil {
		return nil, err
	}
	fast := plane.Candidate{
		Blocker: func(bus []string) string { return Blocker(c, dev, bus) },
		New: func(ctx context.Context, bus []string) (plane.Plane, error) {
			return New(ctx, c, dev, cfg, bus)
		},
	}
	return plane.Choose(ctx, c, dev, cfg.Path, fast, func() plane.Plane { return staged.New(c, dev) })
}
