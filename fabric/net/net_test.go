package net_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/nettest"
	"github.com/flexlink/flexlink/fabric/net/tcp"
	"github.com/flexlink/flexlink/internal/errs"
)

func TestMaxTag(t *testing.T) {
	for _, c := range []struct {
		bits int
		want uint64
	}{{0, 0}, {1, 1}, {20, 0xfffff}, {63, 1<<63 - 1}, {64, ^uint64(0)}, {70, ^uint64(0)}} {
		if got := net.MaxTag(c.bits); got != c.want {
			t.Errorf("MaxTag(%d) = %#x, want %#x", c.bits, got, c.want)
		}
	}
}

// TestCheckTags: a caller's largest tag against providers' declared
// widths; a tag that does not fit fails with ErrNotSupported, naming the
// caller, the bits it needs and the provider's.
func TestCheckTags(t *testing.T) {
	p, err := tcp.New(tcp.Options{IfName: "lo", Sockets: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.TagBits() != 64 {
		t.Fatalf("tcp declares %d bits of tag, want 64 (its frame header carries a uint64)", p.TagBits())
	}
	for _, c := range []struct {
		name string
		bits int
		max  uint64
		want string // "" fits; else a part of the error
	}{
		{"tcp any", 64, ^uint64(0), ""},
		{"ucx width, widest tag", 20, 1<<20 - 1, ""},
		{"ucx width, one over", 20, 1 << 20, "needs message tags up to 0x100000 (21 bits); the tcp provider carries 20 bits of tag"},
		{"old net part tags over ucx", 20, 0x6e6574_7072_0003, "(55 bits)"},
		{"tiny provider, small tags", 3, 4, ""},
		{"tiny provider", 2, 4, "needs message tags up to 0x4 (3 bits)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := net.CheckTags(nettest.Narrow(p, c.bits), c.max, "the caller (FLEXLINK_X)")
			if c.want == "" {
				if err != nil {
					t.Fatalf("%v", err)
				}
				return
			}
			if !errors.Is(err, errs.ErrNotSupported) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "the caller (FLEXLINK_X)") {
				t.Fatalf("error %v; want ErrNotSupported naming the caller and %q", err, c.want)
			}
		})
	}
}
