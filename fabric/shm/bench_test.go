package shm

import (
	"fmt"
	"testing"

	"github.com/flexlink/flexlink/fabric/linktest"
)

var benchSizes = []struct {
	name         string
	size, window int
}{{"4KiB", 4 << 10, 64}, {"1MiB", 1 << 20, 8}, {"64MiB", 64 << 20, 2}}

// BenchmarkShm measures links between two goroutines of this process
// (OneWay, PingPong) and between this process and a helper process
// (TwoProcess).
func BenchmarkShm(b *testing.B) {
	// The data paths compared: single copy forced on from 64 KiB, and off
	// (every byte through the ring, as before single copy existed).
	benchModes := []struct{ name, cma string }{{"cma=on", "65536"}, {"cma=off", "0"}}
	for _, m := range benchModes {
		for _, tc := range benchSizes {
			b.Run("OneWay/"+m.name+"/"+tc.name, func(b *testing.B) {
				a, c := newPair(b, map[string]string{"FLEXLINK_SHM_CMA_BYTES": m.cma})
				defer a.Close()
				defer c.Close()
				linktest.BenchOneWay(b, a, c, tc.size, tc.window)
			})
		}
	}
	for _, size := range []int{8, 4 << 10} {
		b.Run(fmt.Sprintf("PingPong/%dB", size), func(b *testing.B) {
			a, c := newPair(b, nil)
			defer a.Close()
			defer c.Close()
			linktest.BenchPingPong(b, a, c, size)
		})
	}
	for _, m := range benchModes {
		for _, tc := range benchSizes {
			b.Run("TwoProcess/"+m.name+"/"+tc.name, func(b *testing.B) {
				p, l := connectHelper(b, newJob(), m.cma)
				p.Echo(b, l, tc.size) // warm up and check the path
				b.SetBytes(int64(tc.size))
				b.ResetTimer()
				p.Sink(b, l, tc.size, b.N, tc.window)
			})
		}
	}
	b.Run("TwoProcess/PingPong/8B", func(b *testing.B) {
		p, l := connectHelper(b, newJob(), "")
		p.Echo(b, l, 8)
		b.ResetTimer()
		oneway := p.PingPong(b, l, 8, b.N)
		b.ReportMetric(float64(oneway.Nanoseconds())/1e3, "us/oneway")
	})
}
