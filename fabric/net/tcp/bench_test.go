package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric/net/nettest"
)

var benchSizes = []int{4 << 20, 64 << 20}

// BenchmarkTCPProvider measures one-way throughput between two providers
// on loopback (4 messages in flight), for 1, 2 and 4 sockets.
func BenchmarkTCPProvider(b *testing.B) {
	for _, socks := range []int{1, 2, 4} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("sockets=%d/%dMiB", socks, size>>20), func(b *testing.B) {
				p1, err1 := New(Options{IfName: "lo", Sockets: socks})
				p2, err2 := New(Options{IfName: "lo", Sockets: socks})
				if err1 != nil || err2 != nil {
					b.Fatal(err1, err2)
				}
				defer p1.Close()
				defer p2.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				b.SetBytes(int64(size))
				bps, err := nettest.Throughput(ctx, p1, p2, size, b.N)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(bps/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkRawSocket is the ceiling: one plain Go TCP socket pair on
// loopback, the writer writing size-byte buffers and the reader reading
// them into one buffer.
func BenchmarkRawSocket(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			acc := make(chan net.Conn, 1)
			go func() { c, _ := ln.Accept(); acc <- c }()
			w, err := net.Dial("tcp4", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			r := <-acc
			defer r.Close()
			msg := nettest.Pattern(1, size)
			done := make(chan error, 1)
			go func() {
				buf := make([]byte, size)
				for range b.N {
					if _, err := io.ReadFull(r, buf); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			b.SetBytes(int64(size))
			start := time.Now()
			for range b.N {
				if _, err := w.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(size)*float64(b.N)/time.Since(start).Seconds()/1e9, "GB/s")
		})
	}
}
