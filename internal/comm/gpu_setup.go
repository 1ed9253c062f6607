package comm

import (
	"context"
	"fmt"
	"strings"

	"flexlink/collectives"
	"flexlink/dtype"
	"flexlink/gpu"
	"flexlink/internal/errs"
)

// Setting up a DeviceComm takes two all-gathers over the host links:
//
//  1. every rank's GPU PCI bus id, so each rank can find its peers' GPUs
//     among the devices its own driver sees and ask the driver whether it
//     can reach them (peer access), without creating contexts on them;
//  2. every rank's verdict (can it use the direct plane with every peer?)
//     and, for the direct plane, its IPC event handles and the references
//     of its PCIe staging buffers (gpu_pcie.go). All ranks must pick the
//     same plane, so the direct plane is used only when every verdict is
//     yes.
//  3. on the direct plane with PCIe staging offered: which staging buffers
//     each rank could map (gpu_pcie.go's openPCIe).

const busIDBytes = 64 // PCI bus id, NUL-padded

func newDeviceComm(ctx context.Context, c *Comm, dev *gpu.Device) (*DeviceComm, error) {
	cfg, err := ReadConfig(c.world.env)
	if err != nil {
		return nil, fmt.Errorf("rank %d on %s: gpu settings: %w", c.WorldRank(), c.Host(), err)
	}
	mode := cfg.Path
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
		why = directBlocker(c, dev, bus)
	}
	if why != "" && mode == "direct" {
		return nil, fmt.Errorf("FLEXLINK_GPU_PATH=direct: %s: %w", why, errs.ErrNotSupported)
	}
	// Round 2: verdicts plus, when this rank could go direct, its events.
	var dp *directPlane
	if why == "" {
		var err error
		if dp, err = newDirectPlane(c, dev, cfg); err != nil {
			return nil, err
		}
	}
	evBytes := eventBlobBytes(n)
	pcBytes := pcieBlobBytes(n)
	blob := make([]byte, 1+evBytes+pcBytes+flagBlobBytes)
	if dp != nil {
		blob[0] = 1
		err := dp.putEventHandles(blob[1:])
		if err == nil {
			err = dp.offerPCIe(blob[1+evBytes:])
		}
		if err == nil {
			err = dp.setupFlag(blob[1+evBytes+pcBytes:])
		}
		if err != nil {
			dp.close()
			return nil, err
		}
	}
	all = make([]byte, n*len(blob))
	if err := c.Engine().AllGather(ctx, collectives.HostBuffer(blob), collectives.HostBuffer(all), len(blob), dtype.Uint8); err != nil {
		if dp != nil {
			dp.close()
		}
		return nil, fmt.Errorf("exchange gpu event handles: %w", err)
	}
	direct := true
	for r := 0; r < n; r++ {
		if all[r*len(blob)] != 1 {
			direct = false
			if why == "" {
				why = fmt.Sprintf("rank %d on %s cannot use the direct path", r, c.PeerHost(r))
			}
		}
	}
	dc := &DeviceComm{c: c, dev: dev}
	if !direct {
		if dp != nil {
			dp.close()
		}
		if mode == "direct" {
			return nil, fmt.Errorf("FLEXLINK_GPU_PATH=direct: %s: %w", why, errs.ErrNotSupported)
		}
		dc.path, dc.plane = "staged", newStagedPlane(c, dev)
		c.Log().Info("gpu data plane", "comm", c.Name(), "path", dc.path, "why", why, "gpu", dev.String())
		return dc, nil
	}
	pcie, flag := make([][]byte, n), make([][]byte, n)
	for r := range pcie {
		at := r*len(blob) + 1 + evBytes
		pcie[r], flag[r] = all[at:at+pcBytes], all[at+pcBytes:(r+1)*len(blob)]
	}
	err = dp.openPeerEvents(all, len(blob))
	if err == nil {
		err = dp.openPCIe(ctx, pcie, bus)
	}
	if err == nil {
		err = dp.openFlag(ctx, flag, bus)
	}
	if err != nil {
		dp.close()
		return nil, err
	}
	dc.path, dc.plane = "direct", dp
	c.Log().Info("gpu data plane", "comm", c.Name(), "path", dc.path, "gpu", dev.String())
	return dc, nil
}

// directBlocker says why this rank cannot use the direct plane with every
// peer, or "" when it can.
func directBlocker(c *Comm, dev *gpu.Device, bus []string) string {
	drv := dev.Driver()
	fake := drv.Library() == "fake"
	for r := 0; r < c.Size(); r++ {
		if r == c.Rank() {
			continue
		}
		if c.PeerHost(r) != c.Host() {
			return fmt.Sprintf("rank %d is on %s, not %s", r, c.PeerHost(r), c.Host())
		}
		// The driver refuses IPC handles inside the process that made them;
		// the fake driver (tests, ranks as goroutines) allows it.
		if !fake && c.SameProcess(r) {
			return fmt.Sprintf("rank %d is in this process (CUDA IPC needs separate processes)", r)
		}
		ord := -1
		for i := 0; i < drv.DeviceCount(); i++ {
			if id, err := drv.PCIBusID(i); err == nil && strings.EqualFold(id, bus[r]) {
				ord = i
			}
		}
		if ord < 0 {
			return fmt.Sprintf("rank %d's gpu %s is not visible here (CUDA_VISIBLE_DEVICES?)", r, bus[r])
		}
		if ord == dev.Ordinal() {
			continue // two ranks on one GPU: IPC works, no peer access needed
		}
		if ok, err := drv.CanAccessPeer(dev.Ordinal(), ord); err != nil || !ok {
			return fmt.Sprintf("%s cannot access rank %d's gpu %s (no peer access: %v)", dev, r, bus[r], err)
		}
	}
	return ""
}
