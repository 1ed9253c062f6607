package capi

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
)

// TestHoldStoreWaitsForTheRead: the process serving the store, its call 5
// timed out with rank 1 behind, holds its error until rank 2 (which called
// 5 too) has asked about the call, every member has answered, and rank 2
// has said it read the answers: answers in the store are lost with the
// process if it exits before the asker's reads are served (CI: rank 2's
// error then named nobody). Without the read it waits serveGrace.
func TestHoldStoreWaitsForTheRead(t *testing.T) {
	for _, read := range []bool{true, false} {
		stores := bootstrap.NewInProc(3)
		c := &Comm{rank: 0, nranks: 3, made: made{fam: &family{srv: &served{}}}}
		c.prog.store, c.prog.key = stores[0], "w"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Rank 2's question (request 1), and both others' answers.
		req, _ := json.Marshal(stallRequest{Rank: 2, Call: "AllReduce #5", Seq: 5})
		if err := stores[2].Put(ctx, "w/stall/1", req); err != nil {
			t.Fatal(err)
		}
		c.prog.asks.note(1, stallRequest{Rank: 2, Call: "AllReduce #5", Seq: 5})
		for _, a := range []int{0, 1} {
			if err := stores[a].Put(ctx, answerKey("w", 1, a), []byte(`{"calls":5}`)); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		held := make(chan struct{})
		go func() { c.holdStore(5, []int64{-1, 4, 5}); close(held) }()
		select {
		case <-held:
			t.Fatalf("read=%v: holdStore returned after %v, before rank 2 read the answers", read, time.Since(start))
		case <-time.After(300 * time.Millisecond):
		}
		if read {
			if err := stores[2].Put(ctx, readKey("w", 1), []byte{1}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-held:
			case <-time.After(time.Second):
				t.Fatal("holdStore did not return within 1 s of rank 2's read")
			}
			continue
		}
		select {
		case <-held:
			if d := time.Since(start); d < serveGrace-100*time.Millisecond {
				t.Fatalf("without the read holdStore returned after %v, want about %v", d, serveGrace)
			}
		case <-time.After(serveGrace + 2*time.Second):
			t.Fatalf("holdStore did not return within %v without the read", serveGrace+2*time.Second)
		}
	}
}
