// Package shares says which staged link shares the direct GPU plane
// (collectives/direct) drives beside NVLink and reads their settings: the
// PCIe share (fabric/pcieshare) on every plane, and the net share
// (fabric/netshare) riding with it when FLEXLINK_LINKS names net. The
// plane knows them only as fabric/linkshare.Share: it asks New for the
// list and iterates it. A new share is a package under fabric/ that
// implements linkshare.Share, its settings in Config and ReadConfig, and
// one entry in New (docs/ARCHITECTURE.md, "How to add a link share").
package shares

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/linkshare"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/netshare"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/fabric/pcieshare"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/settings"
)

// Config holds the shares' settings, read once (ReadConfig).
type Config struct {
	Links        string  // FLEXLINK_LINKS as given (checked by balance.FilterLinksBy)
	StagingBytes int     // FLEXLINK_PCIE_STAGING_BYTES (0: no PCIe share)
	PCIeShare    float64 // FLEXLINK_PCIE_SHARE; -1: the balancer decides
	CacheDir     string  // where link profiles are cached ("" : none)
	NetShare     float64 // FLEXLINK_GPU_NET_SHARE; -1: the balancer decides
	// OpenNIC opens the network provider the net share sends through and
	// picks its device (FLEXLINK_NET, FLEXLINK_NET_IFNAME, ...); nil: no
	// net share whatever FLEXLINK_LINKS says.
	OpenNIC func(log hclog.Logger) (net.Provider, int, error)
}

// ReadConfig reads and checks the shares' settings from env. Every error
// names the variable, its value and what is allowed.
func ReadConfig(env settings.Env) (Config, error) {
	c := Config{Links: env.String("FLEXLINK_LINKS"), PCIeShare: -1, NetShare: -1}
	var err error
	if c.StagingBytes, err = env.Int("FLEXLINK_PCIE_STAGING_BYTES"); err != nil {
		return c, err
	}
	if st := c.StagingBytes; st != 0 && (st < 8*pcie.Align || st > 1<<34) {
		return c, fmt.Errorf("FLEXLINK_PCIE_STAGING_BYTES=%d: want 0 (no PCIe share) or 32768 to 16 GiB", st)
	}
	for _, f := range []struct {
		name string
		to   *float64
		max  float64
	}{{"FLEXLINK_PCIE_SHARE", &c.PCIeShare, pcie.MaxShare}, {"FLEXLINK_GPU_NET_SHARE", &c.NetShare, netshare.MaxShare}} {
		v := strings.TrimSpace(env.String(f.name))
		if v == "" {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || x < 0 || x > f.max {
			return c, fmt.Errorf("%s=%q: want a fraction from 0 to %g, or empty for the balancer", f.name, v, f.max)
		}
		*f.to = x
	}
	c.OpenNIC = func(log hclog.Logger) (net.Provider, int, error) { return netshare.OpenNIC(env, log) }
	if dir, err := balance.CacheDir(env); err == nil {
		c.CacheDir = dir
	}
	return c, nil
}

// Host is what the shares need of the communicator (plane.Host has it;
// the net share also asks it for the job secret, netshare.JobAuth).
type Host interface {
	netshare.Host
}

// Env is the plane a list of shares serves.
type Env struct {
	Host      Host
	Dev       *gpu.Device
	N, Me     int
	LaneCount int                            // copy lanes toward each peer
	Lanes     func(peer int) linkshare.Lanes // the copy lanes toward peer (after New: the plane makes them later)
	Count     func(share, bytes int)         // bytes staged over share k of the list (LinkShares)
	Trace     func(linkshare.Trace)          // nil: none
}

// Set is the list of shares a plane drives, in order (the first takes the
// tail of each push), and the PCIe settings as resolved, which the flag
// kernels' PCIe part reads too (collectives/flagplane).
type Set struct {
	List []linkshare.Share
	PCIe pcieshare.Settings
}

// New is the plane's list of shares for cfg: the PCIe share (off inside
// when FLEXLINK_LINKS leaves pcie out or the staging is 0), then the net
// share when FLEXLINK_LINKS names net.
func New(env Env, cfg Config) (*Set, error) {
	st, kinds, err := pcieSettings(cfg)
	if err != nil {
		return nil, err
	}
	px := pcieshare.New(pcieshare.Config{Settings: st, Host: env.Host, Dev: env.Dev, N: env.N, Me: env.Me,
		LaneCount: env.LaneCount, Lanes: env.Lanes, Count: func(n int) { env.Count(0, n) }, Trace: env.Trace})
	set := &Set{List: []linkshare.Share{px}, PCIe: st}
	named := false
	for _, k := range strings.Split(cfg.Links, ",") {
		named = named || fabric.Kind(strings.ToLower(strings.TrimSpace(k))) == fabric.KindNet
	}
	if !named || cfg.OpenNIC == nil {
		return set, nil // an empty FLEXLINK_LINKS keeps the net share off
	}
	if !kinds[fabric.KindNVLink] || !kinds[fabric.KindPCIe] {
		return nil, fmt.Errorf("FLEXLINK_LINKS=%q names net without nvlink and pcie: the direct GPU path's net part rides with the pcie share (name nvlink,pcie,net, or set FLEXLINK_GPU_PATH=staged)",
			cfg.Links)
	}
	if cfg.StagingBytes == 0 {
		return set, nil // no PCIe staging: no pair has a planner for the net part
	}
	k := len(set.List)
	nx := netshare.New(netshare.Config{Host: env.Host, Dev: env.Dev, N: env.N, Me: env.Me, PCIe: px, Fixed: cfg.NetShare,
		Staging: pcie.RoundStaging(cfg.StagingBytes), OpenNIC: cfg.OpenNIC, Count: func(n int) { env.Count(k, n) }})
	px.Rider = func() *balance.LinkSpec { sp := nx.LinkSpec(); return &sp }
	set.List = append(set.List, nx)
	return set, nil
}

// pcieSettings reads FLEXLINK_LINKS, FLEXLINK_PCIE_STAGING_BYTES and
// FLEXLINK_PCIE_SHARE, and returns the link kinds FLEXLINK_LINKS keeps.
// The PCIe share is on unless FLEXLINK_LINKS names link kinds and pcie is
// not among them, or the staging size is 0.
func pcieSettings(cfg Config) (pcieshare.Settings, map[fabric.Kind]bool, error) {
	st := pcieshare.Settings{Fixed: cfg.PCIeShare, MinSlot: pcie.MinSlot, CacheDir: cfg.CacheDir}
	kinds, err := namedKinds(cfg.Links)
	if err != nil {
		return st, nil, err
	}
	if kinds[fabric.KindPCIe] && !kinds[fabric.KindNVLink] {
		return st, nil, fmt.Errorf("FLEXLINK_LINKS=%q names pcie without nvlink: the direct GPU path adds pcie to nvlink (name both, or set FLEXLINK_GPU_PATH=staged)",
			cfg.Links)
	}
	if kinds[fabric.KindPCIe] {
		st.Staging = pcie.RoundStaging(cfg.StagingBytes)
	}
	return st, kinds, nil
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
