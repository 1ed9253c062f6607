package ucx

import (
	"testing"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/nettest"
)

// junk writes garbage to a listener's side channel, as a stray client would.
func junk(t *testing.T, handle, b []byte) {
	h, err := decodeHandle(handle)
	if err != nil {
		t.Fatal(err)
	}
	nettest.JunkTCP(t, h.addr.String(), b)
}

// TestConformance runs the provider suite over UCX's tcp transport on
// loopback.
func TestConformance(t *testing.T) {
	t.Setenv("UCX_TLS", "tcp")
	t.Setenv("UCX_NET_DEVICES", "lo")
	nettest.Run(t, func(t *testing.T) fnet.Provider { return open(t) }, nettest.Junk(junk))
}
