package direct

import (
	"fmt"
	"strings"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/netshare"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/fabric/pcieshare"
)

// The net part (fabric/netshare): FLEXLINK_LINKS=nvlink,pcie,net adds the
// NIC's loopback path as a third share of large pushes between two GPUs of
// one host, staged like the PCIe share and riding with its pairs (their
// planners and probes). Here: whether it is on.

// newNetShare is the net part when FLEXLINK_LINKS names net (nil, the
// part off, otherwise: an empty FLEXLINK_LINKS keeps it off).
func newNetShare(pr *peers, px *pcieshare.Share, cfg NetConfig, pc PCIeConfig, stats *linkStats) (*netshare.Share, error) {
	named := false
	for _, k := range strings.Split(pc.Links, ",") {
		named = named || fabric.Kind(strings.ToLower(strings.TrimSpace(k))) == fabric.KindNet
	}
	if !named || cfg.Open == nil {
		return nil, nil
	}
	kinds, err := namedKinds(pc.Links)
	if err != nil {
		return nil, err
	}
	if !kinds[fabric.KindNVLink] || !kinds[fabric.KindPCIe] {
		return nil, fmt.Errorf("FLEXLINK_LINKS=%q names net without nvlink and pcie: the direct GPU path's net part rides with the pcie share (name nvlink,pcie,net, or set FLEXLINK_GPU_PATH=staged)",
			pc.Links)
	}
	if pc.StagingBytes == 0 {
		return nil, nil // no PCIe staging: no pair has a planner for the net part
	}
	stats.net = true
	return netshare.New(netshare.Config{Host: pr.c, Dev: pr.dev, N: pr.n, Me: pr.me, PCIe: px, Fixed: cfg.Share,
		Staging: pcie.RoundStaging(pc.StagingBytes), OpenNIC: cfg.Open, Count: func(n int) { stats.add(linkNet, n) }}), nil
}
