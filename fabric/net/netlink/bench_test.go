package netlink_test

import (
	"fmt"
	"testing"

	"github.com/flexlink/flexlink/fabric/linktest"
)

var benchSizes = []struct {
	name         string
	size, window int
}{{"4KiB", 4 << 10, 64}, {"1MiB", 1 << 20, 8}, {"64MiB", 64 << 20, 2}}

// BenchmarkTCP measures host tcp links (NewTCPEndpoint) over loopback
// between two goroutines of this process (OneWay, PingPong) and between
// this process and a helper process (TwoProcess).
func BenchmarkTCP(b *testing.B) {
	for _, tc := range benchSizes {
		b.Run("OneWay/"+tc.name, func(b *testing.B) {
			a, c := tcpPair(b, nil)
			defer a.Close()
			defer c.Close()
			linktest.BenchOneWay(b, a, c, tc.size, tc.window)
		})
	}
	for _, size := range []int{8, 4 << 10} {
		b.Run(fmt.Sprintf("PingPong/%dB", size), func(b *testing.B) {
			a, c := tcpPair(b, nil)
			defer a.Close()
			defer c.Close()
			linktest.BenchPingPong(b, a, c, size)
		})
	}
	for _, tc := range benchSizes {
		b.Run("TwoProcess/"+tc.name, func(b *testing.B) {
			job := newJob()
			p, l := linktest.ConnectHelper(b, tcpEndpoint(b, config(job, 0, nil)), "TestHelperProcess", "tcp", "LINKTEST_JOB="+job)
			p.Echo(b, l, tc.size) // warm up and check the path
			b.SetBytes(int64(tc.size))
			b.ResetTimer()
			p.Sink(b, l, tc.size, b.N, tc.window)
		})
	}
}
