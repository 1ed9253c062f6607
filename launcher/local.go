package launcher

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Machine describes the machine flexrun runs on: what the launcher needs to
// know to decide which hosts are this one and how many slots it has.
// Tests build one by hand; LocalMachine inspects the real one.
type Machine struct {
	Hostname string // os.Hostname()
	CPUs     int    // runtime.NumCPU()
	GPUs     int    // see CountGPUs
	// Resolve looks a host name up (net.DefaultResolver with a deadline);
	// nil: names are only compared, never resolved.
	Resolve func(name string) ([]string, error)
	// Addrs lists this machine's interface addresses.
	Addrs func() ([]net.Addr, error)
}

// LocalMachine inspects this machine. environ supplies CUDA_VISIBLE_DEVICES.
func LocalMachine(environ []string) Machine {
	name, _ := os.Hostname()
	return Machine{
		Hostname: name,
		CPUs:     runtime.NumCPU(),
		GPUs:     CountGPUs("/", environ),
		Resolve: func(host string) ([]string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return net.DefaultResolver.LookupHost(ctx, host)
		},
		Addrs: net.InterfaceAddrs,
	}
}

// CountGPUs counts the NVIDIA GPUs under root ("/" normally): the entries
// of /proc/driver/nvidia/gpus, or else the /dev/nvidiaN device nodes. When
// CUDA_VISIBLE_DEVICES is set in environ its entries are counted instead,
// since that is how many devices a rank will see.
func CountGPUs(root string, environ []string) int {
	if v, ok := lookupEnv(environ, "CUDA_VISIBLE_DEVICES"); ok {
		n := 0
		for _, d := range strings.Split(v, ",") {
			if strings.TrimSpace(d) != "" {
				n++
			}
		}
		return n
	}
	if ents, err := os.ReadDir(filepath.Join(root, "proc/driver/nvidia/gpus")); err == nil && len(ents) > 0 {
		return len(ents)
	}
	ents, err := os.ReadDir(filepath.Join(root, "dev"))
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if num, ok := strings.CutPrefix(e.Name(), "nvidia"); ok && num != "" && strings.Trim(num, "0123456789") == "" {
			n++
		}
	}
	return n
}

// DefaultSlots is the local host's slot count when no hosts are given: one
// per GPU, or one per CPU core when there is no GPU.
func (m Machine) DefaultSlots() int {
	if m.GPUs > 0 {
		return m.GPUs
	}
	return max(m.CPUs, 1)
}

// IsLocal reports whether name is this machine: localhost, a loopback
// address, the host name (or its first label), or a name that resolves to a
// loopback address or one of this machine's addresses (which covers the
// fully qualified name).
func (m Machine) IsLocal(name string) bool {
	n := strings.ToLower(strings.TrimSuffix(name, "."))
	host := strings.ToLower(m.Hostname)
	short, _, _ := strings.Cut(host, ".")
	if n == "localhost" || n == host || n == short {
		return true
	}
	if ip := net.ParseIP(n); ip != nil {
		return m.isLocalIP(ip)
	}
	if m.Resolve == nil {
		return false
	}
	addrs, err := m.Resolve(name)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if ip := net.ParseIP(a); ip != nil && m.isLocalIP(ip) {
			return true
		}
	}
	return false
}

// isLocalIP reports whether ip is a loopback address or one of this
// machine's interface addresses.
func (m Machine) isLocalIP(ip net.IP) bool {
	if ip.IsLoopback() {
		return true
	}
	if m.Addrs == nil {
		return false
	}
	mine, err := m.Addrs()
	if err != nil {
		return false
	}
	for _, a := range mine {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// Hosts folds every name of this machine into one host (the slots of all
// its names add up, at the position of its first name) marked Local and
// carrying this machine's GPU count; other hosts are kept as they are, in
// order. With no hosts it returns this machine with DefaultSlots.
func (m Machine) Hosts(hosts []Host) []Host {
	if len(hosts) == 0 {
		return []Host{{Name: m.Hostname, Slots: m.DefaultSlots(), GPUs: m.GPUs, Local: true}}
	}
	out := make([]Host, 0, len(hosts))
	local := -1
	for _, h := range hosts {
		if !m.IsLocal(h.Name) {
			out = append(out, h)
			continue
		}
		if local < 0 {
			local = len(out)
			h.Local, h.GPUs = true, m.GPUs
			out = append(out, h)
			continue
		}
		merged := addHost([]Host{{Name: h.Name, Slots: out[local].Slots, MaxSlots: out[local].MaxSlots}}, h)[0]
		out[local].Slots, out[local].MaxSlots = merged.Slots, merged.MaxSlots
	}
	return out
}

// lookupEnv finds key in a KEY=value list; the last setting wins.
func lookupEnv(environ []string, key string) (string, bool) {
	for i := len(environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(environ[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}
