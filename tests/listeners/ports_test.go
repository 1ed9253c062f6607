package listeners

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/ports"
)

// TestPortRangeJob runs the 4-rank job of TestForeignConnections (two
// emulated hosts, tcp on loopback across them, shm within, PXN on) with
// flexrun --port-range, and checks in /proc, once every rank has run a
// checked round (every listener open), that every TCP listener of flexrun
// and of each rank (bootstrap, netlink, PXN proxy) is on a port of the
// range; the job then finishes with #wrong 0.
func TestPortRangeJob(t *testing.T) {
	r := ports.Range{First: 31100, Last: 31139}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	j := startJob(ctx, t, jobSpec{timeout: "2m", wait: "90s", iters: 1, flags: []string{"--port-range", r.String()}})
	ls := j.inventory(t)
	tcpListeners := 0
	for _, l := range ls {
		if l.net != "tcp" {
			continue
		}
		tcpListeners++
		_, p, err := net.SplitHostPort(l.addr)
		port, _ := strconv.Atoi(p)
		if err != nil || !r.Contains(port) {
			t.Errorf("%s: not on a port of --port-range %v", l, r)
		}
	}
	t.Logf("%d TCP listeners, every one in %v", tcpListeners, r)

	j.finish(t)
}
