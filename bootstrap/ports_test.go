package bootstrap

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/ports"
	"github.com/flexlink/flexlink/internal/testenv"
)

// TestServerPortRange: servers given FLEXLINK_PORT_RANGE's range listen
// on its ports in order (two servers, two jobs on one host), ranks join
// them there, and a server finding every port taken fails naming the
// variable and the range. An address with a port of its own ignores the
// range.
func TestServerPortRange(t *testing.T) {
	r := ports.Range{First: 31020, Last: 31022}
	var got []int
	var err error
	for i := 0; i <= r.Size(); i++ {
		var srv *Server
		srv, err = NewServer(ServerConfig{Addr: "127.0.0.1:0", Ports: r, Size: 2, Secret: testSecret, JobID: testJob})
		if err != nil {
			break
		}
		defer srv.Close()
		_, p, _ := net.SplitHostPort(srv.Addr())
		port, _ := strconv.Atoi(p)
		got = append(got, port)
		if i == 0 { // ranks join it there, and their store works
			stores := dialAll(t, srv.Addr(), 2)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := stores[0].Put(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			if v, err := stores[1].Get(ctx, "k"); err != nil || string(v) != "v" {
				t.Fatalf("Get through a server in the range: %q, %v", v, err)
			}
			cancel()
			for _, s := range stores {
				s.Close()
			}
		}
	}
	testenv.PortsInRange(t, "servers", got, r, err)
	own, err := NewServer(ServerConfig{Addr: "127.0.0.1:" + strconv.Itoa(31023), Ports: r, Size: 1, Secret: testSecret, JobID: testJob})
	if err == nil {
		defer own.Close()
		if !strings.HasSuffix(own.Addr(), ":31023") {
			t.Errorf("server asked for port 31023 listens on %s", own.Addr())
		}
	}
}
