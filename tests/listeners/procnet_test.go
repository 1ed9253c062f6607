package listeners

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// listener is one listening socket of a job's process, found in /proc
// as any process of the same user could find it: no help from the job.
type listener struct {
	owner string // "flexrun" or "rank R"
	pid   int
	net   string // "tcp" or "unixpacket"/"unix"
	addr  string // "127.0.0.1:41234", or "@name" for an abstract unix socket
}

func (l listener) String() string {
	return fmt.Sprintf("%s %s (%s, pid %d)", l.net, l.addr, l.owner, l.pid)
}

// socketInodes maps the socket inodes pid holds open to true.
func socketInodes(pid int) (map[string]bool, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			out[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	return out, nil
}

// listeners returns every listening TCP and unix socket that the
// processes in owners (pid -> name) hold.
func listeners(owners map[int]string) ([]listener, error) {
	byInode := map[string]listener{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if err := scanTCP(f, byInode); err != nil {
			return nil, err
		}
	}
	if err := scanUnix("/proc/net/unix", byInode); err != nil {
		return nil, err
	}
	var out []listener
	for pid, name := range owners {
		inodes, err := socketInodes(pid)
		if err != nil {
			return nil, fmt.Errorf("%s (pid %d): %w", name, pid, err)
		}
		for ino := range inodes {
			if l, ok := byInode[ino]; ok {
				l.owner, l.pid = name, pid
				out = append(out, l)
			}
		}
	}
	return out, nil
}

// scanTCP adds the LISTEN sockets of a /proc/net/tcp{,6} table.
func scanTCP(path string, into map[string]listener) error {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[3] != "0A" { // 0A: LISTEN
			continue
		}
		ap, err := parseProcAddr(fs[1])
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		into[fs[9]] = listener{net: "tcp", addr: ap.String()}
	}
	return sc.Err()
}

// parseProcAddr reads "0100007F:1F90" (IPv4) or 32 hex digits and a port
// (IPv6): the address as 32-bit words in host (little-endian) order. An
// unspecified address becomes loopback, where the test dials.
func parseProcAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(raw); i += 4 { // each word little-endian
		binary.BigEndian.PutUint32(raw[i:], binary.LittleEndian.Uint32(raw[i:]))
	}
	ip, _ := netip.AddrFromSlice(raw)
	ip = ip.Unmap()
	if ip.IsUnspecified() {
		if ip.Is4() {
			ip = netip.MustParseAddr("127.0.0.1")
		} else {
			ip = netip.IPv6Loopback()
		}
	}
	return netip.AddrPortFrom(ip, uint16(port)), nil
}

// scanUnix adds the listening unix sockets of /proc/net/unix (flag
// __SO_ACCEPTCON, 0x10000) that have a name.
func scanUnix(path string, into map[string]listener) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 {
			continue
		}
		flags, err := strconv.ParseUint(fs[3], 16, 32)
		if err != nil || flags&0x10000 == 0 {
			continue
		}
		kind := "unix"
		if fs[4] == "0005" { // SOCK_SEQPACKET
			kind = "unixpacket"
		}
		into[fs[6]] = listener{net: kind, addr: fs[7]}
	}
	return sc.Err()
}
