package linktest

import (
	"context"
	"fmt"
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

// BenchSuite runs the benchmarks every link kind shares, named
// OneWay/<mode>/<size>, PingPong/<n>B and TwoProcess/<mode>/<size>
// ("<mode>/" left out when mode is ""): BenchOneWay at 4 KiB, 1 MiB and
// 64 MiB (64, 8 and 2 messages in flight) on the links pair makes,
// BenchPingPong of 8 B and 4 KiB on pair's links of mode "", and the same
// sizes streamed to a helper process that helper connects, after an echo
// that warms up and checks the path.
func BenchSuite(b *testing.B, modes []string, pair func(b *testing.B, mode string) (fabric.Link, fabric.Link), helper func(b *testing.B, mode string) (*Proc, fabric.Link)) {
	sizes := []struct {
		name         string
		size, window int
	}{{"4KiB", 4 << 10, 64}, {"1MiB", 1 << 20, 8}, {"64MiB", 64 << 20, 2}}
	named := func(kind, mode, size string) string {
		if mode == "" {
			return kind + "/" + size
		}
		return kind + "/" + mode + "/" + size
	}
	for _, m := range modes {
		for _, tc := range sizes {
			b.Run(named("OneWay", m, tc.name), func(b *testing.B) {
				a, c := pair(b, m)
				defer a.Close()
				defer c.Close()
				BenchOneWay(b, a, c, tc.size, tc.window)
			})
		}
	}
	for _, size := range []int{8, 4 << 10} {
		b.Run(fmt.Sprintf("PingPong/%dB", size), func(b *testing.B) {
			a, c := pair(b, "")
			defer a.Close()
			defer c.Close()
			BenchPingPong(b, a, c, size)
		})
	}
	for _, m := range modes {
		for _, tc := range sizes {
			b.Run(named("TwoProcess", m, tc.name), func(b *testing.B) {
				p, l := helper(b, m)
				p.Echo(b, l, tc.size) // warm up and check the path
				b.SetBytes(int64(tc.size))
				b.ResetTimer()
				p.Sink(b, l, tc.size, b.N, tc.window)
			})
		}
	}
}
