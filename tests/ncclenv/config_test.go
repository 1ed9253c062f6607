package ncclenv

import (
	"testing"

	"github.com/flexlink/flexlink/collectives/direct"
	"github.com/flexlink/flexlink/fabric/transports"
	"github.com/flexlink/flexlink/internal/settings"
)

// The components read NCCL's variables through the registry: the GPU
// plane's config and the network transport's, built from an environment
// that sets only NCCL_* names, carry the translated values.
func TestComponentsSeeNCCL(t *testing.T) {
	env := settings.WithNCCL(settings.Map(map[string]string{
		"NCCL_P2P_DISABLE":      "1",
		"NCCL_NET":              "Socket",
		"NCCL_SOCKET_IFNAME":    "=eth0",
		"NCCL_NSOCKS_PERTHREAD": "2",
		"NCCL_SOCKET_NTHREADS":  "4",
		"NCCL_PXN_DISABLE":      "1",
		"NCCL_IB_HCA":           "mlx5_0,mlx5_1:2",
	}))
	gc, err := direct.ReadConfig(env)
	if err != nil {
		t.Fatalf("direct.ReadConfig: %v", err)
	}
	if gc.Path != "staged" {
		t.Errorf("GPU path %q with NCCL_P2P_DISABLE=1, want staged", gc.Path)
	}
	nc, err := transports.ReadNetConfig(env)
	if err != nil {
		t.Fatalf("transports.ReadNetConfig: %v", err)
	}
	want := transports.NetConfig{Provider: "tcp", IfName: "=eth0", Sockets: 8, Devices: "mlx5_0:1,mlx5_1:2", PXN: 0}
	if nc.Provider != want.Provider || nc.IfName != want.IfName || nc.Sockets != want.Sockets || nc.Devices != want.Devices || nc.PXN != want.PXN {
		t.Errorf("net config %+v, want provider, interfaces, sockets, devices and PXN as %+v", nc, want)
	}
	// With no NCCL variable the wrapper changes nothing: the same config
	// as the plain environment's.
	plain, err1 := transports.ReadNetConfig(settings.Map(nil))
	wrapped, err2 := transports.ReadNetConfig(settings.WithNCCL(settings.Map(nil)))
	if err1 != nil || err2 != nil || plain != wrapped {
		t.Errorf("no NCCL variables: %+v (%v) through WithNCCL, %+v (%v) without", wrapped, err2, plain, err1)
	}
}
