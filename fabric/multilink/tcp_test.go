package multilink_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/multilink"
	"github.com/flexlink/flexlink/fabric/net/netlink"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/settings"
)

// tcpPair connects ranks 0 and 1 of a fresh job over loopback tcp.
func tcpPair(t *testing.T, sockets string) (a, b fabric.Link) {
	t.Helper()
	job := linktest.NewJob("mltcp")
	ep := func(rank int) fabric.Endpoint {
		e, err := netlink.NewTCPEndpoint(fabric.EndpointConfig{
			Rank: rank, Size: 2, JobID: job, Secret: []byte("secret " + job),
			Host: fmt.Sprintf("host%d", rank), Comm: "world",
			Env: settings.Map(map[string]string{"FLEXLINK_SOCKET_IFNAME": "lo", "FLEXLINK_SOCKETS_PER_PEER": sockets}),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	return linktest.ConnectPair(t, ep(0), ep(1))
}

// TestTCPLinkKilledMidTransfer: three real host tcp links (netlink over
// the tcp provider); one is killed at the receiver while messages are in
// flight on all three (what was on its sockets is lost). With
// acknowledgements, and without (NoAcks: netlink's sends complete on
// delivery, so a part whose send completed has arrived). Every byte must arrive
// exactly (the acknowledgements tell the sender which parts to send again)
// and both sides must report the failure.
func TestTCPLinkKilledMidTransfer(t *testing.T) {
	for _, tc := range []struct {
		sockets string
		noAcks  bool
	}{{"1", false}, {"2", false}, {"2", true}} {
		sockets := tc.sockets
		t.Run(fmt.Sprintf("sockets=%s/noacks=%v", sockets, tc.noAcks), func(t *testing.T) {
			for round := 0; round < 4; round++ {
				var la, lb []fabric.Link
				for range 3 {
					a, b := tcpPair(t, sockets)
					la, lb = append(la, a), append(lb, b)
				}
				log := newFailureLog()
				if tc.noAcks && !multilink.OnDelivery(la) {
					t.Fatal("netlink links do not say they complete on delivery")
				}
				ca := multilink.New(1, la, nil, multilink.Options{OnLinkFailure: log.report("a"), NoAcks: tc.noAcks})
				cb := multilink.New(0, lb, nil, multilink.Options{OnLinkFailure: log.report("b"), NoAcks: tc.noAcks})
				const n, size, window, kill = 12, 4 << 20, 4, 2
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				src := linktest.Payload(uint64(size), size+7*n)
				got := make([][]byte, n)
				sends, recvs := make([]fabric.Request, n), make([]fabric.Request, n)
				post := func(i int) {
					got[i] = make([]byte, size)
					recvs[i] = cb.Recv(linktest.TagOf(i), got[i])
					sends[i] = ca.Send(linktest.TagOf(i), src[i*7:][:size])
				}
				for i := range window {
					post(i)
				}
				for i := range n {
					if i == kill {
						lb[1].Abort(fmt.Errorf("test kills tcp link 1 at the receiver: %w", errs.ErrPeerLost))
					}
					if err := fabric.WaitAll(ctx, recvs[i], sends[i]); err != nil {
						t.Fatalf("round %d, message %d: %v", round, i, err)
					}
					if !bytes.Equal(got[i], src[i*7:][:size]) {
						t.Fatalf("round %d, message %d: received bytes differ from the source buffer", round, i)
					}
					if i+window < n {
						post(i + window)
					}
				}
				cancel()
				if got := log.await(t, 2); len(got) != 2 {
					t.Fatalf("round %d: failures reported %v, want one per side", round, got)
				}
				ca.Close()
				cb.Close()
			}
		})
	}
}
