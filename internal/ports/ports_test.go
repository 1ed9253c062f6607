package ports

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Range
		err  string // part of the error; "" for none
	}{
		{"", Range{}, ""},
		{"  ", Range{}, ""},
		{"50000-50100", Range{50000, 50100}, ""},
		{" 50000 - 50100 ", Range{50000, 50100}, ""},
		{"50000", Range{50000, 50000}, ""},
		{"1-65535", Range{1, 65535}, ""},
		{"50100-50000", Range{}, "above the last"},
		{"0-10", Range{}, "1 to 65535"},
		{"65000-65536", Range{}, "1 to 65535"},
		{"-5", Range{}, "FIRST-LAST"},
		{"50000-", Range{}, "FIRST-LAST"},
		{"a-b", Range{}, "FIRST-LAST"},
		{"50000:50100", Range{}, "FIRST-LAST"},
		{"50000-50100-50200", Range{}, "FIRST-LAST"},
	} {
		got, err := Parse(c.in)
		if c.err == "" && (err != nil || got != c.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("Parse(%q) = %v, %v; want an error saying %q", c.in, got, err, c.err)
		}
		if err == nil {
			if back, _ := Parse(got.String()); back != got {
				t.Errorf("Parse(%q).String() = %q does not parse back", c.in, got.String())
			}
		}
	}
}

// freeSpan finds n consecutive ports on loopback that are free now (the
// tests own them from then on, give or take a race with another process
// that the retry covers).
func freeSpan(t *testing.T, n int) Range {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		first := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if first+n-1 > 65535 {
			continue
		}
		ok := true
		for p := first; p < first+n && ok; p++ {
			c, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(p))
			if ok = err == nil; ok {
				c.Close()
			}
		}
		if ok {
			return Range{first, first + n - 1}
		}
	}
	t.Fatalf("no %d consecutive free ports on loopback", n)
	return Range{}
}

// TestListenInOrder: listeners take the range's ports in order, skipping
// one taken by someone else, and the next after the last is refused with
// ErrExhausted naming the variable and the range.
func TestListenInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := freeSpan(t, 4)
	other, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(r.First+1)) // not ours
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var got []int
	for range 3 {
		l, err := r.Listen(ctx, "tcp4", "127.0.0.1")
		if err != nil {
			t.Fatalf("listener %d of a range of 4 with one port taken: %v", len(got), err)
		}
		defer l.Close()
		got = append(got, l.Addr().(*net.TCPAddr).Port)
	}
	if want := []int{r.First, r.First + 2, r.First + 3}; !slices.Equal(got, want) {
		t.Errorf("ports %v, want %v (in order, the taken one skipped)", got, want)
	}
	_, err = r.Listen(ctx, "tcp4", "127.0.0.1")
	if !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "FLEXLINK_PORT_RANGE="+r.String()) {
		t.Errorf("a fifth listener on a range of 4: %v, want ErrExhausted naming FLEXLINK_PORT_RANGE=%s", err, r)
	}
}

// TestListenFromTop takes the last free port first.
func TestListenFromTop(t *testing.T) {
	r := freeSpan(t, 3)
	l, err := r.ListenFromTop(context.Background(), "tcp4", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if p := l.Addr().(*net.TCPAddr).Port; p != r.Last {
		t.Errorf("port %d, want the range's last, %d", p, r.Last)
	}
}

// TestListenEphemeral: the zero Range listens on a port the kernel picks.
func TestListenEphemeral(t *testing.T) {
	l, err := Range{}.Listen(context.Background(), "tcp4", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Addr().(*net.TCPAddr).Port == 0 {
		t.Error("no port")
	}
}

// TestListenOtherError: a failure other than a taken port (an address
// that is not this host's) is reported at once, naming the setting.
func TestListenOtherError(t *testing.T) {
	r := Range{50000, 50100}
	_, err := r.Listen(context.Background(), "tcp4", "192.0.2.1") // TEST-NET-1: never local
	if err == nil || errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "port 50000") {
		t.Errorf("listen on a foreign address: %v, want the first port's own error", err)
	}
}
