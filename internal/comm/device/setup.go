// Package device chooses the data plane of a communicator's GPU buffers:
// direct (collectives/direct) when every rank can map every peer's memory,
// else staged (collectives/staged), through plane.Choose.
package device

import (
	"context"

	"github.com/flexlink/flexlink/collectives/direct"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/collectives/staged"
	"github.com/flexlink/flexlink/gpu"
)

// New prepares collectives on dev's buffers for c's ranks. It is
// collective: every rank of c calls it, each with its own GPU, and the
// ranks agree on a plane (cfg.Path, FLEXLINK_GPU_PATH, can force one).
// The plane can be suspended (Suspend, Resume: suspend.go).
func New(ctx context.Context, c plane.Caller, dev *gpu.Device, cfg direct.Config) (*plane.DeviceComm, error) {
	dev.Driver().SetLogger(c.Log()) // the kernel loads are logged (the first communicator's logger)
	fast := plane.Candidate{
		Blocker: func(bus []string) string { return direct.Blocker(c, dev, bus) },
		New: func(ctx context.Context, bus []string) (plane.Plane, error) {
			p, err := direct.New(ctx, c, dev, cfg, bus)
			if err != nil {
				return nil, err
			}
			return wrap(c, p), nil
		},
	}
	return plane.Choose(ctx, c, dev, cfg.Path, fast, func() plane.Plane {
		if cfg.StagedChunk < 0 {
			return wrap(c, staged.New(c, dev))
		}
		return wrap(c, staged.NewChunked(c, dev, cfg.StagedChunk))
	})
}
