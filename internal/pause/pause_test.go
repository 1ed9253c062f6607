package pause

import (
	"testing"
	"time"
)

// BenchmarkSleep50us: ns/op near 50,000 on an idle machine; time.Sleep's
// would be near 1,000,000 when nothing else runs (BenchmarkTimeSleep50us).
func BenchmarkSleep50us(b *testing.B) {
	for b.Loop() {
		Sleep(50 * time.Microsecond)
	}
}

func BenchmarkTimeSleep50us(b *testing.B) {
	for b.Loop() {
		time.Sleep(50 * time.Microsecond)
	}
}
