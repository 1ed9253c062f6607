package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/transports"
	"github.com/flexlink/flexlink/internal/settings"
)

// netCommand is `flexinfo net`: the network transport's NICs on this host as
// a rank would open them (FLEXLINK_NET, FLEXLINK_NET_IFNAME,
// FLEXLINK_NET_DEVICES, FLEXLINK_PXN with FLEXLINK_LOCAL_RANK), with
// their subnets, by which ranks on two hosts pair them.
func netCommand(out io.Writer, env settings.Env) *cli.Command {
	return &cli.Command{
		Name:  "net",
		Usage: "show the network transport's provider and NICs (rails) on this host, as a rank would open them",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			cfg, err := transports.ReadNetConfig(env)
			if err != nil {
				return err
			}
			p, err := transports.OpenNet(cfg, env, nil)
			if err != nil {
				return err
			}
			defer p.Close()
			devs := p.Devices()
			local, _ := env.Int("FLEXLINK_LOCAL_RANK")
			own, err := transports.OwnOf(cfg, env, "", max(local, 0))
			if err != nil {
				return err
			}
			sel, err := transports.SelectDevices(devs, cfg.Devices, own)
			if err != nil {
				return err
			}
			return printNet(out, c.Bool("json"), p.Name(), devs, sel, cfg.Rails)
		},
	}
}

// netDevice is one NIC of the report.
type netDevice struct {
	Rail    int     `json:"rail"` // the device's index; -1: not used (FLEXLINK_NET_DEVICES, FLEXLINK_PXN)
	Name    string  `json:"name"`
	Subnet  string  `json:"subnet,omitempty"`
	PCIPath string  `json:"pci_path,omitempty"`
	GBps    float64 `json:"gbytes_per_s,omitempty"`
	GPU     bool    `json:"reads_gpu_memory"`
}

func printNet(out io.Writer, asJSON bool, provider string, devs []net.Device, sel []int, perPair int) error {
	rows := make([]netDevice, len(devs))
	for i, d := range devs {
		rail := -1
		if slices.Contains(sel, i) {
			rail = i
		}
		rows[i] = netDevice{Rail: rail, Name: d.Name, Subnet: transports.Subnet(d.Name), PCIPath: d.PCIPath, GBps: d.Speed / 1e9, GPU: d.Ptr&net.MemGPU != 0}
	}
	if asJSON {
		return json.NewEncoder(out).Encode(map[string]any{"provider": provider, "devices": rows})
	}
	pairs := "all"
	if perPair > 0 {
		pairs = fmt.Sprint(perPair)
	}
	fmt.Fprintf(out, "network transport: %s provider, %d NIC(s), %d used as rails; two ranks on different hosts pair NICs by subnet, %s at once (FLEXLINK_NET_RAILS)\n", provider, len(devs), len(sel), pairs)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "rail\tnic\tsubnet\tspeed\treads GPU memory\tpci")
	for _, r := range rows {
		rail, speed, pci := "-", "unknown", r.PCIPath
		if r.Rail >= 0 {
			rail = fmt.Sprint(r.Rail)
		}
		if r.GBps > 0 {
			speed = fmt.Sprintf("%.2f GB/s", r.GBps)
		}
		if pci == "" {
			pci = "(virtual)"
		}
		subnet := r.Subnet
		if subnet == "" {
			subnet = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%s\n", rail, r.Name, subnet, speed, r.GPU, pci)
	}
	return w.Flush()
}
