package topo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"

	"github.com/flexlink/flexlink/internal/bounded"
)

// Parse reads a topology in any supported format, told apart by content:
// NCCL XML starts with '<', our JSON with '{', anything else is our YAML.
// The JSON and YAML field names are the json tags of Host.
func Parse(data []byte) (*Host, error) {
	t := bytes.TrimSpace(data)
	var h *Host
	var err error
	switch {
	case len(t) == 0:
		return nil, fmt.Errorf("topology: empty")
	case t[0] == '<':
		h, err = ParseNCCLXML(t)
	case t[0] == '{':
		h = &Host{}
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.DisallowUnknownFields()
		if err = dec.Decode(h); err != nil {
			err = fmt.Errorf("topology json: %w", err)
		}
	default:
		h, err = parseYAML(t)
	}
	if err != nil {
		return nil, err
	}
	if h.GPUs == nil {
		h.GPUs = []GPU{}
	}
	if h.NICs == nil {
		h.NICs = []NIC{}
	}
	if err := h.Validate(); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	if err := AssignRails(h, nil); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	return h, nil
}

// parseYAML reads YAML by way of JSON, so both formats share one set of
// field names and the unknown-value defaults of the JSON decoders.
func parseYAML(data []byte) (*Host, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("topology yaml: %w", err)
	}
	j, err := json.Marshal(stringKeys(v))
	if err != nil {
		return nil, fmt.Errorf("topology yaml: %w", err)
	}
	h := &Host{}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(h); err != nil {
		return nil, fmt.Errorf("topology yaml: %w", err)
	}
	return h, nil
}

// stringKeys turns YAML maps with non-string keys (p2p: {1: ok}) into
// maps JSON can encode.
func stringKeys(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = stringKeys(e)
		}
		return t
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[fmt.Sprint(k)] = stringKeys(e)
		}
		return m
	case []any:
		for i, e := range t {
			t[i] = stringKeys(e)
		}
	}
	return v
}

// Load reads a topology file (JSON, YAML or NCCL XML).
func Load(path string) (*Host, error) {
	data, err := bounded.ReadFile(path, bounded.TopologyFile)
	if err != nil {
		return nil, fmt.Errorf("load topology: %w", err)
	}
	h, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("load topology %s: %w", path, err)
	}
	h.Source = path
	return h, nil
}

// JSON renders the topology as indented JSON.
func (h *Host) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// YAML renders the topology as YAML, with the JSON field names.
func (h *Host) YAML() ([]byte, error) {
	j, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(j, &n); err != nil {
		return nil, err
	}
	blockStyle(&n)
	return yaml.Marshal(&n)
}

// blockStyle drops the flow (JSON-like) style and quoting that the YAML
// decoder keeps from JSON input; the encoder still quotes a string that
// would otherwise read as a number or boolean.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// Dump writes the topology to path: YAML for .yaml/.yml, JSON otherwise.
// NCCL XML output is not supported.
func Dump(path string, h *Host) error {
	var b []byte
	var err error
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		b, err = h.YAML()
	case ".xml":
		return fmt.Errorf("dump topology %s: NCCL XML output: %w", path, errs.ErrNotSupported)
	default:
		b, err = h.JSON()
	}
	if err != nil {
		return fmt.Errorf("dump topology %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("dump topology: %w", err)
	}
	return nil
}

// Local returns this host's topology as the settings ask: loaded from
// FLEXLINK_TOPO_FILE when set (renamed to this host, since one file may
// serve every host of a job), detected otherwise; rails from FLEXLINK_RAILS
// when set; and written to FLEXLINK_TOPO_DUMP_FILE when set.
func Local(env settings.Env, opt Options) (*Host, error) {
	var h *Host
	var err error
	if f := env.String("FLEXLINK_TOPO_FILE"); f != "" {
		if h, err = Load(f); err != nil {
			return nil, err
		}
		name := opt.Hostname
		if name == "" {
			if name, err = os.Hostname(); err != nil {
				return nil, fmt.Errorf("topology: host name: %w", err)
			}
		}
		if h.Hostname != "" && h.Hostname != name {
			h.Source = fmt.Sprintf("%s (written on %s)", f, h.Hostname)
		}
		h.Hostname = name
	} else if h, err = Detect(opt); err != nil {
		return nil, err
	}
	rails, err := RailsFromEnv(env)
	if err != nil {
		return nil, err
	}
	if len(rails) > 0 {
		if err := AssignRails(h, rails); err != nil {
			return nil, fmt.Errorf("FLEXLINK_RAILS: %w", err)
		}
	}
	if d := env.String("FLEXLINK_TOPO_DUMP_FILE"); d != "" {
		if err := Dump(d, h); err != nil {
			return nil, err
		}
	}
	return h, nil
}
