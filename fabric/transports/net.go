package transports

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/tcp"
	"github.com/flexlink/flexlink/fabric/net/ucx"
	"github.com/flexlink/flexlink/internal/ports"
	"github.com/flexlink/flexlink/internal/settings"
)

// NetConfig selects and configures the process's network provider.
type NetConfig struct {
	Provider  string        // FLEXLINK_NET: tcp, ucx or auto
	IfName    string        // FLEXLINK_NET_IFNAME
	Sockets   int           // FLEXLINK_NET_SOCKETS
	StripeMin int           // FLEXLINK_NET_STRIPE_BYTES
	Timeout   time.Duration // FLEXLINK_NET_TIMEOUT
	Rails     int           // FLEXLINK_NET_RAILS (0, from all: every NIC)
	Devices   string        // FLEXLINK_NET_DEVICES ("": every NIC, or the own one under PXN)
	PXN       int           // FLEXLINK_PXN: -1 off, 0, 1 or 2 (levels of proxy/pxn)
	Ports     ports.Range   // FLEXLINK_PORT_RANGE: the tcp provider's listeners (ucx reads it from env)
}

// ReadNetConfig reads and checks the network settings.
func ReadNetConfig(env settings.Env) (NetConfig, error) {
	c := NetConfig{Provider: env.String("FLEXLINK_NET"), IfName: env.String("FLEXLINK_NET_IFNAME"), Devices: env.String("FLEXLINK_NET_DEVICES"), PXN: -1}
	switch v := env.String("FLEXLINK_PXN"); v {
	case "", "off":
	case "0", "1", "2":
		c.PXN = int(v[0] - '0')
	default:
		return c, fmt.Errorf("FLEXLINK_PXN=%q: want off, 0, 1 or 2", v)
	}
	if c.IfName == "" {
		c.IfName = env.String("FLEXLINK_SOCKET_IFNAME")
	}
	switch c.Provider {
	case "tcp", "ucx", "auto":
	default:
		return c, fmt.Errorf("FLEXLINK_NET=%q: want tcp, ucx or auto", c.Provider)
	}
	for _, i := range []struct {
		name   string
		to     *int
		lo, hi int
	}{
		{"FLEXLINK_NET_SOCKETS", &c.Sockets, 1, 64},
		{"FLEXLINK_NET_STRIPE_BYTES", &c.StripeMin, 1, 1 << 30},
		{"FLEXLINK_NET_RAILS", &c.Rails, 0, 64},
	} {
		if i.name == "FLEXLINK_NET_RAILS" && strings.TrimSpace(env.String(i.name)) == "all" {
			*i.to = 0 // every NIC
			continue
		}
		v, err := env.Int(i.name)
		if err != nil {
			return c, err
		}
		if v < i.lo || v > i.hi {
			return c, fmt.Errorf("%s=%d: want %d to %d", i.name, v, i.lo, i.hi)
		}
		*i.to = v
	}
	d, err := env.Duration("FLEXLINK_NET_TIMEOUT")
	if err != nil {
		return c, err
	}
	if d <= 0 {
		return c, fmt.Errorf("FLEXLINK_NET_TIMEOUT=%v: want a positive duration such as 10s", d)
	}
	c.Timeout = d
	c.Ports, err = env.Ports()
	return c, err
}

// rdmaDevices reports whether the host has RDMA devices (where UCX's verbs
// transports beat the tcp provider).
func rdmaDevices() bool {
	es, err := os.ReadDir("/sys/class/infiniband")
	return err == nil && len(es) > 0
}

// OpenNet opens the provider c names. auto takes UCX where libucp loads and
// an RDMA device exists (UCX's tcp transport measured at half the tcp
// provider's throughput here, docs/UCX.md), else tcp, and logs one INFO
// line saying which and why. The provider is the process's: close it when
// the world communicator closes.
func OpenNet(c NetConfig, env settings.Env, log hclog.Logger) (net.Provider, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	openTCP := func() (net.Provider, error) {
		return tcp.New(tcp.Options{IfName: c.IfName, Sockets: c.Sockets, StripeMin: c.StripeMin, Timeout: c.Timeout, Logger: log,
			BindSource: c.PXN >= 0 || c.Devices != "", // a rank's own NIC sends, even across rails
			Ports:      c.Ports})
	}
	switch c.Provider {
	case "tcp":
		return openTCP()
	case "ucx":
		p, err := ucx.Open(ucx.Options{Env: env})
		if err != nil {
			return nil, fmt.Errorf("FLEXLINK_NET=ucx: %w", err)
		}
		return p, nil
	}
	if !rdmaDevices() {
		log.Info("network transport: tcp provider", "why", "no RDMA device in /sys/class/infiniband (FLEXLINK_NET=ucx forces UCX)")
		return openTCP()
	}
	p, err := ucx.Open(ucx.Options{Env: env})
	if err != nil {
		log.Info("network transport: tcp provider", "why", "UCX did not load: "+err.Error())
		return openTCP()
	}
	log.Info("network transport: ucx provider", "why", "RDMA devices present and libucp loaded")
	return p, nil
}
