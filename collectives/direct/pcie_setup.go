package direct

import (
	"context"
	"encoding/binary"
	"fmt"

	"flexlink/collectives"
	"flexlink/dtype"
	"flexlink/fabric"
	"flexlink/fabric/balance"
	"flexlink/gpu"
)

// Setting up the PCIe share, inside Comm.Device (gpu_setup.go): settings,
// the staging buffers and slot events offered in the second exchange, the
// peers' buffers mapped and the pairs agreed in a third, and a planner per
// pair that uses PCIe, from the profile cache when it has this pair.

// settings reads FLEXLINK_LINKS, FLEXLINK_PCIE_STAGING_BYTES and
// FLEXLINK_PCIE_SHARE into x. The PCIe share is on unless FLEXLINK_LINKS
// names link kinds and pcie is not among them, or the staging size is 0.
func (x *pcieState) settings(cfg PCIeConfig) error {
	kinds, err := namedKinds(cfg.Links)
	if err != nil {
		return err
	}
	st := cfg.StagingBytes
	x.fixed = cfg.Share
	if kinds[fabric.KindPCIe] && !kinds[fabric.KindNVLink] {
		return fmt.Errorf("FLEXLINK_LINKS=%q names pcie without nvlink: the direct GPU path adds pcie to nvlink (name both, or set FLEXLINK_GPU_PATH=staged)",
			cfg.Links)
	}
	if kinds[fabric.KindPCIe] {
		x.staging = (st + pcieAlign - 1) / pcieAlign * pcieAlign
	}
	x.minSlot = pcieMinSlot
	x.cacheDir = cfg.CacheDir
	return nil
}

// namedKinds is the set of link kinds FLEXLINK_LINKS keeps, every kind
// when it is empty. FilterLinks checks the names, so a typo is an error
// here as everywhere else; host kinds (shm,tcp) are legal and simply keep
// no GPU link beyond NVLink.
func namedKinds(links string) (map[fabric.Kind]bool, error) {
	all := []fabric.Kind{fabric.KindNVLink, fabric.KindPCIe, fabric.KindNet, fabric.KindShm, fabric.KindTCP, fabric.KindFake}
	specs := make([]balance.LinkSpec, len(all))
	for i, k := range all {
		specs[i] = balance.LinkSpec{ID: i, Kind: k, Bandwidth: 1}
	}
	kept, err := balance.FilterLinksBy(specs, links)
	if err != nil {
		return nil, fmt.Errorf("gpu links: %w", err)
	}
	out := map[fabric.Kind]bool{}
	for _, s := range kept {
		out[s.Kind] = true
	}
	if !out[fabric.KindNVLink] && !out[fabric.KindPCIe] {
		out[fabric.KindNVLink] = true // FLEXLINK_LINKS=shm,tcp: about host links only
	}
	return out, nil
}

// pcieBlobBytes is one rank's PCIe part of the setup exchange: per rank,
// the reference of the staging buffer toward it and its slot events.
func pcieBlobBytes(n int) int { return n * (pcieRefBytes + pcieSlots*gpu.IPCHandleSize) }

// offerPCIe creates a staging buffer, a copy stream and slot events toward
// every peer and writes their references into b. A staging buffer that
// cannot be made (memfd, mapping or registration refused) only takes that
// pair's PCIe share away: its reference stays zero.
func (p *directPlane) offerPCIe(b []byte) error {
	x := &p.px
	if x.staging == 0 {
		return nil
	}
	x.tx, x.rx = make([]*pcieTx, p.n), make([]*pcieRx, p.n)
	stride := pcieRefBytes + pcieSlots*gpu.IPCHandleSize
	for j := 0; j < p.n; j++ {
		if j == p.me {
			continue
		}
		mem, err := p.dev.NewSharedHost(x.staging)
		if err != nil {
			p.c.Log().Warn("gpu pcie: no staging buffer, this pair stays on nvlink", "peer", j, "error", err)
			continue
		}
		t := &pcieTx{peer: j, mem: mem, logged: map[int]float64{}, slot: -1}
		x.tx[j] = t
		if t.stream, err = p.dev.NewStream(); err != nil {
			return err
		}
		if t.end, err = p.dev.NewEvent(false); err != nil {
			return err
		}
		w := b[j*stride:]
		ref := mem.Ref()
		for i, v := range []uint64{uint64(ref.PID), uint64(ref.FD), uint64(ref.Len), ref.Ino} {
			binary.LittleEndian.PutUint64(w[8*i:], v)
		}
		for k := 0; k < pcieSlots; k++ {
			e, err := p.dev.NewIPCEvent()
			if err != nil {
				return err
			}
			t.slots = append(t.slots, e)
			h, err := e.IPCHandle()
			if err != nil {
				return err
			}
			copy(w[pcieRefBytes+k*gpu.IPCHandleSize:], h)
		}
	}
	return nil
}

