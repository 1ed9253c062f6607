// Command flexinfo shows a host's topology as flexlink sees it: an
// `nvidia-smi topo -m` style matrix of GPUs and NICs with CPU and NUMA
// affinity, the devices, the links between every GPU pair with their
// nominal bandwidth, and the NICs' rails. It detects the local host, or
// reads a topology file (--topo: flexlink JSON/YAML or NCCL XML), and can
// write JSON, YAML, Graphviz, SVG and PNG.
//
//	flexinfo                       # this host
//	flexinfo --topo dgx1.xml --json
//	flexinfo --topo t.json --svg t.svg --png t.png
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/flexlink/flexlink/fabric/topo"
	"github.com/flexlink/flexlink/internal/settings"
)

func main() {
	if err := newApp(os.Stdout, settings.OS()).Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "flexinfo:", err)
		os.Exit(1)
	}
}

// newApp builds the command; out receives the report, env is the
// environment (FLEXLINK_TOPO_FILE, FLEXLINK_TOPO_DUMP_FILE, FLEXLINK_RAILS).
func newApp(out io.Writer, env settings.Env) *cli.App {
	return &cli.App{
		Name:      "flexinfo",
		Usage:     "show the GPU, NIC, NVLink and PCIe topology of this host (or of a topology file)",
		Writer:    out,
		ErrWriter: out,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "topo", Usage: "read this topology file (flexlink JSON/YAML, or NCCL_TOPO_FILE XML) instead of detecting"},
			&cli.StringFlag{Name: "sysfs", Value: "/sys", Usage: "sysfs root to detect from", Hidden: true},
			&cli.BoolFlag{Name: "json", Usage: "print the topology as JSON"},
			&cli.BoolFlag{Name: "yaml", Usage: "print the topology as YAML"},
			&cli.BoolFlag{Name: "dot", Usage: "print the topology as a Graphviz graph"},
			&cli.StringFlag{Name: "svg", Usage: "draw the topology into this SVG file"},
			&cli.StringFlag{Name: "png", Usage: "draw the topology into this PNG file"},
		},
		HideHelpCommand: true,
		Commands:        []*cli.Command{routesCommand(out, env), netCommand(out, env)},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("unexpected argument %q", c.Args().First())
			}
			h, err := load(c.String("topo"), c.String("sysfs"), env)
			if err != nil {
				return err
			}
			return show(c, out, h)
		},
	}
}

// load reads the --topo file (applying FLEXLINK_RAILS), or takes the
// local topology as a rank would (FLEXLINK_TOPO_FILE, detection,
// FLEXLINK_TOPO_DUMP_FILE).
func load(file, sysRoot string, env settings.Env) (*topo.Host, error) {
	if file == "" {
		return topo.Local(env, topo.Options{SysRoot: sysRoot})
	}
	h, err := topo.Load(file)
	if err != nil {
		return nil, err
	}
	rails, err := topo.RailsFromEnv(env)
	if err != nil {
		return nil, err
	}
	if len(rails) > 0 {
		if err := topo.AssignRails(h, rails); err != nil {
			return nil, fmt.Errorf("FLEXLINK_RAILS: %w", err)
		}
	}
	return h, nil
}

func show(c *cli.Context, out io.Writer, h *topo.Host) error {
	wrote := false
	if p := c.String("svg"); p != "" {
		if err := os.WriteFile(p, []byte(svg(layout(h))), 0o644); err != nil {
			return err
		}
		wrote = true
	}
	if p := c.String("png"); p != "" {
		b, err := pngBytes(layout(h))
		if err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
		wrote = true
	}
	switch {
	case c.Bool("json"):
		return writeEncoded(out, h.JSON)
	case c.Bool("yaml"):
		return writeEncoded(out, h.YAML)
	case c.Bool("dot"):
		_, err := io.WriteString(out, dot(h))
		return err
	case wrote:
		return nil
	}
	return writeReport(out, h)
}

// writeEncoded writes what encode returns to out.
func writeEncoded(out io.Writer, encode func() ([]byte, error)) error {
	b, err := encode()
	if err != nil {
		return err
	}
	_, err = out.Write(b)
	return err
}
