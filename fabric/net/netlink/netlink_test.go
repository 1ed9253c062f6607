package netlink_test

import (
	"fmt"
	"testing"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/net/netlink"
	"github.com/flexlink/flexlink/fabric/net/tcp"
	"github.com/flexlink/flexlink/fabric/net/ucx/ucxtest"
)

func endpoint(t testing.TB, rank int, socks int) fabric.Endpoint {
	t.Helper()
	p, err := tcp.New(tcp.Options{IfName: "lo", Sockets: socks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	e, err := netlink.NewEndpoint(p, 0, rank)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestConformance runs the link suite on links over the tcp provider, each
// rank with its own provider (as two hosts would have).
func TestConformance(t *testing.T) {
	for _, socks := range []int{1, 2} {
		t.Run(fmt.Sprintf("sockets=%d", socks), func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (fabric.Link, fabric.Link) {
				return linktest.ConnectPair(t, endpoint(t, 0, socks), endpoint(t, 1, socks))
			})
		})
	}
}

func TestProps(t *testing.T) {
	a, b := linktest.ConnectPair(t, endpoint(t, 0, 2), endpoint(t, 1, 2))
	defer a.Close()
	defer b.Close()
	if p := a.Props(); p.Kind != fabric.KindNet || p.Desc == "" {
		t.Fatalf("props %+v: want kind net and a description", p)
	}
}

// TestConformanceUCX runs the link suite on links over the ucx provider
// (UCX's tcp transport on loopback), each rank with its own provider.
func TestConformanceUCX(t *testing.T) {
	ep := func(t *testing.T, rank int) fabric.Endpoint {
		p, dev := ucxtest.Loopback(t)
		e, err := netlink.Open(p, dev, netlink.Config{Rank: rank, Host: fmt.Sprintf("host%d", rank), Secret: []byte("s")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	linktest.Run(t, func(t *testing.T) (fabric.Link, fabric.Link) {
		return linktest.ConnectPair(t, ep(t, 0), ep(t, 1))
	})
}