// openPCIe maps every peer's staging buffer toward this rank and opens its
// slot events (blobs[r] is rank r's PCIe part), then agrees with the peers,
// in one more exchange, on which pairs use PCIe. It is collective whenever
// some rank offered a staging buffer, which every rank sees alike.
func (p *directPlane) openPCIe(ctx context.Context, blobs [][]byte, bus []string) error {
	x := &p.px
	stride := pcieRefBytes + pcieSlots*gpu.IPCHandleSize
	offered := false
	for r, b := range blobs {
		for j := 0; j < p.n; j++ {
			if j != r && binary.LittleEndian.Uint64(b[j*stride+16:]) != 0 {
				offered = true
			}
		}
	}
	if !offered {
		return nil
	}
	mask := make([]byte, p.n)
	for j := 0; j < p.n && x.rx != nil; j++ {
		if j == p.me {
			continue
		}
		w := blobs[j][p.me*stride:]
		le := binary.LittleEndian
		ref := gpu.SharedHostRef{PID: int(le.Uint64(w)), FD: int(le.Uint64(w[8:])), Len: int(le.Uint64(w[16:])), Ino: le.Uint64(w[24:])}
		if ref.Len == 0 {
			continue
		}
		rx, err := p.openRx(ref, w[pcieRefBytes:])
		if err != nil {
			p.c.Log().Warn("gpu pcie: cannot map a peer's staging buffer, that pair stays on nvlink", "peer", j, "error", err)
			continue
		}
		x.rx[j], mask[j] = rx, 1
	}
	all := make([]byte, p.n*p.n)
	if err := p.c.Engine().AllGather(ctx, collectives.HostBuffer(mask), collectives.HostBuffer(all), p.n, dtype.Uint8); err != nil {
		return fmt.Errorf("agree on pcie staging: %w", err)
	}
	for j, t := range x.tx {
		if t == nil {
			continue
		}
		if all[j*p.n+p.me] != 1 {
			x.tx[j] = nil
			if err := t.close(); err != nil {
				return err
			}
			continue
		}
		if err := t.mem.CloseFD(); err != nil {
			return err
		}
		if err := p.plannerFor(t, bus); err != nil {
			return err
		}
	}
	return nil
}

// openRx maps one peer's staging buffer and opens its slot events
// (handles: pcieSlots IPC handles).
func (p *directPlane) openRx(ref gpu.SharedHostRef, handles []byte) (rx *pcieRx, err error) {
	if ref.Len > 1<<34 {
		return nil, fmt.Errorf("staging buffer of %d bytes", ref.Len)
	}
	rx = &pcieRx{}
	defer func() {
		if err != nil {
			rx.close()
		}
	}()
	if rx.mem, err = p.dev.OpenSharedHost(ref); err != nil {
		return nil, err
	}
	if rx.stream, err = p.dev.NewStream(); err != nil {
		return nil, err
	}
	if rx.end, err = p.dev.NewEvent(false); err != nil {
		return nil, err
	}
	for k := 0; k < pcieSlots; k++ {
		e, err := p.dev.OpenIPCEvent(handles[k*gpu.IPCHandleSize : (k+1)*gpu.IPCHandleSize])
		if err != nil {
			return nil, err
		}
		rx.slots = append(rx.slots, e)
	}
	return rx, nil
}

// plannerFor gives t its planner: the cached profile of this GPU pair
// when there is one for the same links, else the priors.
func (p *directPlane) plannerFor(t *pcieTx, bus []string) error {
	x := &p.px
	specs := []balance.LinkSpec{
		{ID: linkNVLink, Kind: fabric.KindNVLink, Bandwidth: nvlinkPriorBW, Latency: nvlinkPriorLat},
		{ID: linkPCIe, Kind: fabric.KindPCIe, Bandwidth: pciePriorBW, Latency: pciePriorLat},
	}
	t.key = fmt.Sprintf("gpu-direct %s %s>%s", p.c.Host(), bus[p.me], bus[t.peer])
	from := "priors"
	if x.cacheDir != "" {
		if st, err := balance.LoadProfile(x.cacheDir, t.key); err == nil {
			if pl, err := balance.Restore(st, specs); err == nil {
				t.planner, from = pl, "profile cache"
			} else {
				p.c.Log().Debug("gpu pcie: cached profile does not fit", "peer", t.peer, "error", err)
			}
		}
	}
	if t.planner == nil {
		pl, err := balance.NewPlanner(specs, nil, balance.Config{})
		if err != nil {
			return err
		}
		t.planner = pl
	}
	by := "balancer"
	if x.fixed >= 0 {
		by = fmt.Sprintf("FLEXLINK_PCIE_SHARE=%g", x.fixed)
	}
	p.c.Log().Info("gpu pcie link", "peer", t.peer, "staging", x.staging, "threshold", t.planner.Threshold(),
		"from", from, "shares", by)
	return nil
}
