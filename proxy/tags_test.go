package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/nettest"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestTagWidth: the proxy's tags (ranks, clear-to-send, hello) need 20
// bits, the ucx provider's width. Over a tcp provider narrowed to 20 bits
// (it refuses wider tags, as ucx does), a relayed all-to-all delivers
// every byte; over 19 bits New refuses with an error naming the proxy,
// the setting and the provider's width.
func TestTagWidth(t *testing.T) {
	narrowTCP := func(bits int) func(*testing.T) (net.Provider, int) {
		return func(t *testing.T) (net.Provider, int) {
			p, dev := openTCP(t)
			return nettest.Narrow(p, bits), dev
		}
	}
	for _, bits := range []int{64, 20, 19, 8} {
		t.Run(fmt.Sprintf("%dbits", bits), func(t *testing.T) {
			if bits >= 20 {
				j := newJobOn(t, 2, 2, railVia(2), 1000, narrowTCP(bits))
				tot := sum(j.run(t, unevenLengths(4, 3000, uint64(bits))))
				if tot.Received != tot.Messages || tot.Relayed == 0 {
					t.Fatalf("%d messages sent, %d received, %d relayed; want all received, some relayed", tot.Messages, tot.Received, tot.Relayed)
				}
				return
			}
			p, dev := narrowTCP(bits)(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := New(ctx, Config{Rank: 0, Hosts: []string{"host0", "host1"}, Via: directVia, Local: fakeLocal{},
				Provider: p, Dev: dev, Dir: nil, Key: "pxn/test/", Auth: Auth{Secret: testSecret, JobID: "job"}})
			if !errors.Is(err, errs.ErrNotSupported) || !strings.Contains(err.Error(), "FLEXLINK_PXN") ||
				!strings.Contains(err.Error(), fmt.Sprintf("carries %d bits", bits)) {
				t.Fatalf("New over a %d-bit provider: %v; want ErrNotSupported naming FLEXLINK_PXN and the width", bits, err)
			}
		})
	}
}
