package ports

import (
	"net"
	"testing"
)

// TestListenBelowEphemeral: the port is below the kernel's ephemeral
// range, in its lower half, and listened on; where the range leaves no
// room below it (or is unknown) the kernel's ephemeral port.
func TestListenBelowEphemeral(t *testing.T) {
	lo := ephemeralLow()
	if lo/2 < 1024 {
		t.Fatalf("this machine's ephemeral range starts at %d: no room below it to test", lo)
	}
	for range 5 {
		l, err := ListenBelowEphemeral(t.Context(), "tcp", "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p < lo/2 || p >= lo {
			t.Errorf("port %d, want one in [%d, %d)", p, lo/2, lo)
		}
	}
	for _, low := range []int{0, 2000} {
		l, err := listenBelow(t.Context(), "tcp", "127.0.0.1", low)
		if err != nil {
			t.Fatal(err)
		}
		if p := l.Addr().(*net.TCPAddr).Port; p < lo {
			t.Errorf("a range said to start at %d: port %d, want the kernel's ephemeral one (from %d)", low, p, lo)
		}
		l.Close()
	}
}
