package launcher

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/ports"
)

// TestFreePortRange: MASTER_PORT comes from the top of
// FLEXLINK_PORT_RANGE's range and is never the bootstrap's port; a range
// holding only the bootstrap's port is exhausted, with the error naming
// the variable.
func TestFreePortRange(t *testing.T) {
	r := ports.Range{First: 31030, Last: 31034}
	p, err := freePort("127.0.0.1:31034", r)
	if err != nil {
		t.Fatal(err)
	}
	if p != 31033 { // the range's top but the bootstrap's (this test's ports are its own)
		t.Errorf("MASTER_PORT %d, want 31033: the top of %v other than the bootstrap's 31034", p, r)
	}
	one := ports.Range{First: 31035, Last: 31035}
	// the bootstrap holds the range's only port (or another process does)
	if held, err := one.Listen(t.Context(), "tcp", "127.0.0.1"); err == nil {
		defer held.Close()
	}
	_, err = freePort("127.0.0.1:31035", one)
	if !errors.Is(err, ports.ErrExhausted) || !strings.Contains(err.Error(), "FLEXLINK_PORT_RANGE=31035-31035") || !strings.Contains(err.Error(), "MASTER_PORT") {
		t.Errorf("freePort in a range the bootstrap fills: %v, want ErrExhausted naming MASTER_PORT and the range", err)
	}
}

// TestFreePortBelowEphemeral: without a range, MASTER_PORT is a free port
// below the kernel's ephemeral range, where no other process's bind(0) or
// connect can take it between flexrun's check and torch's bind.
func TestFreePortBelowEphemeral(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatalf("the kernel's ephemeral range: %v", err)
	}
	lo, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		p, err := freePort("127.0.0.1:1", ports.Range{})
		if err != nil {
			t.Fatal(err)
		}
		if p >= lo || p < lo/2 {
			t.Errorf("MASTER_PORT %d, want one in [%d, %d), below the ephemeral range", p, lo/2, lo)
		}
	}
}
