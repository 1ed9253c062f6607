package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric/net/nettest"
)

// TestRate: a connection reports no rate before it has carried enough,
// then a positive one (loopback: far above 10 MB/s) that stays put
// between windows.
func TestRate(t *testing.T) {
	pa, pb := open(Options{IfName: "lo"})(t), open(Options{IfName: "lo"})(t)
	defer pa.Close()
	defer pb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, r, err := nettest.Connect(ctx, pa, pb)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer r.Close()
	sc := s.(*sendConn)
	if rate, ok := sc.Rate(); ok {
		t.Fatalf("rate %v before any traffic", rate)
	}
	buf := make([]byte, 4<<20)
	var rate float64
	ok := false
	for i := 0; i < 200 && !ok; i++ {
		q := nettest.Recv(t, r, [][]byte{make([]byte, len(buf))}, []uint64{1})
		nettest.AwaitOK(t, nettest.Send(t, s, buf, 1), "send")
		nettest.AwaitOK(t, q, "recv")
		time.Sleep(rateEvery)
		rate, ok = sc.Rate()
	}
	if !ok || rate < 10e6 {
		t.Fatalf("rate %.3g B/s (ok %v) after sending; want > 10 MB/s", rate, ok)
	}
	t.Logf("loopback rate %.2f GB/s", rate/1e9)
	if again, ok := sc.Rate(); !ok || again != rate {
		t.Fatalf("rate moved from %v to %v (ok %v) with no traffic", rate, again, ok)
	}
}
