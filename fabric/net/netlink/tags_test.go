package netlink_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/net/netlink"
	"github.com/flexlink/flexlink/fabric/net/nettest"
	"github.com/flexlink/flexlink/fabric/net/tcp"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestTagWidth: netlink's tags (header, data, hello and its confirmation) need 2
// bits (tags 1 to 3). Over a provider that carries 2 bits and refuses wider tags
// (nettest.Narrow), links connect and move data; over one of 1 bit, Open
// refuses with an error naming netlink, the bits and the provider.
func TestTagWidth(t *testing.T) {
	for _, c := range []struct {
		bits int
		ok   bool
	}{{64, true}, {20, true}, {2, true}, {1, false}} {
		t.Run(fmt.Sprintf("%dbits", c.bits), func(t *testing.T) {
			open := func(rank int) (*netlink.Endpoint, error) {
				p, err := tcp.New(tcp.Options{IfName: "lo", Sockets: 1})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				return netlink.Open(nettest.Narrow(p, c.bits), 0, netlink.Config{Rank: rank, Host: fmt.Sprint("host", rank), Secret: []byte("s")})
			}
			e0, err := open(0)
			if !c.ok {
				if !errors.Is(err, errs.ErrNotSupported) || !strings.Contains(err.Error(), "netlink") || !strings.Contains(err.Error(), "carries 1 bits") {
					t.Fatalf("open over a 1-bit provider: %v; want ErrNotSupported naming netlink and the width", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer e0.Close()
			e1, err := open(1)
			if err != nil {
				t.Fatal(err)
			}
			defer e1.Close()
			a, b := linktest.ConnectPair(t, e0, e1)
			defer a.Close()
			defer b.Close()
			for i, n := range []int{0, 5, 70000} {
				msg := make([]byte, n)
				for k := range msg {
					msg[k] = byte(k*7 + i)
				}
				got := make([]byte, n)
				r := b.Recv(linktest.TagOf(i), got)
				linktest.AwaitOK(t, a.Send(linktest.TagOf(i), msg), "send")
				linktest.AwaitOK(t, r, "recv")
				if string(got) != string(msg) {
					t.Fatalf("message %d of %d bytes arrived changed", i, n)
				}
			}
		})
	}
}
