// Package ports is FLEXLINK_PORT_RANGE: the TCP ports a job's listeners
// may take, so that a cluster's firewall can let exactly those through.
// Every TCP listener of a job (flexrun's bootstrap server and MASTER_PORT,
// the C library's rendezvous, the tcp provider's listeners and the ucx
// provider's side channel) takes the first free port of the range, in
// order; several ranks on one host share the range that way. The zero
// Range leaves the choice to the kernel (ephemeral ports), the default.
package ports

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
)

// Setting is the variable that holds the range.
const Setting = "FLEXLINK_PORT_RANGE"

// ErrExhausted is wrapped by Listen's error when every port of the range
// is taken.
var ErrExhausted = errors.New("every port of the range is taken")

// Range is the ports First to Last, both included; the zero Range means
// ephemeral ports.
type Range struct {
	First, Last int
}

// Parse reads a range written "FIRST-LAST" (50000-50100) or as one port
// (50000), with 1 ≤ FIRST ≤ LAST ≤ 65535; "" is the zero Range.
func Parse(v string) (Range, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return Range{}, nil
	}
	lo, hi, dash := strings.Cut(v, "-")
	if !dash {
		hi = lo
	}
	first, err1 := strconv.Atoi(strings.TrimSpace(lo))
	last, err2 := strconv.Atoi(strings.TrimSpace(hi))
	switch {
	case err1 != nil || err2 != nil:
		return Range{}, fmt.Errorf("%q: want FIRST-LAST, two port numbers (50000-50100)", v)
	case first < 1 || last > 65535:
		return Range{}, fmt.Errorf("%q: ports are 1 to 65535", v)
	case first > last:
		return Range{}, fmt.Errorf("%q: the first port is above the last", v)
	}
	return Range{first, last}, nil
}

// IsZero reports whether r is the zero Range (ephemeral ports).
func (r Range) IsZero() bool { return r == Range{} }

// Size is the number of ports in r (0 for the zero Range).
func (r Range) Size() int {
	if r.IsZero() {
		return 0
	}
	return r.Last - r.First + 1
}

// Contains reports whether port is in r (any port is, for the zero Range).
func (r Range) Contains(port int) bool {
	return r.IsZero() || port >= r.First && port <= r.Last
}

// String is r as Parse reads it ("" for the zero Range).
func (r Range) String() string {
	if r.IsZero() {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// Listen listens on network ("tcp", "tcp4") at host ("" or "0.0.0.0": every
// interface) on the first port of r that is free, trying them in order;
// with the zero Range, on an ephemeral port. A port in use is skipped; any
// other failure (the address is not this host's, a privileged port) ends
// the search with its error. When every port is taken the error wraps
// ErrExhausted and names FLEXLINK_PORT_RANGE and the range.
func (r Range) Listen(ctx context.Context, network, host string) (net.Listener, error) {
	return r.listen(ctx, network, host, false)
}

// ListenFromTop is Listen trying the ports from the last down: for a port
// that is reserved and released again (PyTorch's MASTER_PORT), so that it
// is least likely to be the one the job's other listeners take next.
func (r Range) ListenFromTop(ctx context.Context, network, host string) (net.Listener, error) {
	return r.listen(ctx, network, host, true)
}

func (r Range) listen(ctx context.Context, network, host string, down bool) (net.Listener, error) {
	var lc net.ListenConfig
	if r.IsZero() {
		return lc.Listen(ctx, network, net.JoinHostPort(host, "0"))
	}
	for i := range r.Size() {
		port := r.First + i
		if down {
			port = r.Last - i
		}
		l, err := lc.Listen(ctx, network, net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%s=%s: port %d: %w", Setting, r, port, err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("%s=%s: listen on %s: %w (%d ports; widen the range for more ranks per host)",
		Setting, r, hostName(host), ErrExhausted, r.Size())
}

func hostName(host string) string {
	if host == "" {
		return "every interface"
	}
	return host
}
