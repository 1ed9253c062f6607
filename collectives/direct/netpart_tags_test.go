package direct

import (
	"testing"

	"github.com/flexlink/flexlink/fabric/net/ucx/ucxtest"
	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestGPUFakeNetUCX: the net part's tags fit the 20 bits the ucx provider
// carries (it refuses wider ones), so the GPU plane's net share runs over
// ucx (UCX's tcp transport on loopback): collectives with a fixed net share
// are exact and stage bytes over the net part.
func TestGPUFakeNetUCX(t *testing.T) {
	ucxtest.Loopback(t) // skips where libucp is missing; UCX_TLS=tcp, UCX_NET_DEVICES=lo
	const staging = 64 << 20
	env := netEnv(map[string]string{"FLEXLINK_NET": "ucx", "FLEXLINK_GPU_CHUNK_BYTES": "65536",
		"FLEXLINK_PCIE_SHARE": "0.08", "FLEXLINK_GPU_NET_SHARE": "0.25", "FLEXLINK_PCIE_STAGING_BYTES": "67108864"})
	rs := fakeRanks(t, 2, gpufake.Config{}, env, 2*fakeBig*8)
	for _, r := range rs {
		if name := r.dc.Plane().(*directPlane).nx().Provider().Name(); name != "ucx" {
			t.Fatalf("rank %d: the net part runs over %s, want ucx", r.c.Rank(), name)
		}
	}
	var pcieLog, netLog splitLog
	pcieLog.attach(rs, 4096)
	netLog.attachNet(rs, 4096)
	sweep(t, rs, devCases(2, fakeBig))
	if staged := netLog.check(t, 0.25, staging); staged == 0 {
		t.Fatal("net share 0.25 over ucx: nothing staged")
	}
}
