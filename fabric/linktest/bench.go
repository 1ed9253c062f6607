package linktest

import (
	"context"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
)

// BenchOneWay measures one-way bandwidth from a to b with messages of size
// bytes, keeping up to window messages in flight (b.SetBytes makes go test
// report MB/s). The received data is checked once, on the first message.
func BenchOneWay(b *testing.B, from, to fabric.Link, size, window int) {
	msg := Payload(1, size)
	bufs := make([][]byte, window)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	type pair struct{ s, r fabric.Request }
	inflight := make([]pair, 0, window)
	wait := func(p pair) {
		if err := fabric.WaitAll(context.Background(), p.r, p.s); err != nil {
			b.Fatal(err)
		}
	}
	// Warm up and check the data path once.
	r := to.Recv(TagOf(0), bufs[0])
	wait(pair{from.Send(TagOf(0), msg), r})
	checkData(b, "first message", bufs[0], msg)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(inflight) == window {
			wait(inflight[0])
			inflight = inflight[1:]
		}
		r := to.Recv(TagOf(1), bufs[i%window])
		inflight = append(inflight, pair{from.Send(TagOf(1), msg), r})
	}
	for _, p := range inflight {
		wait(p)
	}
}

// BenchPingPong measures the round trip of a size-byte message from a to b
// and back; it reports half of it as "us/oneway".
func BenchPingPong(b *testing.B, a, c fabric.Link, size int) {
	ping, pong := Payload(2, size), make([]byte, size)
	back := make([]byte, size)
	errc := make(chan error, 1)
	n := b.N + 1
	go func() {
		for i := 0; i < n; i++ {
			if err := c.Recv(TagOf(i), pong).Wait(context.Background()); err != nil {
				errc <- err
				return
			}
			if err := c.Send(TagOf(i), pong).Wait(context.Background()); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	var start time.Time
	for i := 0; i < n; i++ {
		if i == 1 {
			b.ResetTimer()
			start = time.Now()
		}
		r := a.Recv(TagOf(i), back)
		if err := fabric.WaitAll(context.Background(), a.Send(TagOf(i), ping), r); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	checkData(b, "echo", back, ping)
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N)/2e3, "us/oneway")
}
