package shares

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/fabric/pcieshare"
	"github.com/flexlink/flexlink/internal/settings"
)

type testHost struct{}

func (testHost) Log() hclog.Logger        { return hclog.NewNullLogger() }
func (testHost) Host() string             { return "fakehost" }
func (testHost) PeerHost(int) string      { return "fakehost" }
func (testHost) Name() string             { return "test" }
func (testHost) ID() uint64               { return 7 }
func (testHost) JobErr() error            { return nil }
func (testHost) JobDone() <-chan struct{} { return nil }

// TestNew: the list a plane gets for FLEXLINK_LINKS and the staging size:
// the PCIe share always first (off inside when pcie is not named or the
// staging is 0), the net share second only when net is named with nvlink
// and pcie and there is staging; naming net or pcie without what they ride
// on is an error naming the variable.
func TestNew(t *testing.T) {
	nic := func(hclog.Logger) (net.Provider, int, error) { return nil, 0, nil } // never called: New opens nothing
	for _, tc := range []struct {
		links   string
		staging int
		want    []fabric.Kind
		pcieOn  bool
		err     string
	}{
		{"", 64 << 20, []fabric.Kind{fabric.KindPCIe}, true, ""},
		{"nvlink", 64 << 20, []fabric.Kind{fabric.KindPCIe}, false, ""},
		{"nvlink,pcie", 0, []fabric.Kind{fabric.KindPCIe}, false, ""},
		{"nvlink,pcie,net", 64 << 20, []fabric.Kind{fabric.KindPCIe, fabric.KindNet}, true, ""},
		{" NET ,nvlink,pcie", 64 << 20, []fabric.Kind{fabric.KindPCIe, fabric.KindNet}, true, ""},
		{"nvlink,pcie,net", 0, []fabric.Kind{fabric.KindPCIe}, false, ""},
		{"nvlink,net", 64 << 20, nil, false, `FLEXLINK_LINKS="nvlink,net" names net without nvlink and pcie`},
		{"pcie", 64 << 20, nil, false, `FLEXLINK_LINKS="pcie" names pcie without nvlink`},
		{"nvlink,nic", 64 << 20, nil, false, "gpu links"},
	} {
		set, err := New(Env{Host: testHost{}, N: 2, Me: 0, Count: func(int, int) {}},
			Config{Links: tc.links, StagingBytes: tc.staging, PCIeShare: -1, NetShare: -1, OpenNIC: nic})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("FLEXLINK_LINKS=%q: %v, want an error containing %s", tc.links, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("FLEXLINK_LINKS=%q: %v", tc.links, err)
		}
		var got []fabric.Kind
		for _, sh := range set.List {
			got = append(got, sh.Kind())
		}
		if len(got) != len(tc.want) || len(got) > 0 && got[0] != tc.want[0] || len(got) > 1 && got[1] != tc.want[1] {
			t.Errorf("FLEXLINK_LINKS=%q staging %d: shares %v, want %v", tc.links, tc.staging, got, tc.want)
		}
		if on := set.PCIe.Staging > 0; on != tc.pcieOn {
			t.Errorf("FLEXLINK_LINKS=%q staging %d: pcie staging %d, want on %v", tc.links, tc.staging, set.PCIe.Staging, tc.pcieOn)
		}
		if len(got) > 1 {
			if sp := set.List[1].Spec(); !sp.Rides || sp.Staging != pcie.RoundStaging(tc.staging) {
				t.Errorf("FLEXLINK_LINKS=%q: net spec %+v, want riding with pcie's staging", tc.links, sp)
			}
			if set.List[0].(*pcieshare.Share).Rider == nil {
				t.Errorf("FLEXLINK_LINKS=%q: the pcie pairs have no rider link for their planners", tc.links)
			}
		}
	}
}

// TestReadConfig: the shares' settings and their checks, each error
// naming the variable.
func TestReadConfig(t *testing.T) {
	c, err := ReadConfig(settings.Map(map[string]string{"FLEXLINK_LINKS": "nvlink,pcie,net", "FLEXLINK_PCIE_SHARE": "0.25"}))
	if err != nil || c.Links != "nvlink,pcie,net" || c.PCIeShare != 0.25 || c.NetShare != -1 || c.OpenNIC == nil || c.StagingBytes <= 0 {
		t.Fatalf("config %+v, %v", c, err)
	}
	for env, want := range map[string]string{
		"FLEXLINK_PCIE_SHARE=0.6":         "FLEXLINK_PCIE_SHARE",
		"FLEXLINK_GPU_NET_SHARE=x":        "FLEXLINK_GPU_NET_SHARE",
		"FLEXLINK_PCIE_STAGING_BYTES=100": "FLEXLINK_PCIE_STAGING_BYTES=100",
	} {
		k, v, _ := strings.Cut(env, "=")
		if _, err := ReadConfig(settings.Map(map[string]string{k: v})); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", env, err, want)
		}
	}
}
