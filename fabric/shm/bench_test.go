package shm

import (
	"testing"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/linktest"
)

// BenchmarkShm measures links between two goroutines of this process
// (OneWay, PingPong) and between this process and a helper process
// (TwoProcess).
func BenchmarkShm(b *testing.B) {
	// The data paths compared: single copy forced on from 64 KiB, and off
	// (every byte through the ring, as before single copy existed).
	cma := map[string]string{"cma=on": "65536", "cma=off": "0"}
	linktest.BenchSuite(b, []string{"cma=on", "cma=off"}, func(b *testing.B, mode string) (fabric.Link, fabric.Link) {
		if mode == "" {
			return newPair(b, nil)
		}
		return newPair(b, map[string]string{"FLEXLINK_SHM_CMA_BYTES": cma[mode]})
	}, func(b *testing.B, mode string) (*linktest.Proc, fabric.Link) {
		return connectHelper(b, newJob(), cma[mode])
	})
	b.Run("TwoProcess/PingPong/8B", func(b *testing.B) {
		p, l := connectHelper(b, newJob(), "")
		p.Echo(b, l, 8)
		b.ResetTimer()
		oneway := p.PingPong(b, l, 8, b.N)
		b.ReportMetric(float64(oneway.Nanoseconds())/1e3, "us/oneway")
	})
}
