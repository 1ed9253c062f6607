package ports

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// ephemeralFile holds the kernel's ephemeral port range ("32768	60999").
const ephemeralFile = "/proc/sys/net/ipv4/ip_local_port_range"

// belowTries is how many ports ListenBelowEphemeral tries before it takes
// an ephemeral one.
const belowTries = 64

// ListenBelowEphemeral listens on network at host on a free port below the
// kernel's ephemeral range (net.ipv4.ip_local_port_range), from its lower
// half: for a port that is found free, released, and bound again later by
// another program (PyTorch's MASTER_PORT, which flexrun picks and torch's
// TCPStore binds). An ephemeral port released that way can be given to
// any process's next bind(0) or connect before the program binds it
// (seen under parallel tests: "Address already in use"); the kernel never
// hands out a port below the range on its own. Where the range cannot be
// read, starts too low to leave room, or every port tried is taken, the
// kernel picks an ephemeral port as before.
func ListenBelowEphemeral(ctx context.Context, network, host string) (net.Listener, error) {
	return listenBelow(ctx, network, host, ephemeralLow())
}

// ephemeralLow is the first port of the ephemeral range, 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile(ephemeralFile)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

// listenBelow tries random ports of [lo/2, lo), then an ephemeral port.
func listenBelow(ctx context.Context, network, host string, lo int) (net.Listener, error) {
	var lc net.ListenConfig
	if first := lo / 2; first >= 1024 {
		for range belowTries {
			port := first + rand.IntN(lo-first)
			if l, err := lc.Listen(ctx, network, net.JoinHostPort(host, strconv.Itoa(port))); err == nil {
				return l, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	return lc.Listen(ctx, network, net.JoinHostPort(host, "0"))
}
